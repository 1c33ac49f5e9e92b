"""Cost of scoring a user's keyword search with the user's own statistics.

A keyword search scoped to a user or a session scores its hits with BM25 over the scope's
own statistics (row count, average length, each word's rows in the scope), so that nothing
another user writes changes them (docs/ranking.md). FTS5's ``bm25()`` would use the whole
file's. This times ``keyword_search`` scoped to one user, both ways in the same run, on two
keyword-only stores of ``--messages`` messages (cached under ``$TMPDIR``, built once):

* ``--users`` users (100 by default) sharing the file, searching one of them;
* one user owning every message, searching that user.

It prints p50 / p95 milliseconds and the scope/file ratio of the medians. The corpus is
bench_search.py's (Zipf-distributed made-up words in chat templates); the queries mix the
templates' everyday words with a few drawn from the vocabulary.

    python benchmarks/bench_keyword_scope.py
    python benchmarks/bench_keyword_scope.py --messages 10000 --queries 50
    python benchmarks/bench_keyword_scope.py --locomo ../shared/data/locomo/locomo_dev.json
"""

# ruff: noqa: E402  (imports follow the sys.path guard below)
from __future__ import annotations

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]

import argparse
import importlib.util
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from harombe_core import MemoryManager, Message
from harombe_core.store import fts_scope
from harombe_core.store.base import SearchScope


def _corpus() -> Any:
    spec = importlib.util.spec_from_file_location("bench_search", Path(_HERE) / "bench_search.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def build(path: Path, messages: int, users: int, sessions: int) -> None:
    """A keyword-only store of ``messages`` messages in ``sessions`` sessions of ``users``."""
    if path.exists():
        return
    corpus = _corpus()
    rng = random.Random(7)
    partial = path.with_suffix(".partial")
    for leftover in partial.parent.glob(partial.name + "*"):
        leftover.unlink()
    t0 = time.perf_counter()
    per_session = messages // sessions
    with MemoryManager(str(partial), embedding=None) as mm:
        for s in range(sessions):
            batch = [
                Message(role="user" if i % 2 == 0 else "assistant", content=corpus.sentence(rng))
                for i in range(per_session)
            ]
            mm.save_messages(f"s{s}", batch, user_id=f"u{s % users}")
        mm.flush()
    partial.rename(path)
    seconds = time.perf_counter() - t0
    print(f"built {path.name}: {messages:,} messages, {users} users in {seconds:.0f} s")


def queries(n: int) -> list[str]:
    corpus = _corpus()
    rng = random.Random(11)
    out = []
    for _ in range(n):
        words = rng.choices(corpus.VOCABULARY, weights=corpus._WEIGHTS, k=rng.randint(1, 3))
        out.append(
            rng.choice(["what did I say about the {}", "the {} yesterday", "{}"]).format(
                " ".join(words)
            )
        )
    return out


def measure(path: Path, user: str, texts: list[str], scoped: bool) -> tuple[list[float], float]:
    """Wall seconds of each search, and the CPU seconds per search (a busy machine does not
    inflate it as it does the wall clock)."""
    fts_scope.SCOPE_STATISTICS = scoped
    out = []
    with MemoryManager(str(path), embedding=None) as mm:
        scope = SearchScope(user_id=user)
        mm.store.keyword_search(texts[0], limit=10, scope=scope)  # warm
        cpu = time.process_time()
        for text in texts:
            t0 = time.perf_counter()
            mm.store.keyword_search(text, limit=10, scope=scope)
            out.append(time.perf_counter() - t0)
        return out, (time.process_time() - cpu) / len(texts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--users", type=int, default=100)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument(
        "--folder", default=os.path.join(tempfile.gettempdir(), "harombe_bench_scope")
    )
    parser.add_argument("--locomo", help="also time a LoCoMo conversation (locomo JSON file)")
    args = parser.parse_args(argv)
    folder = Path(args.folder)
    folder.mkdir(parents=True, exist_ok=True)
    shared = folder / f"shared_{args.messages}_{args.users}.db"
    alone = folder / f"alone_{args.messages}.db"
    build(shared, args.messages, args.users, max(args.users * 10, 100))
    build(alone, args.messages, 1, 100)
    texts = queries(args.queries)
    default = fts_scope.SCOPE_STATISTICS
    print(
        f"keyword_search scoped to one user, top 10, {args.queries} queries (p50 / p95 wall ms, "
        "CPU ms per search; scope: the scope's statistics, file: FTS5's bm25 over the file)"
    )
    for label, path, user in (
        (f"{args.users} users share {args.messages:,} messages", shared, "u3"),
        (f"one user owns {args.messages:,} messages", alone, "u0"),
    ):
        rows = {how: measure(path, user, texts, how == "scope") for how in ("file", "scope")}
        for how, (values, cpu) in rows.items():
            ordered = sorted(values)
            p95 = ordered[min(int(len(ordered) * 0.95), len(ordered) - 1)]
            print(
                f"  {label:40s} {how:6s} {1000 * statistics.median(values):8.2f} / "
                f"{1000 * p95:8.2f}   CPU {1000 * cpu:8.2f}"
            )
        wall = statistics.median(rows["scope"][0]) / statistics.median(rows["file"][0])
        cpu = rows["scope"][1] / rows["file"][1]
        print(f"  {label:40s} scope/file ratio: p50 {wall:.2f}x, CPU {cpu:.2f}x")
    if args.locomo:
        locomo(Path(args.locomo), min(args.queries, 150))
    fts_scope.SCOPE_STATISTICS = default
    return 0


def locomo(path: Path, n: int) -> None:
    """CPU per keyword search of a conversation-sized user: LoCoMo's first conversation saved
    for two users (the questions' words are in both), searched as one of them."""
    import json

    data = json.loads(path.read_text(encoding="utf-8"))
    turns = [t for k, v in data[0]["conversation"].items() if isinstance(v, list) for t in v]
    texts = [q["question"] for q in data[0]["qa"]][:n]
    with MemoryManager(":memory:", embedding=None) as mm:
        for user in ("u0", "u1"):
            batch = [Message(role="user", content=t["text"], name=t["speaker"]) for t in turns]
            mm.save_messages(f"c-{user}", batch, user_id=user)
        mm.flush()
        scope = SearchScope(user_id="u0")
        print(f"LoCoMo conversation 1 ({len(turns)} turns) for each of two users, {n} questions:")
        for limit in (10, 100):
            cpu = {}
            for how in ("file", "scope"):
                fts_scope.SCOPE_STATISTICS = how == "scope"
                start = time.process_time()
                for text in texts:
                    mm.store.keyword_search(text, limit=limit, scope=scope)
                cpu[how] = (time.process_time() - start) / n
            print(
                f"  top {limit:<3d}  file CPU {1000 * cpu['file']:6.2f} ms, scope CPU "
                f"{1000 * cpu['scope']:6.2f} ms, ratio {cpu['scope'] / cpu['file']:.2f}x"
            )


if __name__ == "__main__":
    raise SystemExit(main())
