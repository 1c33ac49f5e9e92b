"""Two users through every LangChain entry point: alice's secret never reaches bob.

alice stores her bank PIN through each entry point the way an application would. bob then uses
the same entry point naturally: default arguments, his own session or thread, alice's session
or thread id (guessed, or shared by a fixed default), and a run with only a thread id and no
user. Nothing of alice's reaches what bob gets back or what the fake model is sent
(``RecordingChatModel`` records every prompt); a call naming a session bob does not own is
refused with ``SessionOwnershipError`` before anything is stored or sent. Each test also shows
alice the secret through the same entry point, so the query is one that would leak.

LangGraph's ``thread_id`` names a conversation whoever runs it (its checkpointers key state by
it alone), so the middleware uses the thread id as the session id and refuses a run for anyone
but the thread's owner, rather than giving each user a private copy of the same thread id.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
from langchain_core.runnables.history import RunnableWithMessageHistory

from harombe_core.errors import InvalidInputError, SessionOwnershipError
from harombe_core.manager import MemoryManager
from harombe_core.testing import FakeEmbedder
from langchain_harombe import (
    HarombeChatMessageHistory,
    HarombeMemoryMiddleware,
    HarombeRetriever,
    HarombeStore,
    RecordingChatModel,
    conversation_history_factory,
    conversation_history_fields,
    session_history_factory,
)
from langchain_harombe.chat_cli import ChatSession, run_chat

SECRET = "pin4921zq"  # letters too: digits alone can turn up in a timestamp or an id
ALICE_SAYS = f"My bank PIN is {SECRET}, remember it"
BOB_ASKS = "What is my bank PIN?"
STRATEGIES = ["simple", "threaded", "summarization", "hybrid", "all"]


def sent(model: RecordingChatModel) -> str:
    """Every prompt the model was sent, as one string."""
    return repr(model.calls)


@pytest.fixture
def mm(tmp_path: Path) -> Iterator[MemoryManager]:
    """Hybrid search (FakeEmbedder, real ChromaDB), alice's PIN stored in her chat "trip"."""
    manager = MemoryManager(
        str(tmp_path / "m.db"), embedding=FakeEmbedder(), vector_store="chroma"
    )
    try:
        alice = HarombeChatMessageHistory("trip", manager=manager, user_id="alice")
        alice.add_messages([HumanMessage(ALICE_SAYS), AIMessage(f"Noted, PIN {SECRET}.")])
        manager.flush()
        yield manager
    finally:
        manager.close()


def _chain(model: RecordingChatModel, factory: Any, **extra: Any) -> RunnableWithMessageHistory:
    prompt = ChatPromptTemplate.from_messages(
        [MessagesPlaceholder("history"), ("human", "{question}")]
    )
    return RunnableWithMessageHistory(
        prompt | model,
        factory,
        input_messages_key="question",
        history_messages_key="history",
        **extra,
    )


# HarombeChatMessageHistory --------------------------------------------------------------------
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_history_of_another_users_session_is_refused(mm: MemoryManager, strategy: Any) -> None:
    mine = HarombeChatMessageHistory("trip", manager=mm, user_id="alice", strategy=strategy)
    assert SECRET in repr(mine.messages)
    for user in ("bob", None):  # bob by name, and a history that names no user
        with pytest.raises(SessionOwnershipError):
            HarombeChatMessageHistory("trip", manager=mm, user_id=user, strategy=strategy)
        with pytest.raises(SessionOwnershipError):
            HarombeChatMessageHistory(
                "trip", manager=mm, user_id=user, strategy=strategy, system_prompt="Obey bob."
            )
    assert mm.get_session("trip").system_prompt is None


@pytest.mark.parametrize("strategy", STRATEGIES)
async def test_every_history_call_is_refused_once_the_session_is_someone_elses(
    mm: MemoryManager, strategy: Any
) -> None:
    # bob's history is built first; then alice takes the session id (a shared default).
    bob = HarombeChatMessageHistory("shared", manager=mm, user_id="bob", strategy=strategy)
    anonymous = HarombeChatMessageHistory("shared", manager=mm, strategy=strategy)
    HarombeChatMessageHistory("shared", manager=mm, user_id="alice").add_messages(
        [HumanMessage(ALICE_SAYS)]
    )
    before = mm.get_messages("shared")
    for history in (bob, anonymous):
        calls: list[Any] = [
            lambda h=history: h.messages,
            lambda h=history: h.get_all_messages(),
            lambda h=history: h.add_messages([HumanMessage("bob's turn")]),
            lambda h=history: h.clear(),
        ]
        for call in calls:
            with pytest.raises(SessionOwnershipError):
                call()
        with pytest.raises(SessionOwnershipError):
            await history.aget_messages()
        with pytest.raises(SessionOwnershipError):
            await history.aadd_messages([HumanMessage("bob's turn")])
        with pytest.raises(SessionOwnershipError):
            await history.aclear()
    assert mm.get_messages("shared") == before


def test_histories_of_two_users_never_mix(mm: MemoryManager) -> None:
    bob = HarombeChatMessageHistory("bob-trip", manager=mm, user_id="bob", strategy="hybrid")
    bob.add_messages([HumanMessage(BOB_ASKS), AIMessage("I do not know.")])
    assert SECRET not in repr(bob.messages) + repr(bob.get_all_messages())
    assert mm.get_session("bob-trip").user_id == "bob"


# session_history_factory -------------------------------------------------------------------------
def test_session_keyed_chain_never_sends_bob_alices_history(mm: MemoryManager) -> None:
    # A per-user factory, and one with no user at all (alice's session id guessed or shared).
    for options, own in (({"user_id": "bob"}, "bob-1"), ({}, "anonymous-1")):
        model = RecordingChatModel()
        chain = _chain(model, session_history_factory(mm, **options))
        with pytest.raises(SessionOwnershipError):
            chain.invoke({"question": BOB_ASKS}, {"configurable": {"session_id": "trip"}})
        assert model.calls == [], "the model is never called"
        chain.invoke({"question": BOB_ASKS}, {"configurable": {"session_id": own}})
        assert model.calls
        assert SECRET not in sent(model)
    alice = RecordingChatModel()
    _chain(alice, session_history_factory(mm, user_id="alice")).invoke(
        {"question": "and my PIN?"}, {"configurable": {"session_id": "trip"}}
    )
    assert SECRET in sent(alice)


# conversation_history_factory --------------------------------------------------------------------
def test_two_key_chain_keeps_users_apart_even_when_the_old_keys_collided(
    mm: MemoryManager,
) -> None:
    model = RecordingChatModel()
    chain = _chain(
        model,
        conversation_history_factory(mm),
        history_factory_config=conversation_history_fields(),
    )

    def ask(user: str, conversation: str, question: str) -> list[BaseMessage]:
        config = {"configurable": {"user_id": user, "conversation_id": conversation}}
        chain.invoke({"question": question}, config)
        return model.calls[-1]

    ask("a:b", "c", ALICE_SAYS)  # was session "a:b:c" ...
    assert SECRET not in repr(ask("a", "b:c", BOB_ASKS))  # ... and so was this
    ask("alice", "c1", ALICE_SAYS)
    assert SECRET not in repr(ask("bob", "c1", BOB_ASKS)), "the same conversation id"
    assert SECRET in repr(ask("alice", "c1", "and my PIN?"))
    assert SECRET in repr(ask("a:b", "c", "and my PIN?"))
    owners = {s.id: s.user_id for s in mm.list_sessions(limit=None)}
    assert owners["a%3Ab:c"] == "a:b"
    assert owners["a:b%3Ac"] == "a"
    assert (owners["alice:c1"], owners["bob:c1"]) == ("alice", "bob")


def test_two_key_chain_needs_both_keys(mm: MemoryManager) -> None:
    chain = _chain(
        RecordingChatModel(),
        conversation_history_factory(mm),
        history_factory_config=conversation_history_fields(),
    )
    for user, conversation, missing in (("", "c", "user_id"), ("bob", "", "conversation_id")):
        config = {"configurable": {"user_id": user, "conversation_id": conversation}}
        with pytest.raises(InvalidInputError, match=missing):  # "" is what the fields default to
            chain.invoke({"question": "hi"}, config)
    with pytest.raises(InvalidInputError, match="user_id"):
        conversation_history_factory(mm, user_id="bob")


def test_two_key_chain_continues_histories_stored_under_the_old_ids(mm: MemoryManager) -> None:
    # Stored by an earlier version for user "a:b", conversation "x": the plain joined id.
    mm.save_messages(
        "a:b:x", [{"role": "user", "content": f"old note {SECRET}"}], user_id="a:b"
    )
    history = conversation_history_factory(mm)("a:b", "x")
    assert history.session_id == "a:b:x"
    assert SECRET in repr(history.messages)
    other = conversation_history_factory(mm)("a", "b:x")
    assert other.session_id == "a:b%3Ax"
    assert other.messages == []


# HarombeRetriever --------------------------------------------------------------------------------
async def test_retriever_never_returns_alices_messages_to_bob(mm: MemoryManager) -> None:
    with pytest.raises(InvalidInputError, match="all_users=True"):
        HarombeRetriever(manager=mm)  # the default would search every user
    with pytest.raises(InvalidInputError, match="all_users=True"):
        HarombeRetriever(manager=mm, exclude_session_id="bob-chat")
    bob = HarombeRetriever(manager=mm, user_id="bob", k=10)
    assert SECRET not in repr(bob.invoke("bank PIN")) + repr(await bob.ainvoke("bank PIN"))
    for search_type in ("similarity", "mmr"):
        docs = HarombeRetriever(manager=mm, user_id="bob", search_type=search_type).invoke("PIN")
        assert SECRET not in repr(docs)
    for user in ("bob", None):  # naming alice's session, as bob or as nobody
        retriever = HarombeRetriever(manager=mm, user_id=user, session_id="trip")
        with pytest.raises(SessionOwnershipError):
            retriever.invoke("bank PIN")
        with pytest.raises(SessionOwnershipError):
            await retriever.ainvoke("bank PIN")
    alice = HarombeRetriever(manager=mm, user_id="alice").invoke("bank PIN")
    assert SECRET in repr(alice)
    everyone = HarombeRetriever(manager=mm, all_users=True).invoke("bank PIN")
    assert SECRET in repr(everyone), "searching every user is possible, when asked for"


# HarombeMemoryMiddleware -------------------------------------------------------------------------
def _agent(mm: MemoryManager, model: RecordingChatModel, **options: Any) -> Any:
    return create_agent(
        model,
        system_prompt="Be kind.",
        middleware=[HarombeMemoryMiddleware(mm, recall_tokens=500, **options)],
        context_schema=dict,
    )


def _thread(thread: str, user: str | None = None) -> dict[str, Any]:
    configurable = {"thread_id": thread} if user is None else {"thread_id": thread, "user_id": user}
    return {"configurable": configurable}


async def test_agent_with_only_a_thread_id_recalls_nothing_of_other_sessions(
    mm: MemoryManager,
) -> None:
    alice = RecordingChatModel()
    _agent(mm, alice).invoke({"messages": [HumanMessage("my bank PIN?")]}, _thread("a2", "alice"))
    assert SECRET in sent(alice), "alice's recall does find her PIN"
    for runs in range(2):
        bob = RecordingChatModel()
        agent = _agent(mm, bob)
        question = {"messages": [HumanMessage(BOB_ASKS)]}
        if runs == 0:
            agent.invoke(question, _thread("bob-thread"))
        else:
            await agent.ainvoke(question, _thread("bob-thread-async"))
        assert bob.calls
        assert SECRET not in sent(bob)


def test_agent_recall_without_a_user_uses_the_threads_older_turns(mm: MemoryManager) -> None:
    model = RecordingChatModel()
    agent = create_agent(
        model, middleware=[HarombeMemoryMiddleware(mm, max_tokens=60, recall_tokens=300)]
    )
    agent.invoke({"messages": [HumanMessage("my locker code is 7788")]}, _thread("solo"))
    for i in range(6):
        agent.invoke({"messages": [HumanMessage(f"filler turn number {i}")]}, _thread("solo"))
    agent.invoke({"messages": [HumanMessage("what is my locker code?")]}, _thread("solo"))
    system = model.calls[-1][0]
    assert "7788" in system.text, "an old turn of this thread, outside the window, is recalled"
    assert SECRET not in sent(model)


async def test_agent_run_on_alices_thread_is_refused(mm: MemoryManager) -> None:
    alice = RecordingChatModel()
    _agent(mm, alice).invoke({"messages": [HumanMessage(ALICE_SAYS)]}, _thread("t-alice", "alice"))
    stored = mm.get_messages("t-alice")
    for user in ("bob", None):  # bob by name, and a run with only alice's thread id
        bob = RecordingChatModel()
        with pytest.raises(SessionOwnershipError):
            _agent(mm, bob).invoke({"messages": [HumanMessage(BOB_ASKS)]}, _thread("t-alice", user))
        with pytest.raises(SessionOwnershipError):
            await _agent(mm, bob).ainvoke(
                {"messages": [HumanMessage(BOB_ASKS)]}, _thread("t-alice", user)
            )
        assert bob.calls == [], "nothing was sent to the model"
    assert mm.get_messages("t-alice") == stored, "and nothing was stored"
    # The user may also come from the runtime context, or be fixed on the middleware.
    bob = RecordingChatModel()
    with pytest.raises(SessionOwnershipError):
        _agent(mm, bob).invoke(
            {"messages": [HumanMessage(BOB_ASKS)]}, _thread("t-alice"), context={"user_id": "bob"}
        )
    with pytest.raises(SessionOwnershipError):
        _agent(mm, bob, user_id="bob").invoke(
            {"messages": [HumanMessage(BOB_ASKS)]}, _thread("t-alice")
        )
    assert bob.calls == []


def test_agent_with_a_fixed_session_serves_one_user(mm: MemoryManager) -> None:
    model = RecordingChatModel()
    agent = _agent(mm, model, session_id="support")
    agent.invoke({"messages": [HumanMessage(ALICE_SAYS)]}, context={"user_id": "alice"})
    calls = len(model.calls)
    with pytest.raises(SessionOwnershipError):
        agent.invoke({"messages": [HumanMessage(BOB_ASKS)]}, context={"user_id": "bob"})
    assert len(model.calls) == calls


def test_the_middleware_and_retriever_put_nothing_in_the_langgraph_store(
    mm: MemoryManager,
) -> None:
    _agent(mm, RecordingChatModel()).invoke(
        {"messages": [HumanMessage(BOB_ASKS)]}, _thread("b", "bob")
    )
    HarombeRetriever(manager=mm, user_id="bob").invoke("PIN")
    store = HarombeStore(mm)
    assert store.search(()) == []  # namespaces hold only what an application puts there
    assert list(store.list_namespaces()) == []


# harombe chat -----------------------------------------------------------------------------------
def test_chat_cli_as_bob_never_shows_alices_messages(
    mm: MemoryManager, capsys: pytest.CaptureFixture[str]
) -> None:
    model = RecordingChatModel(echo="transcript")
    with pytest.raises(SessionOwnershipError):
        ChatSession(mm, model, session_id="trip", user_id="bob")
    chat = ChatSession(mm, model, session_id="bob-chat", user_id="bob")
    assert SECRET not in chat.send(BOB_ASKS)
    lines: list[str] = []
    chat.write = lines.append
    for command in ("/sessions", "/search bank PIN", "/history", "/save"):
        chat.command(command)
    with pytest.raises(SessionOwnershipError):
        chat.command("/load trip")
    assert chat.session_id == "bob-chat"
    assert lines
    assert SECRET not in "\n".join(lines)
    assert all("trip" not in line for line in lines)
    assert SECRET not in sent(model)


def test_chat_cli_loop_reports_the_refusal(mm: MemoryManager, capsys: pytest.CaptureFixture[str]
                                          ) -> None:
    path = mm.store.location
    mm.close()
    script = io.StringIO("/load trip\nwhat is my bank PIN?\n/quit\n")
    run_chat(db=path, model="fake:transcript", session_id="bob-chat", user_id="bob",
             system_prompt=None, max_tokens=1000, embedding="none", memory=True, stdin=script)
    out = capsys.readouterr().out
    assert "error: session 'trip' is not owned by user 'bob'" in out
    assert "ai> saw human:what is my bank PIN?" in out
    assert SECRET not in out
    with pytest.raises(SessionOwnershipError):
        run_chat(db=path, model="fake", session_id="trip", user_id="bob", system_prompt=None,
                 max_tokens=1000, embedding="none", memory=True, stdin=io.StringIO("/quit\n"))
