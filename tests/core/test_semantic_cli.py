"""`harombe search` and `harombe reindex` on a real database (bundled model, real ChromaDB)."""

from __future__ import annotations

from typer.testing import CliRunner

from harombe_core.cli import app
from harombe_core.manager import MemoryManager
from harombe_core.models import Message
from harombe_core.testing import FakeEmbedder

runner = CliRunner()


def _db(path: str, embedding: object = "default") -> None:
    with MemoryManager(path, embedding=embedding) as mm:
        mm.create_session(user_id="ann", session_id="trip")
        mm.save_message("trip", Message(role="user", content="I adopted a golden retriever puppy"))
        mm.create_session(user_id="bo", session_id="work")
        mm.save_message("work", Message(role="user", content="Invoice 88231 is overdue"))
        mm.flush()


def test_search_is_hybrid_and_scoped(db_path: str) -> None:
    _db(db_path)
    result = runner.invoke(app, ["search", "new dog", "--db", db_path, "-k", "1"])
    assert result.exit_code == 0, result.output
    assert "hybrid search" in result.output
    assert "golden retriever" in result.output
    scoped = runner.invoke(app, ["search", "invoice 88231", "--db", db_path, "--user", "ann"])
    assert scoped.exit_code == 0
    assert "88231" not in scoped.output
    keyword = runner.invoke(app, ["search", "88231", "--db", db_path, "--keyword"])
    assert "keyword search (BM25, as asked with --keyword)" in keyword.output
    assert "semantic memory is off" not in keyword.output
    assert "Invoice 88231" in keyword.output


def test_reindex_is_idempotent_and_fixes_a_model_mismatch(db_path: str) -> None:
    _db(db_path, FakeEmbedder())
    failed = runner.invoke(app, ["search", "dog", "--db", db_path])
    assert failed.exit_code == 1
    assert "harombe reindex" in " ".join(failed.output.split())
    for _ in range(2):
        result = runner.invoke(app, ["reindex", "--db", db_path])
        assert result.exit_code == 0, result.output
        assert "2 keyword rows, 2 vectors" in " ".join(result.output.split())
    found = runner.invoke(app, ["search", "new dog", "--db", db_path, "-k", "1"])
    assert found.exit_code == 0
    assert "golden retriever" in found.output
