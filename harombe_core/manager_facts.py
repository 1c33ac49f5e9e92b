"""The manager's user-memory methods: profile, facts, open tasks, editing, session state.

:class:`~harombe_core.manager.MemoryManager` inherits them; each sync/async pair drives one
flow of its :class:`~harombe_core.facts.memory.UserMemory` (``self._facts``): the sync method
on the calling thread, the ``a``-twin on the event loop (the store's async runner where it has
one). Kept beside the manager, not in it, because they are one cohesive part of its API. See
docs/user-memory.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from harombe_core.facts.memory import UserMemory
from harombe_core.facts.models import Fact, FactHit, Profile, SessionState
from harombe_core.flows import Flow, Work, adrive, drive
from harombe_core.validate import check_flag, check_id

__all__ = ["UserMemoryMethods"]


class UserMemoryMethods:
    """User memory on a MemoryManager (``user_id`` is required: facts are per user)."""

    _facts: UserMemory
    _store: Any
    _searcher: Any
    _context: Any
    token_counter: Any

    def _user_memory(self, config: Any, enabled: bool | None, extractor: Any) -> UserMemory:
        """The user memory over this manager's store, also given to its context builder:
        background extraction when ``enabled`` (None: the configuration's
        ``memory.user_memory``)."""
        if enabled is None:
            enabled = config is not None and bool(config.memory.user_memory)
        memory = UserMemory(
            self._store,
            embedder=lambda: self._searcher.embedder,
            token_counter=lambda: self.token_counter,
            extractor=extractor,
            background=check_flag(enabled, "user_memory"),
        )
        self._context.user_memory = memory
        return memory

    def _flush_facts(self) -> Flow[None]:
        """flush()'s share: extract what is pending, on the caller's thread (when on)."""
        if self._facts.background:
            yield Work(self._facts.run_pending)

    @property
    def user_memory(self) -> UserMemory:
        """The user memory part (its ``extractor`` and ``batch_size`` may be set)."""
        return self._facts

    def get_profile(
        self,
        user_id: str,
        max_tokens: int = 200,
        *,
        query: str | None = None,
        skip_unreadable: bool = False,
    ) -> Profile:
        """The user's current facts, preferences and decisions within ``max_tokens``, most
        relevant first (to ``query`` when given, then the most confirmed, then the newest);
        ``str(profile)`` is the text to give a model. Reads O(the user's facts).
        ``skip_unreadable=True`` leaves out a fact row edited outside harombe, with one
        warning, instead of raising its CorruptRowError (as the profile a prompt is given
        does)."""
        profile = self._facts.profile
        return drive(
            profile(user_id, max_tokens=max_tokens, query=query, skip_unreadable=skip_unreadable)
        )

    async def aget_profile(
        self,
        user_id: str,
        max_tokens: int = 200,
        *,
        query: str | None = None,
        skip_unreadable: bool = False,
    ) -> Profile:
        profile = self._facts.profile
        return await adrive(
            profile(user_id, max_tokens=max_tokens, query=query, skip_unreadable=skip_unreadable)
        )

    def get_facts(
        self,
        user_id: str,
        *,
        kinds: Sequence[str] | None = None,
        as_of: Any = None,
        include_history: bool = False,
    ) -> list[Fact]:
        """The user's current facts (oldest first), of ``kinds`` if given; ``as_of`` (a
        datetime or ISO date): those that held then; ``include_history``: closed ones too.
        Each fact's ``sources`` name the messages it came from."""
        flow = self._facts.facts(user_id, kinds=kinds, as_of=as_of, include_history=include_history)
        return drive(flow)

    async def aget_facts(
        self,
        user_id: str,
        *,
        kinds: Sequence[str] | None = None,
        as_of: Any = None,
        include_history: bool = False,
    ) -> list[Fact]:
        flow = self._facts.facts(user_id, kinds=kinds, as_of=as_of, include_history=include_history)
        return await adrive(flow)

    def get_open_tasks(
        self, user_id: str, *, session_id: str | None = None, skip_unreadable: bool = False
    ) -> list[Fact]:
        """The user's open tasks (the seed's ``getOngoingTasks``), of one session if given."""
        tasks = self._facts.open_tasks(user_id, session_id, skip_unreadable=skip_unreadable)
        return drive(tasks)

    async def aget_open_tasks(
        self, user_id: str, *, session_id: str | None = None, skip_unreadable: bool = False
    ) -> list[Fact]:
        tasks = self._facts.open_tasks(user_id, session_id, skip_unreadable=skip_unreadable)
        return await adrive(tasks)

    def search_facts(
        self,
        user_id: str,
        query: str,
        *,
        top_k: int = 5,
        include_history: bool = False,
        min_similarity: float | None = None,
    ) -> list[FactHit]:
        """The user's facts matching ``query`` by meaning (with semantic memory) and keyword,
        best first; each hit's ``fact.sources`` say which messages it came from, and its
        ``vector_score`` / ``keyword_score`` how it matched. ``min_similarity`` leaves out a
        fact whose cosine is below it and whose words do not match (a user has few facts, so
        without it up to ``top_k`` come back however weak the match)."""
        return drive(
            self._facts.search(
                user_id,
                query,
                top_k=top_k,
                include_history=include_history,
                min_similarity=min_similarity,
            )
        )

    async def asearch_facts(
        self,
        user_id: str,
        query: str,
        *,
        top_k: int = 5,
        include_history: bool = False,
        min_similarity: float | None = None,
    ) -> list[FactHit]:
        return await adrive(
            self._facts.search(
                user_id,
                query,
                top_k=top_k,
                include_history=include_history,
                min_similarity=min_similarity,
            )
        )

    def add_fact(
        self,
        user_id: str,
        text: str,
        *,
        kind: str = "fact",
        subject: str | None = None,
        valid_from: Any = None,
        sources: Sequence[int] | None = None,
    ) -> Fact:
        """Add a fact for the user (``kind``: fact, preference, task, decision). A repeat of a
        current fact merges into it; a new value of its ``subject`` supersedes the old one
        (kept as history). Facts added here stay until forgotten. ``sources``: ids of the
        user's messages it comes from (a search with ``fact_weight`` finds them through it;
        deleting one removes only that link)."""
        flow = self._facts.add(
            user_id, text, kind=kind, subject=subject, valid_from=valid_from, sources=sources
        )
        return drive(flow)

    async def aadd_fact(
        self,
        user_id: str,
        text: str,
        *,
        kind: str = "fact",
        subject: str | None = None,
        valid_from: Any = None,
        sources: Sequence[int] | None = None,
    ) -> Fact:
        flow = self._facts.add(
            user_id, text, kind=kind, subject=subject, valid_from=valid_from, sources=sources
        )
        return await adrive(flow)

    def get_fact(self, user_id: str, fact_id: int) -> Fact:
        """One of the user's facts by id, current or history. FactNotFoundError if the user
        has none of that id (another user's fact is not found either)."""
        return drive(self._facts.get(user_id, fact_id))

    async def aget_fact(self, user_id: str, fact_id: int) -> Fact:
        return await adrive(self._facts.get(user_id, fact_id))

    def get_fact_history(self, user_id: str, fact_id: int) -> list[Fact]:
        """The values a fact has had, oldest first: the facts it superseded (corrected,
        contradicted, updated) and those that superseded it, each with ``valid_from`` /
        ``valid_to``. FactNotFoundError if the user has no fact of that id."""
        return drive(self._facts.history(user_id, fact_id))

    async def aget_fact_history(self, user_id: str, fact_id: int) -> list[Fact]:
        return await adrive(self._facts.history(user_id, fact_id))

    def correct_fact(self, user_id: str, fact_id: int, text: str, *, subject: Any = ...) -> Fact:
        """Replace a current fact's text; the old one is closed as history. Returns the new
        fact. FactNotFoundError if the user has no such current fact."""
        return drive(self._facts.correct(user_id, fact_id, text, subject=subject))

    async def acorrect_fact(
        self, user_id: str, fact_id: int, text: str, *, subject: Any = ...
    ) -> Fact:
        return await adrive(self._facts.correct(user_id, fact_id, text, subject=subject))

    def complete_task(self, user_id: str, fact_id: int) -> Fact:
        """Close a task (status done), or a fact that stopped being true; kept as history."""
        return drive(self._facts.complete(user_id, fact_id))

    async def acomplete_task(self, user_id: str, fact_id: int) -> Fact:
        return await adrive(self._facts.complete(user_id, fact_id))

    def forget_fact(self, user_id: str, fact_id: int) -> bool:
        """Delete a fact, its vector and its keyword entry: nothing finds it afterwards. True
        if the user had it."""
        return drive(self._facts.forget(user_id, fact_id))

    async def aforget_fact(self, user_id: str, fact_id: int) -> bool:
        return await adrive(self._facts.forget(user_id, fact_id))

    def forget_user_facts(self, user_id: str) -> int:
        """Delete every fact of the user (current and history); how many. Deleting a
        session already removes the facts extracted only from it."""
        return drive(self._facts.forget_user(user_id))

    async def aforget_user_facts(self, user_id: str) -> int:
        return await adrive(self._facts.forget_user(user_id))

    def extract_facts(self, session_id: str) -> int:
        """Extract facts from the session's messages not yet extracted, now (end_session and
        the background extractor do this by themselves); how many messages were read."""
        return drive(self._facts.extract_session(check_id(session_id, "session_id")))

    async def aextract_facts(self, session_id: str) -> int:
        return await adrive(self._facts.extract_session(check_id(session_id, "session_id")))

    def get_session_state(self, session_id: str) -> SessionState:
        """A session's outcome (resolved, ongoing, abandoned or None) and importance."""
        return drive(self._facts.session_state(session_id))

    async def aget_session_state(self, session_id: str) -> SessionState:
        return await adrive(self._facts.session_state(session_id))

    def set_session_state(
        self, session_id: str, *, outcome: Any = ..., important: Any = ...
    ) -> SessionState:
        """Set a session's ``outcome`` and/or ``important`` flag (omitted ones are kept);
        the budgeted context favours important sessions. SessionNotFoundError if unknown."""
        return drive(
            self._facts.set_session_state(session_id, outcome=outcome, important=important)
        )

    async def aset_session_state(
        self, session_id: str, *, outcome: Any = ..., important: Any = ...
    ) -> SessionState:
        return await adrive(
            self._facts.set_session_state(session_id, outcome=outcome, important=important)
        )
