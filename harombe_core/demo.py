"""``harombe demo``: a small multi-session conversation, and what memory gives a model from it.

A user, Sam, talks to an assistant over four sessions: planning a trip to Lisbon, a cooking
preference, a bug in a CSV parser (with a tool call), and today's question. The demo writes them
into a store, then shows the three things memory is for:

1. the sessions, as they are stored;
2. the token window of one session under a budget: the newest turns that fit, and the older
   ones that fall out;
3. recall across sessions for a new question (by meaning when semantic memory is available,
   else by keyword), and the RAG context block plus the full prompt a model would receive.

Everything runs locally: SQLite (messages, keywords and vectors) and the bundled all-MiniLM-L6-v2.
The logic lives here; the CLI only calls :func:`run_demo`.
"""

from __future__ import annotations

import os
import shlex
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table

from harombe_core.manager import MemoryManager
from harombe_core.models import Message, SearchHit, utc_now
from harombe_core.store import ops
from harombe_core.validate import plural

__all__ = ["DEMO_USER", "SAMPLE", "DemoResult", "DemoSession", "run_demo", "write_sample"]

DEMO_USER = "sam"


@dataclass(frozen=True, slots=True)
class DemoSession:
    """One sample conversation: its id, how long ago it happened, its prompt and its turns."""

    id: str
    days_ago: float
    system_prompt: str | None
    turns: tuple[dict[str, Any], ...]


def _u(content: str) -> dict[str, Any]:
    return {"role": "user", "content": content, "name": "Sam"}


def _a(content: str, **extra: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": content, **extra}


SAMPLE: tuple[DemoSession, ...] = (
    DemoSession(
        id="demo-lisbon-trip",
        days_ago=12,
        system_prompt="You are Sam's travel planner. Be concrete and brief.",
        turns=(
            _u(
                "I'm planning a trip to Lisbon from 14 to 18 May with my partner Alex. Our budget "
                "is about 1,200 euros for the two of us, flights not included."
            ),
            _a(
                "Four nights in Lisbon fits that budget well. Plan roughly 140 euros a night for "
                "a double room and keep 100 euros a day for food and transport."
            ),
            _u("Alex gets seasick, so no boat tours please. A day trip to Sintra would be great."),
            _a(
                "Noted: no boats. Take the train from Rossio station to Sintra (about 40 "
                "minutes) and get to Pena Palace when it opens to beat the crowds."
            ),
            _u("Which neighbourhood should we stay in? We want to walk everywhere."),
            _a(
                "Stay in Alfama or Graça: walkable, full of small restaurants, and on the line "
                "of tram 28 for the steep parts."
            ),
            _u("Perfect. Can you remind me to book the Sintra tickets a week ahead?"),
            _a("Will do. Pena Palace tickets are timed, so book them by 7 May."),
        ),
    ),
    DemoSession(
        id="demo-cooking",
        days_ago=8,
        system_prompt=None,
        turns=(
            _u(
                "I'm vegetarian and I really can't stand cilantro. Any quick weeknight dinner "
                "ideas?"
            ),
            _a(
                "A chickpea and spinach curry takes 25 minutes; finish it with parsley and lemon "
                "instead of cilantro."
            ),
            _u("I love spicy food, the hotter the better, but Alex prefers mild."),
            _a("Cook it mild and put chili oil on the table so you can make your bowl hotter."),
        ),
    ),
    DemoSession(
        id="demo-csv-bug",
        days_ago=3,
        system_prompt="You help Sam debug Python code.",
        turns=(
            _u(
                "My CSV parser always drops the last row. The loop is:\n"
                "for i in range(len(rows) - 1):\n    out.append(parse(rows[i]))"
            ),
            _a(
                "range(len(rows) - 1) stops one row early. Iterate over the rows directly: "
                "`for row in rows: out.append(parse(row))`. Let me run your tests.",
                tool_calls=[
                    {
                        "id": "call_tests_1",
                        "type": "function",
                        "function": {"name": "run_tests", "arguments": '{"path": "tests/"}'},
                    }
                ],
            ),
            {"role": "tool", "content": "12 passed in 0.4s", "tool_call_id": "call_tests_1"},
            _a("All 12 tests pass with the fix, including the one for the last row."),
            _u("Great, that fixed it. Thanks!"),
        ),
    ),
    DemoSession(
        id="demo-today",
        days_ago=0,
        system_prompt="You are Sam's helpful assistant. Use what you remember about Sam.",
        turns=(
            _u("Quick one: we land in Lisbon tomorrow evening!"),
            _a("Exciting! What can I help with before you go?"),
        ),
    ),
)

#: The new question the demo asks in the last session.
QUESTION = "Where should we have dinner on our first night, and what should we order?"
CURRENT_SESSION = SAMPLE[-1].id


@dataclass(slots=True)
class DemoResult:
    """What the demo wrote and found, for callers (and tests) that want the data, not the text."""

    db_path: str
    written: bool
    semantic: bool
    semantic_note: str | None
    session_ids: list[str]
    window_session: str
    window_budget: int
    window_ids: list[int]
    dropped_ids: list[int]
    recall_mode: str
    hits: list[SearchHit] = field(default_factory=list)
    context_block: str = ""
    prompt: list[Message] = field(default_factory=list)


def write_sample(manager: MemoryManager, *, now: datetime | None = None) -> bool:
    """Write the sample sessions (with their real-looking past times) unless already there.

    Returns False when every sample session already exists (a re-run on the same database).
    """
    if all(manager.session_exists(s.id) for s in SAMPLE):
        return False
    now = now or utc_now()
    for session in SAMPLE:
        if manager.session_exists(session.id):
            continue
        start = now - timedelta(days=session.days_ago)
        prompt = session.system_prompt
        manager.store.run(
            ops.create_session(
                session.id,
                user_id=DEMO_USER,
                system_prompt=prompt,
                system_prompt_tokens=0
                if prompt is None
                else manager.token_counter.count_message(Message(role="system", content=prompt)),
                metadata={"source": "harombe demo"},
                created_at=start,
            )
        )
        messages = [
            Message(created_at=start + timedelta(minutes=2 * i), **turn)
            for i, turn in enumerate(session.turns)
        ]
        manager.save_messages(session.id, messages, user_id=DEMO_USER)
    return True


def _open(db_path: str, semantic: bool) -> tuple[MemoryManager, str | None]:
    """A manager with semantic memory when it can be had, and why not when it cannot."""
    if semantic:
        try:
            return MemoryManager(db_path), None
        except ImportError as exc:  # MissingExtraError is an ImportError too
            note = f"semantic memory unavailable: {exc}. Showing keyword recall instead"
            return MemoryManager(db_path, embedding=None), note
    return MemoryManager(db_path, embedding=None), "semantic memory switched off (--no-semantic)"


def _preview(text: str, width: int = 90) -> str:
    flat = " ".join(text.split())
    return escape(flat if len(flat) <= width else flat[: width - 1] + "…")


def _recall(manager: MemoryManager, result: DemoResult, context_tokens: int) -> None:
    """Fill ``result`` with what recall finds for the question outside the current session."""
    hits = manager.search(QUESTION, top_k=5, user_id=DEMO_USER, exclude_session_id=CURRENT_SESSION)
    result.recall_mode = manager.retriever.mode
    result.hits = hits
    context = manager.get_relevant_context(
        QUESTION, context_tokens, user_id=DEMO_USER, exclude_session_id=CURRENT_SESSION, top_k=5
    )
    result.context_block = manager.format_context(context)
    from harombe_core.retrieval import rag_messages

    history = manager.get_recent_messages(CURRENT_SESSION, 200)
    session = manager.get_session(CURRENT_SESSION)
    prompt = None if session is None else session.system_prompt
    result.prompt = rag_messages(QUESTION, context, history, prompt)


def default_demo_path() -> str:
    """A fresh database in a new temporary folder (the demo never touches your real memory)."""
    return str(Path(tempfile.mkdtemp(prefix="harombe-demo-")) / "memory.db")


def run_demo(
    console: Console,
    db_path: str | None = None,
    *,
    semantic: bool = True,
    budget: int = 120,
    context_tokens: int = 300,
) -> DemoResult:
    """Write the sample, then print sessions, the token window and recall to ``console``."""
    path = os.path.expanduser(db_path) if db_path else default_demo_path()
    console.print(
        f"[bold]harombe demo[/bold]: writing a sample conversation to [cyan]{escape(path)}[/cyan]",
        soft_wrap=True,  # a path broken over two lines cannot be copied
    )
    if semantic:
        console.print(
            "Loading the bundled embedding model (all-MiniLM-L6-v2, offline; the first run on "
            "a machine also builds it for ONNX Runtime, once, in a few seconds)…"
        )
    manager, note = _open(path, semantic)
    with manager:
        written = write_sample(manager)
        if not written:
            console.print("The sample sessions are already in this database; reusing them.")
        manager.flush()
        result = DemoResult(
            db_path=path,
            written=written,
            semantic=manager.semantic_enabled,
            semantic_note=note,
            session_ids=[s.id for s in SAMPLE],
            window_session=SAMPLE[0].id,
            window_budget=budget,
            window_ids=[],
            dropped_ids=[],
            recall_mode="keyword",
        )
        _show_sessions(console, manager)
        _show_window(console, manager, result)
        _recall(manager, result, context_tokens)
        _show_recall(console, result)
    db = shlex.quote(path)
    console.print("\nExplore it yourself:")
    for command in (
        f"harombe sessions --db {db}",
        f"harombe history {SAMPLE[0].id} --max-tokens {budget} --db {db}",
        f"harombe export --format jsonl --db {db}",
    ):
        # One command a line, never wrapped, whatever the terminal's (or a pipe's) width.
        console.print(f"  {escape(command)}", soft_wrap=True)
    return result


def _show_sessions(console: Console, manager: MemoryManager) -> None:
    table = Table(title=f"1. Sessions of user '{DEMO_USER}' (newest activity first)")
    table.add_column("session", no_wrap=True)
    table.add_column("msgs", justify="right")
    table.add_column("started", no_wrap=True)
    table.add_column("first message")
    for session in manager.list_sessions(limit=None, user_id=DEMO_USER):
        first = manager.get_messages(session.id, limit=1)
        table.add_row(
            escape(session.id),
            str(session.message_count),
            f"{session.created_at:%Y-%m-%d}",
            _preview(first[0].content, 60) if first else "",
        )
    console.print(table)


def _show_window(console: Console, manager: MemoryManager, result: DemoResult) -> None:
    sid, budget = result.window_session, result.window_budget
    everything = manager.get_messages(sid)
    window = manager.get_window(sid, budget)
    kept = {m.id for m in window.messages if m.id is not None}
    result.window_ids = [m.id for m in everything if m.id in kept and m.id is not None]
    result.dropped_ids = [m.id for m in everything if m.id not in kept and m.id is not None]
    table = Table(title=f"2. Token window of '{sid}' for a {budget}-token budget")
    table.add_column("#", justify="right")
    table.add_column("role")
    table.add_column("tokens", justify="right")
    table.add_column("in context", no_wrap=True)
    table.add_column("content")
    session = manager.get_session(sid)
    if session is not None and session.system_prompt is not None:
        table.add_row(
            "-",
            "system",
            str(manager.store.run(ops.system_prompt_tokens(sid))),
            "[green]always[/green]",
            _preview(session.system_prompt, 70),
        )
    for i, message in enumerate(everything, start=1):
        inside = message.id in kept
        table.add_row(
            str(i),
            message.role,
            str(message.token_count),
            "[green]yes[/green]" if inside else "[red]fell out[/red]",
            _preview(message.content, 70),
        )
    console.print(table)
    dropped = len(result.dropped_ids)
    console.print(
        f"The newest {len(result.window_ids)} of {plural(len(everything), 'message')} fit in "
        f"{plural(budget, 'token')} ({window.tokens} used, system prompt included); "
        + (
            f"the {plural(dropped, 'older one')} fell out of the window. Recall brings back "
            "what matters from them, and from other sessions:"
            if dropped
            else "nothing fell out of the window. Recall adds what matters from other sessions:"
        )
    )


def _show_recall(console: Console, result: DemoResult) -> None:
    how = (
        "by meaning and keyword (all-MiniLM-L6-v2 vectors in SQLite, fused with BM25)"
        if result.recall_mode != "keyword"
        else "by keyword (SQLite FTS5, BM25)"
    )
    if result.semantic_note:
        console.print(f"[yellow]{escape(result.semantic_note)}[/yellow]", soft_wrap=True)
    console.print(f"\n[bold]New question in '{CURRENT_SESSION}':[/bold] {QUESTION}")
    table = Table(
        title=f"3. Recall across earlier sessions, {how}",
        caption="score ranks the hits: meaning and keyword fused, weighed with their context "
        "(neighbouring turns, session, speaker, time)",
    )
    table.add_column("rank", justify="right")
    table.add_column("score", justify="right")
    table.add_column("meaning", justify="right")
    table.add_column("keyword", justify="right")
    table.add_column("session", no_wrap=True)
    table.add_column("message")
    hits = result.hits
    for rank, hit in enumerate(hits, start=1):
        table.add_row(
            str(rank),
            f"{hit.score:.2f}",
            "-" if hit.vector_score is None else f"{hit.vector_score:.2f}",
            "-" if hit.keyword_score is None else f"{hit.keyword_score:.2f}",
            escape(hit.session_id),
            f"{hit.message.role}: " + _preview(hit.message.content, 70),
        )
    if not hits:
        table.add_row("-", "-", "-", "-", "-", "nothing found")
    console.print(table)
    console.print(
        Panel(
            escape(result.context_block) or "(nothing relevant fitted the budget)",
            title="4. RAG context block for the model",
            expand=False,
        )
    )
    console.print(
        Panel(
            _render_prompt(result.prompt, result.context_block),
            title="5. The prompt a model receives (system, recalled context, window, question)",
            expand=False,
        )
    )


def _render_prompt(messages: Sequence[Message], context_block: str = "") -> str:
    """The prompt, one message a line; the recalled context, already shown in panel 4, is named
    rather than printed a second time."""
    lines = []
    for message in messages:
        if context_block and message.content == context_block:
            lines.append(f"[bold]{message.role}[/bold]: [dim](the context block of panel 4)[/dim]")
            continue
        first, *rest = message.content.splitlines() or [""]
        lines.append(f"[bold]{message.role}[/bold]: {escape(first)}")
        lines.extend(f"    {escape(line)}" for line in rest)
    return "\n".join(lines)
