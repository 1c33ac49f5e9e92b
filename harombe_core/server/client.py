"""HarombeClient: a Python app's handle on a ``harombe serve`` memory, sync and async.

Each method is one request, described once as a :class:`_Request` (method, path, query, body)
by :class:`_Requests`; :class:`HarombeClient` sends it with ``httpx.Client`` and
:class:`AsyncHarombeClient` with ``httpx.AsyncClient``, so the two cannot drift apart. An error
response becomes :class:`HarombeServerError` carrying the server's status code, the harombe
error class name and its message (the same text the library would raise in-process).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any
from urllib.parse import quote

import httpx

from harombe_core.errors import HarombeError

__all__ = ["AsyncHarombeClient", "HarombeClient", "HarombeServerError"]


class HarombeServerError(HarombeError):
    """The server refused a request: ``status`` (HTTP), ``error`` (the harombe error class)."""

    def __init__(self, status: int, error: str, detail: str) -> None:
        super().__init__(f"{error} ({status}): {detail}")
        self.status = status
        self.error = error
        self.detail = detail


@dataclass(frozen=True, slots=True)
class _Request:
    method: str
    path: str
    params: dict[str, Any] = field(default_factory=dict)
    json: Any = None
    text: bool = False  # the answer is text (an export), not JSON


def _sid(session_id: str) -> str:
    return quote(session_id, safe="")


def _query(**values: Any) -> dict[str, Any]:
    return {k: v for k, v in values.items() if v is not None}


class _Requests:
    """Every call of the API as a request; the clients only send them."""

    @staticmethod
    def me() -> _Request:
        return _Request("GET", "/api/me")

    @staticmethod
    def list_sessions(limit: int = 20, user_id: str | None = None) -> _Request:
        return _Request("GET", "/api/sessions", _query(limit=limit, user_id=user_id))

    @staticmethod
    def create_session(**fields: Any) -> _Request:
        return _Request("POST", "/api/sessions", json=_query(**fields))

    @staticmethod
    def get_session(session_id: str) -> _Request:
        return _Request("GET", f"/api/sessions/{_sid(session_id)}")

    @staticmethod
    def update_session(session_id: str, **changes: Any) -> _Request:
        return _Request("PATCH", f"/api/sessions/{_sid(session_id)}", json=changes)

    @staticmethod
    def delete_session(session_id: str) -> _Request:
        return _Request("DELETE", f"/api/sessions/{_sid(session_id)}")

    @staticmethod
    def save_messages(
        session_id: str, messages: Sequence[Mapping[str, Any]], user_id: str | None = None
    ) -> _Request:
        body = _query(messages=[dict(m) for m in messages], user_id=user_id)
        return _Request("POST", f"/api/sessions/{_sid(session_id)}/messages", json=body)

    @staticmethod
    def get_messages(
        session_id: str, limit: int | None = None, after_id: int | None = None
    ) -> _Request:
        path = f"/api/sessions/{_sid(session_id)}/messages"
        return _Request("GET", path, _query(limit=limit, after_id=after_id))

    @staticmethod
    def get_window(session_id: str, max_tokens: int | None = None) -> _Request:
        path = f"/api/sessions/{_sid(session_id)}/window"
        return _Request("GET", path, _query(max_tokens=max_tokens))

    @staticmethod
    def get_context(session_id: str, **options: Any) -> _Request:
        return _Request("GET", f"/api/sessions/{_sid(session_id)}/context", _query(**options))

    @staticmethod
    def summarize(session_id: str) -> _Request:
        return _Request("POST", f"/api/sessions/{_sid(session_id)}/summary")

    @staticmethod
    def export(session_id: str, format: str = "json") -> _Request:
        path = f"/api/sessions/{_sid(session_id)}/export"
        return _Request("GET", path, {"format": format}, text=True)

    @staticmethod
    def search(
        query: str,
        top_k: int = 10,
        session_id: str | None = None,
        user_id: str | None = None,
        min_similarity: float | None = None,
    ) -> _Request:
        params = _query(
            q=query,
            top_k=top_k,
            session_id=session_id,
            user_id=user_id,
            min_similarity=min_similarity,
        )
        return _Request("GET", "/api/search", params)

    @staticmethod
    def forget_user(user_id: str) -> _Request:
        return _Request("DELETE", f"/api/users/{_sid(user_id)}")

    @staticmethod
    def profile(user_id: str | None = None) -> _Request:
        return _Request("GET", "/api/profile", _query(user_id=user_id))

    @staticmethod
    def facts(
        query: str | None,
        user_id: str | None,
        kind: str | None,
        top_k: int,
        min_similarity: float | None,
        include_history: bool,
    ) -> _Request:
        params = _query(
            q=query,
            user_id=user_id,
            kind=kind,
            top_k=top_k,
            min_similarity=min_similarity,
            include_history=include_history or None,
        )
        return _Request("GET", "/api/facts", params)

    @staticmethod
    def add_fact(
        text: str, kind: str = "fact", subject: str | None = None, user_id: str | None = None
    ) -> _Request:
        body = _query(text=text, kind=kind, subject=subject)
        return _Request("POST", "/api/facts", _query(user_id=user_id), json=body)

    @staticmethod
    def fact(fact_id: int, user_id: str | None = None, part: str = "") -> _Request:
        return _Request("GET", f"/api/facts/{int(fact_id)}{part}", _query(user_id=user_id))

    @staticmethod
    def correct_fact(fact_id: int, text: str, user_id: str | None = None) -> _Request:
        path, params = f"/api/facts/{int(fact_id)}", _query(user_id=user_id)
        return _Request("PATCH", path, params, json={"text": text})

    @staticmethod
    def complete_task(fact_id: int, user_id: str | None = None) -> _Request:
        return _Request("POST", f"/api/facts/{int(fact_id)}/complete", _query(user_id=user_id))

    @staticmethod
    def forget_fact(fact_id: int, user_id: str | None = None) -> _Request:
        return _Request("DELETE", f"/api/facts/{int(fact_id)}", _query(user_id=user_id))


def _answer(request: _Request, response: httpx.Response) -> Any:
    if response.status_code >= 400:
        try:
            body = response.json()
            error, detail = body.get("error", "HTTPError"), body.get("detail", response.text)
        except ValueError:
            error, detail = "HTTPError", response.text
        if not isinstance(detail, str):  # FastAPI's own validation errors are lists
            detail = str(detail)
        raise HarombeServerError(response.status_code, error, detail)
    return response.text if request.text else response.json()


class _Base:
    _requests = _Requests

    def __init__(self, base_url: str, api_key: str | None, timeout: float) -> None:
        self.base_url = base_url.rstrip("/")
        self.headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.timeout = timeout


class HarombeClient(_Base):
    """A blocking client: ``HarombeClient("http://127.0.0.1:8765", api_key=...)``.

    Use it as a context manager (or call :meth:`close`) to release its connections.
    """

    def __init__(self, base_url: str, api_key: str | None = None, *, timeout: float = 30.0) -> None:
        super().__init__(base_url, api_key, timeout)
        self._http = httpx.Client(base_url=self.base_url, headers=self.headers, timeout=timeout)

    def _send(self, request: _Request) -> Any:
        response = self._http.request(
            request.method, request.path, params=request.params, json=request.json
        )
        return _answer(request, response)

    def me(self) -> dict[str, Any]:
        """Whose memory the key reaches: ``{"user_id": ..., "admin": ...}``."""
        return self._send(self._requests.me())

    def list_sessions(self, limit: int = 20, user_id: str | None = None) -> list[dict[str, Any]]:
        """Sessions, most recent activity first."""
        return self._send(self._requests.list_sessions(limit, user_id))

    def create_session(self, **fields: Any) -> dict[str, Any]:
        """A new session (``session_id``, ``system_prompt``, ``metadata``, admin: ``user_id``)."""
        return self._send(self._requests.create_session(**fields))

    def get_session(self, session_id: str) -> dict[str, Any]:
        """A session's record."""
        return self._send(self._requests.get_session(session_id))

    def update_session(self, session_id: str, **changes: Any) -> dict[str, Any]:
        """Change ``system_prompt`` or ``metadata``; the session after."""
        return self._send(self._requests.update_session(session_id, **changes))

    def delete_session(self, session_id: str) -> bool:
        """Delete a session; True if it existed."""
        return bool(self._send(self._requests.delete_session(session_id))["deleted"])

    def save_messages(
        self, session_id: str, messages: Sequence[Mapping[str, Any]], user_id: str | None = None
    ) -> list[int]:
        """Append messages in one transaction; their ids (acknowledged means stored)."""
        request = self._requests.save_messages(session_id, messages, user_id)
        return list(self._send(request)["ids"])

    def save_message(self, session_id: str, role: str, content: str, **fields: Any) -> int:
        """Append one message; its id."""
        message = {"role": role, "content": content, **fields}
        return self.save_messages(session_id, [message])[0]

    def get_messages(
        self, session_id: str, limit: int | None = None, after_id: int | None = None
    ) -> list[dict[str, Any]]:
        """A session's messages in order."""
        return self._send(self._requests.get_messages(session_id, limit, after_id))

    def get_window(self, session_id: str, max_tokens: int | None = None) -> dict[str, Any]:
        """The newest messages that fit ``max_tokens``: ``{"messages", "tokens"}``."""
        return self._send(self._requests.get_window(session_id, max_tokens))

    def get_context(self, session_id: str, **options: Any) -> dict[str, Any]:
        """What a model would be given (``strategy``, ``max_tokens``, ``query``, ``full``)."""
        return self._send(self._requests.get_context(session_id, **options))

    def summarize(self, session_id: str) -> dict[str, Any]:
        """Update the session's summary; the session with it."""
        return self._send(self._requests.summarize(session_id))

    def export(self, session_id: str, format: str = "json") -> str:
        """The session as export text (json, jsonl or text)."""
        return str(self._send(self._requests.export(session_id, format)))

    def search(
        self,
        query: str,
        top_k: int = 10,
        session_id: str | None = None,
        user_id: str | None = None,
        min_similarity: float | None = None,
    ) -> list[dict[str, Any]]:
        """Relevant messages, best first, each with its evidence; ``min_similarity`` leaves out
        those whose cosine to the query is below it."""
        request = self._requests.search(query, top_k, session_id, user_id, min_similarity)
        return self._send(request)

    def profile(self, user_id: str | None = None) -> dict[str, Any]:
        """What memory holds about the user."""
        return self._send(self._requests.profile(user_id))

    def forget_user(self, user_id: str) -> int:
        """Erase everything stored for the user; how many sessions went."""
        return int(self._send(self._requests.forget_user(user_id))["sessions_deleted"])

    def facts(
        self,
        query: str | None = None,
        *,
        user_id: str | None = None,
        kind: str | None = None,
        top_k: int = 10,
        min_similarity: float | None = None,
        include_history: bool = False,
    ) -> list[dict[str, Any]]:
        """The user's current facts; with ``query``, those matching it best first, each as
        ``{"fact", "score", "vector_score", "keyword_score"}``."""
        request = self._requests.facts(query, user_id, kind, top_k, min_similarity, include_history)
        return self._send(request)

    def add_fact(
        self,
        text: str,
        *,
        kind: str = "fact",
        subject: str | None = None,
        user_id: str | None = None,
    ) -> dict[str, Any]:
        """Keep a fact about the user (fact, preference, task or decision); the fact."""
        return self._send(self._requests.add_fact(text, kind, subject, user_id))

    def get_fact(self, fact_id: int, user_id: str | None = None) -> dict[str, Any]:
        """One of the user's facts by id."""
        return self._send(self._requests.fact(fact_id, user_id))

    def get_fact_history(self, fact_id: int, user_id: str | None = None) -> list[dict[str, Any]]:
        """The values the fact has had, oldest first."""
        return self._send(self._requests.fact(fact_id, user_id, "/history"))

    def correct_fact(self, fact_id: int, text: str, user_id: str | None = None) -> dict[str, Any]:
        """Replace a current fact's text (the old one kept as history); the new fact."""
        return self._send(self._requests.correct_fact(fact_id, text, user_id))

    def complete_task(self, fact_id: int, user_id: str | None = None) -> dict[str, Any]:
        """Close a task, kept as history; the closed task."""
        return self._send(self._requests.complete_task(fact_id, user_id))

    def forget_fact(self, fact_id: int, user_id: str | None = None) -> bool:
        """Delete a fact for good (HarombeServerError 404 if the user has none of that id)."""
        return bool(self._send(self._requests.forget_fact(fact_id, user_id))["deleted"])

    def close(self) -> None:
        """Release the connections."""
        self._http.close()

    def __enter__(self) -> HarombeClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class AsyncHarombeClient(_Base):
    """:class:`HarombeClient` for asyncio: the same methods, awaited, ``a``-prefixed."""

    def __init__(self, base_url: str, api_key: str | None = None, *, timeout: float = 30.0) -> None:
        super().__init__(base_url, api_key, timeout)
        self._http = httpx.AsyncClient(
            base_url=self.base_url, headers=self.headers, timeout=timeout
        )

    async def _send(self, request: _Request) -> Any:
        response = await self._http.request(
            request.method, request.path, params=request.params, json=request.json
        )
        return _answer(request, response)

    async def ame(self) -> dict[str, Any]:
        return await self._send(self._requests.me())

    async def alist_sessions(
        self, limit: int = 20, user_id: str | None = None
    ) -> list[dict[str, Any]]:
        return await self._send(self._requests.list_sessions(limit, user_id))

    async def acreate_session(self, **fields: Any) -> dict[str, Any]:
        return await self._send(self._requests.create_session(**fields))

    async def aget_session(self, session_id: str) -> dict[str, Any]:
        return await self._send(self._requests.get_session(session_id))

    async def aupdate_session(self, session_id: str, **changes: Any) -> dict[str, Any]:
        return await self._send(self._requests.update_session(session_id, **changes))

    async def adelete_session(self, session_id: str) -> bool:
        return bool((await self._send(self._requests.delete_session(session_id)))["deleted"])

    async def asave_messages(
        self, session_id: str, messages: Sequence[Mapping[str, Any]], user_id: str | None = None
    ) -> list[int]:
        request = self._requests.save_messages(session_id, messages, user_id)
        return list((await self._send(request))["ids"])

    async def asave_message(self, session_id: str, role: str, content: str, **fields: Any) -> int:
        message = {"role": role, "content": content, **fields}
        return (await self.asave_messages(session_id, [message]))[0]

    async def aget_messages(
        self, session_id: str, limit: int | None = None, after_id: int | None = None
    ) -> list[dict[str, Any]]:
        return await self._send(self._requests.get_messages(session_id, limit, after_id))

    async def aget_window(self, session_id: str, max_tokens: int | None = None) -> dict[str, Any]:
        return await self._send(self._requests.get_window(session_id, max_tokens))

    async def aget_context(self, session_id: str, **options: Any) -> dict[str, Any]:
        return await self._send(self._requests.get_context(session_id, **options))

    async def asummarize(self, session_id: str) -> dict[str, Any]:
        return await self._send(self._requests.summarize(session_id))

    async def aexport(self, session_id: str, format: str = "json") -> str:
        return str(await self._send(self._requests.export(session_id, format)))

    async def asearch(
        self,
        query: str,
        top_k: int = 10,
        session_id: str | None = None,
        user_id: str | None = None,
        min_similarity: float | None = None,
    ) -> list[dict[str, Any]]:
        request = self._requests.search(query, top_k, session_id, user_id, min_similarity)
        return await self._send(request)

    async def aprofile(self, user_id: str | None = None) -> dict[str, Any]:
        return await self._send(self._requests.profile(user_id))

    async def aforget_user(self, user_id: str) -> int:
        return int((await self._send(self._requests.forget_user(user_id)))["sessions_deleted"])

    async def afacts(
        self,
        query: str | None = None,
        *,
        user_id: str | None = None,
        kind: str | None = None,
        top_k: int = 10,
        min_similarity: float | None = None,
        include_history: bool = False,
    ) -> list[dict[str, Any]]:
        request = self._requests.facts(query, user_id, kind, top_k, min_similarity, include_history)
        return await self._send(request)

    async def aadd_fact(
        self,
        text: str,
        *,
        kind: str = "fact",
        subject: str | None = None,
        user_id: str | None = None,
    ) -> dict[str, Any]:
        return await self._send(self._requests.add_fact(text, kind, subject, user_id))

    async def aget_fact(self, fact_id: int, user_id: str | None = None) -> dict[str, Any]:
        return await self._send(self._requests.fact(fact_id, user_id))

    async def aget_fact_history(
        self, fact_id: int, user_id: str | None = None
    ) -> list[dict[str, Any]]:
        return await self._send(self._requests.fact(fact_id, user_id, "/history"))

    async def acorrect_fact(
        self, fact_id: int, text: str, user_id: str | None = None
    ) -> dict[str, Any]:
        return await self._send(self._requests.correct_fact(fact_id, text, user_id))

    async def acomplete_task(self, fact_id: int, user_id: str | None = None) -> dict[str, Any]:
        return await self._send(self._requests.complete_task(fact_id, user_id))

    async def aforget_fact(self, fact_id: int, user_id: str | None = None) -> bool:
        return bool((await self._send(self._requests.forget_fact(fact_id, user_id)))["deleted"])

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncHarombeClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
