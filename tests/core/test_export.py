"""Export and import: formats, foreign files, bad files, conflicts, where files are written."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from harombe_core import export as ex
from harombe_core.errors import (
    ExportPathError,
    ImportFormatError,
    InvalidInputError,
    SessionNotFoundError,
    SessionOwnershipError,
)
from harombe_core.manager import MemoryManager
from harombe_core.models import Message
from harombe_core.store import ops

T0 = datetime(2024, 1, 15, 10, 30, tzinfo=UTC)
OPENAI_MESSAGE_KEYS = {"role", "content", "name", "tool_calls", "tool_call_id"}


@pytest.fixture
def mm() -> Iterator[MemoryManager]:
    manager = MemoryManager(":memory:", embedding=None)
    yield manager
    manager.close()


def fill(manager: MemoryManager, sid: str = "trip") -> list[int]:
    manager.create_session(
        system_prompt="You plan trips.", metadata={"topic": "travel"}, user_id="sam", session_id=sid
    )
    ids = manager.save_messages(
        sid,
        [
            Message(role="user", content="Weather in Lisbon?", name="Sam", created_at=T0),
            Message(
                role="assistant",
                content="",
                tool_calls=[{"name": "weather", "args": {"city": "Lisbon"}, "id": "c1"}],
                created_at=T0,
                metadata={"model": "m-1"},
            ),
            Message(role="tool", content="21°C, sunny", tool_call_id="c1", created_at=T0),
            Message(role="assistant", content="21°C and sunny.\nPack light.", created_at=T0),
        ],
    )
    manager.store.run(ops.set_parent(ids[1], ids[0]))
    manager.store.run(
        ops.set_message_summary(ids[0], {"title": "Weather", "summary": "Asks about it."})
    )
    return ids


def test_json_export_is_the_unified_chat_memory_document(mm: MemoryManager) -> None:
    ids = fill(mm)
    doc = json.loads(ex.export_store(mm, "json", session_id="trip"))
    assert doc["version"] == ex.FORMAT_VERSION
    meta = doc["metadata"]
    assert meta["session_id"] == "trip"
    assert meta["user_id"] == "sam"
    assert meta["system_prompt"] == "You plan trips."
    assert meta["session_metadata"] == {"topic": "travel"}
    assert meta["mode"] == "graph"
    assert meta["total_messages"] == 4
    first = doc["nodes"][0]
    assert set(first) >= {
        "id",
        "role",
        "content",
        "name",
        "tool_calls",
        "tool_call_id",
        "metadata",
        "created_at",
        "timestamp",
        "parent_id",
        "summary",
    }
    assert first["id"] == ids[0]
    assert first["name"] == "Sam"
    assert first["created_at"] == T0.isoformat()
    assert first["summary"] == {"title": "Weather", "summary": "Asks about it."}
    assert doc["nodes"][1]["parent_id"] == ids[0]
    assert doc["edges"] == [{"from": ids[0], "to": ids[1]}]


def test_whole_store_json_is_a_bundle_oldest_session_first(mm: MemoryManager) -> None:
    mm.save_message("first", Message(role="user", content="one"))
    mm.save_message("second", Message(role="user", content="two"))
    doc = json.loads(ex.export_store(mm, "json"))
    assert doc["metadata"]["total_sessions"] == 2
    assert [s["metadata"]["session_id"] for s in doc["sessions"]] == ["first", "second"]


def test_jsonl_lines_are_valid_openai_fine_tuning_examples(mm: MemoryManager) -> None:
    fill(mm)
    mm.save_message("other", Message(role="user", content="second conversation"))
    lines = ex.export_store(mm, "jsonl").splitlines()
    assert len(lines) == 2
    example = json.loads(lines[0])
    assert set(example) == {"messages", "harombe"}
    messages = example["messages"]
    assert messages[0] == {"role": "system", "content": "You plan trips."}
    for message in messages:
        assert set(message) <= OPENAI_MESSAGE_KEYS
        assert isinstance(message["content"], str)
    call = messages[2]["tool_calls"][0]
    assert call == {
        "id": "c1",
        "type": "function",
        "function": {"name": "weather", "arguments": '{"city": "Lisbon"}'},
    }
    assert messages[3] == {"role": "tool", "content": "21°C, sunny", "tool_call_id": "c1"}
    assert json.loads(lines[1])["messages"] == [{"role": "user", "content": "second conversation"}]


def test_jsonl_round_trip_restores_shapes_the_openai_format_rewrites(mm: MemoryManager) -> None:
    fill(mm)
    text = ex.export_store(mm, "jsonl", session_id="trip")
    with MemoryManager(":memory:", embedding=None) as other:
        ex.import_records(other, ex.loads(text))
        back = ex.read_session(other, "trip")
    original = ex.read_session(mm, "trip")
    assert back.messages[1].tool_calls == [
        {"name": "weather", "args": {"city": "Lisbon"}, "id": "c1"}
    ]
    assert [m.to_dict() for m in back.messages] == [m.to_dict() for m in original.messages]
    assert back.system_prompt == "You plan trips."
    assert back.user_id == "sam"
    assert back.message_summaries == original.message_summaries


def test_text_transcript(mm: MemoryManager) -> None:
    fill(mm)
    text = ex.export_store(mm, "text", session_id="trip")
    assert text.startswith("Session trip (user sam, 4 messages")
    assert "System prompt: You plan trips." in text
    assert "[2024-01-15 10:30:00] user (Sam): Weather in Lisbon?" in text
    assert '-> tool call weather({"city": "Lisbon"}) [id c1]' in text
    assert "tool [call c1]: 21°C, sunny" in text
    assert "21°C and sunny.\n    Pack light." in text
    with pytest.raises(ImportFormatError, match="cannot be imported"):
        ex.loads(text, "text")


def test_foreign_openai_jsonl_imports_with_system_prompt_and_parts(
    mm: MemoryManager, tmp_path: Path
) -> None:
    lines = [
        {
            "messages": [
                {"role": "system", "content": "You are terse."},
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "Hello"},
                        {"type": "image_url", "image_url": {"url": "x"}},
                    ],
                },
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "a",
                            "type": "function",
                            "function": {"name": "f", "arguments": "{}"},
                        }
                    ],
                },
                {"role": "tool", "content": "ok", "tool_call_id": "a"},
                {"role": "assistant", "content": "Hi.", "weight": 1},
            ]
        },
        {"messages": [{"role": "user", "content": "second"}]},
    ]
    path = tmp_path / "train.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n", encoding="utf-8")
    result = ex.import_file(mm, path)
    assert len(result.session_ids) == 2
    assert result.messages == 5
    first = ex.read_session(mm, result.session_ids[0])
    assert first.system_prompt == "You are terse."
    assert [m.role for m in first.messages] == ["user", "assistant", "tool", "assistant"]
    assert first.messages[0].content == "Hello"
    assert first.messages[0].metadata["openai_content_parts"][1]["type"] == "image_url"
    assert first.messages[1].content == ""
    assert first.messages[1].tool_calls[0]["id"] == "a"
    # exported again, the conversation is the same fine-tuning example
    again = json.loads(ex.export_store(mm, "jsonl", session_id=result.session_ids[1]))
    assert again["messages"] == lines[1]["messages"]


def test_plain_unified_format_with_timestamps_and_edges_imports(mm: MemoryManager) -> None:
    doc = {
        "version": "1.0",
        "metadata": {"created_at": "2024-01-15T10:30:00Z", "mode": "graph", "total_messages": 3},
        "nodes": [
            {
                "id": 1,
                "role": "user",
                "content": "Let's talk about Python",
                "timestamp": "2024-01-15T10:30:00Z",
                "summary": {"title": "Py", "summary": "S"},
                "parent_id": None,
            },
            {
                "id": 2,
                "role": "assistant",
                "content": "Python is great",
                "timestamp": "2024-01-15T10:30:05Z",
            },
            {"id": 3, "role": "user", "content": "And Rust?", "timestamp": "2024-01-15T10:31:00Z"},
        ],
        "edges": [{"from": 1, "to": 2}, {"from": 2, "to": 3}],
    }
    result = ex.import_records(mm, ex.loads(json.dumps(doc)))
    back = ex.read_session(mm, result.session_ids[0])
    ids = [m.id for m in back.messages]
    assert [m.parent_id for m in back.messages] == [None, ids[0], ids[1]]
    assert back.messages[1].created_at == datetime(2024, 1, 15, 10, 30, 5, tzinfo=UTC)
    assert back.message_summaries == {ids[0]: {"title": "Py", "summary": "S"}}
    assert back.created_at == datetime(2024, 1, 15, 10, 30, tzinfo=UTC)


def test_import_assigns_new_ids_and_rewires_parents_into_a_busy_store(mm: MemoryManager) -> None:
    fill(mm)
    text = ex.export_store(mm, "json", session_id="trip")
    mm.save_messages("noise", [Message(role="user", content=str(i)) for i in range(5)])
    result = ex.import_records(mm, ex.loads(text), on_conflict="new_id")
    (new_sid,) = result.session_ids
    assert new_sid != "trip"
    copy = ex.read_session(mm, new_sid)
    assert copy.messages[1].parent_id == copy.messages[0].id
    assert copy.messages[0].id not in {m.id for m in ex.read_session(mm, "trip").messages}
    assert copy.message_summaries == {
        copy.messages[0].id: {"title": "Weather", "summary": "Asks about it."}
    }


@pytest.mark.parametrize(
    ("content", "match"),
    [
        ("this is not json at all", r"not a JSON or JSONL file \(Expecting value[^.]*\); harombe"),
        ("[1, 2, 3]", r"sessions\[0\]: expected a JSON object"),
        ('{"foo": 1}', "not a harombe export"),
        (
            '{"version": "2.0", "metadata": {}, "nodes": []}',
            "format version '2.0' is not supported",
        ),
        ('{"metadata": {}, "nodes": []}', 'no "version" key'),
        ('{"version": "1.0", "nodes": {"a": 1}}', '"nodes" must be a list'),
        (
            '{"version": "1.0", "nodes": [{"role": "user", "content": "a"}, {"role": "robot", '
            '"content": "b"}]}',
            r"nodes\[1\]: unknown role 'robot'",
        ),
        ('{"version": "1.0", "nodes": [{"role": "user", "content": 5}]}', "must be a str"),
        (
            '{"version": "1.0", "nodes": [{"role": "user", "content": "x", "created_at": "noon"}]}',
            "not an ISO 8601 time",
        ),
        (
            '{"version": "1.0", "nodes": [{"id": 1, "role": "user", "content": "x"}], '
            '"edges": [{"from": 7, "to": 1}]}',
            "names a node that is not in the file",
        ),
        (
            '{"messages": [{"role": "user", "content": "ok"}]}\n{"messages": "nope"}\n',
            'line 2: no "messages" list',
        ),
        (
            '{"messages": [{"role": "user", "content": "ok"}]}\n{"messages": [}\n',
            "line 2: not valid JSON",
        ),
    ],
)
def test_bad_files_are_refused_and_change_nothing(
    mm: MemoryManager, tmp_path: Path, content: str, match: str
) -> None:
    fill(mm)
    before = ex.export_store(mm, "jsonl")
    path = tmp_path / "bad.json"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(ImportFormatError, match=match):
        ex.import_file(mm, path)
    assert ex.export_store(mm, "jsonl") == before
    assert mm.stats()["sessions"] == 1


def test_binary_missing_and_folder_paths_are_import_format_errors(
    mm: MemoryManager, tmp_path: Path
) -> None:
    binary = tmp_path / "blob.json"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(ImportFormatError, match="not UTF-8 text"):
        ex.import_file(mm, binary)
    with pytest.raises(ImportFormatError, match="no file at"):
        ex.import_file(mm, tmp_path / "missing.json")
    with pytest.raises(ImportFormatError, match="is a folder"):
        ex.import_file(mm, tmp_path)


def test_a_bad_last_session_leaves_the_earlier_ones_unwritten(mm: MemoryManager) -> None:
    good = {"messages": [{"role": "user", "content": "fine"}]}
    bad = {"messages": [{"role": "user", "content": "bad\u0000byte"}]}
    text = json.dumps(good) + "\n" + json.dumps(bad) + "\n"
    with pytest.raises(ImportFormatError, match=r"line 2.*NUL byte"):
        ex.import_records(mm, ex.loads(text))
    assert mm.stats()["messages"] == 0
    assert mm.list_sessions() == []


def test_an_empty_file_is_an_empty_export(mm: MemoryManager) -> None:
    assert ex.export_store(mm, "jsonl") == ""
    assert ex.loads("") == []
    assert ex.loads("\n  \n") == []


def test_conflicting_session_ids(mm: MemoryManager) -> None:
    fill(mm)
    text = ex.export_store(mm, "json")
    with pytest.raises(InvalidInputError, match="'trip' is already in the store"):
        ex.import_records(mm, ex.loads(text))
    assert mm.stats()["sessions"] == 1
    skipped = ex.import_records(mm, ex.loads(text), on_conflict="skip")
    assert skipped.skipped == ["trip"]
    assert skipped.session_ids == []
    renamed = ex.import_records(mm, ex.loads(text), on_conflict="new_id")
    assert len(renamed.session_ids) == 1
    assert mm.stats()["sessions"] == 2
    with pytest.raises(ImportFormatError, match="appears twice"):
        ex.import_records(mm, ex.loads(ex.dumps(ex.loads(text) * 2, "json")))


def test_import_can_assign_an_owner(mm: MemoryManager) -> None:
    text = json.dumps({"messages": [{"role": "user", "content": "hi"}]})
    result = ex.import_records(mm, ex.loads(text), user_id="ann")
    assert mm.get_session(result.session_ids[0]).user_id == "ann"


def test_exporting_an_unknown_session_says_so(mm: MemoryManager) -> None:
    with pytest.raises(SessionNotFoundError, match="no session 'nope'"):
        ex.export_store(mm, "json", session_id="nope")
    with pytest.raises(InvalidInputError, match="unknown export format 'xml'"):
        ex.export_store(mm, "xml")


# paths ------------------------------------------------------------------------------------------


def test_output_is_written_where_asked(mm: MemoryManager, tmp_path: Path) -> None:
    target = ex.resolve_output_path(tmp_path / "out.json")
    ex.write_text(target, "{}")
    assert (tmp_path / "out.json").read_text() == "{}"
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]  # no temporary left behind


@pytest.mark.parametrize("name", ["../escape.json", "sub/../../escape.json", "/etc/passwd"])
def test_paths_outside_the_given_folder_are_refused(tmp_path: Path, name: str) -> None:
    folder = tmp_path / "exports"
    folder.mkdir()
    with pytest.raises(ExportPathError, match="outside the export folder"):
        ex.resolve_output_path(name, folder)
    assert not (tmp_path / "escape.json").exists()


def test_a_symlink_out_of_the_folder_is_refused(tmp_path: Path) -> None:
    folder, elsewhere = tmp_path / "exports", tmp_path / "elsewhere"
    folder.mkdir()
    elsewhere.mkdir()
    (folder / "link").symlink_to(elsewhere)
    with pytest.raises(ExportPathError, match="outside the export folder"):
        ex.resolve_output_path("link/x.json", folder)


def test_writing_replaces_a_symlink_instead_of_following_it(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    link = tmp_path / "out.json"
    link.symlink_to(victim)
    ex.write_text(link, "export")
    assert victim.read_text() == "keep me"
    assert not link.is_symlink()
    assert link.read_text() == "export"


def test_missing_folder_and_folder_targets_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ExportPathError, match="does not exist"):
        ex.resolve_output_path(tmp_path / "nope" / "x.json")
    with pytest.raises(ExportPathError, match="is a folder"):
        ex.resolve_output_path(tmp_path)


def test_per_session_files_never_follow_a_session_id_out_of_the_folder(
    mm: MemoryManager, tmp_path: Path
) -> None:
    for sid in ("../../evil", "a/b", ".hidden", "plain"):
        mm.save_message(sid, Message(role="user", content=f"in {sid}"))
    folder = tmp_path / "out"
    folder.mkdir()
    written = ex.export_to_directory(mm, folder, "jsonl")
    assert len(written) == 4
    assert all(p.parent == folder.resolve() for p in written)
    assert sorted(os.listdir(tmp_path)) == ["out"]
    names = {p.name for p in written}
    assert "plain.jsonl" in names
    assert all(not n.startswith(".") for n in names)
    for path in written:
        (record,) = ex.loads(path.read_text(encoding="utf-8"))
        assert record.messages[0].content == f"in {record.session_id}"


def test_safe_filename_keeps_distinct_ids_distinct() -> None:
    assert ex.safe_filename("a/b") != ex.safe_filename("a_b")
    assert ex.safe_filename("report-1.2", ".json") == "report-1.2.json"
    assert "/" not in ex.safe_filename("../../x")
    assert not ex.safe_filename("..").startswith(".")


async def test_async_twins(mm: MemoryManager, tmp_path: Path) -> None:
    fill(mm)
    text = await ex.aexport_store(mm, "jsonl")
    path = tmp_path / "a.jsonl"
    path.write_text(text, encoding="utf-8")
    with MemoryManager(":memory:", embedding=None) as other:
        result = await ex.aimport_file(other, path)
        assert result.session_ids == ["trip"]
        assert result.messages == 4


def test_pure_helpers_for_in_memory_conversations(tmp_path: Path) -> None:
    messages = [
        Message(role="user", content="root", id=1, created_at=T0),
        Message(role="assistant", content="answer", id=2, parent_id=1, created_at=T0),
        Message(role="user", content="branch", id=3, parent_id=2, created_at=T0),
    ]
    doc = ex.messages_to_dict(messages, summaries={1: {"title": "t", "summary": "s"}})
    assert doc["metadata"]["mode"] == "graph"
    assert doc["edges"] == [{"from": 1, "to": 2}, {"from": 2, "to": 3}]
    back = ex.messages_from_dict(json.loads(json.dumps(doc)))
    assert [m.to_dict() for m in back] == [m.to_dict() for m in messages]

    record = ex.SessionRecord(messages=messages, session_id="mem")
    path = ex.write_records([record], tmp_path / "mem.json")
    (loaded,) = ex.read_records(path)
    assert loaded.session_id == "mem"
    assert loaded.messages[2].parent_id == 2
    path.write_text(path.read_text().replace('"assistant"', '"bot"'))
    with pytest.raises(
        ImportFormatError, match=r"^mem\.json: file\.nodes\[1\]: unknown role 'bot'"
    ):
        ex.read_records(path)


def test_imported_history_keeps_its_dates_as_last_activity(tmp_path: Path) -> None:
    """A conversation from 2024 imported today sorts and prunes by when it happened."""
    source = MemoryManager(":memory:", embedding=None)
    source.store.run(ops.create_session("old", user_id="sam", created_at=T0))
    source.save_messages("old", [Message(role="user", content="Lisbon?", created_at=T0)])
    path = tmp_path / "old.json"
    path.write_text(ex.export_store(source, "json"), encoding="utf-8")
    source.close()
    with MemoryManager(":memory:", embedding=None) as mm:
        mm.save_message("live", Message(role="user", content="hello today"))
        ex.import_file(mm, path)
        imported = mm.get_session("old")
        assert imported.created_at == T0
        assert imported.updated_at == T0  # its newest message, not the moment of import
        assert [s.id for s in mm.list_sessions()] == ["live", "old"]  # newest activity first
        assert mm.prune_old_sessions(days=30) == 1
        assert [s.id for s in mm.list_sessions()] == ["live"]


def test_activity_moves_forward_only() -> None:
    """Old-dated messages added to an active session do not make it look older."""
    with MemoryManager(":memory:", embedding=None) as mm:
        mm.save_message("s", Message(role="user", content="now"))
        before = mm.get_session("s").updated_at
        mm.save_message("s", Message(role="user", content="backfilled", created_at=T0))
        assert mm.get_session("s").updated_at == before
        session = mm.get_session("s")
        assert session.created_at <= session.updated_at


def test_a_users_export_of_one_session_is_refused_for_another_users_session(
    mm: MemoryManager, tmp_path: Path
) -> None:
    """``user_id`` next to a session is the caller's user (a "download my conversation"
    button): it is checked, not ignored, so one user cannot export another's session."""
    fill(mm, "trip")  # sam's
    mm.create_session(user_id="kim", session_id="kims")
    with pytest.raises(SessionOwnershipError):
        ex.export_store(mm, "json", session_id="trip", user_id="kim")
    (tmp_path / "out").mkdir()
    with pytest.raises(SessionOwnershipError):
        ex.export_to_directory(mm, tmp_path / "out", "json", user_id="kim", session_ids=["trip"])
    assert not any((tmp_path / "out").iterdir())
    # the owner (or the application, naming no user) exports it as before
    assert "Lisbon" in ex.export_store(mm, "json", session_id="trip", user_id="sam")
    assert "Lisbon" in ex.export_store(mm, "json", session_id="trip")
    written = ex.export_to_directory(
        mm, tmp_path / "out", "json", user_id="sam", session_ids=["trip"]
    )
    assert len(written) == 1
