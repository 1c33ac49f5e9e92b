"""Every deletion a user has, on SQLite and on PostgreSQL: nothing deleted stays findable, and
on SQLite nothing stays on disk, while the process stays open and after it closes.

Each case stores a unique secret (in message text, a summary, a fact, a LangGraph checkpoint
or store item, a LlamaIndex chat), deletes it through one public path, and then checks:

* no API finds it: hybrid, keyword and semantic search, session summaries, the user's facts,
  and the path's own reads (the chat store, the LangGraph state or store);
* SQLite: ``erase_deleted()`` completes and no file under the store's folder (database, -wal,
  -shm) holds its bytes with the manager still open; nor after close;
* PostgreSQL: no row of any table holds it (``tbl::text``), so no query can return it. Its
  bytes stay in the data files until ``VACUUM FULL`` (docs/deletion.md; checked for
  ``forget_user`` by tests/postgres/test_deletion.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from harombe_core.manager import MemoryManager
from harombe_core.models import Message
from harombe_core.store import ops
from harombe_core.testing import FakeEmbedder
from tests.reliability.test_deletion import files_holding, found_anywhere, token

pytestmark = pytest.mark.slow


@dataclass
class Case:
    """One deletion path: ``run(mm, secret)`` stores the secret, deletes it and returns the
    extra reads that must not find it (besides the manager's searches)."""

    run: Callable[[MemoryManager, str], Callable[[], list[str]]]
    needs: tuple[str, ...] = field(default=())
    #: It deletes every session, the kept one too (which is then saved again).
    deletes_all: bool = False


def _chat(mm: MemoryManager, sid: str, secret: str, user: str | None = None) -> None:
    mm.save_messages(
        sid,
        [
            Message(role="user", content=f"my password is {secret}"),
            Message(role="assistant", content=f"noted, {secret} is stored"),
        ],
        user_id=user,
    )


def _nothing() -> list[str]:
    return []


def delete_session(mm: MemoryManager, secret: str) -> Callable[[], list[str]]:
    _chat(mm, "s", secret)
    mm.store.run(ops.update_session("s", summary=f"the password is {secret}"))
    assert mm.delete_session("s")
    return _nothing


def clear_session(mm: MemoryManager, secret: str) -> Callable[[], list[str]]:
    _chat(mm, "s", secret)
    mm.store.run(ops.update_session("s", summary=f"the password is {secret}"))
    assert mm.clear_session("s") == 2
    return lambda: [m.content for m in mm.get_messages("s") if secret in m.content]


def forget_user(mm: MemoryManager, secret: str) -> Callable[[], list[str]]:
    _chat(mm, "s", secret, user="ann")
    mm.add_fact("ann", f"ann's pin is {secret}")
    assert mm.forget_user("ann") == 1
    return lambda: [f.text for f in mm.get_facts("ann", include_history=True)]


def replace_messages(mm: MemoryManager, secret: str) -> Callable[[], list[str]]:
    mm.save_message("s", Message(role="user", content="hello"))
    ids = mm.save_messages("s", [Message(role="user", content=f"my pin is {secret}")])
    mm.save_message("s", Message(role="assistant", content="ok"))
    mm.replace_messages("s", ids)
    return lambda: [m.content for m in mm.get_messages("s") if secret in m.content]


def prune_old_sessions(mm: MemoryManager, secret: str) -> Callable[[], list[str]]:
    _chat(mm, "s", secret)
    assert mm.prune_old_sessions(0) >= 1  # every session was last active before now
    return _nothing


def forget_fact(mm: MemoryManager, secret: str) -> Callable[[], list[str]]:
    fact = mm.add_fact("ann", f"ann's pin is {secret}")
    assert mm.forget_fact("ann", fact.id)
    return lambda: [f.text for f in mm.get_facts("ann", include_history=True)]


def correct_then_forget_fact(mm: MemoryManager, secret: str) -> Callable[[], list[str]]:
    """A correction keeps the old text as history (by design); forgetting it deletes it."""
    old = mm.add_fact("ann", f"ann's pin is {secret}")
    mm.correct_fact("ann", old.id, "ann has no pin")
    assert [f.text for f in mm.get_facts("ann", include_history=True) if secret in f.text]
    assert mm.forget_fact("ann", old.id)
    return lambda: [f.text for f in mm.get_facts("ann", include_history=True)]


def forget_user_facts(mm: MemoryManager, secret: str) -> Callable[[], list[str]]:
    mm.add_fact("ann", f"ann's pin is {secret}")
    assert mm.forget_user_facts("ann") == 1
    return lambda: [f.text for f in mm.get_facts("ann", include_history=True)]


def _graph(mm: MemoryManager) -> tuple[Any, Any]:
    from langchain_harombe import HarombeSaver
    from tests.langchain.test_deletion import _graph as graph

    saver = HarombeSaver(mm)
    return saver, graph(saver)


def _state_texts(graph: Any, thread: str) -> Callable[[], list[str]]:
    def texts() -> list[str]:
        found: list[str] = []
        for snapshot in graph.get_state_history({"configurable": {"thread_id": thread}}):
            found += [m.text for m in snapshot.values.get("messages", [])]
        return found

    return texts


def langgraph_delete_thread(mm: MemoryManager, secret: str) -> Callable[[], list[str]]:
    from langchain_core.messages import HumanMessage

    saver, graph = _graph(mm)
    graph.invoke({"messages": [HumanMessage(f"my pin is {secret}")]}, _thread("t"))
    saver.delete_thread("t")
    return _state_texts(graph, "t")


def langgraph_delete_for_runs(mm: MemoryManager, secret: str) -> Callable[[], list[str]]:
    from langchain_core.messages import HumanMessage

    saver, graph = _graph(mm)
    graph.invoke({"messages": [HumanMessage("hello")]}, _thread("t", run_id="r1"))
    graph.invoke({"messages": [HumanMessage(f"my pin is {secret}")]}, _thread("t", run_id="r2"))
    saver.delete_for_runs(["r2"])  # the background session write may still be due: any order
    return _state_texts(graph, "t")


def langgraph_remove_message(mm: MemoryManager, secret: str) -> Callable[[], list[str]]:
    """A RemoveMessage deletes from the thread's session; the checkpoints that held it are the
    thread's history (LangGraph keeps them), so it is deleted from disk with the thread."""
    from langchain_core.messages import HumanMessage, RemoveMessage

    saver, graph = _graph(mm)
    config = _thread("t")
    graph.invoke({"messages": [HumanMessage(f"my pin is {secret}")]}, config)
    doomed = next(m for m in graph.get_state(config).values["messages"] if secret in m.text)
    graph.update_state(config, {"messages": [RemoveMessage(id=doomed.id)]})
    mm.flush()
    assert [m.text for m in graph.get_state(config).values["messages"] if secret in m.text] == []
    assert found_anywhere(mm, secret) == []
    saver.delete_thread("t")
    return _state_texts(graph, "t")


def _thread(thread: str, **more: str) -> Any:
    return {"configurable": {"thread_id": thread, **more}}


def langgraph_store_delete(mm: MemoryManager, secret: str) -> Callable[[], list[str]]:
    from langchain_harombe import HarombeStore

    store = HarombeStore(mm)
    store.put(("users", "ann"), "pin", {"text": f"my pin is {secret}"})
    store.delete(("users", "ann"), "pin")
    return lambda: [str(i.value) for i in store.search(("users",), limit=100)]


def langgraph_store_expiry(mm: MemoryManager, secret: str) -> Callable[[], list[str]]:
    import time

    from langchain_harombe import HarombeStore

    store = HarombeStore(mm)
    store.put(("users", "ann"), "pin", {"text": f"my pin is {secret}"}, ttl=0.0001)
    time.sleep(0.01)  # past the 6 ms TTL (waits for the clock; asserts no speed)
    assert store.sweep_ttl() == 1
    return lambda: [str(i.value) for i in store.search(("users",), limit=100)]


def _chat_store(mm: MemoryManager, secret: str) -> Any:
    from llama_index.core.llms import ChatMessage

    from llamaindex_harombe import HarombeChatStore

    chats = HarombeChatStore(manager=mm)
    chats.set_messages(
        "k",
        [
            ChatMessage(role="user", content="hello"),
            ChatMessage(role="user", content=f"my pin is {secret}"),
        ],
    )
    return chats


def _chat_case(
    delete: Callable[[Any], object],
) -> Callable[[MemoryManager, str], Callable[[], list[str]]]:
    """A LlamaIndex chat store case: two messages, the second the secret, then ``delete``."""

    def run(mm: MemoryManager, secret: str) -> Callable[[], list[str]]:
        chats = _chat_store(mm, secret)
        assert delete(chats) is not None
        return lambda: [str(m.content) for m in chats.get_messages("k")]

    return run


def _replace_chat(chats: Any) -> bool:
    from llama_index.core.llms import ChatMessage

    chats.set_messages("k", [ChatMessage(role="user", content="something else")])
    return True


CASES: dict[str, Case] = {
    "delete_session": Case(delete_session),
    "clear_session": Case(clear_session),
    "forget_user": Case(forget_user),
    "replace_messages": Case(replace_messages),
    "prune_old_sessions": Case(prune_old_sessions, deletes_all=True),
    "forget_fact": Case(forget_fact),
    "correct_then_forget_fact": Case(correct_then_forget_fact),
    "forget_user_facts": Case(forget_user_facts),
    "langgraph_delete_thread": Case(langgraph_delete_thread, ("langgraph",)),
    "langgraph_delete_for_runs": Case(langgraph_delete_for_runs, ("langgraph",)),
    "langgraph_remove_message": Case(langgraph_remove_message, ("langgraph",)),
    "langgraph_store_delete": Case(langgraph_store_delete, ("langgraph",)),
    "langgraph_store_expiry": Case(langgraph_store_expiry, ("langgraph",)),
    "llamaindex_delete_messages": Case(
        _chat_case(lambda chats: chats.delete_messages("k")), ("llama_index",)
    ),
    "llamaindex_delete_message": Case(
        _chat_case(lambda chats: chats.delete_message("k", 1)), ("llama_index",)
    ),
    "llamaindex_delete_last_message": Case(
        _chat_case(lambda chats: chats.delete_last_message("k")), ("llama_index",)
    ),
    "llamaindex_set_messages": Case(_chat_case(_replace_chat), ("llama_index",)),
}


@pytest.fixture
def control_word() -> str:
    return token()


def _keep(mm: MemoryManager, word: str) -> None:
    mm.save_message("keep", Message(role="user", content=f"the harbour code is {word}"))


def _kept(mm: MemoryManager, word: str) -> None:
    hits = [h.message.content for h in mm.search(word, top_k=100)]
    assert hits.count(f"the harbour code is {word}") == 1


@pytest.fixture(params=sorted(CASES))
def case(request: pytest.FixtureRequest) -> tuple[str, Case]:
    chosen = CASES[request.param]
    for module in chosen.needs:
        pytest.importorskip(module)
    return request.param, chosen


def _delete_unfindable(mm: MemoryManager, chosen: Case, secret: str, control: str) -> None:
    """Keep a control message, run the case, and check no search or read finds the secret."""
    _keep(mm, control)
    reads = chosen.run(mm, secret)
    if chosen.deletes_all:
        _keep(mm, control)
    mm.flush()
    assert found_anywhere(mm, secret) == []
    assert [t for t in reads() if secret in t] == []


def test_on_sqlite_nothing_stays_findable_or_on_disk(
    tmp_path: Path, case: tuple[str, Case], control_word: str
) -> None:
    _name, chosen = case
    folder = tmp_path / "store"
    folder.mkdir()
    secret = token()
    mm = MemoryManager(str(folder / "m.db"), embedding=FakeEmbedder())
    try:
        _delete_unfindable(mm, chosen, secret, control_word)
        assert mm.erase_deleted().complete
        assert files_holding(folder, secret) == []  # still open
        _kept(mm, control_word)
    finally:
        mm.close()
    assert files_holding(folder, secret) == []  # closed
    assert files_holding(folder, control_word)


def _rows_holding(url: str, word: str) -> list[str]:
    """Every table of the database with a row holding ``word``: in the row's text form, or
    in the bytes of a ``bytea`` column (checkpoint blobs), which that form shows in hex."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        columns: dict[str, list[str]] = {}
        for table, column in conn.execute(
            "SELECT table_name, column_name FROM information_schema.columns "
            "WHERE table_schema = current_schema() AND data_type = 'bytea'"
        ).fetchall():
            columns.setdefault(table, []).append(column)
        tables = [
            r[0]
            for r in conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"
            ).fetchall()
        ]
        found = []
        for table in tables:
            blobs = [f'position(%s::bytea in t."{c}") > 0' for c in columns.get(table, [])]
            where = " OR ".join(["t::text LIKE %s", *blobs])
            params = [f"%{word}%", *([word.encode()] * len(blobs))]
            if conn.execute(f'SELECT 1 FROM "{table}" t WHERE {where} LIMIT 1', params).fetchone():
                found.append(table)
    return found


def test_on_postgres_no_row_holds_it(
    pg_url: str, case: tuple[str, Case], control_word: str
) -> None:
    """The exactly-once write log included: the LlamaIndex deletions return the removed
    message, which the log records for a retry only until the call has it."""
    _, chosen = case
    secret = token()
    with MemoryManager(pg_url, embedding=FakeEmbedder(), vector_store="pgvector") as mm:
        _delete_unfindable(mm, chosen, secret, control_word)
        assert _rows_holding(pg_url, secret) == []
        _kept(mm, control_word)
    assert _rows_holding(pg_url, secret) == []
    assert _rows_holding(pg_url, control_word)


def _prune_named_session(mm: MemoryManager, secret: str) -> object:
    """``delete_sessions_before`` returns the ids it deleted: here the id is the secret."""
    from datetime import UTC, datetime, timedelta

    _chat(mm, f"notes-{secret}", secret)
    return mm.store.run(ops.delete_sessions_before(datetime.now(UTC) + timedelta(1)))


def _atomic_returning(mm: MemoryManager, secret: str) -> object:
    """``atomic``'s result is recorded: here, the text a block read and deleted."""

    def block() -> list[str]:
        texts = [m.content for m in mm.store.run(ops.get_messages("s"))]
        mm.store.run(ops.clear_session("s"))
        return texts

    _chat(mm, "s", secret)
    return mm.store.atomic(block)


def _body_returning(mm: MemoryManager, secret: str) -> object:
    """An extension's exactly-once body (the LangGraph store's) records what it returns."""
    from harombe_core.store.runner import Body, Step

    def body() -> Body[str]:
        yield Step("SELECT 1", ())
        return f"removed {secret}"

    return mm.store.run_body(body, exactly_once=True)


#: Keyed calls beside the deletion paths above whose recorded result may hold user text.
KEYED_RESULTS: dict[str, Callable[[MemoryManager, str], object]] = {
    "delete_sessions_before": _prune_named_session,
    "atomic": _atomic_returning,
    "run_body_exactly_once": _body_returning,
}


@pytest.mark.parametrize("name", sorted(KEYED_RESULTS))
def test_on_postgres_no_write_log_row_holds_a_keyed_result(pg_url: str, name: str) -> None:
    secret = token()
    with MemoryManager(pg_url, embedding=None) as mm:
        result = KEYED_RESULTS[name](mm, secret)
        assert secret in str(result)  # the caller has it
        assert "harombe_writes" not in _rows_holding(pg_url, secret)
