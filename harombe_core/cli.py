"""The ``harombe`` command: inspect, export, import, prune and demo a memory store.

Every command takes ``--db PATH`` (default: ``HAROMBE_DB``, else ``~/.harombe/memory.db``).
Commands are grouped here; each feature's commands sit in their own section below. The app,
the options and helpers they share, and the commands adapters add are in
:mod:`harombe_core.cli_app`.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape
from rich.table import Table

from harombe_core import (
    cli_check,  # noqa: F401  (registers `harombe check PATH`)
    cli_facts,  # noqa: F401  (registers `harombe facts` and `harombe profile`)
    cli_forget,  # noqa: F401  (registers `harombe forget`)
)
from harombe_core.cli_app import (
    DbOption,
    UserOption,
    app,
    clean_errors,
    command,
    console,
    err_console,
    error_line,
    existing_session,
    existing_user,
    make_folder,
    one_line,
    open_memory,
    when,
)
from harombe_core.errors import (
    HarombeError,
    InvalidInputError,
    MissingExtraError,
)
from harombe_core.store import ops
from harombe_core.validate import plural

if TYPE_CHECKING:
    from harombe_core.manager import MemoryManager


def _show_version(value: bool) -> None:
    if value:
        from harombe_core import __version__

        console.print(f"harombe {__version__}")
        raise typer.Exit()


@app.callback()
def _options(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            metavar="",
            callback=_show_version,
            is_eager=True,
            help="Show the version and exit.",
        ),
    ] = False,
) -> None:
    """Persistent conversation memory for LLM applications."""


def _some(ids: list[str], shown: int = 10) -> str:
    """A few ids and how many more: an import of thousands of sessions is not a wall of ids."""
    more = len(ids) - shown
    return ", ".join(ids[:shown]) + (f" and {more:,} more" if more > 0 else "")


# sessions, history, export, import, prune, stats, demo -------------------------------------
@command("sessions")
def sessions_command(
    db: DbOption,
    user: UserOption = None,
    limit: Annotated[
        int, typer.Option("--limit", metavar="N", min=1, help="How many to list.")
    ] = 20,
) -> None:
    """List sessions, most recent activity first."""
    with clean_errors(), open_memory(db) as manager:
        # One more than shown tells whether the list was cut, without counting every session.
        sessions = manager.list_sessions(limit=limit + 1, user_id=user)
        more = len(sessions) > limit
        sessions = sessions[:limit]
        if not sessions:
            console.print(f"No sessions{f' for user {escape(user)}' if user else ''} in {db}.")
            return
        table = Table(title=f"Sessions in {escape(manager.store.location)}")
        table.add_column("session", no_wrap=True)
        table.add_column("user", no_wrap=True)
        table.add_column("msgs", justify="right", no_wrap=True)
        table.add_column("last activity", no_wrap=True)
        table.add_column("first message")
        for s in sessions:
            first = manager.get_messages(s.id, limit=1)
            table.add_row(
                escape(s.id),
                escape(s.user_id or "-"),
                str(s.message_count),
                when(s.updated_at),
                one_line(first[0].content, 48) if first else "",
            )
        console.print(table)
        if more:
            console.print(f"The {limit} most recent shown; --limit N lists more.")


@command("history")
def history_command(
    session_id: Annotated[str, typer.Argument(metavar="SESSION", help="The session id.")],
    db: DbOption,
    max_tokens: Annotated[
        int | None,
        typer.Option(
            "--max-tokens", metavar="N", min=0, help="Token budget of the context window shown."
        ),
    ] = None,
    last: Annotated[
        int | None,
        typer.Option("--last", metavar="N", min=1, help="Show only the newest N messages."),
    ] = None,
) -> None:
    """Show a session's messages and which of them fit a model's token window."""
    from harombe_core.export import describe_tool_call

    with clean_errors(), open_memory(db) as manager:
        session = existing_session(manager, session_id)
        if last is None:
            messages = manager.get_messages(session_id)
        else:  # read from the end: a long session costs only the rows shown
            messages = manager.get_newest_messages(session_id, last)
        budget = manager.max_history_tokens if max_tokens is None else max_tokens
        window = manager.get_window(session_id, budget)
        kept = {m.id for m in window.messages if m.id is not None}
        console.print(
            f"[bold]{escape(session.id)}[/bold]  user {escape(session.user_id or '-')}, "
            f"{plural(session.message_count, 'message')}, started {when(session.created_at)} UTC"
            + (f" (showing the newest {len(messages)})" if last is not None else "")
        )
        if session.system_prompt is not None:
            console.print(f"System prompt: {escape(session.system_prompt)}")
        table = Table()
        table.add_column("#", justify="right")
        table.add_column("time", no_wrap=True)
        table.add_column("role")
        table.add_column("tokens", justify="right")
        table.add_column("window", no_wrap=True)
        table.add_column("content", overflow="fold")  # fold, never crop: this is the record
        first_number = session.message_count - len(messages) + 1
        for i, m in enumerate(messages, start=first_number):
            who = m.role + (f" ({m.name})" if m.name else "")
            body = escape(m.content)
            if m.tool_call_id is not None:
                body = f"[dim]result of {escape(m.tool_call_id)}:[/dim] {body}"
            for call in m.tool_calls or []:
                body += f"\n[dim]-> tool call {escape(describe_tool_call(call))}[/dim]"
            table.add_row(
                str(i),
                when(m.created_at),
                escape(who),
                str(m.token_count),
                "[green]in[/green]" if m.id in kept else "[red]out[/red]",
                body,
            )
        console.print(table)
        inside = len(kept)
        total = session.message_count
        outside = total - inside
        console.print(
            f"Context for a {budget}-token budget: the newest {inside} of "
            f"{plural(total, 'message')} ({plural(window.tokens, 'token')}, system prompt "
            f"included); {plural(outside, 'older message')} "
            f"{'falls' if outside == 1 else 'fall'} outside the window."
        )


@command("export")
def export_command(
    db: DbOption,
    session_id: Annotated[
        str | None,
        typer.Argument(metavar="SESSION", help="One session (default: every session)."),
    ] = None,
    fmt: Annotated[
        str,
        typer.Option(
            "--format",
            "-f",
            metavar="FORMAT",
            help="json, jsonl (OpenAI chat format) or text.",
        ),
    ] = "json",
    out: Annotated[
        str | None,
        typer.Option(
            "--out", "-o", metavar="FILE", help="File to write (default: standard output)."
        ),
    ] = None,
    out_dir: Annotated[
        str | None,
        typer.Option(
            "--out-dir",
            metavar="DIR",
            help="Folder to write into; without --out, one file per session named by its id. "
            "Nothing is ever written outside it.",
        ),
    ] = None,
    user: UserOption = None,
) -> None:
    """Export one session or the whole store as json, jsonl or a text transcript."""
    from harombe_core import export as ex

    with clean_errors(), open_memory(db) as manager:
        if fmt not in ex.EXPORT_FORMATS:
            raise InvalidInputError(
                f"unknown format {fmt!r}; use one of {', '.join(ex.EXPORT_FORMATS)}."
            )
        if session_id is not None:
            existing_session(manager, session_id)  # and its owner is checked against --user
        else:
            existing_user(manager, user)
        if out_dir is not None:
            make_folder(out_dir)
        if out_dir is not None and out is None:
            ids = [session_id] if session_id is not None else None
            paths = ex.export_to_directory(manager, out_dir, fmt, user_id=user, session_ids=ids)
            console.print(
                f"Wrote {plural(len(paths), 'file')} to {escape(str(Path(out_dir).resolve()))}",
                soft_wrap=True,
            )
            return
        text = ex.export_store(manager, fmt, session_id=session_id, user_id=user)
        if out is None:
            sys.stdout.write(text)
            return
        path = ex.write_text(ex.resolve_output_path(out, out_dir), text)
        what = f"session {session_id}" if session_id is not None else "every session"
        console.print(f"Wrote {escape(what)} as {fmt} to {escape(str(path))}", soft_wrap=True)


@command("import")
def import_command(
    file: Annotated[str, typer.Argument(metavar="FILE", help="A json or jsonl export.")],
    db: DbOption,
    on_conflict: Annotated[
        str,
        typer.Option(
            "--on-conflict",
            metavar="POLICY",
            help="When a session id is already stored: error, new-id (import under a new id) "
            "or skip.",
        ),
    ] = "error",
    user: Annotated[
        str | None,
        typer.Option("--user", metavar="USER", help="Owner for the imported sessions."),
    ] = None,
    embedding: Annotated[
        str,
        typer.Option(
            "--embedding",
            metavar="MODEL",
            help="Embedding model for search by meaning (the one the database was indexed with).",
        ),
    ] = "default",
    embed: Annotated[
        bool,
        typer.Option(
            "--embed/--no-embed",
            metavar="",
            help="Embed the imported messages for search by meaning, with a progress bar "
            "(the default, unless the database searches by keyword only).",
        ),
    ] = True,
) -> None:
    """Import a json or jsonl export (all of it or, if anything is wrong, none of it).

    Then the imported messages are embedded, so search by meaning finds them at once.
    """
    from harombe_core import export as ex

    policy = on_conflict.replace("-", "_")
    with clean_errors():
        if policy not in ("error", "new_id", "skip"):
            raise InvalidInputError(
                f"--on-conflict must be error, new-id or skip, got {on_conflict!r}."
            )
        path = os.path.expanduser(db)
        new = db != ":memory:" and "://" not in db and not os.path.exists(path)
        if new:
            # Check the file before creating the database, so a bad file leaves nothing behind.
            for _ in ex.iter_records(file):
                pass
        model = embedding if embed and (new or _searches_by_meaning(db)) else None
        with _import_memory(db, model) as manager:
            try:
                result = ex.import_file(manager, file, on_conflict=policy, user_id=user)  # type: ignore[arg-type]
            except KeyboardInterrupt:
                # One transaction: Ctrl-C rolled it back. Say so, or the user cannot tell.
                error_line(
                    "interrupted: nothing was imported (an import is one transaction); run the "
                    "same command again to import the file."
                )
                raise typer.Exit(130) from None
            console.print(
                f"Imported {plural(len(result.session_ids), 'session')} "
                f"({plural(result.messages, 'message')}) into {escape(manager.store.location)}"
                + (f": {escape(_some(result.session_ids))}" if result.session_ids else "."),
                soft_wrap=True,
            )
            if result.skipped:
                console.print(f"Skipped (already stored): {escape(_some(result.skipped))}")
            if manager.semantic_enabled and result.messages:
                # The import committed; the bar (on a terminal only) is the embedding.
                try:
                    manager.flush(progress=err_console.is_terminal)
                except KeyboardInterrupt:
                    _interrupted_embedding(manager)
                    raise typer.Exit(130) from None
                console.print("Embedded them: search finds them by meaning and by keyword.")
            elif embed and result.messages:
                console.print(
                    "This database searches by keyword only; `harombe reindex --db "
                    f"{escape(manager.store.location)}` embeds every message for search by "
                    "meaning.",
                    soft_wrap=True,
                )


def _interrupted_embedding(manager: MemoryManager) -> None:
    """Ctrl-C while the import's messages are embedded: they are imported (the transaction
    committed) and found by keyword; say how many still wait for a vector and what embeds them."""
    pending = manager.stats()["pending_embeddings"]
    location = manager.store.location
    error_line(
        f"interrupted while embedding: the messages are imported and search finds them by "
        f"keyword; still to embed: {plural(pending, 'message')}. `harombe reindex --db "
        f"{location}` embeds them now (a memory opened with a model also embeds them in the "
        "background)."
    )


def _searches_by_meaning(db: str) -> bool:
    """Whether an existing database was indexed by meaning (or is still empty)."""
    with open_memory(db) as plain:
        return (
            plain.store.run(ops.get_meta("embedding_model")) is not None
            or plain.store.run(ops.count_messages()) == 0
        )


@contextmanager
def _import_memory(db: str, embedding: str | None) -> Iterator[MemoryManager]:
    """The manager an import writes through: with ``embedding`` if its backend is installed
    (checked before the database is created), else keyword search only, said once."""

    with ExitStack() as stack:
        try:
            manager = stack.enter_context(open_memory(db, create=True, embedding=embedding))
        except MissingExtraError as exc:
            err_console.print(
                f"{escape(exc.cli_message())}\nImporting for keyword search; `harombe reindex` "
                "embeds the messages once it is installed.",
                soft_wrap=True,
            )
            manager = stack.enter_context(open_memory(db, create=True))
        yield manager


@command("prune")
def prune_command(
    db: DbOption,
    days: Annotated[
        int,
        typer.Option(
            "--days", metavar="N", min=0, help="Delete sessions idle for more than N days."
        ),
    ],
    dry_run: Annotated[
        bool, typer.Option("--dry-run", metavar="", help="Only list what would be deleted.")
    ] = False,
) -> None:
    """Delete sessions (and their messages) with no activity in the last N days."""
    with clean_errors(), open_memory(db) as manager:
        if dry_run:
            cutoff = datetime.now(UTC) - timedelta(days=days)
            old = [s for s in manager.list_sessions(limit=None) if s.updated_at < cutoff]
            console.print(
                f"Would delete {plural(len(old), 'session')} idle for more than "
                f"{plural(days, 'day')}."
            )
            for s in old:
                console.print(f"  {escape(s.id)} (last activity {when(s.updated_at)})")
            return
        removed = manager.prune_old_sessions(days)
        console.print(
            f"Deleted {plural(removed, 'session')} with no activity in the last "
            f"{plural(days, 'day')} from {escape(manager.store.location)}.",
            soft_wrap=True,
        )


@command("stats")
def stats_command(db: DbOption) -> None:
    """Counts of sessions, users, messages and tokens, and the size of the database."""
    with clean_errors(), open_memory(db) as manager:
        stats = manager.stats()
        table = Table(title="harombe store", show_header=False)
        table.add_column("what")
        table.add_column("value", justify="right")
        for key, value in stats.items():
            if key == "bytes":
                value = f"{value / 1_048_576:.2f} MiB" if value >= 1_048_576 else f"{value:,} B"
            elif isinstance(value, int):
                value = f"{value:,}"
            table.add_row(key.replace("_", " "), escape(str(value)))
        console.print(table)


@command("demo")
def demo_command(
    db: Annotated[
        str | None,
        typer.Option(
            "--db",
            metavar="PATH",
            help="Database to write the sample into (default: a new temp file).",
        ),
    ] = None,
    budget: Annotated[
        int,
        typer.Option("--budget", metavar="N", min=0, help="Token budget of the window shown."),
    ] = 120,
    semantic: Annotated[
        bool,
        typer.Option(
            "--semantic/--no-semantic",
            metavar="",
            help="Recall by meaning with the bundled model (else keyword recall only).",
        ),
    ] = True,
) -> None:
    """Write a sample multi-session conversation and show what memory gives a model."""
    from harombe_core.demo import run_demo

    with clean_errors():
        run_demo(console, db, semantic=semantic, budget=budget)


# migrate ------------------------------------------------------------------------------------
@command("migrate")
def migrate_command(
    source: Annotated[
        str,
        typer.Option("--from", metavar="URL", help="Source: a SQLite path or postgresql:// URL."),
    ],
    destination: Annotated[
        str,
        typer.Option(
            "--to", metavar="URL", help="Destination: a SQLite path or postgresql:// URL."
        ),
    ],
    batch_size: Annotated[
        int, typer.Option("--batch-size", metavar="N", help="Messages per transaction.")
    ] = 500,
    progress: Annotated[
        bool | None,
        typer.Option(
            "--progress/--no-progress",
            metavar="",
            help="Show a progress bar (default: when stderr is a terminal).",
            show_default=False,
        ),
    ] = None,
    allow: Annotated[
        list[str] | None,
        typer.Option(
            "--allow",
            metavar="MODULE.NAME",
            help="A type of your own that LangGraph checkpoints may revive (repeatable).",
        ),
    ] = None,
) -> None:
    """Copy a whole memory between SQLite and PostgreSQL (resumable, verified).

    Sessions, messages, threads, summaries, the LangGraph store's items with their vectors, and
    LangGraph checkpoints. A checkpoint row that would revive a type other than LangGraph's own
    (or one named with --allow) is refused before anything is copied.
    """
    from harombe_core.migrate import migrate

    with clean_errors():
        allowed = [tuple(name.rsplit(".", 1)) for name in allow or ()]
        if any(len(pair) != 2 or not all(pair) for pair in allowed):
            raise InvalidInputError("--allow takes a type as MODULE.NAME, e.g. myapp.state.Plan.")
        report = migrate(
            source,
            destination,
            batch_size=batch_size,
            progress=err_console.is_terminal if progress is None else progress,
            allowed_types=allowed,
        )
    console.print(
        f"Migrated {plural(report.sessions, 'session')} and "
        f"{plural(report.messages, 'message')} ({report.copied_messages:,} copied now, "
        f"{plural(report.skipped_sessions, 'session')} already done) and "
        f"{plural(report.store_items, 'store item')} ({report.copied_store_items:,} copied "
        f"now) and {plural(report.checkpoint_rows, 'checkpoint row')} "
        f"({report.copied_checkpoint_rows:,} copied now) and "
        f"{plural(report.api_keys, 'API key')} ({report.copied_api_keys:,} copied now); "
        "verified: counts and checksums match."
    )


# search, reindex ----------------------------------------------------------------------------
@command("search")
def search_command(
    query: Annotated[
        str, typer.Argument(metavar="QUERY", help="What to look for, in plain words.")
    ],
    db: DbOption,
    user: Annotated[
        str | None, typer.Option("--user", metavar="USER", help="Only this user's messages.")
    ] = None,
    session: Annotated[
        str | None,
        typer.Option("--session", metavar="SESSION", help="Only this session's messages."),
    ] = None,
    k: Annotated[
        int, typer.Option("-k", "--top-k", metavar="N", min=1, help="How many results.")
    ] = 5,
    embedding: Annotated[
        str,
        typer.Option(
            "--embedding", metavar="MODEL", help="Embedding model the index was built with."
        ),
    ] = "default",
    keyword: Annotated[
        bool,
        typer.Option("--keyword", metavar="", help="Keyword (BM25) search only; loads no model."),
    ] = False,
) -> None:
    """Search past messages by meaning and keywords (hybrid), best first."""
    from harombe_core.manager import MemoryManager

    with clean_errors(), open_memory(db) as plain:
        location = plain.store.location
        semantic = not keyword and plain.store.run(ops.get_meta("embedding_model")) is not None
    with clean_errors():
        manager = MemoryManager(location, embedding=embedding if semantic else None)
        with manager:
            pending = manager.stats()["pending_embeddings"] if semantic else 0
            if semantic and pending:
                if pending <= 2_000:
                    manager.flush()
                else:
                    err_console.print(
                        f"{pending:,} messages are not embedded yet; run `harombe reindex "
                        f"--db {escape(location)}` to make them searchable by meaning."
                    )
            if session is not None:
                existing_session(manager, session)  # and its owner is checked against --user
            else:
                existing_user(manager, user)
            hits = manager.search(query, top_k=k, session_id=session, user_id=user)
            if keyword:
                mode = "keyword search (BM25, as asked with --keyword)"
            elif manager.retriever.mode == "hybrid":
                mode = "hybrid search (vector + keyword)"
            else:
                mode = (
                    "keyword search only (this store has no vector index; "
                    "`harombe reindex` builds one)"
                )
            table = Table(title=f"{escape(mode)}: {plural(len(hits), 'result')}")
            for column in ("score", "session", "when", "who", "message"):
                table.add_column(column, justify="right" if column == "score" else "left")
            for hit in hits:
                message = hit.message
                who = message.name or message.role
                table.add_row(
                    f"{hit.score:.3g}",
                    escape(hit.session_id),
                    when(message.created_at),
                    escape(who),
                    one_line(message.content, 80),
                )
            console.print(table)


@command("reindex")
def reindex_command(
    db: DbOption,
    embedding: Annotated[
        str,
        typer.Option(
            "--embedding",
            metavar="MODEL",
            help="Embedding model to (re)build the vector index with.",
        ),
    ] = "default",
    batch_size: Annotated[
        int,
        typer.Option(
            "--batch-size",
            metavar="N",
            min=1,
            help="Messages embedded and written per step (more is faster, needs more memory).",
        ),
    ] = 100,
    reembed: Annotated[
        bool,
        typer.Option(
            "--reembed", metavar="", help="Run the model again even where vectors are stored."
        ),
    ] = False,
) -> None:
    """Rebuild the keyword and vector indexes from the database (safe to repeat).

    Also the fix for "indexed with another embedding model": pass the new --embedding.
    """
    with clean_errors(), open_memory(db) as manager:
        result = manager.reindex(
            batch_size, embedding=embedding, reembed=reembed, progress=err_console.is_terminal
        )
        console.print(
            f"Reindexed {escape(manager.store.location)}: "
            f"{plural(result['keyword_rows'], 'keyword row')}, "
            f"{plural(result['vectors'], 'vector')}",
            soft_wrap=True,
        )


# graph (thread pictures) --------------------------------------------------------------------
@command("graph")
def graph_command(
    session: Annotated[
        str, typer.Argument(metavar="SESSION", help="Session id (see `harombe sessions`).")
    ],
    db: DbOption,
    out: Annotated[
        str | None,
        typer.Option(
            "--out",
            "-o",
            metavar="FILE",
            help="File to write: .png, .svg or .pdf (a picture; needs the plot extra) or .mmd "
            "(Mermaid text). Default: Mermaid on stdout.",
        ),
    ] = None,
) -> None:
    """Draw a session's conversation threads (PNG, SVG, PDF or Mermaid)."""
    from harombe_core.chat_memory import ChatMemory
    from harombe_core.graph_render import GRAPH_FORMATS, MERMAID_SUFFIXES, render_graph

    with clean_errors():
        target = None if out is None else Path(out).expanduser()
        kind = "" if target is None else target.suffix.lower().lstrip(".")
        if target is not None and kind not in (*GRAPH_FORMATS, *MERMAID_SUFFIXES):
            raise InvalidInputError(
                f"cannot write a graph to {target.name!r}: name a .png, .svg or .pdf file for "
                "a picture, or a .mmd file for Mermaid text (leave out --out to print it)."
            )
        with open_memory(db) as manager:
            existing_session(manager, session)
            memory = ChatMemory(memory=manager, session_id=session)
            if target is None:
                sys.stdout.write(memory.to_mermaid() + "\n")
                return
            if kind in GRAPH_FORMATS:
                render_graph(memory.graph, target, title=f"session {session}")
            else:
                target.write_text(memory.to_mermaid() + "\n", encoding="utf-8")
            graph = memory.graph
            threads = sum(1 for n in graph.nodes if graph.in_degree(n) == 0)
            console.print(
                f"Wrote {escape(str(target))} ({plural(graph.number_of_nodes(), 'message')}, "
                f"{plural(threads, 'thread')})",
                soft_wrap=True,
            )


import harombe_core.server.cli  # noqa: E402, F401  (harombe serve, mcp and keys register)


def main(argv: list[str] | None = None) -> None:
    """Entry point: every typed harombe error and every bad option value becomes one red line
    on stderr and a non-zero exit code (1 for errors, 2 for usage), never a traceback."""
    from typer.exceptions import Abort, TyperException

    args = sys.argv[1:] if argv is None else list(argv)
    try:
        # Not standalone: usage errors come back as exceptions instead of a framed box.
        code = app(args=args or ["--help"], prog_name="harombe", standalone_mode=False)
    except HarombeError as exc:
        error_line(exc.cli_message())
        sys.exit(1)
    except TyperException as exc:  # a bad option value, a missing argument, an unknown command
        ctx = getattr(exc, "ctx", None)
        hint = f" (see `{ctx.command_path} --help`)" if ctx is not None else ""
        error_line(exc.format_message() + hint)
        sys.exit(exc.exit_code)
    except Abort:
        error_line("aborted.")
        sys.exit(1)
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":  # pragma: no cover
    main()
