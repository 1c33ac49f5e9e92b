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
        assert hits[0]["content"] == "Ann's cat is called Miso."
        context = result_json(await session.call_tool("get_context", {"session_id": sid}))
        assert context["messages"][-1]["content"] == "Ann's cat is called Miso."
        sessions = result_json(await session.call_tool("list_sessions", {}))
        assert sid in [s["id"] for s in sessions]
        profile = result_json(await session.call_tool("profile", {}))
        assert profile["user_id"] == "ann"

    async with http_session(served, served.bob) as session:
        found = result_json(await session.call_tool("search_memory", {"query": "Miso"}))
        assert sid not in {hit["session_id"] for hit in found}  # by meaning: bob's own only
        assert "Miso" not in json.dumps(found)
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


async def test_stdio_finds_the_applications_memory_by_meaning_by_default(
    fresh_db: str,
) -> None:
    """An assistant sharing the application's memory (Claude Desktop's config) searches by
    meaning the vectors the application's manager made, with no option: the bundled model is
    installed here. ``--embedding none`` searches by keyword only, so the same question finds
    nothing."""
    from harombe_core import MemoryManager, Message

    with MemoryManager(fresh_db) as mm:  # the application: the bundled model, vectors in the db
        sid = mm.create_session(user_id="ann")
        mm.save_message(sid, Message(role="user", content="I moved to Lisbon last spring."))
        mm.flush()
    found = {}
    for extra in ([], ["--embedding", "none"]):
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
            found[not extra] = result_json(await session.call_tool("search_memory", query))
    assert found[False] == []
    (hit,) = found[True]
    assert hit["content"] == "I moved to Lisbon last spring."
    assert hit["vector_score"] is not None
    assert "keyword_score" not in hit  # no keyword of the question is in it


def test_a_server_keeps_the_model_a_database_was_indexed_with(
    fresh_db: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Unset, ``--embedding`` is the bundled model, except on a database whose vectors another
    model made: then the server searches by keyword and says which model to pass, rather than
    refusing to start where it started before. ``none`` is keyword search on purpose."""
    from harombe_core import MemoryManager, Message
    from harombe_core.server.cli import server_embedding
    from harombe_core.testing import FakeEmbedder

    assert server_embedding(None, fresh_db) == "default"
    assert "searching by meaning" in capsys.readouterr().err
    assert server_embedding("none", fresh_db) is None
    assert server_embedding("default", fresh_db) == "default"
    with MemoryManager(fresh_db, embedding=FakeEmbedder()) as mm:
        mm.save_message(mm.create_session(), Message(role="user", content="indexed"))
        mm.flush()
    assert server_embedding(None, fresh_db) is None
    said = " ".join(capsys.readouterr().err.split())
    for needed in ("keyword only", FakeEmbedder().name, "--embedding"):
        assert needed in said


async def test_tool_answers_are_brief_for_an_assistant(fresh_db: str) -> None:
    """An assistant pays for every character of a tool's answer: a hit and a context message
    carry the text, role, where and when, and the score, not the metadata a framework stored
    (LangChain's ``lc`` ids, LangGraph's message hashes), token counts or empty fields."""
    from harombe_core import MemoryManager, Message

    with MemoryManager(fresh_db, embedding=None) as mm:
        sid = mm.create_session(user_id="ann")
        stored = {"lc": {"type": "human", "id": "7aaea2e9"}, "langgraph_message": "c9def181"}
        mm.save_message(sid, Message(role="user", content="My cat is Miso.", metadata=stored))
    keyword = ["--embedding", "none"]  # the keyword evidence alone, whatever the model finds
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "harombe_core.cli", "mcp", "--db", fresh_db, "--user", "ann", *keyword],
    )
    async with stdio_client(params) as streams, ClientSession(streams[0], streams[1]) as session:
        await session.initialize()
        found = await session.call_tool("search_memory", {"query": "cat Miso"})
        context = await session.call_tool("get_context", {"session_id": sid})
    (hit,) = result_json(found)
    kept = ("session_id", "message_id", "role", "content", "created_at", "score", "keyword_score")
    assert set(hit) == set(kept)
    assert (hit["session_id"], hit["role"], hit["content"]) == (sid, "user", "My cat is Miso.")
    assert hit["score"] == round(hit["score"], 3)
    texts = " ".join(c.text for c in found.content) + " ".join(c.text for c in context.content)
    assert "lc" not in texts.replace('"', " ").split()
    for left_out in ("7aaea2e9", "c9def181", "token_count", "null"):
        assert left_out not in texts
    assert result_json(context)["messages"] == [{"role": "user", "content": "My cat is Miso."}]


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


async def test_min_similarity_leaves_out_weak_matches_everywhere_the_server_searches(
    fresh_db: str,
) -> None:
    """Search by meaning returns the nearest messages however unrelated; ``min_similarity``
    (the MCP tool, the JSON API, both clients) leaves out those whose cosine is below it, so an
    assistant can tell "nothing remembered" from "the least unrelated things". (The memory is
    the application's, embedded before the server starts, so every message has its vector.)"""
    from harombe_core import MemoryManager, Message
    from harombe_core.server import AsyncHarombeClient, HarombeClient
    from tests.server.conftest import serve

    dentist = "Ann's dentist appointment moved to Thursday at nine."
    with MemoryManager(fresh_db) as mm:
        sid = mm.create_session(user_id="ann")
        mm.save_messages(
            sid,
            [
                Message(role="user", content=dentist),
                Message(role="user", content="We painted the kitchen green on Sunday."),
            ],
        )
        mm.flush()
    unrelated = "quantum chromodynamics lecture notes"
    served = serve(fresh_db)
    try:
        async with http_session(served, served.ann) as session:
            nearest = result_json(await session.call_tool("search_memory", {"query": unrelated}))
            assert nearest  # the nearest, however weak
            assert all(hit["vector_score"] < 0.4 for hit in nearest)
            floor = {"query": unrelated, "min_similarity": 0.4}
            assert result_json(await session.call_tool("search_memory", floor)) == []
            asked = {"query": "when is my dentist appointment", "min_similarity": 0.4}
            hits = result_json(await session.call_tool("search_memory", asked))
            assert [hit["content"] for hit in hits] == [dentist]
            refused = await session.call_tool("search_memory", {"query": "x", "min_similarity": 3})
            assert refused.isError
            assert "InvalidInputError" in refused.content[0].text

        with served.http(served.ann) as http:
            params: dict[str, Any] = {"q": unrelated, "min_similarity": 0.4}
            assert http.get("/api/search", params=params).json() == []
            params["q"] = "when is my dentist appointment"
            found = http.get("/api/search", params=params).json()
            assert [hit["message"]["content"] for hit in found] == [dentist]
            bad = http.get("/api/search", params={"q": "x", "min_similarity": 3})
            assert bad.status_code == 422
        with HarombeClient(served.url, api_key=served.ann) as client:
            assert client.search(unrelated, min_similarity=0.4) == []
            assert client.search(unrelated)  # the nearest again
        async with AsyncHarombeClient(served.url, api_key=served.ann) as aclient:
            found = await aclient.asearch("when is my dentist appointment", min_similarity=0.4)
            assert [hit["message"]["content"] for hit in found] == [dentist]
    finally:
        served.server.stop()
