"""Programs that never close their memory exit cleanly, with embeddings pending.

Scripts, notebooks and CI jobs rarely call ``close()``. The background worker is a daemon
thread that may be inside ONNX Runtime, the tokenizers or Chroma when the interpreter shuts
down; cut off there it aborted the process ("terminate called without an active
exception", exit code 134). Each program below saves long messages and ends at once, so
the worker is busy at exit; it runs many times (``HAROMBE_EXIT_RUNS``, default 10) and every
run must exit 0 with nothing native on stderr. The messages left pending are embedded at the
next open.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from harombe_core import MemoryManager

pytestmark = pytest.mark.slow

RUNS = int(os.environ.get("HAROMBE_EXIT_RUNS", "10"))

#: What a native abort or an interpreter crash prints.
NATIVE_ERRORS = ("terminate called", "Fatal Python error", "Aborted", "Segmentation fault")

#: Long, varied texts: batches of them keep the model busy while the program ends.
TEXTS = (
    'texts = [f"Message {i}: planning the trip to Lisbon in May, the trams, the tiles. " '
    '+ "And the long walk along the river to Belem. " * (1 + i % 12) for i in range(120)]'
)


def _run(
    script: str, tmp_path: Path, *, stdin: str | None = None, args: list[str] | None = None
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    command = [sys.executable, *(args or ["-c", textwrap.dedent(script)])]
    return subprocess.run(
        command, capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path, input=stdin
    )


def _check_runs(script: str, tmp_path: Path, **kwargs: object) -> None:
    for run in range(RUNS):
        result = _run(script, tmp_path, **kwargs)  # type: ignore[arg-type]
        native = [text for text in NATIVE_ERRORS if text in result.stderr]
        context = f"run {run + 1} of {RUNS}:\n{result.stderr[-3000:]}"
        assert result.returncode == 0, context
        assert not native, context


def _needs(module: str) -> None:
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not installed")


def test_a_manager_never_closed_exits_cleanly_and_its_backlog_waits(tmp_path: Path) -> None:
    db = tmp_path / "memory.db"
    script = f"""
        from harombe_core import MemoryManager, Message
        {TEXTS}
        mm = MemoryManager({str(db)!r})
        sid = mm.create_session(user_id="ann")
        mm.save_messages(sid, [Message(role="user", content=t) for t in texts])
        """
    _check_runs(script, tmp_path)
    with MemoryManager(str(db)) as mm:  # pending messages are embedded at the next open
        mm.flush()
        assert mm.search_similar("tiles and trams in Lisbon", top_k=1)


def test_a_worker_mid_batch_finishes_it_before_the_interpreter_finalises(
    tmp_path: Path,
) -> None:
    """Deterministic: the embedder holds its batch until the background worker is told to
    stop (which only the exit hook does here), then takes a moment to finish; the batch must
    complete (the exit waited for it) rather than be cut off mid-call."""
    marker = tmp_path / "finished"
    script = f"""
        import threading, time
        from harombe_core import MemoryManager, Message
        from harombe_core.testing import FakeEmbedder
        from harombe_core import folding

        started = threading.Event()

        class Slow(FakeEmbedder):
            def embed(self, texts):
                if threading.current_thread().name != "harombe-worker":
                    return super().embed(texts)
                started.set()
                while not folding._stopping:  # set by the exit hook alone
                    time.sleep(0.01)
                time.sleep(0.5)
                vectors = super().embed(texts)
                open({str(marker)!r}, "a").write("done\\n")
                return vectors

        mm = MemoryManager({str(tmp_path / "m.db")!r}, embedding=Slow())
        sid = mm.create_session()
        mm.save_message(sid, Message(role="user", content="the batch in hand at exit"))
        assert started.wait(60)
        """
    result = _run(script, tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert marker.read_text() == "done\n"


@pytest.mark.parametrize("cache", ["built", "empty"])
def test_the_onnx_model_loading_on_the_worker_at_exit_is_clean(
    tmp_path: Path, cache: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``embedding="onnx"`` loads the model on the worker: exit while it loads, or while it
    is still being built into an empty cache (fewer runs: each builds the model)."""
    _needs("onnxruntime")
    script = f"""
        from harombe_core import MemoryManager, Message
        mm = MemoryManager({str(tmp_path / "m.db")!r}, embedding="onnx")
        sid = mm.create_session()
        mm.save_message(sid, Message(role="user", content="loading the model at exit"))
        """
    if cache == "built":
        _check_runs(script, tmp_path)
        return
    for run in range(2):
        monkeypatch.setenv("HAROMBE_CACHE_DIR", str(tmp_path / f"cache{run}"))
        result = _run(script, tmp_path)
        assert result.returncode == 0, result.stderr[-3000:]
        assert not [text for text in NATIVE_ERRORS if text in result.stderr], result.stderr


def test_langchain_history_checkpointer_and_middleware_never_closed(tmp_path: Path) -> None:
    _needs("langchain")
    script = f"""
        from langchain.agents import create_agent
        from langchain_core.language_models.fake_chat_models import FakeListChatModel
        from langchain_core.messages import HumanMessage
        from harombe_core import MemoryManager
        from langchain_harombe import (
            HarombeChatMessageHistory, HarombeMemoryMiddleware, HarombeSaver)
        {TEXTS}
        path = {str(tmp_path / "lc.db")!r}
        history = HarombeChatMessageHistory("notes", storage_path=path, user_id="ann")
        history.add_messages([HumanMessage(t) for t in texts[:60]])
        mm = MemoryManager(path)
        agent = create_agent(
            FakeListChatModel(responses=["Noted, the trams and the tiles."] * 4),
            tools=[],
            checkpointer=HarombeSaver(mm),
            middleware=[HarombeMemoryMiddleware(mm, recall_tokens=200)],
        )
        config = {{"configurable": {{"thread_id": "trip", "user_id": "ann"}}}}
        for text in texts[60:62]:
            agent.invoke({{"messages": [HumanMessage(text)]}}, config)
        """
    _check_runs(script, tmp_path)


def test_llamaindex_chat_engine_and_agent_never_closed(tmp_path: Path) -> None:
    _needs("llama_index.core")
    script = f"""
        import asyncio
        from llama_index.core.agent.workflow import FunctionAgent
        from llama_index.core.chat_engine import SimpleChatEngine
        from llama_index.core.llms import MockFunctionCallingLLM, MockLLM
        from llamaindex_harombe import HarombeMemory
        {TEXTS}
        path = {str(tmp_path / "li.db")!r}
        memory = HarombeMemory.from_defaults(session_id="trip", user_id="ann",
                                             storage_path=path)
        engine = SimpleChatEngine.from_defaults(llm=MockLLM(max_tokens=20), memory=memory)
        for text in texts[:20]:
            engine.chat(text)

        def add(a: int, b: int) -> int:
            '''Add two numbers.'''
            return a + b

        agent = FunctionAgent(tools=[add], llm=MockFunctionCallingLLM(max_tokens=10))
        agent_memory = HarombeMemory.from_defaults(session_id="agent", user_id="ann",
                                                   storage_path=path)

        async def main():
            await agent.run(texts[30], memory=agent_memory)

        asyncio.run(main())
        """
    _check_runs(script, tmp_path)


def test_harombe_chat_ended_by_end_of_input_exits_cleanly(tmp_path: Path) -> None:
    _needs("langchain")
    lines = "".join(
        f"I am planning the trip to Lisbon in May, day {i}, the trams and the tiles.\n"
        for i in range(8)
    )
    args = ["-m", "harombe_core.cli", "chat", "--db", str(tmp_path / "chat.db"), "--user", "ann"]
    _check_runs("", tmp_path, stdin=lines, args=args)
