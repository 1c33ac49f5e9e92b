"""What user memory holds: facts with their history, the proposals extractors make, and the
session signals (outcome, importance) beside them.

A :class:`Fact` is one statement about a user (``kind``: a plain fact, a preference, a task, a
decision), kept with when it became true and when it stopped (``valid_from`` / ``valid_to``;
current facts have no ``valid_to``), when it was recorded, and the messages it came from. A
newer value of the same ``subject`` ("home city", "diet") closes the older fact instead of
deleting it, so the history stays answerable ("where did I live in 2024?").

Extractors never write: they return :class:`FactProposal` s, and one consolidation step
(:mod:`harombe_core.facts.consolidate`) decides what each means against the user's current
facts (merge a repeat, supersede an old value, close a task) inside one transaction.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from harombe_core.errors import InvalidInputError
from harombe_core.limits import current_limits
from harombe_core.validate import check_id, check_text, check_time, optional_id, show

__all__ = [
    "ACTIONS",
    "FACT_KINDS",
    "OUTCOMES",
    "TASK_STATUSES",
    "Fact",
    "FactHit",
    "FactProposal",
    "FactSource",
    "Profile",
    "SessionState",
    "check_kind",
    "check_outcome",
    "check_subject",
    "check_user",
]

#: What a fact can be; tasks also have a status.
FACT_KINDS = ("fact", "preference", "task", "decision")
#: A task's status: open until the user completes it (then done, and closed).
TASK_STATUSES = ("open", "done")
#: How a session ended, beside its summary's text.
OUTCOMES = ("resolved", "ongoing", "abandoned")
#: What an extractor may propose to consolidation (see :class:`FactProposal`).
ACTIONS = ("add", "update", "close")
#: Every proposal action: an extractor's, and ``set`` (a store item's put, by its key).
PROPOSAL_ACTIONS = (*ACTIONS, "set")
#: Longest subject key: a short label, not a sentence.
MAX_SUBJECT_CHARS = 80


def check_user(value: Any) -> str:
    """Every fact belongs to one user: a user id is required."""
    return check_id(value, "user_id")


def check_kind(value: Any) -> str:
    if value not in FACT_KINDS:
        raise InvalidInputError(f"kind must be one of {', '.join(FACT_KINDS)}, got {show(value)}.")
    return str(value)


def check_outcome(value: Any) -> str | None:
    if value is not None and value not in OUTCOMES:
        raise InvalidInputError(
            f"outcome must be one of {', '.join(OUTCOMES)} (or None to clear it), got "
            f"{show(value)}."
        )
    return value


def check_subject(value: Any) -> str | None:
    """A subject key, normalised (lower case, single spaces) so "Home City" finds "home city"."""
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip() or len(value) > MAX_SUBJECT_CHARS:
        raise InvalidInputError(
            f"subject must be a short non-empty str (at most {MAX_SUBJECT_CHARS} characters) "
            f"such as 'home city', or None; got {show(value)}."
        )
    check_text(value, "subject", limit=MAX_SUBJECT_CHARS, field="content_chars")
    return " ".join(value.lower().split())


def check_fact_text(value: Any, what: str = "fact text") -> str:
    text = check_text(value, what, limit=current_limits().content_chars, field="content_chars")
    if not text.strip():
        raise InvalidInputError(f"{what} must not be empty; say what is true of the user.")
    return " ".join(text.split())


@dataclass(frozen=True, slots=True)
class FactSource:
    """A message a fact came from (``message_id`` None when only the session is known)."""

    session_id: str
    message_id: int | None = None


@dataclass(frozen=True, slots=True)
class Fact:
    """One stored statement about a user, with its history and its sources.

    ``current`` facts have no ``valid_to``. ``origin`` is ``"extracted"`` (found in the
    conversation: it goes when every message it came from is deleted) or ``"user"`` (added or
    corrected by the user or the application: it stays until forgotten). ``supersedes`` is the
    id of the fact this one replaced (same subject, older value), if any.
    """

    id: int
    user_id: str
    kind: str
    text: str
    subject: str | None
    status: str | None
    valid_from: datetime
    valid_to: datetime | None
    recorded_at: datetime
    updated_at: datetime
    origin: str = "extracted"
    supersedes: int | None = None
    sources: tuple[FactSource, ...] = ()

    @property
    def current(self) -> bool:
        """True while the fact holds (it has not been closed or superseded)."""
        return self.valid_to is None

    @property
    def message_ids(self) -> list[int]:
        """The ids of the messages it came from."""
        return [s.message_id for s in self.sources if s.message_id is not None]

    @property
    def session_ids(self) -> list[str]:
        return list(dict.fromkeys(s.session_id for s in self.sources))

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready record (what export writes and import reads)."""
        return {
            "id": self.id,
            "user_id": self.user_id,
            "kind": self.kind,
            "text": self.text,
            "subject": self.subject,
            "status": self.status,
            "valid_from": self.valid_from.isoformat(),
            "valid_to": None if self.valid_to is None else self.valid_to.isoformat(),
            "recorded_at": self.recorded_at.isoformat(),
            "updated_at": self.updated_at.isoformat(),
            "origin": self.origin,
            "supersedes": self.supersedes,
            "sources": [[s.session_id, s.message_id] for s in self.sources],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Fact:
        """A fact from :meth:`to_dict`'s record; InvalidInputError names the bad field."""
        if not isinstance(data, Mapping):
            raise InvalidInputError(f"a fact record must be a dict, got {type(data).__name__}.")
        try:
            sources = tuple(
                FactSource(check_id(s, "source session_id"), None if m is None else int(m))
                for s, m in data.get("sources") or []
            )
            kind = check_kind(data["kind"])
            status = data.get("status")
            if kind == "task" and status not in TASK_STATUSES:
                raise InvalidInputError(f"a task's status must be open or done, got {status!r}.")
            valid_to = data.get("valid_to")
            supersedes = data.get("supersedes")
            return cls(
                id=int(data.get("id") or 0),
                user_id=check_user(data["user_id"]),
                kind=kind,
                text=check_fact_text(data["text"]),
                subject=check_subject(data.get("subject")),
                status=status if kind == "task" else None,
                valid_from=check_time(data["valid_from"], "valid_from"),
                valid_to=None if valid_to is None else check_time(valid_to, "valid_to"),
                recorded_at=check_time(data["recorded_at"], "recorded_at"),
                updated_at=check_time(data.get("updated_at") or data["recorded_at"], "updated_at"),
                origin="user" if data.get("origin") == "user" else "extracted",
                supersedes=None if supersedes is None else int(supersedes),
                sources=sources,
            )
        except (KeyError, TypeError, ValueError) as exc:
            if isinstance(exc, InvalidInputError):
                raise
            raise InvalidInputError(
                f"a fact record needs user_id, kind, text, valid_from and recorded_at ({exc!r})."
            ) from None


@dataclass(frozen=True, slots=True)
class FactProposal:
    """What an extractor proposes; consolidation decides what it becomes.

    ``add``: a statement (a repeat of a current fact merges into it; a new value of the same
    ``subject`` supersedes the old one). ``update``: replace the fact ``target_id`` with
    ``text`` (the old one is closed, not deleted). ``close``: the fact ``target_id`` stopped
    being true, or the task is done; without a target, ``text`` describes a completion
    ("I booked the flights") and closes the open task it matches, if any. ``set``: the value
    of the key ``subject`` (a LangGraph store put): it supersedes the current fact of that
    subject (else, with ``target_id``, that fact if it has no subject) and never merges into
    a fact of another key, so that a get of the key afterwards reads exactly this value.
    """

    action: str
    text: str
    kind: str = "fact"
    subject: str | None = None
    target_id: int | None = None
    source: FactSource | None = None
    at: datetime | None = None  # when it became true (default: its message's time, or now)

    def __post_init__(self) -> None:
        if self.action not in PROPOSAL_ACTIONS:
            raise InvalidInputError(
                f"action must be one of {', '.join(PROPOSAL_ACTIONS)}, got {show(self.action)}."
            )
        check_kind(self.kind)
        if self.action == "update" and self.target_id is None:
            raise InvalidInputError("an update names the fact it replaces: give target_id.")
        if self.action == "set" and self.subject is None:
            raise InvalidInputError("a set names the key it sets: give subject.")


@dataclass(frozen=True, slots=True)
class FactHit:
    """A fact found by :meth:`~harombe_core.manager.MemoryManager.search_facts`, with its score
    (higher is better; its sources say which messages it came from).

    ``score`` is the reciprocal-rank fusion of the two rankings, so it orders hits but says
    little about how well one matched; the evidence does: ``vector_score`` is the cosine
    similarity to the query (``None`` without semantic memory, or for a fact not embedded
    yet), ``keyword_score`` the keyword index's score (``None`` when no word matched). A user
    has few facts, so a search returns up to ``top_k`` of them however weak the match: keep
    those with evidence, or pass ``min_similarity``.
    """

    fact: Fact
    score: float
    vector_score: float | None = None
    keyword_score: float | None = None


@dataclass(frozen=True, slots=True)
class Profile:
    """A user's profile: the current facts and preferences that fit a token budget, most
    relevant first, and the text a model is given (``str(profile)``)."""

    user_id: str
    facts: list[Fact] = field(default_factory=list)
    text: str = ""
    tokens: int = 0

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True, slots=True)
class SessionState:
    """What an application says about a session beside its summary: how it ended
    (``outcome``: resolved, ongoing, abandoned, or None) and whether it matters (``important``,
    which the budgeted context weighs when it picks past sessions)."""

    session_id: str
    outcome: str | None = None
    important: bool = False


def optional_user(value: Any) -> str | None:
    return optional_id(value, "user_id")
