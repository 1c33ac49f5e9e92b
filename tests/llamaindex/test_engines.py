"""LlamaIndex's chat engines and agents, unmodified, on HarombeMemory with mock models.

Every engine runs sync and async, streaming and not. The restart tests run each turn in a new
Python process: the second process sees the first one's history, keeps the window inside the
token limit, and the model receives what was recalled from an earlier session.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from llamaindex_harombe import HarombeMemory
from tests.llamaindex.engine_turn import ENGINES, MODES, in_new_process, run_turn

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = Path(__file__).with_name("engine_turn.py")


def seed_past_session(db: str, user_id: str = "ann") -> None:
    """An earlier conversation whose fact only recall can bring back."""
    memory = HarombeMemory.from_defaults(storage_path=db, session_id="earlier", user_id=user_id)
    from llama_index.core.llms import ChatMessage

    memory.put_messages(
        [
            ChatMessage(role="user", content="Remember that my boat is named Marigold."),
            ChatMessage(role="assistant", content="Noted: your boat is Marigold."),
        ]
    )
    memory.close()


def sent_text(result: dict[str, Any]) -> str:
    return "\n".join(content for _role, content in result["sent"])


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("engine", ENGINES)
async def test_engine_keeps_history_and_gets_recall(db: str, engine: str, mode: str) -> None:
    seed_past_session(db)
    args = {"db": db, "engine": engine, "mode": mode, "session_id": "now", "user_id": "ann"}
    first = await run_turn(message="What is the name of my boat?", **args)
    second = await run_turn(message="And what colour is the boat?", **args)
    assert first["reply"]
    users = [c for r, c in second["history"] if r == "user"]
    assert users == ["What is the name of my boat?", "And what colour is the boat?"]
    assert second["history"][-1][0] == "assistant"
    if engine in ("function_agent", "agent_workflow"):
        # the tool call and its result were stored with the turn
        roles = [r for r, _ in second["history"]]
        assert roles.count("tool") == 2
        assert second["reply"] == "The forecast says sunny in Paris."
    # the earlier session's fact reached the model
    assert "Marigold" in sent_text(second)
    # the model saw the first turn of this session too
    assert "What is the name of my boat?" in sent_text(second)
    assert second["window_tokens"] <= 400


async def test_no_recall_across_users(db: str) -> None:
    seed_past_session(db, user_id="someone-else")
    result = await run_turn(
        db=db,
        engine="simple",
        mode="chat",
        message="What is the name of my boat?",
        session_id="now",
        user_id="ann",
    )
    assert "Marigold" not in sent_text(result)


def turn_in_new_process(**args: Any) -> dict[str, Any]:
    return in_new_process(SCRIPT, args)


@pytest.mark.parametrize(
    ("engine", "mode", "embedding"),
    [("simple", "stream", "default"), ("function_agent", "achat", None)],
)
async def test_conversation_survives_a_restart(
    db: str, engine: str, mode: str, embedding: str | None
) -> None:
    # semantic memory by default (the vector index beside the database is reopened too), and
    # keyword search only
    seed_past_session(db)
    limit = 100
    args = {
        "db": db,
        "engine": engine,
        "mode": mode,
        "session_id": "now",
        "user_id": "ann",
        "token_limit": limit,
        "embedding": embedding,
    }
    questions = [f"Question {i}: what is the name of my boat again?" for i in range(4)]
    for question in questions[:-1]:
        await run_turn(message=question, **args)  # each turn opens and closes its own store
    last = turn_in_new_process(message=questions[-1], **args)
    # the history written by this process is there in the new one
    assert [c for r, c in last["history"] if r == "user"] == questions
    # the window respected the token limit even though the history outgrew it
    assert last["window_tokens"] <= limit
    assert questions[0] not in sent_text(last)
    assert questions[-1] in sent_text(last)
    # recalled context from the earlier session reached the model
    assert "Marigold" in sent_text(last)


async def test_serialised_workflow_context_restores_its_memory(db: str) -> None:
    from llama_index.core.agent.workflow import FunctionAgent
    from llama_index.core.llms.mock import MockFunctionCallingLLM
    from llama_index.core.tools import FunctionTool
    from workflows import Context
    from workflows.context.serializers import JsonSerializer

    from tests.llamaindex.engine_turn import agent_brain, get_weather

    agent = FunctionAgent(
        tools=[FunctionTool.from_defaults(fn=get_weather)],
        llm=MockFunctionCallingLLM(response_generator=agent_brain),
    )
    memory = HarombeMemory.from_defaults(storage_path=db, session_id="wf", token_limit=500)
    ctx = Context(agent)
    await agent.run(user_msg="weather?", memory=memory, ctx=ctx)
    data = json.loads(json.dumps(ctx.to_dict(serializer=JsonSerializer())))
    memory.close()

    restored = Context.from_dict(agent, data, serializer=JsonSerializer())
    again = await restored.store.get("memory")
    assert isinstance(again, HarombeMemory)
    assert (again.storage_path, again.session_id, again.token_limit) == (db, "wf", 500)
    roles = [m.role.value for m in await again.aget_all()]
    assert roles == ["user", "assistant", "tool", "assistant"]
    result = await agent.run(user_msg="and tomorrow?", ctx=restored)
    assert str(result) == "The forecast says sunny in Paris."
    assert [m.content for m in await again.aget_all() if m.role.value == "user"] == [
        "weather?",
        "and tomorrow?",
    ]
    again.close()
