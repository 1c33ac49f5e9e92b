"""UserMemory: the user memory a MemoryManager composes (profile, facts, tasks, extraction).

Every public operation is a flow (:mod:`harombe_core.flows`): the manager's sync method
drives it in place, its ``a``-twin on the event loop (the store's own async runner where it
has one). Reads are O(the user's facts), never O(history): facts live in their own table,
indexed by user.

Extraction reads a session's messages after the point its facts were last extracted to, in
batches of :attr:`UserMemory.batch_size`, and hands each batch to the extractor, then to one
consolidation step that writes the facts *and* advances that point in one transaction. It
runs at ``end_session`` and, when user memory is on, on a background thread that
``save_message`` only wakes (an event set: it never waits on extraction); ``flush()`` runs
what is pending on the caller's thread.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from harombe_core.errors import (
    CorruptRowError,
    FactNotFoundError,
    InvalidInputError,
    SessionNotFoundError,
)
from harombe_core.facts import ops
from harombe_core.facts.extract import OfflineExtractor
from harombe_core.facts.models import (
    FACT_KINDS,
    Fact,
    FactHit,
    FactProposal,
    FactSource,
    Profile,
    SessionState,
    check_fact_text,
    check_kind,
    check_outcome,
    check_subject,
    check_user,
)
from harombe_core.flows import Call, Flow, Work, drive
from harombe_core.folding import FACTS, SummaryFolder
from harombe_core.models import Message
from harombe_core.store.base import MessageStore
from harombe_core.store.rows import LeftOut, to_micros
from harombe_core.store.runner import Op
from harombe_core.tokens import TokenCounter
from harombe_core.validate import (
    MAX_TOP_K,
    check_budget,
    check_count,
    check_flag,
    check_id,
    check_list,
    check_query,
    optional_number,
    optional_time,
)

__all__ = ["UserMemory", "resolve_extractor"]

log = logging.getLogger("harombe_core.facts")

#: Messages handed to the extractor at a time.
BATCH_SIZE = 50
#: Sessions the background extractor takes per round.
SESSIONS_PER_ROUND = 20
#: Seconds the background extractor waits between checks for work other processes left.
POLL_SECONDS = 5.0
#: Seconds the background extractor lingers once woken, so that a burst of saves is
#: extracted in one transaction (fewer waits on the write lock for the savers).
LINGER_SECONDS = 0.5
#: The background job that looks for every owned session's pending messages (no session id
#: holds a NUL character, so none is taken for it).
_SCAN = "\x00scan"
#: How keyword and vector rankings are fused (reciprocal rank fusion's constant).
RRF_K = 60


def resolve_extractor(spec: Any) -> Any:
    """``None``/``"offline"``: the offline extractor; an object with ``propose`` (an
    extractor); anything else is a model for :class:`~harombe_core.facts.llm.LLMExtractor`."""
    if spec is None or spec == "offline":
        return OfflineExtractor()
    if isinstance(spec, str):
        raise InvalidInputError(
            f"unknown fact extractor {spec!r}; use 'offline', a model (LangChain chat model, "
            "LlamaIndex LLM or llm(prompt) -> str callable), or an extractor object."
        )
    if hasattr(spec, "propose") or hasattr(spec, "extract"):
        return spec
    from harombe_core.facts.llm import LLMExtractor

    return LLMExtractor(spec)


def _run(store: MessageStore, op: Op[Any]) -> Call[Any]:
    """One store operation as a flow request (the store's async runner when async)."""
    return Call(store.run, op, native=store.arun)


def _micros(value: datetime | None) -> int:
    return to_micros(value) if value is not None else to_micros(datetime.now().astimezone())


class UserMemory:
    """A store's user memory: what the manager's fact methods run on.

    ``embedder`` returns the current embedder or None (semantic memory off: facts are found
    by keyword only); ``extractor`` is the offline one unless set (an LLM, or any object with
    ``propose(messages, current_facts) -> Flow`` or ``extract(messages) -> proposals``).
    """

    def __init__(
        self,
        store: MessageStore,
        *,
        embedder: Any,
        token_counter: Any,
        extractor: Any = None,
        background: bool = False,
    ) -> None:
        self.store = store
        self._embedder = embedder
        self._counter = token_counter
        self.extractor = resolve_extractor(extractor)
        self.batch_size = BATCH_SIZE
        self.background = background
        self._lock = threading.Lock()
        #: Where the profile a prompt is given tells of an unreadable fact it left out.
        self._left_out = LeftOut(store.location, "the user's profile")
        self._extracting = threading.Lock()
        self._jobs: SummaryFolder | None = None  # on the process's background worker
        self._backoff = POLL_SECONDS
        self.last_error: BaseException | None = None
        self._passed_over: set[tuple[str, str]] = set()

    @property
    def token_counter(self) -> TokenCounter:
        counter: TokenCounter = self._counter()
        return counter

    # extraction ---------------------------------------------------------------------------
    def propose(
        self, messages: Sequence[Message], current: Sequence[Fact]
    ) -> Flow[list[FactProposal]]:
        extractor = self.extractor
        if hasattr(extractor, "propose"):
            proposals: list[FactProposal] = yield from extractor.propose(messages, current)
            return proposals
        found: list[FactProposal] = yield Work(extractor.extract, messages)
        return found

    def _embed(self, texts: list[str]) -> Flow[tuple[list[bytes | None], str | None]]:
        embedder = self._embedder()
        if embedder is None or not texts:
            return [None] * len(texts), None
        vectors = yield Work(embedder.embed, texts)
        import numpy as np  # lazily: importing the manager stays light

        rows = np.asarray(vectors, dtype=np.float32)
        return [row.tobytes() for row in rows], str(embedder.name)

    def prepare(
        self,
        user_id: str,
        proposals: Sequence[FactProposal],
        *,
        origin: str = "extracted",
        progress: tuple[str, int] | None = None,
    ) -> Flow[Op[list[int]]]:
        """Embed the proposals (outside any transaction) and return the one store operation
        that consolidates them, to run on its own or inside a larger transaction (a
        LangGraph store batch): its result is the ids touched, in proposal order."""
        texts = [p.text for p in proposals if p.action != "close"]
        blobs, model = yield from self._embed(texts)
        it = iter(blobs)
        vectors = [None if p.action == "close" else next(it) for p in proposals]
        now = _micros(None)
        times = [now if p.at is None else min(_micros(p.at), now) for p in proposals]
        return ops.consolidate(
            check_user(user_id),
            proposals,
            times,
            vectors,
            model=model,
            now=now,
            origin=origin,
            progress=progress,
        )

    def _apply(
        self,
        user_id: str,
        proposals: Sequence[FactProposal],
        *,
        origin: str = "extracted",
        progress: tuple[str, int] | None = None,
    ) -> Flow[list[int]]:
        """Embed the proposals (outside any transaction), then consolidate them in one."""
        op = yield from self.prepare(user_id, proposals, origin=origin, progress=progress)
        touched: list[int] = yield _run(self.store, op)
        return touched

    def extract_session(self, session_id: str, *, until_id: int | None = None) -> Flow[int]:
        """Extract facts from the session's messages not yet extracted (up to ``until_id``),
        batch by batch, each batch committed with its progress; how many messages were read.
        A session without an owner has no user to remember for: nothing is read."""
        session = yield _run(self.store, _get_session(session_id))
        if session is None or session.user_id is None:
            return 0
        user_id = session.user_id
        after: int = yield _run(self.store, ops.extracted_until(session_id))
        read = 0
        while True:
            batch: list[Message] = yield _run(
                self.store, _get_messages(session_id, after, self.batch_size)
            )
            if until_id is not None:
                batch = [m for m in batch if m.id is not None and m.id <= until_id]
            if not batch:
                return read
            current: list[Fact] = yield _run(self.store, ops.list_facts(user_id))
            proposals = yield from self.propose(batch, current)
            last = int(batch[-1].id or 0)
            yield from self._apply(user_id, proposals, progress=(session_id, last))
            read += len(batch)
            after = last
            if len(batch) < self.batch_size:
                return read

    def extract_pending(self) -> Flow[int]:
        """Extract every owned session's pending messages (the background round, and
        ``flush``); how many messages were read."""
        total = 0
        while True:
            pending = yield _run(self.store, ops.pending_sessions(SESSIONS_PER_ROUND))
            if not pending:
                return total
            done = 0
            for session_id, _owner, _until in pending:
                try:
                    done += yield from self.extract_session(session_id)
                except CorruptRowError as exc:
                    # A row edited outside harombe (named): its session waits until it is
                    # repaired; every other user's sessions are still extracted.
                    self._pass_over(session_id, exc)
            total += done
            if done == 0:
                return total

    def _pass_over(self, session_id: str, error: CorruptRowError) -> None:
        said = (session_id, str(error))
        if said not in self._passed_over:  # said once, not on every round
            self._passed_over.add(said)
            log.warning("session %s: facts not extracted: %s", session_id, error)

    # the background extractor --------------------------------------------------------------
    def notify(self, session_id: str | None = None) -> None:
        """New messages were saved (in ``session_id``): have them extracted by the process's
        background worker (:mod:`harombe_core.folding`). Never waits."""
        if not self.background:
            return
        jobs = self._jobs if self._jobs is not None else self._start()
        jobs.request(session_id if session_id is not None else _SCAN, 0)

    def _start(self) -> SummaryFolder:
        """The background jobs, the first time: a look for sessions with messages not yet
        extracted (left by another process, or by a failed round) comes first."""
        with self._lock:
            if self._jobs is None:
                # Below every other kind of job: extraction may call an LLM.
                self._jobs = SummaryFolder(self._job, linger=LINGER_SECONDS, priority=FACTS)
                self._jobs.request(_SCAN, 0, delay=0)
            return self._jobs

    def _job(self, key: str, _until: int) -> bool:
        """One job: extract a session saved to (O(its new messages)), or (``_SCAN``) every
        owned session's pending messages, which is looked for again every
        :data:`POLL_SECONDS` (longer after a failure, which is logged and kept for
        ``flush()`` to raise)."""
        try:
            with self._extracting:
                drive(self.extract_pending() if key == _SCAN else self.extract_session(key))
            self._backoff = POLL_SECONDS
        except Exception as exc:
            self.last_error = exc
            log.warning("background fact extraction failed, will retry: %s", exc)
            self._backoff = min(self._backoff * 2, 60.0)
        if self._jobs is not None and (key == _SCAN or self._backoff > POLL_SECONDS):
            self._jobs.request(_SCAN, 0, delay=self._backoff)
        return False

    def run_pending(self) -> int:
        """Extract everything pending on this thread (``flush``), one extractor at a time in
        this process."""
        with self._extracting:
            return drive(self.extract_pending())

    def close(self) -> None:
        """Stop the background extraction, after the job in hand (what it has not extracted
        stays pending)."""
        with self._lock:
            jobs, self._jobs = self._jobs, None
        if jobs is not None:
            jobs.close()

    # reading ------------------------------------------------------------------------------
    def facts(
        self,
        user_id: str,
        *,
        kinds: Sequence[str] | None = None,
        as_of: Any = None,
        include_history: bool = False,
    ) -> Flow[list[Fact]]:
        user_id = check_user(user_id)
        wanted = _kinds(kinds)
        when = optional_time(as_of, "as_of")
        check_flag(include_history, "include_history")
        op = ops.list_facts(
            user_id,
            kinds=wanted,
            current=None if include_history else True,
            as_of=None if when is None else to_micros(when),
        )
        found: list[Fact] = yield _run(self.store, op)
        return found

    def open_tasks(
        self, user_id: str, session_id: str | None = None, *, skip_unreadable: bool = False
    ) -> Flow[list[Fact]]:
        user_id = check_user(user_id)
        on_corrupt = self._left_out if check_flag(skip_unreadable, "skip_unreadable") else None
        op = ops.list_facts(user_id, kinds=["task"], status="open", on_corrupt=on_corrupt)
        tasks: list[Fact] = yield _run(self.store, op)
        if session_id is not None:
            sid = check_id(session_id, "session_id")
            tasks = [t for t in tasks if sid in t.session_ids]
        return tasks

    def note(
        self, user_id: str, *, max_tokens: int = 200, query: str | None = None
    ) -> Flow[str | None]:
        """What a model is told about the user before it answers: the profile within
        ``max_tokens`` (most relevant to ``query`` first) and the open tasks, as one text;
        None when nothing is known. The LangChain middleware (``profile_tokens``) and the
        LlamaIndex memory (``profile_tokens``) put this same text in their system message.
        It enriches a prompt: a fact row edited outside harombe is left out, with one warning
        (``skip_unreadable``), rather than fail every turn of the user."""
        profile = yield from self.profile(
            user_id, max_tokens=max_tokens, query=query, skip_unreadable=True
        )
        parts = [f"What you know about the user:\n{profile.text}"] if profile.text else []
        tasks = yield from self.open_tasks(user_id, skip_unreadable=True)
        if tasks:
            parts.append("Their open tasks:\n" + "\n".join(f"- {t.text}" for t in tasks))
        return "\n\n".join(parts) or None

    def search(
        self,
        user_id: str,
        query: str,
        *,
        top_k: int = 5,
        include_history: bool = False,
        min_similarity: float | None = None,
        skip_unreadable: bool = False,
    ) -> Flow[list[FactHit]]:
        """Facts by meaning (exact cosine over the user's fact vectors) and by keyword (the
        facts' own keyword index), fused by reciprocal rank; best first. ``min_similarity``
        keeps a fact by meaning only when its cosine reaches it (a keyword match is kept). A
        fact row edited outside harombe raises CorruptRowError, or with ``skip_unreadable`` is
        left out with one warning."""
        on_corrupt = self._left_out if check_flag(skip_unreadable, "skip_unreadable") else None
        user_id = check_user(user_id)
        query = check_query(query)
        top_k = check_count(top_k, "top_k", low=1, high=MAX_TOP_K)
        current = not check_flag(include_history, "include_history")
        floor = optional_number(min_similarity, "min_similarity", low=-1.0, high=1.0)
        pool = max(top_k * 4, 20)
        keyword: list[tuple[int, float]] = yield _run(
            self.store, ops.keyword_facts(user_id, query, limit=pool, current=current)
        )
        rankings = [keyword]
        similarity: dict[int, float] = {}
        embedder = self._embedder()
        if embedder is not None:
            q = yield Work(embedder.embed_query, query)
            rows: list[tuple[int, bytes]] = yield _run(
                self.store, ops.fact_vectors(user_id, str(embedder.name), current=current)
            )
            import numpy as np  # lazily: importing the manager stays light

            query_vector = np.asarray(q, dtype=np.float32)
            scored = [
                (fid, float(np.dot(np.frombuffer(blob, dtype=np.float32), query_vector)))
                for fid, blob in rows
                if len(blob) == query_vector.nbytes
            ]
            similarity = dict(scored)
            if floor is not None:
                scored = [pair for pair in scored if pair[1] >= floor]
            scored.sort(key=lambda pair: -pair[1])
            rankings.append(scored[:pool])
        fused: dict[int, float] = {}
        for ranking in rankings:
            for rank, (fid, _score) in enumerate(ranking):
                fused[fid] = fused.get(fid, 0.0) + 1.0 / (RRF_K + rank + 1)
        best = sorted(fused, key=lambda fid: -fused[fid])[:top_k]
        op = ops.list_facts(user_id, current=None, ids=best, on_corrupt=on_corrupt)
        found: list[Fact] = yield _run(self.store, op)
        by_id = {f.id: f for f in found}
        matched = dict(keyword)
        return [
            FactHit(by_id[fid], fused[fid], similarity.get(fid), matched.get(fid))
            for fid in best
            if fid in by_id
        ]

    def profile(
        self,
        user_id: str,
        *,
        max_tokens: int = 200,
        query: str | None = None,
        skip_unreadable: bool = False,
    ) -> Flow[Profile]:
        """The user's current facts, preferences and decisions that fit ``max_tokens``, most
        relevant first: those matching ``query`` (when given), then the most often confirmed
        (most sources), then the newest. ``skip_unreadable`` as for :meth:`search`."""
        user_id = check_user(user_id)
        budget = check_budget(max_tokens, "max_tokens")
        skip = check_flag(skip_unreadable, "skip_unreadable")
        kinds = ["fact", "preference", "decision"]
        op = ops.list_facts(user_id, kinds=kinds, on_corrupt=self._left_out if skip else None)
        facts: list[Fact] = yield _run(self.store, op)
        relevance: dict[int, float] = {}
        if query is not None and facts:
            top_k = min(len(facts), MAX_TOP_K)
            hits = yield from self.search(user_id, query, top_k=top_k, skip_unreadable=skip)
            relevance = {h.fact.id: h.score for h in hits}
        facts.sort(
            key=lambda f: (-relevance.get(f.id, 0.0), -len(f.sources), -f.updated_at.timestamp())
        )
        counter = self.token_counter
        taken: list[Fact] = []
        lines: list[str] = []
        spent = 0
        for fact in facts:
            line = _line(fact)
            cost = counter.count_text(line + "\n")
            if spent + cost > budget:
                continue
            taken.append(fact)
            lines.append(line)
            spent += cost
        return Profile(user_id, taken, "\n".join(lines), spent)

    # editing ------------------------------------------------------------------------------
    def add(
        self,
        user_id: str,
        text: str,
        *,
        kind: str = "fact",
        subject: str | None = None,
        valid_from: Any = None,
        source: tuple[str, int | None] | None = None,
        sources: Sequence[int] | None = None,
    ) -> Flow[Fact]:
        """Add a fact as the user (or the application) states it; consolidated like any
        other (a repeat merges, a new value of its subject supersedes the old).

        ``sources``: ids of the user's messages the fact comes from (search with
        ``fact_weight`` then finds those messages through it); InvalidInputError names
        any that is not a message of the user's sessions."""
        user_id = check_user(user_id)
        origins = [None if source is None else FactSource(*source)]
        if sources is not None:
            wanted = list(
                dict.fromkeys(
                    check_count(m, "a source message id", low=1)
                    for m in check_list(sources, "sources", of="message ids")
                )
            )
            found: list[Message] = yield _run(self.store, _messages_of(user_id, wanted))
            known = {int(m.id or 0): m for m in found}
            missing = [m for m in wanted if m not in known]
            if missing:
                raise InvalidInputError(
                    f"sources {missing} are not messages of user {user_id!r}; give the ids "
                    "save_message returned for the user's own messages."
                )
            origins = [FactSource(known[m].session_id or "", m) for m in wanted] or origins
        proposals = [
            FactProposal(
                "add",
                check_fact_text(text),
                kind=check_kind(kind),
                subject=check_subject(subject),
                source=origin,
                at=_not_future(optional_time(valid_from, "valid_from")),
            )
            for origin in origins
        ]
        # One fact: the proposals after the first repeat it, so each adds only its source.
        touched = yield from self._apply(user_id, proposals, origin="user")
        return (yield from self._one(user_id, touched[0]))

    def correct(self, user_id: str, fact_id: int, text: str, *, subject: Any = ...) -> Flow[Fact]:
        """Replace a current fact's text (the old one is closed as history, not deleted)."""
        user_id = check_user(user_id)
        old = yield from self._one(user_id, fact_id)
        if not old.current:
            raise FactNotFoundError(
                f"fact {fact_id} of {user_id!r} is no longer current; correct the current one "
                "(get_facts lists them)."
            )
        proposal = FactProposal(
            "update",
            check_fact_text(text),
            kind=old.kind,
            subject=old.subject if subject is ... else check_subject(subject),
            target_id=old.id,
        )
        (fid,) = yield from self._apply(user_id, [proposal], origin="user")
        return (yield from self._one(user_id, fid))

    def complete(self, user_id: str, fact_id: int) -> Flow[Fact]:
        """Close a task (status done) or a fact that stopped being true."""
        user_id = check_user(user_id)
        old = yield from self._one(user_id, fact_id)
        if old.current:
            proposal = FactProposal("close", old.text, kind=old.kind, target_id=old.id)
            yield from self._apply(user_id, [proposal], origin="user")
        return (yield from self._one(user_id, fact_id))

    def forget(self, user_id: str, fact_id: int) -> Flow[bool]:
        user_id = check_user(user_id)
        fid = check_count(fact_id, "fact_id", low=1)
        gone: bool = yield _run(self.store, ops.forget_fact(user_id, fid))
        return gone

    def forget_user(self, user_id: str) -> Flow[int]:
        user_id = check_user(user_id)
        count: int = yield _run(self.store, ops.delete_user_facts(user_id))
        return count

    def get(self, user_id: str, fact_id: int) -> Flow[Fact]:
        user_id = check_user(user_id)
        return (yield from self._one(user_id, fact_id))

    def history(self, user_id: str, fact_id: int) -> Flow[list[Fact]]:
        """The fact's line of values, oldest first: those it superseded and those that
        superseded it. Reads the user's facts (a user has few), never another user's."""
        user_id = check_user(user_id)
        start = yield from self._one(user_id, fact_id)
        every: list[Fact] = yield _run(self.store, ops.list_facts(user_id, current=None))
        by_id = {f.id: f for f in every}
        after = {f.supersedes: f for f in every if f.supersedes is not None}
        line = [start]
        while line[0].supersedes in by_id and by_id[line[0].supersedes] not in line:
            line.insert(0, by_id[line[0].supersedes])
        while line[-1].id in after and after[line[-1].id] not in line:
            line.append(after[line[-1].id])
        return line

    def _one(self, user_id: str, fact_id: int) -> Flow[Fact]:
        fid = check_count(fact_id, "fact_id", low=1)
        found: list[Fact] = yield _run(self.store, ops.list_facts(user_id, current=None, ids=[fid]))
        if not found:
            raise FactNotFoundError(
                f"no fact {fact_id} for user {user_id!r}; get_facts(user_id, "
                "include_history=True) lists theirs."
            )
        return found[0]

    # sessions -----------------------------------------------------------------------------
    def session_state(self, session_id: str) -> Flow[SessionState]:
        state: SessionState = yield _run(
            self.store, ops.get_session_state(check_id(session_id, "session_id"))
        )
        return state

    def set_session_state(
        self, session_id: str, *, outcome: Any = ..., important: Any = ...
    ) -> Flow[SessionState]:
        sid = check_id(session_id, "session_id")
        if outcome is not ...:
            check_outcome(outcome)
        if important is not ...:
            check_flag(important, "important")
        found = yield _run(
            self.store, ops.set_session_state(sid, outcome=outcome, important=important)
        )
        if not found:
            raise SessionNotFoundError.of(sid, self.store.location)
        return (yield from self.session_state(sid))

    def end_session(self, session_id: str) -> Flow[None]:
        """Extract the session's remaining facts, then record its outcome unless one was set:
        ongoing while it left open tasks, else resolved."""
        yield from self.extract_session(session_id)
        session = yield _run(self.store, _get_session(session_id))
        if session is None or session.user_id is None:
            return
        tasks = yield from self.open_tasks(session.user_id, session_id)
        outcome = "ongoing" if tasks else "resolved"
        yield _run(
            self.store,
            ops.set_session_state(session_id, outcome=outcome, important=..., if_unset=True),
        )


def _get_session(session_id: str) -> Op[Any]:
    from harombe_core.store import ops as store_ops

    return store_ops.get_session(session_id)


def _messages_of(user_id: str, ids: list[int]) -> Op[Any]:
    """The messages with these ids in the user's sessions (the store checks the owner)."""
    from harombe_core.store import ops as store_ops
    from harombe_core.store.base import SearchScope

    return store_ops.get_messages_by_ids(ids, SearchScope(user_id=user_id))


def _get_messages(session_id: str, after_id: int, limit: int) -> Op[Any]:
    from harombe_core.store import ops as store_ops

    return store_ops.get_messages(session_id, after_id, limit)


def _not_future(at: datetime | None) -> datetime | None:
    """Refuse a ``valid_from`` still to come: a fact says what is or was true, and one that
    holds only later would be current already (consolidation would otherwise move it to now
    without a word)."""
    if at is not None and at > datetime.now(UTC):
        raise InvalidInputError(
            f"valid_from {at.isoformat()} is in the future; a fact says what is or was true: "
            "add it once it holds, or leave valid_from out (now)."
        )
    return at


def _kinds(kinds: Sequence[str] | None) -> list[str] | None:
    if kinds is None:
        return None
    if isinstance(kinds, str):
        kinds = [kinds]
    named = check_list(kinds, "kinds", of="fact kinds")
    return [check_kind(k) for k in named] or list(FACT_KINDS)


def _line(fact: Fact) -> str:
    label = "" if fact.kind == "fact" else f"({fact.kind}) "
    return f"- {label}{fact.text}"
