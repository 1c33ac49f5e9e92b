"""ContextBuilder: session summaries and the context-assembly strategies.

What goes into a model's prompt (a token window, a summary plus the newest turns, important
messages, a thread, or the seed's full budget) is decided here. ``get_context`` is one flow
(:mod:`harombe_core.flows`): it reads the session once and hands it to the strategy named in
:data:`STRATEGIES`; each strategy reads only the rows its window can use
(:mod:`harombe_core.context_reads`), every read a store operation the flow yields, so
``aget_context`` awaits them on the store's async path. The window arithmetic is in
:mod:`harombe_core.strategies` and the summarisers in :mod:`harombe_core.summarize`.
:class:`~harombe_core.manager.MemoryManager` composes a builder and forwards to it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from harombe_core.context_reads import (
    Charge,
    hybrid_from_store,
    newest_messages,
    newest_turn_from_store,
    newest_until,
    owned_session,
    owned_session_and_prompt,
    stored,
    thread_newest_first,
    thread_window_from_store,
)
from harombe_core.errors import InvalidInputError
from harombe_core.flows import Flow, Run, Work, drive
from harombe_core.folding import SUMMARIES, SummaryFolder
from harombe_core.limits import current_limits
from harombe_core.manager_search import Searcher
from harombe_core.models import Message, Session
from harombe_core.retrieval import format_context
from harombe_core.store import ops
from harombe_core.store.base import MessageStore, SearchScope
from harombe_core.store.fts import query_words
from harombe_core.store.unspaced import UNSPACED
from harombe_core.strategies import (
    ContextBudget,
    newest_turn,
    summarization_window,
    window_newest,
    with_newest_turn,
)
from harombe_core.tokens import TokenCounter
from harombe_core.validate import (
    MAX_TOP_K,
    check_budget,
    check_count,
    check_flag,
    check_query,
    optional_count,
    optional_id,
    optional_text,
    show,
)

__all__ = ["STRATEGIES", "ContextBuilder", "ContextRequest", "Strategy"]

log = logging.getLogger("harombe_core.manager")

#: Messages summarised per step when no ``memory.summary_chunk`` is configured.
DEFAULT_SUMMARY_CHUNK = 500
#: The largest backlog ``get_context`` folds itself (about what reading the window costs); a
#: longer one is folded by the background :class:`~harombe_core.folding.SummaryFolder`.
SYNC_FOLD = 64
#: Sessions whose newest summary mark a builder remembers (see ``ContextBuilder._summarize``).
FOLD_MARKS = 4096


class ContextBuilder:
    """Summaries of sessions and the messages to send a model, never over the token budget.

    It holds what it needs: the ``store``, the ``search`` side (its retriever finds relevant
    past messages, its embedder embeds summaries, its configuration sets the summary chunk),
    the default budget ``max_history_tokens`` and the ``token_counter`` that costs the
    messages it makes. The manager's attributes of those names are these, so setting either
    takes effect here at once.
    """

    def __init__(
        self,
        store: MessageStore,
        search: Searcher,
        *,
        max_history_tokens: int,
        token_counter: TokenCounter,
    ) -> None:
        self.store = store
        self.search = search
        self.max_history_tokens = max_history_tokens
        self.token_counter = token_counter
        self._summarizer: Any = None
        self._summary_chunk: int | None = None
        # One fold at a time per builder (request path or background), and the summary marks
        # this builder stored: a session read before a background fold is read again.
        self._fold_lock = threading.Lock()
        self._folded_until: dict[str, int] = {}
        self._folder: SummaryFolder | None = None
        #: The user memory (harombe_core.facts.memory.UserMemory) the budgeted context reads
        #: the owner's profile and open tasks from, and end_session extracts into; set by the
        #: manager that composes both.
        self.user_memory: Any = None

    @property
    def folder(self) -> SummaryFolder:
        """The background folder of long summary backlogs (its thread starts on first use)."""
        if self._folder is None:
            self._folder = SummaryFolder(self._fold_step, priority=SUMMARIES)
        return self._folder

    def flush_summaries(self, timeout: float | None = None) -> None:
        """Wait until the backlogs handed to the background are folded; EmbeddingError (what
        ``flush()`` raises on a timeout) if ``timeout`` seconds pass first."""
        if self._folder is not None and not self._folder.flush(timeout):
            from harombe_core.errors import EmbeddingError

            raise EmbeddingError(
                f"summary backlogs were still being folded after {timeout} s; call flush() "
                "again, or with a longer timeout."
            )

    def close(self) -> None:
        """Stop the background folder (after the step in hand); the store stays open."""
        if self._folder is not None:
            self._folder.close()

    def _fold_step(self, session_id: str, until_id: int) -> bool:
        """One background step of a session's backlog up to ``until_id``; True if more is left."""
        session = self.store.run(ops.get_session(session_id))
        if session is None or (session.summary_until_id or 0) >= until_id:
            return False
        before = self._folded_until.get(session_id)
        self._summarize(session, until_id, self.summary_chunk)
        reached = self._folded_until.get(session_id)
        return reached is not None and reached != before and reached < until_id

    @property
    def summarizer(self) -> Any:
        """What summarises sessions: extractive (no model) unless set to a Summarizer or an LLM."""
        current = self._summarizer
        if current is None:
            from harombe_core.summarize import ExtractiveSummarizer

            current = ExtractiveSummarizer()
            self._summarizer = current
        return current

    @summarizer.setter
    def summarizer(self, value: Any) -> None:
        from harombe_core.summarize import resolve_summarizer

        self._summarizer = resolve_summarizer(value)

    def context_message(self, text: str, kind: str) -> Message:
        message = Message(role="system", content=text, metadata={"harombe": kind})
        return message.with_ids(token_count=self.token_counter.count_message(message))

    @property
    def summary_chunk(self) -> int:
        """At most this many messages are summarised per step (``memory.summary_chunk``).

        ``get_context`` folds a backlog of up to ``SYNC_FOLD`` messages itself and hands a
        longer one to the background folder, which folds it a step at a time (``flush()``
        waits for it); ``summarize_session()`` and ``end_session()`` go through the whole
        backlog, step by step, each step committed.
        """
        value = self._summary_chunk
        if value is None:
            config = self.search.configured
            value = config.memory.summary_chunk if config is not None else DEFAULT_SUMMARY_CHUNK
        return int(value)

    @summary_chunk.setter
    def summary_chunk(self, value: int) -> None:
        self._summary_chunk = check_count(value, "summary_chunk", low=1)

    def summarize_session(
        self,
        session_id: str,
        *,
        until_id: int | None = None,
        user_id: str | None = None,
    ) -> Any:
        """Bring the session's stored summary up to date, incrementally; returns it.

        Only messages after ``summary_until_id`` (and up to ``until_id`` if given) are read and
        summarised, merged into the previous summary, and stored with the new
        ``summary_until_id``: nothing is summarised twice. The backlog is read and folded in
        steps of :attr:`summary_chunk` messages, each stored as it is done (an interrupted
        call keeps what it finished). A failing summariser is logged and the extractive one is used
        instead; messages are never touched. Returns a
        :class:`~harombe_core.summarize.SessionSummary`, or None if there is nothing to summarise.
        With ``user_id``, only that user's session (else SessionOwnershipError).
        """

        return drive(self.summarize_flow(session_id, until_id, user_id))

    def summarize_flow(
        self, session_id: str, until_id: int | None, user_id: str | None
    ) -> Flow[Any]:
        """:meth:`summarize_session` as a flow: the owner check reads the session as a store
        operation, and the folding (locked, with the summariser) is one request of work."""
        until_id = optional_count(until_id, "until_id")
        session = yield from owned_session(self.store, session_id, user_id)
        if session is None:  # an unknown session has nothing to summarise
            return None
        return (yield Work(self._summarize, session, until_id, None))

    def _summarize(self, session: Session, until_id: int | None, max_messages: int | None) -> Any:
        """:meth:`summarize_session` of a session already read (and its owner checked)."""
        with self._fold_lock:
            known = self._folded_until.get(session.id)
            if known is not None and (session.summary_until_id or 0) < known:
                # folded since read
                session = self.store.run(ops.get_session(session.id)) or session
            return self._summarize_locked(session, until_id, max_messages)

    def _summarize_locked(
        self, session: Session, until_id: int | None, max_messages: int | None
    ) -> Any:
        from harombe_core.summarize import SessionSummary

        session_id = session.id
        previous = None
        if session.summary_data:
            data = {k: v for k, v in session.summary_data.items() if k != "embedding"}
            previous = SessionSummary.from_dict(data)
        after = session.summary_until_id
        step = max_messages or self.summary_chunk
        while True:
            fresh = self.store.run(ops.get_messages(session_id, after_id=after, limit=step))
            complete = len(fresh) < step
            if until_id is not None:
                complete = complete or any(m.id is not None and m.id >= until_id for m in fresh)
                fresh = [m for m in fresh if m.id is not None and m.id <= until_id]
            if not fresh:
                return previous
            previous = self._fold(session_id, fresh, previous)
            after = fresh[-1].id
            if complete or max_messages is not None:
                return previous

    def _fold(self, session_id: str, fresh: list[Message], previous: Any) -> Any:
        """Summarise ``fresh`` into ``previous`` and store the result as the session's."""
        from harombe_core.errors import SummarizationError
        from harombe_core.summarize import ExtractiveSummarizer

        try:
            summary = self.summarizer.summarize_session(fresh, previous)
        except SummarizationError as exc:
            log.warning("session %s: summariser failed (%s); using extractive", session_id, exc)
            summary = ExtractiveSummarizer().summarize_session(fresh, previous)
        self._store_summary(session_id, summary, fresh[-1].id)
        return summary

    def _store_summary(self, session_id: str, summary: Any, until_id: int | None) -> None:
        data = summary.to_dict()
        embedder = self.search.embedder
        if embedder is not None and summary.summary:
            vector = embedder.embed_query(summary.as_text())
            data["embedding"] = {"model": embedder.name, "vector": [float(x) for x in vector]}

        def write() -> bool:
            # The newest message summarised must still be there: a session cleared while its
            # summary was being made (a background fold takes a while) gets no summary of
            # the erased messages.
            scope = SearchScope(session_id=session_id)
            if until_id is not None and not self.store.run(
                ops.get_messages_by_ids([until_id], scope)
            ):
                return False
            self.store.run(
                ops.update_session(
                    session_id,
                    summary=summary.summary,
                    summary_data=data,
                    summary_until_id=until_id,
                )
            )
            return True

        if self.store.atomic(write) and until_id is not None:
            marks = self._folded_until
            marks.pop(session_id, None)  # newest last, so the oldest marks go first
            marks[session_id] = until_id
            if len(marks) > FOLD_MARKS:  # only a read older than a fold in progress needs one
                for stale in list(marks)[: FOLD_MARKS // 2]:
                    del marks[stale]

    def search_summaries(
        self, query: str, top_k: int = 5, user_id: str | None = None
    ) -> Flow[list[tuple[Session, float]]]:
        """Sessions whose stored summary matches ``query`` best: by meaning when semantic memory
        is on (the stored summary embeddings), else by shared words. Best first.

        With ``user_id``, only that user's summarised sessions are read (through an index),
        and only their summaries; without one, a search by words reads only the sessions whose
        summary holds a word of ``query``, found through the summaries' keyword index. The
        ``top_k`` winners are then read whole. The exact scores are computed over what was
        read, so the cost follows the user's sessions or the matches, never the store.
        """
        import json
        import re

        query = check_query(query)
        top_k = check_count(top_k, "top_k", high=MAX_TOP_K)
        user_id = optional_id(user_id, "user_id")
        embedder = self.search.embedder
        words = _summary_words(query)
        if embedder is None and user_id is None:
            rows = yield Run(self.store, ops.summaries_matching(sorted(words)))
        else:
            rows = yield Run(self.store, ops.summarised_sessions(user_id))
        scored: list[tuple[str, float]] = []
        q = None if embedder is None else (yield Work(embedder.embed_query, query))
        for session_id, summary, raw in rows:
            data = json.loads(raw) if raw else {}
            if embedder is not None and q is not None:
                emb = data.get("embedding") or {}
                vector = emb.get("vector")
                if vector and emb.get("model") == embedder.name and len(vector) == len(q):
                    score = float(sum(a * b for a, b in zip(q, vector, strict=True)))
                    scored.append((session_id, score))
                continue
            text = (summary + " " + " ".join(data.get("topics", []))).lower()
            held = set(re.findall(r"\w+", text))
            found = {w for w in words if w in held or (UNSPACED.search(w) and w in text)}
            if found:
                scored.append((session_id, len(found) / max(len(words), 1)))
        scored.sort(key=lambda pair: -pair[1])
        hits: list[tuple[Session, float]] = []
        for session_id, score in scored[:top_k]:
            # gone or moved meanwhile: left out
            session = yield Run(self.store, ops.get_session(session_id))
            if session is not None and session.summary and user_id in (None, session.user_id):
                hits.append((session, score))
        return hits

    def context_flow(
        self,
        session_id: str,
        strategy: str = "simple",
        max_tokens: int | None = None,
        *,
        start_on_user: bool = False,
        keep_last: int = 6,
        query: str | None = None,
        budget: Any = None,
        user_profile: str | None = None,
        user_id: str | None = None,
        token_counter: TokenCounter | None = None,
        keep_newest_turn: bool = False,
    ) -> Flow[list[Message]]:
        """The messages to send a model for ``session_id``, never over ``max_tokens``.

        ``strategy``: ``"simple"`` (the token window), ``"summarization"`` (a summary of older
        messages, then the newest ``keep_last``), ``"hybrid"`` (also keeps messages marked
        important: ``metadata["important"] is True`` or ``metadata["importance"] >= 0.7``) or
        ``"threaded"`` (the path from the thread root to the newest message). The system prompt
        comes first and is always kept. Given a ``budget``
        (:class:`~harombe_core.strategies.ContextBudget`), the seed's full context is built:
        system prompt, the owner's open tasks and profile from user memory (most relevant to
        ``query`` first; ``user_profile`` given replaces them), summaries of the owner's past
        sessions picked by recency, relevance and importance, past messages relevant to
        ``query``, the current session, and a free buffer. Those blocks come from
        the session owner's other sessions; a session without an owner gets none (nothing
        outside it is known to be the same user's). With ``user_id``, only that user's session
        (else SessionOwnershipError).

        This is the one window of the library, for adapters too: ``token_counter`` charges the
        system prompt, the summary and the session's messages as a framework counts them (for
        example :class:`~harombe_core.tokens.TextTokenCounter`, LlamaIndex's counting) instead
        of by the counts stored with them, and each message returned carries what it was
        charged in ``token_count``. ``keep_newest_turn`` sends the newest turn (from its user
        message on) even when it does not fit, instead of refusing a budget that cannot hold
        the system prompt or leaving the turn out: a model is never sent nothing. Whatever
        the strategy, only the rows the window can use are read, never the whole session.

        A flow (``MemoryManager.get_context`` drives it, ``aget_context`` awaits it): every
        read is a store operation it yields, so async reads go the store's async path; only
        work with no async form (folding a short summary backlog, ranking the relevant past)
        is a request of work.
        """
        from harombe_core.strategies import fit_block, reserve_system

        total = self.max_history_tokens if max_tokens is None else check_budget(max_tokens)
        if not isinstance(strategy, str) or strategy not in STRATEGIES:
            names = [repr(name) for name in STRATEGIES]
            raise InvalidInputError(
                f"unknown strategy {show(strategy)}; use {', '.join(names[:-1])} or {names[-1]}."
            )
        keep_last = check_count(keep_last, "keep_last", high=MAX_TOP_K)
        check_flag(start_on_user, "start_on_user")
        check_flag(keep_newest_turn, "keep_newest_turn")
        if token_counter is not None and not isinstance(token_counter, TokenCounter):
            raise InvalidInputError(
                f"token_counter must be a TokenCounter (count_text, count_message, "
                f"count_messages), got {type(token_counter).__name__}; for LlamaIndex's "
                "counting pass harombe_core.tokens.TextTokenCounter(manager.token_counter)."
            )
        query = None if query is None else check_query(query)
        optional_text(
            user_profile,
            "user_profile",
            limit=current_limits().content_chars,
            field="content_chars",
        )
        if budget is not None and not isinstance(budget, ContextBudget):
            raise InvalidInputError(
                f"budget must be a ContextBudget, got {type(budget).__name__}; build one with "
                "harombe_core.ContextBudget(relevant_past=0.3, ...)."
            )
        # the one read of the session, with its system prompt
        found = yield from owned_session_and_prompt(self.store, session_id, user_id)
        if found is None:
            return []
        session, prompt = found
        charge: Charge = stored
        slack: int | None = 0
        if token_counter is not None:
            charge = _charge_with(token_counter)
            slack = getattr(token_counter, "stored_slack", None)
        system = [charge(m) for m in prompt]
        if keep_newest_turn and sum(m.token_count or 0 for m in system) > total:
            messages = list(system)  # no room for the conversation: the newest turn only
        else:
            reserve_system(system, total)
            extra: list[Message] = []
            if budget is not None:
                extra = yield from self._budget_blocks(
                    session, total, system, budget, query, user_profile
                )
                total -= sum(m.token_count or 0 for m in extra)
                total -= int(budget.buffer * total)
            request = ContextRequest(
                session, system, total, start_on_user, keep_last, charge, slack
            )
            messages = yield from STRATEGIES[strategy](self, request)
            if extra:
                head = len(system)
                messages = messages[:head] + fit_block(extra, 10**9) + messages[head:]
        if keep_newest_turn:
            turn = yield from self._newest_turn(session.id, strategy, charge)
            messages = with_newest_turn(messages, turn)
        return messages

    def _newest_turn(self, session_id: str, strategy: str, charge: Charge) -> Flow[list[Message]]:
        """The session's newest turn (on the newest message's thread for ``"threaded"``),
        read newest first only as far as it goes."""
        path = None
        if strategy == "threaded":
            path = yield from thread_newest_first(
                self.store, session_id, 0, charge, whole_turn=True
            )
        if path is None:
            path = yield from newest_turn_from_store(self.store, session_id, charge)
        return newest_turn(path)

    def _budget_blocks(
        self,
        session: Session,
        total: int,
        system: list[Message],
        budget: Any,
        query: str | None,
        user_profile: str | None,
    ) -> Flow[list[Message]]:
        """User profile, recent session summaries and relevant past messages, each in its share."""
        from harombe_core.strategies import fit_block

        rest = total - sum(m.token_count or 0 for m in system)
        blocks: list[Message] = []
        share = int(budget.user_profile * rest)
        if user_profile is None and session.user_id is not None and self.user_memory:
            blocks += yield from self._user_blocks(session.user_id, share, query)
        elif user_profile:
            profile = self.context_message("User profile:\n" + user_profile, "profile")
            blocks += fit_block([profile], share)
        if session.user_id is None:  # whose other sessions? none is known to be this user's
            return blocks
        others = yield from self._past_sessions(session, query)
        if others:
            lines = [f"- {s.updated_at:%Y-%m-%d}: {s.summary}" for s in others]
            note = self.context_message("Recent sessions:\n" + "\n".join(lines), "summaries")
            blocks += fit_block([note], int(budget.session_summaries * rest))
        if query:  # the retriever's flow: a request per read, as get_relevant_context
            past: list[Message] = yield from self.search.retriever.get_relevant_context_flow(
                query,
                max_tokens=max(int(budget.relevant_past * rest) - 20, 0),
                user_id=session.user_id,
                exclude_session_id=session.id,
            )
            if past:
                note = self.context_message(format_context(past), "relevant")
                blocks += fit_block([note], int(budget.relevant_past * rest))
        return blocks

    def _user_blocks(self, user_id: str, share: int, query: str | None) -> Flow[list[Message]]:
        """The owner's profile (most relevant to ``query`` first) and open tasks, within
        ``share`` tokens together: the tasks first (they are few and must not be dropped),
        then the profile in what is left."""
        from harombe_core.strategies import fit_block

        blocks: list[Message] = []
        # It enriches a prompt: an unreadable fact is left out with a warning, not raised.
        tasks = yield from self.user_memory.open_tasks(user_id, skip_unreadable=True)
        if tasks:
            lines = "\n".join(f"- {t.text}" for t in tasks)
            blocks += fit_block([self.context_message("Open tasks:\n" + lines, "tasks")], share)
        left = share - sum(m.token_count or 0 for m in blocks)
        header = self.context_message("User profile:\n", "profile").token_count or 0
        if left > header:
            profile = yield from self.user_memory.profile(
                user_id, max_tokens=left - header, query=query, skip_unreadable=True
            )
            if profile.text:
                note = self.context_message("User profile:\n" + profile.text, "profile")
                blocks = fit_block([note], left) + blocks
        return blocks

    def _past_sessions(self, session: Session, query: str | None) -> Flow[list[Session]]:
        """Up to five of the owner's other summarised sessions, picked by recency, relevance
        to ``query`` and importance (the application's flag, an ongoing outcome), then shown
        newest first."""
        from harombe_core.facts import ops as fact_ops

        assert session.user_id is not None
        ranked = yield Run(self.store, fact_ops.ranked_sessions(session.user_id, session.id, 20))
        relevance: dict[str, float] = {}
        if query and ranked:
            found = yield from self.search_summaries(
                query, top_k=len(ranked), user_id=session.user_id
            )
            relevance = {s.id: score for s, score in found}
        scores = {
            sid: 1.0 / (1 + rank)
            + relevance.get(sid, 0.0)
            + (1.0 if important else 0.0)
            + (0.3 if outcome == "ongoing" else 0.0)
            for rank, (sid, important, outcome) in enumerate(ranked)
        }
        picked = sorted(scores, key=lambda sid: -scores[sid])[:5]
        sessions: list[Session] = []
        for sid in picked:
            other = yield Run(self.store, ops.get_session(sid))
            if other is not None:
                sessions.append(other)
        sessions.sort(key=lambda s: s.updated_at, reverse=True)
        return sessions


# --------------------------------------------------------------------------------------------
# the strategies: each gets the session read once by get_context and returns the messages


@dataclass(frozen=True, slots=True)
class ContextRequest:
    """What get_context hands a strategy: the session (read once, owner checked), its system
    prompt message(s), the tokens the session's messages may take (system included) and the
    caller's options, and what a message costs against ``total`` (``charge``; ``slack`` is
    how far below its stored count that can be, None when unknown)."""

    session: Session
    system: list[Message]
    total: int
    start_on_user: bool
    keep_last: int
    charge: Charge = stored
    slack: int | None = 0


Strategy = Callable[[ContextBuilder, ContextRequest], Flow[list[Message]]]


def _simple(ctx: ContextBuilder, request: ContextRequest) -> Flow[list[Message]]:
    """The token window: the newest messages that fit, read newest first until it is full."""
    reserved = sum(m.token_count or 0 for m in request.system)
    spend = request.total - reserved
    newest = yield from newest_until(ctx.store, request.session.id, spend, request.charge)
    window = window_newest(
        newest, request.total, reserved_tokens=reserved, start_on_user=request.start_on_user
    )
    return request.system + window.messages


def _threaded(ctx: ContextBuilder, request: ContextRequest) -> Flow[list[Message]]:
    """The newest message's thread (a session never threaded is one thread: the window)."""
    window = yield from thread_window_from_store(
        ctx.store,
        request.session.id,
        request.total,
        system=request.system,
        start_on_user=request.start_on_user,
        charge=request.charge,
    )
    if window is None:
        return (yield from _simple(ctx, request))
    return request.system + window.messages


def _summary_of_older(
    ctx: ContextBuilder, request: ContextRequest, newest: list[Message]
) -> Flow[Message | None]:
    """The stored summary of what is older than the newest ``keep_last`` messages.

    If it does not reach them yet, a backlog of at most ``SYNC_FOLD`` messages is folded here;
    a longer one is handed to the background folder and the summary folded so far is used, so
    the call costs the same whatever the backlog (one bounded read decides which)."""
    older = newest[request.keep_last :]
    if not older:
        return None
    session, boundary = request.session, older[0].id
    text = session.summary
    if boundary is not None and (session.summary_until_id or 0) < boundary:
        backlog = ops.get_messages(session.id, session.summary_until_id, SYNC_FOLD + 1)
        head: list[Message] = yield Run(ctx.store, backlog)
        if len(head) <= SYNC_FOLD or any(m.id is not None and m.id >= boundary for m in head):
            # a short backlog is folded here: the summariser's work (and its writes, under
            # the builder's fold lock) is one request of work
            folded = yield Work(ctx._summarize, session, boundary, SYNC_FOLD + 1)
            if folded is not None and folded.summary:
                text = folded.summary
        else:
            ctx.folder.request(session.id, boundary)
    if not text:
        return None
    summary = ctx.context_message("Summary of the earlier conversation:\n" + text, "summary")
    return request.charge(summary)


def _summarization(ctx: ContextBuilder, request: ContextRequest) -> Flow[list[Message]]:
    """The summary of older messages, then the newest ``keep_last``."""
    newest, summary = yield from _newest_and_summary(ctx, request)
    return summarization_window(
        newest,
        request.total,
        system=request.system,
        summary=summary,
        keep_last=request.keep_last,
        start_on_user=request.start_on_user,
    ).messages


def _hybrid(ctx: ContextBuilder, request: ContextRequest) -> Flow[list[Message]]:
    """As summarization, plus the important older messages that fit (read through an index)."""
    newest, summary = yield from _newest_and_summary(ctx, request)
    window = yield from hybrid_from_store(
        ctx.store,
        request.session.id,
        newest,
        request.total,
        system=request.system,
        summary=summary,
        keep_last=request.keep_last,
        start_on_user=request.start_on_user,
        charge=request.charge,
        slack=request.slack,
    )
    return window.messages


def _newest_and_summary(
    ctx: ContextBuilder, request: ContextRequest
) -> Flow[tuple[list[Message], Message | None]]:
    """The session's newest ``keep_last + 1`` messages and the summary of the older ones
    (the one extra message tells whether anything older exists)."""
    newest = yield from newest_messages(
        ctx.store, request.session.id, request.keep_last + 1, request.charge
    )
    summary = yield from _summary_of_older(ctx, request, newest)
    return newest, summary


def _charge_with(counter: TokenCounter) -> Charge:
    """A message -> a copy of it carrying what ``counter`` charges for it."""

    def charge(message: Message) -> Message:
        return message.with_ids(token_count=counter.count_message(message))

    return charge


#: get_context's strategies by name (the order is the one its error message lists).
STRATEGIES: Mapping[str, Strategy] = {
    "simple": _simple,
    "summarization": _summarization,
    "hybrid": _hybrid,
    "threaded": _threaded,
}


def _summary_words(query: str) -> set[str]:
    """The words a summary search looks for: runs of word characters, and for a run holding
    Chinese, Japanese or Korean characters (written without spaces, or with particles on the
    noun) its pieces and overlapping pairs of characters, as the keyword search of messages
    looks them up (fts.query_words): a word inside a summary's sentence is found, and a
    summary shares more of them the more it holds of the question."""
    import re

    words: set[str] = set()
    for word in re.findall(r"\w+", query.lower()):
        words.update(query_words(word) if UNSPACED.search(word) else [word])
    return words
