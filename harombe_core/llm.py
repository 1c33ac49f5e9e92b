"""Calling the user's model, sync or async, and prompt flows that work the same on both paths.

A model is anything the adapters can hand over: a LangChain chat model or runnable
(``invoke``/``ainvoke``), a LlamaIndex LLM (``complete``/``acomplete``), a sync
``llm(prompt) -> str`` callable, an object with an async ``acall(prompt)``, or an async
callable. :func:`call_llm` and :func:`acall_llm` call one and return its answer as text,
whatever shape the framework returns (a string, a LangChain message, a LlamaIndex response).
Both drive the flow of one prompt (which :func:`ask` composes into larger flows): the async
path awaits the model's own async method when it has one, and runs a plain function in a
worker thread (the flow driver's one blocking hop).

Code that talks to a model (a summariser, the LLM node selector) is an ordinary flow that asks
with ``answer = yield from ask(llm, prompt)``: it receives every answer, *or the exception the
model raised*, so the flow alone decides what a failure means (retry, fall back, or raise), and
``drive`` / ``adrive`` run it, so the sync and async paths cannot behave differently. A
:data:`PromptFlow` (a generator yielding bare prompts) is the same idea for code that does no
other I/O; :func:`run_prompts` / :func:`arun_prompts` drive one through :func:`ask`.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Generator
from typing import Any, TypeVar

from harombe_core.errors import InvalidInputError
from harombe_core.flows import Call, Flow, adrive, drive

__all__ = [
    "PromptFlow",
    "acall_llm",
    "arun_prompts",
    "as_text",
    "ask",
    "call_llm",
    "run_prompts",
]

T = TypeVar("T")

PromptFlow = Generator[str, str | BaseException, T]
"""Yields prompts; receives each answer as text, or the exception the model raised."""


def as_text(result: Any) -> str:
    """A model's answer as text: str, LangChain message (``.content``), LlamaIndex (``.text``)."""
    if isinstance(result, str):
        return result
    for attribute in ("content", "text", "message"):
        value = getattr(result, attribute, None)
        if isinstance(value, str):
            return value
        if value is not None and attribute == "message":
            return as_text(value)
    if isinstance(result, list):  # multi-part content
        return "".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in result)
    return str(result)


def _call(llm: Any, prompt: str) -> Any:
    """The model's sync call: ``invoke``, ``complete``, or the callable itself."""
    if hasattr(llm, "invoke") and hasattr(llm, "ainvoke"):
        return llm.invoke(prompt)
    if hasattr(llm, "complete") and hasattr(llm, "acomplete"):
        return llm.complete(prompt)
    if not callable(llm):
        raise InvalidInputError(
            "this model is async-only (it has acall but is not callable); use the async method "
            "(for example aappend or aselect_parent)."
        )
    return llm(prompt)


async def _ainvoke(llm: Any, prompt: str) -> Any:
    return await llm.ainvoke(prompt)


async def _acomplete(llm: Any, prompt: str) -> Any:
    return await llm.acomplete(prompt)


async def _acall(llm: Any, prompt: str) -> Any:
    return await llm.acall(prompt)


async def _acallable(llm: Any, prompt: str) -> Any:
    return await llm(prompt)


def _native(llm: Any) -> Callable[[Any, str], Awaitable[Any]] | None:
    """The model's own async call, if it has one (None: a plain function, run in a thread)."""
    if hasattr(llm, "invoke") and hasattr(llm, "ainvoke"):
        return _ainvoke
    if hasattr(llm, "complete") and hasattr(llm, "acomplete"):
        return _acomplete
    if inspect.iscoroutinefunction(getattr(llm, "acall", None)):
        return _acall
    if inspect.iscoroutinefunction(llm) or inspect.iscoroutinefunction(
        getattr(llm, "__call__", None)  # noqa: B004 - a class with async __call__
    ):
        return _acallable
    return None


def _refuse_awaitable(result: Any) -> Any:
    """The sync path got an awaitable: it cannot wait for it."""
    if inspect.iscoroutine(result):
        result.close()
    raise InvalidInputError(
        "the model returned an awaitable; call the async method (aappend, asummarize_session) "
        "or pass a sync callable."
    )


async def _awaited(result: Awaitable[Any]) -> Any:
    return await result


def _answer(llm: Any, prompt: str) -> Flow[str]:
    """One prompt to ``llm``, its answer as text (see the module docstring)."""
    result = yield Call(_call, llm, prompt, native=_native(llm))
    if inspect.isawaitable(result):  # a sync function that returned an awaitable
        result = yield Call(_refuse_awaitable, result, native=_awaited)
    return as_text(result)


def call_llm(llm: Any, prompt: str) -> str:
    """Call a model on the calling thread and return its answer as text.

    Raises InvalidInputError for an async-only model (use the ``a``-prefixed method instead).
    """
    return drive(_answer(llm, prompt))


async def acall_llm(llm: Any, prompt: str) -> str:
    """Call a model without blocking the event loop: its ``ainvoke``/``acomplete``/``acall``,
    an async callable, or a plain function in a worker thread."""
    return await adrive(_answer(llm, prompt))


def ask(llm: Any, prompt: str) -> Flow[str | BaseException]:
    """One prompt as a step of a larger flow; its result is the answer, or the exception the
    model raised (the flow decides what a failure means)."""
    try:
        answer = yield from _answer(llm, prompt)
    except Exception as exc:  # the user's model: the flow decides what a failure means
        return exc
    return answer


def asking(flow: PromptFlow[T], llm: Any) -> Flow[T]:
    """A prompt flow as a general flow whose requests ask ``llm`` (to compose with other I/O)."""
    try:
        prompt = next(flow)
        while True:
            answer = yield from ask(llm, prompt)
            prompt = flow.send(answer)
    except StopIteration as done:
        value: T = done.value
        return value


def run_prompts(flow: PromptFlow[T], llm: Any) -> T:
    """Run a prompt flow against ``llm`` on the calling thread."""
    return drive(asking(flow, llm))


async def arun_prompts(flow: PromptFlow[T], llm: Any) -> T:
    """Run a prompt flow against ``llm`` without blocking the event loop."""
    return await adrive(asking(flow, llm))
