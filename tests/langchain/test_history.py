"""HarombeChatMessageHistory: lossless conversion, windowed views, restarts, async, concurrency."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    ChatMessage,
    FunctionMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
    messages_from_dict,
)
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
from langchain_core.runnables.history import RunnableWithMessageHistory

from harombe_core.errors import InvalidInputError, InvalidMessageError
from harombe_core.manager import MemoryManager
from harombe_core.models import Message
from langchain_harombe import (
    LC_KEY,
    HarombeChatMessageHistory,
    RecordingChatModel,
    conversation_history_factory,
    conversation_history_fields,
    from_langchain,
    session_history_factory,
    to_langchain,
)

ROOT = Path(__file__).resolve().parents[2]
CHAIN_TURN = Path(__file__).with_name("chain_turn.py")

ROUND_TRIP = [
    HumanMessage("hi", id="h1", name="Ann", additional_kwargs={"x": 1}),
    AIMessage(
        "",
        id="a1",
        tool_calls=[{"name": "add", "args": {"a": 1, "b": [2, 3]}, "id": "c1"}],
        invalid_tool_calls=[
            {"name": "bad", "args": "{x", "id": "c2", "error": "oops", "type": "invalid_tool_call"}
        ],
        usage_metadata={"input_tokens": 1, "output_tokens": 2, "total_tokens": 3},
        response_metadata={"model_name": "m", "finish_reason": "tool_calls"},
    ),
    ToolMessage("3", tool_call_id="c1", artifact={"raw": [1, 2]}, status="error", id="t1"),
    ToolMessage("ok", tool_call_id="c9", name="add"),
    SystemMessage("be brief", id="s1"),
    ChatMessage(content="needs work", role="critic", id="c"),
    ChatMessage(content="plain", role="assistant"),
    HumanMessage(
        content=[
            {"type": "text", "text": "look at "},
            {"type": "image_url", "image_url": {"url": "https://example.org/cat.png"}},
            {"type": "text", "text": "this"},
        ]
    ),
    FunctionMessage(content="42", name="answer"),
    AIMessage("héllo ✓ 漢字", name="bot"),
    # few-shot examples (LangChain's ``example`` flag) stay examples
    HumanMessage("2+2?", example=True, id="e1"),
    AIMessage("4", example=True, id="e2"),
    # content blocks of LangChain 1.x: an inline image, reasoning, a citation
    HumanMessage(
        content=[
            {"type": "image", "base64": "iVBORw0KGgo=", "mime_type": "image/png"},
            {"type": "text", "text": "what is it?"},
        ]
    ),
    AIMessage(
        content=[
            {"type": "reasoning", "reasoning": "a small png"},
            {"type": "text", "text": "a dot", "annotations": [{"type": "citation", "url": "u"}]},
        ]
    ),
]


@pytest.mark.parametrize("message", ROUND_TRIP, ids=lambda m: f"{type(m).__name__}")
def test_round_trip_through_the_store_is_lossless(
    manager: MemoryManager, message: BaseMessage
) -> None:
    manager.save_messages("s", [from_langchain(message)])
    (stored,) = manager.get_messages("s")
    back = to_langchain(stored)
    assert type(back) is type(message)
    assert back == message
    # The plain text is what search and token counting see.
    assert stored.content == message.text


def test_stored_columns_hold_the_shared_fields() -> None:
    stored = from_langchain(ROUND_TRIP[1])
    assert stored.role == "assistant"
    assert stored.tool_calls == [
        {"name": "add", "args": {"a": 1, "b": [2, 3]}, "id": "c1", "type": "tool_call"}
    ]
    assert stored.metadata[LC_KEY]["usage_metadata"]["total_tokens"] == 3
    tool = from_langchain(ROUND_TRIP[2])
    assert (tool.role, tool.tool_call_id) == ("tool", "c1")


def test_chunks_are_stored_as_the_message_they_add_up_to() -> None:
    back = to_langchain(from_langchain(AIMessageChunk(content="part", id="x")))
    assert back == AIMessage(content="part", id="x")


def test_messages_from_other_front_ends_are_rebuilt_from_columns() -> None:
    openai_call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "lookup", "arguments": '{"q": "cats"}'},
    }
    ai = to_langchain(Message(role="assistant", content="", tool_calls=[openai_call]))
    assert isinstance(ai, AIMessage)
    assert ai.tool_calls == [
        {"name": "lookup", "args": {"q": "cats"}, "id": "call_1", "type": "tool_call"}
    ]
    tool = to_langchain(Message(role="tool", content="meow", tool_call_id="call_1"))
    assert isinstance(tool, ToolMessage)
    assert tool.tool_call_id == "call_1"
    assert to_langchain(Message(role="user", content="hi")) == HumanMessage("hi")
    assert to_langchain(Message(role="system", content="s")) == SystemMessage("s")


def test_unstorable_values_are_refused_with_a_typed_error() -> None:
    with pytest.raises(InvalidMessageError):
        from_langchain("not a message")  # type: ignore[arg-type]
    with pytest.raises(InvalidMessageError, match="JSON"):
        from_langchain(ToolMessage("x", tool_call_id="c", artifact=object()))


def test_history_add_read_clear(manager: MemoryManager) -> None:
    history = HarombeChatMessageHistory("s1", manager=manager, user_id="u1")
    history.add_messages([HumanMessage("hello"), AIMessage("hi there")])
    history.add_user_message("how are you?")
    assert [m.text for m in history.messages] == ["hello", "hi there", "how are you?"]
    assert manager.get_session("s1").user_id == "u1"
    history.clear()
    assert history.messages == []
    assert manager.session_exists("s1"), "clear keeps the session, only its messages go"


def test_system_prompt_is_set_on_creation(manager: MemoryManager) -> None:
    history = HarombeChatMessageHistory("s1", manager=manager, system_prompt="Be kind.")
    history.add_user_message("hi")
    assert history.messages == [SystemMessage("Be kind."), HumanMessage("hi")]
    assert history.get_all_messages() == [HumanMessage("hi")]


def test_window_respects_max_tokens_and_is_stable(manager: MemoryManager) -> None:
    history = HarombeChatMessageHistory("s1", manager=manager, max_tokens=60)
    for i in range(20):
        history.add_messages([HumanMessage(f"question {i} " * 3), AIMessage(f"answer {i} " * 3)])
    view = history.messages
    assert view == history.messages, "two reads without a write must agree"
    stored = manager.get_messages("s1")
    window = stored[-len(view) :]
    assert [to_langchain(m) for m in window] == view
    used = sum(m.token_count or 0 for m in window)
    assert 0 < used <= 60
    assert used + (stored[-len(view) - 1].token_count or 0) > 60, "window is as full as it can be"
    everything = HarombeChatMessageHistory("s1", manager=manager, strategy="all")
    assert len(everything.messages) == 40


def test_window_never_starts_inside_a_tool_exchange(manager: MemoryManager) -> None:
    history = HarombeChatMessageHistory("s1", manager=manager)
    turn: list[BaseMessage] = [
        HumanMessage("add numbers please " * 5),
        AIMessage(
            "",
            tool_calls=[
                {"name": "add", "args": {"a": 1, "b": 2}, "id": "c1"},
                {"name": "add", "args": {"a": 3, "b": 4}, "id": "c2"},
            ],
        ),
        ToolMessage("3", tool_call_id="c1"),
        ToolMessage("7", tool_call_id="c2"),
        AIMessage("3 and 7"),
    ]
    history.add_messages(turn)
    total = sum(m.token_count or 0 for m in manager.get_messages("s1"))
    for budget in range(total + 1):
        view = HarombeChatMessageHistory("s1", manager=manager, max_tokens=budget).messages
        assert not view or not isinstance(view[0], ToolMessage)
        calls = {c["id"] for m in view if isinstance(m, AIMessage) for c in m.tool_calls}
        results = {m.tool_call_id for m in view if isinstance(m, ToolMessage)}
        assert calls == results or (not calls and not results), budget


def test_unknown_strategy_and_ambiguous_source_are_refused(manager: MemoryManager) -> None:
    with pytest.raises(InvalidInputError, match="strategy"):
        HarombeChatMessageHistory("s", manager=manager, strategy="magic")  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="not both"):
        HarombeChatMessageHistory("s", manager=manager, storage_path="x.db")
    with pytest.raises(InvalidInputError, match="storage_path"):
        HarombeChatMessageHistory("s")


def test_storage_path_opens_and_closes_its_own_manager(db_path: str) -> None:
    options = {"embedding": None}
    history = HarombeChatMessageHistory("s", storage_path=db_path, manager_options=options)
    history.add_user_message("persisted")
    history.close()
    again = HarombeChatMessageHistory("s", storage_path=db_path, manager_options=options)
    assert again.messages == [HumanMessage("persisted")]
    assert not again.manager.semantic_enabled
    again.close()


def test_a_history_from_a_path_searches_by_meaning_with_the_process_model(
    tmp_path: Path,
) -> None:
    """One default everywhere: the core's semantic memory, with the one model of the process."""
    from langchain_harombe import HarombeRetriever

    core = MemoryManager(str(tmp_path / "core.db"))
    history = HarombeChatMessageHistory("s", storage_path=str(tmp_path / "chat.db"))
    retriever = HarombeRetriever(storage_path=str(tmp_path / "chat.db"), all_users=True, k=1)
    try:
        assert history.manager.semantic_enabled
        assert history.manager.embedder is core.embedder
        history.add_user_message("My golden retriever is called Biscuit.")
        history.add_user_message("Tax forms are due in April.")
        history.manager.flush()
        (found,) = retriever.invoke("puppy")
        assert "Biscuit" in found.page_content
    finally:
        retriever.close()
        history.close()
        core.close()


def _turn(db: str, session: str, question: str, reply: str, max_tokens: int | None = None) -> dict:
    command = [sys.executable, "-W", "ignore::DeprecationWarning", str(CHAIN_TURN), db, session,
               question, "--reply", reply]
    if max_tokens is not None:
        command += ["--max-tokens", str(max_tokens)]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=True)
    result: dict = json.loads(done.stdout)
    result["sent"] = messages_from_dict(result["sent"])
    return result


def test_lcel_chain_keeps_history_across_processes(db_path: str) -> None:
    first = _turn(db_path, "s1", "My name is Ann.", "Hello Ann.")
    assert [(type(m), m.text) for m in first["sent"]] == [
        (SystemMessage, "You are terse."),
        (HumanMessage, "My name is Ann."),
    ]
    second = _turn(db_path, "s1", "What is my name?", "Ann.")
    assert [(type(m), m.text) for m in second["sent"]] == [
        (SystemMessage, "You are terse."),
        (HumanMessage, "My name is Ann."),
        (AIMessage, "Hello Ann."),
        (HumanMessage, "What is my name?"),
    ]
    with MemoryManager(db_path, embedding=None) as manager:
        assert [m.content for m in manager.get_messages("s1")] == [
            "My name is Ann.", "Hello Ann.", "What is my name?", "Ann.",
        ]


def test_lcel_chain_window_after_restart(db_path: str) -> None:
    with MemoryManager(db_path, embedding=None) as manager:
        history = HarombeChatMessageHistory("s1", manager=manager)
        for i in range(12):
            history.add_messages([HumanMessage(f"fact {i}: " + "x " * 8), AIMessage(f"noted {i}")])
        expected = HarombeChatMessageHistory("s1", manager=manager, max_tokens=50).messages
        stored = manager.get_messages("s1")
    assert 0 < len(expected) < len(stored)
    result = _turn(db_path, "s1", "Which facts?", "Some.", max_tokens=50)
    system, question = SystemMessage("You are terse."), HumanMessage("Which facts?")
    assert result["sent"] == [system, *expected, question]
    window = stored[-len(expected) :]
    assert sum(m.token_count or 0 for m in window) <= 50
    assert [m.text for m in expected] == [m.content for m in window]


def test_two_key_factory_isolates_users(manager: MemoryManager) -> None:
    model = RecordingChatModel()
    prompt = ChatPromptTemplate.from_messages(
        [MessagesPlaceholder("history"), ("human", "{question}")]
    )
    chain = RunnableWithMessageHistory(
        prompt | model,
        conversation_history_factory(manager),
        input_messages_key="question",
        history_messages_key="history",
        history_factory_config=conversation_history_fields(),
    )
    for user in ("ann", "bob"):
        chain.invoke(
            {"question": f"I am {user}"},
            config={"configurable": {"user_id": user, "conversation_id": "c1"}},
        )
    chain.invoke(
        {"question": "who am I?"},
        config={"configurable": {"user_id": "bob", "conversation_id": "c1"}},
    )
    assert [m.text for m in model.calls[-1]] == ["I am bob", "echo: I am bob", "who am I?"]
    assert manager.get_session("ann:c1").user_id == "ann"
    assert len(manager.get_messages("ann:c1")) == 2


async def test_async_chain_inside_a_running_loop(manager: MemoryManager) -> None:
    asyncio.get_running_loop()  # this test body runs inside the loop
    model = RecordingChatModel(responses=["first", "second"])
    prompt = ChatPromptTemplate.from_messages(
        [MessagesPlaceholder("history"), ("human", "{question}")]
    )
    chain = RunnableWithMessageHistory(
        prompt | model,
        session_history_factory(manager, max_tokens=1000),
        input_messages_key="question",
        history_messages_key="history",
    )
    config = {"configurable": {"session_id": "a1"}}
    await chain.ainvoke({"question": "one"}, config=config)
    await chain.ainvoke({"question": "two"}, config=config)
    assert model.calls[-1] == [HumanMessage("one"), AIMessage("first", id=model.calls[-1][1].id),
                               HumanMessage("two")]
    history = HarombeChatMessageHistory("a1", manager=manager)
    assert [m.text for m in await history.aget_messages()] == ["one", "first", "two", "second"]
    await history.aclear()
    assert await history.aget_messages() == []


async def test_concurrent_aadd_messages_lose_nothing(db_path: str) -> None:
    with MemoryManager(db_path, embedding=None) as manager:
        history = HarombeChatMessageHistory("busy", manager=manager, strategy="all")

        async def writer(i: int) -> None:
            await history.aadd_messages([HumanMessage(f"q{i}"), AIMessage(f"a{i}")])

        await asyncio.gather(*(writer(i) for i in range(40)))
        messages = await history.aget_messages()
    assert len(messages) == 80
    assert {m.text for m in messages} == {f"{p}{i}" for i in range(40) for p in "qa"}
    # Each batch was one transaction: a question is always directly followed by its answer.
    for question, answer in zip(messages[::2], messages[1::2], strict=True):
        assert answer.text == "a" + question.text[1:]


class _ContextRecorder(MemoryManager):
    """A real manager whose get_context records how the history asked for its view."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.asked: list[dict[str, object]] = []

    def get_context(self, session_id: str, **options: object) -> list[Message]:
        self.asked.append({"session_id": session_id, **options})
        return self.get_messages(session_id)[-1:]


@pytest.mark.parametrize("strategy", ["simple", "threaded", "summarization", "hybrid"])
def test_strategies_are_delegated_to_the_core(strategy: str) -> None:
    with _ContextRecorder(":memory:", embedding=None) as manager:
        history = HarombeChatMessageHistory(
            "s", manager=manager, strategy=strategy, max_tokens=300,  # type: ignore[arg-type]
            start_on_user=True, context_options={"k": 2},
        )
        history.add_messages([HumanMessage("a"), AIMessage("b")])
        assert history.messages == [AIMessage("b")]
        assert manager.asked == [
            {"session_id": "s", "strategy": strategy, "max_tokens": 300, "start_on_user": True,
             "user_id": None, "k": 2}
        ]


def _pick_oldest(messages: list[BaseMessage]) -> str:
    """A scripted node selector: always continue the oldest candidate thread."""
    import re

    ids = [int(i) for i in re.findall(r"^(\d+): ", messages[-1].text, re.MULTILINE)]
    return json.dumps({"selected_node_id": ids[0]})


def test_threaded_view_follows_the_thread_through_a_chain(manager: MemoryManager) -> None:
    from langchain_harombe import node_selector

    selector = node_selector(RecordingChatModel(respond=_pick_oldest))
    model = RecordingChatModel(responses=["a1", "a2", "a3", "a4"])
    prompt = ChatPromptTemplate.from_messages(
        [MessagesPlaceholder("history"), ("human", "{question}")]
    )
    chain = RunnableWithMessageHistory(
        prompt | model,
        session_history_factory(manager, strategy="threaded", node_selector=selector),
        input_messages_key="question",
        history_messages_key="history",
    )
    config = {"configurable": {"session_id": "t"}}
    for question in ("q1 boats", "q2 cooking", "q3 boats again", "q4"):
        chain.invoke({"question": question}, config)
    # q3 was threaded under a1 (the oldest candidate), so q4 continues q1 -> a1 -> q3 -> a3.
    assert [m.text for m in model.calls[-1]] == ["q1 boats", "a1", "q3 boats again", "a3", "q4"]
    stored = manager.get_messages("t")
    assert [m.content for m in stored] == [
        "q1 boats", "a1", "q2 cooking", "a2", "q3 boats again", "a3", "q4", "a4",
    ]
    assert stored[4].parent_id == stored[1].id
    assert stored[5].parent_id == stored[4].id


async def test_threaded_tool_batches_chain_in_order(manager: MemoryManager) -> None:
    history = HarombeChatMessageHistory("tt", manager=manager, strategy="threaded")
    await history.aadd_messages(
        [
            HumanMessage("add 1 and 2"),
            AIMessage("", tool_calls=[{"name": "add", "args": {"a": 1, "b": 2}, "id": "c1"}]),
            ToolMessage("3", tool_call_id="c1"),
            AIMessage("It is 3."),
        ]
    )
    await history.aadd_messages([HumanMessage("thanks"), AIMessage("welcome")])
    view = await history.aget_messages()
    assert [m.text for m in view] == ["add 1 and 2", "", "3", "It is 3.", "thanks", "welcome"]
    stored = manager.get_messages("tt")
    assert [m.parent_id for m in stored[1:]] == [m.id for m in stored[:-1]]


@pytest.mark.parametrize("strategy", ["summarization", "hybrid"])
def test_summary_strategies_send_a_summary_then_the_newest_turns(
    manager: MemoryManager, strategy: str
) -> None:
    history = HarombeChatMessageHistory("long", manager=manager)
    for i in range(15):
        history.add_messages(
            [HumanMessage(f"Tell me fact {i} about the planet Mars."), AIMessage(f"Mars fact {i}.")]
        )
    view = HarombeChatMessageHistory(
        "long", manager=manager, strategy=strategy, max_tokens=400  # type: ignore[arg-type]
    ).messages
    assert isinstance(view[0], SystemMessage)
    assert view[0].text.startswith("Summary of the earlier conversation")
    assert view[-2:] == [HumanMessage("Tell me fact 14 about the planet Mars."),
                         AIMessage("Mars fact 14.")]
    context = manager.get_context("long", strategy, 400)
    assert [to_langchain(m) for m in context] == view
    assert sum(m.token_count or 0 for m in context) <= 400


def test_the_same_steps_as_langchains_in_memory_history(manager: MemoryManager) -> None:
    """The steps run on InMemoryChatMessageHistory and on ours read back the same messages;
    the two deliberate differences (docs/langchain.md) are stated beside them."""
    import warnings

    from langchain_core.chat_history import InMemoryChatMessageHistory

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # deprecated in LangChain 1.6: still the reference
        theirs = InMemoryChatMessageHistory()
    ours = HarombeChatMessageHistory("same-steps", manager=manager)

    def seen(history: object) -> list[tuple[str, object, object, object, object]]:
        # a chunk is kept as the message it adds up to (test_chunks_are_stored_as_...)
        return [
            (
                "ai" if m.type == "AIMessageChunk" else m.type,
                m.content,
                m.id,
                m.name,
                getattr(m, "tool_calls", None),
            )
            for m in history.messages  # type: ignore[attr-defined]
        ]

    call = {"name": "add", "args": {"a": 1}, "id": "c1"}
    for history in (theirs, ours):
        history.add_user_message("hi")
        history.add_ai_message("hello")
        history.add_messages(
            [
                HumanMessage("x", id="my-id", name="Ann"),
                AIMessage("", tool_calls=[call]),
                ToolMessage("3", tool_call_id="c1"),
            ]
        )
        history.add_message(AIMessageChunk(content="chunk"))
        asyncio.run(history.aadd_messages([HumanMessage("async")]))
    assert seen(ours) == seen(theirs)
    assert [m.content for m in asyncio.run(ours.aget_messages())] == [
        m.content for m in asyncio.run(theirs.aget_messages())
    ]
    # a str is stored by theirs (and breaks a later read); ours refuses it when it is added
    with pytest.raises(InvalidMessageError, match="BaseMessage"):
        ours.add_message("plain")  # type: ignore[arg-type]
    # messages is a view of the window in ours, not a field to assign
    theirs.messages = [HumanMessage("replaced")]
    with pytest.raises(AttributeError):
        ours.messages = [HumanMessage("replaced")]  # type: ignore[misc]
    ours.clear()
    ours.add_messages([HumanMessage("replaced")])
    assert seen(ours) == seen(theirs)
    for history in (theirs, ours):
        asyncio.run(history.aclear())
    assert ours.messages == theirs.messages == []


def test_a_chain_with_retriever_and_history_batched_over_20_sessions(tmp_path: Path) -> None:
    """``RunnableWithMessageHistory`` around an LCEL chain that also retrieves past turns,
    run with ``batch``/``abatch`` over 20 sessions at once and watched with ``astream_events``:
    the answers, every session's stored history and the event sequence are those of the same
    chain on ``InMemoryChatMessageHistory``."""
    import warnings
    from operator import itemgetter
    from typing import Any

    from langchain_core.chat_history import InMemoryChatMessageHistory
    from langchain_core.documents import Document
    from langchain_core.runnables import Runnable, RunnableLambda, RunnablePassthrough

    from harombe_core.testing import FakeEmbedder
    from langchain_harombe import HarombeRetriever

    def reply(messages: list[BaseMessage]) -> str:  # depends only on what the model is sent
        return f"{messages[0].text} | {messages[-1].text} | {len(messages)} messages"

    def chain(history: Any, retriever: Runnable[str, list[Document]]) -> Runnable[Any, Any]:
        prompt = ChatPromptTemplate.from_messages(
            [("system", "Past: {past}"), MessagesPlaceholder("history"), ("human", "{question}")]
        )
        past = (
            itemgetter("question")
            | retriever
            | RunnableLambda(lambda docs: "; ".join(sorted(d.page_content for d in docs)))
        )
        core = RunnablePassthrough.assign(past=past) | prompt | RecordingChatModel(respond=reply)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # deprecated in LangChain 1.x: still used
            return RunnableWithMessageHistory(
                core, history, input_messages_key="question", history_messages_key="history"
            )

    histories: dict[str, Any] = {}

    def in_memory(session_id: str) -> Any:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return histories.setdefault(session_id, InMemoryChatMessageHistory())

    nothing = RunnableLambda(lambda query: [])
    sessions = [{"configurable": {"session_id": f"s{i}"}} for i in range(20)]
    with MemoryManager(str(tmp_path / "m.db"), embedding=FakeEmbedder()) as mm:
        theirs, ours = chain(in_memory, nothing), chain(session_history_factory(mm), nothing)
        for turn in range(4):
            questions = [{"question": f"session {i} turn {turn} code {i * 7}"} for i in range(20)]
            if turn % 2:
                expected = asyncio.run(theirs.abatch(questions, sessions))
                got = asyncio.run(ours.abatch(questions, sessions))
            else:
                expected, got = theirs.batch(questions, sessions), ours.batch(questions, sessions)
            assert [m.text for m in got] == [m.text for m in expected]
        for i in range(20):
            stored = HarombeChatMessageHistory(f"s{i}", manager=mm).get_all_messages()
            assert [(m.type, m.text) for m in stored] == [
                (m.type, m.text) for m in histories[f"s{i}"].messages
            ]

        async def events(runnable: Runnable[Any, Any], session_id: str) -> list[tuple[str, str]]:
            config = {"configurable": {"session_id": session_id}}
            stream = runnable.astream_events({"question": "events?"}, config, version="v2")
            return [(e["event"], e["name"]) async for e in stream]

        assert asyncio.run(events(ours, "ev")) == asyncio.run(events(theirs, "ev"))
        mm.flush()
        remembering = chain(
            session_history_factory(mm), HarombeRetriever(manager=mm, k=2, all_users=True)
        )
        seen = asyncio.run(events(remembering, "new"))
        assert ("on_retriever_end", "HarombeRetriever") in seen
        answer = remembering.invoke({"question": "code 21"}, {"configurable": {"session_id": "n"}})
        assert "session 3 turn" in answer.text  # the past turns of session 3 were retrieved
