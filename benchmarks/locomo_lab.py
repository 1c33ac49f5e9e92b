"""A fast inner loop for ranking work on LoCoMo: gather once, re-rank in seconds.

``locomo_recall.py --cv`` ranks every question under a grid of thousands of weight settings,
which takes tens of minutes on a busy machine. To try one weight or one new evidence column,
this script gathers every question's candidates once (``Retriever.gather``, the pools the
``--k`` values need, every kind of evidence read) and keeps them in a pickle, then ranks them
under a small grid around the shipped weights, with each ``--set`` option's values added, and
prints the leave-one-conversation-out recall by category (the same choice rule as
``locomo_recall.py --cv``: best mean recall@k over the ``--k`` values on four conversations,
scored on the fifth). A run takes seconds to a minute. The full benchmark stays the final word.

    python benchmarks/locomo_lab.py --data ../shared/data/locomo/locomo_dev.json --gather
    python benchmarks/locomo_lab.py --data ../shared/data/locomo/locomo_dev.json \\
        --set person_weight=0,0.1,0.2,0.4

A new evidence column is tried by adding it to ``harombe_core.ranking.evidence`` with its
weight, then ``--set`` that weight (re-``--gather`` when ``Candidates`` changed shape). The
pickle holds the candidates' messages (the conversations' text): it is written to the
temporary folder by default and is for this machine only, never for the repository.
"""

from __future__ import annotations

import sys
from pathlib import Path

# As in locomo_recall.py: this folder's threading.py must not shadow the standard library.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]

import argparse  # noqa: E402
import itertools  # noqa: E402
import json  # noqa: E402
import pickle  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from dataclasses import fields, replace  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

#: The grid every run searches: the shipped weights and the values folds chose on the full
#: grid of ``locomo_recall.py`` (``--set`` replaces or adds an entry).
GRID: dict[str, tuple[float, ...]] = {
    "vector_weight": (0.5, 1.0),
    "neighbor_weight": (0.4, 0.7),
    "session_weight": (0.4, 0.7),
    "speaker_weight": (0.0, 0.1, 0.2),
    "length_weight": (0.4, 0.6),
    "statement_weight": (0.2, 0.3),
}


def _locomo() -> Any:
    """``locomo_recall.py`` as a module (its data shapes and scoring are this script's too),
    found at the end of the path, after the standard library it must not shadow."""
    sys.path.append(str(_HERE))
    import locomo_recall

    return locomo_recall


def pools(ks: list[int], candidates: int, least: int) -> dict[int, int]:
    """The candidate pool ``search`` gathers for each k (``max(k * candidates, least)``)."""
    return {k: max(k * candidates, least) for k in ks}


def gather(args: argparse.Namespace, lr: Any) -> None:
    """Ingest the conversations and pickle every question's candidates at every pool."""
    from harombe_core.store.base import SearchScope

    data = json.loads(args.data.read_text(encoding="utf-8"))
    questions = lr.questions_of(data)
    args.embedding, args.no_cache = "default", False
    with tempfile.TemporaryDirectory() as folder:
        mm = lr.open_manager(args, str(Path(folder) / "locomo.db"), False)
        try:
            for sample in data:
                lr.ingest(mm, sample, True)
            mm.flush()
            retriever = mm.retriever
            base = retriever.settings
            every = replace(base, time_weight=1.0, neighbor_weight=1.0)
            sizes = sorted(set(pools(args.k, base.candidates, base.min_candidates).values()))
            found = []
            for n, q in enumerate(questions):
                if n % 200 == 0:
                    print(f"  gather: question {n} of {len(questions)}", file=sys.stderr)
                scope = SearchScope(user_id=q.user)
                found.append(
                    {
                        size: retriever.gather(
                            q.text, size // base.candidates, scope, every, neighbors=True
                        )
                        for size in sizes
                    }
                )
        finally:
            mm.close()
    with args.candidates.open("wb") as out:
        pickle.dump({"questions": questions, "found": found, "settings": base}, out)
    print(f"candidates of {len(questions)} questions in {args.candidates}")


def parse_sets(items: list[str]) -> dict[str, tuple[float, ...]]:
    """``name=v1,v2`` options as grid entries (names checked against the settings)."""
    from harombe_core.ranking import RetrievalSettings

    known = {f.name for f in fields(RetrievalSettings)}
    out: dict[str, tuple[float, ...]] = {}
    for item in items:
        name, _, values = item.partition("=")
        if name not in known or not values:
            raise SystemExit(f"--set {item!r}: expected NAME=V1,V2 with a RetrievalSettings name")
        out[name] = tuple(float(v) for v in values.split(","))
    return out


def rank_grid(args: argparse.Namespace, lr: Any) -> None:
    """Leave-one-conversation-out recall of the grid over the pickled candidates."""
    from harombe_core.ranking import evidence, evidence_weights

    with args.candidates.open("rb") as source:
        saved = pickle.load(source)  # a file this script wrote on this machine
    questions, found, base = saved["questions"], saved["found"], saved["settings"]
    grid = {**GRID, **parse_sets(args.set)}
    names = list(grid)
    points = [dict(zip(names, p, strict=True)) for p in itertools.product(*grid.values())]
    settings = [replace(base, **p) for p in points]
    weights = np.stack([evidence_weights(s) for s in settings], axis=1)  # [column, point]
    # Points that share the fusion weights and whether neighbours are candidates share one
    # evidence table (as in locomo_recall.grid_scores).
    groups: dict[tuple[float, ...], list[int]] = {}
    for n, s in enumerate(settings):
        key = (s.vector_weight, s.keyword_weight, float(s.neighbor_weight > 0), s.name_free_weight)
        groups.setdefault(key, []).append(n)
    ks = args.k
    pool_of = pools(ks, base.candidates, base.min_candidates)
    recall_at = np.zeros((len(points), len(questions), len(ks)))
    started = time.perf_counter()
    for qi, q in enumerate(questions):
        for size, candidates in found[qi].items():
            wanted = [k for k in ks if pool_of[k] == size]
            for members in groups.values():
                messages, table = evidence(candidates, settings[members[0]])
                if not messages:
                    continue
                ids, _, found_at = lr.ranked_hits(messages, table, weights[:, members], q)
                for k in wanted:
                    got = found_at[:, min(k, len(ids)) - 1]
                    recall_at[members, qi, ks.index(k)] = got / len(q.evidence)
    results = {tuple(p.values()): recall_at[n] for n, p in enumerate(points)}
    scores, chosen, overall = lr.cross_validate(results, questions, ks)
    took = time.perf_counter() - started
    print(f"cross-validated recall@k (%), {len(points)} settings ({took:.0f} s)")
    print("\n".join(lr.table(lr.by_category(scores, questions, ks), ks)))
    for option in parse_sets(args.set):
        n = names.index(option)
        picks = ", ".join(str(point[n]) for point in chosen)
        print(f"{option} chosen per held-out conversation: {picks}")
    print("chosen on all: " + ", ".join(f"{n}={v}" for n, v in zip(names, overall, strict=True)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True, type=Path, help="locomo JSON file")
    parser.add_argument("--k", type=int, nargs="+", default=[5, 10, 25, 50])
    parser.add_argument("--gather", action="store_true", help="ingest and pickle the candidates")
    parser.add_argument(
        "--candidates",
        type=Path,
        default=Path(tempfile.gettempdir()) / "harombe-locomo-candidates.pkl",
        help="the pickle of gathered candidates (default: in the temporary folder)",
    )
    parser.add_argument(
        "--cache",
        type=Path,
        default=Path(tempfile.gettempdir()) / "harombe-locomo-embeddings.sqlite",
        help="embedding cache file (shared with locomo_recall.py)",
    )
    parser.add_argument(
        "--set", action="append", default=[], help="NAME=V1,V2: a weight's values in the grid"
    )
    args = parser.parse_args(argv)
    args.k = sorted(args.k)
    lr = _locomo()
    if args.gather or not args.candidates.exists():
        gather(args, lr)
    rank_grid(args, lr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
