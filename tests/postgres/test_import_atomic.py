"""An import through the Python API is one transaction on every backend: a failure part-way
leaves the store as it was, and the same import then runs to the end."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from harombe_core import export as ex
from harombe_core.errors import InvalidInputError, StorageFullError
from harombe_core.manager import MemoryManager
from harombe_core.migrate import session_checksum
from harombe_core.models import Message
from harombe_core.store import ops
from tests.postgres.lost_commit import lose_first_commit_answer


def _export(tmp_path: Path, sessions: int = 40) -> Path:
    with MemoryManager(":memory:", embedding=None) as source:
        for s in range(sessions):
            ids = source.save_messages(
                f"s{s}", [Message(role="user", content=f"{s}.{i}") for i in range(5)]
            )
            source.store.run(ops.set_parent(ids[2], ids[0]))
            source.store.run(ops.set_message_summary(ids[1], {"title": "t", "summary": str(s)}))
        return ex.write_text(tmp_path / "export.jsonl", ex.export_store(source, "jsonl"))


def _state(mm: MemoryManager) -> dict[str, tuple[int, str]]:
    return {
        s.id: session_checksum(mm.store, s) for s in mm.store.run(ops.list_sessions(limit=None))
    }


def test_a_store_failure_part_way_leaves_nothing_and_the_import_reruns(
    manager: MemoryManager, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _export(tmp_path)
    manager.save_message("mine", Message(role="user", content="already here"))
    before = _state(manager)
    store: Any = manager.store
    real = store.run
    calls: list[Any] = []

    def full_after_thirty(op: Any) -> Any:  # the 30th message summary written fails
        if op.body.__qualname__.startswith("set_message_summary."):
            calls.append(op)
            if len(calls) == 30:
                raise StorageFullError("the disk is full")
        return real(op)

    monkeypatch.setattr(store, "run", full_after_thirty)
    with pytest.raises(StorageFullError):
        ex.import_file(manager, path)
    assert _state(manager) == before
    monkeypatch.setattr(store, "run", real)
    result = ex.import_file(manager, path)
    assert (len(result.session_ids), result.messages) == (40, 200)
    after = _state(manager)
    assert len(after) == 41
    assert manager.get_messages("s7")[2].parent_id == manager.get_messages("s7")[0].id
    # Imported messages wait for the background indexer like any saved message.
    assert manager.stats()["pending_embeddings"] == 201


def test_a_session_added_between_check_and_write_stops_the_import(
    manager: MemoryManager, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _export(tmp_path, sessions=5)
    real = manager.atomic

    def another_writer_first(fn: Any) -> Any:
        manager.save_message("s3", Message(role="user", content="written meanwhile"))
        return real(fn)

    monkeypatch.setattr(manager, "atomic", another_writer_first)
    with pytest.raises(InvalidInputError, match="'s3' is already in the store"):
        ex.import_file(manager, path)
    assert [s.id for s in manager.list_sessions(limit=None)] == ["s3"]
    assert [m.content for m in manager.get_messages("s3")] == ["written meanwhile"]


def test_import_records_is_one_transaction_too(manager: MemoryManager) -> None:
    records = [
        ex.SessionRecord(messages=[Message(role="user", content="fine")], session_id="a"),
        ex.SessionRecord(messages=[Message(role="user", content="fine")], session_id="b"),
    ]
    manager.save_message("b", Message(role="user", content="mine"))
    with pytest.raises(InvalidInputError, match="'b' is already in the store"):
        ex.import_records(manager, iter(records))
    assert not manager.session_exists("a")
    result = ex.import_records(manager, iter(records), on_conflict="new_id")
    assert result.session_ids[0] == "a"
    assert result.session_ids[1] != "b"
    assert [m.content for m in manager.get_messages("b")] == ["mine"]


def test_an_import_whose_commit_answer_is_lost_is_applied_once(
    pg_url: str, tmp_path: Path
) -> None:
    """The import's transaction commits, the answer is lost, the retry finds it done."""
    with MemoryManager(":memory:", embedding=None) as source:
        for s in range(5):
            source.save_messages(
                f"s{s}", [Message(role="user", content=f"{s}.{i}") for i in range(4)]
            )
        path = ex.write_text(tmp_path / "five.json", ex.export_store(source, "json"))
    with MemoryManager(pg_url, embedding=None) as mm:
        with lose_first_commit_answer(mm.store) as lost:
            result = ex.import_file(mm, path)
        assert lost == [True]
        assert (sorted(result.session_ids), result.messages) == ([f"s{s}" for s in range(5)], 20)
        assert mm.store.run(ops.count_messages()) == 20
        assert sorted(s.id for s in mm.list_sessions(limit=None)) == sorted(result.session_ids)
