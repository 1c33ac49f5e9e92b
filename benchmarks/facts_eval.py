"""How well the offline fact extractor finds what LoCoMo's annotators wrote down about each speaker.

Each LoCoMo session lists ``observation`` s: facts about each speaker, each with the turn(s) it
came from (its evidence). Every turn of a conversation is given to
:class:`~harombe_core.facts.extract.OfflineExtractor` as a user message of its speaker (both
speakers are users telling about themselves), and:

* **coverage**: the share of observations whose evidence turn produced a fact (of that speaker);
* **precision**: the share of produced facts whose source turn is the evidence of an
  observation about that speaker.

The extractor's one threshold (``min_confidence``) is chosen by leave-one-conversation-out:
for each conversation, the threshold with the best F1 on the other conversations is applied
to it, and the held-out counts are summed. No model is involved, nothing is downloaded. With
``--pipeline`` the chosen threshold is also run through a real MemoryManager (save, end_session,
consolidation), and coverage and precision are measured again on the stored facts' sources.

    python benchmarks/facts_eval.py --data ../shared/data/locomo/locomo_dev.json
"""

# ruff: noqa: E402  (imports follow the sys.path guard below)
from __future__ import annotations

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]

import argparse
import json
import re
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

#: The development split in the ``shared`` folder beside the repository.
DEV_SPLIT = os.path.join(
    os.path.dirname(os.path.dirname(_HERE)), "shared", "data", "locomo", "locomo_dev.json"
)

THRESHOLDS = [0.0, 0.3, 0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.95]


@dataclass
class Conversation:
    """One LoCoMo conversation: turns (id, speaker, text) and observations (speaker, ids)."""

    name: str
    turns: list[tuple[str, str, str]]
    observations: list[tuple[str, frozenset[str]]]


def _ids(evidence: Any) -> frozenset[str]:
    items = evidence if isinstance(evidence, list) else [evidence]
    out: set[str] = set()
    for item in items:
        out.update(re.findall(r"D\d+:\d+", str(item)))
    return frozenset(out)


def load(path: str) -> list[Conversation]:
    with open(path, encoding="utf-8") as handle:
        data = json.load(handle)
    conversations = []
    for sample in data:
        talk = sample["conversation"]
        turns = []
        for key in sorted(
            (k for k in talk if re.fullmatch(r"session_\d+", k)), key=lambda k: int(k[8:])
        ):
            turns += [(t["dia_id"], t["speaker"], t.get("text", "")) for t in talk[key]]
        observations = []
        for session in sample.get("observation", {}).values():
            for speaker, items in session.items():
                for item in items:
                    ids = _ids(item[1] if len(item) > 1 else [])
                    if ids:
                        observations.append((speaker, ids))
        conversations.append(Conversation(sample["sample_id"], turns, observations))
    return conversations


def candidates(conversation: Conversation) -> list[tuple[str, str, float]]:
    """(turn id, speaker, confidence) of every proposal the extractor makes at threshold 0."""
    from harombe_core.facts.extract import OfflineExtractor, statements

    extractor = OfflineExtractor(min_confidence=0.0)
    out = []
    for turn, speaker, text in conversation.turns:
        for sentence in statements(text):
            found = extractor.sentence(sentence)
            if found is not None:
                out.append((turn, speaker, found[1]))
    return out


def score(
    conversation: Conversation, facts: Iterable[tuple[str, str]]
) -> tuple[int, int, int, int]:
    """(observations covered, observations, facts on evidence, facts) for (turn, speaker)s."""
    made = set(facts)
    evidence = {(t, s) for s, ids in conversation.observations for t in ids}
    covered = sum(1 for s, ids in conversation.observations if any((t, s) in made for t in ids))
    good = sum(1 for fact in made if fact in evidence)
    return covered, len(conversation.observations), good, len(made)


def at(cands: list[tuple[str, str, float]], threshold: float) -> list[tuple[str, str]]:
    return [(t, s) for t, s, c in cands if c >= threshold]


def f1(counts: tuple[int, int, int, int]) -> float:
    covered, observations, good, facts = counts
    recall = covered / observations if observations else 0.0
    precision = good / facts if facts else 0.0
    return 2 * recall * precision / (recall + precision) if recall + precision else 0.0


def _add(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, int, int, int]:
    x = tuple(p + q for p, q in zip(a, b, strict=True))
    return (x[0], x[1], x[2], x[3])


def pipeline(conversation: Conversation, threshold: float) -> tuple[int, int, int, int]:
    """The same measure on facts stored by a MemoryManager (consolidation included)."""
    from harombe_core.facts.extract import OfflineExtractor
    from harombe_core.manager import MemoryManager
    from harombe_core.models import Message

    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "m.db")
        extractor = OfflineExtractor(min_confidence=threshold)
        with MemoryManager(path, embedding=None, fact_extractor=extractor) as mm:
            turn_of: dict[int, tuple[str, str]] = {}
            for turn, speaker, text in conversation.turns:
                if not text.strip():
                    continue
                sid = f"{conversation.name}:{speaker}"
                mid = mm.save_message(sid, Message(role="user", content=text), user_id=speaker)
                turn_of[mid] = (turn, speaker)
            speakers = {s for _, s, _ in conversation.turns}
            made: list[tuple[str, str]] = []
            for speaker in speakers:
                mm.end_session(f"{conversation.name}:{speaker}")
                for fact in mm.get_facts(speaker, include_history=True):
                    made += [turn_of[m] for m in fact.message_ids if m in turn_of]
    return score(conversation, made)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Offline fact extraction on LoCoMo: coverage and precision, "
        "threshold chosen by leave-one-conversation-out."
    )
    parser.add_argument(
        "--data",
        default=str(DEV_SPLIT),
        help="LoCoMo JSON (default: the development split)",
    )
    parser.add_argument(
        "--pipeline",
        action="store_true",
        help="also measure the facts stored through a MemoryManager",
    )
    parser.add_argument("--json", help="write the results to this file")
    args = parser.parse_args(argv)
    conversations = load(args.data)
    cands = {c.name: candidates(c) for c in conversations}
    table = {c.name: {t: score(c, at(cands[c.name], t)) for t in THRESHOLDS} for c in conversations}
    print(f"{'held out':<10} {'threshold':>9} {'coverage':>9} {'precision':>9} {'facts':>6}")
    total = (0, 0, 0, 0)
    chosen: dict[str, float] = {}
    for held in conversations:
        rest = [c for c in conversations if c.name != held.name]

        def train_f1(t: float, rest: list[Conversation] = rest) -> float:
            sums = (0, 0, 0, 0)
            for c in rest:
                sums = _add(sums, table[c.name][t])
            return f1(sums)

        best = max(THRESHOLDS, key=lambda t: (train_f1(t), t))
        chosen[held.name] = best
        counts = table[held.name][best]
        total = _add(total, counts)
        covered, observations, good, facts = counts
        print(
            f"{held.name:<10} {best:>9.2f} {covered / observations:>9.3f} "
            f"{good / max(facts, 1):>9.3f} {facts:>6}"
        )
    covered, observations, good, facts = total
    coverage, precision = covered / observations, good / max(facts, 1)
    print(
        f"{'all (LOO)':<10} {'':>9} {coverage:>9.3f} {precision:>9.3f} {facts:>6}"
        f"   ({covered}/{observations} observations, {good}/{facts} facts)"
    )
    print("\nper threshold, all conversations (not cross-validated):")
    for t in THRESHOLDS:
        sums = (0, 0, 0, 0)
        for c in conversations:
            sums = _add(sums, table[c.name][t])
        print(
            f"  {t:.2f}: coverage {sums[0] / sums[1]:.3f} precision "
            f"{sums[2] / max(sums[3], 1):.3f} facts {sums[3]}"
        )
    results: dict[str, Any] = {
        "coverage": coverage,
        "precision": precision,
        "observations": observations,
        "facts": facts,
        "chosen": chosen,
    }
    if args.pipeline:
        sums = (0, 0, 0, 0)
        for c in conversations:
            sums = _add(sums, pipeline(c, chosen[c.name]))
        results["pipeline"] = {
            "coverage": sums[0] / sums[1],
            "precision": sums[2] / max(sums[3], 1),
        }
        print(
            f"\nthrough MemoryManager (LOO thresholds): coverage {sums[0] / sums[1]:.3f} "
            f"precision {sums[2] / max(sums[3], 1):.3f} ({sums[3]} source turns)"
        )
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(results, handle, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
