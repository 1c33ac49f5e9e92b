"""Calling the user's model, sync or async, and prompt flows that work the same on both paths.

A model is anything the adapters can hand over: a sync ``llm(prompt) -> str`` callable, an
object with an async ``acall(prompt)``, or an async callable. :func:`call_llm` and
:func:`acall_llm` call one and return its answer as text, whatever shape the framework returns
(a string, a LangChain message, a LlamaIndex response).

Code that talks to a model (a summariser, the LLM node selector) is written once as a
:data:`PromptFlow`: a generator that yields prompts and receives the model's answers. The
drivers :func:`run_prompts` and :func:`arun_prompts` send the flow every answer, *or the
exception the model raised*, so the flow alone decides what a failure means (retry, fall back,
or raise); the sync and async paths therefore cannot behave differently.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Generator
from typing import Any, TypeVar

from harombe_core.errors import InvalidInputError
from harombe_core.flows import Flow, Request, adrive, drive

__all__ = ["PromptFlow", "acall_llm", "arun_prompts", "as_text", "call_llm", "run_prompts"]

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


def call_llm(llm: Any, prompt: str) -> str:
    """Call a sync model hook ``llm(prompt) -> str``.

    Raises InvalidInputError for an async-only model (use the ``a``-prefixed method instead).
    """
    if not callable(llm):
        raise InvalidInputError(
            "this model is async-only (it has acall but is not callable); use the async method "
            "(for example aappend or aselect_parent)."
        )
    result = llm(prompt)
    if inspect.isawaitable(result):
        if inspect.iscoroutine(result):
            result.close()
        raise InvalidInputError(
            "the model returned an awaitable; call the async method (aappend, asummarize_session) "
            "or pass a sync callable."
        )
    return as_text(result)


async def acall_llm(llm: Any, prompt: str) -> str:
    """Call a model without blocking the event loop: ``acall``, an async callable, or a thread."""
    acall = getattr(llm, "acall", None)
    if acall is not None and inspect.iscoroutinefunction(acall):
        return as_text(await acall(prompt))
    if inspect.iscoroutinefunction(llm) or inspect.iscoroutinefunction(
        getattr(llm, "__call__", None)  # noqa: B004 - a class with async __call__
    ):
        return as_text(await llm(prompt))
    result = await asyncio.to_thread(llm, prompt)
    if inspect.isawaitable(result):
        result = await result
    return as_text(result)


class Ask(Request):
    """One prompt to the model; its result is the answer, or the exception the model raised."""

    __slots__ = ("llm", "prompt")

    def __init__(self, llm: Any, prompt: str) -> None:
        self.llm = llm
        self.prompt = prompt

    def run(self) -> str | BaseException:
        try:
            return call_llm(self.llm, self.prompt)
        except Exception as exc:  # the user's model: the flow decides what a failure means
            return exc

    async def arun(self) -> str | BaseException:
        try:
            return await acall_llm(self.llm, self.prompt)
        except Exception as exc:  # the user's model: the flow decides what a failure means
            return exc


def asking(flow: PromptFlow[T], llm: Any) -> Flow[T]:
    """A prompt flow as a general flow whose requests ask ``llm`` (to compose with other I/O)."""
    try:
        prompt = next(flow)
        while True:
            answer = yield Ask(llm, prompt)
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
