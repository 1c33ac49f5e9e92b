"""HarombeMemory as LlamaIndex's engines and agents use it: window, recall, tools, persistence."""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest
from llama_index.core.base.llms.types import ChatMessage, TextBlock, ToolCallBlock
from llama_index.core.llms import MockLLM
from llama_index.core.memory import BaseMemory

from harombe_core.errors import InvalidBudgetError, InvalidInputError
from harombe_core.manager import MemoryManager
from harombe_core.retrieval import CONTEXT_HEADER
from llamaindex_harombe import (
    HarombeChatStore,
    HarombeDBChatStore,
    HarombeMemory,
    HarombeMemoryBlock,
)


def user(text: str) -> ChatMessage:
    return ChatMessage(role="user", content=text)


def assistant(text: str) -> ChatMessage:
    return ChatMessage(role="assistant", content=text)


def conversation(n: int) -> list[ChatMessage]:
    return [
        (user if i % 2 == 0 else assistant)(f"turn {i} of a long chat about sailing boats")
        for i in range(n)
    ]


def cost(memory: HarombeMemory, messages: list[ChatMessage]) -> int:
    """What ``messages`` take from ``token_limit`` (text and tool calls, as LlamaIndex counts)."""
    return memory.count_tokens(messages)


@pytest.fixture
def memory(manager: MemoryManager) -> HarombeMemory:
    return HarombeMemory.from_defaults(manager=manager, session_id="s1", token_limit=80)


def test_is_a_llamaindex_memory(memory: HarombeMemory) -> None:
    assert isinstance(memory, BaseMemory)


def test_put_get_all_set_reset(memory: HarombeMemory) -> None:
    memory.put(user("hi"))
    memory.put_messages([assistant("hello"), user("bye")])
    assert [m.content for m in memory.get_all()] == ["hi", "hello", "bye"]
    memory.set([user("fresh start")])
    assert memory.get_all() == [user("fresh start")]
    memory.reset()
    assert memory.get_all() == []
    assert memory.get() == []


async def test_async_twins(memory: HarombeMemory) -> None:
    await memory.aput(user("hi"))
    await memory.aput_messages([assistant("hello"), user("bye")])
    assert [m.content for m in await memory.aget_all()] == ["hi", "hello", "bye"]
    assert await memory.aget() == memory.get()
    await memory.aset([user("again")])
    assert await memory.aget_all() == [user("again")]
    await memory.areset()
    assert await memory.aget_all() == []


def test_window_respects_limit_and_initial_token_count(memory: HarombeMemory) -> None:
    memory.put_messages(conversation(20))
    full = memory.get()
    assert cost(memory, full) <= 80
    assert full[-1].content == "turn 19 of a long chat about sailing boats"
    smaller = memory.get(initial_token_count=40)
    assert cost(memory, smaller) <= 40
    assert len(smaller) < len(full)
    # No room left: the newest turn still goes to the model, never nothing.
    assert memory.get(initial_token_count=80) == conversation(20)[-2:]
    with pytest.raises(InvalidBudgetError):
        memory.get(initial_token_count=-1)
    with pytest.raises(ValueError, match="Initial token count exceeds token limit") as raised:
        memory.get(initial_token_count=81)
    # LlamaIndex's own text, exact and first (its tests compare it), then how to fix it.
    assert raised.value.args == ("Initial token count exceeds token limit",)
    assert str(raised.value).startswith("Initial token count exceeds token limit (")
    assert "initial_token_count=81 > token_limit=80" in str(raised.value)


@pytest.mark.parametrize("limit", [20, 30, 45, 60, 75])
def test_window_never_starts_on_assistant(manager: MemoryManager, limit: int) -> None:
    memory = HarombeMemory.from_defaults(manager=manager, session_id="s", token_limit=limit)
    memory.put_messages(conversation(15))
    window = memory.get()
    assert window, "some turns fit"
    assert window[0].role.value == "user"


def tool_turn(i: int, result: str) -> list[ChatMessage]:
    return [
        user(f"question {i}"),
        ChatMessage(
            role="assistant",
            blocks=[
                TextBlock(text=""),
                ToolCallBlock(tool_call_id=f"c{i}", tool_name="lookup", tool_kwargs={"q": i}),
            ],
        ),
        ChatMessage(role="tool", content=result, additional_kwargs={"tool_call_id": f"c{i}"}),
        assistant(f"answer {i}"),
    ]


def test_tool_results_are_counted(manager: MemoryManager) -> None:
    memory = HarombeMemory.from_defaults(manager=manager, session_id="t", token_limit=160)
    big = "data " * 150
    memory.put_messages(tool_turn(1, big) + tool_turn(2, "ok"))
    window = memory.get()
    assert cost(memory, window) <= 160
    # the first turn's 150-token tool result does not fit beside the second turn
    assert all(m.content != big.strip() and m.content != big for m in window)
    assert window[0].content == "question 2"


@pytest.mark.parametrize("limit", range(2, 60, 3))
def test_tool_call_and_result_never_split(manager: MemoryManager, limit: int) -> None:
    memory = HarombeMemory.from_defaults(manager=manager, session_id="t", token_limit=limit)
    memory.put_messages(tool_turn(1, "sunny") + tool_turn(2, "rain all day") + tool_turn(3, "x"))
    window = memory.get()
    # within the limit, or (when not even that fits) exactly the newest turn, whole
    assert cost(memory, window) <= limit or window == tool_turn(3, "x")
    assert window[0].role.value == "user"
    calls = {b.tool_call_id for m in window for b in m.blocks if isinstance(b, ToolCallBlock)}
    results = {m.additional_kwargs["tool_call_id"] for m in window if m.role.value == "tool"}
    assert calls == results


def test_recall_from_past_sessions_is_one_system_message(manager: MemoryManager) -> None:
    past = HarombeMemory.from_defaults(manager=manager, session_id="old", user_id="ann")
    past.put_messages([user("my dog is called Biscuit"), assistant("what a lovely name")])
    other = HarombeMemory.from_defaults(manager=manager, session_id="bob", user_id="bob")
    other.put(user("my dog is called Rex"))
    memory = HarombeMemory.from_defaults(
        manager=manager, session_id="new", user_id="ann", token_limit=300
    )
    memory.put(user("hello again"))
    window = memory.get(input="what is my dog called?")
    assert window[0].role.value == "system"
    assert window[0].content is not None
    assert window[0].content.startswith(CONTEXT_HEADER)
    assert "Biscuit" in window[0].content
    assert "Rex" not in window[0].content  # another user's session is never recalled
    assert sum(m.role.value == "system" for m in window) == 1
    assert window[1:] == [user("hello again")]
    assert cost(memory, window) <= 300
    # without input (agents, SimpleChatEngine) the newest user message is the query
    memory.put(user("and my dog?"))
    assert "Biscuit" in str(memory.get()[0].content)


def test_recall_inside_the_budget_and_switchable(manager: MemoryManager) -> None:
    HarombeMemory.from_defaults(manager=manager, session_id="old").put_messages(
        [user("the launch code is tangerine " * 5)] * 6
    )
    memory = HarombeMemory.from_defaults(manager=manager, session_id="new", token_limit=60)
    memory.put(user("short"))
    window = memory.get(input="launch code tangerine")
    assert cost(memory, window) <= 60
    off = HarombeMemory.from_defaults(manager=manager, session_id="new", rag=False)
    assert off.get(input="launch code tangerine") == [user("short")]


async def test_async_recall_matches_sync(manager: MemoryManager) -> None:
    owner = {"manager": manager, "user_id": "ann"}
    HarombeMemory.from_defaults(session_id="old", **owner).put(user("pizza on friday"))
    memory = HarombeMemory.from_defaults(session_id="new", **owner)
    memory.put(user("hi"))
    assert await memory.aget(input="pizza") == memory.get(input="pizza")
    assert "pizza" in str(memory.get(input="pizza")[0].content)


def test_session_system_prompt_leads(manager: MemoryManager) -> None:
    memory = HarombeMemory.from_defaults(
        manager=manager, session_id="p", system_prompt="You are terse."
    )
    memory.put(user("hi"))
    assert [m.content for m in memory.get()] == ["You are terse.", "hi"]
    assert memory.get_all() == [user("hi")]


def test_from_defaults_as_engines_call_it(db: str) -> None:
    memory = HarombeMemory.from_defaults(
        chat_history=[user("a"), assistant("b")], llm=MockLLM(), storage_path=db
    )
    assert memory.token_limit == int(MockLLM().metadata.context_window * 0.75)
    assert memory.get_all() == [user("a"), assistant("b")]
    # chat_history replaces, as LlamaIndex's buffers do
    again = HarombeMemory.from_defaults(chat_history=[user("c")], storage_path=db)
    assert again.get_all() == [user("c")]
    assert again.token_limit == 3000
    memory.close()
    again.close()


def test_to_dict_from_dict_reopens_the_store(db: str) -> None:
    memory = HarombeMemory.from_defaults(
        storage_path=db, session_id="s", user_id="ann", token_limit=123
    )
    memory.put(user("remember me"))
    data = memory.to_dict()
    memory.close()
    assert data["storage_path"] == db
    assert data["class_name"] == "HarombeMemory"
    restored = HarombeMemory.from_dict(data)
    assert (restored.session_id, restored.user_id, restored.token_limit) == ("s", "ann", 123)
    assert restored.get_all() == [user("remember me")]
    restored.close()
    assert HarombeMemory.from_json(memory.to_json()).get_all() == [user("remember me")]


def test_bad_arguments_are_typed_errors(manager: MemoryManager, db: str) -> None:
    with pytest.raises(InvalidInputError, match="strategy"):
        HarombeMemory.from_defaults(manager=manager, strategy="nonsense")  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="not both"):
        HarombeMemory.from_defaults(manager=manager, storage_path=db)
    with pytest.raises(InvalidBudgetError):
        HarombeMemory.from_defaults(manager=manager, token_limit=-5)


def test_a_token_count_given_as_input_is_refused_with_the_keyword_to_use(
    memory: HarombeMemory,
) -> None:
    """LlamaIndex's own ChatMemoryBuffer tests call get(initial_tokens): ChatMemoryBuffer ignores
    ``input``, so that reserves nothing there; harombe refuses it and names the keyword."""
    memory.put(ChatMessage(role="user", content="first message"))
    with pytest.raises(InvalidInputError, match=r"initial_token_count=5\b"):
        memory.get(5)
    assert len(memory.get(initial_token_count=5)) == 1


def test_sessions_stay_apart(manager: MemoryManager) -> None:
    a = HarombeMemory.from_defaults(manager=manager, session_id="a", rag=False)
    b = HarombeMemory.from_defaults(manager=manager, session_id="b", rag=False)
    for i in range(3):
        a.put(user(f"a{i}"))
        b.put(user(f"b{i}"))
    assert [m.content for m in a.get_all()] == ["a0", "a1", "a2"]
    assert [m.content for m in b.get(input="a1")] == ["b0", "b1", "b2"]


def test_recall_by_meaning_with_the_bundled_model(db: str) -> None:
    # No word of the question is in the remembered turn: only the embedding model can find it.
    # the default: semantic memory with the bundled offline model
    past = HarombeMemory.from_defaults(storage_path=db, session_id="old", user_id="ann")
    past.put_messages(
        [
            user("My golden retriever is called Biscuit."),
            user("I repaired the kitchen sink yesterday."),
            user("Quarterly tax forms are due in April."),
        ]
    )
    past.manager.flush()
    past.close()
    memory = HarombeMemory.from_defaults(
        storage_path=db, session_id="new", user_id="ann", rag_top_k=1
    )
    assert memory.manager.semantic_enabled
    window = memory.get(input="puppy name?")
    assert "Biscuit" in str(window[0].content)
    assert "sink" not in str(window[0].content)
    memory.close()


def test_tool_call_arguments_are_counted(manager: MemoryManager) -> None:
    # LlamaIndex's own Memory skips ToolCallBlocks when it counts; here a call whose arguments
    # alone exceed the budget cannot slip into the window.
    memory = HarombeMemory.from_defaults(manager=manager, session_id="t", token_limit=120)
    huge_args = {"document": "lorem ipsum dolor sit amet " * 40}
    memory.put_messages(
        [
            user("summarise this"),
            ChatMessage(
                role="assistant",
                blocks=[
                    ToolCallBlock(tool_call_id="c1", tool_name="summarise", tool_kwargs=huge_args)
                ],
            ),
            ChatMessage(role="tool", content="done", additional_kwargs={"tool_call_id": "c1"}),
            assistant("It is about lorem ipsum."),
            user("thanks"),
        ]
    )
    window = memory.get()
    assert cost(memory, window) <= 120
    assert [m.content for m in window] == ["thanks"]
    assert memory.manager.count_tokens([memory.manager.get_messages("t")[1]]) > 120


def test_llamaindex_embed_model_and_reopening_from_dict(db: str) -> None:
    from llama_index.core import Settings
    from llama_index.core.embeddings import MockEmbedding

    from llamaindex_harombe import LlamaIndexEmbedder

    memory = HarombeMemory.from_defaults(
        storage_path=db, session_id="s", embed_model=MockEmbedding(embed_dim=8)
    )
    assert memory.manager.semantic_enabled
    assert isinstance(memory.manager.embedder, LlamaIndexEmbedder)
    memory.put(user("hello there"))
    data = memory.to_dict()
    memory.close()
    assert (data["embedding"], data["vector_store"]) == ("llamaindex", "database")
    # reopened from the dict, it embeds with LlamaIndex's Settings.embed_model
    Settings.embed_model = MockEmbedding(embed_dim=8)
    restored = HarombeMemory.from_dict(data)
    assert isinstance(restored.manager.embedder, LlamaIndexEmbedder)
    assert restored.get_all() == [user("hello there")]
    restored.close()


def test_threaded_strategy_shows_the_current_thread(db: str) -> None:
    memory = HarombeMemory.from_defaults(
        storage_path=db, session_id="s", token_limit=400, strategy="threaded"
    )
    for role, text in [
        ("user", "How do I bake sourdough bread?"),
        ("assistant", "Feed the starter, mix flour and water, proof overnight, bake hot."),
        ("user", "What is the capital of Australia?"),
        ("assistant", "Canberra."),
        ("user", "How long should the sourdough proof?"),
        ("assistant", "About 12 hours in a cool place."),
    ]:
        memory.put(ChatMessage(role=role, content=text))
    contents = [m.content for m in memory.get()]
    assert contents == [
        "How do I bake sourdough bread?",
        "Feed the starter, mix flour and water, proof overnight, bake hot.",
        "How long should the sourdough proof?",
        "About 12 hours in a cool place.",
    ]
    assert len(memory.get_all()) == 6  # nothing is lost, the digression is another thread
    memory.close()
    # the thread structure is in the store: a new memory object sees the same thread
    again = HarombeMemory.from_defaults(storage_path=db, session_id="s", strategy="threaded")
    assert [m.content for m in again.get()] == contents
    again.close()


async def test_threaded_keeps_tool_chains_and_budget(manager: MemoryManager) -> None:
    memory = HarombeMemory.from_defaults(
        manager=manager,
        session_id="t",
        token_limit=70,
        strategy="threaded",
        thread_selector="linear",
    )
    await memory.aput_messages(tool_turn(1, "sunny") + tool_turn(2, "rain all day"))
    window = await memory.aget()
    assert cost(memory, window) <= 70
    assert window[0].role.value == "user"
    calls = {b.tool_call_id for m in window for b in m.blocks if isinstance(b, ToolCallBlock)}
    assert calls == {m.additional_kwargs["tool_call_id"] for m in window if m.role.value == "tool"}
    assert window[-1].content == "answer 2"
    await memory.areset()
    assert await memory.aget() == []


@pytest.mark.parametrize("strategy", ["summarization", "hybrid"])
def test_summarising_strategies_fit_the_budget(manager: MemoryManager, strategy: str) -> None:
    memory = HarombeMemory.from_defaults(
        manager=manager, session_id="s", token_limit=120, strategy=strategy, keep_last=4
    )
    memory.put_messages(conversation(20))
    window = memory.get()
    assert cost(memory, window) <= 120
    assert window[0].role.value == "system"  # what fell out of the window, summarised
    assert window[1].role.value == "user"
    assert window[-1].content == "turn 19 of a long chat about sailing boats"


def test_llm_thread_selector_takes_the_llm_given_else_settings_llm(
    db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As LlamaIndex's own LLM-driven pieces (FactExtractionMemoryBlock): llm=, else
    # Settings.llm (here the tests' MockLLM). So a memory reopened from its dict, which cannot
    # hold the model, as a serialised workflow Context reopens it, threads again.
    from llama_index.core import Settings

    threaded = {"storage_path": db, "session_id": "s", "strategy": "threaded", "embedding": None}
    memory = HarombeMemory.from_defaults(thread_selector="llm", llm=MockLLM(), **threaded)
    memory.put(user("first"))
    assert memory.get() == [user("first")]
    again = HarombeMemory.from_dict(memory.to_dict())
    again.put(assistant("second"))
    assert [m.content for m in again.get()] == ["first", "second"]
    again.close()
    unset = HarombeMemory.from_defaults(thread_selector="llm", **threaded)
    assert [m.content for m in unset.get()] == ["first", "second"]
    unset.close()
    # LlamaIndex's default model (OpenAI's) is not installed here, or has no key
    monkeypatch.setattr(Settings, "_llm", None)
    with pytest.raises(InvalidInputError, match=r"Settings\.llm"):
        HarombeMemory.from_defaults(thread_selector="llm", **threaded)
    memory.close()


@pytest.mark.parametrize("strategy", ["simple", "summarization", "hybrid", "threaded"])
def test_every_strategy_sends_a_newest_turn_that_does_not_fit(
    manager: MemoryManager, strategy: str
) -> None:
    memory = HarombeMemory.from_defaults(
        manager=manager,
        session_id="s",
        token_limit=30,
        strategy=strategy,  # type: ignore[arg-type]
        thread_selector="linear",
        keep_last=2,
    )
    memory.put_messages(conversation(6))
    big = tool_turn(9, "row of figures " * 30)  # a tool result far over the limit
    memory.put_messages(big)
    window = memory.get()
    # the whole newest turn, nothing cut (after the summary, for the summarising strategies)
    assert [m for m in window if m.role.value != "system"] == big
    assert cost(memory, big) > 30


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (
            lambda db: HarombeMemory.from_defaults(storage_path=db, token_limt=500),
            "HarombeMemory got an unknown argument 'token_limt'; did you mean 'token_limit'?",
        ),
        (
            lambda db: HarombeChatStore(db, user="ann"),
            "HarombeChatStore got an unknown argument 'user'; did you mean 'user_id'?",
        ),
        (
            lambda db: HarombeDBChatStore(db, userid="ann"),
            "HarombeDBChatStore got an unknown argument 'userid'; did you mean 'user_id'?",
        ),
        (
            lambda db: HarombeMemoryBlock(storage_path=db, scop="session"),
            "HarombeMemoryBlock got an unknown argument 'scop'; did you mean 'scope'?",
        ),
    ],
)
def test_a_misspelt_argument_is_refused_not_dropped(
    db: str, build: Callable[[str], object], message: str
) -> None:
    """LlamaIndex's components are pydantic models that ignore unknown fields: a typo used to
    leave the default in place, silently. Nothing is opened or created before the refusal."""
    with pytest.raises(InvalidInputError) as info:
        build(db)
    assert str(info.value) == message
    assert not os.path.exists(db)
