"""Context strategies: which stored messages a model gets to see.

``simple`` is the token window: the newest messages that fit the budget, oldest first, with the
session's system prompt always included and counted. It reads newest-first from the store and
stops as soon as the budget is spent, so its cost follows the budget, not the session's length.
It never begins on a tool result whose call was cut off (a model API rejects that), and, if
asked, never on an assistant message either (LlamaIndex's rule).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from itertools import islice

from harombe_core.errors import Fix, InvalidBudgetError
from harombe_core.models import Message
from harombe_core.validate import check_budget, check_number, plural

__all__ = [
    "IMPORTANCE_THRESHOLD",
    "SUMMARY_MARKER",
    "ContextBudget",
    "Window",
    "check_budget",
    "fit_block",
    "hybrid_recent",
    "hybrid_window",
    "is_important",
    "newest_turn",
    "reserve_system",
    "summarization_window",
    "thread_path_newest_first",
    "window_newest",
    "with_newest_turn",
]


@dataclass(slots=True)
class Window:
    """The messages chosen (oldest first) and the tokens they cost, system prompt included."""

    messages: list[Message]
    tokens: int


def window_newest(
    newest_first: Iterable[Message],
    max_tokens: int,
    *,
    reserved_tokens: int = 0,
    start_on_user: bool = False,
) -> Window:
    """Take messages from ``newest_first`` until ``max_tokens - reserved_tokens`` is spent.

    ``reserved_tokens`` is what the caller must always spend first (the system prompt). Each
    message needs ``token_count`` set, as every stored message has.
    """
    budget = check_budget(max_tokens) - reserved_tokens
    taken: list[Message] = []
    used = 0
    for message in newest_first:
        cost = message.token_count or 0
        if used + cost > budget:
            break
        taken.append(message)
        used += cost
    taken.reverse()
    # Drop from the front anything a model would reject as a first message: a tool result whose
    # call was cut, an assistant turn whose tool calls lost their results, or (if asked) any
    # non-user turn. Tool results always follow their call, so trimming the front is enough.
    while taken:
        first = taken[0]
        orphan_tool = first.role == "tool"
        not_user = start_on_user and first.role not in ("user", "system")
        if not (orphan_tool or not_user):
            break
        used -= first.token_count or 0
        taken.pop(0)
    return Window(messages=taken, tokens=used + reserved_tokens)


# --------------------------------------------------------------------------------------------
# summarization, hybrid and threaded windows, and the context budget
#
# Every function below is pure: it gets messages that already carry ``token_count`` (stored
# messages always do; the caller counts a summary message before passing it) and returns a
# Window that never costs more than ``max_tokens``. The session's system prompt comes first and
# is always kept; a budget that cannot hold it is refused rather than silently exceeded.

#: Messages whose ``metadata["importance"]`` reaches this score are kept by the hybrid strategy.
IMPORTANCE_THRESHOLD = 0.7
#: ``metadata["harombe"]`` of the system message that carries a summary in a context.
SUMMARY_MARKER = "summary"


def is_important(message: Message, threshold: float = IMPORTANCE_THRESHOLD) -> bool:
    """True if the message is flagged ``metadata["important"] is True`` or scored high enough."""
    meta = message.metadata
    if meta.get("important") is True:
        return True
    score = meta.get("importance")
    return (
        isinstance(score, (int, float))
        and not isinstance(score, bool)
        and float(score) >= threshold
    )


def _cost(message: Message) -> int:
    return message.token_count or 0


def reserve_system(system: list[Message], max_tokens: int) -> int:
    """The tokens the system messages take from ``max_tokens``; refuses a budget too small
    for them (InvalidBudgetError) rather than silently exceeding it."""
    budget = check_budget(max_tokens)
    cost = sum(_cost(m) for m in system)
    if cost > budget:
        raise InvalidBudgetError(
            f"a budget of {plural(budget, 'token')} cannot hold the system prompt "
            f"({plural(cost, 'token')}).",
            fix=Fix(
                api="Raise max_tokens or shorten the system prompt.",
                cli="Raise --max-tokens or shorten the system prompt.",
            ),
        )
    return cost


def _trim_front(taken: list[Message], start_on_user: bool) -> list[Message]:
    while taken and (taken[0].role == "tool" or (start_on_user and taken[0].role != "user")):
        taken = taken[1:]
    return taken


def summarization_window(
    newest_first: Iterable[Message],
    max_tokens: int,
    *,
    system: list[Message] | None = None,
    summary: Message | None = None,
    keep_last: int = 6,
    start_on_user: bool = False,
) -> Window:
    """System prompt, then the summary of older messages (if it fits), then the newest ones.

    At most ``keep_last`` messages are kept verbatim; they get the budget before the summary
    does only when both cannot fit (recent turns matter more than a digest of old ones).
    """
    system = list(system or [])
    budget = max_tokens - reserve_system(system, max_tokens)
    recent, spent = hybrid_recent(islice(newest_first, keep_last), budget, start_on_user)
    return _after_summary(system, summary, spent, budget, recent)


def _after_summary(
    system: list[Message], summary: Message | None, spent: int, budget: int, body: list[Message]
) -> Window:
    """The system prompt, the summary if it still fits in ``budget`` beside the ``spent``
    tokens of ``body``, then ``body``: the summary is the first thing a tight budget drops."""
    head: list[Message] = []
    if summary is not None and summary.content and spent + _cost(summary) <= budget:
        head = [summary]
    messages = system + head + body
    return Window(messages=messages, tokens=sum(_cost(m) for m in messages))


def hybrid_window(
    newest_first: Iterable[Message],
    max_tokens: int,
    *,
    system: list[Message] | None = None,
    summary: Message | None = None,
    keep_last: int = 6,
    start_on_user: bool = False,
    importance_threshold: float = IMPORTANCE_THRESHOLD,
) -> Window:
    """System prompt, important older messages, the summary, then the newest ``keep_last``.

    Budget priority: the system prompt, the newest messages, the important ones (newest first),
    then the summary. Everything is returned in conversation order after the system prompt
    and the summary.
    """
    system = list(system or [])
    used = reserve_system(system, max_tokens)
    budget = max_tokens - used
    ordered = list(newest_first)
    recent, spent = hybrid_recent(ordered[:keep_last], budget, start_on_user)
    kept_ids = {id(m) for m in recent}
    important: list[Message] = []
    for message in ordered[keep_last:]:
        if id(message) in kept_ids or not is_important(message, importance_threshold):
            continue
        if spent + _cost(message) <= budget:
            important.append(message)
            spent += _cost(message)
    important.reverse()
    return _after_summary(system, summary, spent, budget, _trim_front(important, False) + recent)


def hybrid_recent(
    newest_first: Iterable[Message], budget: int, start_on_user: bool = False
) -> tuple[list[Message], int]:
    """The newest messages :func:`hybrid_window` keeps verbatim (oldest first) out of
    ``newest_first`` (its newest ``keep_last``), and the tokens they take from ``budget``
    (what is left after the system prompt); the important older ones share the rest."""
    recent: list[Message] = []
    spent = 0
    for message in newest_first:
        if spent + _cost(message) > budget:
            break
        recent.append(message)
        spent += _cost(message)
    recent = _trim_front(recent[::-1], start_on_user)
    return recent, sum(_cost(m) for m in recent)


def thread_path_newest_first(
    messages: Iterable[Message], leaf_id: int | None = None
) -> list[Message]:
    """The thread of ``leaf_id`` (default: the newest message), newest first, via ``parent_id``."""
    by_id = {m.id: m for m in messages if m.id is not None}
    if not by_id:
        return []
    current = by_id.get(max(by_id) if leaf_id is None else leaf_id)
    path: list[Message] = []
    seen: set[int] = set()
    while current is not None and current.id not in seen:
        assert current.id is not None
        seen.add(current.id)
        path.append(current)
        current = by_id.get(current.parent_id) if current.parent_id is not None else None
    return path


def newest_turn(newest_first: Iterable[Message]) -> list[Message]:
    """The newest turn, oldest first: the newest user message and everything after it.

    A session without a user message gives its newest message that is not a tool result, with
    the results that follow it (a tool result alone would be refused by a model API). Reads
    ``newest_first`` only as far as the turn goes.
    """
    taken: list[Message] = []
    for message in newest_first:
        taken.append(message)
        if message.role == "user":
            return taken[::-1]
    start = next((i for i, m in enumerate(taken) if m.role != "tool"), 0)
    return taken[: start + 1][::-1]


def with_newest_turn(window: list[Message], turn: list[Message]) -> list[Message]:
    """``window``, or, when its newest message is not ``turn``'s, the window with ``turn``
    appended whole (after the system prompt and summary; what the window kept of the turn
    moves with it). A model is never sent nothing: LlamaIndex's ``Memory`` never flushes its
    last turn and ``ChatMemoryBuffer`` returns its last message, whatever the budget."""
    if not turn or turn[-1].id in {m.id for m in window}:
        return window
    ids = {m.id for m in turn}
    return [m for m in window if m.id is None or m.id not in ids] + turn


@dataclass(slots=True)
class ContextBudget:
    """How a context of ``max_tokens`` is shared out, in the order it is assembled.

    Fractions of the budget left after the system prompt: the user profile, summaries of the
    user's recent sessions, relevant messages from past sessions, and a buffer kept free for
    the model's answer; the current session gets the rest.
    """

    user_profile: float = 0.10
    session_summaries: float = 0.15
    relevant_past: float = 0.20
    buffer: float = 0.10

    def __post_init__(self) -> None:
        for name in ("user_profile", "session_summaries", "relevant_past", "buffer"):
            setattr(self, name, check_number(getattr(self, name), name, low=0.0, high=1.0))
        parts = (self.user_profile, self.session_summaries, self.relevant_past, self.buffer)
        if sum(parts) >= 1:
            raise InvalidBudgetError(
                "ContextBudget fractions must be >= 0 and sum to less than 1 (the current "
                "session needs the rest)."
            )


def fit_block(messages: Iterable[Message], budget: int) -> list[Message]:
    """Messages in the given order while they fit ``budget`` (each is skipped if too big)."""
    taken: list[Message] = []
    spent = 0
    for message in messages:
        if spent + _cost(message) <= budget:
            taken.append(message)
            spent += _cost(message)
    return taken
