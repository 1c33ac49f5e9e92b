"""The ``harombe chat`` subcommand, added to ``harombe`` through the ``harombe.cli`` entry point.

The core command line knows no adapter: it calls :func:`register` of every entry point in that
group. Registering stays cheap and works without LangChain installed (so ``harombe --help``
lists ``chat`` and stays fast); LangChain is imported only when a chat starts, and its absence
is then reported as a :class:`~harombe_core.errors.MissingExtraError` naming the extra to install.
The chat itself lives in :mod:`langchain_harombe.chat`, whose names this module still exports.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from harombe_core.cli_app import Command, DbOption, check_db_folder, clean_errors
from harombe_core.errors import MissingExtraError
from harombe_core.integration import lazy_attributes as _lazy_attributes
from langchain_harombe._recall import DEFAULT_RECALL_TOKENS

if TYPE_CHECKING:
    from langchain_harombe.chat import (
        ChatSession,
        integration_package,
        load_chat_model,
        run_chat,
    )

__all__ = [
    "DEFAULT_RECALL_TOKENS",
    "ChatSession",
    "integration_package",
    "load_chat_model",
    "register",
    "run_chat",
]

__getattr__ = _lazy_attributes(
    __name__,
    {
        name: "langchain_harombe.chat"
        for name in __all__
        if name not in ("register", "DEFAULT_RECALL_TOKENS")
    },
    __all__,
)[0]


def register(app: typer.Typer) -> None:
    """Add ``chat`` to the ``harombe`` command ``app``."""
    app.command("chat", cls=Command)(chat_command)


def chat_command(
    db: DbOption,
    model: Annotated[
        str,
        typer.Option(
            "--model",
            "-m",
            metavar="MODEL",
            envvar="HAROMBE_CHAT_MODEL",
            help="A LangChain chat model as provider:model (init_chat_model), 'fake' for an "
            "offline echo model, or 'fake:transcript' to see what the model is sent.",
        ),
    ] = "fake",
    session: Annotated[
        str | None,
        typer.Option(
            "--session",
            "-s",
            metavar="SESSION",
            help="Session to continue, or to start under this name (default: a new one).",
        ),
    ] = None,
    user: Annotated[
        str | None,
        typer.Option(
            "--user",
            metavar="USER",
            help="Act as this user: only their sessions are used, searched and recalled.",
        ),
    ] = None,
    system: Annotated[
        str | None,
        typer.Option("--system", metavar="TEXT", help="System prompt of a new session."),
    ] = None,
    max_tokens: Annotated[
        int,
        typer.Option(
            "--max-tokens", metavar="N", min=1, help="Token budget of the recent turns sent."
        ),
    ] = 4096,
    recall_tokens: Annotated[
        int,
        typer.Option(
            "--recall-tokens",
            metavar="N",
            min=0,
            help="Tokens of relevant earlier turns, the user's and the assistant's (the user's "
            "other sessions; without --user, this session's older turns) added to the system "
            "message; 0 turns recall off.",
        ),
    ] = DEFAULT_RECALL_TOKENS,
    embedding: Annotated[
        str,
        typer.Option(
            "--embedding",
            metavar="MODEL",
            help="'default' (bundled MiniLM) or 'none' (keyword search and recall only).",
        ),
    ] = "default",
    memory: Annotated[
        bool,
        typer.Option(
            "--memory/--no-memory", metavar="", help="Persist the chat in --db (else in memory)."
        ),
    ] = True,
) -> None:
    """Chat with a LangChain chat model, with persistent memory (needs the langchain extra)."""
    try:
        from langchain_harombe.chat import run_chat
    except ImportError as exc:
        raise MissingExtraError("harombe chat", "langchain", exc.name or "langchain") from exc
    with clean_errors():
        if memory:
            check_db_folder(db)
        run_chat(
            db=db,
            model=model,
            session_id=session,
            user_id=user,
            system_prompt=system,
            max_tokens=max_tokens,
            recall_tokens=recall_tokens,
            embedding=embedding,
            memory=memory,
        )
