"""Consolidation: what one proposal means against a user's current facts.

Every extractor (the offline one, an LLM) only proposes; this module decides, in the same
transaction that writes the result (:func:`harombe_core.facts.ops.consolidate`), so two
batches of one user never decide against facts the other is changing. The rules, in order:

1. **Repeat**: a proposal saying what a current fact of the same kind already says (the same
   words once stemmed, or vectors at least :data:`SAME_COSINE` alike) merges into it: the
   fact gains the proposal's source, nothing new is stored.
2. **Update**: a proposal with the subject of a current fact ("home city") but another value
   closes that fact (``valid_to`` = when the new one became true) and adds the new one, which
   names the old one in ``supersedes``. A proposal older than the current value (a backlog
   extracted late) is stored as history, already closed, and the current value stays; it fits
   into the subject's history (:func:`harombe_core.facts.ops.consolidate`) without overlap.
3. **Contradiction**: a proposal that says the opposite of a current fact (the same words but
   for a negation, or "love" against "hate") supersedes it as an update does.
4. **Completion**: a ``close`` proposal without a target closes the open task its words match
   best (status done); an explicit ``close``/``update`` target is honoured only when it is a
   current fact of this user (an LLM cannot reach anything else).

Nothing is deleted here: closing keeps the fact as history.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from harombe_core.facts.models import FactProposal
from harombe_core.store.fts import tokens

__all__ = [
    "SAME_COSINE",
    "Current",
    "Decision",
    "content_words",
    "decide",
    "same_words",
]

#: Cosine at or above which two texts of the same kind are one fact said twice.
SAME_COSINE = 0.93

#: Share of the words two texts have in common (Jaccard) from which they are one fact.
SAME_JACCARD = 0.8

_NEGATIONS = frozenset(
    {
        "not",
        "no",
        "never",
        "dont",
        "don",
        "doesn",
        "isn",
        "aren",
        "wasn",
        "won",
        "t",
        "longer",
        "anymore",
    }
)
_LIKE = frozenset({"love", "like", "enjoy", "prefer", "ador", "fan"})
_DISLIKE = frozenset({"hate", "dislik", "detest", "loath", "avoid", "can"})
_STOP = frozenset(
    {
        "i",
        "me",
        "my",
        "mine",
        "a",
        "an",
        "the",
        "to",
        "of",
        "and",
        "or",
        "in",
        "on",
        "at",
        "for",
        "with",
        "is",
        "am",
        "are",
        "was",
        "be",
        "been",
        "it",
        "that",
        "this",
        "so",
        "just",
        "realli",
        "veri",
        "do",
        "did",
        "have",
        "has",
        "had",
        "will",
        "would",
        "should",
        "need",
        "want",
        "remind",
        "finish",
        "done",
        "final",
        "alreadi",
        "now",
        "todai",
        "up",
        "s",
        "m",
        "ve",
        "ll",
    }
)
_WORD = re.compile(r"[^\W_]+")


@dataclass(slots=True)
class Current:
    """A current fact as consolidation sees it (read inside the writing transaction)."""

    id: int
    kind: str
    text: str
    subject: str | None
    status: str | None
    valid_from: int
    vector: Any = None


@dataclass(frozen=True, slots=True)
class Decision:
    """What to do with one proposal: ``merge`` into ``target``; ``insert`` it (closing
    ``target`` first when set: it is superseded; ``historical``: stored already closed, at
    ``closes_at``); ``close`` ``target``; or ``skip`` it (nothing it could refer to)."""

    action: str
    target: Current | None = None
    historical: bool = False


def _stems(text: str) -> list[str]:
    return [t for t in tokens(text.lower()) if _WORD.fullmatch(t)]


def content_words(text: str) -> frozenset[str]:
    """The stemmed words that carry a text's meaning (no stop words, negations or verbs of
    liking): what two statements of one fact share."""
    return (
        frozenset(
            w for w in _stems(text) if w not in _STOP and w not in _NEGATIONS and not w.isdigit()
        )
        - _LIKE
        - _DISLIKE
    )


def _polarity(text: str) -> int:
    """+1 or -1: whether the statement is negated (or a dislike), counting each sign."""
    words = _stems(text)
    sign = 1
    for w in words:
        if (w in _NEGATIONS and w != "t") or w in _DISLIKE:  # "don't" is "don" + "t"
            sign = -sign
    return sign


def same_words(a: str, b: str) -> bool:
    """Two texts that say the same: equal once stemmed, or nearly the same content words."""
    sa, sb = _stems(a), _stems(b)
    if sa == sb:
        return True
    wa, wb = content_words(a), content_words(b)
    if not wa or not wb or _polarity(a) != _polarity(b):
        return False
    return len(wa & wb) / len(wa | wb) >= SAME_JACCARD


def _opposite(a: str, b: str) -> bool:
    """The same content words, said with the opposite sign ("I eat meat" / "I don't eat meat",
    "I love sushi" / "I hate sushi")."""
    wa, wb = content_words(a), content_words(b)
    return bool(wa) and wa == wb and _polarity(a) != _polarity(b)


def _alike(vector: Any, other: Any) -> bool:
    if vector is None or other is None or vector.shape != other.shape:
        return False
    import numpy as np  # lazily: importing the manager stays light

    return float(np.dot(vector, other)) >= SAME_COSINE


def _task_match(current: Sequence[Current], text: str) -> Current | None:
    """The open task a completion ("I booked the flights") finishes: the one sharing the
    most content words, if they are at least half of the task's words."""
    done = content_words(text)
    best: tuple[float, Current] | None = None
    for fact in current:
        if fact.kind != "task" or fact.status != "open":
            continue
        words = content_words(fact.text)
        shared = len(done & words)
        if not shared or shared / len(words) < 0.5:
            continue
        score = shared / len(words | done)
        if best is None or score > best[0]:
            best = (score, fact)
    return None if best is None else best[1]


def decide(
    current: Sequence[Current],
    proposal: FactProposal,
    vector: Any,
    at: int,
) -> Decision:
    """What ``proposal`` (becoming true at ``at``, embedded as ``vector``) does to ``current``."""
    by_id = {fact.id: fact for fact in current}
    if proposal.action == "close":
        if proposal.target_id is not None:
            target = by_id.get(proposal.target_id)
            return Decision("close", target) if target is not None else Decision("skip")
        task = _task_match(current, proposal.text)
        return Decision("close", task) if task is not None else Decision("skip")
    if proposal.action == "set":
        return _decide_set(current, proposal)
    if proposal.action == "update":
        target = by_id.get(proposal.target_id or -1)
        if target is None:  # not this user's current fact: treat it as a new statement
            return decide(current, _as_add(proposal), vector, at)
        if same_words(target.text, proposal.text):
            return Decision("merge", target)
        return Decision("insert", target, historical=at < target.valid_from)
    same_kind = [f for f in current if f.kind == proposal.kind]
    for fact in same_kind:
        if same_words(fact.text, proposal.text) or _alike(vector, fact.vector):
            return Decision("merge", fact)
    if proposal.kind != "task":
        for fact in current:
            if fact.kind == "task":
                continue
            subject = proposal.subject is not None and fact.subject == proposal.subject
            if subject or _opposite(fact.text, proposal.text):
                return Decision("insert", fact, historical=at < fact.valid_from)
    return Decision("insert")


def _decide_set(current: Sequence[Current], proposal: FactProposal) -> Decision:
    """A key's new value: the fact its key names (its subject; else the subjectless fact of
    ``target_id``) is kept when the value is the same, else superseded; never a merge into
    another key's fact (a store's get of the key must read this value back)."""
    target = next((f for f in current if f.subject == proposal.subject), None)
    if target is None and proposal.target_id is not None:
        target = next(
            (f for f in current if f.id == proposal.target_id and f.subject is None), None
        )
    if target is not None and (target.text, target.kind) == (proposal.text, proposal.kind):
        return Decision("merge", target)
    return Decision("insert", target)


def _as_add(proposal: FactProposal) -> FactProposal:
    return FactProposal(
        "add",
        proposal.text,
        kind=proposal.kind,
        subject=proposal.subject,
        source=proposal.source,
        at=proposal.at,
    )
