"""What a ranking option costs a search: LoCoMo questions searched with it off and on.

Recall figures say what a ranking signal finds (``locomo_recall.py``); this says what it costs.
Every question of the development split is searched (``top_k`` 10, its conversation's user)
with the option at its off value and at its shipped value, in alternating order, each search
with the embedder's query cache cleared, so both pay for embedding the query as a new
question would. It prints the p50 and mean wall-clock milliseconds and CPU milliseconds (all
threads) of each, and their ratio, over all questions and over those the option changes
work for (for ``name_free_weight``: the questions that name a speaker).

    python benchmarks/bench_ranking_cost.py --data ../shared/data/locomo/locomo_dev.json
    python benchmarks/bench_ranking_cost.py --data PATH --option name_free_weight --off 0
    python benchmarks/bench_ranking_cost.py --data PATH --option fact_weight --on 0.4 \
        --facts observations

``--on`` compares another value than the shipped one (an opt-in option, off by default);
``--facts observations`` first extracts LoCoMo's observations as the users' facts through the
LLM extractor (``locomo_recall.py --facts``), what ``fact_weight`` reads.

The conversations are ingested with the default embedder into a temporary database (``--db``
keeps it for the next run). Nothing of the data is copied anywhere else.
"""

from __future__ import annotations

import sys
from pathlib import Path

# As in locomo_recall.py: this folder's threading.py must not shadow the standard library.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from typing import Any  # noqa: E402


def _locomo() -> Any:
    """``locomo_recall.py`` as a module (its ingestion and questions are this script's too)."""
    sys.path.append(str(_HERE))
    import locomo_recall

    return locomo_recall


def _row(label: str, off: list[float], on: list[float]) -> str:
    p50_off, p50_on = statistics.median(off), statistics.median(on)
    mean_off, mean_on = statistics.fmean(off), statistics.fmean(on)
    return (
        f"  {label:<34} p50 {p50_off:7.1f} -> {p50_on:7.1f} ms ({p50_on / p50_off:.2f}x)   "
        f"mean {mean_off:7.1f} -> {mean_on:7.1f} ms ({mean_on / mean_off:.2f}x)"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True, type=Path, help="locomo JSON file")
    parser.add_argument("--option", default="name_free_weight", help="a search weight option")
    parser.add_argument("--off", type=float, default=0.0, help="the option's off value")
    parser.add_argument("--limit", type=int, default=None, help="first N questions only")
    parser.add_argument("--db", default=None, help="database file (kept and reused if given)")
    parser.add_argument("--on", type=float, default=None, help="the value (default: shipped)")
    parser.add_argument(
        "--facts", choices=("observations",), default=None, help="extract facts first"
    )
    args = parser.parse_args(argv)
    lr = _locomo()
    from harombe_core import MemoryManager
    from harombe_core.ranking import RetrievalSettings, named_speakers
    from harombe_core.store.base import SearchScope

    shipped = getattr(RetrievalSettings(), args.option) if args.on is None else args.on
    data = json.loads(args.data.read_text(encoding="utf-8"))
    questions = lr.questions_of(data)[: args.limit]
    tmp = tempfile.TemporaryDirectory()
    db = args.db or str(Path(tmp.name) / "locomo.db")
    fresh = not Path(db).exists()
    with MemoryManager(db) as mm:
        if fresh:
            lr.ingest_all(mm, data, True, args.facts)
        mm.flush()
        cache = mm.embedder
        wall: dict[float, list[float]] = {args.off: [], shipped: []}
        cpu: dict[float, list[float]] = {args.off: [], shipped: []}
        named: list[bool] = []
        for n, q in enumerate(questions):
            values = (args.off, shipped) if n % 2 == 0 else (shipped, args.off)
            for value in values:
                cache.clear()
                w0, c0 = time.perf_counter(), time.process_time()
                mm.search(q.text, top_k=10, user_id=q.user, **{args.option: value})
                cpu[value].append(1000 * (time.process_time() - c0))
                wall[value].append(1000 * (time.perf_counter() - w0))
            found = mm.retriever.gather(
                q.text, 10, SearchScope(user_id=q.user), mm.retriever.settings
            )
            named.append(bool(named_speakers(q.text, found.messages.values())))
    tmp.cleanup()
    subset = [i for i, flag in enumerate(named) if flag]
    print(
        f"{args.option} {args.off} -> {shipped}: {len(questions)} LoCoMo questions, "
        f"{len(subset)} naming a speaker; top_k 10, the query cache cleared before each search"
    )
    for label, index in (("all questions", range(len(questions))), ("naming a speaker", subset)):
        if not index:
            continue
        for kind, times in (("wall", wall), ("CPU", cpu)):
            off = [times[args.off][i] for i in index]
            on = [times[shipped][i] for i in index]
            print(_row(f"{label}, {kind}", off, on))
    return 0


if __name__ == "__main__":
    sys.exit(main())
