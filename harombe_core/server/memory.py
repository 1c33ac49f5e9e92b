"""What a request may do to memory, for one API key's scope: the one place isolation is decided.

The JSON API, the MCP tools and the inspector all go through :class:`ScopedMemory`, built per
request from the key's :class:`~harombe_core.server.keys.Scope`. Every method passes the scope's
user to the public :class:`~harombe_core.manager.MemoryManager` method it calls (its ``user_id``
argument), so the manager's own ownership checks (SessionOwnershipError, the store's user
filter on searches) do the enforcing; nothing here filters results after reading them. A user
key acts only as its own user; an admin key acts as the user a request names, or for every user.

A user key cannot tell another user's session from a missing one (no existence oracle): every
read, change or deletion of a session that is not its user's answers exactly as for an id that
does not exist (:class:`~harombe_core.errors.SessionNotFoundError`, same message, HTTP 404), and
every refused create (an id in use by anyone, or another user's ``USER:NAME`` conversation id,
whether that conversation exists yet or not) answers one :class:`SessionIdUnavailableError`
(HTTP 409) that never says whose the id is. An admin key keeps the precise answers
(``SessionOwnershipError`` naming the owner, ``already exists``): it may see everything anyway.

The results are plain JSON values (``dict``/``list``), the same for every surface.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from harombe_core.errors import (
    FactNotFoundError,
    HarombeError,
    InvalidInputError,
    SessionNotFoundError,
    SessionOwnershipError,
)
from harombe_core.owners import session_key, split_session_key
from harombe_core.server.keys import AccessDeniedError, Scope

if TYPE_CHECKING:
    from harombe_core.facts.models import FactHit
    from harombe_core.manager import MemoryManager
    from harombe_core.models import Message, SearchHit, Session

__all__ = [
    "ScopedMemory",
    "SessionIdUnavailableError",
    "fact_hit_json",
    "hit_json",
    "message_json",
    "session_json",
]

#: How many recent sessions' summaries a profile shows beside the user's facts and tasks.
PROFILE_SESSIONS = 10
#: How many of the most recent sessions an admin's list of users is drawn from.
USER_SESSIONS = 1000


class SessionIdUnavailableError(HarombeError):
    """A user key may not create a session with this id (HTTP 409): it is in use (by this user
    or any other), or it is another user's ``USER:NAME`` conversation id. One answer for every
    reason, so a key learns nothing of other users' sessions from it."""

    def __init__(self, session_id: str, user: str | None) -> None:
        own = ""
        if user is not None:
            try:
                _, name = split_session_key(session_id)
            except InvalidInputError:
                name = None
            if name is not None:
                own = f", or {session_key(user, name)!r} for this user's conversation {name!r}"
        super().__init__(
            f"session id {session_id!r} is not available here: it is in use, or it is "
            "the id of another user's conversation (ids of the form USER:NAME are USER's); "
            f"choose another id (or leave session_id out for a new one){own}. GET /api/sessions "
            "(or the list_sessions tool) lists the sessions you may use."
        )
        self.session_id = session_id


def not_found(session_id: str) -> SessionNotFoundError:
    """The one answer to a session this scope cannot see, whether it exists or not."""
    return SessionNotFoundError(
        f"no session {session_id!r} here; GET /api/sessions (or the list_sessions tool) "
        "lists the sessions you may use."
    )


def message_json(message: Message) -> dict[str, Any]:
    """A stored message as JSON: every field it was saved with, plus its ids."""
    return message.to_dict()


def session_json(session: Session) -> dict[str, Any]:
    """A session's record as JSON (its summary embedding left out: it is an index, not data)."""
    data = dict(session.summary_data or {})
    data.pop("embedding", None)
    return {
        "id": session.id,
        "user_id": session.user_id,
        "system_prompt": session.system_prompt,
        "metadata": session.metadata,
        "created_at": session.created_at.isoformat(),
        "updated_at": session.updated_at.isoformat(),
        "message_count": session.message_count,
        "summary": session.summary,
        "summary_data": data or None,
    }


def fact_hit_json(hit: FactHit) -> dict[str, Any]:
    """A fact found by a search, with its evidence (as :func:`hit_json` for messages)."""
    return {
        "fact": hit.fact.to_dict(),
        "score": hit.score,
        "vector_score": hit.vector_score,
        "keyword_score": hit.keyword_score,
    }


def hit_json(hit: SearchHit) -> dict[str, Any]:
    """A search hit with its evidence: overall score, meaning (vector) and keyword scores."""
    return {
        "message": message_json(hit.message),
        "session_id": hit.session_id,
        "score": hit.score,
        "vector_score": hit.vector_score,
        "keyword_score": hit.keyword_score,
    }


@dataclass(frozen=True, slots=True)
class ScopedMemory:
    """The manager, as one API key may use it (see the module docstring)."""

    manager: MemoryManager
    scope: Scope

    def user(self, requested: str | None = None) -> str | None:
        """The user this request acts as (AccessDeniedError if a user key names another)."""
        return self.scope.user_for(requested)

    def require_admin(self, what: str) -> None:
        """Refuse ``what`` to a user key."""
        if not self.scope.admin:
            raise AccessDeniedError(f"{what} needs an admin key (harombe keys create --admin).")

    @contextmanager
    def _unseen(self, session_id: str) -> Iterator[None]:
        """For a user key, another user's session reads as missing (see the module docstring);
        an admin key gets the precise SessionOwnershipError."""
        try:
            yield
        except SessionOwnershipError as exc:
            if self.scope.admin:
                raise
            raise not_found(session_id) from exc

    async def session(self, session_id: str, user_id: str | None = None) -> Session:
        """The session, if this scope may read it; SessionNotFoundError when there is none."""
        with self._unseen(session_id):
            session = await self.manager.aget_session(session_id, user_id=self.user(user_id))
        if session is None:
            raise not_found(session_id)
        return session

    async def may_create(self, session_id: str, user: str | None) -> None:
        """Refuse to create another user's per-user conversation id for ``user``.

        ``"bob:memory"`` is the id ``MemoryManager.conversation_session_id`` gives bob's
        conversation ``memory`` (his MCP memory, his LangChain histories). Session
        ids are one namespace, so if anyone else could create it first, bob could never use
        his own conversation (every write of his would be refused as not his). A user key gets
        the same :class:`SessionIdUnavailableError` whether bob has started it or not (unless
        the session is, from before this rule, the key's own user's); an admin key gets the
        precise answer, and an existing session is left to the manager's ownership check.
        """
        try:
            owner, name = split_session_key(session_id)
        except InvalidInputError:
            return  # not of the form user:name
        if owner == user:
            return
        existing = await self.manager.aget_session(session_id)
        if not self.scope.admin:
            if existing is None or existing.user_id != user:
                raise SessionIdUnavailableError(session_id, user)
            return
        if existing is not None:
            return
        yours = f", or {session_key(user, name)!r} for this user" if user else ""
        raise AccessDeniedError(
            f"session id {session_id!r} is the per-user conversation id of user {owner!r}, and "
            f"only that user may start it; choose an id without ':'{yours}."
        )

    @contextmanager
    def _creating(self, session_id: str, user: str | None) -> Iterator[None]:
        """For a user key, a create refused because the id is another user's session answers
        :class:`SessionIdUnavailableError`, never whose it is (an admin key: as raised)."""
        try:
            yield
        except SessionOwnershipError as exc:
            if self.scope.admin:
                raise
            raise SessionIdUnavailableError(session_id, user) from exc

    # sessions --------------------------------------------------------------------------------
    async def list_sessions(
        self, limit: int | None = 20, user_id: str | None = None
    ) -> list[dict[str, Any]]:
        sessions = await self.manager.alist_sessions(limit=limit, user_id=self.user(user_id))
        return [session_json(s) for s in sessions]

    async def create_session(
        self,
        *,
        session_id: str | None = None,
        system_prompt: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        user_id: str | None = None,
    ) -> dict[str, Any]:
        user = self.user(user_id)
        if session_id is not None:
            await self.may_create(session_id, user)
            if not self.scope.admin and await self.manager.aget_session(session_id) is not None:
                raise SessionIdUnavailableError(session_id, user)
        try:
            sid = await self.manager.acreate_session(
                system_prompt, metadata, user, session_id=session_id
            )
        except InvalidInputError:
            # made by another request since the check above: the same answer as taken before
            if session_id is None or self.scope.admin:
                raise
            if await self.manager.aget_session(session_id) is None:
                raise
            raise SessionIdUnavailableError(session_id, user) from None
        return session_json(await self.session(sid, user_id))

    async def get_session(self, session_id: str) -> dict[str, Any]:
        return session_json(await self.session(session_id))

    async def update_session(
        self,
        session_id: str,
        *,
        changes: Mapping[str, Any],
    ) -> dict[str, Any]:
        """Change ``system_prompt`` and/or ``metadata`` (the keys of ``changes``); an owner
        change (``user_id``) needs an admin key."""
        await self.session(session_id)  # must exist and be this scope's
        if "user_id" in changes:
            self.require_admin("moving a session to another user")
        with self._unseen(session_id):
            await self.manager.aupdate_session(session_id, **changes)
        return session_json(await self.session(session_id))

    async def delete_session(self, session_id: str) -> dict[str, Any]:
        await self.session(session_id)
        with self._unseen(session_id):
            deleted = await self.manager.adelete_session(session_id, user_id=self.user())
        return {"deleted": deleted, **await self._erased(deleted)}

    async def _erased(self, deleted: bool) -> dict[str, Any]:
        """Have a deletion reach the disk before answering (a server never closes its store);
        ``erased_from_disk`` is False only while a reader with an older snapshot holds the
        WAL, and the background worker finishes it once it ends (docs/deletion.md)."""
        if not deleted:
            return {"erased_from_disk": True}
        return {"erased_from_disk": (await self.manager.aerase_deleted()).complete}

    # messages --------------------------------------------------------------------------------
    async def append(
        self, session_id: str, messages: Sequence[Mapping[str, Any]], user_id: str | None = None
    ) -> dict[str, Any]:
        """Append messages in one transaction; an unknown session is created for this user."""
        user = self.user(user_id)
        await self.may_create(session_id, user)
        with self._creating(session_id, user):
            ids = await self.manager.asave_messages(session_id, messages, user_id=user)
        return {"session_id": session_id, "ids": ids}

    async def messages(
        self, session_id: str, *, limit: int | None = None, after_id: int | None = None
    ) -> list[dict[str, Any]]:
        await self.session(session_id)
        with self._unseen(session_id):
            found = await self.manager.aget_messages(
                session_id, limit=limit, after_id=after_id, user_id=self.user()
            )
        return [message_json(m) for m in found]

    async def window(self, session_id: str, max_tokens: int | None = None) -> dict[str, Any]:
        await self.session(session_id)
        with self._unseen(session_id):
            window = await self.manager.aget_window(session_id, max_tokens, user_id=self.user())
        return {"messages": [message_json(m) for m in window.messages], "tokens": window.tokens}

    async def context(
        self,
        session_id: str,
        *,
        strategy: str = "simple",
        max_tokens: int | None = None,
        query: str | None = None,
        keep_last: int = 6,
        full: bool = False,
    ) -> dict[str, Any]:
        """The messages a model would be given for the session (``full``: the budgeted context
        with summaries of the user's other sessions and relevant past messages)."""
        messages = await self.context_messages(
            session_id,
            strategy=strategy,
            max_tokens=max_tokens,
            query=query,
            keep_last=keep_last,
            full=full,
        )
        return {
            "messages": [message_json(m) for m in messages],
            "tokens": sum(m.token_count or 0 for m in messages),
        }

    async def context_messages(
        self,
        session_id: str,
        *,
        strategy: str = "simple",
        max_tokens: int | None = None,
        query: str | None = None,
        keep_last: int = 6,
        full: bool = False,
    ) -> list[Message]:
        """:meth:`context` as messages, for an answer of another shape (the MCP tools')."""
        from harombe_core.strategies import ContextBudget

        await self.session(session_id)
        with self._unseen(session_id):
            return await self.manager.aget_context(
                session_id,
                strategy,
                max_tokens,
                keep_last=keep_last,
                query=query,
                budget=ContextBudget() if full else None,
                user_id=self.user(),
            )

    async def summarize(self, session_id: str) -> dict[str, Any]:
        await self.session(session_id)
        with self._unseen(session_id):
            await self.manager.asummarize_session(session_id, user_id=self.user())
        return session_json(await self.session(session_id))

    async def search(
        self,
        query: str,
        *,
        top_k: int = 10,
        session_id: str | None = None,
        user_id: str | None = None,
        min_similarity: float | None = None,
    ) -> list[dict[str, Any]]:
        """Messages relevant to ``query``, best first, each with its evidence; within one of this
        scope's sessions when ``session_id`` is given. ``min_similarity`` leaves out hits whose
        cosine to the query is below it (search by meaning always returns the nearest
        messages, however weak; keyword-only search has no cosines and ignores it)."""
        hits = await self.search_hits(
            query,
            top_k=top_k,
            session_id=session_id,
            user_id=user_id,
            min_similarity=min_similarity,
        )
        return [hit_json(h) for h in hits]

    async def search_hits(
        self,
        query: str,
        *,
        top_k: int = 10,
        session_id: str | None = None,
        user_id: str | None = None,
        min_similarity: float | None = None,
    ) -> list[SearchHit]:
        """:meth:`search` as hits, for an answer of another shape (the MCP tools')."""
        user = self.user(user_id)
        if session_id is not None:
            await self.session(session_id, user_id)
        with self._unseen(session_id or ""):
            return await self.manager.asearch(query, top_k, session_id, user, min_similarity)

    # facts -----------------------------------------------------------------------------------
    def fact_owner(self, user_id: str | None = None) -> str:
        """The user whose facts a request reaches; facts are always one user's."""
        user = self.user(user_id)
        if user is None:
            raise AccessDeniedError("facts are one user's: name the user (user_id=...).")
        return user

    async def facts(
        self,
        query: str | None = None,
        *,
        user_id: str | None = None,
        kind: str | None = None,
        top_k: int = 10,
        min_similarity: float | None = None,
        include_history: bool = False,
    ) -> list[dict[str, Any]]:
        """The user's facts: all current ones (oldest first) without ``query``, else those
        matching it best first, each with its evidence (``min_similarity`` leaves out a fact
        whose cosine is below it and whose words do not match). ``kind`` keeps one kind."""
        user = self.fact_owner(user_id)
        kinds = None if kind is None else [kind]
        if query is None:
            found = await self.manager.aget_facts(
                user, kinds=kinds, include_history=include_history
            )
            return [fact.to_dict() for fact in found]
        hits = await self.fact_hits(
            query,
            user_id=user,
            top_k=top_k,
            min_similarity=min_similarity,
            include_history=include_history,
        )
        return [fact_hit_json(hit) for hit in hits if kind is None or hit.fact.kind == kind]

    async def fact_hits(
        self,
        query: str,
        *,
        user_id: str | None = None,
        top_k: int = 5,
        min_similarity: float | None = None,
        include_history: bool = False,
    ) -> list[FactHit]:
        """:meth:`facts` matching ``query`` as hits, for an answer of another shape (MCP's)."""
        return await self.manager.asearch_facts(
            self.fact_owner(user_id),
            query,
            top_k=top_k,
            include_history=include_history,
            min_similarity=min_similarity,
        )

    async def add_fact(
        self,
        text: str,
        *,
        kind: str = "fact",
        subject: str | None = None,
        user_id: str | None = None,
    ) -> dict[str, Any]:
        """Keep a fact (a repeat merges into the current one; a new value of its ``subject``
        supersedes the old, kept as history); the fact as stored."""
        user = self.fact_owner(user_id)
        fact = await self.manager.aadd_fact(user, text, kind=kind, subject=subject)
        return fact.to_dict()

    async def fact(self, fact_id: int, user_id: str | None = None) -> dict[str, Any]:
        """One of the user's facts; another user's is not found, as a missing one."""
        user = self.fact_owner(user_id)
        return (await self.manager.aget_fact(user, fact_id)).to_dict()

    async def fact_history(self, fact_id: int, user_id: str | None = None) -> list[dict[str, Any]]:
        """The values the fact has had, oldest first."""
        user = self.fact_owner(user_id)
        return [f.to_dict() for f in await self.manager.aget_fact_history(user, fact_id)]

    async def correct_fact(
        self, fact_id: int, text: str, user_id: str | None = None
    ) -> dict[str, Any]:
        """Replace a current fact's text (the old one kept as history); the new fact."""
        user = self.fact_owner(user_id)
        return (await self.manager.acorrect_fact(user, fact_id, text)).to_dict()

    async def complete_task(self, fact_id: int, user_id: str | None = None) -> dict[str, Any]:
        """Close a task (or a fact that stopped being true), kept as history."""
        user = self.fact_owner(user_id)
        return (await self.manager.acomplete_task(user, fact_id)).to_dict()

    async def forget_fact(self, fact_id: int, user_id: str | None = None) -> dict[str, Any]:
        """Delete a fact for good (its vector and keyword entry too); another user's fact is
        not found, as a missing one."""
        user = self.fact_owner(user_id)
        if not await self.manager.aforget_fact(user, fact_id):
            raise FactNotFoundError(f"no fact {fact_id} for this user.")
        return {"deleted": True, **await self._erased(True)}

    # users -----------------------------------------------------------------------------------
    async def users(self) -> list[str]:
        """The users this scope sees: its own, or (admin) the owners of the most recently
        active :data:`USER_SESSIONS` sessions (a bounded read, whatever the store's size)."""
        if not self.scope.admin:
            return [self.scope.user_id or ""]
        sessions = await self.manager.alist_sessions(limit=USER_SESSIONS)
        return sorted({s.user_id for s in sessions if s.user_id is not None})

    async def forget_user(self, user_id: str) -> dict[str, Any]:
        """Erase everything stored for ``user_id`` (sessions, messages, vectors, keyword
        entries, summaries): a user key only itself. The user's API keys are credentials, not
        memory: they stay until revoked (``harombe keys revoke``)."""
        user = self.user(user_id)
        if user is None:
            raise AccessDeniedError("erasure is one user's: name the user.")
        gone = await self.manager.aforget_user(user)
        return {"user_id": user, "sessions_deleted": gone, **await self._erased(True)}

    async def profile(self, user_id: str | None = None) -> dict[str, Any]:
        """What memory holds about a user: the profile text a model is given, the current
        facts (each with the messages it came from), the open tasks, and the summaries of
        their recent sessions."""
        user = self.user(user_id)
        if user is None:
            raise AccessDeniedError("a profile is one user's: name the user (user_id=...).")
        profile = await self.manager.aget_profile(user)
        facts = await self.manager.aget_facts(user)
        tasks = await self.manager.aget_open_tasks(user)
        sessions = await self.manager.alist_sessions(limit=PROFILE_SESSIONS, user_id=user)
        return {
            "user_id": user,
            "profile": str(profile),
            "facts": [f.to_dict() for f in facts],
            "tasks": [t.to_dict() for t in tasks],
            "recent_sessions": [
                {
                    "session_id": s.id,
                    "updated_at": s.updated_at.isoformat(),
                    "message_count": s.message_count,
                    "summary": s.summary,
                }
                for s in sessions
            ],
        }

    async def export(self, session_id: str, fmt: str = "json") -> str:
        """The session as an export file's text (``json``, ``jsonl`` or ``text``)."""
        from harombe_core.export.io import dumps
        from harombe_core.export.records import SessionRecord

        session = await self.session(session_id)
        with self._unseen(session_id):
            found = await self.manager.aget_messages(session_id, user_id=self.user())
        return dumps([SessionRecord.from_session(session, found)], fmt)
