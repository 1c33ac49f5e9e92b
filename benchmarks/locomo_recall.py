"""Retrieval quality on LoCoMo: recall@k of annotated evidence turns, no LLM involved.

Each conversation is ingested through the public API: one user per conversation, one session
per LoCoMo session, the session date as every turn's time, the speaker as ``name`` and the
``dia_id`` in ``metadata``. Every question with evidence is asked through
``search_similar(question, top_k=k, user_id=...)``; recall@k is the share of its evidence turns
among the returned messages, averaged over questions.

    python benchmarks/locomo_recall.py --data ../shared/data/locomo/locomo_dev.json --k 5 10 25 50

The data is read from the path given; nothing of it is copied anywhere.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from datetime import datetime
from pathlib import Path
from typing import Any

# Run as a script, this folder comes first on sys.path: keep the other benchmark scripts in it
# from shadowing standard-library modules that harombe imports later.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
_EVIDENCE = re.compile(r"D(\d+):(\d+)")


def parse_evidence(items: list[str]) -> set[str]:
    """Normalise evidence ids ("D8:6; D9:17", "D30:05" -> {"D8:6", "D9:17", "D30:5"})."""
    out: set[str] = set()
    for item in items:
        for part in re.split(r"[;,\s]+", item):
            match = _EVIDENCE.fullmatch(part.strip())
            if match:
                out.add(f"D{int(match.group(1))}:{int(match.group(2))}")
    return out


def parse_date(text: str) -> datetime:
    """LoCoMo session dates look like "1:56 pm on 8 May, 2023"."""
    return datetime.strptime(text.strip(), "%I:%M %p on %d %B, %Y")


def turn_content(turn: dict[str, Any], with_captions: bool) -> str:
    """A turn as a chat app would store it: the text, and a shared photo's caption if any."""
    text = str(turn.get("text", ""))
    caption = turn.get("blip_caption")
    if with_captions and caption:
        text = f"{text} [shares a photo: {caption}]"
    return text


def ingest(mm: Any, sample: dict[str, Any], with_captions: bool) -> int:
    from harombe_core import Message

    user = sample["sample_id"]
    conv = sample["conversation"]
    roles = {conv["speaker_a"]: "user", conv["speaker_b"]: "assistant"}
    count = 0
    n = 1
    while f"session_{n}" in conv:
        sid = f"{user}-session-{n}"
        mm.create_session(user_id=user, session_id=sid, metadata={"locomo_session": n})
        when = parse_date(conv[f"session_{n}_date_time"])
        messages = [
            Message(
                role=roles.get(turn["speaker"], "user"),
                content=turn_content(turn, with_captions),
                name=turn["speaker"],
                metadata={"dia_id": turn["dia_id"]},
                created_at=when,
            )
            for turn in conv[f"session_{n}"]
        ]
        for message in messages:
            mm.save_message(sid, message, user_id=user)
        count += len(messages)
        n += 1
    return count


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True, type=Path, help="locomo JSON file")
    parser.add_argument("--k", type=int, nargs="+", default=[5, 10, 25, 50])
    parser.add_argument("--embedding", default="default", help="embedder spec ('none': keyword)")
    parser.add_argument("--db", default=None, help="database file (default: a temporary one)")
    parser.add_argument("--vector-weight", type=float, default=None)
    parser.add_argument("--keyword-weight", type=float, default=None)
    parser.add_argument("--no-captions", action="store_true", help="index turn text only")
    parser.add_argument("--limit", type=int, default=None, help="first N conversations only")
    args = parser.parse_args(argv)

    from harombe_core import MemoryManager

    data = json.loads(args.data.read_text(encoding="utf-8"))[: args.limit]
    tmp = tempfile.TemporaryDirectory()
    db = args.db or str(Path(tmp.name) / "locomo.db")
    embedding = None if args.embedding == "none" else args.embedding
    mm = MemoryManager(db, embedding=embedding, vector_store="chroma" if embedding else None)
    options: dict[str, Any] = {}
    if args.vector_weight is not None:
        options["vector_weight"] = args.vector_weight
    if args.keyword_weight is not None:
        options["keyword_weight"] = args.keyword_weight
    try:
        start = time.perf_counter()
        messages = sum(ingest(mm, sample, not args.no_captions) for sample in data)
        mm.flush()
        ingest_seconds = time.perf_counter() - start

        recall: dict[int, list[float]] = defaultdict(list)
        per_category: dict[tuple[int, int], list[float]] = defaultdict(list)
        latencies: list[float] = []
        first: list[float] = []  # each question's first search: its embedding is not cached
        questions = 0
        for sample in data:
            user = sample["sample_id"]
            for qa in sample["qa"]:
                evidence = parse_evidence(qa.get("evidence") or [])
                if not evidence:
                    continue
                questions += 1
                for k in args.k:
                    t0 = time.perf_counter()
                    found = mm.search_similar(qa["question"], top_k=k, user_id=user, **options)
                    latencies.append(time.perf_counter() - t0)
                    if k == args.k[0]:
                        first.append(latencies[-1])
                    got = {m.metadata.get("dia_id") for m in found}
                    score = len(evidence & got) / len(evidence)
                    recall[k].append(score)
                    per_category[(int(qa.get("category", 0)), k)].append(score)
    finally:
        mm.close()
        tmp.cleanup()

    mode = "keyword only" if embedding is None else f"hybrid, embedding={args.embedding}"
    print(f"LoCoMo retrieval ({mode}): {len(data)} conversations, {messages} messages, "
          f"{questions} questions with evidence")
    print("recall@k (%):")
    print("  " + "".join(f"{'@' + str(k):>8}" for k in args.k) + "  category")
    print("  " + "".join(f"{100 * statistics.fmean(recall[k]):8.1f}" for k in args.k) + "  all")
    for cat, label in CATEGORIES.items():
        if (cat, args.k[0]) in per_category:
            row = "".join(f"{100 * statistics.fmean(per_category[(cat, k)]):8.1f}" for k in args.k)
            count = len(per_category[(cat, args.k[0])])
            print(f"  {row}  {cat} {label} (n={count})")
    lat, fresh = sorted(latencies), sorted(first)
    print(f"ingest: {messages / ingest_seconds:,.0f} messages/s (saved one by one, embeddings "
          f"included, {ingest_seconds:.1f} s)")
    p50, p95 = fresh[len(fresh) // 2], fresh[int(len(fresh) * 0.95)]
    print(f"query latency, first search of each question (query embedded): p50 "
          f"{1000 * p50:.1f} ms, p95 {1000 * p95:.1f} ms")
    print(f"query latency, all {len(lat)} searches (repeats reuse the cached query embedding): "
          f"p50 {1000 * lat[len(lat) // 2]:.1f} ms, p95 {1000 * lat[int(len(lat) * 0.95)]:.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
