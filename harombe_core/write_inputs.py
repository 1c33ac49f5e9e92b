"""The arguments of the manager's writes, checked before any work: message batches (a lone
message or a non-iterable is refused, not iterated) costed in tokens, message id lists, and a
session's system prompt and metadata (kind and size, from the limits in force).

Kept apart from the manager so it reads as what it does; every check raises a typed
:class:`~harombe_core.errors.InvalidInputError` subclass whose message says how to fix it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from harombe_core.errors import InvalidMessageError
from harombe_core.flows import Flow, Work
from harombe_core.limits import current_limits
from harombe_core.models import Message
from harombe_core.tokens import TokenCounter
from harombe_core.validate import check_count, check_list, check_mapping, optional_text

__all__ = ["as_message", "costed", "id_list", "message_list", "session_fields"]

#: Messages of one write counted on the calling thread; a larger batch is counted in a worker
#: thread when async, so a bulk save never holds the event loop for long.
COUNT_IN_PLACE = 16


def message_list(messages: Any, what: str) -> list[Any]:
    """The messages of a bulk call as a list, refusing a lone message or a non-iterable."""
    if type(messages) is list:  # the common case, checked first: save_message goes this way
        return messages
    return check_list(
        messages,
        what,
        of="messages",
        single=(Message,),
        error=InvalidMessageError,
        hint="wrap a single message in a list or call save_message()",
    )


def id_list(values: Any, what: str) -> list[int]:
    """Message ids as ints, refusing a lone value, a non-iterable or a non-integer id."""
    ids = check_list(values, what, of="message ids")
    return [check_count(i, f"every id in {what}") for i in ids]


def session_fields(system_prompt: Any, metadata: Any) -> dict[str, Any]:
    """A session's system prompt and metadata, checked (kind and size) before any work."""
    limits = current_limits()
    optional_text(
        system_prompt,
        "system_prompt",
        limit=limits.system_prompt_chars,
        field="system_prompt_chars",
    )
    return check_mapping(
        metadata,
        "session metadata",
        limit=limits.session_metadata_chars,
        field="session_metadata_chars",
    )


def as_message(value: Any) -> Message:
    """A Message from a Message or a dict with role and content."""
    if isinstance(value, Message):
        return value
    if isinstance(value, Mapping):
        return Message.from_dict(value)
    raise InvalidMessageError(
        f"expected a harombe Message (or a dict with role and content), got "
        f"{type(value).__name__}. Adapters convert framework messages for you."
    )


def costed(messages: Any, what: str, counter: TokenCounter) -> Flow[list[Message]]:
    """The messages of a write as Messages with their token counts (a flow: a large batch is
    counted off the event loop when async)."""
    batch = message_list(messages, what)

    def cost() -> list[Message]:
        out = []
        for value in batch:
            message = as_message(value)
            out.append(message.with_ids(token_count=counter.count_message(message)))
        return out

    if len(batch) <= COUNT_IN_PLACE:
        return cost()
    prepared: list[Message] = yield Work(cost)
    return prepared
