"""Isolation, generated from the app's own route table and MCP tool list: for every route and
every tool, user B's key gets nothing of user A's memory and changes none of it, and a request
without a key gets nothing at all. A new route or tool is covered the day it is added; a route
outside FastAPI's dependency system must be on the public list below, or this test fails."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from fastapi.routing import APIRoute
from pydantic_core import PydanticUndefined
from starlette.routing import Route

from harombe_core.server.api import create_app
from harombe_core.server.auth import current_scope
from harombe_core.server.mcp_tools import TOOLS
from tests.server.conftest import Served
from tests.server.test_mcp import http_session

#: Routes that run without a key: documentation and how a browser signs in. None reads memory.
PUBLIC = {"/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc", "/login", "/logout"}

MARKER = f"SECRET{uuid.uuid4().hex}"
A_SESSION = f"ann-{uuid.uuid4().hex[:8]}"
#: The id of ann's fact holding the marker, once ``ann_memory`` has kept it.
A_FACT: dict[str, int] = {}


@pytest.fixture(scope="module")
def routes(served: Served) -> Iterator[list[Any]]:
    """The app's route table, from an app built on the same database."""
    app = create_app(served.db)
    try:
        yield list(app.routes)
    finally:
        app.state.harombe.manager.close()


@pytest.fixture(scope="module")
def ann_memory(served: Served) -> dict[str, Any]:
    """A session of ann's holding the marker everywhere it can be, and how it looks."""
    with served.http(served.ann) as http:
        made = http.post(
            "/api/sessions",
            json={
                "session_id": A_SESSION,
                "system_prompt": f"prompt {MARKER}",
                "metadata": {"note": MARKER},
            },
        )
        assert made.status_code == 201
        body = {
            "messages": [
                {"role": "user", "content": f"my secret is {MARKER}", "metadata": {"m": MARKER}},
                {"role": "assistant", "content": f"noted {MARKER}"},
            ]
        }
        assert http.post(f"/api/sessions/{A_SESSION}/messages", json=body).status_code == 201
        assert http.post(f"/api/sessions/{A_SESSION}/summary").status_code == 200
        for kind in ("fact", "task"):
            fact = http.post("/api/facts", json={"text": f"{kind} {MARKER}", "kind": kind})
            assert fact.status_code == 201, fact.text
            A_FACT[kind] = fact.json()["id"]
        return _snapshot(http)


def _snapshot(http: httpx.Client) -> dict[str, Any]:
    session = http.get(f"/api/sessions/{A_SESSION}").json()
    session.pop("updated_at", None)
    return {
        "session": session,
        "messages": http.get(f"/api/sessions/{A_SESSION}/messages").json(),
        "facts": http.get("/api/facts", params={"include_history": True}).json(),
    }


def _value(name: str, annotation: Any, default: Any = None) -> Any:
    """A value for a parameter: aimed at ann's memory where the name says what it is, else its
    default, else one of its type."""
    aimed = {
        "session_id": A_SESSION,
        "user_id": "ann",
        "q": "secret noted",
        "query": "secret noted",
    }
    if name in aimed:
        return aimed[name]
    if name == "fact_id":  # the task: every fact route and tool applies to it
        return A_FACT["task"]
    if default is not None and default is not PydanticUndefined:
        return default
    return 1 if annotation in (int, int | None) else "x"


def _requests(route: APIRoute) -> Iterator[tuple[str, str, dict[str, Any], Any]]:
    """Each way B could aim ``route`` at A: naming ann, and naming nobody (B's own scope)."""
    path = route.path
    for param in route.dependant.path_params:
        for written in ("{" + param.name + "}", "{" + param.name + ":path}"):
            path = path.replace(written, str(_value(param.name, str)))
        assert "{" not in path, f"{route.path}: a path parameter this test cannot fill"
    body = None
    if route.body_field is not None:
        schema = route.body_field.field_info.annotation.model_json_schema()  # type: ignore[union-attr]
        assert schema.get("examples"), f"{route.path}: give its body model an example"
        body = dict(schema["examples"][0])
    for name_ann in (True, False):
        params = {
            p.name: _value(p.name, p.field_info.annotation, p.field_info.default)
            for p in route.dependant.query_params
            if name_ann or p.name != "user_id"
        }
        payload = None if body is None else {**body, **({"user_id": "ann"} if name_ann else {})}
        for method in sorted(route.methods):
            yield method, path, params, payload


def _takes_the_key_dependency(route: APIRoute) -> bool:
    stack = list(route.dependant.dependencies)
    while stack:
        dep = stack.pop()
        if dep.call is current_scope:
            return True
        stack.extend(dep.dependencies)
    return False


def test_every_route_is_keyed_or_public(routes: list[Any]) -> None:
    api_routes = [r for r in routes if isinstance(r, APIRoute)]
    assert len(api_routes) >= 18
    for route in api_routes:
        assert _takes_the_key_dependency(route), route.path
    others = {r.path for r in routes if isinstance(r, Route) and not isinstance(r, APIRoute)}
    assert others - {"/mcp"} <= PUBLIC, others - PUBLIC


def test_no_route_gives_bob_anything_of_anns(
    served: Served, routes: list[Any], ann_memory: dict[str, Any]
) -> None:
    checked = 0
    with served.http(served.bob) as bob, served.http(None) as nobody:
        for route in routes:
            if not isinstance(route, APIRoute):
                continue
            for method, path, params, body in _requests(route):
                for who, http in (("bob", bob), ("no key", nobody)):
                    answer = http.request(
                        method, path, params=params, json=body, headers={"accept": "text/html"}
                    )
                    where = f"{who}: {method} {path} {params} {body} -> {answer.status_code}"
                    assert MARKER not in answer.text, where
                    assert "SECRET" not in answer.text, where
                    if who == "no key":
                        assert answer.status_code in (401, 303), where
                    checked += 1
    assert checked >= 70
    with served.http(served.ann) as http:
        assert _snapshot(http) == ann_memory


def test_the_same_reads_do_reach_anns_memory_with_her_key(
    served: Served, routes: list[Any], ann_memory: dict[str, Any]
) -> None:
    """The control: the requests above are aimed right, so with ann's own key the reads
    (GET) show her memory; B's getting nothing is isolation, not a miss."""
    revealing = set()
    with served.http(served.ann) as ann:
        for route in routes:
            if not isinstance(route, APIRoute) or "GET" not in route.methods:
                continue
            for method, path, params, _ in _requests(route):
                answer = ann.request(method, path, params=params, headers={"accept": "text/html"})
                if MARKER in answer.text:
                    revealing.add(route.path)
    assert len(revealing) >= 10, revealing


async def test_no_tool_gives_bob_anything_of_anns(
    served: Served, ann_memory: dict[str, Any]
) -> None:
    async with http_session(served, served.bob) as session:
        tools = (await session.list_tools()).tools
        assert {t.name for t in tools} == set(TOOLS)
        for tool in tools:
            props = tool.inputSchema.get("properties", {})
            arguments = {
                name: _value(name, int if spec.get("type") == "integer" else str)
                for name, spec in props.items()
            }
            result = await session.call_tool(tool.name, arguments)
            text = " ".join(getattr(c, "text", "") for c in result.content)
            assert MARKER not in text, (tool.name, text)
            assert MARKER not in str(result.structuredContent), tool.name
    with served.http(served.ann) as http:
        assert _snapshot(http) == ann_memory


async def test_nobody_can_take_another_users_conversation_before_they_start_it(
    served: Served,
) -> None:
    """``bob:NAME`` is the id of bob's conversation NAME (his MCP memory is ``bob:memory``):
    ann's key cannot create it first, by any route or tool, so bob can always use it."""
    name = f"notes-{uuid.uuid4().hex[:8]}"
    taken = f"bob:{name}"
    with served.http(served.ann) as ann:
        made = ann.post("/api/sessions", json={"session_id": taken})
        assert made.status_code == 409, made.text
        assert made.json()["error"] == "SessionIdUnavailableError"
        assert f"'ann:{name}'" in made.json()["detail"]
        appended = ann.post(
            f"/api/sessions/{taken}/messages", json={"messages": [{"role": "user", "content": "x"}]}
        )
        assert appended.status_code == 409, appended.text
        assert ann.post("/api/sessions", json={"session_id": f"ann:{name}"}).status_code == 201
    async with http_session(served, served.ann) as session:
        refused = await session.call_tool("remember", {"content": "x", "session_id": taken})
        assert refused.isError
        assert "SessionIdUnavailableError" in refused.content[0].text
    with served.http(served.bob) as bob:
        body = {"messages": [{"role": "user", "content": "mine"}]}
        assert bob.post(f"/api/sessions/{taken}/messages", json=body).status_code == 201
    with served.http(served.ann) as ann:
        # once bob's, it is refused to ann exactly as before he started it
        appended = ann.post(f"/api/sessions/{taken}/messages", json=body)
        assert (appended.status_code, appended.content) == (made.status_code, made.content)
