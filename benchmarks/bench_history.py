"""Importing a long chat history, and searching it: the shape of LongMemEval-style memories.

A user brings months of past conversations: ``--sessions`` sessions of ``--turns`` turns
(default 500 x 20), each session dated as LongMemEval spells it ("2023/05/20 (Sat) 02:21",
parsed with ``strptime``), six hours apart, arriving in shuffled order. The texts are
synthetic chat turns generated here (no data set), with one planted turn (the needle).

1. Import: each session is created with its date (``create_session(created_at=...)``) and its
   turns saved in one ``save_messages`` call with their times, into a database file with the
   default embedder (MiniLM on ONNX Runtime). Printed: messages/s until the last save returns
   (keyword search already finds them) and until ``flush()`` returns (every turn embedded),
   beside the embedder's own ``embed`` rate and sentence-transformers' ``encode`` rate on the
   same texts, in the same run (``--no-st`` skips the latter: it loads torch).
2. Growth: more sessions are imported until the history holds ``--grow-to`` turns (default
   25,000) of the one user.
3. Search over the whole history: the needle's rank when asked by its words, by a paraphrase
   that shares none of its content words, inside a ``since``/``until`` window around it, and
   by a question with its own date (``now=``, "last week") one week after it. Each search's
   latency is printed. Rank 1 is the goal; "-" means not in the top ``--k``.

    python benchmarks/bench_history.py
    python benchmarks/bench_history.py --sessions 100 --grow-to 5000 --no-st
"""

# ruff: noqa: E402  (imports follow the sys.path guard below)
from __future__ import annotations

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]

import argparse
import random
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from harombe_core import MemoryManager, Message

START = datetime(2023, 1, 1, 9, 0)
LONGMEMEVAL = "%Y/%m/%d (%a) %H:%M"
NEEDLE = "The spare key to the blue shed is taped under the third flowerpot by the gate"
NEEDLE_SESSION_SHARE = 0.6  # where in the history the needle's session is
QUESTIONS = {
    "its words": "where is the spare key to the blue shed?",
    "a paraphrase": "where did I hide the backup key for the garden hut?",
}
SUBJECTS = [
    "the pottery class",
    "my new job",
    "the trip to Lisbon",
    "our dinner plans",
    "the garden",
    "my sister's wedding",
    "the marathon training",
    "the book club",
    "the leaking roof",
    "the dog's vet visit",
    "the budget spreadsheet",
    "the guitar lessons",
]
VERBS = ["talked about", "worried about", "finished", "started", "planned", "loved", "skipped"]
TAILS = [
    "and it went better than I expected.",
    "but I still need to call them back.",
    "so maybe next weekend?",
    "which reminded me of last year.",
    "and honestly I am tired of it.",
    "if the weather holds.",
]


def turn_text(rng: random.Random) -> str:
    """A plausible chat turn: a subject, a verb, a tail, sometimes two sentences."""
    first = f"I {rng.choice(VERBS)} {rng.choice(SUBJECTS)} {rng.choice(TAILS)}"
    if rng.random() < 0.4:
        first += f" Did you see {rng.choice(SUBJECTS)}?"
    return first


def history(sessions: int, turns: int, first: int, rng: random.Random) -> list[dict[str, Any]]:
    """Sessions ``first`` .. ``first + sessions - 1`` as a user would bring them: a date
    string per session (LongMemEval's spelling) and the turns' texts."""
    out = []
    for s in range(first, first + sessions):
        when = START + timedelta(hours=6 * s)
        out.append(
            {
                "id": f"s{s:05d}",
                "date": when.strftime(LONGMEMEVAL),
                "turns": [turn_text(rng) for _ in range(turns)],
            }
        )
    return out


def plant(sessions: list[dict[str, Any]], number: int) -> datetime | None:
    """Put the needle in session ``number`` if it is among ``sessions``; its time."""
    for session in sessions:
        if session["id"] == f"s{number:05d}":
            session["turns"][7] = NEEDLE
            return datetime.strptime(session["date"], LONGMEMEVAL) + timedelta(minutes=7)
    return None


def import_sessions(mm: MemoryManager, sessions: list[dict[str, Any]]) -> int:
    """Each session created with its own date and its turns saved in one call; how many."""
    count = 0
    for session in sessions:
        when = datetime.strptime(session["date"], LONGMEMEVAL)
        mm.create_session(user_id="u", session_id=session["id"], created_at=when)
        mm.save_messages(
            session["id"],
            [
                Message(
                    role="user" if i % 2 == 0 else "assistant",
                    content=text,
                    created_at=when + timedelta(minutes=i),
                )
                for i, text in enumerate(session["turns"])
            ],
        )
        count += len(session["turns"])
    return count


def rate(count: int, seconds: float) -> str:
    return f"{count / seconds:8,.0f} msg/s ({seconds:6.1f} s)"


def rank_of(mm: MemoryManager, query: str, k: int, **options: Any) -> tuple[str, float]:
    """The needle's rank among the top ``k`` ("-" if absent) and the search's seconds."""
    started = time.perf_counter()
    hits = mm.search(query, top_k=k, user_id="u", **options)
    took = time.perf_counter() - started
    ranks = [n for n, h in enumerate(hits, 1) if h.message.content == NEEDLE]
    return (str(ranks[0]) if ranks else "-"), took


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=500, help="sessions timed at import")
    parser.add_argument("--turns", type=int, default=20, help="turns per session")
    parser.add_argument("--grow-to", type=int, default=25_000, help="turns searched at the end")
    parser.add_argument("--k", type=int, default=10, help="hits per search")
    parser.add_argument("--no-st", action="store_true", help="skip sentence-transformers")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    total_sessions = max(args.sessions, -(-args.grow_to // args.turns))
    needle_session = int(total_sessions * NEEDLE_SESSION_SHARE)

    first = history(args.sessions, args.turns, 0, rng)
    needle_at = plant(first, needle_session)
    texts = [t for s in first for t in s["turns"]]
    rng.shuffle(first)  # sessions arrive out of order

    from harombe_core.embeddings import OnnxEmbedder

    embedder = OnnxEmbedder()
    embedder.embed(texts[:32])  # the model loaded before any clock starts
    print(
        f"history: {args.sessions} sessions x {args.turns} turns = {len(texts):,} messages, "
        "dated as LongMemEval spells it, in shuffled order"
    )
    with tempfile.TemporaryDirectory() as folder:
        mm = MemoryManager(str(Path(folder) / "history.db"), embedding=embedder)
        try:
            started = time.perf_counter()
            count = import_sessions(mm, first)
            saved = time.perf_counter() - started
            mm.flush()
            embedded = time.perf_counter() - started
            started = time.perf_counter()
            embedder.embed(texts)
            own = time.perf_counter() - started
            print(f"  import, until the last save returns     {rate(count, saved)}")
            print(f"  import, until every turn is embedded    {rate(count, embedded)}")
            print(f"  the embedder's own embed() of the texts {rate(len(texts), own)}")
            print(f"  import (embedded) / embedder's own: {own / embedded:.2f}x")
            if not args.no_st:
                from harombe_core.embeddings import SentenceTransformerEmbedder

                st = SentenceTransformerEmbedder()
                st.embed(texts[:32])
                started = time.perf_counter()
                st.embed(texts)
                encode = time.perf_counter() - started
                print(f"  sentence-transformers encode()          {rate(len(texts), encode)}")
                print(f"  import (embedded) / sentence-transformers: {encode / embedded:.2f}x")

            grown = count
            if total_sessions > args.sessions:
                rest = history(total_sessions - args.sessions, args.turns, args.sessions, rng)
                needle_at = needle_at or plant(rest, needle_session)
                rng.shuffle(rest)
                started = time.perf_counter()
                grown += import_sessions(mm, rest)
                mm.flush()
                took = time.perf_counter() - started
                print(f"grown to {grown:,} messages of one user: {rate(grown - count, took)}")
            assert needle_at is not None
            needle_utc = needle_at.replace(tzinfo=UTC)
            window = {
                "since": needle_utc - timedelta(days=2),
                "until": needle_utc + timedelta(days=2),
            }
            searches = [(f"by {label}", query, {}) for label, query in QUESTIONS.items()] + [
                (f"by {label}, since/until +-2 days", query, window)
                for label, query in QUESTIONS.items()
            ]
            week_later = needle_utc + timedelta(days=7)
            for label, query in QUESTIONS.items():
                dated = query.rstrip("?") + " last week?"
                searches.append((f"by {label} + 'last week', now=", dated, {"now": week_later}))
            print(f"the needle in {grown:,} turns (session {needle_session}), rank in top {args.k}")
            for label, query, options in searches:
                rank, took = rank_of(mm, query, args.k, **options)
                print(f"  {label:<44} rank {rank:>2}  {1000 * took:7.1f} ms")
        finally:
            mm.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
