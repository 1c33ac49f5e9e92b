"""One row edited outside harombe must not fail every turn of its user.

Recall that enriches a prompt (the LangChain middleware, LlamaIndex ``HarombeMemory`` and
``HarombeMemoryBlock``, the context builder's relevant past, ``get_relevant_context``) searches
all of a user's sessions. A row it cannot read is left out with one warning naming it and
``harombe check``; the turn goes on with the other rows. A search asked for explicitly
(``mm.search``, the retrievers) still raises the typed error naming the row: whoever asked for
results must know some could not be read. The rows are edited with plain sqlite3.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import re
import sqlite3
from pathlib import Path

import pytest

from harombe_core import ContextBudget, CorruptRowError, MemoryManager, Message
from harombe_core.testing import FakeEmbedder

#: case -> the edit of ann's old session's rows that makes them unreadable.
EDITS = {
    "message JSON": "UPDATE messages SET tool_calls = 'oops' WHERE id = 2",
    "message role": "UPDATE messages SET role = 'wizard' WHERE id = 2",
    "vector blob": "UPDATE message_vectors SET vector = x'00' WHERE message_id = 2",
}

#: case -> what recall still finds: every message but the unreadable one (a message whose
#: vector is unreadable is still found by its words).
READABLE = {
    "message JSON": ["my cat is miso 0", "my cat is miso 2"],
    "message role": ["my cat is miso 0", "my cat is miso 2"],
    "vector blob": ["my cat is miso 0", "my cat is miso 1", "my cat is miso 2"],
}

#: case -> how the errors and the warning name the row.
NAMED = {
    "message JSON": "row 2 of table messages",
    "message role": "row 2 of table messages",
    "vector blob": "row {'message_id': 2} of table message_vectors",
}


def _edit(path: Path, sql: str) -> None:
    raw = sqlite3.connect(path)
    raw.execute("PRAGMA ignore_check_constraints = ON")  # as a careless editor would
    raw.execute(sql)
    assert raw.total_changes == 1
    raw.commit()
    raw.close()


def _ann_with_a_bad_row(path: Path, edit: str) -> MemoryManager:
    """Ann's old session: three turns about her cat, the second one edited unreadable."""
    with MemoryManager(path, embedding=FakeEmbedder(), token_counter="approximate") as mm:
        for i in range(3):
            turn = Message(role="user", content=f"my cat is miso {i}")
            mm.save_message("old", turn, user_id="ann")
        mm.flush()
    _edit(path, edit)
    return MemoryManager(path, embedding=FakeEmbedder(), token_counter="approximate")


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "left out of the recalled" in r.getMessage()]


@pytest.mark.parametrize("case", list(EDITS))
def test_recall_passes_over_a_bad_row_and_explicit_search_names_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, case: str
) -> None:
    from langchain.agents import create_agent
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage, HumanMessage

    from langchain_harombe import HarombeMemoryMiddleware, HarombeSaver

    path = tmp_path / "memory.db"
    caplog.set_level(logging.WARNING)
    with _ann_with_a_bad_row(path, EDITS[case]) as mm:
        recalled = mm.get_relevant_context("cat miso", user_id="ann", exclude_session_id="new")
        assert sorted(m.content for m in recalled) == READABLE[case]

        model = GenericFakeChatModel(messages=(AIMessage("ok") for _ in itertools.count()))
        agent = create_agent(
            model,
            [],
            checkpointer=HarombeSaver(mm),
            middleware=[HarombeMemoryMiddleware(mm, recall_tokens=300)],
        )
        config = {"configurable": {"thread_id": "new", "user_id": "ann"}}
        for text in ("what is my cat called", "cat miso again"):
            agent.invoke({"messages": [HumanMessage(text)]}, config)
        asyncio.run(agent.ainvoke({"messages": [HumanMessage("cat miso")]}, config))

        budget = ContextBudget(relevant_past=0.5)
        context = mm.get_context(
            "new", max_tokens=2000, user_id="ann", query="cat miso", budget=budget
        )
        assert "my cat is miso 0" in "\n".join(m.content for m in context)

        # One warning for the row however many turns recalled past it, naming the fix.
        told = _warnings(caplog)
        assert len(told) == 1, told
        assert NAMED[case] in told[0]
        assert f"harombe check {path}" in told[0]

        # Asked for explicitly, the row is named by the typed error.
        with pytest.raises(CorruptRowError, match=re.escape(NAMED[case])):
            mm.search("cat miso", user_id="ann")
        with pytest.raises(CorruptRowError, match=re.escape(NAMED[case])):
            asyncio.run(mm.asearch("cat miso", user_id="ann"))
        from langchain_harombe import HarombeRetriever

        with pytest.raises(CorruptRowError, match=re.escape(NAMED[case])):
            HarombeRetriever(manager=mm, user_id="ann").invoke("cat miso")
        # ... unless the caller says it would rather do without it.
        kept = mm.search("cat miso", session_id="old", user_id="ann", skip_unreadable=True)
        assert sorted(h.message.content for h in kept) == READABLE[case]


@pytest.mark.parametrize("case", list(EDITS))
def test_llamaindex_memory_recalls_past_a_bad_row_and_its_retriever_names_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, case: str
) -> None:
    from llamaindex_harombe import HarombeMemory, HarombeMemoryBlock, HarombeRetriever

    path = tmp_path / "memory.db"
    caplog.set_level(logging.WARNING)
    with _ann_with_a_bad_row(path, EDITS[case]) as mm:
        memory = HarombeMemory.from_defaults(manager=mm, session_id="new", user_id="ann")
        memory.get(input="what is my cat called")
        got = asyncio.run(memory.aget(input="cat miso"))
        assert "my cat is miso 0" in "\n".join(str(m.content) for m in got)

        block = HarombeMemoryBlock(manager=mm, user_id="ann", scope="user")
        from llama_index.core.base.llms.types import ChatMessage

        recalled = asyncio.run(block.aget([ChatMessage(role="user", content="cat miso")]))
        assert "my cat is miso 0" in recalled

        told = _warnings(caplog)
        assert len(told) == 1, told
        assert "harombe check" in told[0]

        with pytest.raises(CorruptRowError, match=re.escape(NAMED[case])):
            HarombeRetriever(manager=mm, user_id="ann").retrieve("cat miso")


def test_recall_on_postgres_passes_over_a_bad_row_too(
    pg_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    import psycopg

    with MemoryManager(pg_url, embedding=None, token_counter="approximate") as mm:
        for i in range(3):
            turn = Message(role="user", content=f"my cat is miso {i}")
            mm.save_message("old", turn, user_id="ann")
    with psycopg.connect(pg_url, autocommit=True) as raw:
        raw.execute("UPDATE messages SET tool_calls = 'oops' WHERE content = 'my cat is miso 1'")
    with MemoryManager(pg_url, embedding=None, token_counter="approximate") as mm:
        recalled = mm.get_relevant_context("cat miso", user_id="ann", exclude_session_id="new")
        assert sorted(m.content for m in recalled) == ["my cat is miso 0", "my cat is miso 2"]
        assert len(_warnings(caplog)) == 1
        with pytest.raises(CorruptRowError, match="column tool_calls is not valid JSON"):
            mm.search("cat miso", user_id="ann")


def test_one_users_crafted_vector_does_not_fail_anothers_search_through_the_matrix(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A user with very many messages is searched through the in-process matrix of every
    user's vectors. Ann's crafted vector is left out of it with one warning: Bob's searches
    work and tell him nothing of her row (before, they raised a CorruptRowError naming it)."""
    path = tmp_path / "memory.db"
    with MemoryManager(path, embedding=FakeEmbedder(), token_counter="approximate") as mm:
        ann = [Message(role="user", content=f"apple {i}") for i in range(3)]
        mm.save_messages("a", ann, user_id="ann")
        bob = [Message(role="user", content=f"banana {i}") for i in range(3)]
        mm.save_messages("b", bob, user_id="bob")
        mm.flush()
    _edit(path, "UPDATE message_vectors SET vector = x'00' WHERE message_id = 2")
    with MemoryManager(path, embedding=FakeEmbedder(), token_counter="approximate") as mm:
        semantic = mm._semantic
        assert semantic is not None
        semantic.matrix_scope_limit = 0  # Bob's scope by the matrix, as past 16,000 messages
        found = mm.search_similar("banana 1", user_id="bob")
        assert sorted(m.content for m in found) == ["banana 0", "banana 1", "banana 2"]
        hits = mm.search("banana 1", user_id="bob")
        assert sorted(h.message.content for h in hits) == ["banana 0", "banana 1", "banana 2"]
        told = [r.getMessage() for r in caplog.records if "left out of searches" in r.getMessage()]
        assert len(told) == 1
        assert NAMED["vector blob"] in told[0]


def test_a_crafted_fact_is_left_out_of_the_profile_a_prompt_is_given(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The profile put in front of every turn (middleware and LlamaIndex ``profile_tokens``,
    the profile block, the context builder's profile) reads all of the user's facts; one fact
    row edited outside harombe is left out with one warning, while ``get_profile`` (asked
    for) still names it."""
    from langchain.agents import create_agent
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage, HumanMessage
    from llama_index.core.base.llms.types import ChatMessage

    from langchain_harombe import HarombeMemoryMiddleware, HarombeSaver
    from llamaindex_harombe import HarombeMemory, HarombeProfileBlock

    path = tmp_path / "memory.db"
    with MemoryManager(path, embedding=FakeEmbedder(), token_counter="approximate") as mm:
        mm.add_fact("ann", "ann likes apples")
        mm.add_fact("ann", "ann lives in Lisbon")
        mm.add_fact("ann", "call the bank", kind="task")
        mm.save_message("old", Message(role="user", content="hello"), user_id="ann")
    _edit(path, "UPDATE facts SET valid_from = 'yesterday' WHERE text = 'ann likes apples'")
    with MemoryManager(path, embedding=FakeEmbedder(), token_counter="approximate") as mm:
        model = GenericFakeChatModel(messages=(AIMessage("ok") for _ in itertools.count()))
        middleware = HarombeMemoryMiddleware(mm, recall_tokens=300, profile_tokens=200)
        agent = create_agent(model, [], checkpointer=HarombeSaver(mm), middleware=[middleware])
        config = {"configurable": {"thread_id": "new", "user_id": "ann"}}
        agent.invoke({"messages": [HumanMessage("where do I live")]}, config)
        memory = HarombeMemory.from_defaults(
            manager=mm, session_id="li", user_id="ann", profile_tokens=200
        )
        got = memory.get(input="where do I live")
        assert "ann lives in Lisbon" in "\n".join(str(m.content) for m in got)
        block = HarombeProfileBlock(manager=mm, user_id="ann")
        text = asyncio.run(block.aget([ChatMessage(role="user", content="where do I live")]))
        assert "ann lives in Lisbon" in text
        assert "call the bank" in text
        budget = ContextBudget(user_profile=0.5)
        context = mm.get_context("old", max_tokens=2000, user_id="ann", query="live", budget=budget)
        assert "ann lives in Lisbon" in "\n".join(m.content for m in context)
        told = [
            r.getMessage()
            for r in caplog.records
            if "left out of the user's profile" in r.getMessage()
        ]
        assert len(told) == 1, told
        assert "of table facts: column valid_from" in told[0]
        assert "harombe check" in told[0]
        with pytest.raises(CorruptRowError, match="of table facts: column valid_from"):
            mm.get_profile("ann")
