"""The ``harombe`` command: inspect, export, import, prune and demo a memory store.

Every command takes ``--db PATH`` (default: ``HAROMBE_DB``, else ``~/.harombe/memory.db``).
Commands are grouped here; each feature's commands sit in their own section below.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer
from rich.console import Console

from harombe_core.config import default_db_path
from harombe_core.errors import HarombeError

app = typer.Typer(
    name="harombe",
    help="Persistent conversation memory for LLM applications.",
    no_args_is_help=True,
    add_completion=False,
)
console = Console()
err_console = Console(stderr=True)

DbOption = Annotated[
    str,
    typer.Option(
        "--db",
        help="Database path (env HAROMBE_DB, default ~/.harombe/memory.db).",
        envvar="HAROMBE_DB",
        default_factory=default_db_path,
    ),
]


# migrate ------------------------------------------------------------------------------------
@app.command("migrate")
def migrate_command(
    source: Annotated[str, typer.Option("--from", help="Source: a SQLite path or postgresql:// URL.")],
    destination: Annotated[
        str, typer.Option("--to", help="Destination: a SQLite path or postgresql:// URL.")
    ],
    batch_size: Annotated[int, typer.Option(help="Messages per transaction.")] = 500,
    progress: Annotated[bool, typer.Option(help="Show a progress bar.")] = True,
) -> None:
    """Copy sessions, messages, threads and summaries between backends (resumable, verified)."""
    from harombe_core.migrate import migrate

    report = migrate(source, destination, batch_size=batch_size, progress=progress)
    console.print(
        f"migrated {report.sessions} sessions and {report.messages} messages "
        f"({report.copied_messages} copied now, {report.skipped_sessions} sessions already done); "
        "verified: counts and checksums match."
    )


def main() -> None:
    """Entry point: typed harombe errors become one red line and exit code 1, not a traceback."""
    try:
        app()
    except HarombeError as exc:
        err_console.print(f"[red]error:[/red] {exc}")
        sys.exit(1)


if __name__ == "__main__":  # pragma: no cover
    main()
