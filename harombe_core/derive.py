"""Methods made from another method's one definition, so their parameters cannot drift apart.

Where a public method takes exactly the arguments of another (``get_recent_messages`` is
``get_window`` without the token total; the manager's ``search_by_topic`` is the retriever's,
checked and run as a flow), writing its parameter list a second time is a copy that the next
added option misses. These helpers build such a method from the definition it follows: the
same ``inspect.signature`` (so documentation, ``help()`` and the input checks see the real
parameters), its own name and docstring, and types a checker follows through ``ParamSpec``.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import re
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar, overload

if TYPE_CHECKING:
    from harombe_core.flows import Flow

__all__ = ["annotation_text", "converted", "forwarded", "in_thread", "named_like", "part_property"]

S = TypeVar("S")
P = ParamSpec("P")
T = TypeVar("T")
R = TypeVar("R")


def annotation_text(kind: Any) -> str:
    """How ``kind`` reads as a postponed annotation (``list[SearchHit]``, without module
    paths), so that a made method's signature reads like one written out."""
    text = kind.__name__ if isinstance(kind, type) else repr(kind)
    return re.sub(r"\b(?:\w+\.)+(?=\w)", "", text)


def named_like(
    method: Callable[..., Any],
    template: Callable[..., Any],
    *,
    name: str,
    doc: str | None,
    returns: str,
    owner: str | None = None,
) -> None:
    """Give ``method`` the parameters of ``template`` (returning ``returns``), a ``name`` in
    class ``owner`` (default: ``template``'s) and ``doc``: what ``help()`` and
    ``inspect.signature`` show."""
    signature = inspect.signature(template).replace(return_annotation=returns)
    setattr(method, "__signature__", signature)  # noqa: B010 - not a declared attribute
    method.__doc__ = doc
    method.__name__ = name
    if owner is None:
        owner = template.__qualname__.rpartition(".")[0]
    method.__qualname__ = f"{owner}.{name}" if owner else name


def converted(
    flow: Callable[Concatenate[S, P], Flow[T]],
    convert: Callable[[T], R],
    result: type[R],
    *,
    name: str,
    doc: str,
) -> Callable[Concatenate[S, P], Flow[R]]:
    """The flow method ``flow`` with its result passed through ``convert`` (giving a
    ``result``): the same arguments and checks, one definition."""

    @functools.wraps(flow)
    def derived(self: S, /, *args: P.args, **kwargs: P.kwargs) -> Flow[R]:
        found = yield from flow(self, *args, **kwargs)
        return convert(found)

    returns = f"Flow[{annotation_text(result)}]"
    named_like(derived, flow, name=name, doc=doc, returns=returns)
    return derived


def forwarded(
    template: Callable[Concatenate[Any, P], R], part: str, *, owner: str
) -> Callable[Concatenate[Any, P], R]:
    """A method of class ``owner`` that runs ``template`` on the part it composes in the
    attribute ``part``: ``template``'s parameters, name and docstring, written once."""
    name = template.__name__

    def forward(self: Any, /, *args: P.args, **kwargs: P.kwargs) -> R:
        method: Callable[P, R] = getattr(getattr(self, part), name)
        return method(*args, **kwargs)

    returns = inspect.signature(template).return_annotation
    named_like(forward, template, name=name, doc=template.__doc__, returns=returns, owner=owner)
    return forward


@overload
def part_property(part: str, attribute: Callable[[Any], T]) -> T: ...
@overload
def part_property(part: str, attribute: str, *, doc: str, settable: bool = False) -> Any: ...
def part_property(
    part: str, attribute: Any, *, doc: str | None = None, settable: bool = False
) -> Any:
    """A property that reads (and, if ``settable``, sets) ``attribute`` of the part composed
    in the attribute ``part``, so the value lives in one place and stays live on both.

    ``attribute`` is a name, or a property of the part's class, whose name, docstring and
    settability the new property takes (and, for a type checker, its type: like
    ``dataclasses.field``, the call is typed as the value the property gives).
    """
    if isinstance(attribute, property):
        doc, settable = attribute.__doc__, attribute.fset is not None
        attribute = getattr(attribute.fget, "__name__", "")
    name: str = attribute

    def get(self: Any) -> Any:
        return getattr(getattr(self, part), name)

    def put(self: Any, value: Any) -> None:
        setattr(getattr(self, part), name, value)

    return property(get, put if settable else None, doc=doc)


def in_thread(
    method: Callable[Concatenate[S, P], T],
) -> Callable[Concatenate[S, P], Coroutine[Any, Any, T]]:
    """The async twin of a sync ``method``: it runs in a worker thread, so the event loop
    never waits on SQLite or a summarising model, and takes exactly ``method``'s arguments.

    The call goes through ``self`` by name, so a subclass that overrides the sync method
    gets an async twin that runs its override.
    """
    name = method.__name__

    @functools.wraps(method)
    async def asynchronous(self: S, /, *args: P.args, **kwargs: P.kwargs) -> T:
        sync: Callable[P, T] = getattr(self, name)
        return await asyncio.to_thread(sync, *args, **kwargs)

    asynchronous.__name__ = "a" + name
    asynchronous.__qualname__ = method.__qualname__.rpartition(".")[0] + ".a" + name
    asynchronous.__doc__ = f"Async twin of :meth:`{name}`."
    return asynchronous
