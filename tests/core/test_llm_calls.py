"""Calling the user's model: one flow, the model's own async method on the async path.

A LangChain chat model is awaited through ``ainvoke`` and a LlamaIndex LLM through
``acomplete``, never run in a worker thread; a plain function takes one thread hop (the flow
driver's); both paths return the same text.
"""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.language_models import FakeListChatModel
from llama_index.core.llms import MockLLM

from harombe_core.errors import InvalidInputError
from harombe_core.flows import adrive, drive
from harombe_core.llm import acall_llm, ask, call_llm


async def test_a_langchain_chat_model_is_awaited_natively(thread_hops: list[str]) -> None:
    model = FakeListChatModel(responses=["sync answer", "async answer"])
    assert call_llm(model, "hello") == "sync answer"
    assert await acall_llm(model, "hello") == "async answer"
    assert thread_hops == []


async def test_a_llamaindex_llm_is_awaited_natively(thread_hops: list[str]) -> None:
    llm = MockLLM()
    expected = call_llm(llm, "echo me")
    assert await acall_llm(llm, "echo me") == expected == "echo me"
    assert thread_hops == []


async def test_a_plain_function_takes_one_thread_hop(thread_hops: list[str]) -> None:
    assert await acall_llm(lambda prompt: prompt.upper(), "hi") == "HI"
    assert len(thread_hops) == 1


async def test_ask_hands_the_models_failure_to_the_flow(thread_hops: list[str]) -> None:
    def broken(prompt: str) -> str:
        raise RuntimeError("down")

    failed = drive(ask(broken, "x"))
    assert isinstance(failed, RuntimeError)
    assert isinstance(await adrive(ask(broken, "x")), RuntimeError)

    class AsyncOnly:
        async def acall(self, prompt: str) -> str:
            return "fine"

    assert isinstance(drive(ask(AsyncOnly(), "x")), InvalidInputError)
    assert await adrive(ask(AsyncOnly(), "x")) == "fine"


async def test_a_sync_function_returning_an_awaitable_is_awaited_only_when_async() -> None:
    async def answer(prompt: str) -> str:
        return "later"

    def deferred(prompt: str) -> Any:
        return answer(prompt)

    assert await acall_llm(deferred, "x") == "later"
    with pytest.raises(InvalidInputError, match="awaitable"):
        call_llm(deferred, "x")
