"""Which vector index should a SQLite memory use by default: its own database, or ChromaDB?

Measured in one run, on the same store, for each size in ``--sizes``:

1. Search latency (p50/p95 ms) of the vector step, scoped to one session, to one user, and
   across every user: the in-database index (``vector_store="database"``: exact over the
   stored vectors, a user's or session's read through SQLite, anything wider through the
   in-process matrix) beside ChromaDB's HNSW asked directly with the same filter, and beside
   ``vector_store="chroma"`` as harombe uses it (small scopes exact from SQLite, the rest HNSW
   plus the not-yet-indexed tail). Vectors are random unit vectors (384 dimensions, the
   bundled model's), queries are stored vectors plus noise.
2. Recall@10 of Chroma's answers against the exact top 10, for the same queries (the
   in-database index is exact: 1.0 by construction).
3. Memory: the matrix the in-database index keeps for searches across users, the process's
   peak RSS, and the sizes on disk (database with vectors; Chroma's folder).
4. Build time: writing the vectors into each index.

Then, once per run:

5. Recall@10 on real text (``--locomo``, LoCoMo dev conversations embedded with the bundled
   model): Chroma HNSW with a per-conversation filter and unfiltered, against exact.
6. Append cost: ``save_messages`` + ``flush()`` per message (the bundled model off the clock:
   a hashing embedder), on each index, median ms.
7. Install size of ChromaDB and the packages only it pulls in (from the installed
   distributions' RECORD files), beside the core's own dependencies.

    python benchmarks/bench_vector_index.py                      # 100,000 messages
    python benchmarks/bench_vector_index.py --sizes 100000,1000000 --queries 200
    python benchmarks/bench_vector_index.py --sizes 20000 --queries 50 --no-locomo   # quick
"""

from __future__ import annotations

import sys
from pathlib import Path

# Run as a script, this folder comes first on sys.path: keep the other benchmark scripts in it
# (threading.py) from shadowing standard-library modules.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import argparse  # noqa: E402
import contextlib  # noqa: E402
import importlib.metadata as md  # noqa: E402
import json  # noqa: E402
import re  # noqa: E402
import resource  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable, Iterator  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

from harombe_core.store import ops  # noqa: E402

DIM = 384
LOCOMO = Path("/work/shared/data/locomo/locomo_dev.json")


def unit(rows: int, rng: np.random.Generator) -> np.ndarray:
    x = rng.standard_normal((rows, DIM)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def du_mb(path: Path) -> float:
    if path.is_file():
        return path.stat().st_size / 2**20
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 2**20


def percentiles(samples: list[float]) -> str:
    s = sorted(samples)
    p95 = s[min(len(s) - 1, int(0.95 * len(s)))]
    return f"{statistics.median(s) * 1000:8.2f} {p95 * 1000:8.2f}"


def timed(fn: Callable[..., Any], *args: Any) -> tuple[float, Any]:
    start = time.perf_counter()
    out = fn(*args)
    return time.perf_counter() - start, out


# building a store ---------------------------------------------------------------------------
def build_store(path: Path, size: int, users: int, per_session: int, seed: int) -> np.ndarray:
    """``size`` messages in sessions of ``per_session``, sessions spread over ``users``; the
    vectors are written into ``message_vectors`` as the embedder would. Returns them (by id)."""
    from harombe_core import MemoryManager, Message
    from harombe_core.vectors.stored import StoredVectors

    rng = np.random.default_rng(seed)
    vectors = unit(size, rng)
    with MemoryManager(str(path), embedding=None, token_counter="approximate") as mm:
        stored = StoredVectors(mm.store, DIM)  # type: ignore[arg-type]
        done = 0
        session = 0
        while done < size:
            user = f"user-{session % users}"
            sid = mm.create_session(user_id=user, session_id=f"s{session}")
            count = min(per_session, size - done)
            ids = mm.save_messages(
                sid, [Message(role="user", content=f"m{done + i}") for i in range(count)]
            )
            stored.write(ids, vectors[done : done + count], [user] * count)
            done += count
            session += 1
        mm.store.run(ops.set_meta("embedding_model", "bench/random"))
        mm.store.run(ops.set_meta("embedding_dimension", str(DIM)))
    return vectors


class Fixed:
    """An embedder whose vectors the benchmark hands it (the store was filled by hand)."""

    name = "bench/random"
    dimension = DIM

    def embed(self, texts: list[str]) -> list[np.ndarray]:
        return [np.zeros(DIM, dtype=np.float32) for _ in texts]

    def embed_query(self, text: str) -> np.ndarray:
        return np.zeros(DIM, dtype=np.float32)


@contextlib.contextmanager
def semantic(path: Path, vector_store: str) -> Iterator[Any]:
    from harombe_core.store.sqlite import SQLiteStore
    from harombe_core.vectors.indexer import open_semantic_memory

    store = SQLiteStore(str(path))
    memory = open_semantic_memory(store, embedding=Fixed(), vector_store=vector_store, start=False)
    try:
        yield memory
    finally:
        memory.close()
        store.close()


def exact_top(vectors: np.ndarray, owner_rows: np.ndarray | None, q: np.ndarray, k: int) -> set:
    if owner_rows is None:  # no copy of the whole matrix
        sims = vectors @ q
        top = np.argpartition(-sims, k)[:k]
    else:
        sims = vectors[owner_rows] @ q
        top = owner_rows[np.argsort(-sims)[:k]]
    return {int(r) + 1 for r in top}  # message ids start at 1, in insertion order


def bench_size(args: argparse.Namespace, size: int, workdir: Path) -> list[dict[str, Any]]:
    from harombe_core.store.base import SearchScope
    from harombe_core.vectors.base import scope_metadata_filter

    path = workdir / f"bench-{size}.db"
    users = max(1, size // args.per_user)
    t_build, vectors = timed(lambda: build_store(path, size, users, args.per_session, args.seed))
    print(
        f"\n== {size:,} messages, {users:,} users, sessions of {args.per_session} "
        f"(store built in {t_build:.0f} s, {du_mb(path):.0f} MB with vectors)"
    )
    rng = np.random.default_rng(args.seed + 1)
    sessions = (size + args.per_session - 1) // args.per_session
    picks = rng.integers(0, size, args.queries)
    queries = vectors[picks] + 0.35 * unit(args.queries, rng)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)

    def scopes(kind: str, i: int) -> tuple[SearchScope | None, np.ndarray | None]:
        row = int(picks[i])
        session = row // args.per_session
        if kind == "session":
            lo = session * args.per_session
            return SearchScope(session_id=f"s{session}"), np.arange(
                lo, min(size, lo + args.per_session)
            )
        if kind == "user":
            user = session % users
            rows = np.concatenate(
                [
                    np.arange(s * args.per_session, min(size, (s + 1) * args.per_session))
                    for s in range(user, sessions, users)
                ]
            )
            return SearchScope(user_id=f"user-{user}"), rows
        return None, None

    results: list[dict[str, Any]] = []
    k = 10
    truth: dict[tuple[str, int], set] = {}
    for kind in ("session", "user", "all"):
        for i in range(args.queries):
            _, rows = scopes(kind, i)
            truth[(kind, i)] = exact_top(vectors, rows, queries[i], k)

    # the in-database index
    before = rss_mb()
    with semantic(path, "database") as mem:
        for kind in ("session", "user", "all"):
            lat = []
            got = 0.0
            if kind == "all":  # the matrix is loaded by the first search across users
                t_load, _ = timed(lambda: mem.nearest(queries[0], k, None))
                print(f"   matrix load (first search across users): {t_load:.2f} s")
            for i in range(args.queries):
                scope, _ = scopes(kind, i)
                dt, found = timed(mem.nearest, queries[i], k, scope)
                lat.append(dt)
                got += len({m.message_id for m in found} & truth[(kind, i)]) / k
            results.append(
                {
                    "size": size,
                    "index": "database (exact)",
                    "scope": kind,
                    "lat": lat,
                    "recall": got / args.queries,
                }
            )
        matrix = mem._matrix
        matrix_mb = (matrix.nbytes if matrix is not None else 0) / 2**20
    print(f"   in-database matrix: {matrix_mb:.0f} MB (RSS +{rss_mb() - before:.0f} MB)")

    if size > args.chroma_max:
        print(f"   chroma skipped above --chroma-max {args.chroma_max:,}")
        return results
    # Chroma: build the HNSW index from the stored vectors, then ask it
    with semantic(path, "chroma") as mem:
        t_index, _ = timed(lambda: mem.reindex(batch_size=1000, progress=False))
        chroma_mb = du_mb(Path(f"{path}.chroma"))
        print(
            f"   chroma index built in {t_index:.0f} s, folder {chroma_mb:.0f} MB, "
            f"peak RSS {peak_mb():.0f} MB"
        )
        index = mem.index
        for kind in ("session", "user", "all"):
            raw, via = [], []
            got_raw = got_via = 0.0
            for i in range(args.queries):
                scope, _ = scopes(kind, i)
                where = scope_metadata_filter(scope)
                dt, found = timed(index.query, queries[i], k, where)
                raw.append(dt)
                got_raw += len({m.message_id for m in found} & truth[(kind, i)]) / k
                dt, found = timed(mem.nearest, queries[i], k, scope)
                via.append(dt)
                got_via += len({m.message_id for m in found} & truth[(kind, i)]) / k
            results.append(
                {
                    "size": size,
                    "index": "chroma HNSW (direct, filtered)",
                    "scope": kind,
                    "lat": raw,
                    "recall": got_raw / args.queries,
                }
            )
            results.append(
                {
                    "size": size,
                    "index": "vector_store='chroma' (harombe)",
                    "scope": kind,
                    "lat": via,
                    "recall": got_via / args.queries,
                }
            )
    with contextlib.suppress(OSError):
        for p in workdir.glob(f"bench-{size}.db*"):
            if p.is_dir():
                import shutil

                shutil.rmtree(p)
            else:
                p.unlink()
    return results


# recall on real text ------------------------------------------------------------------------
def locomo_recall(args: argparse.Namespace) -> None:
    from harombe_core.embeddings import resolve_embedder
    from harombe_core.vectors.chroma import ChromaVectorIndex

    data = json.loads(LOCOMO.read_text())
    texts, convs = [], []
    for c, sample in enumerate(data[: args.locomo_conversations]):
        conv = sample["conversation"]
        for key, turns in conv.items():
            if re.fullmatch(r"session_\d+", key):
                for turn in turns:
                    texts.append(f"{turn.get('speaker', '')}: {turn.get('text', '')}")
                    convs.append(c)
    embedder = resolve_embedder("default")
    vecs = np.asarray(embedder.embed(texts), dtype=np.float32)
    qa = [q["question"] for s in data[: args.locomo_conversations] for q in s.get("qa", [])][:300]
    qconv = [c for c, s in enumerate(data[: args.locomo_conversations]) for _ in s.get("qa", [])][
        :300
    ]
    qv = np.asarray(embedder.embed(qa), dtype=np.float32)
    index = ChromaVectorIndex(mode="memory")
    index.upsert(list(range(len(texts))), vecs, [{"conv": int(c)} for c in convs])
    convs_a = np.asarray(convs)
    for label, filtered in (("filtered by conversation", True), ("unfiltered", False)):
        got = 0.0
        for q, c in zip(qv, qconv, strict=True):
            rows = np.flatnonzero(convs_a == c) if filtered else np.arange(len(texts))
            truth = {int(r) for r in rows[np.argsort(-(vecs[rows] @ q))[:10]]}
            found = index.query(q, 10, {"conv": c} if filtered else None)
            got += len({m.message_id for m in found} & truth) / 10
        print(
            f"   chroma HNSW recall@10 vs exact, LoCoMo {len(texts):,} turns, {len(qa)} "
            f"questions, {label}: {got / len(qa):.3f}   (database index: 1.000, exact)"
        )
    index.close()


# append cost --------------------------------------------------------------------------------
def append_cost(args: argparse.Namespace, workdir: Path) -> None:
    from harombe_core import MemoryManager, Message
    from harombe_core.testing import FakeEmbedder

    for vs in ("database", "chroma"):
        path = workdir / f"append-{vs}.db"
        with MemoryManager(
            str(path), embedding=FakeEmbedder(384), vector_store=vs, token_counter="approximate"
        ) as mm:
            sid = mm.create_session(user_id="u")
            for i in range(20):  # warm up
                mm.save_messages(sid, [Message(role="user", content=f"warm {i}")])
                mm.flush()
            lat = []
            for i in range(args.appends):
                msg = Message(role="user", content=f"message number {i} about topic {i % 17}")
                dt, _ = timed(lambda m=msg, s=sid: (mm.save_messages(s, [m]), mm.flush()))
                lat.append(dt)
        print(f"   append (save_messages + flush), {vs:<9}: p50/p95 ms {percentiles(lat)}")


# install size -------------------------------------------------------------------------------
def _requires(name: str, extras: tuple[str, ...] = ()) -> list[str]:
    try:
        reqs = md.requires(name) or []
    except md.PackageNotFoundError:
        return []
    out = []
    for r in reqs:
        extra = re.search(r"extra == ['\"]([\w-]+)", r)
        if extra and extra.group(1) not in extras:
            continue
        out.append(re.split(r"[ ;<>=!~\[(]", r, maxsplit=1)[0].lower())
    return out


def _closure(roots: list[str]) -> set[str]:
    seen: set[str] = set()
    todo = list(roots)
    while todo:
        n = todo.pop().replace("_", "-")
        if n in seen:
            continue
        try:
            md.distribution(n)
        except md.PackageNotFoundError:
            continue
        seen.add(n)
        todo.extend(_requires(n))
    return seen


def _size(name: str) -> int:
    dist = md.distribution(name)
    total = 0
    for f in dist.files or []:
        p = Path(dist.locate_file(f))
        with contextlib.suppress(OSError):
            total += p.stat().st_size
    return total


def install_size() -> None:
    # The core with its default embedder (extra ``onnx``): what a default install has.
    core = _closure(_requires("harombe-memory", ("onnx",)))
    chroma = _closure(["chromadb"]) - core
    mb = sum(_size(n) for n in chroma) / 2**20
    core_mb = sum(_size(n) for n in core) / 2**20
    big = sorted(chroma, key=_size, reverse=True)[:6]
    print(
        f"   chromadb and the {len(chroma) - 1} packages only it pulls in: {mb:.0f} MB "
        f"installed (largest: {', '.join(f'{n} {_size(n) / 2**20:.0f}' for n in big)}); "
        f"the core with its default embedder (extra onnx): {core_mb:.0f} MB"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 1)[1],
    )
    parser.add_argument("--sizes", default="100000", help="message counts, comma-separated")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--per-session", type=int, default=100)
    parser.add_argument(
        "--per-user", type=int, default=1000, help="messages per user (users = size / this)"
    )
    parser.add_argument("--appends", type=int, default=200)
    parser.add_argument(
        "--chroma-max",
        type=int,
        default=10**9,
        help="build no Chroma index above this many messages (its build is slow)",
    )
    parser.add_argument("--locomo-conversations", type=int, default=10)
    parser.add_argument("--no-locomo", action="store_true", help="skip the real-text recall")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--json", type=Path, help="also write the latency rows here")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s]
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench-vi-") as tmp:
        work = Path(tmp)
        print("== once per run")
        install_size()
        append_cost(args, work)
        if not args.no_locomo and LOCOMO.exists():
            locomo_recall(args)
        for size in sizes:
            rows.extend(bench_size(args, size, work))
    print("\n| messages | index | scope | p50 ms | p95 ms | recall@10 |")
    print("|---:|---|---|---:|---:|---:|")
    for r in rows:
        p50, p95 = percentiles(r["lat"]).split()
        print(
            f"| {r['size']:,} | {r['index']} | {r['scope']} | {p50} | {p95} | {r['recall']:.3f} |"
        )
    print(f"\npeak RSS {peak_mb():.0f} MB")
    if args.json:
        args.json.write_text(json.dumps([{**r, "lat": sorted(r["lat"])} for r in rows], indent=1))


if __name__ == "__main__":
    main()
