"""User memory travels with every export format that carries a user's data.

A store's (or a user's) export in ``json``, ``jsonl`` and a folder of files per session
carries the users' facts with their history, their sources (re-pointed at the imported
messages) and what they superseded; ``text`` lists them. Each is exported, imported into a
fresh store and compared fact by fact. One-session exports carry a session, not a user, and
no facts (docs/user-memory.md says what to use).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from harombe_core import Message
from harombe_core.errors import ImportFormatError
from harombe_core.export import export_store, export_to_directory, import_file
from harombe_core.manager import MemoryManager


def _manager(path: Path) -> MemoryManager:
    return MemoryManager(str(path), embedding=None, token_counter="approximate")


def _history(mm: MemoryManager) -> None:
    """Ann: Lisbon, then Berlin (superseding it), a task done, a fact she added; Bob: one
    fact of his own; an unrelated session first, so copies must re-point message ids."""
    mm.save_message("pad", Message(role="user", content="shifts the message ids"))
    for sid, user, day, text in [
        ("s1", "ann", 1, "I live in Lisbon. Remind me to book the flights."),
        ("s2", "ann", 9, "I moved to Berlin. I booked the flights."),
        ("b1", "bob", 3, "I work as a nurse."),
    ]:
        at = datetime(2024, 1, day, 12, tzinfo=UTC)
        mm.save_messages(sid, [Message(role="user", content=text, created_at=at)], user_id=user)
        mm.end_session(sid)
    mm.add_fact("ann", "Has a dog named Rex")


def _facts(mm: MemoryManager, user: str) -> list[tuple[Any, ...]]:
    """Every fact of ``user`` as what must survive a copy: text, kind, status, times, origin,
    the text of what it superseded and of the messages it came from."""
    facts = mm.get_facts(user, include_history=True)
    texts = {f.id: f.text for f in facts}
    said = {m.id: m.content for s in mm.list_sessions(limit=None) for m in mm.get_messages(s.id)}
    return [
        (
            f.text,
            f.kind,
            f.status,
            f.valid_from,
            f.valid_to,
            f.origin,
            texts.get(f.supersedes) if f.supersedes else None,
            [said[m] for m in f.message_ids],
        )
        for f in facts
    ]


@pytest.fixture
def source(tmp_path: Path) -> Path:
    path = tmp_path / "source.db"
    with _manager(path) as mm:
        _history(mm)
    return path


def _state(mm: MemoryManager) -> dict[str, Any]:
    return {
        s: (mm.get_session_state(s).outcome, mm.get_session_state(s).important)
        for s in ("s1", "s2", "b1")
    }


@pytest.mark.parametrize("fmt", ["json", "jsonl"])
def test_store_export_round_trips_facts(source: Path, tmp_path: Path, fmt: str) -> None:
    with _manager(source) as mm:
        mm.set_session_state("s2", important=True)
        want = {u: _facts(mm, u) for u in ("ann", "bob")}
        state = _state(mm)
        text = export_store(mm, fmt)
    assert [len(want["ann"]), len(want["bob"])] == [4, 1]
    assert state["s2"] == ("resolved", True)
    file = tmp_path / f"store.{fmt}"
    file.write_text(text)
    with _manager(tmp_path / "copy.db") as mm:
        assert import_file(mm, file).facts == 5
        assert {u: _facts(mm, u) for u in ("ann", "bob")} == want
        assert _state(mm) == state
        # the copy knows its sessions were extracted: nothing is extracted twice
        assert [mm.extract_facts(s) for s in ("s1", "s2", "b1", "pad")] == [0, 0, 0, 0]
        assert {u: _facts(mm, u) for u in ("ann", "bob")} == want


@pytest.mark.parametrize("fmt", ["json", "jsonl"])
def test_a_users_export_carries_only_their_facts(source: Path, tmp_path: Path, fmt: str) -> None:
    with _manager(source) as mm:
        want = _facts(mm, "ann")
        text = export_store(mm, fmt, user_id="ann")
    file = tmp_path / f"ann.{fmt}"
    file.write_text(text)
    with _manager(tmp_path / "copy.db") as mm:
        assert import_file(mm, file, user_id="carol").facts == 4
        assert _facts(mm, "carol") == want
        assert mm.get_facts("ann", include_history=True) == []


def test_jsonl_lines_stay_fine_tuning_data_and_carry_facts_by_session(source: Path) -> None:
    with _manager(source) as mm:
        lines = [json.loads(line) for line in export_store(mm, "jsonl").splitlines()]
    assert all(line["messages"] and set(line) == {"messages", "harombe"} for line in lines)
    carried = {
        line["harombe"]["session"]["session_id"]: [f["text"] for f in line["harombe"]["facts"]]
        for line in lines
        if "facts" in line["harombe"]
    }
    # a fact rides with the newest session it came from; one added by hand with its user's
    # newest session
    assert carried == {
        "s1": ["Lives in Lisbon", "Book the flights"],
        "b1": ["Works as a nurse"],
        "s2": ["Moved to Berlin", "Has a dog named Rex"],
    }


@pytest.mark.parametrize("fmt", ["json", "jsonl"])
def test_facts_without_any_session_are_exported_and_imported(tmp_path: Path, fmt: str) -> None:
    with _manager(tmp_path / "a.db") as mm:
        mm.add_fact("ann", "Prefers window seats", kind="preference")
        mm.add_fact("ann", "Renew the passport", kind="task")
        want = _facts(mm, "ann")
        text = export_store(mm, fmt, user_id="ann")
    if fmt == "jsonl":
        (line,) = text.splitlines()
        assert set(json.loads(line)) == {"harombe"}  # the one line without "messages"
    file = tmp_path / f"ann.{fmt}"
    file.write_text(text)
    with _manager(tmp_path / "b.db") as mm:
        result = import_file(mm, file)
        assert (result.session_ids, result.facts) == ([], 2)
        assert _facts(mm, "ann") == want
        assert [t.text for t in mm.get_open_tasks("ann")] == ["Renew the passport"]


@pytest.mark.parametrize("fmt", ["json", "jsonl"])
def test_a_folder_of_session_files_carries_the_facts(
    source: Path, tmp_path: Path, fmt: str
) -> None:
    with _manager(source) as mm:
        want = {u: sorted(_facts(mm, u), key=str) for u in ("ann", "bob")}
        (tmp_path / "out").mkdir()
        files = export_to_directory(mm, tmp_path / "out", fmt)
    assert sorted(f.name for f in files) == sorted(f"{s}.{fmt}" for s in ("pad", "s1", "s2", "b1"))
    with _manager(tmp_path / "copy.db") as mm:
        assert sum(import_file(mm, f).facts for f in files) == 5
        got = {u: sorted(_facts(mm, u), key=str) for u in ("ann", "bob")}
    # file by file, every fact keeps its text, times and sources; only the link from Berlin
    # to the Lisbon it superseded, which rode in another file, is not restored
    unlinked = [(*f[:6], None, *f[7:]) for f in want["ann"]]
    assert got == {"ann": sorted(unlinked, key=str), "bob": want["bob"]}


def test_text_lists_the_facts(source: Path) -> None:
    with _manager(source) as mm:
        text = export_store(mm, "text")
    section = text[text.index("User memory") :].splitlines()
    assert section[1:] == [
        "- [ann] Lives in Lisbon, from 2024-01-01 to 2024-01-09 (from s1#2)",
        "- [ann] Book the flights (task, done), from 2024-01-01 to 2024-01-09 (from s1#2)",
        "- [ann] Moved to Berlin, from 2024-01-09 (from s2#3)",
        section[4],  # added now: today's date
        "- [bob] Works as a nurse, from 2024-01-03 (from b1#4)",
    ]
    assert section[4].startswith("- [ann] Has a dog named Rex, from ")


@pytest.mark.parametrize(
    ("edit", "where"),
    [
        (lambda f: {**f, "kind": "rumour"}, "line 2"),
        (lambda f: "not a fact", "line 2"),
    ],
)
def test_a_bad_fact_in_jsonl_is_refused_and_nothing_is_written(
    source: Path, tmp_path: Path, edit: Any, where: str
) -> None:
    with _manager(source) as mm:
        lines = [json.loads(line) for line in export_store(mm, "jsonl").splitlines()]
    lines[1]["harombe"]["facts"][0] = edit(lines[1]["harombe"]["facts"][0])
    file = tmp_path / "bad.jsonl"
    file.write_text("".join(json.dumps(line) + "\n" for line in lines))
    with _manager(tmp_path / "copy.db") as mm:
        with pytest.raises(ImportFormatError, match="facts"):
            import_file(mm, file)
        assert mm.list_sessions() == []
    lines[1]["harombe"]["facts"] = "all of them"
    file.write_text("".join(json.dumps(line) + "\n" for line in lines))
    with _manager(tmp_path / "copy.db") as mm:
        with pytest.raises(ImportFormatError, match=f"{where}.*facts"):
            import_file(mm, file)
        assert mm.list_sessions() == []


def test_one_session_exports_carry_no_facts(source: Path) -> None:
    """A session is not a user: its export has no facts (export the user for them)."""
    with _manager(source) as mm:
        document = json.loads(export_store(mm, "json", session_id="s2"))
        line = json.loads(export_store(mm, "jsonl", session_id="s2"))
    assert "facts" not in document
    assert "facts" not in line["harombe"]
    assert document["metadata"]["state"] == {  # its own state travels with it
        "outcome": "resolved",
        "important": False,
        "facts_until_id": 3,
    }


def test_a_one_line_jsonl_export_keeps_its_facts(tmp_path: Path) -> None:
    """A store of one session exports one JSONL line, which reads as a JSON document."""
    with _manager(tmp_path / "a.db") as mm:
        mm.save_message("s1", Message(role="user", content="I live in Lisbon."), user_id="ann")
        mm.end_session("s1")
        mm.add_fact("ann", "Is vegan", subject="diet")
        want = _facts(mm, "ann")
        text = export_store(mm, "jsonl")
    assert len(text.splitlines()) == 1
    file = tmp_path / "one.jsonl"
    file.write_text(text)
    with _manager(tmp_path / "b.db") as mm:
        assert import_file(mm, file).facts == 2
        assert _facts(mm, "ann") == want
