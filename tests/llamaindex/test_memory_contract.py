"""LlamaIndex's memory contract, run over its own memories and HarombeMemory in the same test.

Each case mirrors a case of llama-index-core's own tests (``tests/memory/test_memory_base.py``,
``test_chat_memory_buffer.py``) or a rule its engines rely on. The kind of memory is a parameter:
``ChatMemoryBuffer`` and ``Memory`` are the controls. A control that does not do what a case
states (the installed llama-index-core differs from the test the case comes from) is skipped
with the reason, so each test states what LlamaIndex's memories do, and harombe is asked the
same.

Sizes are "history tokens" (see the ``build_memory`` fixture): ``ChatMemoryBuffer`` and
``HarombeMemory`` get them as ``token_limit``; ``Memory`` as ``token_limit`` with
``chat_history_token_ratio=1.0``.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from llama_index.core.llms import ChatMessage
from llama_index.core.storage.chat_store.base_db import MessageStatus
from llama_index.core.utils import get_tokenizer

from llamaindex_harombe import HarombeMemory
from tests.llamaindex.conftest import MEMORY_KINDS, BuildMemory
from tests.llamaindex.contract import contract

KINDS = MEMORY_KINDS
#: Memory's own API (statuses of its FIFO queue), which ChatMemoryBuffer does not have.
QUEUE_KINDS = ("Memory", "HarombeMemory")

tokens = get_tokenizer()


def user(text: str) -> ChatMessage:
    return ChatMessage(role="user", content=text)


def assistant(text: str) -> ChatMessage:
    return ChatMessage(role="assistant", content=text)


def tool(text: str) -> ChatMessage:
    return ChatMessage(role="tool", content=text)


def text_tokens(*messages: ChatMessage) -> int:
    return sum(len(tokens(m.content or "")) for m in messages)


def contents(messages: list[ChatMessage]) -> list[str]:
    return [m.content or "" for m in messages]


# a model is never sent nothing ----------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
async def test_oversized_newest_user_message_is_returned(
    build_memory: BuildMemory, kind: str
) -> None:
    big = user("Please summarise the following notes about the harbour: " + "tide " * 50)
    assert text_tokens(big) > 50
    memory = build_memory(kind, 20)
    await memory.aput_messages([user("hi"), assistant("hello")])
    await memory.aput(big)
    with contract(kind, "return an over-long newest user message"):
        assert await memory.aget() == [big]


@pytest.mark.parametrize("kind", KINDS)
async def test_no_room_left_still_returns_the_newest_message(
    build_memory: BuildMemory, kind: str
) -> None:
    # llama-index-core's test_get_when_initial_tokens_same_as_limit_removes_message expects []:
    # the installed ChatMemoryBuffer returns the newest message instead ("allows the LLM to
    # raise an error about the message being too long"), and Memory keeps its last message.
    memory = build_memory(kind, 5)
    first = user("first message")
    await memory.aput(first)
    with contract(kind, "return the newest message when the prompt leaves no room"):
        assert await memory.aget(initial_token_count=5) == [first]


#: Upstream's rules for what a flush leaves (test_memory_base.py): (its test, history tokens,
#: flush size, messages). Providers such as Bedrock refuse a history that starts on an
#: assistant turn, and every API refuses a tool result without its call.
TURN_CASES = {
    "first_message_must_be_user": (50, 50, [user("x " * 100), assistant("ok")]),
    "preserves_conversation_turn": (
        100,
        100,
        [user("a " * 50), assistant("b " * 50), user("c " * 50), assistant("d " * 50)],
    ),
    "with_tool_messages": (
        75,
        80,
        [user("a " * 40), assistant("b " * 20), tool("c " * 20), assistant("d " * 20)],
    ),
    "only_tool_message_remaining": (40, 40, [user("x " * 50), assistant("call"), tool("result")]),
}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("case", TURN_CASES)
async def test_the_newest_turn_is_kept_whole(
    build_memory: BuildMemory, kind: str, case: str
) -> None:
    limit, flush, messages = TURN_CASES[case]
    memory = build_memory(kind, limit, flush=flush)
    await memory.aput_messages(messages)
    window = await memory.aget()
    with contract(kind, "keep the newest turn whole, from its user message"):
        assert window[0].role.value == "user"
        assert window[-1] == messages[-1]
        for earlier, later in itertools.pairwise(window):
            if earlier.role.value == "user":  # a whole turn: the user message and its answer
                assert later.role.value in ("assistant", "tool")
            if later.role.value == "tool":  # a result follows its call (or another result)
                assert earlier.role.value in ("assistant", "tool")


# counting ---------------------------------------------------------------------------------------


def chat(n: int) -> list[ChatMessage]:
    return [
        (user if i % 2 == 0 else assistant)(f"turn {i} of a long chat about sailing boats")
        for i in range(n)
    ]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("newest", [2, 4, 6])
async def test_token_limit_keeps_as_much_text_as_llamaindex(
    build_memory: BuildMemory, kind: str, newest: int
) -> None:
    history = chat(20)
    limit = text_tokens(*history[-newest:])  # exactly the newest turns' text
    memory = build_memory(kind, limit)
    await memory.aput_messages(history)
    with contract(kind, "keep the newest messages whose text fits the limit"):
        assert await memory.aget() == history[-newest:]
    if newest > 2:
        smaller = build_memory(kind, limit - 1, session_id="smaller")
        await smaller.aput_messages(history)
        with contract(kind, "drop a whole turn when one token is missing"):
            assert await smaller.aget() == history[2 - newest :]


@pytest.mark.parametrize("kind", KINDS)
async def test_max_tokens(build_memory: BuildMemory, kind: str) -> None:
    # test_chat_memory_buffer.py::test_max_tokens
    message = user("first message")
    memory = build_memory(kind, 5)
    await memory.aput_messages([message, message])
    assert len(await memory.aget()) == 2
    await memory.aput_messages([message, message])
    assert len(await memory.aget()) == 2
    assert len(await memory.aget_all()) == 4
    await memory.aput(user("test message2"))
    window = await memory.aget()
    assert contents(window)[-1] == "test message2"
    assert len(window) == 2


@pytest.mark.parametrize("kind", KINDS)
async def test_initial_token_count_is_charged(build_memory: BuildMemory, kind: str) -> None:
    # test_get_when_space_for_second_message_and_answer_removes_only_first_message_and_answer
    # and ..._space_for_all_but_first_message_...: the engine's prompt shares the limit.
    one, answer = user("first message"), assistant("first answer")
    two, answer_two = user("second message"), assistant("second answer")
    memory = build_memory(kind, 10)
    await memory.aput_messages([one, answer, two, answer_two])
    assert len(await memory.aget(initial_token_count=5)) > 0
    with contract(kind, "charge initial_token_count to the limit"):
        assert await memory.aget(initial_token_count=10 - text_tokens(two, answer_two)) == [
            two,
            answer_two,
        ]
        room = 10 - text_tokens(answer, two, answer_two)
        assert await memory.aget(initial_token_count=room) == [two, answer_two]


@pytest.mark.parametrize("kind", KINDS)
async def test_initial_token_count_over_the_limit_is_a_value_error(
    build_memory: BuildMemory, kind: str
) -> None:
    # test_get_when_initial_tokens_exceed_limit_raises_value_error
    memory = build_memory(kind, 49)
    await memory.aput(user("hello"))
    with (
        contract(kind, "raise ValueError when initial_token_count exceeds token_limit"),
        pytest.raises(ValueError, match="Initial token count exceeds token limit") as raised,
    ):
        await memory.aget(initial_token_count=50)
    # The exact text LlamaIndex's own tests compare comes first (harombe's advice follows it).
    assert raised.value.args[0] == "Initial token count exceeds token limit"


@pytest.mark.parametrize("kind", KINDS)
async def test_token_limit_must_be_positive(build_memory: BuildMemory, kind: str) -> None:
    with pytest.raises(ValueError, match=r"(?i)token.limit"):
        build_memory(kind, 0)


# Memory's API: statuses, put/set/reset --------------------------------------------------------


@pytest.mark.parametrize("kind", QUEUE_KINDS)
async def test_get_all_and_reset_take_a_status(build_memory: BuildMemory, kind: str) -> None:
    # test_memory_base.py::test_aget_all and ::test_areset
    memory: Any = build_memory(kind, 1000)
    await memory.aput_messages([user("Message 1"), assistant("Response 1")])
    assert contents(await memory.aget_all(status=MessageStatus.ACTIVE)) == [
        "Message 1",
        "Response 1",
    ]
    assert contents(memory.get_all(status=MessageStatus.ACTIVE)) == ["Message 1", "Response 1"]
    assert await memory.aget_all(status=MessageStatus.ARCHIVED) == []
    await memory.areset(status=MessageStatus.ARCHIVED)
    assert len(await memory.aget_all()) == 2
    await memory.areset(status=MessageStatus.ACTIVE)
    assert await memory.aget() == []
    assert await memory.aget_all() == []


@pytest.mark.parametrize("kind", KINDS)
async def test_put_set_and_reset(build_memory: BuildMemory, kind: str) -> None:
    # test_memory_base.py::test_aput, ::test_aput_messages, ::test_aset
    memory = build_memory(kind, 1000)
    await memory.aput(user("New message"))
    assert contents(await memory.aget()) == ["New message"]
    await memory.aput_messages([user("Message 1"), assistant("Response 1")])
    assert contents(await memory.aget()) == ["New message", "Message 1", "Response 1"]
    await memory.aset([user("Message 1"), assistant("Response 1")])
    assert contents(await memory.aget()) == ["Message 1", "Response 1"]
    await memory.areset()
    assert await memory.aget() == []


@pytest.mark.parametrize("kind", KINDS)
async def test_over_the_limit_only_the_newest_message_stays(
    build_memory: BuildMemory, kind: str
) -> None:
    # test_memory_base.py::test_manage_queue_over_limit (history limit 1000 * 0.9)
    memory = build_memory(kind, 900, flush=700)
    await memory.aput_messages([user("x " * 500), assistant("y " * 500), user("z " * 500)])
    window = await memory.aget()
    assert len(window) == 1
    assert "z " in (window[0].content or "")


# serialisation ----------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["ChatMemoryBuffer", "HarombeMemory"])
async def test_string_and_dict_round_trip(build_memory: BuildMemory, kind: str) -> None:
    # test_chat_memory_buffer.py::test_sting_save_load and ::test_dict_save_load
    memory: Any = build_memory(kind, 5)

    async def round_trips(expected: list[str]) -> None:
        for again in (
            type(memory).from_string(memory.to_string()),
            type(memory).from_dict(memory.to_dict()),
        ):
            assert contents(await again.aget()) == expected
            assert again.token_limit == 5
            if isinstance(again, HarombeMemory):
                again.close()  # reopened from the path: it owns its store

    await round_trips([])
    await memory.aput(user("first message"))
    with contract(kind, "serialise a memory holding messages"):
        await round_trips(["first message"])
