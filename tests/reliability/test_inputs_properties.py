"""Every public method, every parameter, arbitrary values (hypothesis).

The public methods of MemoryManager (sync and async), ChatMemory and the adapters' entry points
(LangChain chat history, retriever and LangGraph store; LlamaIndex memory, chat stores and
retriever) are listed by introspection, and each parameter gets values drawn for its *kind*
(ids, text, times, numbers, counts, budgets, roles, flags, JSON, messages, ...): plausible ones
mixed with wrong types, None, huge, empty, NaN/inf, lone surrogates, NUL bytes, JSON nested
100,000 deep, times at the edges of the calendar, negatives and bools where ints go.

Each call must return normally or raise a HarombeError subclass, never another exception, and a
call that raised must leave every stored row exactly as it was (a checksum of the sessions,
messages and store items, read with SQL). A public method, or a parameter, with no strategy
fails ``test_every_public_parameter_has_a_strategy``: a method added later is covered or noticed.

Everything is real: SQLite files, and for the semantic manager the bundled embedding model and
the default in-database vector index. Examples are derandomized, so CI runs the same calls
every time; set ``HAROMBE_PROPERTY_EXAMPLES`` (default 30 per method) for a deeper run.
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, timezone
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from langgraph.store.base import GetOp, ListNamespacesOp, MatchCondition, PutOp, SearchOp
from llama_index.core.base.llms.types import ChatMessage, MessageRole
from llama_index.core.schema import QueryBundle
from llama_index.core.storage.chat_store.base_db import MessageStatus

from harombe_core import (
    ContextBudget,
    HarombeError,
    InvalidInputError,
    MemoryConfig,
    MemoryManager,
    Message,
)
from harombe_core.chat_memory import ChatMemory
from harombe_core.retrieval import SEARCH_OPTIONS
from harombe_core.testing import FakeEmbedder
from harombe_core.tokens import ApproximateTokenCounter, TextTokenCounter
from langchain_harombe.history import HarombeChatMessageHistory
from langchain_harombe.retriever import HarombeRetriever as LangChainRetriever
from langchain_harombe.store import HarombeStore
from llamaindex_harombe.chat_store import HarombeChatStore, HarombeDBChatStore
from llamaindex_harombe.memory import HarombeMemory
from llamaindex_harombe.retriever import HarombeRetriever as LlamaIndexRetriever

PROPERTY = settings(
    max_examples=int(os.environ.get("HAROMBE_PROPERTY_EXAMPLES", "30")),
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# ----------------------------------------------------------------------------------------------
# values


class _Short:
    """Keeps the printed form of a huge value short (hypothesis prints failing examples)."""

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(repr(self))


class _Deep(_Short, dict):  # type: ignore[type-arg]
    def __repr__(self) -> str:
        return self.label

    label = "<dict>"


class _Long(_Short, str):
    def __repr__(self) -> str:
        return f"<str of {len(self):,} characters>"


class _Huge(_Short, int):
    def __repr__(self) -> str:
        return f"<int of {self.bit_length()} bits>"


def _nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {"leaf": 1}
    for _ in range(depth - 1):
        value = {"a": value}
    outer = _Deep(a=value)
    outer.label = f"<dict nested {depth} deep>"
    return outer


DEEP = [_nested(d) for d in (199, 201, 100_000)]
BIG_TEXT = _Long("x" * 1_100_000)  # over the content limit
BIG_JSON = _Deep(blob=_Long("y" * 10_100_000))  # over every JSON limit
BIG_JSON.label = "<dict holding 10,100,000 characters>"
HUGE_INTS = st.sampled_from([2**63, -(2**63) - 1, 10**30, _Huge(10**5000)])
ODD_TEXT = st.sampled_from(["", " ", "\x00", "a\ud800b", "\udcff", _Long("x" * 600), BIG_TEXT])
offsets = st.builds(
    timezone,
    st.timedeltas(min_value=timedelta(hours=-23, minutes=-59), max_value=timedelta(hours=23)),
)
times = st.one_of(
    st.datetimes(timezones=st.none() | offsets),
    st.sampled_from(
        [
            datetime.fromisoformat("0001-01-01T00:00:00+05:00"),
            datetime.fromisoformat("9999-12-31T23:00:00-05:00"),
            datetime.min,
            datetime.max,
            date(2020, 1, 1),
            "2020-01-01",
            "2020-13-01",
            "yesterday",
            "0001-01-01T00:00:00+05:00",
            "9999-12-31T23:00:00-05:00",
            0,
            1.7e12,
        ]
    ),
)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    HUGE_INTS,
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    ODD_TEXT,
    st.binary(max_size=6),
    st.sampled_from([object(), (), (1, 2), frozenset({1}), 1j]),
    times,
)
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=10)
    | ODD_TEXT,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)


def named(name: str, strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """``strategy`` under a short name: hypothesis prints strategies, and these nest deeply."""

    @st.composite
    def draw(draw_: Any) -> Any:
        return draw_(strategy)

    draw.__name__ = draw.__qualname__ = name
    return draw()


anything = named(
    "anything",
    st.one_of(
        scalars,
        st.lists(scalars, max_size=3),
        st.dictionaries(st.text(max_size=5), scalars, max_size=3),
        st.sampled_from([*DEEP, BIG_JSON]),
    ),
)


FACT_KINDS = st.sampled_from(["fact", "preference", "task", "decision", "nope"])


def kind(*plausible: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Plausible values of a kind, mixed with anything at all."""
    return st.one_of(*plausible, anything)


ROLES = ["user", "assistant", "system", "tool"]
session_ids = kind(st.sampled_from(["base", "other", "fresh"]), st.text(max_size=8))
user_ids = kind(st.sampled_from([None, "u1", "u2"]))
texts = kind(st.sampled_from(["hello world", "what did I say about boats?"]), st.text(max_size=30))
counts = kind(st.integers(-3, 30), HUGE_INTS)
budgets = kind(st.integers(-5, 3000), HUGE_INTS)
numbers = kind(st.floats(allow_nan=True, allow_infinity=True), st.integers(-3, 3))
flags = kind(st.booleans())
roles = kind(st.lists(st.sampled_from([*ROLES, "human", None, 3]), max_size=3), st.just("user"))
metadata = kind(json_values, st.dictionaries(st.text(max_size=5), json_values, max_size=3))
tool_calls = kind(
    st.lists(
        st.fixed_dictionaries(
            {"id": st.text(max_size=5), "type": st.just("function")},
            optional={
                "function": st.fixed_dictionaries(
                    {"name": st.text(max_size=5), "arguments": json_values}
                )
            },
        ),
        max_size=2,
    )
)
message_dicts = named(
    "message_dicts",
    st.fixed_dictionaries(
        {"role": kind(st.sampled_from([*ROLES, "human"])), "content": texts},
        optional={
            "name": texts,
            "metadata": metadata,
            "tool_calls": tool_calls,
            "tool_call_id": texts,
            "created_at": times,
            "id": counts,
            "session_id": anything,
        },
    ),
)
valid_messages = st.builds(
    Message,
    role=st.sampled_from(ROLES),
    content=st.text(st.characters(exclude_characters="\x00"), max_size=30),
)
messages_one = named("messages_one", st.one_of(message_dicts, valid_messages, anything))
messages_many = named("messages_many", st.one_of(st.lists(messages_one, max_size=3), messages_one))
id_lists = kind(st.lists(st.one_of(st.integers(-2, 10_000), HUGE_INTS, scalars), max_size=3))
strategies_ = kind(st.sampled_from(["simple", "summarization", "hybrid", "threaded", "all", "x"]))
formats = kind(st.sampled_from(["json", "jsonl", "text", "mermaid", "plain_text", "csv"]))
context_budgets = kind(st.builds(ContextBudget))


def search_options(extra: tuple[str, ...] = ()) -> st.SearchStrategy[dict[str, Any]]:
    names = st.sampled_from(sorted(SEARCH_OPTIONS) + list(extra) + ["nope"])
    return st.dictionaries(names, st.one_of(numbers, times, roles, session_ids), max_size=3)


# LangChain and LlamaIndex values: only what their own classes accept is built, the hostile part
# is in the content, names, ids, kwargs and tool arguments.
lc_messages_one = named(
    "lc_messages_one",
    st.one_of(
        st.builds(HumanMessage, content=texts.filter(lambda v: isinstance(v, str))),
        st.builds(SystemMessage, content=st.text(max_size=20)),
        st.builds(
            AIMessage,
            content=st.text(max_size=20),
            additional_kwargs=st.dictionaries(st.text(max_size=5), anything, max_size=2),
            tool_calls=st.lists(
                st.fixed_dictionaries(
                    {
                        "name": st.text(max_size=5),
                        "args": st.dictionaries(st.text(max_size=4), anything, max_size=2),
                        "id": st.text(max_size=5),
                    }
                ),
                max_size=2,
            ),
        ),
        st.builds(ToolMessage, content=st.text(max_size=10), tool_call_id=st.text(max_size=600)),
        anything,
    ),
)
lc_messages = st.one_of(st.lists(lc_messages_one, max_size=3), lc_messages_one)
li_messages_one = named(
    "li_messages_one",
    st.one_of(
        st.builds(
            ChatMessage,
            role=st.sampled_from(list(MessageRole)),
            content=st.one_of(st.none(), st.text(max_size=20), ODD_TEXT),
            additional_kwargs=st.dictionaries(st.text(max_size=5), anything, max_size=2),
        ),
        anything,
    ),
)
li_messages = st.one_of(st.lists(li_messages_one, max_size=3), li_messages_one)
statuses = kind(st.sampled_from([None, *MessageStatus, "active", "archived", "nope"]))
namespaces = kind(
    st.lists(st.sampled_from(["users", "u1", "", "a.b", _Long("x" * 600), "\x00"]), max_size=3).map(
        tuple
    )
)
store_ops = named(
    "store_ops",
    st.one_of(
        st.builds(GetOp, namespace=namespaces, key=texts, refresh_ttl=flags),
        st.builds(
            PutOp,
            namespace=namespaces,
            key=texts,
            value=kind(st.dictionaries(st.text(max_size=5), json_values, max_size=3)),
            index=kind(st.just(False), st.lists(st.sampled_from(["$", "text", "a.b"]), max_size=2)),
            ttl=numbers,
        ),
        st.builds(
            SearchOp,
            namespace_prefix=namespaces,
            filter=kind(st.dictionaries(st.sampled_from(["k", "$eq", "$gt"]), json_values)),
            limit=counts,
            offset=counts,
            query=kind(st.text(max_size=10)),
            refresh_ttl=flags,
        ),
        st.builds(
            ListNamespacesOp,
            match_conditions=kind(
                st.lists(
                    st.builds(
                        MatchCondition,
                        match_type=kind(st.sampled_from(["prefix", "suffix"])),
                        path=namespaces,
                    ),
                    max_size=2,
                ).map(tuple)
            ),
            max_depth=counts,
            limit=counts,
            offset=counts,
        ),
    ),
)


# ----------------------------------------------------------------------------------------------
# the objects under test, with what is stored in them


@dataclass(repr=False)
class World:
    """Every object under test, over two real database files, and helpers to check them."""

    folder: Path
    semantic: MemoryManager
    plain: MemoryManager
    targets: dict[str, Any] = field(default_factory=dict)
    saved_chat: Path | None = None
    kinds: dict[str, st.SearchStrategy[Any]] = field(default_factory=dict)

    def __repr__(self) -> str:  # printed with every failing example: keep it short
        return f"World({self.folder})"

    def managers(self) -> list[MemoryManager]:
        return [self.semantic, self.plain]

    def checksum(self) -> str:
        """Digest of every stored row that is the truth (derived indexes left out)."""
        digest = hashlib.sha256()
        for manager in self.managers():
            for sql in (
                "SELECT * FROM sessions ORDER BY id",
                "SELECT id, session_id, role, content, name, tool_calls, tool_call_id, metadata, "
                "created_at, token_count, parent_id, summary_json FROM messages ORDER BY id",
                "SELECT * FROM store_items ORDER BY namespace, key",
            ):
                digest.update(repr(manager.store.query(sql)).encode("utf-8", "surrogatepass"))
        return digest.hexdigest()

    def reseed(self) -> None:
        """Put back what the destructive calls of the last example removed."""
        for manager in self.managers():
            base = manager.get_session("base")
            if base is not None and base.user_id != "u1":  # an example moved it to another user
                manager.update_session("base", user_id="u1")
            if not manager.get_messages("base", limit=1):
                manager.save_messages(
                    "base",
                    [
                        Message(role="user", content="I sail boats on the lake", metadata={"k": 1}),
                        Message(role="assistant", content="Boats are fun."),
                    ],
                    user_id="u1",
                )
        chat = self.targets.get("ChatMemory")
        if chat is not None and chat.graph.number_of_nodes() == 0:
            chat.append("hello boats", "hi there")


def _write_then_fail(manager: MemoryManager) -> None:
    """A block for ``atomic`` that writes and then fails: nothing of it may remain."""
    manager.save_message("base", Message(role="user", content="written inside the block"))
    raise InvalidInputError("the block failed after writing")


def _closable(value: Any, world: World) -> None:
    """Close what a call opened (a manager or memory it returned), never the world's objects."""
    if value is None or any(value is t for t in world.targets.values()):
        return
    if value in world.managers():
        return
    if isinstance(value, (MemoryManager, ChatMemory, HarombeMemory)):
        value.close()


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    folder = tmp_path_factory.mktemp("inputs")
    with pytest.MonkeyPatch.context() as env:
        # Adapters built without a path open ~/.harombe/memory.db: keep that inside the test.
        env.setenv("HOME", str(folder))
        env.delenv("HAROMBE_DB", raising=False)
        yield from _world(folder)


def _world(folder: Path) -> Iterator[World]:
    semantic = MemoryManager(folder / "semantic.db")  # bundled model, vectors in the db
    plain = MemoryManager(folder / "plain.db", embedding=None, token_counter="approximate")
    w = World(folder=folder, semantic=semantic, plain=plain)
    w.reseed()
    semantic.flush()
    chat = ChatMemory.threaded(
        "embedding", embedder=FakeEmbedder(), memory=plain, session_id="chat"
    )
    w.targets = {
        "MemoryManager": semantic,
        "ChatMemory": chat,
        "HarombeChatMessageHistory": HarombeChatMessageHistory("lc", manager=plain, user_id="u1"),
        "LangChainRetriever": LangChainRetriever(manager=semantic, k=3, user_id="u1"),
        "HarombeStore": HarombeStore(plain),
        "HarombeMemory": HarombeMemory.from_defaults(session_id="li", user_id="u1", manager=plain),
        "HarombeChatStore": HarombeChatStore(manager=plain),
        "HarombeDBChatStore": HarombeDBChatStore(manager=plain),
        "LlamaIndexRetriever": LlamaIndexRetriever(manager=semantic, top_k=3, user_id="u1"),
    }
    w.reseed()
    w.saved_chat = chat.save(folder / "chat.json")
    w.kinds = common_kinds(w)
    yield w
    for manager in w.managers():
        manager.close()


# ----------------------------------------------------------------------------------------------
# which values each parameter gets: by name, per family of objects where a name means another
# thing (``messages`` are harombe messages for a manager, LangChain ones for a chat history)


def paths(world: World) -> st.SearchStrategy[Any]:
    folder = world.folder
    return st.one_of(
        st.sampled_from(
            [
                world.saved_chat,
                folder / "missing.json",
                folder,
                folder / "no" / "such" / "dir" / "x.json",
                str(folder / "out.json"),
                folder / "deep.json",
            ]
        ),
        # odd names, always inside the test's folder (a relative one would land in the cwd)
        ODD_TEXT.filter(lambda s: 0 < len(s) < 1000).map(lambda s: f"{folder}{os.sep}{s}"),
        st.just(""),
        scalars.filter(lambda v: not isinstance(v, str)),
    )


def common_kinds(world: World) -> dict[str, st.SearchStrategy[Any]]:
    tmp_db = str(world.folder / "opened.db")
    return {
        "session_id": session_ids,
        "key": session_ids,
        "exclude_session_id": session_ids,
        "user_id": user_ids,
        "query": texts,
        "topic": texts,
        "input": texts,
        "system_prompt": texts,
        "user_profile": texts,
        "top_k": counts,
        "k": counts,
        "limit": counts,
        "offset": counts,
        "after_id": counts,
        "until_id": counts,
        "keep_last": counts,
        "count": counts,
        "batch_size": counts,
        "n_results": counts,
        "context_depth": counts,
        "depth": counts,
        "node_id": counts,
        "max_chars": counts,
        "idx": counts,
        "n": counts,
        "rag_top_k": counts,
        "max_tokens": budgets,
        "token_limit": budgets,
        "profile_tokens": st.one_of(st.none(), budgets),
        "initial_token_count": budgets,
        "rag_max_tokens": budgets,
        "min_similarity": numbers,
        "days": numbers,
        "timeout": st.one_of(st.floats(0, 0.5), numbers),
        "include_system": flags,
        "sweep_interval_minutes": numbers,
        "json_str": st.one_of(
            texts, st.sampled_from([world.targets["HarombeMemory"].to_string(), "[]", "{}"])
        ),
        "exact": flags,
        "all_users": flags,
        "conversation_id": session_ids,
        "fn": st.sampled_from(
            [lambda: None, partial(_write_then_fail, world.semantic), 3, "x", None]
        ),
        "start_on_user": flags,
        "keep_newest_turn": flags,
        "token_counter": st.sampled_from(
            [None, TextTokenCounter(ApproximateTokenCounter()), "nope", 3, len]
        ),
        "progress": flags,
        "reembed": flags,
        "rag": flags,
        "metadata": metadata,
        "unless_metadata": metadata,
        # user memory: facts, their kinds, subjects and dates, session outcome
        "text": texts,
        "kind": kind(FACT_KINDS),
        "kinds": kind(st.lists(FACT_KINDS, max_size=3)),
        "subject": st.one_of(st.none(), texts),
        "valid_from": st.one_of(st.none(), times),
        "created_at": st.one_of(st.none(), times),
        "as_of": st.one_of(st.none(), times),
        "include_history": flags,
        "skip_unreadable": flags,
        "fact_id": counts,
        "outcome": kind(st.sampled_from(["resolved", "ongoing", "abandoned", None, "nope"])),
        "important": st.one_of(st.none(), flags),
        "user_memory": st.sampled_from([None, True, False, 3, "x"]),
        "fact_extractor": st.sampled_from([None, "offline", 3, "nope", lambda batch: "[]"]),
        "message": messages_one,
        "messages": messages_many,
        "delete_ids": id_lists,
        "sources": st.one_of(st.none(), id_lists),
        "deleted_sessions": kind(st.lists(session_ids, max_size=3)),
        "strategy": strategies_,
        "format": formats,
        "budget": context_budgets,
        "path": paths(world),
        "conn_string": paths(world),
        "manager_options": CONSTRUCTOR_KINDS["manager_options"],
        "status": statuses,
        "ops": st.one_of(st.lists(store_ops, max_size=3), store_ops, anything),
        "str_or_query_bundle": st.one_of(texts, st.builds(QueryBundle, query_str=st.text())),
        "config": st.sampled_from([None, {}]),  # LangChain's RunnableConfig: its contract
        "options": search_options(),
        "kwargs": search_options(),
        # objects that open other objects: real choices and junk, never a model download
        "embedding": st.sampled_from([None, "nope", 3, [], "llamaindex"]),
        "vector_store": st.sampled_from([None, "chroma", "nope", 3]),
        "embed_model": st.sampled_from([None, 3, "x"]),
        "embedder": st.sampled_from([FakeEmbedder(), None, 3, "nope"]),
        "llm": st.sampled_from([None, 3, "x", lambda prompt: '{"selected_node_id": 1}']),
        "summarizer": st.sampled_from([None, "extractive", "nope", 3, lambda p: "{}"]),
        "selector": st.sampled_from(["linear", "embedding", "llm", "nope", None, 3]),
        "node_selector": st.sampled_from([None, "linear", "nope", 3]),
        "thread_selector": st.sampled_from(["linear", "llm", "nope", 3]),
        "rag_scope": st.sampled_from(["user", "all", "nope", 3]),
        "manager": st.sampled_from([None, world.plain, 3, "x"]),
        "memory": st.sampled_from([None, world.plain, 3, "x"]),
        "storage_path": st.sampled_from(
            [None, ":memory:", tmp_db, 3, "", "\x00", f"{world.folder}{os.sep}a\ud800"]
        ),
        "chat_history": st.one_of(st.none(), li_messages),
        "human_message": st.one_of(
            texts, message_dicts, valid_messages, st.just(HumanMessage("hi"))
        ),
        "assistant_message": st.one_of(
            texts, message_dicts, valid_messages, st.just(AIMessage("ok"))
        ),
        "source": st.one_of(
            st.fixed_dictionaries(
                {
                    "memory": st.fixed_dictionaries(
                        {"storage_path": st.just(":memory:")},
                        optional={"max_history_tokens": anything, "auto_prune_days": anything},
                    ),
                    "vector_store": st.just({"enabled": False}),
                },
                optional={"rag": st.dictionaries(st.sampled_from(["top_k", "nope"]), anything)},
            ),
            st.sampled_from(
                [MemoryConfig(memory={"storage_path": ":memory:"}, vector_store={"enabled": False})]
            ),
            scalars.filter(lambda v: not isinstance(v, str)),
        ),
    }


#: Parameters whose meaning depends on the object: LangChain / LlamaIndex messages.
FAMILY_KINDS: dict[str, dict[str, st.SearchStrategy[Any]]] = {
    "HarombeChatMessageHistory": {"messages": lc_messages},
    "HarombeMemory": {
        "message": li_messages_one,
        "messages": li_messages,
        "input": st.one_of(texts, li_messages_one),
    },
    "HarombeChatStore": {"message": li_messages_one, "messages": li_messages},
    # ChatMemory.threaded(**kwargs) passes them on to ChatMemory()
    "ChatMemory": {
        "kwargs": st.fixed_dictionaries(
            {},
            optional={
                "context_depth": counts,
                "session_id": session_ids,
                "storage_path": st.sampled_from([None, ":memory:", 3]),
            },
        )
    },
    "HarombeDBChatStore": {"message": li_messages_one, "messages": li_messages},
    "LangChainRetriever": {
        "input": texts,
        "kwargs": st.dictionaries(st.sampled_from(["k", "nope"]), counts, max_size=2),
    },
    # LangGraph's own methods check namespaces and build keys before harombe's code runs
    # (InvalidNamespaceError is its contract): those get namespaces and keys it accepts, every
    # other argument is drawn freely; batch() gets anything at all.
    "HarombeStore": {
        "namespace": st.sampled_from([("users", "u1"), ("docs",), (_Long("x" * 600),)]),
        "namespace_prefix": st.sampled_from([(), ("users",), (_Long("x" * 600),)]),
        "key": st.one_of(st.text(max_size=8), ODD_TEXT),
        "value": kind(st.dictionaries(st.text(max_size=5), json_values, max_size=3)),
        "index": kind(st.just(False), st.lists(st.sampled_from(["$", "text"]), max_size=2)),
        "ttl": numbers,
        "filter": kind(st.dictionaries(st.sampled_from(["k", "$eq"]), json_values, max_size=2)),
        "refresh_ttl": flags,
    },
}

#: Public methods not called with drawn arguments, and why.
NOT_DRAWN = {
    "close": "ends the object the other examples use; closing twice is tested below",
    "aclose": "as close",
    "class_name": "a constant of the framework's serialisation",
    "model_post_init": "pydantic's construction hook, not an API",
}


OWN_PACKAGES = ("harombe_core", "langchain_harombe", "llamaindex_harombe")
CLASSES: dict[str, type] = {
    "MemoryManager": MemoryManager,
    "ChatMemory": ChatMemory,
    "HarombeChatMessageHistory": HarombeChatMessageHistory,
    "LangChainRetriever": LangChainRetriever,
    "HarombeStore": HarombeStore,
    "HarombeMemory": HarombeMemory,
    "HarombeChatStore": HarombeChatStore,
    "HarombeDBChatStore": HarombeDBChatStore,
    "LlamaIndexRetriever": LlamaIndexRetriever,
}
#: Framework methods that are the adapters' entry points and run harombe's code.
FRAMEWORK_ENTRY_POINTS = {
    "HarombeChatMessageHistory": ["add_message"],
    "LangChainRetriever": ["invoke", "ainvoke"],
    "HarombeStore": ["put", "get", "search", "delete", "aput", "aget", "asearch"],
}


def _ours(cls: type) -> list[type]:
    return [k for k in cls.__mro__ if k.__module__.startswith(OWN_PACKAGES)]


def public_methods(cls: type) -> list[str]:
    """The public methods harombe defines on ``cls`` (inherited framework ones left out)."""
    return sorted(
        name
        for name in dir(cls)
        if not name.startswith("_")
        and callable(getattr(cls, name, None))
        and any(name in vars(k) for k in _ours(cls))
    )


def constructor_parameters(cls: type) -> list[str]:
    """What a user passes to build one: ``__init__``'s named parameters and, for pydantic
    adapters, the fields harombe declares."""
    names = [
        p.name
        for p in inspect.signature(cls.__init__).parameters.values()
        if p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]
    fields = getattr(cls, "model_fields", {})
    for k in _ours(cls):
        names += [f for f in vars(k).get("__annotations__", {}) if f in fields and f not in names]
    return names


METHODS: dict[str, list[str]] = {
    family: [m for m in public_methods(cls) if m not in NOT_DRAWN]
    + FRAMEWORK_ENTRY_POINTS.get(family, [])
    for family, cls in CLASSES.items()
}
CASES = [(family, method) for family, names in METHODS.items() for method in names]


def signature_of(target: Any, name: str) -> inspect.Signature:
    """A method's signature; an async twin that forwards ``*args`` or ``**kwargs`` takes its
    sync twin's parameters."""
    sig = inspect.signature(getattr(target, name))
    kinds = {p.kind for p in sig.parameters.values()}
    forwards = {inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD} & kinds
    if forwards and name.startswith("a"):
        twin = getattr(target, name[1:], None)
        if twin is not None:
            return inspect.signature(twin)
    return sig


def strategy_for(world: World, family: str, name: str) -> st.SearchStrategy[Any] | None:
    special = FAMILY_KINDS.get(family, {}).get(name)
    return special if special is not None else world.kinds.get(name)


def _run(result: Any) -> Any:
    """The value of a call, awaited in a fresh event loop when the method is async."""
    if inspect.isawaitable(result):

        async def wait() -> Any:
            return await result

        return asyncio.run(wait())
    return result


def _draw_arguments(
    world: World, family: str, sig: inspect.Signature, data: Any
) -> tuple[list[Any], dict[str, Any]]:
    """Values for every parameter of ``sig`` (each optional one sometimes left to its default)."""
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    for p in sig.parameters.values():
        if p.name == "self" or p.kind is p.VAR_POSITIONAL:
            continue
        strategy = strategy_for(world, family, p.name)
        assert strategy is not None, f"no strategy for parameter {p.name!r}"
        if p.default is not p.empty and data.draw(st.booleans(), label=f"default {p.name}"):
            continue  # the default matters too
        value = data.draw(strategy, label=p.name)
        if p.kind is p.VAR_KEYWORD:
            kwargs.update(value)
        elif p.kind is p.POSITIONAL_ONLY:
            args.append(value)
        else:
            kwargs[p.name] = value
    return args, kwargs


# ----------------------------------------------------------------------------------------------
# the properties


def test_every_public_parameter_has_a_strategy(world: World) -> None:
    """A public method or constructor parameter added later must be given values here."""
    missing = []
    for family, names in METHODS.items():
        target = world.targets[family]
        for method in names:
            for p in signature_of(target, method).parameters.values():
                if (
                    p.name != "self"
                    and p.kind is not p.VAR_POSITIONAL
                    and strategy_for(world, family, p.name) is None
                ):
                    missing.append(f"{family}.{method}({p.name})")
        for name in constructor_parameters(CLASSES[family]):
            if strategy_for(world, family, name) is None and name not in CONSTRUCTOR_KINDS:
                missing.append(f"{family}({name})")
    assert not missing, f"parameters without a strategy: {missing}"
    assert len(CASES) > 100  # every family contributes its methods


@pytest.mark.parametrize(("family", "method"), CASES, ids=[f"{f}.{m}" for f, m in CASES])
@PROPERTY
@given(data=st.data())
def test_a_call_returns_or_raises_a_typed_error_and_changes_nothing(
    world: World, family: str, method: str, data: st.DataObject
) -> None:
    target = world.targets[family]
    args, kwargs = _draw_arguments(world, family, signature_of(target, method), data)
    before = world.checksum()
    failed: HarombeError | None = None
    try:
        result = _run(getattr(target, method)(*args, **kwargs))
    except HarombeError as exc:
        failed = exc
    else:
        _closable(result, world)
    if failed is not None:
        assert world.checksum() == before, f"{family}.{method} raised {failed!r} after writing"
    world.reseed()


#: Values for constructor parameters that only constructors take.
CONSTRUCTOR_KINDS: dict[str, st.SearchStrategy[Any]] = {
    "max_history_tokens": budgets,
    "token_counter": st.sampled_from(["exact", "approximate", "nope", 3, len, None]),
    "config": st.sampled_from([None, MemoryConfig(), 3, {"memory": 3}]),
    "encryption_key": st.sampled_from([None, "k", 3, ""]),
    "manager_options": st.one_of(
        st.none(),
        st.dictionaries(
            st.sampled_from(["embedding", "max_history_tokens", "nope"]),
            st.sampled_from([None, 3, "nope", -1]),
            max_size=2,
        ),
        st.sampled_from([3, "x"]),
    ),
    "context_options": st.one_of(
        st.none(), st.dictionaries(st.sampled_from(["keep_last", "query", "nope"]), anything)
    ),
    "search_type": st.sampled_from(["hybrid", "similarity", "mmr", "nope", 3]),
    "mmr_lambda": numbers,
    "index": st.sampled_from([None, {"fields": ["text"]}, {"embed": 3}, 3, {"fields": 3}]),
    "ttl": st.sampled_from([None, {"default_ttl": 5}, {"default_ttl": "x"}, 3]),
    "callback_manager": st.sampled_from([None, 3]),
    "verbose": flags,
}


@pytest.mark.parametrize("family", sorted(CLASSES))
@settings(PROPERTY, max_examples=25)
@given(data=st.data())
def test_a_constructor_builds_or_raises_a_typed_error(
    world: World, family: str, data: st.DataObject
) -> None:
    cls = CLASSES[family]
    before = world.checksum()
    kwargs: dict[str, Any] = {}
    required = {
        p.name for p in inspect.signature(cls.__init__).parameters.values() if p.default is p.empty
    }
    for name in constructor_parameters(cls):
        strategy = CONSTRUCTOR_KINDS.get(name)
        if strategy is None:
            strategy = strategy_for(world, family, name)
        assert strategy is not None, name
        if name in required or data.draw(st.booleans(), label=f"default {name}"):
            kwargs[name] = data.draw(strategy, label=name)
    try:
        built = cls(**kwargs)
    except HarombeError:
        assert world.checksum() == before
    else:
        close = getattr(built, "close", None)
        if close is not None:
            close()


@pytest.mark.parametrize("family", sorted(CLASSES))
def test_closing_twice_is_harmless(world: World, family: str) -> None:
    """``close`` is left out of the drawn calls (it ends the object); it must be idempotent on
    an object that opened its own database."""
    cls = CLASSES[family]
    path = str(world.folder / f"close-{family}.db")
    if family == "MemoryManager":
        built: Any = cls(path, embedding=None)
    elif family == "ChatMemory":
        built = cls(storage_path=path)
    elif family == "HarombeChatMessageHistory":
        built = cls("s", storage_path=path)
    elif family == "HarombeStore":
        built = cls(storage_path=path)
    elif family == "HarombeMemory":
        built = cls.from_defaults(storage_path=path)
    elif family == "LangChainRetriever":
        built = cls(storage_path=path, manager_options={"embedding": None}, user_id="u1")
    elif family == "LlamaIndexRetriever":
        built = cls(storage_path=path, user_id="u1")
    else:
        built = cls(storage_path=path)
    built.close()
    built.close()


# ----------------------------------------------------------------------------------------------
# the cases reported by users, each named (the properties above draw them among many others)

ODD_DATES = ["0001-01-01T00:00:00+05:00", "9999-12-31T23:00:00-05:00"]
REPORTED: list[tuple[str, Callable[[World], Any]]] = [
    ("surrogate: search", lambda w: w.semantic.search("boats \ud800")),
    ("surrogate: search_similar", lambda w: w.semantic.search_similar("boats \ud800")),
    ("surrogate: search_by_topic", lambda w: w.semantic.search_by_topic("boats \ud800")),
    ("surrogate: search_summaries", lambda w: w.semantic.search_summaries("boats \ud800")),
    ("surrogate: LangChain retriever", lambda w: w.targets["LangChainRetriever"].invoke("\udcff")),
    (
        "surrogate: LlamaIndex retriever",
        lambda w: w.targets["LlamaIndexRetriever"].retrieve("\udcff"),
    ),
    ("since=0", lambda w: w.semantic.search("boats", since=0)),
    ("temporal_decay='1'", lambda w: w.semantic.search("boats", temporal_decay="1")),
    ("min_similarity='0.5'", lambda w: w.semantic.search("boats", min_similarity="0.5")),
    ("mmr_lambda='0.5'", lambda w: w.semantic.search("boats", mmr_lambda="0.5")),
    ("now='soon'", lambda w: w.semantic.search("boats", temporal_decay=0.1, now="soon")),
    ("roles=[None]", lambda w: w.semantic.search("boats", roles=[None])),
    ("roles='user'", lambda w: w.semantic.search("boats", roles="user")),
    ("NaN weight", lambda w: w.semantic.search("boats", vector_weight=float("nan"))),
    (
        "JSON nested 100,000 deep",
        lambda w: w.semantic.save_message(
            "base", {"role": "user", "content": "x", "metadata": DEEP[-1]}
        ),
    ),
    *[
        (
            f"created_at {when}",
            lambda w, when=when: w.semantic.save_message(
                "base", Message(role="user", content="x", created_at=datetime.fromisoformat(when))
            ),
        )
        for when in ODD_DATES
    ],
]


@pytest.mark.parametrize("call", [c for _, c in REPORTED], ids=[n for n, _ in REPORTED])
def test_each_reported_case_is_a_typed_error_and_changes_nothing(
    world: World, call: Callable[[World], Any]
) -> None:
    before = world.checksum()
    with pytest.raises(HarombeError) as caught:
        call(world)
    assert type(caught.value).__module__ == "harombe_core.errors"
    assert world.checksum() == before


def test_an_iso_8601_since_is_parsed_rather_than_refused(world: World) -> None:
    assert world.semantic.search("boats", since="2000-01-01", until="9999-12-31")
    assert world.semantic.search("boats", since="9999-01-01") == []
