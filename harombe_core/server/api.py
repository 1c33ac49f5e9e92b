"""The ASGI app of ``harombe serve``: the JSON API, the MCP endpoint and the inspector, in one.

Security is structural rather than per route:

* :func:`current_scope` is a dependency of the whole app, so every route FastAPI knows (JSON,
  inspector) resolves the request's API key (``Authorization: Bearer <key>``; the inspector's
  pages also accept the key cookie its login form sets, on GET only) to a
  :class:`~harombe_core.server.keys.Scope` before its handler runs, and a route cannot be added
  without it. ``/mcp`` is not a FastAPI route, so its ASGI wrapper does the same check.
* Handlers reach memory only through :class:`~harombe_core.server.memory.ScopedMemory`, which
  acts as the key's user on the public MemoryManager API.
* Request bodies are capped at what the library would store (:func:`max_body_bytes`, from
  :mod:`harombe_core.limits`); CORS is off unless origins are configured.
* A :class:`~harombe_core.errors.HarombeError` becomes a JSON error with the same message and
  the status code of :data:`STATUS`.

The app holds no state of its own beyond one MemoryManager: several processes on one SQLite
file or one PostgreSQL database serve one memory (keys included, they are in the database).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping, Sequence
from contextlib import asynccontextmanager
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Path, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException as StarletteHTTPException

from harombe_core import errors as err
from harombe_core.limits import current_limits
from harombe_core.manager import MemoryManager
from harombe_core.server.auth import (
    KEY_COOKIE,
    LOOPBACK_HOSTS,
    Memory,
    ServerState,
    bearer_key,
    current_scope,
    status_of,
)
from harombe_core.server.inspector import add_inspector, error_page
from harombe_core.server.keys import Scope
from harombe_core.server.mcp_tools import McpEndpoint, build_mcp

__all__ = ["MAX_APPEND", "MAX_CONCURRENT_PER_KEY", "add_api", "create_app", "max_body_bytes"]

#: How many requests one API key may have in flight at once in one server process, by default
#: (``harombe serve --max-concurrent-per-key``): generous for any client, yet one leaked or
#: runaway key cannot take every worker thread and database connection of the server.
MAX_CONCURRENT_PER_KEY = 64

Asgi = Callable[
    [MutableMapping[str, Any], Callable[[], Awaitable[Any]], Callable[[Any], Awaitable[None]]],
    Awaitable[None],
]


def max_body_bytes() -> int:
    """The largest request body accepted: one message at the library's limits, in UTF-8.

    Every field of a message at its limit (content, name, tool call id, tool calls, metadata),
    four bytes a character, plus room for the JSON around them. A bulk append must fit in it
    too; larger histories go in several requests (or ``harombe import``).
    """
    limits = current_limits()
    chars = (
        limits.content_chars
        + 2 * limits.name_chars
        + limits.tool_calls_chars
        + limits.metadata_chars
    )
    return 4 * chars + 65_536


class _HttpMiddleware:
    """An ASGI middleware that sees HTTP requests only (:meth:`http`); lifespan and other
    scopes pass straight to the app."""

    def __init__(self, app: Asgi) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        await self.http(scope, receive, send)

    async def http(self, scope: Any, receive: Any, send: Any) -> None:
        await self.app(scope, receive, send)


class _BodyLimit(_HttpMiddleware):
    """Refuse a request body over :func:`max_body_bytes` (413) before the app reads it.

    A declared ``Content-Length`` is checked at once (the server reads no more than it
    declares). A body without one (chunked) is read here up to the limit and handed on whole:
    the app would read it all anyway, and an error raised while the app reads it would reach
    the client as FastAPI's untyped 400 "error parsing the body", not as this 413.
    """

    async def http(self, scope: Any, receive: Any, send: Any) -> None:
        limit = max_body_bytes()
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None:
            if declared.isdigit() and int(declared) > limit:
                await _too_large(limit)(scope, receive, send)
                return
            await self.app(scope, receive, send)
            return
        read: list[Any] = []
        seen = 0
        while True:
            message = await receive()
            read.append(message)
            if message["type"] != "http.request":
                break
            seen += len(message.get("body", b""))
            if seen > limit:
                await _too_large(limit)(scope, receive, send)
                return
            if not message.get("more_body", False):
                break

        async def replayed() -> Any:
            return read.pop(0) if read else await receive()

        await self.app(scope, replayed, send)


class _PerKeyLimit(_HttpMiddleware):
    """Refuse (429, ``Retry-After``) a request whose key already has ``limit`` in flight.

    Counted per credential as sent (the Bearer key, or the inspector's cookie on GET), before
    the key is looked up, so a flood of requests costs no database work; a request without one
    is left to the 401 it gets. A request counts from its headers until the last byte of its
    answer is handed to the server (not after: a client that has its answer may send the next
    at once), or until its client leaves. Per process: N processes on one database allow N
    times the limit.
    """

    def __init__(self, app: Asgi, limit: int) -> None:
        super().__init__(app)
        self.limit = limit
        self.in_flight: dict[str, int] = {}

    async def http(self, scope: Any, receive: Any, send: Any) -> None:
        headers = Headers(scope=scope)
        key = bearer_key(headers)
        if key is None and scope.get("method") == "GET":
            key = _cookie(headers.get("cookie", ""), KEY_COOKIE)
        if key is None or self.limit <= 0:
            await self.app(scope, receive, send)
            return
        if self.in_flight.get(key, 0) >= self.limit:
            response = JSONResponse(
                {
                    "error": "TooManyRequestsError",
                    "detail": (
                        f"this API key already has {self.limit} requests in flight on this "
                        "server, the most it allows (harombe serve --max-concurrent-per-key); "
                        "wait for one to finish, or send fewer at once."
                    ),
                },
                status_code=429,
                headers={"Retry-After": "1"},
            )
            await response(scope, receive, send)
            return
        self.in_flight[key] = self.in_flight.get(key, 0) + 1
        done = False

        def finish() -> None:
            nonlocal done
            if not done:
                done = True
                left = self.in_flight[key] - 1
                if left:
                    self.in_flight[key] = left
                else:
                    del self.in_flight[key]

        async def sending(message: Any) -> None:
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                finish()
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            finish()


def _cookie(header: str, name: str) -> str | None:
    """The value of cookie ``name`` in a ``Cookie`` header, if any."""
    from http.cookies import SimpleCookie

    jar: SimpleCookie = SimpleCookie()
    try:
        jar.load(header)
    except Exception:  # a malformed header: no key, the 401 says so
        return None
    morsel = jar.get(name)
    return morsel.value if morsel is not None else None


#: Methods a browser sends across sites without asking (a form, a ``fetch`` without CORS) that
#: change nothing here; every other method may write.
_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


class _SameOriginWrites(_HttpMiddleware):
    """Refuse (403) a writing request a browser sent from a page of another site.

    A browser marks such a request with an ``Origin`` header naming the page's site. Without
    this check a page the user visits could write to a ``--no-auth`` server on their machine
    (``fetch(url, {method: "POST", mode: "no-cors"})`` needs no CORS permission, and
    ``/api/sessions/{id}/summary`` takes no body), or sign the inspector in with the page's own
    key (``/login``). Requests without ``Origin`` (httpx, curl, the MCP SDK, server-side
    clients) and from the server's own pages pass, as do the origins given with
    ``--cors-origin`` (every site for ``*``). Only the host is compared with the request's
    ``Host``, so a TLS proxy in front (``https://`` outside, ``http://`` inside) still counts
    as the same site.
    """

    def __init__(self, app: Asgi, allowed: Sequence[str] = ()) -> None:
        super().__init__(app)
        self.allowed = {origin.rstrip("/").lower() for origin in allowed}

    async def http(self, scope: Any, receive: Any, send: Any) -> None:
        if scope.get("method", "GET") not in _SAFE_METHODS:
            headers = Headers(scope=scope)
            origin = headers.get("origin")
            if origin is not None and not self._same_site(origin, headers.get("host", "")):
                response = JSONResponse(
                    {
                        "error": "AccessDeniedError",
                        "detail": (
                            f"a {scope.get('method')} request from a page of {origin!r} is "
                            "refused: browsers may change memory only from this server's own "
                            "pages or from an origin allowed with --cors-origin."
                        ),
                    },
                    status_code=403,
                )
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)

    def _same_site(self, origin: str, host: str) -> bool:
        origin = origin.rstrip("/").lower()
        if origin in self.allowed or "*" in self.allowed:
            return True
        _, sep, netloc = origin.partition("://")
        return bool(sep) and bool(host) and netloc == host.lower()


#: The inspector runs no script and loads nothing from elsewhere, so its pages may do no more:
#: a hostile message that ever slipped past escaping could still run nothing, and no other
#: site may frame a page (clickjacking). ``/docs`` is left out: Swagger UI loads its script.
_PAGE_POLICY = (
    "default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
_OPENAPI_PAGES = ("/docs", "/redoc")


class _SecurityHeaders(_HttpMiddleware):
    """Add the browser protections every response of the app carries: no framing by other
    sites, no MIME sniffing (an export served as text stays text), no referrer (a search query)
    sent to another site (``same-origin``: ``no-referrer`` would make the inspector's own
    form send ``Origin: null``, which :class:`_SameOriginWrites` refuses), and
    :data:`_PAGE_POLICY` on everything but the OpenAPI pages."""

    async def http(self, scope: Any, receive: Any, send: Any) -> None:
        extra = [
            (b"x-frame-options", b"DENY"),
            (b"x-content-type-options", b"nosniff"),
            (b"referrer-policy", b"same-origin"),
        ]
        if not scope.get("path", "").startswith(_OPENAPI_PAGES):
            extra.append((b"content-security-policy", _PAGE_POLICY.encode()))

        async def send_with_headers(message: Any) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *extra]}
            await send(message)

        await self.app(scope, receive, send_with_headers)


def _invalid_text(exc: RequestValidationError) -> str:
    """FastAPI's validation errors as one message naming each bad field (never echoing the
    value sent, which may be megabytes), so they reach clients as the library's errors do."""
    problems = [
        f"{'.'.join(str(part) for part in problem.get('loc', ()))}: {problem.get('msg', '')}"
        for problem in exc.errors()
    ]
    shown = "; ".join(problems[:5]) + (
        f"; and {len(problems) - 5} more" if len(problems) > 5 else ""
    )
    return f"invalid request ({shown}); /docs describes every route's parameters and body."


def _too_large_text(limit: int) -> str:
    return (
        f"request body over {limit:,} bytes, the most one message at the library's size limits "
        "takes; send fewer messages per request, or raise the limits with "
        "harombe_core.set_limits on the server."
    )


def _too_large(limit: int) -> JSONResponse:
    return JSONResponse(
        {"error": "InputTooLargeError", "detail": _too_large_text(limit)}, status_code=413
    )


#: The most messages one append takes. Its body is parsed and validated on the event loop,
#: so a body of millions of tiny messages (under :func:`max_body_bytes`) would stall every
#: other request of the server for seconds; checked before any message is validated.
MAX_APPEND = 10_000


# request bodies (each with an example: the isolation test sends it to every route) ---------
class MessageIn(BaseModel):
    """One message to append: the fields of :class:`~harombe_core.models.Message`."""

    model_config = ConfigDict(extra="forbid")
    role: str = Field(examples=["user"])
    content: str = Field(examples=["I moved to Lisbon in May."])
    name: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    created_at: str | None = Field(default=None, description="ISO 8601; default now.")


class AppendIn(BaseModel):
    """Messages to append to a session, in one transaction."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [{"messages": [{"role": "user", "content": "hello"}]}]},
    )
    messages: list[MessageIn] = Field(
        max_length=MAX_APPEND,
        description=f"At most {MAX_APPEND:,}; send a longer history in several requests.",
    )
    user_id: str | None = Field(default=None, description="Admin keys only: the session's user.")


class SessionIn(BaseModel):
    """A new session."""

    model_config = ConfigDict(
        extra="forbid", json_schema_extra={"examples": [{"system_prompt": "Be brief."}]}
    )
    session_id: str | None = None
    system_prompt: str | None = None
    metadata: dict[str, Any] | None = None
    user_id: str | None = Field(default=None, description="Admin keys only: the owner.")


class SessionPatch(BaseModel):
    """Changes to a session; fields left out are kept."""

    model_config = ConfigDict(
        extra="forbid", json_schema_extra={"examples": [{"metadata": {"topic": "moving"}}]}
    )
    system_prompt: str | None = None
    metadata: dict[str, Any] | None = None
    user_id: str | None = Field(default=None, description="Admin keys only: a new owner.")


class FactIn(BaseModel):
    """A fact to keep about the user."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [{"text": "lives in Lisbon", "kind": "fact", "subject": "home city"}]
        },
    )
    text: str
    kind: str = Field(default="fact", description="fact, preference, task or decision.")
    subject: str | None = Field(
        default=None, description="What it is about: a new value of a subject supersedes the old."
    )


class FactCorrection(BaseModel):
    """A current fact's new text (the old one is kept as history)."""

    model_config = ConfigDict(
        extra="forbid", json_schema_extra={"examples": [{"text": "lives in Porto"}]}
    )
    text: str


SessionId = Annotated[str, Path(description="The session's id.")]
FactId = Annotated[int, Path(ge=1, description="The fact's id.")]
UserQuery = Annotated[
    str | None, Query(description="Admin keys: act as this user (a user key: only itself).")
]


def add_api(app: FastAPI) -> None:
    """The JSON API under ``/api`` (its handlers only translate HTTP to :class:`ScopedMemory`).

    Routes are added to the app itself, not through a router, so the app's key dependency is
    theirs and its route table lists every one (the isolation test walks it)."""

    @app.get("/api/me", tags=["keys"])
    async def me(memory: Memory) -> dict[str, Any]:
        """Whose memory this key reaches."""
        return {"user_id": memory.scope.user_id, "admin": memory.scope.admin}

    @app.get("/api/users", tags=["users"])
    async def users(memory: Memory) -> list[str]:
        """The users this key sees (a user key: itself; an admin key: every user)."""
        return await memory.users()

    @app.delete("/api/users/{user_id:path}", tags=["users"])
    async def forget_user(memory: Memory, user_id: Annotated[str, Path()]) -> dict[str, Any]:
        """Erase everything stored for the user (a user key: only its own user): once this
        returns nothing finds it, and no byte of it stays in the database or its indexes."""
        return await memory.forget_user(user_id)

    @app.get("/api/profile", tags=["users"])
    async def profile(memory: Memory, user_id: UserQuery = None) -> dict[str, Any]:
        """What memory holds about the user (recent session summaries; facts and tasks)."""
        return await memory.profile(user_id)

    @app.get("/api/sessions", tags=["sessions"])
    async def list_sessions(
        memory: Memory,
        user_id: UserQuery = None,
        limit: Annotated[int, Query(ge=0, le=10_000)] = 20,
    ) -> list[dict[str, Any]]:
        """Sessions, most recent activity first."""
        return await memory.list_sessions(limit, user_id)

    @app.post("/api/sessions", status_code=201, tags=["sessions"])
    async def create_session(memory: Memory, body: SessionIn) -> dict[str, Any]:
        """Create a session (a new id unless ``session_id`` is given)."""
        return await memory.create_session(**body.model_dump())

    @app.get("/api/sessions/{session_id:path}/messages", tags=["messages"])
    async def get_messages(
        memory: Memory,
        session_id: SessionId,
        limit: Annotated[int | None, Query(ge=0)] = None,
        after_id: Annotated[int | None, Query(ge=0)] = None,
    ) -> list[dict[str, Any]]:
        """A session's messages in order (``limit`` of them after ``after_id``)."""
        return await memory.messages(session_id, limit=limit, after_id=after_id)

    @app.post("/api/sessions/{session_id:path}/messages", status_code=201, tags=["messages"])
    async def append(memory: Memory, session_id: SessionId, body: AppendIn) -> dict[str, Any]:
        """Append messages in one transaction (an unknown session is created); their ids."""
        messages = [m.model_dump(exclude_none=True) for m in body.messages]
        return await memory.append(session_id, messages, body.user_id)

    @app.get("/api/sessions/{session_id:path}/window", tags=["messages"])
    async def window(
        memory: Memory,
        session_id: SessionId,
        max_tokens: Annotated[int | None, Query(ge=0)] = None,
    ) -> dict[str, Any]:
        """The newest messages that fit ``max_tokens``, with their token total."""
        return await memory.window(session_id, max_tokens)

    @app.get("/api/sessions/{session_id:path}/context", tags=["context"])
    async def context(
        memory: Memory,
        session_id: SessionId,
        strategy: str = "simple",
        max_tokens: Annotated[int | None, Query(ge=0)] = None,
        query: str | None = None,
        keep_last: Annotated[int, Query(ge=0)] = 6,
        full: bool = False,
    ) -> dict[str, Any]:
        """What a model would be given: ``strategy`` simple, summarization, hybrid or threaded;
        ``full`` adds the user's other sessions' summaries and past messages relevant to
        ``query`` within the budget."""
        return await memory.context(
            session_id,
            strategy=strategy,
            max_tokens=max_tokens,
            query=query,
            keep_last=keep_last,
            full=full,
        )

    @app.post("/api/sessions/{session_id:path}/summary", tags=["context"])
    async def summarize(memory: Memory, session_id: SessionId) -> dict[str, Any]:
        """Bring the session's stored summary up to date; the session with it."""
        return await memory.summarize(session_id)

    @app.get("/api/sessions/{session_id:path}/export", tags=["sessions"])
    async def export(
        memory: Memory,
        session_id: SessionId,
        format: Annotated[str, Query(pattern="^(json|jsonl|text)$")] = "json",
    ) -> PlainTextResponse:
        """The session as an export file (``harombe import`` reads json and jsonl back)."""
        text = await memory.export(session_id, format)
        kind = "text/plain" if format == "text" else "application/json"
        return PlainTextResponse(text, media_type=kind)

    @app.get("/api/search", tags=["search"])
    async def search(
        memory: Memory,
        q: Annotated[str, Query(min_length=1, description="What to look for.")],
        top_k: Annotated[int, Query(ge=1, le=1000)] = 10,
        session_id: str | None = None,
        user_id: UserQuery = None,
        min_similarity: Annotated[
            float | None,
            Query(
                ge=-1.0,
                le=1.0,
                description="Leave out messages whose similarity of meaning (cosine) to q is "
                "below this; keyword-only search ignores it.",
            ),
        ] = None,
    ) -> list[dict[str, Any]]:
        """Messages relevant to ``q``, best first, each with its meaning/keyword evidence."""
        return await memory.search(
            q,
            top_k=top_k,
            session_id=session_id,
            user_id=user_id,
            min_similarity=min_similarity,
        )

    # after every /api/sessions/{id}/... route: a path id may hold '/', and the first route
    # that matches a path answers it
    @app.get("/api/facts", tags=["facts"])
    async def facts(
        memory: Memory,
        user_id: UserQuery = None,
        q: Annotated[
            str | None, Query(min_length=1, description="Search the facts by meaning and words.")
        ] = None,
        kind: Annotated[str | None, Query(description="Only facts of this kind.")] = None,
        top_k: Annotated[int, Query(ge=1, le=1000)] = 10,
        min_similarity: Annotated[float | None, Query(ge=-1.0, le=1.0)] = None,
        include_history: bool = False,
    ) -> list[dict[str, Any]]:
        """The user's current facts, oldest first; with ``q``, those matching it best first,
        each with its evidence (``min_similarity`` leaves out weak matches)."""
        return await memory.facts(
            q,
            user_id=user_id,
            kind=kind,
            top_k=top_k,
            min_similarity=min_similarity,
            include_history=include_history,
        )

    @app.post("/api/facts", status_code=201, tags=["facts"])
    async def add_fact(memory: Memory, body: FactIn, user_id: UserQuery = None) -> dict[str, Any]:
        """Keep a fact about the user (a repeat merges into the current one)."""
        return await memory.add_fact(
            body.text, kind=body.kind, subject=body.subject, user_id=user_id
        )

    @app.get("/api/facts/{fact_id}", tags=["facts"])
    async def get_fact(
        memory: Memory, fact_id: FactId, user_id: UserQuery = None
    ) -> dict[str, Any]:
        """One of the user's facts, current or history."""
        return await memory.fact(fact_id, user_id)

    @app.get("/api/facts/{fact_id}/history", tags=["facts"])
    async def fact_history(
        memory: Memory, fact_id: FactId, user_id: UserQuery = None
    ) -> list[dict[str, Any]]:
        """The values the fact has had, oldest first."""
        return await memory.fact_history(fact_id, user_id)

    @app.patch("/api/facts/{fact_id}", tags=["facts"])
    async def correct_fact(
        memory: Memory, fact_id: FactId, body: FactCorrection, user_id: UserQuery = None
    ) -> dict[str, Any]:
        """Correct a current fact: the new fact (the old one kept as history)."""
        return await memory.correct_fact(fact_id, body.text, user_id)

    @app.post("/api/facts/{fact_id}/complete", tags=["facts"])
    async def complete_task(
        memory: Memory, fact_id: FactId, user_id: UserQuery = None
    ) -> dict[str, Any]:
        """Close a task (or a fact that stopped being true), kept as history."""
        return await memory.complete_task(fact_id, user_id)

    @app.delete("/api/facts/{fact_id}", tags=["facts"])
    async def forget_fact(
        memory: Memory, fact_id: FactId, user_id: UserQuery = None
    ) -> dict[str, Any]:
        """Delete a fact for good: nothing finds it afterwards."""
        return await memory.forget_fact(fact_id, user_id)

    @app.get("/api/sessions/{session_id:path}", tags=["sessions"])
    async def get_session(memory: Memory, session_id: SessionId) -> dict[str, Any]:
        """A session's record: owner, system prompt, metadata, counts, summary."""
        return await memory.get_session(session_id)

    @app.patch("/api/sessions/{session_id:path}", tags=["sessions"])
    async def update_session(
        memory: Memory, session_id: SessionId, body: SessionPatch
    ) -> dict[str, Any]:
        """Change a session's system prompt or metadata (an admin key: also its owner)."""
        return await memory.update_session(session_id, changes=body.model_dump(exclude_unset=True))

    @app.delete("/api/sessions/{session_id:path}", tags=["sessions"])
    async def delete_session(memory: Memory, session_id: SessionId) -> dict[str, Any]:
        """Delete a session with its messages and their vectors."""
        return await memory.delete_session(session_id)


def create_app(
    db: str | MemoryManager,
    *,
    auth: bool = True,
    cors_origins: Sequence[str] = (),
    embedding: Any = None,
    vector_store: Any = None,
    host: str = "127.0.0.1",
    max_concurrent_per_key: int = MAX_CONCURRENT_PER_KEY,
) -> FastAPI:
    """The app serving ``db`` (a path, a ``postgresql://`` URL, or an open manager, which the
    app then does not close).

    ``auth=False`` serves every request as an admin: only for a loopback demo (``harombe
    serve`` refuses it on another host). ``embedding`` and ``vector_store`` are the manager's
    (off by default: keyword search, and nothing that one process alone may hold open).
    ``max_concurrent_per_key`` caps the requests one key has in flight (0: no cap).
    """
    owned = not isinstance(db, MemoryManager)
    manager = (
        MemoryManager(db, embedding=embedding, vector_store=vector_store)
        if not isinstance(db, MemoryManager)
        else db
    )
    state = ServerState(manager, None if auth else Scope(user_id=None, admin=True))
    endpoint = McpEndpoint(build_mcp(manager, host=host), state)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        async with endpoint.running():
            try:
                yield
            finally:
                if owned:
                    await manager.aclose()

    app = FastAPI(
        title="harombe memory",
        version="1",
        description="Conversation memory over HTTP. Send `Authorization: Bearer <key>`.",
        dependencies=[Depends(current_scope)],
        lifespan=lifespan,
    )
    app.state.harombe = state

    @app.exception_handler(err.HarombeError)
    async def harombe_error(request: Request, exc: err.HarombeError) -> Any:
        page = error_page(request, exc, status_of(exc))
        if page is not None:
            return page
        return JSONResponse(
            {"error": type(exc).__name__, "detail": str(exc)}, status_code=status_of(exc)
        )

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, exc: RequestValidationError) -> Any:
        return await harombe_error(request, err.InvalidInputError(_invalid_text(exc)))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Any:
        return JSONResponse(
            {"error": "HTTPError", "detail": str(exc.detail)},
            status_code=exc.status_code,
            headers=exc.headers,
        )

    add_api(app)
    add_inspector(app)
    endpoint.add_to(app)
    app.add_middleware(_BodyLimit)
    app.add_middleware(_PerKeyLimit, limit=max_concurrent_per_key)
    app.add_middleware(_SameOriginWrites, allowed=cors_origins)
    app.add_middleware(_SecurityHeaders)
    if host in LOOPBACK_HOSTS:
        # A page on another site whose name is re-pointed at 127.0.0.1 (DNS rebinding) sends
        # its own name as Host: refused, so a loopback server (--no-auth included) answers
        # only requests addressed to this machine.
        from starlette.middleware.trustedhost import TrustedHostMiddleware

        app.add_middleware(TrustedHostMiddleware, allowed_hosts=["127.0.0.1", "localhost", "[::1]"])
    if cors_origins:
        from fastapi.middleware.cors import CORSMiddleware

        app.add_middleware(
            CORSMiddleware,
            allow_origins=list(cors_origins),
            allow_methods=["GET", "POST", "PATCH", "DELETE"],
            allow_headers=["Authorization", "Content-Type", "Mcp-Session-Id"],
        )
    return app
