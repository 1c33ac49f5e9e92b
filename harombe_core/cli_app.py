"""The ``harombe`` application: its typer app, the options and helpers every command shares,
and the subcommands installed adapters add (entry point group ``harombe.cli``).

The commands themselves are in :mod:`harombe_core.cli`; an adapter's ``register(app)`` builds
its commands from what is here (``Command``, ``DbOption``, ``clean_errors``).
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
import typer.main
from rich.console import Console
from rich.markup import escape
from typer.core import TyperCommand, TyperGroup

from harombe_core.config import default_db_path
from harombe_core.errors import (
    Fix,
    HarombeError,
    MissingExtraError,
    SessionNotFoundError,
    install_command,
)

if TYPE_CHECKING:
    from harombe_core.manager import MemoryManager
    from harombe_core.models import Session

__all__ = [
    "COMMANDS_GROUP",
    "Command",
    "DbOption",
    "Group",
    "UserOption",
    "adapter_commands",
    "app",
    "check_db_folder",
    "clean_errors",
    "command",
    "console",
    "err_console",
    "error_line",
    "existing_session",
    "existing_user",
    "make_folder",
    "one_line",
    "open_memory",
    "when",
]


class _PlainHelp:
    """Help that shows ``--help`` as a flag, like every other flag, not as ``--help <bool>``.

    Every option names its value in capitals (``--db PATH``, ``--limit N``) and a flag names
    none (``metavar=""``); typer's own ``--help`` option gets the same treatment here.
    """

    def get_help_option(self, ctx: Any) -> Any:
        option = super().get_help_option(ctx)  # type: ignore[misc]
        if option is not None:
            option.metavar = ""
        return option


class Command(_PlainHelp, TyperCommand):
    """The class of every ``harombe`` subcommand, adapters' included (plain ``--help``)."""


class Group(_PlainHelp, TyperGroup):
    """The class of a ``harombe`` subcommand group (``harombe keys``): plain ``--help`` too."""


class _Group(Group):
    """The ``harombe`` group: its own commands plus those adapter packages add (entry points)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        for name, adapter_command in adapter_commands().items():
            if name not in self.commands:
                self.add_command(adapter_command, name)


app = typer.Typer(
    name="harombe",
    help="Persistent conversation memory for LLM applications.",
    no_args_is_help=True,
    add_completion=False,
    cls=_Group,
    # Docstring paragraphs reflow to the terminal (their source line ends are not kept).
    rich_markup_mode="markdown",
    # A bug's traceback must not print local variables: they can hold keys and user data.
    pretty_exceptions_show_locals=False,
)
console = Console()
err_console = Console(stderr=True)


#: Entry point group of the subcommands adapter packages add (each value is ``register(app)``).
COMMANDS_GROUP = "harombe.cli"


@cache
def adapter_commands() -> dict[str, Any]:
    """The subcommands installed adapters add (``harombe chat`` comes from LangChain's).

    Each entry point of :data:`COMMANDS_GROUP` is a ``register(app)`` function adding commands
    to a typer app, so the core never imports an adapter by name. They are collected when the
    command line is built, not when this module is imported, so an adapter may import this
    module. An adapter whose optional dependency is missing still gets its command, which then
    says which extra to install instead of vanishing.
    """
    from importlib.metadata import entry_points

    adapters = typer.Typer(cls=TyperGroup)
    for entry in entry_points(group=COMMANDS_GROUP):
        try:
            register = entry.load()
        except ImportError as exc:
            _needs_extra(adapters, entry.name, entry.extras[0] if entry.extras else entry.name, exc)
        else:
            register(adapters)
    if not adapters.registered_commands:
        return {}
    group = typer.main.get_group(adapters)
    return dict(group.commands)


def _needs_extra(app: typer.Typer, name: str, extra: str, error: ImportError) -> None:
    """A stand-in ``harombe NAME`` that reports the missing dependency, whatever it is given."""

    @app.command(
        name,
        cls=Command,
        help=f"(needs the {extra} extra: {install_command(extra)})",
        context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
    )
    def unavailable() -> None:
        raise MissingExtraError(f"harombe {name}", extra, error.name or extra) from error


def command(name: str) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Register a ``harombe`` subcommand (with the plain ``--help`` of :class:`_PlainHelp`)."""
    return app.command(name, cls=Command)


DbOption = Annotated[
    str,
    typer.Option(
        "--db",
        metavar="PATH",
        help="Database path (env HAROMBE_DB, default ~/.harombe/memory.db).",
        envvar="HAROMBE_DB",
        default_factory=default_db_path,
        show_default=False,
    ),
]
UserOption = Annotated[
    str | None, typer.Option("--user", metavar="USER", help="Only this user's sessions.")
]


# shared helpers ------------------------------------------------------------------------------
def error_line(text: str) -> None:
    """One line on stderr, whatever the message held (a typed error's text can span lines)."""
    err_console.print(f"[red]error:[/red] {escape(' '.join(text.split()))}", soft_wrap=True)


@contextmanager
def clean_errors() -> Iterator[None]:
    """Turn a typed harombe error into one red line on stderr and exit code 1."""
    try:
        yield
    except HarombeError as exc:
        error_line(exc.cli_message())
        raise typer.Exit(1) from None


@contextmanager
def open_memory(
    db: str,
    *,
    create: bool = False,
    embedding: str | None = None,
    vector_store: str | None = "database",
) -> Iterator[MemoryManager]:
    """A manager over ``db``, without semantic memory unless ``embedding`` names a model (no
    model load for inspecting a store); its vectors in ``vector_store``.

    Unless ``create``, a path with no file is an error rather than a new empty database, so a
    typo in ``--db`` is reported instead of silently showing nothing.
    """
    from harombe_core.errors import StoreNotFoundError
    from harombe_core.manager import MemoryManager

    path = db if db == ":memory:" or "://" in db else os.path.expanduser(db)
    if create:
        check_db_folder(db)
    if not create and path != ":memory:" and "://" not in path and not os.path.exists(path):
        raise StoreNotFoundError(
            f"no database at {path}. Pass --db PATH (or set HAROMBE_DB), or create one with "
            f"`harombe demo --db {path}` or `harombe import FILE --db {path}`."
        )
    with MemoryManager(path, embedding=embedding, vector_store=vector_store) as manager:
        yield manager


def check_db_folder(db: str) -> None:
    """A new database goes into a folder that exists: a command creates only the default
    ``~/.harombe``, never a folder a mistyped ``--db`` names (``/nonexistent/x.db``)."""
    from harombe_core.config import DEFAULT_DB_PATH
    from harombe_core.errors import StoreNotFoundError

    if db == ":memory:" or "://" in db:
        return
    folder = Path(db).expanduser().parent
    if folder.is_dir() or folder == Path(DEFAULT_DB_PATH).expanduser().parent:
        return
    raise StoreNotFoundError(
        f"cannot create a database at {db}: the folder {folder} does not exist. Create it "
        "first (mkdir -p), or pass another --db PATH (or set HAROMBE_DB)."
    )


def existing_session(manager: MemoryManager, session_id: str) -> Session:
    """The session a command names; a typo is an error here, not an empty session."""
    session = manager.get_session(session_id)
    if session is None:
        raise SessionNotFoundError.of(session_id, manager.store.location)
    return session


def existing_user(manager: MemoryManager, user_id: str | None) -> None:
    """A ``--user`` with no session is a typo to report, not an empty result."""
    if user_id is not None and not manager.list_sessions(limit=1, user_id=user_id):
        location = manager.store.location
        raise SessionNotFoundError(
            f"user {user_id!r} has no sessions in {location}.",
            fix=Fix(
                api="MemoryManager.list_sessions() lists the sessions and their users.",
                cli=f"`harombe sessions --db {shlex.quote(location)}` lists the sessions and "
                "their users.",
            ),
        )


def make_folder(folder: str) -> Path:
    """``folder`` (and its parents), created if missing, as ``mkdir -p`` does; a path that is a
    file or cannot be created is an ExportPathError."""
    from harombe_core.errors import ExportPathError

    path = Path(folder).expanduser()
    try:
        path.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise ExportPathError(f"{path} is a file; give a folder to write into.") from None
    except OSError as exc:
        raise ExportPathError(
            f"cannot create the folder {path} ({exc.strerror or exc}); choose another one."
        ) from exc
    return path


def when(value: datetime) -> str:
    """A time as the tables show it: to the minute, no seconds or zone."""
    return f"{value:%Y-%m-%d %H:%M}"


def one_line(text: str, width: int = 60) -> str:
    """``text`` on one line of at most ``width`` characters, escaped for rich markup."""
    flat = " ".join(text.split())
    return escape(flat if len(flat) <= width else flat[: width - 1] + "…")
