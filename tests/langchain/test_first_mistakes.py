"""What a LangChain user tries first, with the wrong object, gets a typed error that says what
to pass: a path where a MemoryManager goes, an ``Embeddings`` or a chat model where harombe's
embedder goes (the wrapped ``Embeddings`` then works)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from langchain_core.embeddings import DeterministicFakeEmbedding
from langchain_core.language_models import FakeListChatModel

from harombe_core import MemoryManager, Message
from harombe_core.errors import InvalidInputError, StoreError
from langchain_harombe import (
    HarombeChatMessageHistory,
    HarombeMemoryMiddleware,
    HarombeSaver,
    HarombeStore,
    LangChainEmbedder,
)


@pytest.mark.parametrize(
    "build",
    [
        HarombeSaver,
        HarombeStore,
        HarombeMemoryMiddleware,
        lambda path: HarombeChatMessageHistory("s", manager=path),
    ],
)
def test_a_path_where_a_manager_goes_says_to_open_one(
    build: Callable[[str], object], tmp_path: Path
) -> None:
    path = str(tmp_path / "memory.db")
    with pytest.raises(InvalidInputError, match=r"must be a harombe_core\.MemoryManager") as info:
        build(path)
    assert "open one on the file and pass that: MemoryManager(" in str(info.value)
    assert not Path(path).exists()


def test_langchain_embeddings_as_the_embedder_names_the_wrapper_which_then_works(
    tmp_path: Path,
) -> None:
    embeddings = DeterministicFakeEmbedding(size=16)
    with pytest.raises(InvalidInputError) as info:
        MemoryManager(tmp_path / "a.db", embedding=embeddings)
    assert "langchain_harombe.LangChainEmbedder(DeterministicFakeEmbedding(...))" in str(info.value)
    with MemoryManager(tmp_path / "a.db", embedding=LangChainEmbedder(embeddings)) as mm:
        mm.save_message("s", Message(role="user", content="the cat is called Miso"))
        mm.flush()
        assert mm.search("the cat is called Miso")[0].vector_score is not None


def test_a_chat_model_as_the_embedder_says_it_is_a_chat_model(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError) as info:
        MemoryManager(tmp_path / "a.db", embedding=FakeListChatModel(responses=["hi"]))
    assert "it is a chat model or LLM, not an embeddings model" in str(info.value)
    assert not (tmp_path / "a.db").exists()


async def test_the_async_savers_and_stores_habits_work_too(tmp_path: Path) -> None:
    """Code written for LangGraph's ``AsyncSqliteSaver`` / ``AsyncPostgresStore`` (``async
    with X.from_conn_string(...)``, ``await x.setup()``) and for ``SqliteStore`` (``with
    SqliteStore.from_conn_string(...)``, ``store.setup()``) runs unchanged on harombe's saver
    and store: before, ``async with`` raised TypeError and ``HarombeStore`` had neither."""
    from langchain_core.messages import AIMessage
    from langgraph.graph import START, MessagesState, StateGraph

    builder = StateGraph(MessagesState)
    builder.add_node("reply", lambda state: {"messages": [AIMessage("hi")]})
    builder.add_edge(START, "reply")
    path = str(tmp_path / "m.db")
    index = {"embed": DeterministicFakeEmbedding(size=8), "dims": 8}
    async with (
        HarombeSaver.from_conn_string(path) as saver,
        HarombeStore.from_conn_string(path, index=index) as store,
    ):
        await saver.setup()
        await store.setup()
        graph = builder.compile(checkpointer=saver, store=store)
        await graph.ainvoke({"messages": [("user", "x")]}, {"configurable": {"thread_id": "1"}})
        await store.aput(("ann",), "k", {"text": "kept"})
    for closed in (saver.manager, store.manager):  # each closed the manager it opened
        with pytest.raises(StoreError, match="closed"):
            closed.list_sessions()
    with HarombeStore.from_conn_string(path) as store, HarombeSaver.from_conn_string(path) as saver:
        store.setup()
        saver.setup()
        item = store.get(("ann",), "k")
        assert item is not None
        assert item.value == {"text": "kept"}
        state = builder.compile(checkpointer=saver).get_state({"configurable": {"thread_id": "1"}})
        assert [m.content for m in state.values["messages"]] == ["x", "hi"]
