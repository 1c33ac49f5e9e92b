"""``harombe forget --user U``: erase everything stored for one user (a GDPR erasure request).

Kept in its own module so the command reads as one piece: what it removes is
:meth:`~harombe_core.manager.MemoryManager.forget_user`, and what "removed" means (no search
finds it; after close no byte of it is left in the database, its WAL or its indexes) is
:mod:`harombe_core.store.erasure`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from harombe_core.cli_app import DbOption, clean_errors, command, console, open_memory
from harombe_core.store import ops
from harombe_core.validate import plural

__all__ = ["forget_command"]


@command("forget")
def forget_command(
    db: DbOption,
    user: Annotated[
        str,
        typer.Option("--user", metavar="USER", help="The user whose data is erased."),
    ],
    embedding: Annotated[
        str,
        typer.Option(
            "--embedding",
            metavar="MODEL",
            help="The model the database was indexed with (opens its vector index to erase "
            "the user's vectors from it; default: the bundled model).",
        ),
    ] = "default",
) -> None:
    """Erase every session, message, vector, keyword entry and summary of a user.

    The vector index beside the database is rebuilt without them and every file is cleaned
    of their bytes before the command returns (docs/deletion.md)."""
    from harombe_core.manager import MemoryManager

    with clean_errors():
        with open_memory(db) as plain:
            indexed = plain.store.run(ops.get_meta("embedding_model")) is not None
            location = plain.store.location
        # An embedded Chroma folder beside the database holds the user's vectors and ids too:
        # opened, so that closing it erases them (docs/deletion.md).
        chroma = indexed and "://" not in location and Path(f"{location}.chroma").is_dir()
        with MemoryManager(
            location,
            embedding=embedding if indexed else None,
            vector_store="chroma" if chroma else "database",
        ) as manager:
            removed = manager.forget_user(user)
            erased = manager.erase_deleted()  # before close: the close may not be the last
        console.print(
            f"Erased {plural(removed, 'session')} of user {escape(user)} from {escape(location)}.",
            soft_wrap=True,
        )
        if not erased.complete:
            # Another process holds the database (a reader kept the WAL, or `harombe serve`
            # owns the Chroma folder): it pays the recorded debt by its erasure or close.
            console.print(
                "Another process has the database open: no search finds the user now, and the "
                "files are cleaned of their bytes when that process erases or closes "
                "(docs/deletion.md).",
                soft_wrap=True,
            )
