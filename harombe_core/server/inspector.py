"""The web inspector: server-rendered pages to look inside memory, with no JavaScript at all.

Users, sessions, a session's messages with its thread graph (an SVG drawn here) and summary,
the context a model would get for a strategy and budget, search with each hit's evidence, and a
user's profile. The pages are Jinja2 templates (``templates/``), routes of the same app as the
JSON API, so they take the same key dependency and read through the same
:class:`~harombe_core.server.memory.ScopedMemory`. A browser cannot send a Bearer header, so
``/login`` (the one page without a key) sets the key as an HttpOnly, SameSite=Strict cookie that
the app accepts for GET requests only; every page is a read.
"""

from __future__ import annotations

from html import escape
from pathlib import Path
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates
from starlette.routing import Route

from harombe_core.errors import HarombeError
from harombe_core.server.auth import KEY_COOKIE, scope_for_key, scoped
from harombe_core.server.memory import ScopedMemory

__all__ = ["PAGE_MESSAGES", "add_inspector", "error_page", "graph_svg"]

Memory = Annotated[ScopedMemory, Depends(scoped)]
templates = Jinja2Templates(directory=str(Path(__file__).with_name("templates")))

#: Sessions the sessions page lists at first (most recently active first), and the most it
#: lists when asked for more (``/?limit=N``).
LISTED_SESSIONS, MAX_LISTED = 200, 10_000

#: The most messages one session page shows; a longer session is paged (``?after=ID``), so
#: every message of a session of any length can be reached and no page grows with history.
PAGE_MESSAGES = 2000

# Thread graph drawing, in SVG user units.
_STEP_X, _STEP_Y, _RADIUS, _PAD = 34, 40, 11, 20
_COLOURS = {"user": "#a7c7e7", "assistant": "#cdb4f6", "system": "#f2c57c", "tool": "#9fd8b5"}


def graph_svg(messages: list[dict[str, Any]]) -> str:
    """The session's thread graph as an inline SVG: a tree layout, one circle per message.

    A message hangs under its ``parent_id`` (set by a threaded memory); in a session without
    any, each hangs under the one before it, so a linear conversation is one straight thread.
    Leaves are spread left to right, each parent centred over its children.
    """
    if not messages:
        return '<p class="meta">No messages.</p>'
    ids = [m["id"] for m in messages]
    known = set(ids)
    threaded = any(m.get("parent_id") in known for m in messages)
    parent: dict[int, int | None] = {}
    for i, m in enumerate(messages):
        if threaded:
            parent[m["id"]] = m["parent_id"] if m.get("parent_id") in known else None
        else:
            parent[m["id"]] = ids[i - 1] if i else None
    children: dict[int | None, list[int]] = {}
    for mid in ids:
        children.setdefault(parent[mid], []).append(mid)
    x: dict[int, float] = {}
    depth: dict[int, int] = {}
    next_leaf = 0.0
    # iterative post-order, so a long linear session cannot exhaust the recursion limit
    for root in children.get(None, []):
        stack: list[tuple[int, int, bool]] = [(root, 0, False)]
        while stack:
            node, level, done = stack.pop()
            kids = children.get(node, [])
            if done:
                x[node] = (x[kids[0]] + x[kids[-1]]) / 2
                continue
            depth[node] = level
            if not kids:
                x[node] = next_leaf
                next_leaf += 1
                continue
            stack.append((node, level, True))
            stack.extend((kid, level + 1, False) for kid in reversed(kids))
    width = int(_PAD * 2 + max(x.values()) * _STEP_X + 1)
    height = int(_PAD * 2 + max(depth.values()) * _STEP_Y + 1)
    role = {m["id"]: m["role"] for m in messages}
    text = {m["id"]: m["content"] for m in messages}

    def at(mid: int) -> tuple[float, float]:
        return _PAD + x[mid] * _STEP_X, _PAD + depth[mid] * _STEP_Y

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" id="graph" width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="thread graph of {len(ids)} messages">'
    ]
    for mid in ids:
        up = parent[mid]
        if up is not None:
            (x1, y1), (x2, y2) = at(up), at(mid)
            parts.append(
                f'<line x1="{x1:.0f}" y1="{y1:.0f}" x2="{x2:.0f}" y2="{y2:.0f}" '
                'stroke="#7d8794" stroke-width="2"/>'
            )
    for mid in ids:
        cx, cy = at(mid)
        colour = _COLOURS.get(role[mid], "#dddddd")
        tip = escape(f"#{mid} {role[mid]}: {text[mid][:120]}")
        parts.append(
            f'<a href="#m{mid}"><circle cx="{cx:.0f}" cy="{cy:.0f}" r="{_RADIUS}" '
            f'fill="{colour}" stroke="#26324a" stroke-width="1.5"><title>{tip}</title></circle></a>'
        )
    parts.append("</svg>")
    return "".join(parts)


def _page(request: Request, name: str, status: int = 200, **values: Any) -> HTMLResponse:
    values.setdefault("scope", getattr(request.state, "scope", None))
    return templates.TemplateResponse(request, name, values, status_code=status)


def error_page(request: Request, error: HarombeError, status: int) -> Response | None:
    """The inspector's answer to an error on one of its pages (None for the API and MCP): the
    login page when there is no valid key, else the error's message."""
    path = request.url.path
    if path.startswith(("/api/", "/mcp")) or "text/html" not in request.headers.get("accept", ""):
        return None
    if status == 401:
        return RedirectResponse("/login", status_code=303)
    return _page(
        request,
        "error.html",
        status,
        error_name=type(error).__name__,
        detail=str(error),
        code=status,
    )


async def _login_form(request: Request) -> Response:
    return _page(request, "login.html", scope=None, failed=False)


async def _login(request: Request) -> Response:
    """Check the pasted key and keep it in a cookie (never in a URL, never readable by script)."""
    form = await request.form()
    key = str(form.get("key") or "").strip()
    try:
        await scope_for_key(request.app.state.harombe, key or None)
    except HarombeError:
        return _page(request, "login.html", 401, scope=None, failed=True)
    response = RedirectResponse("/", status_code=303)
    response.set_cookie(
        KEY_COOKIE, key, httponly=True, samesite="strict", secure=request.url.scheme == "https"
    )
    return response


async def _logout(request: Request) -> Response:
    response = RedirectResponse("/login", status_code=303)
    response.delete_cookie(KEY_COOKIE)
    return response


def add_inspector(app: FastAPI) -> None:
    """The inspector's pages (each behind the app's key dependency), plus ``/login`` and
    ``/logout``, which are plain routes: they are how a browser gets a key to send."""
    from harombe_core.context import STRATEGIES

    @app.get("/", include_in_schema=False, response_class=HTMLResponse)
    async def index(
        request: Request,
        memory: Memory,
        limit: Annotated[int, Query(ge=1, le=MAX_LISTED)] = LISTED_SESSIONS,
    ) -> Response:
        # one more than shown tells whether older sessions exist (a "show more" link)
        sessions = await memory.list_sessions(limit=limit + 1)
        more = len(sessions) > limit and limit < MAX_LISTED
        return _page(
            request,
            "index.html",
            sessions=sessions[:limit],
            users=await memory.users(),
            user=None,
            more_limit=min(limit * 5, MAX_LISTED) if more else None,
        )

    @app.get("/users/{user_id:path}", include_in_schema=False, response_class=HTMLResponse)
    async def user(request: Request, memory: Memory, user_id: str) -> Response:
        return _page(request, "user.html", profile=await memory.profile(user_id))

    @app.get("/sessions/{session_id:path}", include_in_schema=False, response_class=HTMLResponse)
    async def session(
        request: Request,
        memory: Memory,
        session_id: str,
        strategy: str = "simple",
        max_tokens: Annotated[int, Query(ge=0)] = 2000,
        after: Annotated[int | None, Query(ge=0)] = None,
        limit: Annotated[int, Query(ge=1, le=PAGE_MESSAGES)] = PAGE_MESSAGES,
    ) -> Response:
        record = await memory.get_session(session_id)
        # one more than shown tells whether a next page exists without counting the session
        messages = await memory.messages(session_id, limit=limit + 1, after_id=after)
        more = len(messages) > limit
        messages = messages[:limit]
        context = await memory.context(session_id, strategy=strategy, max_tokens=max_tokens)
        return _page(
            request,
            "session.html",
            session=record,
            messages=messages,
            graph=graph_svg(messages),
            context=context,
            strategies=list(STRATEGIES),
            strategy=strategy,
            max_tokens=max_tokens,
            after=after,
            limit=limit,
            next_after=messages[-1]["id"] if more else None,
        )

    @app.get("/search", include_in_schema=False, response_class=HTMLResponse)
    async def search(
        request: Request,
        memory: Memory,
        q: str = "",
        top_k: Annotated[int, Query(ge=1, le=100)] = 20,
    ) -> Response:
        hits = await memory.search(q, top_k=top_k) if q.strip() else []
        return _page(request, "search.html", q=q, top_k=top_k, hits=hits)

    app.router.routes.append(Route("/login", _login_form, methods=["GET"]))
    app.router.routes.append(Route("/login", _login, methods=["POST"]))
    app.router.routes.append(Route("/logout", _logout, methods=["GET"]))
