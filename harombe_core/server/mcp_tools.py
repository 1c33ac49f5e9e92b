"""The MCP server: memory tools for assistants, over streamable HTTP (``/mcp``) or stdio.

Built with the official ``mcp`` SDK's :class:`~mcp.server.fastmcp.FastMCP` (the 1.x line, which
``langchain-mcp-adapters`` and the assistants' own SDKs use): each tool is a
typed Python function, and its input schema comes from the signature (names, types, defaults,
the docstring's description), so the schema an assistant sees cannot drift from the code.

Each tool acts for one scope, like every route of the JSON API, through
:class:`~harombe_core.server.memory.ScopedMemory`. Over stdio (``harombe mcp --user ann``) the
scope is fixed when the server starts: the local user chooses whose memory it serves. Over
HTTP it is the scope :class:`McpEndpoint` resolved from the request's API key before the SDK
saw the request; a request without a live key never reaches a tool.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from typing import TYPE_CHECKING, Any, Literal

from mcp.server.fastmcp import Context, FastMCP
from mcp.server.fastmcp.exceptions import ToolError
from mcp.server.transport_security import TransportSecuritySettings
from mcp.types import PARSE_ERROR
from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.routing import Route

from harombe_core.errors import HarombeError, InvalidInputError
from harombe_core.server.auth import (
    LOOPBACK_HOSTS,
    ServerState,
    bearer_key,
    scope_for_key,
    status_of,
)
from harombe_core.server.keys import NotAuthenticatedError, Scope
from harombe_core.server.memory import ScopedMemory

if TYPE_CHECKING:
    from fastapi import FastAPI

    from harombe_core.facts.models import FactHit
    from harombe_core.manager import MemoryManager
    from harombe_core.models import Message, SearchHit
__all__ = ["SCOPE_KEY", "TOOLS", "McpEndpoint", "build_mcp", "run_stdio"]

#: Where :class:`McpEndpoint` leaves the resolved scope in the ASGI scope of a request.
SCOPE_KEY = "harombe.scope"

#: The tools every MCP server of harombe offers, by name.
TOOLS = (
    "remember",
    "search_memory",
    "get_context",
    "list_sessions",
    "profile",
    "forget",
    "remember_fact",
    "search_facts",
    "complete_task",
    "forget_fact",
)

#: The conversation an assistant's memories go to when it names no session.
DEFAULT_CONVERSATION = "memory"


#: Digits kept of a score in a tool's answer: enough to order and compare hits, and each digit
#: more is tokens an assistant pays for.
SCORE_DIGITS = 3


def brief_message(message: Message) -> dict[str, Any]:
    """A message as an assistant needs it: role and text, plus a name, tool calls or the tool
    call answered when it has them. What the JSON API adds (metadata such as LangChain's ``lc``
    ids and ``langgraph_message`` hashes, token counts, empty fields) is left out: each of those
    characters is tokens an assistant pays for on every call."""
    brief: dict[str, Any] = {"role": message.role, "content": message.content}
    for field in ("name", "tool_calls", "tool_call_id"):
        value = getattr(message, field)
        if value:
            brief[field] = value
    return brief


def brief_hit(hit: SearchHit) -> dict[str, Any]:
    """A search hit for an assistant: where it is, when it was said, the brief message and its
    score, with the meaning and keyword evidence that matched (an absent one is left out)."""
    message = hit.message
    brief: dict[str, Any] = {"session_id": hit.session_id, "message_id": message.id}
    brief.update(brief_message(message))
    if message.created_at is not None:
        brief["created_at"] = message.created_at.isoformat(timespec="seconds")
    brief["score"] = round(hit.score, SCORE_DIGITS)
    for name, value in (("vector_score", hit.vector_score), ("keyword_score", hit.keyword_score)):
        if value is not None:
            brief[name] = round(value, SCORE_DIGITS)
    return brief


def brief_fact(fact: Mapping[str, Any]) -> dict[str, Any]:
    """A fact (its JSON record, :meth:`~harombe_core.facts.models.Fact.to_dict`) for an
    assistant: its id (to complete or forget it), kind, text, and its subject and status (a
    task's) when it has them; since when it holds, to the day."""
    brief: dict[str, Any] = {"fact_id": fact["id"], "kind": fact["kind"], "text": fact["text"]}
    if fact["subject"]:
        brief["subject"] = fact["subject"]
    if fact["status"]:  # a task's open / done
        brief["status"] = fact["status"]
    brief["since"] = str(fact["valid_from"])[:10]
    return brief


def brief_fact_hit(hit: FactHit) -> dict[str, Any]:
    """A fact found by a search, with the evidence that matched (3 digits)."""
    brief = brief_fact(hit.fact.to_dict())
    brief["score"] = round(hit.score, SCORE_DIGITS)
    for name, value in (("vector_score", hit.vector_score), ("keyword_score", hit.keyword_score)):
        if value is not None:
            brief[name] = round(value, SCORE_DIGITS)
    return brief


@contextmanager
def _told() -> Iterator[None]:
    """A typed harombe error reaches the assistant with its class and message (the SDK shows
    an assistant only a generic line for any other exception)."""
    try:
        yield
    except HarombeError as exc:
        raise ToolError(f"{type(exc).__name__}: {exc}") from exc


def build_mcp(
    manager: MemoryManager, fixed: Scope | None = None, *, host: str = "127.0.0.1"
) -> FastMCP:
    """The MCP server over ``manager``: every tool in :data:`TOOLS`, acting for ``fixed`` (stdio)
    or for the scope of each HTTP request's key.

    Over HTTP it is stateless with JSON responses, so any process of a deployment can answer
    any request; on a loopback ``host`` the SDK's DNS-rebinding guard is on, elsewhere the API
    key is the guard.
    """
    loopback = host in LOOPBACK_HOSTS
    mcp = FastMCP(
        "harombe",
        instructions=(
            "Long-term conversation memory. Use remember to keep something said, "
            "search_memory to find it again, get_context for what to put in a prompt, "
            "profile for what is known about the user; remember_fact, search_facts, "
            "complete_task and forget_fact for single facts and tasks about the user."
        ),
        host=host,
        streamable_http_path="/mcp",
        stateless_http=True,
        json_response=True,
        log_level="WARNING",
        transport_security=None
        if loopback
        else TransportSecuritySettings(enable_dns_rebinding_protection=False),
    )

    def memory(ctx: Context) -> ScopedMemory:
        if fixed is not None:
            return ScopedMemory(manager, fixed)
        request = ctx.request_context.request
        scope = None if request is None else request.scope.get(SCOPE_KEY)
        if not isinstance(scope, Scope):  # a request that bypassed McpEndpoint: refuse
            raise NotAuthenticatedError("no API key: this MCP server needs a Bearer key.")
        return ScopedMemory(manager, scope)

    def conversation(scoped: ScopedMemory, session_id: str | None) -> str:
        if session_id is not None:
            return session_id
        user = scoped.user()
        if user is None:
            return DEFAULT_CONVERSATION
        return manager.conversation_session_id(user, DEFAULT_CONVERSATION)

    @mcp.tool()
    async def remember(
        content: str,
        ctx: Context,
        role: Literal["user", "assistant"] = "user",
        session_id: str | None = None,
    ) -> dict[str, Any]:
        """Keep a message in memory (in the user's default memory conversation unless
        session_id names one of theirs). Returns the session and the message id."""
        with _told():
            if not content.strip():
                # an assistant's empty call would keep a blank message and report success
                raise InvalidInputError(
                    "remember needs the text to keep in content; it was empty or only spaces."
                )
            scoped = memory(ctx)
            sid = conversation(scoped, session_id)
            return await scoped.append(sid, [{"role": role, "content": content}])

    @mcp.tool()
    async def search_memory(
        query: str,
        ctx: Context,
        top_k: int = 5,
        session_id: str | None = None,
        min_similarity: float | None = None,
    ) -> list[dict[str, Any]]:
        """Find past messages relevant to query, best first: each with its session, role, text,
        date and score (vector_score: matched by meaning; keyword_score: by keyword); within one
        session when session_id is given. Search by meaning returns the nearest messages
        however weak: min_similarity (-1 to 1, e.g. 0.3) leaves out those whose vector_score is
        below it, so an empty answer means nothing related is remembered."""
        with _told():
            hits = await memory(ctx).search_hits(
                query, top_k=top_k, session_id=session_id, min_similarity=min_similarity
            )
            return [brief_hit(hit) for hit in hits]

    @mcp.tool()
    async def get_context(
        session_id: str,
        ctx: Context,
        max_tokens: int = 2000,
        strategy: Literal["simple", "summarization", "hybrid", "threaded"] = "simple",
        query: str | None = None,
    ) -> dict[str, Any]:
        """The messages of a session to give a model, within max_tokens, chosen by strategy
        (each with its role and text), and how many tokens they count."""
        with _told():
            messages = await memory(ctx).context_messages(
                session_id, strategy=strategy, max_tokens=max_tokens, query=query
            )
            return {
                "messages": [brief_message(m) for m in messages],
                "tokens": sum(m.token_count or 0 for m in messages),
            }

    @mcp.tool()
    async def list_sessions(ctx: Context, limit: int = 20) -> list[dict[str, Any]]:
        """The user's sessions, most recent activity first."""
        with _told():
            return await memory(ctx).list_sessions(limit)

    @mcp.tool()
    async def profile(ctx: Context) -> dict[str, Any]:
        """What memory holds about the user: their profile, current facts, open tasks and
        summaries of their recent sessions."""
        with _told():
            return await memory(ctx).profile()

    @mcp.tool()
    async def forget(session_id: str, ctx: Context) -> dict[str, Any]:
        """Delete a session of the user's with all its messages, for good."""
        with _told():
            return await memory(ctx).delete_session(session_id)

    @mcp.tool()
    async def remember_fact(
        text: str,
        ctx: Context,
        kind: Literal["fact", "preference", "task", "decision"] = "fact",
        subject: str | None = None,
    ) -> dict[str, Any]:
        """Keep one fact about the user (a preference, an open task, a decision). Give subject
        (e.g. "home city") when it has one: a new value of the same subject replaces the old,
        which is kept as history. A repeat of a current fact is merged, not doubled."""
        with _told():
            return brief_fact(await memory(ctx).add_fact(text, kind=kind, subject=subject))

    @mcp.tool()
    async def search_facts(
        query: str, ctx: Context, top_k: int = 5, min_similarity: float | None = None
    ) -> list[dict[str, Any]]:
        """Find the user's current facts and tasks relevant to query, best first. A user has
        few facts, so without min_similarity (-1 to 1, e.g. 0.3) the nearest come back however
        weak; with it an empty answer means nothing related is known."""
        with _told():
            hits = await memory(ctx).fact_hits(query, top_k=top_k, min_similarity=min_similarity)
            return [brief_fact_hit(hit) for hit in hits]

    @mcp.tool()
    async def complete_task(fact_id: int, ctx: Context) -> dict[str, Any]:
        """Mark the user's task done (or a fact no longer true); it is kept as history."""
        with _told():
            return brief_fact(await memory(ctx).complete_task(fact_id))

    @mcp.tool()
    async def forget_fact(fact_id: int, ctx: Context) -> dict[str, Any]:
        """Delete one of the user's facts for good."""
        with _told():
            return await memory(ctx).forget_fact(fact_id)

    return mcp


class McpEndpoint:
    """``/mcp`` of the app: resolves the request's key like every route, then hands the request
    to the SDK's streamable HTTP transport (stateless, JSON responses: any process of a
    deployment can answer any request)."""

    def __init__(self, mcp: FastMCP, state: ServerState) -> None:
        mcp.streamable_http_app()  # makes the SDK's session manager
        self.mcp = mcp
        self.state = state

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """The SDK's session manager, for the app's lifetime."""
        async with self.mcp.session_manager.run():
            yield

    def add_to(self, app: FastAPI) -> None:
        """Serve at exactly ``/mcp`` (a route, not a mount: no redirect to ``/mcp/``).

        GET is answered 405, as the MCP spec lets a server that offers no stream of its own
        do: a stateless server never sends anything unasked, and the SDK held each GET open
        as an empty stream until the client left (a file descriptor and a task each, as
        many as any key cared to open)."""
        app.router.routes.append(Route("/mcp", endpoint=self, methods=["POST", "DELETE"]))

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            resolved = await scope_for_key(self.state, bearer_key(Headers(scope=scope)))
        except HarombeError as exc:
            response = JSONResponse(
                {"error": type(exc).__name__, "detail": str(exc)}, status_code=status_of(exc)
            )
            await response(scope, receive, send)
            return
        scope[SCOPE_KEY] = resolved
        if scope.get("method") == "POST":
            receive = await _parsable(scope, receive, send)
            if receive is None:
                return
        await self.mcp.session_manager.handle_request(scope, receive, send)


async def _parsable(scope: Any, receive: Any, send: Any) -> Any:
    """The request's ``receive`` again, once its body is known to parse as JSON at all; None
    when it does not (a 400 JSON-RPC parse error is sent) or the client disconnected before
    sending all of it (nothing is sent: the SDK would log a traceback for each such client).

    The SDK answers invalid JSON with a parse error, but JSON nested deeper than Python's
    recursion limit raises RecursionError, which it answers with a 500. The body is already
    bounded (the app's body limit), so it is read here, checked, and handed on whole.
    """
    read: list[Any] = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None  # the client left mid-body: nobody to answer (the SDK logs a traceback)
        read.append(message)
        if not message.get("more_body", False):
            break
    try:
        json.loads(b"".join(m.get("body", b"") for m in read))
    except RecursionError:
        error = {"code": PARSE_ERROR, "message": "Parse error: JSON nested too deeply."}
        response = JSONResponse({"jsonrpc": "2.0", "id": None, "error": error}, status_code=400)
        await response(scope, receive, send)
        return None
    except ValueError:
        pass  # the SDK's own parse error answers it

    async def replayed() -> Any:
        return read.pop(0) if read else await receive()

    return replayed


def run_stdio(manager: MemoryManager, scope: Scope) -> None:
    """Serve ``scope``'s memory over stdio until the client closes it (``harombe mcp``)."""
    build_mcp(manager, fixed=scope).run("stdio")
