"""What the ``harombe`` command prints: advice in CLI terms, counts in English, tidy help, and
thread graphs as real files. Driven through typer's CliRunner against real SQLite files."""

from __future__ import annotations

import json
import pickle
import re
import sys
from pathlib import Path

import pytest
import typer
from rich.console import Console
from typer.testing import CliRunner

from harombe_core import cli
from harombe_core.cli import app
from harombe_core.errors import (
    Fix,
    HarombeError,
    InvalidBudgetError,
    NotAHarombeDatabaseError,
    SessionNotFoundError,
    SessionOwnershipError,
    install_command,
)
from harombe_core.manager import MemoryManager
from harombe_core.models import Message
from harombe_core.strategies import summarization_window, window_newest

runner = CliRunner()

#: What Python advice looks like: ``storage_path=...``, ``list_sessions()``, ``MemoryManager.x``.
PYTHON_ADVICE = re.compile(r"\b\w+=\.\.\.|\b[a-z_]+\(\)|MemoryManager\.")


@pytest.fixture(autouse=True)
def wide_console(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli, "console", Console(width=200))


@pytest.fixture
def db(tmp_path: Path) -> str:
    path = str(tmp_path / "memory.db")
    with MemoryManager(path, embedding=None) as mm:
        mm.create_session(system_prompt="Be brief. " * 20, user_id="ann", session_id="alpha")
        mm.save_messages(
            "alpha",
            [
                Message(role="user", content="I go to Lisbon in May"),
                Message(role="assistant", content="Noted: Lisbon in May."),
                Message(role="user", content="Book the train to Sintra"),
                Message(role="assistant", content="Booked for the 15th."),
            ],
        )
    return path


def flat(text: str) -> str:
    return " ".join(text.split())


# errors speak the CLI's language -------------------------------------------------------------
def test_an_error_carries_its_fix_for_python_and_for_the_cli() -> None:
    error = NotAHarombeDatabaseError(
        "x.db is not a database.", fix=Fix(api="Pass storage_path=...", cli="Pass --db PATH.")
    )
    assert str(error) == "x.db is not a database. Pass storage_path=..."
    assert error.cli_message() == "x.db is not a database. Pass --db PATH."
    assert error.problem == "x.db is not a database."
    copy = pickle.loads(pickle.dumps(error))  # errors cross process boundaries
    assert (str(copy), copy.cli_message()) == (str(error), error.cli_message())
    plain = HarombeError("no advice needed; restore it from a backup.")
    assert str(plain) == plain.cli_message() == "no advice needed; restore it from a backup."
    missing = SessionNotFoundError.of("nope", "/tmp/m.db")
    assert "list_sessions()" in str(missing)
    assert "`harombe sessions --db /tmp/m.db`" in missing.cli_message()
    owned = SessionOwnershipError("alpha", "bob")
    assert "update_session" in str(owned)
    assert "harombe sessions --user bob" in owned.cli_message()
    assert not PYTHON_ADVICE.search(owned.cli_message())


@pytest.mark.parametrize(
    ("args", "cli_advice"),
    [
        (["history", "nope"], "harombe sessions --db"),
        (["graph", "nope"], "harombe sessions --db"),
        (["export", "nope", "--out-dir", "{tmp}"], "harombe sessions --db"),
        (["search", "Lisbon", "--keyword", "--user", "bob", "--session", "alpha"], "--user"),
    ],
    ids=["history", "graph", "export", "ownership"],
)
def test_cli_errors_name_commands_and_flags(
    db: str, tmp_path: Path, args: list[str], cli_advice: str
) -> None:
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    result = runner.invoke(app, [*args, "--db", db])
    assert result.exit_code == 1, result.output
    assert cli_advice in result.stderr
    assert not PYTHON_ADVICE.search(result.stderr), result.stderr
    assert "Traceback" not in result.output


def test_a_foreign_file_is_refused_with_the_db_flag_as_the_fix(tmp_path: Path) -> None:
    foreign = tmp_path / "notes.txt"
    foreign.write_text("just some notes, not a database at all" * 5, encoding="utf-8")
    result = runner.invoke(app, ["sessions", "--db", str(foreign)])
    assert result.exit_code == 1
    assert "Pass a new path with --db PATH." in flat(result.stderr)
    assert "storage_path" not in result.stderr


def test_a_budget_too_small_for_the_system_prompt_names_the_flag() -> None:
    system = [Message(role="system", content="long prompt", token_count=50)]
    with pytest.raises(InvalidBudgetError) as caught:
        summarization_window([], 10, system=system, summary=None, keep_last=2)
    assert "Raise max_tokens" in str(caught.value)
    assert "Raise --max-tokens" in caught.value.cli_message()
    assert "a budget of 10 tokens cannot hold the system prompt (50 tokens)" in str(caught.value)
    assert window_newest([], 10).messages == []


# counts, titles and help ---------------------------------------------------------------------
def test_counts_of_one_are_singular(db: str, tmp_path: Path) -> None:
    export = tmp_path / "one.jsonl"
    export.write_text(
        json.dumps(
            {
                "messages": [
                    {"role": "user", "content": "hi"},
                    {"role": "assistant", "content": "yo"},
                ]
            }
        )
        + "\n",
        encoding="utf-8",
    )
    imported = runner.invoke(app, ["import", str(export), "--db", str(tmp_path / "new.db")])
    assert imported.exit_code == 0, imported.output
    assert "Imported 1 session (2 messages)" in imported.output
    graph = runner.invoke(app, ["graph", "alpha", "--db", db, "--out", str(tmp_path / "g.mmd")])
    assert "(4 messages, 1 thread)" in graph.output
    assert "1 threads" not in graph.output


def test_keyword_search_on_a_semantic_store_says_it_was_asked_for(tmp_path: Path) -> None:
    from harombe_core.testing import FakeEmbedder

    path = str(tmp_path / "semantic.db")
    with MemoryManager(path, embedding=FakeEmbedder(), vector_store="chroma") as mm:
        mm.save_message("s", Message(role="user", content="Invoice 88231 is overdue"))
        mm.flush()
    result = runner.invoke(app, ["search", "88231", "--keyword", "--db", path])
    assert result.exit_code == 0, result.output
    assert "keyword search (BM25, as asked with --keyword): 1 result" in result.output
    assert "semantic memory is off" not in result.output
    with MemoryManager(str(tmp_path / "plain.db"), embedding=None) as mm:
        mm.save_message("s", Message(role="user", content="Invoice 88231 is overdue"))
    plain = runner.invoke(app, ["search", "88231", "--db", str(tmp_path / "plain.db")])
    assert "keyword search only (this store has no vector index" in flat(plain.output)


def _commands() -> dict[str, object]:
    group = typer.main.get_command(app)
    return dict(group.commands)  # type: ignore[attr-defined]


@pytest.mark.parametrize("name", ["", *sorted(_commands())])
def test_help_is_tidy(name: str) -> None:
    """Flags show no <bool>; every argument and value is named in capitals; every option
    says what it does."""
    result = runner.invoke(app, [name, "--help"] if name else ["--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "<bool>" not in result.output
    if not name:
        return
    command = _commands()[name]
    for param in command.params:  # type: ignore[attr-defined]
        label = param.metavar if param.metavar is not None else param.name
        if param.param_type_name == "argument":
            assert label == label.upper(), f"{name}: argument {label!r} is not in capitals"
            assert f"{{{label}}}" in result.output or f"[{label}]" in result.output
        else:
            assert param.help, f"{name} {param.opts[0]} has no help"
            if not param.is_flag:
                assert label, f"{name} {param.opts[0]} names no value"
                assert label == label.upper(), f"{name} {param.opts[0]}: {label!r}"


# graph ------------------------------------------------------------------------------------------
def test_graph_writes_a_real_pdf(db: str, tmp_path: Path) -> None:
    target = tmp_path / "g.pdf"
    result = runner.invoke(app, ["graph", "alpha", "--db", db, "--out", str(target)])
    assert result.exit_code == 0, result.output
    data = target.read_bytes()
    assert data.startswith(b"%PDF-")
    assert b"%%EOF" in data[-64:]
    assert b"graph TD" not in data


def test_graph_refuses_an_unknown_extension_before_writing(db: str, tmp_path: Path) -> None:
    target = tmp_path / "g.docx"
    result = runner.invoke(app, ["graph", "alpha", "--db", db, "--out", str(target)])
    assert result.exit_code == 1
    assert ".png, .svg or .pdf" in result.stderr
    assert ".mmd" in result.stderr
    assert not target.exists()


def test_graph_without_matplotlib_names_the_plot_extra(
    db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    target = tmp_path / "g.png"
    result = runner.invoke(app, ["graph", "alpha", "--db", db, "--out", str(target)])
    assert result.exit_code == 1
    assert install_command("plot") in flat(result.stderr)
    assert not target.exists()


def test_a_linear_session_is_drawn_as_one_chain(db: str, tmp_path: Path) -> None:
    mermaid = runner.invoke(app, ["graph", "alpha", "--db", db])
    assert mermaid.exit_code == 0, mermaid.output
    edges = [line for line in mermaid.stdout.splitlines() if "-->" in line]
    ids = [int(line.split("-->")[0]) for line in edges] + [int(edges[-1].split("-->")[1])]
    assert len(edges) == 3
    assert ids == sorted(ids)  # each message follows the one before it
    picture = runner.invoke(app, ["graph", "alpha", "--db", db, "--out", str(tmp_path / "g.svg")])
    assert "(4 messages, 1 thread)" in picture.output


@pytest.mark.parametrize("command", ["forget", "migrate", "import", "reindex"])
def test_help_paragraphs_are_reflowed_not_broken_at_the_docstrings_line_ends(
    command: str,
) -> None:
    """A docstring is wrapped at 100 columns in the source; on an 80-column terminal its lines
    used to be wrapped again, leaving a word or two alone on a line ("cleaned")."""
    result = runner.invoke(app, [command, "--help"], env={"COLUMNS": "80", "NO_COLOR": "1"})
    assert result.exit_code == 0, result.output
    description = result.output.split("╭")[0].splitlines()
    paragraphs: list[list[str]] = [[]]
    for line in description:
        if line.strip():
            paragraphs[-1].append(line.strip())
        elif paragraphs[-1]:
            paragraphs.append([])
    for lines in paragraphs:
        for line in lines[:-1]:  # every line but a paragraph's last is filled
            assert len(line) > 50, f"{line!r} in {lines}"
