"""A row edited outside harombe (by hand, a bad migration, an attacker with the file) gives a
typed error naming its table, id and column on the read that meets it, never a ``JSONDecodeError``
or ``TypeError`` from deep inside, and every other session stays readable. A damaged keyword
index says how to rebuild it, and ``reindex`` does.

Each case edits a real database file with the ``sqlite3`` module, as the ``sqlite3`` shell would.
"""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import pytest

from harombe_core import CorruptRowError, MemoryManager, Message, NotAHarombeDatabaseError
from harombe_core.testing import FakeEmbedder


def _memory(path: Path | str) -> None:
    with MemoryManager(path, embedding=None, token_counter="approximate") as mm:
        mm.create_session(session_id="bad", user_id="ann", metadata={"topic": "x"})
        mm.save_messages(
            "bad", [Message(role="user", content=f"apple {i}", metadata={"i": i}) for i in range(3)]
        )
        mm.save_message("good", Message(role="user", content="apple pie"))


def _edit(path: Path, sql: str) -> None:
    raw = sqlite3.connect(path)
    raw.execute("PRAGMA ignore_check_constraints = ON")  # as a careless editor would
    raw.execute(sql)
    raw.commit()
    raw.close()


#: case -> (the edit, the column the error must name)
MESSAGE_EDITS = {
    "tool_calls not JSON": (
        "UPDATE messages SET tool_calls = 'not json' WHERE id = 2",
        "tool_calls",
    ),
    "metadata a JSON list": ("UPDATE messages SET metadata = '[1, 2]' WHERE id = 2", "metadata"),
    "content a blob": ("UPDATE messages SET content = x'00ff' WHERE id = 2", "content"),
    "negative token count": ("UPDATE messages SET token_count = -5 WHERE id = 2", "token_count"),
    "token count a text": ("UPDATE messages SET token_count = 'many' WHERE id = 2", "token_count"),
    "time a text": ("UPDATE messages SET created_at = 'yesterday' WHERE id = 2", "created_at"),
    "time past year 9999": (
        "UPDATE messages SET created_at = 9223372036854775807 WHERE id = 2",
        "created_at",
    ),
    "unknown role": ("UPDATE messages SET role = 'root' WHERE id = 2", "role"),
    "name a blob": ("UPDATE messages SET name = x'00' WHERE id = 2", "name"),
    "tool call id a blob": (
        "UPDATE messages SET tool_call_id = x'00' WHERE id = 2",
        "tool_call_id",
    ),
    "parent id a text": ("UPDATE messages SET parent_id = 'abc' WHERE id = 2", "parent_id"),
}


@pytest.mark.parametrize("case", list(MESSAGE_EDITS))
def test_a_crafted_message_row_is_named_by_a_typed_error(tmp_path: Path, case: str) -> None:
    path = tmp_path / "memory.db"
    _memory(path)
    sql, column = MESSAGE_EDITS[case]
    _edit(path, sql)
    with MemoryManager(path, embedding=None, token_counter="approximate") as mm:
        reads = {
            "load_session": lambda: mm.load_session("bad"),
            "get_recent_messages": lambda: mm.get_recent_messages("bad", max_tokens=1000),
            "search": lambda: mm.search("apple", top_k=10),
        }
        for read in reads.values():
            with pytest.raises(CorruptRowError) as caught:
                read()
            error = caught.value
            assert (error.table, error.row_id, error.column) == ("messages", 2, column)
            assert "row 2 of table messages" in str(error)
            assert "DELETE FROM messages WHERE id = 2" in str(error)
        # Nothing else is lost: the other session reads, and writes still work.
        assert [m.content for m in mm.load_session("good")] == ["apple pie"]
        mm.save_message("bad", Message(role="user", content="apple tart"))
        # The documented repair (delete the row) makes the session readable again.
    _edit(path, "DELETE FROM messages WHERE id = 2")
    with MemoryManager(path, embedding=None, token_counter="approximate") as mm:
        assert [m.content for m in mm.load_session("bad")] == ["apple 0", "apple 2", "apple tart"]


SESSION_EDITS = {
    "metadata not JSON": ("UPDATE sessions SET metadata = '{oops' WHERE id = 'bad'", "metadata"),
    "metadata JSON null": ("UPDATE sessions SET metadata = 'null' WHERE id = 'bad'", "metadata"),
    "summary data not JSON": (
        "UPDATE sessions SET summary_json = '{oops' WHERE id = 'bad'",
        "summary_json",
    ),
    "time a text": ("UPDATE sessions SET created_at = 'x' WHERE id = 'bad'", "created_at"),
    "system prompt a blob": (
        "UPDATE sessions SET system_prompt = x'ff00' WHERE id = 'bad'",
        "system_prompt",
    ),
    "owner a blob": ("UPDATE sessions SET user_id = x'ff00' WHERE id = 'bad'", "user_id"),
}


@pytest.mark.parametrize("case", list(SESSION_EDITS))
def test_a_crafted_session_row_is_named_by_a_typed_error(tmp_path: Path, case: str) -> None:
    path = tmp_path / "memory.db"
    _memory(path)
    sql, column = SESSION_EDITS[case]
    _edit(path, sql)
    with MemoryManager(path, embedding=None, token_counter="approximate") as mm:
        for read in (lambda: mm.get_session("bad"), lambda: mm.list_sessions(limit=10)):
            with pytest.raises(CorruptRowError) as caught:
                read()
            assert (caught.value.table, caught.value.row_id) == ("sessions", "bad")
            assert caught.value.column == column
            assert "DELETE FROM sessions WHERE id = 'bad'" in str(caught.value)
        assert mm.get_session("good") is not None
        assert [m.content for m in mm.load_session("good")] == ["apple pie"]


def test_a_damaged_keyword_index_names_reindex_and_reindex_repairs_it(tmp_path: Path) -> None:
    path = tmp_path / "memory.db"
    _memory(path)
    _edit(path, "UPDATE messages_fts_data SET block = x'deadbeef' WHERE id > 10")
    with MemoryManager(path, embedding=None, token_counter="approximate") as mm:
        assert len(mm.load_session("bad")) == 3  # the messages themselves are intact
        with pytest.raises(NotAHarombeDatabaseError, match="harombe reindex"):
            mm.search("apple", top_k=10)
        mm.reindex(embedding=FakeEmbedder())  # what `harombe reindex` runs
        hits = mm.search("apple", top_k=10)
        assert sorted(h.message.content for h in hits) == [
            "apple 0",
            "apple 1",
            "apple 2",
            "apple pie",
        ]


def test_crafted_rows_on_postgres_are_named_too(pg_url: str) -> None:
    import psycopg

    _memory(pg_url)
    with psycopg.connect(pg_url, autocommit=True) as raw:
        raw.execute("UPDATE messages SET tool_calls = 'not json' WHERE content = 'apple 1'")
        raw.execute("UPDATE sessions SET metadata = '[]' WHERE id = 'good'")
    with MemoryManager(pg_url, embedding=None, token_counter="approximate") as mm:
        with pytest.raises(CorruptRowError, match="column tool_calls is not valid JSON"):
            mm.load_session("bad")
        with pytest.raises(CorruptRowError, match="column metadata holds a JSON list"):
            mm.get_session("good")
        assert mm.get_session("bad") is not None


@pytest.mark.parametrize("mark", ["99999999999", "many", "-5", "0", ""])
def test_a_crafted_keyword_mark_is_repaired_not_trusted(tmp_path: Path, mark: str) -> None:
    # The mark says how far the keyword index reaches. One beyond every message hid every
    # later message from keyword search for good; one that is not a number, or too low,
    # failed every catch-up (flush and close raised ValueError / "constraint failed").
    path = tmp_path / "memory.db"
    _memory(path)
    _edit(path, f"UPDATE harombe_meta SET value = '{mark}' WHERE key = 'keyword_index_upto'")
    with MemoryManager(path, embedding=None, token_counter="approximate") as mm:
        mm.save_message("new", Message(role="user", content="zebra crossing"))
        mm.flush()
    with MemoryManager(path, embedding=None, token_counter="approximate") as mm:
        assert [h.message.content for h in mm.store.keyword_search("zebra")] == ["zebra crossing"]
        found = [h.message.content for h in mm.store.keyword_search("apple", limit=10)]
        assert sorted(found) == ["apple 0", "apple 1", "apple 2", "apple pie"]
    raw = sqlite3.connect(path)
    indexed = raw.execute("SELECT COUNT(*) FROM messages_fts").fetchone()[0]
    assert indexed == raw.execute("SELECT COUNT(*) FROM messages").fetchone()[0] == 5
    raw.close()


def test_crafted_fact_item_and_vector_rows_are_named(tmp_path: Path) -> None:
    from langchain_harombe import HarombeStore

    path = tmp_path / "memory.db"
    _memory(path)
    with MemoryManager(path, embedding=FakeEmbedder(), token_counter="approximate") as mm:
        mm.add_fact("ann", "ann likes apples")
        store = HarombeStore(mm)
        store.put(("ann", "notes"), "n1", {"text": "apples"})
        mm.flush()
    _edit(path, "UPDATE facts SET valid_from = 'yesterday'")
    _edit(path, "UPDATE store_items SET value = '{oops' WHERE key = 'n1'")
    _edit(path, "UPDATE message_vectors SET vector = x'0102' WHERE message_id = 2")
    with MemoryManager(path, embedding=FakeEmbedder(), token_counter="approximate") as mm:
        with pytest.raises(CorruptRowError, match="of table facts: column valid_from"):
            mm.get_facts("ann")
        store = HarombeStore(mm)
        with pytest.raises(CorruptRowError, match="of table store_items: column value is not"):
            store.get(("ann", "notes"), "n1")
        with pytest.raises(
            CorruptRowError, match=re.escape("WHERE namespace = 'ann.notes' AND key = 'n1'")
        ):
            store.search(("ann",))
        for value_filter in ({"text": "apples"}, {"n": {"$gt": 0}}):  # filters SQL evaluates
            with pytest.raises(CorruptRowError, match="of table store_items: column value is"):
                store.search(("ann",), filter=value_filter)
        with pytest.raises(CorruptRowError, match=r"message_vectors.*reindex --reembed") as caught:
            mm.search_similar("apple", top_k=3)
        assert caught.value.row_id == {"message_id": 2}
        assert len(mm.load_session("bad")) == 3  # the messages themselves read
        mm.reindex(embedding=FakeEmbedder(), reembed=True)  # the repair the error names
        assert {m.content for m in mm.search_similar("apple 1", top_k=1)} == {"apple 1"}


def test_a_postgres_database_of_another_application_is_refused_untouched(pg_url: str) -> None:
    import psycopg

    with psycopg.connect(pg_url, autocommit=True) as raw:
        raw.execute("CREATE TABLE facts (x INTEGER)")
        raw.execute("INSERT INTO facts VALUES (7)")
    with pytest.raises(NotAHarombeDatabaseError, match=r"table\(s\) facts of another application"):
        MemoryManager(pg_url, embedding=None)
    with psycopg.connect(pg_url, autocommit=True) as raw:
        tables = raw.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'"
        ).fetchall()
        assert tables == [("facts",)]
        assert raw.execute("SELECT x FROM facts").fetchall() == [(7,)]


def test_a_session_deleted_with_foreign_keys_off_leaves_nothing_to_the_next_owner_of_its_id(
    tmp_path: Path,
) -> None:
    # The sqlite3 shell runs with foreign keys off: deleting a session there left its messages
    # and checkpoints behind, and whoever created that id next (here another user) read them.
    from langchain_core.language_models.fake_chat_models import FakeListChatModel
    from langchain_core.messages import HumanMessage
    from langgraph.graph import START, MessagesState, StateGraph

    from langchain_harombe import HarombeSaver
    from tests.reliability.test_deletion import files_holding, token

    secret = token()
    path = tmp_path / "memory.db"
    llm = FakeListChatModel(responses=[f"noted {secret}"])
    graph = StateGraph(MessagesState)
    graph.add_node("model", lambda state: {"messages": [llm.invoke(state["messages"])]})
    graph.add_edge(START, "model")
    with MemoryManager(path, embedding=None, token_counter="approximate") as mm:
        config = {"configurable": {"thread_id": "bob:memory", "user_id": "bob"}}
        agent = graph.compile(checkpointer=HarombeSaver(mm))
        agent.invoke({"messages": [HumanMessage(f"my pin is {secret}")]}, config)
        mm.save_message("keep", Message(role="user", content="kept"))
    raw = sqlite3.connect(path)  # foreign keys off, as in the sqlite3 shell
    raw.execute("DELETE FROM sessions WHERE id = 'bob:memory'")
    raw.commit()
    assert raw.execute("SELECT COUNT(*) FROM checkpoints").fetchone()[0] > 0  # left behind
    raw.close()
    with MemoryManager(path, embedding=None, token_counter="approximate") as mm:
        mm.save_message("bob:memory", Message(role="user", content="eve here"), user_id="eve")
        assert [m.content for m in mm.load_session("bob:memory", user_id="eve")] == ["eve here"]
        assert mm.search(secret, top_k=5, user_id="eve") == []
        eve = {"configurable": {"thread_id": "bob:memory", "user_id": "eve"}}
        assert HarombeSaver(mm).get_tuple(eve) is None
        assert [m.content for m in mm.load_session("keep")] == ["kept"]
    assert files_holding(tmp_path, secret) == []


def test_rows_of_a_session_deleted_with_foreign_keys_off_go_at_the_upgrade(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from harombe_core.store import sqlite as sqlite_module
    from tests.reliability.test_deletion import files_holding, token

    secret = token()
    path = tmp_path / "memory.db"
    with monkeypatch.context() as old:  # a file of the schema before the sweep
        old.setattr(sqlite_module, "MIGRATIONS", sqlite_module.MIGRATIONS[:11])
        old.setattr(sqlite_module, "SCHEMA_VERSION", 11)
        with MemoryManager(path, embedding=None, token_counter="approximate") as mm:
            mm.save_message("gone", Message(role="user", content=f"pin {secret}"), user_id="bob")
            mm.save_message("keep", Message(role="user", content="kept"), user_id="ann")
    raw = sqlite3.connect(path)  # foreign keys off, as in the sqlite3 shell
    raw.execute("DELETE FROM sessions WHERE id = 'gone'")
    raw.commit()
    raw.close()
    assert files_holding(tmp_path, secret)
    with MemoryManager(path, embedding=None, token_counter="approximate") as mm:
        assert [m.content for m in mm.load_session("keep", user_id="ann")] == ["kept"]
    raw = sqlite3.connect(path)
    assert raw.execute("SELECT COUNT(*) FROM messages").fetchone()[0] == 1
    raw.close()
    assert files_holding(tmp_path, secret) == []  # the sweep's erasure was paid at close


def test_a_crafted_message_summary_and_store_vector_are_named(tmp_path: Path) -> None:
    """Export reads the per-message summaries and a store search the items' vectors: a bad
    one is named as every other crafted row is, not a JSONDecodeError or numpy ValueError."""
    from harombe_core.export import export_store
    from langchain_harombe import HarombeStore

    path = tmp_path / "memory.db"
    _memory(path)
    with MemoryManager(path, embedding=FakeEmbedder(), token_counter="approximate") as mm:
        HarombeStore(mm, index={"fields": ["text"]}).put(("ann",), "n1", {"text": "apples"})
    _edit(path, "UPDATE messages SET summary_json = '{oops' WHERE id = 2")
    _edit(path, "UPDATE store_vectors SET vector = x'01' WHERE key = 'n1'")
    with MemoryManager(path, embedding=FakeEmbedder(), token_counter="approximate") as mm:
        with pytest.raises(CorruptRowError, match="of table messages: column summary_json"):
            export_store(mm, "json", session_id="bad")
        export_store(mm, "json", session_id="good")  # the other session exports
        store = HarombeStore(mm, index={"fields": ["text"]})
        with pytest.raises(CorruptRowError, match="store_vectors: column vector") as caught:
            store.search(("ann",), query="apples")
        assert caught.value.row_id == {"namespace": "ann", "key": "n1"}
        store.put(("ann",), "n1", {"text": "apples"})  # the repair the error names
        assert [i.key for i in store.search(("ann",), query="apples")] == ["n1"]


def test_a_crafted_message_does_not_stop_the_others_being_indexed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Messages are embedded and keyword-indexed in the background after their commit. A row
    edited before that (a blob for text, bad JSON) is passed over with a warning naming it;
    every other message, of every user, is still embedded and found, and ``reindex`` (the
    repair for the indexes) does not fail on it either."""
    from harombe_core.testing import hold_background

    path = tmp_path / "memory.db"
    with MemoryManager(path, embedding=FakeEmbedder(), token_counter="approximate") as mm:
        with hold_background():
            mm.save_messages("bad", [Message(role="user", content=f"apple {i}") for i in range(3)])
            _edit(path, "UPDATE messages SET content = x'00ff' WHERE id = 2")
            _edit(path, "UPDATE messages SET tool_calls = 'not json' WHERE id = 3")
            mm.save_message("good", Message(role="user", content="banana split"), user_id="bob")
        mm.flush()
        assert "row 2 of table messages: column content" in caplog.text
        assert "row 3 of table messages: column tool_calls" in caplog.text
        raw = sqlite3.connect(path)
        assert raw.execute("SELECT message_id FROM message_vectors").fetchall() == [(1,), (4,)]
        raw.close()
        assert [h.message.content for h in mm.store.keyword_search("banana")] == ["banana split"]
        assert [m.content for m in mm.search_similar("banana split", user_id="bob")] == [
            "banana split"
        ]
        mm.reindex(embedding=FakeEmbedder())
        assert [h.message.content for h in mm.search("banana", user_id="bob")] == ["banana split"]


def test_a_crafted_fact_of_one_user_does_not_stop_the_others_facts_being_extracted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The background extractor reads each user's facts before it adds to them: a fact row of
    ann's edited outside harombe is named in a warning and her session waits, while bob's and
    carl's messages are extracted (before, the whole round failed on hers, and every
    ``flush()`` raised)."""
    import json

    from langchain_core.language_models import FakeListChatModel

    from harombe_core.config import MemoryConfig

    path = tmp_path / "memory.db"
    with MemoryManager(path, embedding=None) as mm:
        mm.add_fact("ann", "ann lives in Lisbon", subject="home")
    _edit(path, "UPDATE facts SET valid_from = 'yesterday'")
    answer = json.dumps({"operations": [{"action": "add", "kind": "fact", "text": "likes tea"}]})
    config = MemoryConfig.model_validate({"memory": {"user_memory": True}})
    llm = FakeListChatModel(responses=[answer] * 10)
    with MemoryManager(path, embedding=None, fact_extractor=llm, config=config) as mm:
        for session, user in (("a", "ann"), ("b", "bob"), ("c", "carl")):
            mm.save_messages(session, [Message(role="user", content="I like tea")], user_id=user)
        mm.flush()
        assert [f.text for f in mm.get_facts("bob")] == ["likes tea"]
        assert [f.text for f in mm.get_facts("carl")] == ["likes tea"]
        assert "session a: facts not extracted: row 1 of table facts" in caplog.text
        with pytest.raises(CorruptRowError, match="of table facts: column valid_from"):
            mm.extract_facts("a")  # asked for by name: the error itself


def test_a_crafted_vector_does_not_stop_the_others_being_filed_into_chroma(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The process that owns a Chroma folder files the stored vectors it lacks. A stored
    vector edited outside harombe (a blob of another length) is passed over with one warning
    naming it and its repair; every other vector, of every user, is still filed and found."""
    path = tmp_path / "memory.db"
    with MemoryManager(path, embedding=FakeEmbedder(), vector_store="database") as mm:
        mm.save_messages("a", [Message(role="user", content=f"apple {i}") for i in range(5)])
        mm.flush()
    _edit(path, "UPDATE message_vectors SET vector = x'00' WHERE message_id = 2")
    with MemoryManager(path, embedding=FakeEmbedder(), vector_store="chroma") as mm:
        mm.save_message("b", Message(role="user", content="banana split"), user_id="bob")
        mm.flush()
        mm.flush()  # (told once)
        told = [
            r.getMessage() for r in caplog.records if "not filed into the index" in r.getMessage()
        ]
        assert len(told) == 1
        assert "row {'message_id': 2} of table message_vectors" in told[0]
        assert "harombe reindex --reembed" in told[0]
        assert [m.content for m in mm.search_similar("banana split", user_id="bob")] == [
            "banana split"
        ]
    raw = sqlite3.connect(path)
    assert raw.execute("SELECT id FROM messages WHERE embedded = 0").fetchall() == [(2,)]
    raw.close()


@pytest.mark.parametrize(
    ("edit", "damaged"),
    [
        ("UPDATE messages_fts_docsize SET sz = 'text' WHERE id = 2", True),
        ("UPDATE messages_fts_docsize SET sz = x'ff' WHERE id = 2", True),
        ("UPDATE messages_fts_docsize SET sz = NULL WHERE id = 2", True),
        # a missing record: the row is scored without its size, nothing else is hurt
        ("DELETE FROM messages_fts_docsize WHERE id = 2", False),
    ],
)
def test_a_crafted_keyword_size_record_is_a_damaged_index_that_reindex_repairs(
    tmp_path: Path, edit: str, damaged: bool
) -> None:
    """A user's keyword search reads each row's size from the index (its own statistics). A
    size record edited outside harombe is the damaged index it is, named with its repair,
    not an IndexError or a math error from the scoring; ``reindex`` repairs it."""
    path = tmp_path / "memory.db"
    _memory(path)
    with MemoryManager(path, embedding=None, token_counter="approximate") as mm:
        mm.store.index_keywords()
    _edit(path, edit)
    ann = ["apple 0", "apple 1", "apple 2"]
    with MemoryManager(path, embedding=None, token_counter="approximate") as mm:
        if damaged:
            with pytest.raises(NotAHarombeDatabaseError, match="harombe reindex"):
                mm.search("apple pie", user_id="ann", top_k=10)
        else:
            hits = mm.search("apple pie", user_id="ann", top_k=10)
            assert sorted(h.message.content for h in hits) == ann
        mm.reindex(embedding=FakeEmbedder())
        hits = mm.search("apple pie", user_id="ann", top_k=10)
        assert sorted(h.message.content for h in hits) == ann


def test_a_store_namespace_that_is_not_text_is_named_when_namespaces_are_listed(
    tmp_path: Path,
) -> None:
    """``list_namespaces`` (and its ``max_depth`` cut, made by a SQL function) meeting a
    namespace edited into a blob raises CorruptRowError naming it and the DELETE, not a
    TypeError or "user-defined function raised exception"; other prefixes still list."""
    from langchain_harombe import HarombeStore

    path = tmp_path / "memory.db"
    with MemoryManager(path, embedding=None, token_counter="approximate") as mm:
        store = HarombeStore(mm)
        store.put(("a", "b"), "k1", {"v": 1})
        store.put(("c",), "k2", {"v": 2})
    _edit(path, "UPDATE store_items SET namespace = x'00ff' WHERE key = 'k2'")
    with MemoryManager(path, embedding=None, token_counter="approximate") as mm:
        store = HarombeStore(mm)
        named = re.escape("DELETE FROM store_items WHERE namespace = x'00ff';")
        with pytest.raises(CorruptRowError, match=named):
            store.list_namespaces()
        with pytest.raises(CorruptRowError, match=named):
            store.list_namespaces(max_depth=1)
        assert store.list_namespaces(prefix=("a",)) == [("a", "b")]
