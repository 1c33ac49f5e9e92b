"""No existence oracle: a user key cannot tell another user's session (or user) from one that
does not exist. Every read, change or deletion of ann's session by bob's key answers byte for
byte (status and body) as the same id does once it is gone, over the JSON API, the inspector's
pages and the MCP tools; every refused create answers one 409 that never says whose the id
is. An admin key keeps the precise answers."""

from __future__ import annotations

import re
import uuid
from typing import Any

import httpx

from tests.server.conftest import Served
from tests.server.test_mcp import http_session

#: Each way bob's key can aim at a session id: (method, path, query, JSON body, accept).
PROBES: list[tuple[str, str, dict[str, Any], Any, str]] = [
    ("GET", "/api/sessions/{id}", {}, None, "application/json"),
    ("GET", "/api/sessions/{id}/messages", {"limit": 5}, None, "application/json"),
    ("GET", "/api/sessions/{id}/window", {"max_tokens": 100}, None, "application/json"),
    ("GET", "/api/sessions/{id}/context", {}, None, "application/json"),
    ("GET", "/api/sessions/{id}/context", {"full": "true", "query": "x"}, None, "*/*"),
    ("POST", "/api/sessions/{id}/summary", {}, None, "application/json"),
    ("GET", "/api/sessions/{id}/export", {"format": "text"}, None, "application/json"),
    ("PATCH", "/api/sessions/{id}", {}, {"metadata": {"taken": True}}, "application/json"),
    ("DELETE", "/api/sessions/{id}", {}, None, "application/json"),
    ("GET", "/api/search", {"q": "secret", "session_id": "{id}"}, None, "application/json"),
    ("GET", "/sessions/{id}", {}, None, "text/html"),
]


def _ask(http: httpx.Client, sid: str) -> list[tuple[int, str, bytes]]:
    answers = []
    for method, path, params, body, accept in PROBES:
        query = {k: (sid if v == "{id}" else v) for k, v in params.items()}
        answer = http.request(
            method, path.replace("{id}", sid), params=query, json=body, headers={"accept": accept}
        )
        answers.append((answer.status_code, answer.headers["content-type"], answer.content))
    return answers


async def _tools(served: Served, key: str, sid: str) -> list[tuple[bool, str]]:
    calls = [
        ("get_context", {"session_id": sid}),
        ("search_memory", {"query": "secret", "session_id": sid}),
        ("forget", {"session_id": sid}),
    ]
    answers = []
    async with http_session(served, key) as session:
        for name, arguments in calls:
            result = await session.call_tool(name, arguments)
            text = " ".join(getattr(c, "text", "") for c in result.content)
            answers.append((result.isError, text))
    return answers


def _anns_session(served: Served, sid: str) -> None:
    with served.http(served.ann) as ann:
        body = {"messages": [{"role": "user", "content": "my secret is 42"}]}
        assert ann.post(f"/api/sessions/{sid}/messages", json=body).status_code == 201


async def test_another_users_session_answers_exactly_as_a_missing_one(served: Served) -> None:
    sid = f"ann-oracle-{uuid.uuid4().hex[:8]}"
    _anns_session(served, sid)
    with served.http(served.bob) as bob:
        foreign = _ask(bob, sid)
    foreign_tools = await _tools(served, served.bob, sid)
    with served.http(served.ann) as ann:  # bob changed nothing: ann's session is whole
        assert ann.get(f"/api/sessions/{sid}").json()["metadata"] == {}
        assert len(ann.get(f"/api/sessions/{sid}/messages").json()) == 1
        assert ann.delete(f"/api/sessions/{sid}").status_code == 200
    with served.http(served.bob) as bob:
        missing = _ask(bob, sid)
    missing_tools = await _tools(served, served.bob, sid)

    assert foreign == missing
    assert foreign_tools == missing_tools
    for status, _kind, body in foreign:
        assert status == 404, body
        assert b"SessionNotFoundError" in body, body
        assert b"ann" not in body.replace(sid.encode(), b""), body
    assert all(error and "SessionNotFoundError" in text for error, text in foreign_tools)
    # and the same shape as an id nobody ever used
    other = f"never-{uuid.uuid4().hex[:8]}"
    with served.http(served.bob) as bob:
        never = _ask(bob, other)
    assert [(s, k, b.replace(other.encode(), b"ID")) for s, k, b in never] == [
        (s, k, b.replace(sid.encode(), b"ID")) for s, k, b in missing
    ]


async def test_a_refused_create_never_says_whose_the_id_is(served: Served) -> None:
    """Creating or appending to an id in use answers one 409, whether the id is another user's
    session or the key's own; another user's ``USER:NAME`` id answers the same whether that
    conversation exists yet or not."""
    taken = f"ann-taken-{uuid.uuid4().hex[:8]}"
    own = f"bob-own-{uuid.uuid4().hex[:8]}"
    _anns_session(served, taken)
    message = {"messages": [{"role": "user", "content": "x"}]}
    with served.http(served.bob) as bob:
        assert bob.post("/api/sessions", json={"session_id": own}).status_code == 201
        answers = {
            sid: [
                bob.post("/api/sessions", json={"session_id": sid}),
                bob.post(f"/api/sessions/{sid}/messages", json=message),
            ]
            for sid in (taken, own)
        }
    assert answers[own][1].status_code == 201  # appending to its own session is no create
    for sid, made in answers.items():
        for answer in made[: 2 if sid == taken else 1]:
            assert answer.status_code == 409, answer.text
            assert answer.json()["error"] == "SessionIdUnavailableError"
            assert "ann" not in answer.json()["detail"].replace(sid, "")
    assert answers[taken][0].content.replace(taken.encode(), b"ID") == answers[own][
        0
    ].content.replace(own.encode(), b"ID")
    assert answers[taken][0].content == answers[taken][1].content
    async with http_session(served, served.bob) as session:
        refused = await session.call_tool("remember", {"content": "x", "session_id": taken})
    assert refused.isError
    detail = answers[taken][0].json()["detail"]
    assert refused.content[0].text.endswith(f"SessionIdUnavailableError: {detail}")

    conversation = f"ann:notes-{uuid.uuid4().hex[:8]}"
    with served.http(served.bob) as bob:
        before = [
            bob.post("/api/sessions", json={"session_id": conversation}),
            bob.post(f"/api/sessions/{conversation}/messages", json=message),
        ]
    _anns_session(served, conversation)
    with served.http(served.bob) as bob:
        after = [
            bob.post("/api/sessions", json={"session_id": conversation}),
            bob.post(f"/api/sessions/{conversation}/messages", json=message),
        ]
    assert [(a.status_code, a.content) for a in before] == [
        (a.status_code, a.content) for a in after
    ]
    assert before[0].status_code == 409
    assert "'bob:notes-" in before[0].json()["detail"]  # where bob's own conversation would be


def test_another_user_answers_as_a_user_that_does_not_exist(served: Served) -> None:
    nobody = f"nobody{uuid.uuid4().hex[:8]}"
    with served.http(served.bob) as bob:
        for method, path in (
            ("GET", "/api/profile?user_id={u}"),
            ("GET", "/api/sessions?user_id={u}"),
            ("DELETE", "/api/users/{u}"),
            ("GET", "/users/{u}"),
        ):
            ann = bob.request(method, path.format(u="ann"))
            none = bob.request(method, path.format(u=nobody))
            assert ann.status_code == none.status_code == 403, ann.text
            named = re.sub(rb"\bann\b", b"U", ann.content)
            assert named == none.content.replace(nobody.encode(), b"U")


def test_an_admin_key_keeps_the_precise_answers(served: Served) -> None:
    sid = f"ann-admin-{uuid.uuid4().hex[:8]}"
    _anns_session(served, sid)
    with served.http(served.admin) as admin:
        as_bob = admin.get("/api/search", params={"q": "x", "session_id": sid, "user_id": "bob"})
        assert as_bob.status_code == 403
        assert as_bob.json()["error"] == "SessionOwnershipError"
        again = admin.post("/api/sessions", json={"session_id": sid})
        assert again.status_code == 422
        assert "already exists" in again.json()["detail"]
        assert admin.get(f"/api/sessions/{sid}").json()["user_id"] == "ann"
