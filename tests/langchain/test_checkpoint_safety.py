"""A crafted checkpoint row runs no code: not on read, not through ``harombe migrate``.

Each test stores a real thread (create_agent, a scripted model, a tool call) with HarombeSaver,
then writes into the database file what an attacker with the file would: a msgpack ext payload
naming ``builtins.exec``, ``os.system`` or ``subprocess.run`` in a message blob, a pending
write and a channel blob. Every payload would create a marker file if called. Reading the thread
must raise UnsafeCheckpointError naming the type and create no marker; LangGraph's own
SqliteSaver, given the same payload, runs it (its default is permissive), which is the
difference ``docs/checkpoint-safety.md`` explains. Ordinary graphs (messages, tool calls,
TypedDict, pydantic and dataclass state, interrupts) still round-trip, and a type the
application allow-lists is revived.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import os
import pickle
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Annotated, Any, TypedDict

import ormsgpack
import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.checkpoint.serde import _msgpack as lg_msgpack
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import Command, interrupt
from pydantic import BaseModel

from harombe_core.checkpoint_safety import LANGGRAPH_SAFE_TYPES, TypePolicy, check_row
from harombe_core.errors import InvalidInputError, UnsafeCheckpointError
from harombe_core.manager import MemoryManager
from harombe_core.migrate import migrate
from harombe_core.store import ops
from langchain_harombe import HarombeSaver, HarombeSerializer, RecordingChatModel

USER = "ann"
CONFIG: Any = {"configurable": {"thread_id": "t1", "user_id": USER}}


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


class Plan(BaseModel):
    """A type of the application's own, kept in graph state."""

    steps: list[str]


class PlanState(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    plan: Plan | None


# crafted payloads ---------------------------------------------------------------------------
def _ext(code: int, *fields: Any) -> bytes:
    return ormsgpack.packb(ormsgpack.Ext(code, ormsgpack.packb(fields)))


def _payloads(marker: Callable[[str], Path]) -> dict[str, bytes]:
    """Payloads that each create their marker file if LangGraph's default reader gets them."""
    code = "open({!r}, 'w').close()"
    human = ormsgpack.Ext(
        5,
        ormsgpack.packb(
            (
                "langchain_core.messages.human",
                "HumanMessage",
                {
                    "content": ormsgpack.Ext(
                        0, ormsgpack.packb(("builtins", "exec", code.format(str(marker("nested")))))
                    ),
                    "type": "human",
                },
                "model_validate_json",
            )
        ),
    )
    return {
        "exec": _ext(0, "builtins", "exec", code.format(str(marker("exec")))),
        "os.system": _ext(0, "os", "system", f"touch {marker('os.system')}"),
        "exec args": _ext(1, "builtins", "exec", [code.format(str(marker("exec args")))]),
        "subprocess kwargs": _ext(
            2, "subprocess", "run", {"args": ["touch", str(marker("subprocess kwargs"))]}
        ),
        "inside a message": ormsgpack.packb(human),
        "method": _ext(3, "os", "system", f"touch {marker('method')}", "__call__"),
    }


class Markers:
    def __init__(self, folder: Path) -> None:
        self.folder = folder
        folder.mkdir()

    def __call__(self, name: str) -> Path:
        return self.folder / name.replace(" ", "_")

    def made(self) -> list[str]:
        return sorted(p.name for p in self.folder.iterdir())


@pytest.fixture
def markers(tmp_path: Path) -> Markers:
    return Markers(tmp_path / "markers")


def _agent(saver: Any, replies: list[Any]) -> Any:
    return create_agent(RecordingChatModel(responses=replies), tools=[add], checkpointer=saver)


def _tool_turn(saver: Any) -> Any:
    agent = _agent(
        saver,
        [
            AIMessage(
                "",
                tool_calls=[
                    {"name": "add", "args": {"a": 2, "b": 3}, "id": "c1", "type": "tool_call"}
                ],
            ),
            "5.",
        ],
    )
    agent.invoke({"messages": [HumanMessage("2+3?")]}, CONFIG)
    return agent


@pytest.fixture
def thread_db(tmp_path: Path) -> Path:
    """A SQLite file holding thread t1: a question, a tool call, its result and an answer."""
    path = tmp_path / "memory.db"
    with MemoryManager(path, embedding=None) as mm:
        _tool_turn(HarombeSaver(mm))
    return path


def _plant(path: Path, where: str, payload: bytes) -> None:
    """Write ``payload`` into the thread's newest checkpoint: as one of its message blobs, a
    pending write, or the value of a channel it reads."""
    with closing(sqlite3.connect(path)) as db, db:
        newest = db.execute(
            "SELECT checkpoint_id FROM checkpoints WHERE thread_id = 't1' AND checkpoint_ns = '' "
            "ORDER BY checkpoint_id DESC LIMIT 1"
        ).fetchone()[0]
        if where == "message":
            (digest,) = db.execute(
                "SELECT hash FROM checkpoint_message_blobs WHERE thread_id = 't1' LIMIT 1"
            ).fetchone()
            db.execute(
                "UPDATE checkpoint_message_blobs SET type = 'msgpack', blob = ? "
                "WHERE thread_id = 't1' AND hash = ?",
                (payload, digest),
            )
        elif where == "write":
            db.execute(
                "INSERT OR REPLACE INTO checkpoint_writes (thread_id, checkpoint_ns, "
                "checkpoint_id, task_id, idx, task_path, channel, type, blob) "
                "VALUES ('t1', '', ?, 'task', 0, '', 'messages', 'msgpack', ?)",
                (newest, payload),
            )
        else:
            changed = db.execute(  # the messages channel's value, as any channel's is stored
                "UPDATE checkpoint_blobs SET type = 'msgpack', blob = ? WHERE thread_id = 't1' "
                "AND channel = 'messages'",
                (payload,),
            ).rowcount
            assert changed, "the thread has a channel blob to plant in"


READS: dict[str, Callable[[HarombeSaver, Any], Any]] = {
    "get_state": lambda saver, agent: agent.get_state(CONFIG),
    "get_tuple": lambda saver, agent: saver.get_tuple(CONFIG),
    "list": lambda saver, agent: list(saver.list(CONFIG)),
}


@pytest.mark.parametrize("where", ["message", "write", "channel"])
@pytest.mark.parametrize("read", sorted(READS))
def test_a_crafted_row_is_refused_and_runs_nothing(
    thread_db: Path, markers: Markers, where: str, read: str
) -> None:
    for name, payload in _payloads(markers).items():
        _plant(thread_db, where, payload)
        with MemoryManager(thread_db, embedding=None) as mm:
            saver = HarombeSaver(mm)
            with pytest.raises(UnsafeCheckpointError, match="allowed_msgpack_modules") as caught:
                READS[read](saver, _agent(saver, []))
        assert caught.value.type_name in (
            "builtins.exec",
            "os.system",
            "subprocess.run",
            "os.system.__call__",
        ), name
        assert markers.made() == [], f"{name} in a {where} ran on {read}"


def test_the_async_reads_refuse_it_too(thread_db: Path, markers: Markers) -> None:
    async def reads(saver: HarombeSaver) -> None:
        with pytest.raises(UnsafeCheckpointError):
            await saver.aget_tuple(CONFIG)
        with pytest.raises(UnsafeCheckpointError):
            _ = [item async for item in saver.alist(CONFIG)]
        with pytest.raises(UnsafeCheckpointError):
            await _agent(saver, []).aget_state(CONFIG)

    for where in ("message", "write", "channel"):
        _plant(thread_db, where, _payloads(markers)["method"])
        with MemoryManager(thread_db, embedding=None) as mm:
            asyncio.run(reads(HarombeSaver(mm)))
    assert markers.made() == []


def test_langgraphs_own_saver_runs_the_same_row(tmp_path: Path, markers: Markers) -> None:
    """The difference stated: LangGraph's SqliteSaver (default serializer) calls the type a
    pending write names; HarombeSaver, given the same bytes, refuses them."""
    from langgraph.checkpoint.sqlite import SqliteSaver

    if lg_msgpack.STRICT_MSGPACK_ENABLED:
        pytest.skip("LANGGRAPH_STRICT_MSGPACK is set: LangGraph's saver is strict here too")
    payload = _ext(0, "os", "system", f"touch {markers('langgraph')}")
    conn = sqlite3.connect(tmp_path / "langgraph.db", check_same_thread=False)
    try:
        saver = SqliteSaver(conn)
        _tool_turn(saver)
        (newest,) = conn.execute(
            "SELECT checkpoint_id FROM checkpoints ORDER BY checkpoint_id DESC LIMIT 1"
        ).fetchone()
        conn.execute(
            "INSERT INTO writes (thread_id, checkpoint_ns, checkpoint_id, task_id, idx, channel, "
            "type, value) VALUES ('t1', '', ?, 'task', 0, 'messages', 'msgpack', ?)",
            (newest, payload),
        )
        conn.commit()
        saver.get_tuple(CONFIG)
    finally:
        conn.close()
    assert markers.made() == ["langgraph"], "LangGraph's default reader ran os.system"
    with pytest.raises(UnsafeCheckpointError, match=r"os\.system"):
        HarombeSerializer().loads_typed(("msgpack", payload))
    assert markers.made() == ["langgraph"]


class _Touch:
    """Pickles as a call of ``os.system``, as a crafted pickle row would."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        import os

        return os.system, (f"touch {self.path}",)


def test_a_pickle_row_is_refused_with_a_typed_error(thread_db: Path, markers: Markers) -> None:
    with closing(sqlite3.connect(thread_db)) as db, db:
        db.execute(
            "UPDATE checkpoint_blobs SET type = 'pickle', blob = ? WHERE channel = 'messages'",
            (pickle.dumps(_Touch(markers("pickle"))),),
        )
    with MemoryManager(thread_db, embedding=None) as mm:
        saver = HarombeSaver(mm)
        with pytest.raises(UnsafeCheckpointError, match="pickle") as caught:
            saver.get_tuple(CONFIG)
    assert caught.value.type_name == "pickle"
    assert not isinstance(caught.value, NotImplementedError)
    assert markers.made() == []
    with pytest.raises(UnsafeCheckpointError, match="pickle"):
        migrate(thread_db, thread_db.with_name("target.db"), progress=False)
    assert markers.made() == []


@pytest.mark.parametrize(
    "configurable",
    [
        {"checkpoint_id": "\ud800"},
        {"checkpoint_ns": "\ud800"},
        {"thread_id": "t\udc80"},
        {"user_id": "\ud800"},
    ],
)
def test_ids_that_are_not_text_get_a_typed_error(thread_db: Path, configurable: Any) -> None:
    config = {"configurable": {**CONFIG["configurable"], **configurable}}
    with MemoryManager(thread_db, embedding=None) as mm:
        saver = HarombeSaver(mm)
        calls = [
            lambda: saver.get_tuple(config),
            lambda: list(saver.list(config)),
            lambda: saver.put_writes(config, [("messages", [])], "task"),
        ]
        if "checkpoint_id" in configurable:
            calls.append(lambda: list(saver.list(None, before=config)))
        if "checkpoint_ns" not in configurable:  # LangGraph reads a namespace as a subgraph's
            calls.append(lambda: _agent(saver, []).get_state(config))
        for call in calls:
            with pytest.raises(InvalidInputError):
                call()


# migrate ------------------------------------------------------------------------------------
@pytest.mark.parametrize("where", ["message", "write", "channel"])
def test_migrate_refuses_a_crafted_row_before_copying(
    thread_db: Path, markers: Markers, tmp_path: Path, where: str
) -> None:
    _plant(thread_db, where, _payloads(markers)["inside a message"])
    target = tmp_path / "target.db"
    with pytest.raises(UnsafeCheckpointError, match="Nothing was copied") as caught:
        migrate(thread_db, target, progress=False)
    assert caught.value.type_name == "builtins.exec"
    assert not target.exists(), "the destination was not even created"
    assert markers.made() == []


def test_migrate_into_postgres_refuses_it_and_writes_nothing_there(
    thread_db: Path, markers: Markers, pg_url: str
) -> None:
    _plant(thread_db, "channel", _payloads(markers)["subprocess kwargs"])
    with pytest.raises(UnsafeCheckpointError, match=r"subprocess\.run"):
        migrate(thread_db, pg_url, progress=False)
    with MemoryManager(pg_url, embedding=None) as mm:
        assert mm.list_sessions() == []
        assert mm.store.run(ops.count_messages()) == 0
    assert markers.made() == []


def test_harombe_migrate_refuses_it_without_a_traceback(
    thread_db: Path, markers: Markers, tmp_path: Path
) -> None:
    _plant(thread_db, "write", _payloads(markers)["os.system"])
    target = tmp_path / "target.db"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "harombe_core.cli",
            "migrate",
            "--from",
            str(thread_db),
            "--to",
            str(target),
            "--no-progress",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode != 0
    assert "os.system" in result.stderr
    assert "--allow os.system" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    assert not target.exists()
    assert markers.made() == []


# what still works -----------------------------------------------------------------------------
def test_an_agent_thread_with_tool_calls_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "memory.db"
    with MemoryManager(path, embedding=None) as mm:
        expected = _tool_turn(HarombeSaver(mm)).get_state(CONFIG).values["messages"]
    with MemoryManager(path, embedding=None) as mm:
        saver = HarombeSaver(mm)
        state = _agent(saver, []).get_state(CONFIG).values["messages"]
        history = list(saver.list(CONFIG))
    assert [type(m).__name__ for m in state] == [
        "HumanMessage",
        "AIMessage",
        "ToolMessage",
        "AIMessage",
    ]
    assert state == expected
    assert state[1].tool_calls[0]["args"] == {"a": 2, "b": 3}
    assert len(history) > 3


def _plan_graph(saver: Any) -> Any:
    def plan(state: PlanState) -> dict[str, Any]:
        return {"plan": Plan(steps=["ask", "answer"]), "messages": [AIMessage("planned")]}

    graph = StateGraph(PlanState)
    graph.add_node("plan", plan)
    graph.add_edge(START, "plan")
    graph.add_edge("plan", END)
    return graph.compile(checkpointer=saver)


def test_an_allow_listed_type_of_the_application_is_revived(tmp_path: Path) -> None:
    path = tmp_path / "memory.db"
    with MemoryManager(path, embedding=None) as mm:
        _plan_graph(HarombeSaver(mm)).invoke({"messages": [HumanMessage("go")]}, CONFIG)
    key = (Plan.__module__, "Plan")
    with MemoryManager(path, embedding=None) as mm:
        with pytest.raises(UnsafeCheckpointError, match="Plan") as caught:
            _plan_graph(HarombeSaver(mm)).get_state(CONFIG)
        assert caught.value.type_name == f"{Plan.__module__}.Plan"
        # the saver wrote this row itself: the message must not say the file was tampered with
        assert "edited outside harombe" not in str(caught.value)
        assert "the application stores itself" in str(caught.value)
        for saver in (
            HarombeSaver(mm, allowed_msgpack_modules=[Plan]),
            HarombeSaver(mm, allowed_msgpack_modules=[key]),
            HarombeSaver(mm).with_allowlist([key]),
            HarombeSaver(mm, serde=HarombeSerializer(allowed_msgpack_modules=[key])),
        ):
            values = _plan_graph(saver).get_state(CONFIG).values
            assert values["plan"] == Plan(steps=["ask", "answer"])
            assert [m.text for m in values["messages"]] == ["go", "planned"]
    target = tmp_path / "target.db"
    with pytest.raises(UnsafeCheckpointError, match=r"allowed_types=\[\("):
        migrate(path, target, progress=False)
    assert migrate(path, target, progress=False, allowed_types=[key]).verified
    again = subprocess.run(
        [sys.executable, "-m", "harombe_core.cli", "migrate", "--from", str(path),
         "--to", str(tmp_path / "cli.db"), "--no-progress", "--allow", f"{key[0]}.{key[1]}"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert "checkpoint row" in again.stdout


_STRICT_SCRIPT = """
import sys
from pathlib import Path
from langchain_core.messages import HumanMessage
from harombe_core.manager import MemoryManager
from langchain_harombe import HarombeSaver
from tests.langchain.test_checkpoint_safety import CONFIG, _plan_graph

path = Path(sys.argv[1])
with MemoryManager(path, embedding=None) as mm:
    _plan_graph(HarombeSaver(mm)).invoke({"messages": [HumanMessage("go")]}, CONFIG)
with MemoryManager(path, embedding=None) as mm:
    print(_plan_graph(HarombeSaver(mm)).get_state(CONFIG).values["plan"].steps)
"""


def test_strict_langgraph_allows_the_graphs_own_schema_types(tmp_path: Path) -> None:
    """With LANGGRAPH_STRICT_MSGPACK=true, ``compile`` allow-lists the state schema's types
    (it calls ``with_allowlist``), so the application's Plan needs no list of its own."""
    root = Path(__file__).resolve().parents[2]
    result = subprocess.run(
        [sys.executable, "-c", _STRICT_SCRIPT, str(tmp_path / "strict.db")],
        capture_output=True, text=True, timeout=300, cwd=root,
        env={**os.environ, "LANGGRAPH_STRICT_MSGPACK": "true"},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "['ask', 'answer']"


class PydanticState(BaseModel):
    messages: Annotated[list[AnyMessage], add_messages]
    note: str = ""


@dataclasses.dataclass
class DataclassState:
    messages: Annotated[list[AnyMessage], add_messages]
    note: str = ""


@pytest.mark.parametrize("schema", [PydanticState, DataclassState, PlanState])
def test_typed_state_graphs_and_interrupts_round_trip(tmp_path: Path, schema: Any) -> None:
    """Pydantic, dataclass and TypedDict state, and an interrupt (its pending write)."""

    def ask(state: Any) -> dict[str, Any]:
        answer = interrupt({"question": "name?"})
        return {"messages": [AIMessage(f"hi {answer}")], "note": "asked"}

    def build(saver: Any) -> Any:
        graph = StateGraph(schema)
        graph.add_node("ask", ask)
        graph.add_edge(START, "ask")
        graph.add_edge("ask", END)
        return graph.compile(checkpointer=saver)

    path = tmp_path / "memory.db"
    start: dict[str, Any] = {"messages": [HumanMessage("start")]}
    if schema is PlanState:
        start["plan"] = None
    with MemoryManager(path, embedding=None) as mm:
        build(HarombeSaver(mm)).invoke(start, CONFIG)
    with MemoryManager(path, embedding=None) as mm:
        graph = build(HarombeSaver(mm))
        waiting = graph.get_state(CONFIG)
        assert waiting.interrupts[0].value == {"question": "name?"}
        graph.invoke(Command(resume="Ann"), CONFIG)
    with MemoryManager(path, embedding=None) as mm:
        values = build(HarombeSaver(mm)).get_state(CONFIG).values
    assert [m.text for m in values["messages"]] == ["start", "hi Ann"]


@pytest.mark.filterwarnings("ignore:Failed to trim messages:RuntimeWarning")  # LangMem's own
def test_langmems_running_summary_round_trips(tmp_path: Path) -> None:
    """LangMem's short-term memory (``SummarizationNode``) keeps a ``RunningSummary``
    dataclass in the graph's state; HarombeSaver revives it as LangGraph's InMemorySaver does,
    in a later process too (another saver on the same file)."""
    pytest.importorskip("langmem")
    from langchain_core.messages.utils import count_tokens_approximately
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.graph import MessagesState
    from langmem.short_term import RunningSummary, SummarizationNode

    from langchain_harombe import RecordingChatModel

    class State(MessagesState):
        context: dict[str, Any]  # {"running_summary": RunningSummary}

    class ModelInput(MessagesState):
        summarized_messages: list[AnyMessage]
        context: dict[str, Any]

    def build(saver: Any) -> tuple[Any, RecordingChatModel]:
        model = RecordingChatModel()
        summarizer = RecordingChatModel(respond=lambda sent: f"summary of {len(sent)}")
        summarize = SummarizationNode(
            token_counter=count_tokens_approximately,
            model=summarizer,
            max_tokens=60,
            max_summary_tokens=20,
            output_messages_key="summarized_messages",
        )

        def answer(state: ModelInput) -> dict[str, Any]:
            return {"messages": [model.invoke(state["summarized_messages"])]}

        graph = StateGraph(State)
        graph.add_node("summarize", summarize)
        graph.add_node("answer", answer, input_schema=ModelInput)
        graph.add_edge(START, "summarize")
        graph.add_edge("summarize", "answer")
        return graph.compile(checkpointer=saver), model

    def run(graph: Any, turns: range) -> None:
        for n in turns:
            graph.invoke({"messages": [HumanMessage(f"message number {n} " * 5)]}, CONFIG)

    control, control_model = build(InMemorySaver())
    run(control, range(6))
    path = tmp_path / "memory.db"
    with MemoryManager(path, embedding=None) as mm:
        run(build(HarombeSaver(mm))[0], range(3))
    with MemoryManager(path, embedding=None) as mm:
        graph, model = build(HarombeSaver(mm))
        run(graph, range(3, 6))
        summary = graph.get_state(CONFIG).values["context"]["running_summary"]
    expected = control.get_state(CONFIG).values["context"]["running_summary"]
    assert isinstance(summary, RunningSummary)
    assert summary.summary == expected.summary
    assert len(summary.summarized_message_ids) == len(expected.summarized_message_ids)
    assert [m.text for m in model.calls[-1]] == [m.text for m in control_model.calls[-1]]


def _memory_agent(saver: Any, store: Any, tools: list[Any]) -> tuple[Any, Any]:
    """An agent whose second turn calls ``tools[1]`` (a search) after ``tools[0]`` stored."""
    from langchain_harombe import RecordingChatModel

    def call(name: str, args: dict[str, Any], n: int) -> dict[str, Any]:
        return {"name": name, "args": args, "id": f"c{n}", "type": "tool_call"}

    script: list[Any] = [
        AIMessage(
            "", tool_calls=[call(tools[0].name, {"content": "likes tea", "action": "create"}, 1)]
        ),
        "ok",
        AIMessage("", tool_calls=[call(tools[1].name, {"query": "tea"}, 2)]),
        "found it",
        "bye",
    ]
    model = RecordingChatModel(responses=script)
    return create_agent(model, tools=tools, checkpointer=saver, store=store), model


def test_langmems_search_results_kept_as_an_artifact_round_trip(tmp_path: Path) -> None:
    """LangMem's search tool with ``response_format="content_and_artifact"`` puts LangGraph's
    own ``SearchItem`` records in a ToolMessage's artifact; HarombeSaver revives them, as
    LangGraph's SqliteSaver does, so the thread goes on."""
    langmem = pytest.importorskip("langmem")
    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.store.base import SearchItem
    from langgraph.store.memory import InMemoryStore

    from langchain_harombe import HarombeStore

    namespace = ("memories", "{langgraph_user_id}")
    tools = [
        langmem.create_manage_memory_tool(namespace),
        langmem.create_search_memory_tool(namespace, response_format="content_and_artifact"),
    ]
    config = {"configurable": {"thread_id": "t1", "user_id": USER, "langgraph_user_id": USER}}
    seen = {}
    with (
        closing(sqlite3.connect(tmp_path / "lg.db", check_same_thread=False)) as conn,
        MemoryManager(tmp_path / "memory.db", embedding=None) as mm,
    ):
        stacks = {
            "control": (SqliteSaver(conn), InMemoryStore()),
            "harombe": (HarombeSaver(mm), HarombeStore(mm)),
        }
        for name, (saver, store) in stacks.items():
            agent, _ = _memory_agent(saver, store, tools)
            for text in ("remember tea", "what do I like?", "thanks"):
                last = agent.invoke({"messages": [HumanMessage(text)]}, config)
            (found,) = agent.get_state(config).values["messages"][6].artifact
            assert isinstance(found, SearchItem)
            # (memory keys and times are made afresh by each run)
            seen[name] = (
                found.value,
                [m.type for m in last["messages"]],
                last["messages"][-1].text,
            )
    assert seen["harombe"] == seen["control"]


class Outcome(enum.Enum):
    """An application type a tool returns as its artifact (not allow-listed)."""

    PAID = "paid"


def test_a_refused_artifact_of_this_process_is_named_not_a_type_error(tmp_path: Path) -> None:
    """A ToolMessage artifact of an application type nobody allowed, read back in the process
    that wrote it (from the saver's memory of the list), raises UnsafeCheckpointError naming
    the type and the row, as a read from the file does; allow-listed, it is revived."""
    from langchain_harombe import RecordingChatModel

    @tool(response_format="content_and_artifact")
    def pay(amount: int) -> tuple[str, Outcome]:
        """Pay."""
        return f"paid {amount}", Outcome.PAID

    call = {"name": "pay", "args": {"amount": 3}, "id": "p1", "type": "tool_call"}
    model = RecordingChatModel(responses=[AIMessage("", tool_calls=[call]), "done", "bye"])
    with MemoryManager(tmp_path / "memory.db", embedding=None) as mm:
        agent = create_agent(model, tools=[pay], checkpointer=HarombeSaver(mm))
        agent.invoke({"messages": [HumanMessage("pay 3")]}, CONFIG)
        with pytest.raises(UnsafeCheckpointError, match="Outcome") as caught:
            agent.invoke({"messages": [HumanMessage("thanks")]}, CONFIG)
        assert caught.value.table == "checkpoint_message_blobs"
        allowed = HarombeSaver(mm).with_allowlist([Outcome])
        values = create_agent(model, tools=[pay], checkpointer=allowed).get_state(CONFIG).values
        assert values["messages"][2].artifact is Outcome.PAID


# the policy itself ----------------------------------------------------------------------------
def test_the_policy_covers_langgraphs_own_safe_types() -> None:
    """The copy a migration uses without LangGraph stays a superset of LangGraph's list."""
    assert set(lg_msgpack.SAFE_MSGPACK_TYPES) <= LANGGRAPH_SAFE_TYPES


@pytest.mark.parametrize(
    ("module", "name", "allowed"),
    [
        ("langchain_core.messages.ai", "AIMessage", True),
        ("langchain_core.documents.base", "Document", True),
        ("langgraph.types", "Interrupt", True),
        ("langchain_core.messages.tool", "ToolCall", False),  # a TypedDict: stored as a dict
        ("langchain_core.load.load", "loads", False),  # a function of a framework module
        ("langchain_core.messages", "AIMessage", False),  # a re-export: never written so
        ("langgraph.errors", "GraphInterrupt", False),  # an exception
        ("langchain_core.messages.base", "BaseMessage", True),
        ("os", "system", False),
        ("builtins", "exec", False),
        ("builtins", "set", True),
        ("langchain_core..x", "y", False),
        ("langmem.short_term.summarization", "RunningSummary", True),  # LangMem's state
    ],
)
def test_the_policy_answers(module: str, name: str, allowed: bool) -> None:
    assert TypePolicy().permits(module, name) is allowed


@pytest.mark.parametrize("bad", ["myapp.Plan", ["myapp.Plan"], [("myapp",)], [("myapp", 3)], 5])
def test_an_allow_list_that_is_not_pairs_or_classes_is_refused(tmp_path: Path, bad: Any) -> None:
    with pytest.raises(InvalidInputError, match="pairs"):
        HarombeSerializer(allowed_msgpack_modules=bad)
    with pytest.raises(InvalidInputError, match="pairs"):
        migrate(tmp_path / "none.db", tmp_path / "to.db", allowed_types=bad)


def test_a_huge_crafted_name_gives_a_short_message() -> None:
    with pytest.raises(UnsafeCheckpointError) as caught:
        HarombeSerializer().loads_typed(("msgpack", _ext(0, "os" * 100_000, "system", "x")))
    assert len(str(caught.value)) < 2_000


def test_a_row_that_cannot_be_decoded_is_refused() -> None:
    with pytest.raises(UnsafeCheckpointError, match="cannot be decoded"):
        check_row("msgpack", b"\xc1\xff", TypePolicy())
    with pytest.raises(UnsafeCheckpointError, match="pickle"):
        check_row("pickle", b"x", TypePolicy())
    check_row("pickle", b"x", TypePolicy(True))
