"""Which types a stored LangGraph checkpoint row may revive, and a check of rows before copying.

LangGraph's serializer stores an object as a msgpack "ext" payload naming its
``(module, name)`` and arguments; reading the row imports ``module`` and calls ``name`` with
them. Its default is permissive (any name is imported and called, with a warning), so a row
that names ``builtins.exec`` or ``os.system`` runs code when a thread is read. A harombe
database is a file people hand each other and copy into shared servers (``harombe migrate``),
so harombe decides by a :class:`TypePolicy` instead, and refuses everything else with
:class:`~harombe_core.errors.UnsafeCheckpointError` before anything is imported or called:

* the types LangGraph itself lists as safe (``SAFE_MSGPACK_TYPES``: messages, ``Send``,
  ``Command``, ``Interrupt``, datetimes, UUIDs, paths, ...), copied here so a migration can check
  rows where LangGraph is not installed (a test keeps the copy a superset of LangGraph's),
  and LangGraph's ``SearchItem`` (the ``Item`` a store search returns), which its list lacks;
* the state types LangGraph writes for ordinary graphs of LangChain and LangGraph modules:
  pydantic models, dataclasses, enums and named tuples *defined* in ``langchain_core``,
  ``langgraph``, ``langchain`` or ``langmem`` (a function, an exception or any other callable
  there is not one: only classes are constructed);
* exactly the ``(module, name)`` pairs the application allow-lists, with LangGraph's own names
  (``allowed_msgpack_modules``, ``with_allowlist``); ``True`` is LangGraph's permissive default,
  for those who trust every writer of the database.

Rows stored with ``pickle`` are refused the same way (a pickle is code), and so is any
serialisation tag this module does not know. :func:`check_row` walks a row's payloads without
constructing anything, so ``harombe migrate`` refuses a crafted row before copying it; the
LangChain adapter's serializer asks the same policy while it revives.
"""

from __future__ import annotations

import importlib
import json
import sys
from collections.abc import Iterable
from dataclasses import is_dataclass
from enum import Enum
from typing import Any, Literal

from harombe_core.errors import Fix, InvalidInputError, UnsafeCheckpointError, requires_extra

__all__ = [
    "EXTRA_SAFE_TYPES",
    "FRAMEWORK_MODULES",
    "LANGGRAPH_SAFE_TYPES",
    "AllowList",
    "TypePolicy",
    "check_row",
    "refused_tag",
]

#: LangGraph's ``SAFE_MSGPACK_TYPES`` (langgraph-checkpoint 4.x), revived without asking.
LANGGRAPH_SAFE_TYPES: frozenset[tuple[str, str]] = frozenset(
    {
        *(("datetime", n) for n in ("datetime", "date", "time", "timedelta", "timezone")),
        ("uuid", "UUID"),
        ("decimal", "Decimal"),
        ("builtins", "set"),
        ("builtins", "frozenset"),
        ("collections", "deque"),
        *(
            ("ipaddress", f"IPv{v}{kind}")
            for v in (4, 6)
            for kind in ("Address", "Interface", "Network")
        ),
        *(
            (m, n)
            for m in ("pathlib", "pathlib._local")
            for n in ("Path", "PosixPath", "WindowsPath")
        ),
        ("zoneinfo", "ZoneInfo"),
        ("re", "compile"),
        *(
            (f"langchain_core.messages.{module}", f"{name}{chunk}")
            for module, name in (
                ("base", "BaseMessage"),
                ("human", "HumanMessage"),
                ("ai", "AIMessage"),
                ("system", "SystemMessage"),
                ("chat", "ChatMessage"),
                ("tool", "ToolMessage"),
                ("function", "FunctionMessage"),
            )
            for chunk in ("", "Chunk")
        ),
        ("langchain_core.messages.modifier", "RemoveMessage"),
        ("langchain_core.documents.base", "Document"),
        *(
            ("langgraph.types", n)
            for n in (
                "Send",
                "TimeoutPolicy",
                "Interrupt",
                "Command",
                "StateSnapshot",
                "PregelTask",
                "Overwrite",
            )
        ),
        ("langgraph.store.base", "Item"),
        ("langgraph.store.base", "GetOp"),
    }
)

#: Types beside LangGraph's list that its serializer writes for ordinary graphs: a store
#: search's ``SearchItem`` (a subclass of the listed ``Item``, serialised by the same branch),
#: which LangMem's search tool keeps as a ToolMessage's artifact.
EXTRA_SAFE_TYPES: frozenset[tuple[str, ...]] = frozenset({("langgraph.store.base", "SearchItem")})

#: The one ``(module, class, method)`` LangGraph's serializer calls a method of.
_SAFE_METHODS = frozenset({("datetime", "datetime", "fromisoformat")})

#: Packages whose state classes (pydantic, dataclass, enum, named tuple) are revived by default.
#: LangMem is LangChain's memory library: its short-term memory keeps a ``RunningSummary``
#: dataclass in the graph's state.
FRAMEWORK_MODULES = ("langchain_core", "langgraph", "langchain", "langmem")

#: Serialisation tags that construct nothing (msgpack and json are walked): LangGraph's plain
#: ones, and the LangChain adapter's blob of message hashes.
_PLAIN_TAGS = frozenset({"null", "bytes", "bytearray", "empty", "harombe.message_refs"})

# LangGraph's msgpack ext codes (langgraph.checkpoint.serde.jsonplus).
_NAMED_EXTS = frozenset({0, 1, 2, 4, 5})  # constructor (1 arg, args, kwargs), pydantic v1, v2
_METHOD_EXT = 3
_DELTA_EXT = 7

AllowList = Iterable[tuple[str, ...] | type] | Literal[True] | None

#: Types whose answer a policy remembers, and characters of a name an error shows.
_ANSWERS_KEPT = 4096
_SHOWN = 200


class TypePolicy:
    """What a checkpoint row may revive: LangGraph's safe types, framework state classes, and
    the application's allow-list (``(module, name)`` pairs or classes; ``True`` allows all).

    Answers are remembered per type, so a policy costs one import per framework type.
    """

    def __init__(self, allowed: AllowList = None) -> None:
        self.allow_all = allowed is True
        self.allowed: frozenset[tuple[str, ...]] = (
            frozenset() if allowed is None or allowed is True else _keys(allowed)
        )
        self._answers: dict[tuple[str, str], bool] = {}

    def extended(self, extra: Iterable[tuple[str, ...] | type]) -> TypePolicy:
        """This policy with ``extra`` allowed too (as LangGraph's ``with_msgpack_allowlist``)."""
        if self.allow_all:
            return self
        return TypePolicy(self.allowed | _keys(extra))

    def permits(self, module: Any, name: Any) -> bool:
        """Whether a row may construct ``module.name``. Imports only framework modules."""
        if not isinstance(module, str) or not isinstance(name, str):
            return False
        key = (module, name)
        if self.allow_all or key in LANGGRAPH_SAFE_TYPES or key in EXTRA_SAFE_TYPES:
            return True
        if key in self.allowed:
            return True
        answer = self._answers.get(key)
        if answer is None:
            answer = _framework_state_class(module, name)
            if len(self._answers) < _ANSWERS_KEPT:  # names come from rows: bound the memory
                self._answers[key] = answer
        return answer

    def refusal(self, module: Any, name: Any) -> UnsafeCheckpointError:
        """The error for a row naming ``module.name``, saying how to allow it."""
        module, name = str(module)[:_SHOWN], str(name)[:_SHOWN]  # a crafted name may be huge
        dotted = f"{module}.{name}"
        pair = f"({module!r}, {name!r})"
        return UnsafeCheckpointError(
            f"a stored checkpoint row names {dotted}, which is not allowed to be revived "
            "(reviving a row calls the type it names, so a crafted row could run code); "
            "nothing was constructed.",
            type_name=dotted,
            fix=Fix(
                api="If the application stores this type itself, allow exactly it: "
                f"HarombeSaver(..., allowed_msgpack_modules=[{pair}]) or "
                f"saver.with_allowlist([{pair}]).",
                cli=f"If the application stores this type itself, allow exactly it with "
                f"--allow {dotted}.",
            ),
        )


def refused_tag(tag: str) -> UnsafeCheckpointError:
    """The error for a row serialised with ``tag`` (a pickle, or a tag nobody knows)."""
    what = "a pickle, which runs code when read" if tag == "pickle" else f"of type {tag!r}"
    return UnsafeCheckpointError(
        f"a stored checkpoint row is {what}; it was not read. harombe never writes such rows.",
        type_name=tag,
        fix=Fix(
            api="If you wrote it yourself with a serializer that pickles, pass that serializer "
            "(serde=JsonPlusSerializer(pickle_fallback=True)) to trust every writer of this "
            "database.",
            cli="Remove the thread that holds it, or copy it with a program that trusts it.",
        ),
    )


def check_row(tag: str, data: bytes, policy: TypePolicy) -> None:
    """Raise UnsafeCheckpointError if reading this row would construct a type ``policy`` does
    not permit, or if it cannot be read at all (then nobody can say what it would construct).
    Nothing is imported (beyond framework modules) or constructed."""
    if tag in _PLAIN_TAGS:
        return
    if tag not in ("msgpack", "json"):
        if policy.allow_all:
            return
        raise refused_tag(tag)
    try:
        if tag == "msgpack":
            _check_msgpack(bytes(data), policy)
        else:
            json.loads(bytes(data), object_hook=lambda value: _check_lc(value, policy))
    except (ValueError, TypeError) as exc:  # a decode error (ormsgpack's is a ValueError)
        if isinstance(exc, UnsafeCheckpointError):
            raise
        raise UnsafeCheckpointError(
            f"a stored checkpoint row tagged {tag!r} cannot be decoded ({exc}), so what it "
            "would construct cannot be checked; it was not read.",
            type_name=tag,
        ) from None


def _check_msgpack(data: bytes, policy: TypePolicy) -> None:
    with requires_extra("Checking LangGraph checkpoint rows", "langchain", "ormsgpack"):
        import ormsgpack

    refused: list[UnsafeCheckpointError] = []

    def unpack(payload: bytes) -> Any:
        return ormsgpack.unpackb(payload, ext_hook=hook, option=ormsgpack.OPT_NON_STR_KEYS)

    def hook(code: int, payload: bytes) -> None:
        if code not in _NAMED_EXTS and code not in (_METHOD_EXT, _DELTA_EXT):
            return None  # numpy arrays and unknown codes construct nothing
        value = unpack(payload)
        if code == _DELTA_EXT:
            return None
        named = list(value) if isinstance(value, list) else []
        module, name = [*named, "?", "?"][:2]
        if code == _METHOD_EXT:
            method = named[3] if len(named) > 3 else "?"
            if (module, name, method) not in _SAFE_METHODS:
                refused.append(policy.refusal(module, f"{name}.{method}"))
        elif len(named) < 2 or not policy.permits(module, name):
            refused.append(policy.refusal(module, name))
        return None

    unpack(data)
    if refused:
        raise refused[0]


def _check_lc(value: dict[str, Any], policy: TypePolicy) -> dict[str, Any]:
    """LangGraph's old JSON rows: an ``lc: 2`` constructor names the type it calls."""
    if value.get("lc") == 2 and value.get("type") == "constructor":
        ids = value.get("id")
        if not isinstance(ids, list) or len(ids) < 2 or not all(isinstance(i, str) for i in ids):
            raise policy.refusal(ids, "")
        module, name = ".".join(ids[:-1]), ids[-1]
        if not policy.permits(module, name):
            raise policy.refusal(module, name)
    return value


def _keys(items: Iterable[tuple[str, ...] | type]) -> frozenset[tuple[str, ...]]:
    """The ``(module, name)`` pairs of an allow-list of pairs and classes."""
    if isinstance(items, (str, bytes)) or not isinstance(items, Iterable):
        raise InvalidInputError(
            f"an allow-list is a list of classes or ('module', 'Name') pairs, got {items!r:.80}."
        )
    keys: set[tuple[str, ...]] = set()
    for item in items:
        if isinstance(item, type):
            keys.add((item.__module__, item.__name__))
        elif (
            isinstance(item, tuple)
            and len(item) >= 2
            and all(isinstance(part, str) and part for part in item)
        ):
            keys.add(item)
        else:
            raise InvalidInputError(
                f"allow-list entries are classes or ('module', 'Name') pairs (exact names, no "
                f"prefixes), got {item!r:.80}."
            )
    return frozenset(keys)


def _framework_state_class(module: str, name: str) -> bool:
    """Whether ``module.name`` is a state class LangGraph writes for LangChain and LangGraph
    modules: a pydantic model, dataclass, enum or named tuple defined there (not re-exported,
    not an exception). Imports ``module`` only when it is inside those packages."""
    top = module.partition(".")[0]
    if top not in FRAMEWORK_MODULES or not all(part.isidentifier() for part in module.split(".")):
        return False
    try:
        cls = getattr(importlib.import_module(module), name)
    except Exception:
        return False
    if not isinstance(cls, type) or cls.__module__ != module or issubclass(cls, BaseException):
        return False
    return (
        is_dataclass(cls)
        or issubclass(cls, Enum)
        or (issubclass(cls, tuple) and hasattr(cls, "_fields"))
        or _is_pydantic(cls)
    )


def _is_pydantic(cls: type) -> bool:
    pydantic = sys.modules.get("pydantic")
    if pydantic is None:
        return False
    if issubclass(cls, pydantic.BaseModel):
        return True
    v1 = sys.modules.get("pydantic.v1")
    return v1 is not None and issubclass(cls, v1.BaseModel)
