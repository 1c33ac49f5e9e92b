"""The MCP server through the official SDK's own clients: streamable HTTP at ``/mcp`` of a real
``harombe serve``, and ``harombe mcp`` over stdio; typed tool schemas, scope per key."""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest

from harombe_core.server.mcp_tools import TOOLS
from tests.server.conftest import Served

mcp = pytest.importorskip("mcp")
from mcp import ClientSession  # noqa: E402
from mcp.client.stdio import StdioServerParameters, stdio_client  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402


@asynccontextmanager
async def http_session(served: Served, key: str | None) -> AsyncIterator[ClientSession]:
    """An initialised MCP session with ``/mcp`` of ``served``, sending ``key``."""
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    async with (
        httpx.AsyncClient(headers=headers, timeout=30) as client,
        streamable_http_client(served.url + "/mcp", http_client=client) as streams,
        ClientSession(streams[0], streams[1]) as session,
    ):
        await session.initialize()
        yield session


def result_json(result: Any) -> Any:
    """A tool call's result as JSON (its structured content, else its text)."""
    assert not result.isError, result.content
    if result.structuredContent is not None:
        content = result.structuredContent
        return content.get("result", content) if set(content) == {"result"} else content
    return json.loads(result.content[0].text)


async def test_http_tools_have_typed_schemas_and_are_scoped(served: Served) -> None:
    async with http_session(served, served.ann) as session:
        tools = {t.name: t for t in (await session.list_tools()).tools}
        assert set(tools) == set(TOOLS)
        schema = tools["remember"].inputSchema
        assert schema["required"] == ["content"]
        assert schema["properties"]["role"]["enum"] == ["user", "assistant"]
        assert "ctx" not in schema["properties"]
        assert tools["search_memory"].inputSchema["properties"]["top_k"]["type"] == "integer"

        kept = result_json(
            await session.call_tool("remember", {"content": "Ann's cat is called Miso."})
        )
        sid = kept["session_id"]
        hits = result_json(await session.call_tool("search_memory", {"query": "cat Miso"}))
        assert hits[0]["message"]["content"] == "Ann's cat is called Miso."
        context = result_json(await session.call_tool("get_context", {"session_id": sid}))
        assert context["messages"][-1]["content"] == "Ann's cat is called Miso."
        sessions = result_json(await session.call_tool("list_sessions", {}))
        assert sid in [s["id"] for s in sessions]
        profile = result_json(await session.call_tool("profile", {}))
        assert profile["user_id"] == "ann"

    async with http_session(served, served.bob) as session:
        assert result_json(await session.call_tool("search_memory", {"query": "Miso"})) == []
        refused = await session.call_tool("forget", {"session_id": sid})
        assert refused.isError
        assert "SessionNotFoundError" in refused.content[0].text  # as a missing one

    async with http_session(served, served.ann) as session:
        assert result_json(await session.call_tool("forget", {"session_id": sid})) == {
            "deleted": True,
            "erased_from_disk": True,
        }


async def test_stdio_serves_the_chosen_user(fresh_db: str) -> None:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "harombe_core.cli", "mcp", "--db", fresh_db, "--user", "ann"],
    )
    async with stdio_client(params) as streams, ClientSession(streams[0], streams[1]) as session:
        await session.initialize()
        names = {t.name for t in (await session.list_tools()).tools}
        assert names == set(TOOLS)
        kept = result_json(await session.call_tool("remember", {"content": "stdio memory"}))
        hits = result_json(await session.call_tool("search_memory", {"query": "stdio"}))
        assert hits[0]["session_id"] == kept["session_id"]
        assert result_json(await session.call_tool("profile", {}))["user_id"] == "ann"


async def test_stdio_with_embedding_finds_the_applications_memory_by_meaning(
    fresh_db: str,
) -> None:
    """An assistant sharing the application's memory (Claude Desktop's config with
    ``--embedding default``) searches by meaning the vectors the application's manager made;
    without the option it finds by keyword only, so the same question finds nothing."""
    from harombe_core import MemoryManager, Message

    with MemoryManager(fresh_db) as mm:  # the application: the bundled model, vectors in the db
        sid = mm.create_session(user_id="ann")
        mm.save_message(sid, Message(role="user", content="I moved to Lisbon last spring."))
        mm.flush()
    found = {}
    for extra in ([], ["--embedding", "default"]):
        params = StdioServerParameters(
            command=sys.executable,
            args=["-m", "harombe_core.cli", "mcp", "--db", fresh_db, "--user", "ann", *extra],
        )
        async with (
            stdio_client(params) as streams,
            ClientSession(streams[0], streams[1]) as session,
        ):
            await session.initialize()
            query = {"query": "which city is home now"}
            found[bool(extra)] = result_json(await session.call_tool("search_memory", query))
    assert found[False] == []
    (hit,) = found[True]
    assert hit["message"]["content"] == "I moved to Lisbon last spring."
    assert hit["vector_score"] is not None
    assert hit["keyword_score"] is None


def test_json_nested_too_deeply_is_a_parse_error_not_a_500(served: Served) -> None:
    headers = {
        "Authorization": f"Bearer {served.ann}",
        "content-type": "application/json",
        "accept": "application/json, text/event-stream",
    }
    deep = b"[" * 100_000 + b"]" * 100_000
    answer = httpx.post(served.url + "/mcp", content=deep, headers=headers, timeout=30)
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["code"] == -32700
    broken = httpx.post(served.url + "/mcp", content=b"{", headers=headers, timeout=30)
    assert broken.status_code == 400
    assert broken.json()["error"]["code"] == -32700


async def test_a_client_gone_mid_body_is_not_logged_as_a_server_error(
    fresh_db: str, caplog: pytest.LogCaptureFixture
) -> None:
    """An MCP client that disconnects while sending its request (a timeout, a closed laptop)
    made the SDK log a 40-line traceback and an "exception from stream" for each one; the
    request now just ends: nothing is answered (nobody is there) and nothing is logged."""
    from harombe_core.manager import MemoryManager
    from harombe_core.server.auth import ServerState
    from harombe_core.server.keys import Scope
    from harombe_core.server.mcp_tools import McpEndpoint, build_mcp

    manager = MemoryManager(fresh_db)
    endpoint = McpEndpoint(build_mcp(manager), ServerState(manager, Scope("ann")))
    arriving = [
        {"type": "http.request", "body": b'{"jsonrpc": "2.0", "id": 1, ', "more_body": True},
        {"type": "http.disconnect"},
    ]
    sent: list[Any] = []

    async def receive() -> Any:
        return arriving.pop(0) if arriving else {"type": "http.disconnect"}

    async def send(message: Any) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "method": "POST",
        "path": "/mcp",
        "headers": [
            (b"host", b"127.0.0.1:8765"),
            (b"content-type", b"application/json"),
            (b"accept", b"application/json, text/event-stream"),
            (b"content-length", b"2000"),
        ],
    }
    try:
        with caplog.at_level("ERROR"):
            async with endpoint.running():
                await endpoint(scope, receive, send)
    finally:
        manager.close()
    assert sent == []
    assert [r.getMessage() for r in caplog.records if r.levelname == "ERROR"] == []


async def test_remember_refuses_an_empty_memory(served: Served) -> None:
    """An assistant calling ``remember`` with no text got success and a blank message kept in
    the user's memory; it now gets the typed error saying what to pass, and nothing is kept."""
    sid = "ann-blank-remember"
    async with http_session(served, served.ann) as session:
        for blank in ("", "   \n\t"):
            refused = await session.call_tool("remember", {"content": blank, "session_id": sid})
            assert refused.isError
            assert "InvalidInputError" in refused.content[0].text
            assert "content" in refused.content[0].text
        result_json(await session.call_tool("remember", {"content": "kept", "session_id": sid}))
    with served.http(served.ann) as http:
        assert [m["content"] for m in http.get(f"/api/sessions/{sid}/messages").json()] == ["kept"]


def test_get_is_405_not_a_stream_held_open(served: Served) -> None:
    """A stateless server pushes nothing, yet a GET of ``/mcp`` was held open as an empty
    event stream for as long as the client kept it (200 of them held 200 descriptors); the
    spec's answer for a server without a stream of its own is 405, at once."""
    with served.http(served.ann) as http:
        answer = http.get("/mcp", headers={"Accept": "text/event-stream"}, timeout=10)
        assert answer.status_code == 405
        assert answer.json()["error"] == "HTTPError"
        assert http.get("/mcp", timeout=10).status_code == 405
