"""Speed of semantic memory: save_message with it on and off, and search at scale.

Three measurements, each with a peer or a floor in the same run:

1. ``save_message`` p50 with semantic memory on (the default embedder, background worker) and
   off, and a raw SQLite INSERT as the floor. Saving must stay cheap: embedding happens on the
   worker thread in batches, never in the caller.
2. ``search_similar`` p50/p95 over ``--messages`` messages in ``--sessions`` sessions (owned by
   ``--users`` users): unscoped, user-scoped and session-scoped; beside ChromaDB queried
   directly (unfiltered, and with its own ``where`` filter on the session) and the keyword
   (FTS5) side alone. The corpus is embedded with ``--corpus-embedding`` (``fake``: the
   deterministic hashing embedder, so 100,000 messages build in minutes); the query side is
   timed with that embedder, and the default model's query-embedding p50 is printed
   separately, so the total for the real model is the sum of the two. Each search row also
   gives the CPU milliseconds per search (all threads), which a busy machine does not inflate
   as it does the wall-clock percentiles.
3. Resident memory (max RSS) of the process at the end.

    python benchmarks/bench_search.py                          # 100,000 messages, 1,000 sessions
    python benchmarks/bench_search.py --messages 10000 --sessions 100 --queries 200
"""

from __future__ import annotations

import argparse
import random
import resource
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from harombe_core.store import ops

# Run as a script, this folder comes first on sys.path: keep the other benchmark scripts in it
# from shadowing standard-library modules that harombe imports later.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

# Chat text has a long-tailed vocabulary: a few words are everywhere, most are rare. The corpus
# draws content words from a Zipf distribution over a made-up vocabulary, so both the keyword
# index and the vectors see realistic term frequencies (no data set needed).
_SYLLABLES = ["ka", "lo", "mi", "ren", "tor", "vin", "sa", "pe", "qua", "dri", "ul", "zen"]
VOCABULARY = [
    a + b + c for a in _SYLLABLES for b in _SYLLABLES for c in _SYLLABLES
][:1500]
_WEIGHTS = [1.0 / (rank + 1) for rank in range(len(VOCABULARY))]
TEMPLATES = [
    "I {} the {} at {} yesterday.",
    "Did you see the {} {} near {}?",
    "We should {} our {} before {} starts.",
    "My {} said the {} was {} again.",
    "Thanks! The {} and the {} sound {}.",
]


def sentence(rng: random.Random) -> str:
    words = rng.choices(VOCABULARY, weights=_WEIGHTS, k=3)
    return rng.choice(TEMPLATES).format(*words) + f" ({rng.randrange(10**5)})"


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return 1000 * ordered[min(int(len(ordered) * q), len(ordered) - 1)]


def timed(fn: Callable[[], Any], n: int, cpu: list[float] | None = None) -> list[float]:
    """Wall seconds of ``n`` calls; with ``cpu``, also appends the mean CPU seconds per call
    (every thread of the process: a busy machine does not inflate it)."""
    out = []
    cpu_start = time.process_time()
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    if cpu is not None:
        cpu.append((time.process_time() - cpu_start) / n)
    return out


def scoped_searches(
    search: Callable[..., Any], texts: Iterator[str], args: argparse.Namespace, rng: random.Random
) -> tuple[dict[str, list[float]], dict[str, float]]:
    """Unscoped, user-scoped and session-scoped searches, ``args.queries`` of each: the wall
    seconds of every call and the CPU seconds per call, by scope."""
    calls: dict[str, Callable[[], Any]] = {
        "unscoped": lambda: search(next(texts), top_k=10),
        "user-scoped": lambda: search(
            next(texts), top_k=10, user_id=f"u{rng.randrange(args.users)}"),
        "session-scoped": lambda: search(
            next(texts), top_k=10, session_id=f"s{rng.randrange(args.sessions)}"),
    }
    rows: dict[str, list[float]] = {}
    cpu: dict[str, float] = {}
    for label, call in calls.items():
        spent: list[float] = []
        rows[label] = timed(call, args.queries, spent)
        cpu[label] = spent[0]
    return rows, cpu


def print_rows(rows: dict[str, list[float]], cpu: dict[str, float]) -> None:
    for label, values in rows.items():
        per_call = f"  {1000 * cpu[label]:7.2f}" if label in cpu else ""
        print(f"  {label:36s} {pct(values, 0.5):7.2f} / {pct(values, 0.95):7.2f}{per_call}")


def bench_save(n: int, folder: Path) -> None:
    from harombe_core import MemoryManager, Message

    rng = random.Random(1)
    texts = [sentence(rng) for _ in range(n)]
    results: dict[str, list[float]] = {}
    for label, embedding in (("semantic off", None), ("semantic on", "default")):
        path = str(folder / f"save-{label[-3:].strip()}.db")
        with MemoryManager(path, embedding=embedding) as mm:
            sid = mm.create_session(user_id="u")
            it = iter(texts)
            results[label] = timed(
                lambda: mm.save_message(sid, Message(role="user", content=next(it))), n  # noqa: B023
            )
            t0 = time.perf_counter()
            mm.flush()
            if embedding:
                print(f"  (flush after saving {n}: {time.perf_counter() - t0:.2f} s)")
    conn = sqlite3.connect(folder / "raw.db", isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("CREATE TABLE m (id INTEGER PRIMARY KEY, session TEXT, content TEXT)")
    it = iter(texts)
    results["raw SQLite INSERT (floor)"] = timed(
        lambda: conn.execute("INSERT INTO m (session, content) VALUES ('s', ?)", (next(it),)), n
    )
    conn.close()
    print(f"save_message, {n} messages one by one (p50 / p95 ms):")
    for label, values in results.items():
        print(f"  {label:28s} {pct(values, 0.5):7.3f} / {pct(values, 0.95):7.3f}")
    ratio = statistics.median(results["semantic on"]) / statistics.median(results["semantic off"])
    print(f"  on/off p50 ratio: {ratio:.2f}x")


def bench_search(args: argparse.Namespace, folder: Path) -> None:
    from harombe_core import MemoryManager, Message
    from harombe_core.store.base import SearchScope
    from harombe_core.testing import FakeEmbedder

    corpus_embedder: Any = FakeEmbedder(384) if args.corpus_embedding == "fake" else "default"
    rng = random.Random(2)
    per_session = args.messages // args.sessions
    db = Path(args.db) if args.db else folder / "search.db"
    t0 = time.perf_counter()
    from harombe_core.config import MemoryConfig

    build = MemoryConfig.model_validate({"vector_store": {"batch_size": 512}})
    with MemoryManager(str(db), embedding=corpus_embedder, config=build) as mm:
        for s in range(args.sessions if mm.store.run(ops.count_messages()) == 0 else 0):
            mm.save_messages(
                f"s{s}",
                [Message(role="user" if i % 2 == 0 else "assistant", content=sentence(rng))
                 for i in range(per_session)],
                user_id=f"u{s % args.users}",
            )
        mm.flush()
    print(f"built {args.messages:,} messages in {args.sessions:,} sessions "
          f"({args.users} users) in {time.perf_counter() - t0:.0f} s, embedder "
          f"{args.corpus_embedding}")

    queries = [sentence(rng) for _ in range(args.queries)]
    with MemoryManager(str(db), embedding=corpus_embedder) as mm:
        mm.flush()
        semantic = mm._semantic
        index = semantic.index
        q = iter(queries * 10)
        scoped, cpu = scoped_searches(mm.search_similar, q, args, rng)
        rows = {f"search_similar, {label}": values for label, values in scoped.items()}
        cpu = {f"search_similar, {label}": value for label, value in cpu.items()}
        vectors = [semantic.embed_query(t) for t in queries]
        v = iter(vectors * 10)
        rows["peer: Chroma query, unfiltered"] = timed(
            lambda: index.query(next(v), 10), args.queries)
        rows["peer: Chroma query, where session"] = timed(
            lambda: index.query(next(v), 10,
                                {"session_id": f"s{rng.randrange(args.sessions)}"}),
            args.queries)
        rows["peer: FTS5 keyword, session"] = timed(
            lambda: mm.store.keyword_search(
                next(q), limit=10, scope=SearchScope(session_id=f"s{rng.randrange(args.sessions)}")
            ), args.queries)
    print(f"search at {args.messages:,} messages, top 10, {args.queries} queries each "
          "(p50 / p95 ms, and CPU ms per search where measured):")
    print_rows(rows, cpu)

    if args.corpus_embedding == "fake":
        # End to end with the real model on the query side: the corpus vectors stay the
        # hashing embedder's (same dimension), so rankings are meaningless but every cost of
        # a real query (model, vector search, keyword search, store reads) is paid.
        from harombe_core.retrieval import Retriever
        from harombe_core.vectors.indexer import open_semantic_memory

        with MemoryManager(str(db), embedding=None) as plain:
            real = open_semantic_memory(
                plain.store, embedding="default", vector_store="chroma",
                allow_model_change=True, start=False,
            )
            retriever = Retriever(plain.store, real)
            retriever.search_similar("warm up", top_k=10)
            texts = iter(f"{t} ({i})" for i, t in enumerate(queries * 10))
            real_rows, real_cpu = scoped_searches(retriever.search_similar, texts, args, rng)
            real.close()
        print("search_similar with the default model embedding each (distinct) query:")
        print_rows(real_rows, real_cpu)

    from harombe_core.embeddings import resolve_embedder

    model = resolve_embedder("default", cache=False)  # the model itself, not the shared cache
    model.embed_query("warm up")
    texts = iter(f"{t} ({i})" for i, t in enumerate(queries * 10))  # distinct: no cache hits
    embed = timed(lambda: model.embed_query(next(texts)), min(args.queries, 200))
    print(f"  default model query embedding      {pct(embed, 0.5):7.2f} / {pct(embed, 0.95):7.2f}"
          "  (add to the search_similar rows for the real model)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--sessions", type=int, default=1_000)
    parser.add_argument("--users", type=int, default=100)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--saves", type=int, default=500)
    parser.add_argument("--corpus-embedding", choices=["fake", "default"], default="fake")
    parser.add_argument("--skip-save", action="store_true")
    parser.add_argument("--db", help="keep the search corpus here and reuse it on the next run")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        if not args.skip_save:
            bench_save(args.saves, folder)
        bench_search(args, folder)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"max resident memory: {rss:,.0f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
