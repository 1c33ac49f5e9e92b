"""The checkpoint serializer of :class:`~langchain_harombe.HarombeSaver`: LangGraph's, safe.

LangGraph's ``JsonPlusSerializer`` revives any ``module.name`` a stored row names (with a
warning) unless ``LANGGRAPH_STRICT_MSGPACK`` is set; a crafted row then runs code on
``get_state``, ``get_tuple`` or ``list``. :class:`HarombeSerializer` writes exactly what it
writes (rows stay readable by LangGraph's savers and the reverse), and reads through
:class:`~harombe_core.checkpoint_safety.TypePolicy`: LangGraph's safe types, the state classes
of LangChain and LangGraph modules, and what the application allow-lists with LangGraph's own
names (``allowed_msgpack_modules=``, ``saver.with_allowlist(...)``, which ``compile`` calls in
strict mode). Anything else raises :class:`~harombe_core.errors.UnsafeCheckpointError` naming
the type, after a decode in which it was neither imported nor called; so does a pickle row.

Revival itself is LangGraph's (its ext hook, handed the policy as its allow-list), so what a
row turns into is what LangGraph would make of it, and the policy is asked before LangGraph
imports anything.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from contextvars import ContextVar
from typing import Any

import ormsgpack
from langgraph.checkpoint.serde.event_hooks import SerdeEvent, register_serde_event_listener
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer, _create_msgpack_ext_hook

from harombe_core.errors import UnsafeCheckpointError
from harombe_core.integration import AllowList, TypePolicy, check_row, refused_tag

__all__ = ["HarombeSerializer"]

_PLAIN = ("null", "bytes", "bytearray")


class HarombeSerializer(JsonPlusSerializer):
    """``JsonPlusSerializer`` that revives only allowed types and refuses the rest.

    Args:
        allowed_msgpack_modules: Types the application stores itself and wants back, as
            ``(module, name)`` pairs or classes (exact names: no prefixes). ``True`` revives
            anything, as LangGraph's default does: only for a database no one else can write.
        pickle_fallback: As LangGraph's: pickle what msgpack cannot store, and read pickles.
            Off by default; a pickle row is then refused.
    """

    def __init__(
        self, *, allowed_msgpack_modules: AllowList = None, pickle_fallback: bool = False
    ) -> None:
        super().__init__(
            pickle_fallback=pickle_fallback,
            allowed_json_modules=True,  # old JSON rows are checked by the policy first
            allowed_msgpack_modules=None,
        )
        self.policy = TypePolicy(allowed_msgpack_modules)

    def with_msgpack_allowlist(
        self, extra_allowlist: Iterable[tuple[str, ...] | type]
    ) -> HarombeSerializer:
        """A copy that also revives ``extra_allowlist`` (what ``with_allowlist`` calls)."""
        clone = copy.copy(self)
        clone.policy = self.policy.extended(extra_allowlist)
        return clone

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        """The stored value, or UnsafeCheckpointError if it names a type not allowed."""
        tag, payload = data
        if tag == "msgpack":
            gate = _Gate(self.policy, [])
            hook = _create_msgpack_ext_hook(gate)  # type: ignore[arg-type]
            reading = _READING.set(gate)
            try:
                value = ormsgpack.unpackb(payload, ext_hook=hook, option=ormsgpack.OPT_NON_STR_KEYS)
            finally:
                _READING.reset(reading)
            if gate.refused:
                raise gate.refused[0]
            return value
        if tag == "json":
            check_row(tag, payload, self.policy)
        elif not (tag in _PLAIN or self.policy.allow_all or self._reads_pickle(tag)):
            raise refused_tag(tag)
        return super().loads_typed(data)

    def _reads_pickle(self, tag: str) -> bool:
        return tag == "pickle" and self.pickle_fallback


class _Gate:
    """The allow-list LangGraph's ext hook asks (``key in allowed``) before it imports a type:
    the policy's answer, with every refusal noted so the read raises once decoding is done
    (the hook swallows exceptions, and returns a refused type's raw arguments instead).
    A method call the hook blocks by itself (it calls none but ``datetime.fromisoformat``)
    reaches the gate of the read in progress through LangGraph's serde events."""

    __slots__ = ("policy", "refused")

    def __init__(self, policy: TypePolicy, refused: list[UnsafeCheckpointError]) -> None:
        self.policy, self.refused = policy, refused

    def __contains__(self, key: object) -> bool:
        module, name = key if isinstance(key, tuple) and len(key) == 2 else (key, "")
        if self.policy.permits(module, name):
            return True
        self.refused.append(self.policy.refusal(module, name))
        return False


#: The gate of the msgpack read in progress in this thread or task (None outside one).
_READING: ContextVar[_Gate | None] = ContextVar("harombe_checkpoint_read", default=None)


def _on_serde_event(event: SerdeEvent) -> None:
    gate = _READING.get()
    if gate is not None and event["kind"] == "msgpack_method_blocked":
        method = f"{event['name']}.{event.get('method', '?')}"
        gate.refused.append(gate.policy.refusal(event["module"], method))


register_serde_event_listener(_on_serde_event)
