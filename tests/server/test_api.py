"""The JSON API of a real ``harombe serve``, through httpx: every kind of call, errors with the
library's messages and status codes, keys, limits, and two processes sharing one memory."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from harombe_core.limits import current_limits
from harombe_core.server.api import MAX_APPEND, max_body_bytes
from harombe_core.server.process import ServerProcess, create_key_cli
from tests.server.conftest import Served, serve


def _sid() -> str:
    return f"s-{uuid.uuid4().hex[:8]}"


def test_no_key_no_access(served: Served) -> None:
    with served.http(None) as http:
        for path in ("/api/sessions", "/api/search?q=x", "/api/me", "/api/profile"):
            answer = http.get(path)
            assert answer.status_code == 401
            assert answer.json()["error"] == "NotAuthenticatedError"
            assert "Authorization: Bearer" in answer.json()["detail"]
        assert http.post("/mcp", json={}).status_code == 401
    with served.http("hk_not-a-real-key") as http:
        assert http.get("/api/sessions").status_code == 401
    # the documentation is public: it holds no memory
    with served.http(None) as http:
        assert http.get("/openapi.json").status_code == 200
        assert http.get("/docs").status_code == 200


def test_sessions_messages_window_context_search(served: Served) -> None:
    sid = _sid()
    with served.http(served.ann) as http:
        assert http.get("/api/me").json() == {"user_id": "ann", "admin": False}
        made = http.post("/api/sessions", json={"session_id": sid, "system_prompt": "Be brief."})
        assert made.status_code == 201, made.text
        assert made.json()["user_id"] == "ann"
        body = {
            "messages": [
                {"role": "user", "content": "My sister Ines lives in Porto.", "name": "Ann"},
                {"role": "assistant", "content": "Porto is lovely.", "metadata": {"k": [1, 2]}},
            ]
        }
        ids = http.post(f"/api/sessions/{sid}/messages", json=body).json()["ids"]
        assert len(ids) == 2
        messages = http.get(f"/api/sessions/{sid}/messages").json()
        assert [m["content"] for m in messages] == [m["content"] for m in body["messages"]]
        assert messages[0]["name"] == "Ann"
        assert messages[1]["metadata"] == {"k": [1, 2]}
        window = http.get(f"/api/sessions/{sid}/window", params={"max_tokens": 4000}).json()
        assert window["messages"][0]["role"] == "system"
        assert window["tokens"] > 0
        for strategy in ("simple", "summarization", "hybrid", "threaded"):
            context = http.get(f"/api/sessions/{sid}/context", params={"strategy": strategy})
            assert context.status_code == 200, (strategy, context.text)
            assert context.json()["messages"][-1]["content"] == "Porto is lovely."
        full = http.get(f"/api/sessions/{sid}/context", params={"full": True, "query": "sister"})
        assert full.status_code == 200
        hits = http.get("/api/search", params={"q": "Porto sister"}).json()
        assert hits[0]["message"]["id"] in ids
        assert hits[0]["keyword_score"] is not None
        patched = http.patch(f"/api/sessions/{sid}", json={"metadata": {"topic": "family"}})
        assert patched.json()["metadata"] == {"topic": "family"}
        summary = http.post(f"/api/sessions/{sid}/summary")
        assert summary.status_code == 200
        assert summary.json()["summary"]
        exported = http.get(f"/api/sessions/{sid}/export")
        assert "Porto is lovely." in exported.text
        assert sid in [s["id"] for s in http.get("/api/sessions").json()]
        profile = http.get("/api/profile").json()
        assert profile["user_id"] == "ann"
        assert sid in [s["session_id"] for s in profile["recent_sessions"]]
        assert http.delete(f"/api/sessions/{sid}").json() == {
            "deleted": True,
            "erased_from_disk": True,
        }
        assert http.get(f"/api/sessions/{sid}").status_code == 404


def test_errors_keep_the_library_message_and_map_to_status(served: Served) -> None:
    sid = _sid()
    with served.http(served.ann) as http:
        bad_role = http.post(
            f"/api/sessions/{sid}/messages", json={"messages": [{"role": "x", "content": "y"}]}
        )
        assert bad_role.status_code == 422
        assert bad_role.json()["error"] == "InvalidMessageError"
        http.post(
            f"/api/sessions/{sid}/messages", json={"messages": [{"role": "user", "content": "a"}]}
        )
        bad_strategy = http.get(f"/api/sessions/{sid}/context", params={"strategy": "nope"})
        assert bad_strategy.status_code == 422
        assert "unknown strategy 'nope'" in bad_strategy.json()["detail"]
        missing = http.get("/api/sessions/no-such-session")
        assert missing.status_code == 404
        assert missing.json()["error"] == "SessionNotFoundError"
    with served.http(served.bob) as http:
        other = http.get(f"/api/sessions/{sid}/messages")
        assert other.status_code == 404  # as a missing one: tests/server/test_oracle.py
        assert other.json()["error"] == "SessionNotFoundError"
        acting = http.get("/api/sessions", params={"user_id": "ann"})
        assert acting.status_code == 403
        assert acting.json()["error"] == "AccessDeniedError"


def test_too_large_content_refused_with_the_library_limit(served: Served) -> None:
    limit = current_limits().content_chars
    with served.http(served.ann) as http:
        answer = http.post(
            f"/api/sessions/{_sid()}/messages",
            json={"messages": [{"role": "user", "content": "x" * (limit + 1)}]},
        )
        assert answer.status_code == 413
        assert answer.json()["error"] == "MessageTooLargeError"
        huge = http.post(
            f"/api/sessions/{_sid()}/messages",
            content=b"{" + b" " * max_body_bytes() + b"}",
            headers={"content-type": "application/json"},
        )
        assert huge.status_code == 413
        assert "set_limits" in huge.json()["detail"]


def test_admin_sees_every_user_and_acts_for_one(served: Served) -> None:
    sid = _sid()
    with served.http(served.bob) as http:
        http.post(
            f"/api/sessions/{sid}/messages", json={"messages": [{"role": "user", "content": "b"}]}
        )
    with served.http(served.admin) as http:
        assert "bob" in http.get("/api/users").json()
        mine = http.get("/api/sessions", params={"user_id": "bob", "limit": 100}).json()
        assert sid in [s["id"] for s in mine]
        assert http.get(f"/api/sessions/{sid}/messages").json()[0]["content"] == "b"
        moved = http.patch(f"/api/sessions/{sid}", json={"user_id": "ann"})
        assert moved.json()["user_id"] == "ann"
    with served.http(served.bob) as http:
        assert http.patch(f"/api/sessions/{sid}", json={"user_id": "bob"}).status_code == 404


def test_revoked_key_stops_at_once(served: Served) -> None:
    key = create_key_cli(served.db, user="carl")
    with served.http(key) as http:
        assert http.get("/api/me").status_code == 200
        listed = subprocess.run(
            [sys.executable, "-m", "harombe_core.cli", "keys", "list", "--db", served.db],
            capture_output=True,
            text=True,
            check=True,
        )
        assert key not in listed.stdout  # only ids are ever shown
        carl = [line for line in listed.stdout.splitlines() if "carl" in line]
        found = re.search(r"k[0-9a-f]{16}", carl[0])
        assert found is not None, listed.stdout
        key_id = found.group()  # its public id, nothing of the key (tests/server/test_key_ids.py)
        subprocess.run(
            [sys.executable, "-m", "harombe_core.cli", "keys", "revoke", key_id, "--db", served.db],
            check=True,
            capture_output=True,
        )
        assert http.get("/api/me").status_code == 401


def test_no_auth_refused_off_loopback(fresh_db: str) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "harombe_core.cli",
            "serve",
            "--db",
            fresh_db,
            "--no-auth",
            "--host",
            "0.0.0.0",
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 1
    assert "loopback" in done.stderr


def test_no_auth_on_loopback_serves_as_admin(fresh_db: str) -> None:
    with ServerProcess(fresh_db, extra=["--no-auth"]) as server:
        import httpx

        assert httpx.get(server.url + "/api/me").json() == {"user_id": None, "admin": True}
        # DNS rebinding: another site's name pointed at this machine is refused
        rebound = httpx.get(server.url + "/api/me", headers={"Host": "evil.example"})
        assert rebound.status_code == 400
        assert "user_id" not in rebound.text


def test_two_processes_on_one_file_are_one_memory(fresh_db: str) -> None:
    first = serve(fresh_db)
    second = ServerProcess(fresh_db).start()
    try:
        sid = _sid()
        with first.http(first.ann) as one:
            one.post(
                f"/api/sessions/{sid}/messages",
                json={"messages": [{"role": "user", "content": "written by one"}]},
            )
        import httpx

        with httpx.Client(
            base_url=second.url, headers={"Authorization": f"Bearer {first.ann}"}
        ) as two:
            assert two.get(f"/api/sessions/{sid}/messages").json()[0]["content"] == "written by one"
            assert two.get("/api/search", params={"q": "written"}).json()
    finally:
        second.stop()
        first.server.stop()


@pytest.mark.slow
def test_postgres_server(pg_server: object) -> None:
    url = pg_server.create_database("served_pg")  # type: ignore[attr-defined]
    running = serve(url)
    second = ServerProcess(url).start()
    try:
        with running.http(running.ann) as http:
            http.post(
                "/api/sessions/pg1/messages",
                json={"messages": [{"role": "user", "content": "postgres memory"}]},
            )
        import httpx

        with httpx.Client(
            base_url=second.url, headers={"Authorization": f"Bearer {running.ann}"}
        ) as two:
            assert two.get("/api/search", params={"q": "postgres"}).json()[0]["session_id"] == "pg1"
        with running.http(running.bob) as http:
            assert http.get("/api/sessions/pg1/messages").status_code == 404
    finally:
        second.stop()
        running.server.stop()


def test_cors_is_off_unless_configured(served: Served, fresh_db: str) -> None:
    import httpx

    preflight = {
        "Origin": "https://app.example",
        "Access-Control-Request-Method": "GET",
        "Access-Control-Request-Headers": "authorization",
    }
    with served.http(served.ann) as http:
        answer = http.get("/api/me", headers={"Origin": "https://app.example"})
        assert "access-control-allow-origin" not in answer.headers
        assert (
            "access-control-allow-origin" not in http.options("/api/me", headers=preflight).headers
        )
    with ServerProcess(fresh_db, extra=["--cors-origin", "https://app.example"]) as server:
        allowed = httpx.options(server.url + "/api/me", headers=preflight)
        assert allowed.headers["access-control-allow-origin"] == "https://app.example"
        other = httpx.options(
            server.url + "/api/me", headers={**preflight, "Origin": "https://evil.example"}
        )
        assert "access-control-allow-origin" not in other.headers


def test_forget_user_erases_only_with_that_users_or_an_admin_key(served: Served) -> None:
    from harombe_core.server import HarombeClient, HarombeServerError

    dora = create_key_cli(served.db, user="dora")
    with HarombeClient(served.url, api_key=dora) as client:
        client.save_message("dora-1", "user", "Dora's passport number is X1234")
        client.save_message("dora-2", "user", "Dora likes tulips")
    with (
        HarombeClient(served.url, api_key=served.bob) as bob,
        pytest.raises(HarombeServerError) as refused,
    ):
        bob.forget_user("dora")
    assert refused.value.status == 403
    with HarombeClient(served.url, api_key=dora) as client:
        assert client.search("passport") != []
        assert client.forget_user("dora") == 2
        assert client.search("passport") == []
        assert client.list_sessions() == []


def test_profile_serves_the_users_facts_and_tasks(served: Served) -> None:
    from harombe_core.manager import MemoryManager

    with MemoryManager(served.db, embedding=None) as manager:
        manager.add_fact("erin", "Erin is vegetarian", kind="preference")
        manager.add_fact("erin", "Book the dentist", kind="task")
    erin = create_key_cli(served.db, user="erin")
    with served.http(erin) as http:
        profile = http.get("/api/profile").json()
    assert "Erin is vegetarian" in [f["text"] for f in profile["facts"]]
    assert "Book the dentist" in [t["text"] for t in profile["tasks"]]
    assert "vegetarian" in profile["profile"]
    with served.http(served.bob) as http:
        assert "vegetarian" not in http.get("/api/profile").text
        assert http.get("/api/profile", params={"user_id": "erin"}).status_code == 403


def test_a_key_id_never_starts_with_a_dash(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A key id is typed on a command line (``harombe keys revoke ID``), where one starting
    with "-" would read as an option: ids start with "k", whatever the key's random part."""
    import secrets

    from harombe_core import MemoryManager
    from harombe_core.server import keys

    monkeypatch.setattr(secrets, "token_urlsafe", lambda nbytes=None: "-mL_0s3K" + "a" * 35)
    with MemoryManager(str(tmp_path / "keys.db"), embedding=None) as mm:
        key, record = keys.create_key(mm.store, user_id="carl")
        assert re.fullmatch(r"k[0-9a-f]{16}", record.id)
        assert key == "hk_-mL_0s3K" + "a" * 35
        assert [k.id for k in keys.list_keys(mm.store)] == [record.id]


def test_a_chunked_body_over_the_limit_is_refused_with_a_typed_413(served: Served) -> None:
    """Without a Content-Length the size is only known while reading: still 413 and the
    typed error, not FastAPI's 400 "There was an error parsing the body"."""
    step = 1 << 20

    def chunks() -> Iterator[bytes]:
        yield b'{"messages": [{"role": "user", "content": "'
        for _ in range(max_body_bytes() // step + 1):
            yield b"x" * step
        yield b'"}]}'

    with served.http(served.ann) as http:
        answer = http.post(
            f"/api/sessions/{_sid()}/messages",
            content=chunks(),
            headers={"content-type": "application/json"},
        )
        assert answer.status_code == 413, answer.text
        assert answer.json()["error"] == "InputTooLargeError"
        body = {"messages": [{"role": "user", "content": "small"}]}
        small = http.post(
            f"/api/sessions/{_sid()}/messages",
            content=iter([json.dumps(body).encode()]),
            headers={"content-type": "application/json"},
        )
        assert small.status_code == 201, small.text


def test_malformed_requests_get_the_typed_error_body(served: Served) -> None:
    """Every refusal has the same shape, ``{"error": class, "detail": message}``: FastAPI's
    own validation errors and its 404/405 too, and a refused value is never echoed back."""
    sid = _sid()
    with served.http(served.ann) as http:
        answers = {
            "top_k": http.get("/api/search", params={"q": "a", "top_k": "abc"}),
            "limit": http.get(f"/api/sessions/{sid}/messages", params={"limit": -1}),
            "body": http.post(f"/api/sessions/{sid}/messages", json={"messages": "y" * 5000}),
            "json": http.post(
                f"/api/sessions/{sid}/messages",
                content=b"{",
                headers={"content-type": "application/json"},
            ),
        }
        for where, answer in answers.items():
            assert answer.status_code == 422, (where, answer.text)
            body = answer.json()
            assert body["error"] == "InvalidInputError", (where, body)
            assert "/docs" in str(body["detail"]), (where, body)
            assert "y" * 100 not in answer.text
        assert "query.top_k" in answers["top_k"].json()["detail"]
        assert "body.messages" in answers["body"].json()["detail"]
        missing = http.get("/api/nothing-here")
        assert missing.status_code == 404
        assert missing.json() == {"error": "HTTPError", "detail": "Not Found"}
        assert http.put("/api/sessions").json()["error"] == "HTTPError"


def test_an_append_of_more_messages_than_one_request_takes_is_refused(served: Served) -> None:
    """A body of many tiny messages fits the byte limit but would hold the event loop (every
    other user's requests) while it is validated: refused by count, before validation."""
    sid = _sid()
    many = {"messages": [{"role": "user", "content": "x"}] * (MAX_APPEND + 1)}
    with served.http(served.ann) as http:
        answer = http.post(f"/api/sessions/{sid}/messages", json=many)
        assert answer.status_code == 422
        assert answer.json()["error"] == "InvalidInputError"
        assert f"at most {MAX_APPEND}" in answer.json()["detail"]
        assert http.get(f"/api/sessions/{sid}/messages").status_code == 404
        most = {"messages": many["messages"][:MAX_APPEND]}
        assert (
            len(http.post(f"/api/sessions/{sid}/messages", json=most).json()["ids"]) == MAX_APPEND
        )


def test_a_page_of_another_site_cannot_write_through_the_browser(fresh_db: str) -> None:
    """A browser sends ``Origin`` with a page's cross-site POST (``fetch`` in ``no-cors`` mode
    needs no CORS permission): on a ``--no-auth`` demo server that page could otherwise write
    (the summary route takes no body at all) or sign the inspector in with its own key. The
    server's own pages and clients that send no ``Origin`` (httpx, curl, the MCP SDK) pass."""
    import httpx

    with ServerProcess(fresh_db, extra=["--no-auth"]) as server:
        sid = _sid()
        own = {"Origin": server.url}
        kept = httpx.post(
            f"{server.url}/api/sessions/{sid}/messages",
            json={"messages": [{"role": "user", "content": "mine"}]},
            headers=own,
        )
        assert kept.status_code == 201
        evil = {"Origin": "http://evil.example"}
        for method, path, body in (
            ("POST", f"/api/sessions/{sid}/summary", None),
            (
                "POST",
                f"/api/sessions/{sid}/messages",
                b'{"messages":[{"role":"user","content":"x"}]}',
            ),
            ("DELETE", f"/api/sessions/{sid}", None),
            ("POST", "/login", b"key=hk_x"),
            ("POST", "/mcp", b"{}"),
        ):
            answer = httpx.request(method, server.url + path, content=body, headers=evil)
            assert answer.status_code == 403, (method, path, answer.text)
            assert answer.json()["error"] == "AccessDeniedError"
            assert "--cors-origin" in answer.json()["detail"]
        assert (
            httpx.get(f"{server.url}/api/sessions/{sid}/messages", headers=evil).json()[0][
                "content"
            ]
            == "mine"
        )
        assert httpx.post(f"{server.url}/api/sessions/{sid}/summary").status_code == 200


def test_every_answer_forbids_framing_sniffing_and_scripts_in_pages(served: Served) -> None:
    """The inspector's pages may not be framed by another site (clickjacking) and may run no
    script (it has none, so a hostile message escaping the templates could run nothing); the
    API's answers are never sniffed into HTML. ``/docs`` keeps Swagger UI's script."""
    with served.http(served.ann) as http:
        for path in ("/login", "/api/me", "/api/sessions/nosuch/export?format=text", "/nosuch"):
            headers = http.get(path).headers
            assert headers["x-frame-options"] == "DENY", path
            assert headers["x-content-type-options"] == "nosniff", path
            assert headers["referrer-policy"] == "same-origin", path
            policy = headers["content-security-policy"]
            assert "frame-ancestors 'none'" in policy, path
            assert "default-src 'none'" in policy, path
            assert "script-src" not in policy, path
        assert "content-security-policy" not in http.get("/docs").headers


def test_a_port_in_use_is_a_typed_error_before_anything_is_created(fresh_db: str) -> None:
    """A busy port used to print "harombe serving ... on http://..." first, create the
    database, then die with uvicorn's own line (exit 3); now one line names the port and the
    option to change, exit 1, and the database is not created."""
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        args = ["serve", "--db", fresh_db, "--port", str(port)]
        done = subprocess.run(
            [sys.executable, "-m", "harombe_core.cli", *args],
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )
    assert done.returncode == 1, done.stderr
    assert f"port {port} on 127.0.0.1 is already in use" in done.stderr
    assert "--port" in done.stderr
    assert "serving" not in done.stderr
    assert not Path(fresh_db).exists()


def test_a_session_id_with_slashes_is_reached_by_every_route(served: Served) -> None:
    """Session ids may hold '/' (``tenant/user/chat``): such a session was listed but every
    route naming it (read, write, delete, the inspector's page) answered 404 "Not Found",
    whether the '/' was sent as is or as %2F (the server decodes it before routing)."""
    from urllib.parse import quote

    from harombe_core.server import HarombeClient

    sid = f"team/{_sid()}/chat"
    with served.http(served.ann) as http:
        assert http.post("/api/sessions", json={"session_id": sid}).status_code == 201
        for written in (sid, quote(sid, safe="")):
            base = f"/api/sessions/{written}"
            kept = http.post(
                base + "/messages", json={"messages": [{"role": "user", "content": "slash"}]}
            )
            assert kept.status_code == 201, kept.text
            assert kept.json()["session_id"] == sid
            assert http.get(base).json()["id"] == sid
            assert http.get(base + "/messages").json()[-1]["content"] == "slash"
            assert http.get(base + "/window").status_code == 200
            assert http.get(base + "/context").json()["messages"]
            assert http.get(base + "/export").status_code == 200
            assert http.post(base + "/summary").status_code == 200
            assert http.patch(base, json={"metadata": {"k": 1}}).json()["metadata"] == {"k": 1}
            page = http.get(f"/sessions/{written}", headers={"Accept": "text/html"})
            assert page.status_code == 200
            assert "slash" in page.text
    with served.http(served.bob) as http:
        assert http.get(f"/api/sessions/{sid}/messages").status_code == 404
    with HarombeClient(served.url, api_key=served.ann) as client:
        assert [m["content"] for m in client.get_messages(sid)] == ["slash", "slash"]
        assert client.delete_session(sid) is True


def test_the_start_line_never_shows_a_postgres_password(monkeypatch: pytest.MonkeyPatch) -> None:
    """``harombe serve --db postgresql://user:PASSWORD@...`` printed the URL, password and
    all, on its first line (into service logs); it now shows ``***`` in its place."""
    from contextlib import nullcontext

    import uvicorn
    from typer.testing import CliRunner

    from harombe_core.cli import app
    from harombe_core.server import api, cli

    monkeypatch.setattr(cli, "open_memory", lambda *a, **k: nullcontext())
    monkeypatch.setattr(api, "create_app", lambda *a, **k: object())
    monkeypatch.setattr(uvicorn.Server, "run", lambda self, sockets=None: None)
    url = "postgresql://ann:s3cret-pw@db.example:5432/memory"
    args = ["serve", "--db", url, "--port", "0", "--embedding", "none"]  # no database to read
    done = CliRunner().invoke(app, args)
    assert done.exit_code == 0, done.output
    assert "s3cret-pw" not in done.output
    assert "postgresql://ann:***@db.example:5432/memory" in done.output


def test_the_sessions_page_says_when_older_sessions_are_not_listed(served: Served) -> None:
    """The sessions page listed the 200 most recent sessions and stopped, with nothing to say
    more existed or way to see them; it now links to a longer list."""
    key = create_key_cli(served.db, user="lister")
    with served.http(key) as http:
        for n in range(3):
            http.post(
                f"/api/sessions/lister-{n}/messages",
                json={"messages": [{"role": "user", "content": "hi"}]},
            )
        html = {"Accept": "text/html"}
        short = http.get("/?limit=2", headers=html).text
        assert len(re.findall(r'href="/sessions/lister-', short)) == 2
        more = re.search(r'href="\?limit=(\d+)" id="more-sessions"', short)
        assert more is not None
        longer = http.get(f"/?limit={more.group(1)}", headers=html).text
        assert len(re.findall(r'href="/sessions/lister-', longer)) == 3
        assert 'id="more-sessions"' not in longer


@pytest.mark.parametrize(
    ("option", "value", "named"),
    [
        ("--host", "", "--host is empty"),
        ("--host", "  ", "--host is empty"),
        ("--cors-origin", "app.example", "--cors-origin 'app.example'"),
        ("--cors-origin", "https://app.example/page", "--cors-origin 'https://app.example/page'"),
    ],
)
def test_a_bad_host_or_origin_is_a_typed_error_naming_the_option(
    fresh_db: str, option: str, value: str, named: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An empty ``--host`` (an unset variable in a service file) listened on every interface,
    and an origin no browser sends (no scheme, a path) was accepted and never matched; both
    now stop ``harombe serve`` with one line naming the option, and nothing is created."""
    import uvicorn
    from typer.testing import CliRunner

    from harombe_core.cli import app

    def started(self: object, sockets: object = None) -> None:
        raise AssertionError("the server started with a bad option")

    monkeypatch.setattr(uvicorn.Server, "run", started)
    done = CliRunner().invoke(app, ["serve", "--db", fresh_db, "--port", "0", option, value])
    assert done.exit_code == 1
    assert named in done.output
    assert not Path(fresh_db).exists()


def test_an_origin_given_with_a_trailing_slash_is_allowed(fresh_db: str) -> None:
    """``--cors-origin https://app.example/`` (as copied from an address bar) never matched
    the ``Origin`` a browser sends, which has no slash: the app's calls were refused."""
    import httpx

    preflight = {
        "Origin": "https://app.example",
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization",
    }
    with ServerProcess(fresh_db, extra=["--cors-origin", "https://app.example/"]) as server:
        allowed = httpx.options(server.url + "/api/me", headers=preflight)
        assert allowed.headers["access-control-allow-origin"] == "https://app.example"


def test_sigterm_stops_the_server_while_a_client_stalls_mid_request(fresh_db: str) -> None:
    """A client that sent half a request and then nothing kept ``harombe serve`` from ever
    exiting on SIGTERM (uvicorn waited for it without end); in-flight requests now get
    ``--shutdown-timeout`` seconds, and what was acknowledged before is all there after."""
    import socket

    import httpx

    key = create_key_cli(fresh_db, user="ann")
    server = ServerProcess(fresh_db, extra=["--shutdown-timeout", "0.5"]).start()
    auth = {"Authorization": f"Bearer {key}"}
    try:
        kept = httpx.post(
            server.url + "/api/sessions/stall/messages",
            json={"messages": [{"role": "user", "content": "acknowledged"}]},
            headers=auth,
        )
        assert kept.status_code == 201
        with socket.create_connection(("127.0.0.1", server.port)) as stalled:
            stalled.sendall(
                b"POST /api/sessions/stall/messages HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                b"Authorization: Bearer " + key.encode() + b"\r\n"
                b'Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"mess'
            )
            assert server.process is not None
            server.process.terminate()
            server.process.wait(timeout=60)  # before: still waiting for the stalled client
    finally:
        server.stop()
    with ServerProcess(fresh_db) as again:
        messages = httpx.get(again.url + "/api/sessions/stall/messages", headers=auth).json()
        assert [m["content"] for m in messages] == ["acknowledged"]


def test_log_level_info_logs_each_request_and_the_start_line_is_whole(fresh_db: str) -> None:
    """An operator's ``--log-level info`` shows a line per request (uvicorn's access log, on
    stdout) and keeps the default quiet otherwise; the line naming the database and address is
    one line however long, so a log shipper does not split it."""
    import time

    import httpx

    from harombe_core.store.pg_server import free_port

    port = free_port()
    logs = {name: Path(fresh_db).with_suffix(f".{name}") for name in ("out", "err")}
    with logs["out"].open("wb") as out, logs["err"].open("wb") as err:
        args = ["-m", "harombe_core.cli", "serve", "--db", fresh_db, "--port", str(port)]
        server = subprocess.Popen(
            [sys.executable, *args, "--log-level", "info", "--embedding", "none"],
            stdout=out,
            stderr=err,
        )
        try:
            for _ in range(600):
                try:
                    if httpx.get(f"http://127.0.0.1:{port}/openapi.json").status_code == 200:
                        break
                except httpx.TransportError:
                    time.sleep(0.1)
            assert httpx.get(f"http://127.0.0.1:{port}/api/sessions").status_code == 401
        finally:
            server.terminate()
            server.wait(timeout=30)
    assert '"GET /api/sessions HTTP/1.1" 401' in logs["out"].read_text()
    said = logs["err"].read_text().splitlines()
    assert f"harombe serving {fresh_db} on http://127.0.0.1:{port}" in said
