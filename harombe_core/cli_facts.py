"""``harombe facts`` and ``harombe profile``: a user's memory from the command line.

``harombe facts --user U`` lists the user's current facts (``--as-of DATE`` those that held
then, ``--history`` closed ones too, ``--search Q`` by meaning and keyword, ``--tasks`` the
open tasks); ``--add TEXT``, ``--forget ID`` and ``--extract`` edit it. ``harombe profile
--user U`` prints what a model is given: the profile within ``--tokens`` and the open tasks.
Registered with :mod:`harombe_core.cli_app` when :mod:`harombe_core.cli` is imported.
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from harombe_core.cli_app import DbOption, clean_errors, command, console, one_line, open_memory
from harombe_core.errors import InvalidInputError
from harombe_core.facts.models import Fact

__all__ = ["facts_command", "profile_command"]

UserRequired = Annotated[str, typer.Option("--user", metavar="USER", help="Whose memory.")]


def _table(facts: list[Fact], title: str) -> Table:
    table = Table(title=title)
    for column in ("id", "kind", "subject", "text", "since", "until", "sources"):
        table.add_column(column, overflow="fold")
    for fact in facts:
        until = "" if fact.valid_to is None else f"{fact.valid_to:%Y-%m-%d}"
        if fact.status == "done":
            until += " (done)"
        table.add_row(
            str(fact.id),
            fact.kind,
            escape(fact.subject or ""),
            one_line(fact.text, 70),
            f"{fact.valid_from:%Y-%m-%d}",
            until,
            escape(", ".join(f"{s.session_id}#{s.message_id}" for s in fact.sources[:3])),
        )
    return table


@command("facts")
def facts_command(
    user: UserRequired,
    db: DbOption,
    as_of: Annotated[
        str | None, typer.Option("--as-of", metavar="DATE", help="Facts that held then.")
    ] = None,
    history: Annotated[
        bool, typer.Option("--history", metavar="", help="Closed facts too.")
    ] = False,
    search: Annotated[
        str | None, typer.Option("--search", metavar="QUERY", help="By meaning and keyword.")
    ] = None,
    tasks: Annotated[
        bool, typer.Option("--tasks", metavar="", help="Only the open tasks.")
    ] = False,
    add: Annotated[str | None, typer.Option("--add", metavar="TEXT", help="Add a fact.")] = None,
    kind: Annotated[
        str, typer.Option("--kind", metavar="KIND", help="fact, preference, task or decision.")
    ] = "fact",
    subject: Annotated[
        str | None, typer.Option("--subject", metavar="KEY", help="What --add updates.")
    ] = None,
    forget: Annotated[
        int | None, typer.Option("--forget", metavar="ID", help="Delete a fact for good.")
    ] = None,
    extract: Annotated[
        bool,
        typer.Option("--extract", metavar="", help="Extract facts from the user's sessions first."),
    ] = False,
) -> None:
    """A user's facts, preferences, tasks and decisions (current, as of a date, or searched)."""
    with clean_errors(), open_memory(db) as manager:
        if extract:
            read = sum(manager.extract_facts(s.id) for s in manager.list_sessions(None, user))
            console.print(f"Read {read:,} new messages.")
        if add is not None:
            fact = manager.add_fact(user, add, kind=kind, subject=subject)
            console.print(f"Fact {fact.id}: {escape(fact.text)}", soft_wrap=True)
            return
        if forget is not None:
            if not manager.forget_fact(user, forget):
                raise InvalidInputError(
                    f"user {user!r} has no fact {forget}; `harombe facts --user {user} "
                    "--history` lists them."
                )
            console.print(f"Forgot fact {forget}.")
            return
        if search is not None:
            hits = manager.search_facts(user, search, top_k=10, include_history=history)
            console.print(_table([h.fact for h in hits], f"facts of {escape(user)} for {search!r}"))
            return
        if tasks:
            console.print(_table(manager.get_open_tasks(user), f"open tasks of {escape(user)}"))
            return
        facts = manager.get_facts(user, as_of=as_of, include_history=history)
        title = f"facts of {escape(user)}" + (f" as of {escape(as_of)}" if as_of else "")
        console.print(_table(facts, title))


@command("profile")
def profile_command(
    user: UserRequired,
    db: DbOption,
    tokens: Annotated[
        int, typer.Option("--tokens", metavar="N", help="Token budget of the profile.")
    ] = 200,
) -> None:
    """What a model is told about a user: their profile within a budget, and open tasks."""
    with clean_errors(), open_memory(db) as manager:
        profile = manager.get_profile(user, tokens)
        console.print(f"[bold]Profile of {escape(user)}[/bold] ({profile.tokens} tokens)")
        console.print(escape(profile.text) or "(nothing known yet)", soft_wrap=True)
        open_tasks = manager.get_open_tasks(user)
        if open_tasks:
            console.print("[bold]Open tasks[/bold]")
            for task in open_tasks:
                console.print(f"- {escape(task.text)}", soft_wrap=True)
