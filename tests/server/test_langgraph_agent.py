"""A LangGraph agent using the MCP tools of a real ``harombe serve`` through
``langchain-mcp-adapters`` (the docs' example, run): the agent remembers a fact through the
``remember`` tool and finds it again with ``search_memory``, on the key's user only."""

from __future__ import annotations

import pytest
from langchain_core.messages import AIMessage

from tests.server.conftest import Served

adapters = pytest.importorskip("langchain_mcp_adapters.client")
agents = pytest.importorskip("langchain.agents")
from langchain_harombe.testing import RecordingChatModel  # noqa: E402


async def test_agent_remembers_and_recalls_through_mcp(served: Served) -> None:
    client = adapters.MultiServerMCPClient(
        {
            "harombe": {
                "transport": "streamable_http",
                "url": served.url + "/mcp",
                "headers": {"Authorization": f"Bearer {served.ann}"},
            }
        }
    )
    tools = await client.get_tools()
    assert {t.name for t in tools} >= {"remember", "search_memory", "profile"}
    model = RecordingChatModel(
        responses=[
            AIMessage(
                content="",
                tool_calls=[
                    {
                        "name": "remember",
                        "args": {"content": "Ann's locker code is 4512"},
                        "id": "call-1",
                    }
                ],
            ),
            AIMessage(
                content="",
                tool_calls=[
                    {"name": "search_memory", "args": {"query": "locker code"}, "id": "call-2"}
                ],
            ),
            "Your locker code is 4512.",
        ]
    )
    agent = agents.create_agent(model, tools)
    result = await agent.ainvoke({"messages": [{"role": "user", "content": "Remember my code."}]})
    assert result["messages"][-1].content == "Your locker code is 4512."
    found = [m for m in result["messages"] if m.type == "tool" and m.name == "search_memory"]
    assert "4512" in str(found[0].content)
    # the model was given what the tool found
    assert any("4512" in str(m.content) for m in model.calls[-1] if m.type == "tool")
    with served.http(served.bob) as bob:
        assert "4512" not in bob.get("/api/search", params={"q": "locker code"}).text
