"""Sync and async twins written once: an operation is a flow, two small drivers run it.

An operation that has both a sync and an ``a``-prefixed async form (``get_window`` /
``aget_window``, ``summarize_session`` / ``asummarize_session``) is written once, as a generator
that *yields* the I/O it needs and *receives* its result (the shape of httpx's ``auth_flow``):

.. code-block:: python

    def _window(self, session_id: str) -> Flow[list[Message]]:
        session = yield Call(self.store.get_session, session_id, native=self.store.aget_session)
        messages = yield Work(expensive_pure_function, session)
        return messages

:func:`drive` runs such a flow on the calling thread; :func:`adrive` runs it on the event loop,
where each request uses its native async form when it has one (the Postgres store's
``aget_session``, a model's ``acall``) and otherwise runs in a worker thread, so async never
blocks the loop. The logic, the checks and the error handling exist once, so the twins cannot
drift apart; :func:`twins` makes the pair of public methods from one flow method.

An exception raised by a request is thrown into the flow at its ``yield``, so a flow handles
failures with an ordinary ``try``/``except`` on both paths alike.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import Awaitable, Callable, Coroutine, Generator
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar

__all__ = ["Call", "Flow", "Parallel", "Request", "Work", "adrive", "drive", "twins"]

T = TypeVar("T")
S = TypeVar("S")
P = ParamSpec("P")


class Request:
    """One piece of I/O a flow needs; it knows how to run itself on either path."""

    def run(self) -> Any:
        """Run on the calling thread (the sync driver)."""
        raise NotImplementedError

    async def arun(self) -> Any:
        """Run without blocking the event loop (the async driver)."""
        raise NotImplementedError


Flow = Generator[Request, Any, T]
"""An operation written once: yields :class:`Request` objects, returns its result."""


class Call(Request, Generic[T]):
    """Call ``fn(*args, **kwargs)``; async awaits ``native`` with the same arguments if given.

    Without ``native`` the async driver runs ``fn`` in a worker thread (one hop per request), so
    blocking I/O (SQLite, a local model) never runs on the event loop.
    """

    __slots__ = ("args", "fn", "kwargs", "native")

    def __init__(
        self,
        fn: Callable[..., T],
        *args: Any,
        native: Callable[..., Awaitable[T]] | None = None,
        **kwargs: Any,
    ) -> None:
        self.fn = fn
        self.args = args
        self.kwargs = kwargs
        self.native = native

    @classmethod
    def method(cls, obj: Any, name: str, *args: Any, **kwargs: Any) -> Call[Any]:
        """``obj.<name>(...)``, with ``obj.a<name>`` as the native form if it is a coroutine
        function (the Postgres store's ``aget_session``; SQLite has none and hops a thread)."""
        native = getattr(obj, "a" + name, None)
        if not inspect.iscoroutinefunction(native):
            native = None
        return Call(getattr(obj, name), *args, native=native, **kwargs)

    def run(self) -> T:
        return self.fn(*self.args, **self.kwargs)

    async def arun(self) -> T:
        if self.native is not None:
            return await self.native(*self.args, **self.kwargs)
        return await asyncio.to_thread(self.fn, *self.args, **self.kwargs)

    def __repr__(self) -> str:
        name = getattr(self.fn, "__qualname__", repr(self.fn))
        return f"Call({name}, native={self.native is not None})"


class Work(Call[T]):
    """CPU or model work with no async form (flush, backfill, reindex): a thread when async."""

    __slots__ = ()

    def __init__(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> None:
        super().__init__(fn, *args, **kwargs)


class Parallel(Request):
    """Several requests whose results the flow needs together, as a list in the same order.

    Async runs them concurrently (``asyncio.gather``), which overlaps, for example, a keyword
    search with the embedding of the query; sync runs them one after the other.
    """

    __slots__ = ("requests",)

    def __init__(self, *requests: Request) -> None:
        self.requests = requests

    def run(self) -> list[Any]:
        return [request.run() for request in self.requests]

    async def arun(self) -> list[Any]:
        return list(await asyncio.gather(*(request.arun() for request in self.requests)))


class _Steps(Generic[T]):
    """Advances a flow: sends it each result, or throws in the request's exception."""

    __slots__ = ("_flow", "outcome", "value")

    def __init__(self, flow: Flow[T]) -> None:
        self._flow = flow
        self.outcome: tuple[bool, Any] | None = None  # (succeeded, result or exception)

    def next(self) -> Request | None:
        """The next request, or None once the flow has returned (its result is ``value``)."""
        try:
            if self.outcome is None:
                return next(self._flow)
            succeeded, result = self.outcome
            return self._flow.send(result) if succeeded else self._flow.throw(result)
        except StopIteration as done:
            self.value: T = done.value
            return None


def drive(flow: Flow[T]) -> T:
    """Run a flow on the calling thread and return its result."""
    steps = _Steps(flow)
    while (request := steps.next()) is not None:
        try:
            steps.outcome = (True, request.run())
        except Exception as exc:  # thrown into the flow, which handles or re-raises it
            steps.outcome = (False, exc)
    return steps.value


async def adrive(flow: Flow[T]) -> T:
    """Run a flow without blocking the event loop and return its result."""
    steps = _Steps(flow)
    while (request := steps.next()) is not None:
        try:
            steps.outcome = (True, await request.arun())
        except Exception as exc:  # thrown into the flow, which handles or re-raises it
            steps.outcome = (False, exc)
    return steps.value


def _public_name(flow_name: str) -> str:
    return flow_name.removeprefix("_").removesuffix("_flow")


def _result_signature(flow: Callable[..., Any]) -> inspect.Signature:
    """The flow's signature returning what the flow returns (``Flow[X]`` shown as ``X``)."""
    signature = inspect.signature(flow)
    result = signature.return_annotation
    if isinstance(result, str) and result.startswith("Flow[") and result.endswith("]"):
        signature = signature.replace(return_annotation=result[len("Flow[") : -1])
    return signature


def twins(
    flow: Callable[Concatenate[S, P], Flow[T]],
) -> tuple[
    Callable[Concatenate[S, P], T], Callable[Concatenate[S, P], Coroutine[Any, Any, T]]
]:
    """The sync and async methods of one flow method, with its signature and docstring.

    ``get_window, aget_window = twins(_get_window)`` in a class body: both take exactly the
    flow's arguments (type checkers see them), and both share its docstring.
    """
    name = _public_name(flow.__name__)
    owner = flow.__qualname__.rpartition(".")[0]

    @functools.wraps(flow)
    def sync(self: S, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return drive(flow(self, *args, **kwargs))

    @functools.wraps(flow)
    async def asynchronous(self: S, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return await adrive(flow(self, *args, **kwargs))

    signature = _result_signature(flow)
    for method, method_name in ((sync, name), (asynchronous, "a" + name)):
        setattr(method, "__signature__", signature)  # noqa: B010 - not a declared attribute
        method.__name__ = method_name
        method.__qualname__ = f"{owner}.{method_name}" if owner else method_name
    return sync, asynchronous
