"""Two users through every LlamaIndex entry point: alice's secret never reaches bob.

alice stores her bank PIN through each entry point; bob uses the same one naturally (default
arguments, his own session, alice's session id or chat-store key, no user at all). Nothing of
alice's reaches what bob gets back or what the LLM is sent (``MockLLMWithChatMemoryOfLastCall``
keeps the last prompt); naming a session bob does not own is refused with
``SessionOwnershipError``. Each test also shows alice the secret through the same entry point.

Where LlamaIndex defines the behaviour, its own class runs in the same test: ``Memory`` gives
each instance a new session id when none is given (``HarombeMemory`` now does too, where it used
to share ``"default"``), and chat-store keys are global (``SimpleChatStore``); a harombe store
given a ``user_id`` adds the ownership check on top.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.chat_engine import CondensePlusContextChatEngine, SimpleChatEngine
from llama_index.core.llms.mock import MockLLMWithChatMemoryOfLastCall
from llama_index.core.memory import ChatMemoryBuffer, Memory
from llama_index.core.schema import QueryBundle
from llama_index.core.storage.chat_store import SimpleChatStore

from harombe_core.errors import InvalidInputError, SessionOwnershipError
from harombe_core.manager import MemoryManager
from harombe_core.testing import FakeEmbedder
from llamaindex_harombe import (
    HarombeChatStore,
    HarombeDBChatStore,
    HarombeMemory,
    HarombeMemoryBlock,
    HarombeRetriever,
)

SECRET = "pin4921zq"  # letters too: digits alone can turn up in a timestamp or an id
ALICE_SAYS = f"My bank PIN is {SECRET}, remember it"
BOB_ASKS = "What is my bank PIN?"


def user(text: str) -> ChatMessage:
    return ChatMessage(role="user", content=text)


def assistant(text: str) -> ChatMessage:
    return ChatMessage(role="assistant", content=text)


def llm() -> MockLLMWithChatMemoryOfLastCall:
    return MockLLMWithChatMemoryOfLastCall(max_tokens=3, is_chat_model=True)


def prompt(model: MockLLMWithChatMemoryOfLastCall) -> str:
    assert model.last_chat_messages is not None, "the LLM was called"
    return "\n".join(m.content or "" for m in model.last_chat_messages)


@pytest.fixture
def mm(tmp_path: Path) -> Iterator[MemoryManager]:
    """Hybrid search (FakeEmbedder, real ChromaDB); alice's PIN in her session "trip"."""
    manager = MemoryManager(
        str(tmp_path / "m.db"), embedding=FakeEmbedder(), vector_store="chroma"
    )
    try:
        alice = HarombeMemory.from_defaults(manager=manager, session_id="trip", user_id="alice")
        alice.put_messages([user(ALICE_SAYS), assistant(f"Noted, PIN {SECRET}.")])
        manager.flush()
        yield manager
    finally:
        manager.close()


# HarombeMemory ----------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["llamaindex Memory", "HarombeMemory"])
def test_memories_built_with_defaults_get_sessions_of_their_own(
    kind: str, mm: MemoryManager
) -> None:
    def build() -> Any:
        if kind == "llamaindex Memory":
            return Memory.from_defaults(chat_store=HarombeDBChatStore(manager=mm))
        return HarombeMemory.from_defaults(manager=mm)

    first, second = build(), build()
    assert first.session_id != second.session_id
    first.put(user("first memory's note"))
    assert second.get_all() == []
    assert [m.content for m in first.get_all()] == ["first memory's note"]


def test_bob_with_default_arguments_sees_nothing_of_alices(mm: MemoryManager) -> None:
    # The reported case: from_defaults(manager=mm, user_id="bob").get() returned alice's message.
    for who in ("bob", None):
        bob = HarombeMemory.from_defaults(manager=mm, user_id=who)
        bob.put(user(BOB_ASKS))
        window = bob.get() + bob.get(input="bank PIN") + bob.get_all()
        assert SECRET not in repr(window)
    alice = HarombeMemory.from_defaults(manager=mm, user_id="alice")
    assert SECRET in repr(alice.get(input="bank PIN")), "alice recalls her PIN in a new session"


async def test_memory_on_alices_session_is_refused(mm: MemoryManager) -> None:
    for who in ("bob", None):  # bob by name, or no user, with alice's session id
        with pytest.raises(SessionOwnershipError):
            HarombeMemory.from_defaults(manager=mm, session_id="trip", user_id=who)
    # Memories built first, on sessions that then became alice's (a transfer by the application).
    bob = HarombeMemory.from_defaults(manager=mm, session_id="shared", user_id="bob")
    nobody = HarombeMemory.from_defaults(manager=mm, session_id="shared-too")
    for memory in (bob, nobody):
        mm.update_session(memory.session_id, user_id="alice")
        mm.save_messages(memory.session_id, [{"role": "user", "content": ALICE_SAYS}])
        before = mm.get_messages(memory.session_id)
        for call in (
            lambda m=memory: m.get(),
            lambda m=memory: m.get_all(),
            lambda m=memory: m.put(user("bob's turn")),
            lambda m=memory: m.put_messages([user("bob's turn")]),
            lambda m=memory: m.set([user("bob's turn")]),
            lambda m=memory: m.reset(),
        ):
            with pytest.raises(SessionOwnershipError):
                call()
        for coroutine in (
            lambda m=memory: m.aget(),
            lambda m=memory: m.aget_all(),
            lambda m=memory: m.aput(user("bob's turn")),
            lambda m=memory: m.aset([user("bob's turn")]),
            lambda m=memory: m.areset(),
        ):
            with pytest.raises(SessionOwnershipError):
                await coroutine()
        assert mm.get_messages(memory.session_id) == before


@pytest.mark.parametrize("strategy", ["simple", "summarization", "hybrid", "threaded"])
def test_engine_prompt_for_bob_holds_nothing_of_alices(
    mm: MemoryManager, strategy: str
) -> None:
    options = {"thread_selector": "linear"} if strategy == "threaded" else {}
    for who, sees in (("bob", False), (None, False), ("alice", True)):
        model = llm()
        memory = HarombeMemory.from_defaults(
            manager=mm, user_id=who, strategy=strategy, keep_last=2, **options
        )
        engine = SimpleChatEngine.from_defaults(llm=model, memory=memory)
        engine.chat("what was my bank PIN again?")
        assert (SECRET in prompt(model)) is sees, who


def test_memory_recall_scopes(mm: MemoryManager) -> None:
    mm.save_messages("bob-old", [{"role": "user", "content": "my bank is Acme"}], user_id="bob")
    mm.flush()
    bob = HarombeMemory.from_defaults(manager=mm, user_id="bob")
    recalled = repr(bob.get(input="bank PIN"))
    assert "Acme" in recalled, "bob's own earlier sessions are recalled"
    assert SECRET not in recalled
    nobody = HarombeMemory.from_defaults(manager=mm)
    assert "Acme" not in repr(nobody.get(input="bank PIN")), "no user: no other session"
    everyone = HarombeMemory.from_defaults(manager=mm, rag_scope="all")
    assert SECRET in repr(everyone.get(input="bank PIN")), "all users only when asked for"


async def test_all_scopes_with_a_user_stay_inside_that_user(mm: MemoryManager) -> None:
    # As the retrievers' all_users=True with a user_id: "all" is all of that user's sessions;
    # only a memory or block built without a user reaches every user.
    mm.save_messages("bob-old", [{"role": "user", "content": "my bank is Acme"}], user_id="bob")
    mm.flush()
    bob = HarombeMemory.from_defaults(manager=mm, user_id="bob", rag_scope="all")
    recalled = repr(bob.get(input="bank PIN")) + repr(await bob.aget(input="bank PIN"))
    assert "Acme" in recalled, "bob's own earlier sessions are recalled"
    assert SECRET not in recalled
    block = HarombeMemoryBlock(manager=mm, user_id="bob", scope="all")
    text = await block.aget([user("bank PIN?")], session_id="bob-now")
    assert "Acme" in text
    assert SECRET not in text
    anyone = HarombeMemoryBlock(manager=mm, scope="all")
    assert SECRET in await anyone.aget([user("bank PIN?")], session_id="bob-now")


# chat stores ------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["SimpleChatStore", "HarombeChatStore"])
def test_a_chat_store_key_is_global_without_users(kind: str, mm: MemoryManager) -> None:
    # LlamaIndex's contract: a key names one conversation, whoever uses it. Ours matches when
    # no user is given; the application keys conversations itself.
    store: Any = SimpleChatStore() if kind == "SimpleChatStore" else HarombeChatStore(manager=mm)
    first = ChatMemoryBuffer.from_defaults(chat_store=store)
    first.put(user("a note"))
    second = ChatMemoryBuffer.from_defaults(chat_store=store)
    assert first.chat_store_key == second.chat_store_key == "chat_history"
    assert [m.content for m in second.get_all()] == ["a note"]


async def test_user_bound_chat_store_refuses_another_users_key(mm: MemoryManager) -> None:
    alice = ChatMemoryBuffer.from_defaults(chat_store=HarombeChatStore(manager=mm, user_id="alice"))
    alice.put(user(ALICE_SAYS))
    assert SECRET in repr(alice.get_all())
    bob_store = HarombeChatStore(manager=mm, user_id="bob")
    bob = ChatMemoryBuffer.from_defaults(chat_store=bob_store)  # the same default key
    with pytest.raises(SessionOwnershipError):
        bob.get()
    with pytest.raises(SessionOwnershipError):
        bob.put(user("bob's turn"))
    before = mm.get_messages("chat_history")
    for key in ("chat_history", "trip"):  # alice's keys, and no user at all
        for store in (bob_store, HarombeChatStore(manager=mm)):
            for call in (
                lambda s=store, k=key: s.get_messages(k),
                lambda s=store, k=key: s.set_messages(k, [user("x")]),
                lambda s=store, k=key: s.add_message(k, user("x")),
                lambda s=store, k=key: s.add_message(k, user("x"), idx=0),
                lambda s=store, k=key: s.delete_messages(k),
                lambda s=store, k=key: s.delete_message(k, 0),
                lambda s=store, k=key: s.delete_last_message(k),
            ):
                with pytest.raises(SessionOwnershipError):
                    call()
            for coroutine in (
                lambda s=store, k=key: s.aget_messages(k),
                lambda s=store, k=key: s.async_add_message(k, user("x")),
                lambda s=store, k=key: s.aset_messages(k, [user("x")]),
                lambda s=store, k=key: s.adelete_messages(k),
            ):
                with pytest.raises(SessionOwnershipError):
                    await coroutine()
    assert mm.get_messages("chat_history") == before
    mine = ChatMemoryBuffer.from_defaults(chat_store=bob_store, chat_store_key="bob-chat")
    mine.put(user(BOB_ASKS))
    assert bob_store.get_keys() == ["bob-chat"]
    assert HarombeChatStore(manager=mm).get_keys() == [], "no user: only sessions nobody owns"
    assert SECRET not in repr(mine.get_all())


async def test_llamaindex_memory_on_user_bound_harombe_stores(mm: MemoryManager) -> None:
    def memory_for(who: str | None, session_id: str | None = None, **block: Any) -> Memory:
        return Memory.from_defaults(
            session_id=session_id,
            chat_store=HarombeDBChatStore(manager=mm, user_id=who),
            memory_blocks=[
                HarombeMemoryBlock(manager=mm, user_id=who, persist_flushed=False, **block)
            ],
        )

    alice = memory_for("alice", "alice-s")
    await alice.aput_messages([user(ALICE_SAYS), assistant("noted")])
    await mm.aflush()
    again = memory_for("alice", scope="user")  # a new session of alice's recalls the PIN
    await again.aput(user(BOB_ASKS))
    assert SECRET in repr(await again.aget())
    for who in ("bob", None):
        mine = memory_for(who, scope="user") if who else memory_for(None)
        await mine.aput(user(BOB_ASKS))
        assert SECRET not in repr(await mine.aget())
        theirs = memory_for(who, "alice-s")  # alice's session id
        with pytest.raises(SessionOwnershipError):
            await theirs.aget()
        with pytest.raises(SessionOwnershipError):
            await theirs.aput(user("bob's turn"))
    assert len(mm.get_messages("alice-s")) == 2
    bob_keys = await HarombeDBChatStore(manager=mm, user_id="bob").get_keys()
    assert "alice-s" not in bob_keys


async def test_memory_block_refuses_another_users_session(mm: MemoryManager) -> None:
    for block in (
        HarombeMemoryBlock(manager=mm, user_id="bob"),
        HarombeMemoryBlock(manager=mm),  # scope="session", no user
    ):
        with pytest.raises(SessionOwnershipError):
            await block.aget([user("bank PIN?")], session_id="trip")
        with pytest.raises(SessionOwnershipError):
            await block.aput([user("bob's turn")], session_id="trip")
    bob = HarombeMemoryBlock(manager=mm, user_id="bob", scope="user")
    assert SECRET not in await bob.aget([user("bank PIN?")], session_id="bob-now")
    alice = HarombeMemoryBlock(manager=mm, user_id="alice", scope="user")
    assert SECRET in await alice.aget([user("bank PIN?")], session_id="alice-now")
    assert len(mm.get_messages("trip")) == 2


# HarombeRetriever ---------------------------------------------------------------------------------
async def test_retriever_never_returns_alices_messages_to_bob(mm: MemoryManager) -> None:
    with pytest.raises(InvalidInputError, match="all_users=True"):
        HarombeRetriever(manager=mm)
    bob = HarombeRetriever(manager=mm, user_id="bob", top_k=10)
    nodes = bob.retrieve("bank PIN") + await bob.aretrieve(QueryBundle("bank PIN"))
    assert SECRET not in repr(nodes)
    for who in ("bob", None):
        theirs = HarombeRetriever(manager=mm, user_id=who, session_id="trip")
        with pytest.raises(SessionOwnershipError):
            theirs.retrieve("bank PIN")
        with pytest.raises(SessionOwnershipError):
            await theirs.aretrieve(QueryBundle("bank PIN"))
    assert SECRET in repr(HarombeRetriever(manager=mm, user_id="alice").retrieve("bank PIN"))
    assert SECRET in repr(HarombeRetriever(manager=mm, all_users=True).retrieve("bank PIN"))


def test_rag_engine_prompt_for_bob_holds_nothing_of_alices(mm: MemoryManager) -> None:
    # bob has a past of his own (with nothing retrieved, the engine would not call the LLM).
    mm.save_messages("bob-old", [{"role": "user", "content": "my bank is Acme"}], user_id="bob")
    mm.flush()
    for who, sees in (("bob", False), ("alice", True)):
        model = llm()
        engine = CondensePlusContextChatEngine.from_defaults(
            retriever=HarombeRetriever(manager=mm, user_id=who),
            llm=model,
            memory=HarombeMemory.from_defaults(manager=mm, user_id=who, rag=False),
            skip_condense=True,
        )
        engine.chat("what is my bank PIN?")
        assert (SECRET in prompt(model)) is sees, who
