"""Facts as retrieval keys on LoCoMo: recall@k of evidence turns with and without user-memory facts.

Each conversation is ingested as ``locomo_recall.py`` ingests it (one user, one session per
LoCoMo session), then its facts are extracted by the offline extractor (both speakers' turns).
For every question with evidence, the messages ``search`` returns are ranked beside the source
messages of the facts ``search_facts`` returns, fused by reciprocal rank with the facts' ranking
weighted ``w``; recall@k is the share of evidence turns in the top k. ``w = 0`` is plain search.
``w`` is chosen by leave-one-conversation-out (best mean recall over ``--k`` on the other
conversations) and reported cross-validated beside plain search. No model unless
``--embedding`` names one (default: keyword search only).

    python benchmarks/facts_recall.py --data ../shared/data/locomo/locomo_dev.json
"""

# ruff: noqa: E402  (imports follow the sys.path guard below)
from __future__ import annotations

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]

import argparse
import importlib.util
import json
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

#: The development split in the ``shared`` folder beside the repository.
DEV_SPLIT = os.path.join(
    os.path.dirname(os.path.dirname(_HERE)), "shared", "data", "locomo", "locomo_dev.json"
)

WEIGHTS = [0.0, 0.25, 0.5, 1.0, 2.0]
RRF_K = 60


def _locomo() -> Any:
    spec = importlib.util.spec_from_file_location("locomo_recall", Path(_HERE) / "locomo_recall.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["locomo_recall"] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def rankings(mm: Any, questions: list[Any], pool: int) -> list[tuple[Any, list, list]]:
    """Per question: (question, dia ids of searched messages, dia ids of fact sources)."""
    dia = {
        m.id: m.metadata.get("dia_id")
        for s in mm.list_sessions(limit=None)
        for m in mm.get_messages(s.id)
    }
    out = []
    for question in questions:
        hits = mm.search(question.text, top_k=pool, user_id=question.user)
        messages = [h.message.metadata.get("dia_id") for h in hits]
        facts = mm.search_facts(question.user, question.text, top_k=pool, include_history=True)
        sources: list[str] = []
        for hit in facts:
            for mid in hit.fact.message_ids:
                if dia.get(mid) and dia[mid] not in sources:
                    sources.append(dia[mid])
        out.append((question, messages, sources))
    return out


def fused(messages: list[str], sources: list[str], weight: float, k: int) -> set[str]:
    score: dict[str, float] = defaultdict(float)
    for rank, d in enumerate(messages):
        score[d] += 1.0 / (RRF_K + rank + 1)
    if weight:
        for rank, d in enumerate(sources):
            score[d] += weight / (RRF_K + rank + 1)
    return set(sorted(score, key=lambda d: -score[d])[:k])


def mean_recall(rows: list[tuple[Any, list, list]], weight: float, ks: list[int]) -> float:
    if not rows:
        return 0.0
    total = 0.0
    for question, messages, sources in rows:
        for k in ks:
            got = fused(messages, sources, weight, k)
            total += len(question.evidence & got) / len(question.evidence)
    return total / (len(rows) * len(ks))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="LoCoMo recall@k with facts as extra keys.")
    parser.add_argument("--data", default=str(DEV_SPLIT))
    parser.add_argument("--k", type=int, nargs="+", default=[5, 10, 25])
    parser.add_argument("--embedding", default="none", help="embedder spec ('none': keyword)")
    parser.add_argument("--json", help="write the results to this file")
    args = parser.parse_args(argv)
    lr = _locomo()
    from harombe_core import MemoryManager, OfflineExtractor

    data = lr.read_data(Path(args.data))
    questions = lr.questions_of(data)
    users = lr.conversation_ids(data, lr.Notes())
    per_conv: dict[int, list[tuple[Any, list, list]]] = {}
    pool = max(args.k) * 2
    with tempfile.TemporaryDirectory() as folder:
        for index, sample in enumerate(data):
            path = os.path.join(folder, f"c{index}.db")
            extractor = OfflineExtractor(roles=("user", "assistant"))
            options: dict[str, Any] = {"embedding": None, "vector_store": None}
            if args.embedding != "none":
                options = {"embedding": args.embedding}
            with MemoryManager(path, fact_extractor=extractor, **options) as mm:
                lr.ingest(mm, sample, True, index=index, user=users[index])
                for session in mm.list_sessions(limit=None):
                    mm.extract_facts(session.id)
                mm.flush()
                mine = [q for q in questions if q.conversation == index]
                per_conv[index] = rankings(mm, mine, pool)
    print(f"{'held out':<10}" + "".join(f"{'w':>6}") + f"{'plain':>9}{'facts':>9}")
    plain_all: list[tuple[Any, list, list]] = []
    chosen_scores: list[float] = []
    plain_scores: list[float] = []
    sizes: list[int] = []
    for held in per_conv:
        train = [r for c, rows in per_conv.items() if c != held for r in rows]
        best = max(WEIGHTS, key=lambda w: (mean_recall(train, w, args.k), -w))
        plain = mean_recall(per_conv[held], 0.0, args.k)
        with_facts = mean_recall(per_conv[held], best, args.k)
        print(f"{data[held]['sample_id']:<10}{best:>6.2f}{plain:>9.3f}{with_facts:>9.3f}")
        chosen_scores.append(with_facts)
        plain_scores.append(plain)
        sizes.append(len(per_conv[held]))
        plain_all += per_conv[held]
    total = sum(sizes)
    plain = sum(s * n for s, n in zip(plain_scores, sizes, strict=True)) / total
    facts = sum(s * n for s, n in zip(chosen_scores, sizes, strict=True)) / total
    print(
        f"mean recall over k={args.k}, {total} questions, leave-one-conversation-out: "
        f"plain {plain:.3f}, with facts {facts:.3f} ({facts - plain:+.3f})"
    )
    for k in args.k:
        line = f"  recall@{k}: " + ", ".join(
            f"w={w:g} {mean_recall(plain_all, w, [k]):.3f}" for w in WEIGHTS
        )
        print(line + "  (all conversations, not cross-validated)")
    if args.json:
        Path(args.json).write_text(json.dumps({"plain": plain, "facts": facts}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
