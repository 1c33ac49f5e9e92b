"""Methods made from another method's one definition, so their parameters cannot drift apart.

Where a public method takes exactly the arguments of another (``get_recent_messages`` is
``get_window`` without the token total; the manager's ``search_by_topic`` is the retriever's,
checked and run as a flow), writing its parameter list a second time is a copy that the next
added option misses. These helpers build such a method from the definition it follows: the
same ``inspect.signature`` (so documentation, ``help()`` and the input checks see the real
parameters), its own name and docstring, and types a checker follows through ``ParamSpec``.
"""

from __future__ import annotations

import functools
import inspect
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar

if TYPE_CHECKING:
    from harombe_core.flows import Flow

__all__ = ["annotation_text", "converted", "named_like"]

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
