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

from harombe_core.errors import InvalidBudgetError
from harombe_core.models import Message

__all__ = ["Window", "check_budget", "window_newest"]


def check_budget(max_tokens: object, what: str = "max_tokens") -> int:
    """Validate a token budget: a non-negative int (bools are refused, 0 is valid)."""
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int):
        raise InvalidBudgetError(
            f"{what} must be an int number of tokens, got {type(max_tokens).__name__}."
        )
    if max_tokens < 0:
        raise InvalidBudgetError(f"{what} must be >= 0, got {max_tokens}.")
    return max_tokens


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
