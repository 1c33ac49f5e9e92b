"""User-memory operations, written once for SQLite and PostgreSQL.

Each function checks its arguments and returns an :class:`~harombe_core.store.runner.Op`
(``store.run(op)`` / ``await store.arun(op)``): one transaction with the store's locking,
retries and error types. Every read and write names the user, so one user's facts can never
be read or changed through another's calls, whatever ids a caller (or an LLM) supplies.

Times are integer microseconds since the epoch; vectors float32 blobs (one per fact, of the
model named beside it). The keyword index is FTS5 kept by triggers on SQLite and a generated
``tsvector`` column on PostgreSQL, so a fact and its index entry commit (and go) together.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from harombe_core.facts.consolidate import Current, decide
from harombe_core.facts.models import Fact, FactProposal, FactSource, SessionState
from harombe_core.store.base import OnCorrupt
from harombe_core.store.erasure import mark_erased
from harombe_core.store.fts import fts_query, pg_query, query_words
from harombe_core.store.fts_scope import facts_search_body
from harombe_core.store.rows import corrupt_row, from_micros, readable, time_problem, to_micros
from harombe_core.store.runner import Body, Dialect, Op
from harombe_core.store.schema import TS_CONFIG
from harombe_core.store.unspaced import spaced

__all__ = [
    "FACT_COLUMNS",
    "consolidate",
    "delete_user_facts",
    "extracted_until",
    "fact_keys",
    "fact_vectors",
    "forget_current",
    "forget_fact",
    "get_session_state",
    "import_facts",
    "keyword_facts",
    "list_facts",
    "mark_extracted",
    "pending_sessions",
    "ranked_sessions",
    "set_session_state",
    "users_with_facts",
]

FACT_COLUMNS = (
    "id, user_id, kind, text, subject, status, valid_from, valid_to, recorded_at, updated_at, "
    "origin, supersedes"
)
_CHUNK = 500
_INSERT_FACT = (
    "INSERT INTO facts (user_id, kind, text, subject, status, valid_from, valid_to, "
    "recorded_at, updated_at, origin, supersedes, vector, vector_model) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id"
)


def _insert_fact(d: Dialect, row: Sequence[Any]) -> Body[int]:
    """Insert one fact (the values of ``_INSERT_FACT``) and return its id.

    On SQLite the facts' triggers index the text as it is, and this sets the keyword entry of
    a text holding Chinese, Japanese or Korean characters to its spaced form (each such
    character a token, store/unspaced.py) in the same transaction. The spacing is done here
    rather than in a trigger because a trigger calling a function only harombe defines would
    make every fact written by another program (the sqlite3 shell, a backup tool, a user's
    script) fail with "no such function"; such a fact is found by its other words, as the
    trigger indexed it. PostgreSQL's generated column spaces it in SQL, for every writer."""
    new_id = int((yield d.step(_INSERT_FACT, tuple(row))).rows[0][0])
    text = str(row[2])
    if d.name == "sqlite" and spaced(text) != text:
        sql = "UPDATE facts_fts SET text = ? WHERE rowid = ?"
        yield d.step(sql, (spaced(text), new_id))
    return new_id


def _fact(row: Sequence[Any], sources: Sequence[FactSource]) -> Fact:
    try:
        return Fact(
            id=int(row[0]),
            user_id=row[1],
            kind=row[2],
            text=row[3],
            subject=row[4],
            status=row[5],
            valid_from=from_micros(row[6]),
            valid_to=None if row[7] is None else from_micros(row[7]),
            recorded_at=from_micros(row[8]),
            updated_at=from_micros(row[9]),
            origin=row[10],
            supersedes=None if row[11] is None else int(row[11]),
            sources=tuple(sources),
        )
    except (TypeError, ValueError, OverflowError):
        times = zip(("valid_from", "valid_to", "recorded_at", "updated_at"), row[6:10], strict=True)
        column, what = next(
            ((c, p) for c, v in times if v is not None and (p := time_problem(v))),
            ("?", "could not be read"),
        )
        raise corrupt_row("facts", row[0], column, what) from None


def _with_sources(
    d: Dialect, rows: Sequence[Any], on_corrupt: OnCorrupt = None
) -> Body[list[Fact]]:
    """Facts from their rows, each with the messages it came from (read by chunks of ids);
    a row that cannot be read raises, or goes to ``on_corrupt`` (``rows.readable``)."""
    ids = [int(r[0]) for r in rows]
    sources: dict[int, list[FactSource]] = {i: [] for i in ids}
    for start in range(0, len(ids), _CHUNK):
        chunk = ids[start : start + _CHUNK]
        found = yield d.step(
            "SELECT fact_id, session_id, message_id FROM fact_sources "
            f"WHERE fact_id IN ({d.marks(len(chunk))}) ORDER BY fact_id, message_id",
            chunk,
        )
        for fid, sid, mid in found.rows:
            sources[int(fid)].append(FactSource(sid, None if mid is None else int(mid)))
    return readable(rows, lambda r: _fact(r, sources[int(r[0])]), on_corrupt)


def _vector(blob: Any) -> Any:
    if blob is None:
        return None
    import numpy as np  # lazily: importing the manager stays light

    return np.frombuffer(bytes(blob), dtype=np.float32)


# writes -----------------------------------------------------------------------------------
def consolidate(
    user_id: str,
    proposals: Sequence[FactProposal],
    times: Sequence[int],
    vectors: Sequence[bytes | None],
    *,
    model: str | None,
    now: int,
    origin: str = "extracted",
    progress: tuple[str, int] | None = None,
) -> Op[list[int]]:
    """Apply ``proposals`` to ``user_id``'s facts in one transaction; the ids of the facts it
    added, merged into or closed, in proposal order (0 for a proposal that changed nothing).

    Each proposal is decided against the user's current facts as this transaction sees them,
    the earlier proposals of the batch included (:func:`~harombe_core.facts.consolidate.decide`).
    ``times[i]``: when proposal ``i`` became true; ``vectors[i]``: its embedding (or None).
    ``progress`` (session id, message id) records how far that session's messages have been
    extracted, in the same transaction: a batch is either wholly applied and marked done, or
    neither (a crash mid-batch leaves it to be extracted again, never half).
    """
    batch = list(proposals)

    def body(d: Dialect) -> Body[list[int]]:
        rows = (
            yield d.step(
                "SELECT id, kind, text, subject, status, valid_from, vector, vector_model "
                "FROM facts WHERE user_id = ? AND valid_to IS NULL ORDER BY id",
                (user_id,),
            )
        ).rows
        current = [
            Current(r[0], r[1], r[2], r[3], r[4], r[5], _vector(r[6]) if r[7] == model else None)
            for r in rows
        ]
        touched: list[int] = []
        for proposal, at, blob in zip(batch, times, vectors, strict=True):
            if progress is not None and not (yield from _source_exists(d, proposal.source)):
                # Extracted from a message deleted meanwhile (another caller deleted or
                # cleared the session while the batch was with the extractor): what only a
                # deleted message said is not stored (its source row would not be either).
                touched.append(0)
                continue
            decision = decide(current, proposal, _vector(blob), at)
            target = decision.target
            if decision.action == "skip":
                touched.append(0)
                continue
            if decision.action == "merge" and target is not None:
                yield from _add_source(d, target.id, proposal.source)
                yield d.step(
                    "UPDATE facts SET updated_at = ? WHERE id = ? AND user_id = ?",
                    (now, target.id, user_id),
                )
                touched.append(target.id)
                continue
            if decision.action == "close" and target is not None:
                yield from _close(d, user_id, target.id, max(at, target.valid_from), now)
                current.remove(target)
                touched.append(target.id)
                continue
            # insert: a new fact, superseding ``target`` (or stored as its history)
            valid_to = None
            if target is not None and decision.historical:
                valid_to = yield from _fit_in_history(
                    d, user_id, proposal.subject or target.subject, at, target.valid_from, now
                )
            elif target is not None:
                yield from _close(d, user_id, target.id, at, now, done=False)
                current.remove(target)
            subject = proposal.subject
            if subject is None and target is not None and proposal.action == "update":
                subject = target.subject
            status = "open" if proposal.kind == "task" else None
            new_id = yield from _insert_fact(
                d,
                (
                    user_id,
                    proposal.kind,
                    proposal.text,
                    subject,
                    status,
                    at,
                    valid_to,
                    now,
                    now,
                    origin,
                    None if target is None or decision.historical else target.id,
                    blob,
                    None if blob is None else model,
                ),
            )
            yield from _add_source(d, new_id, proposal.source)
            if valid_to is None:
                current.append(
                    Current(
                        new_id,
                        proposal.kind,
                        proposal.text,
                        subject,
                        status,
                        at,
                        _vector(blob),
                    )
                )
            touched.append(new_id)
        if progress is not None:
            yield from _mark_extracted(d, *progress)
        return touched

    return Op(body, write=True)


def _source_exists(d: Dialect, source: FactSource | None) -> Body[bool]:
    """Whether the message (or, without one, the session) a proposal came from is stored."""
    if source is None:
        return True
    if source.message_id is None:
        sql, params = "SELECT 1 FROM sessions WHERE id = ?", [source.session_id]
    else:
        sql = "SELECT 1 FROM messages WHERE id = ? AND session_id = ?"
        params = [source.message_id, source.session_id]
    return bool((yield d.step(sql, params)).rows)


def _add_source(d: Dialect, fact_id: int, source: FactSource | None) -> Body[None]:
    if source is None:
        return
    sql = "SELECT 1 FROM fact_sources WHERE fact_id = ? AND session_id = ? AND "
    params: list[Any] = [fact_id, source.session_id]
    if source.message_id is None:
        sql += "message_id IS NULL"
    else:
        sql += "message_id = ?"
        params.append(source.message_id)
    if (yield d.step(sql, params)).rows:
        return
    yield d.step(
        "INSERT INTO fact_sources (fact_id, session_id, message_id) VALUES (?, ?, ?)",
        (fact_id, source.session_id, source.message_id),
    )


def _fit_in_history(
    d: Dialect, user_id: str, subject: str | None, at: int, until: int, now: int
) -> Body[int]:
    """When a value older than the current one (true from ``at``) stops being true: at the
    next value of its subject, at ``until`` (the current value's start) at the latest.

    The history value it falls inside is shortened to end at ``at``, so that an as-of read
    never finds two values of one subject holding at once, in whatever order sessions were
    extracted. A value without a subject (a contradiction) ends at ``until``, as before.
    """
    if subject is None:
        return until
    rows = (
        yield d.step(
            "SELECT id, valid_from, valid_to FROM facts WHERE user_id = ? AND subject = ? "
            "AND kind <> 'task' AND valid_to IS NOT NULL",
            (user_id, subject),
        )
    ).rows
    ends = until
    for fact_id, start, end in rows:
        if at < start < ends:
            ends = start
        if start < at < end:
            yield d.step(
                "UPDATE facts SET valid_to = ?, updated_at = ? WHERE id = ? AND user_id = ?",
                (at, now, fact_id, user_id),
            )
    return ends


def _close(
    d: Dialect, user_id: str, fact_id: int, at: int, now: int, *, done: bool = True
) -> Body[None]:
    """Close a current fact at ``at``: a task ``done`` (completed), or, when a new version
    supersedes it, kept with the status it had (a corrected task was never done)."""
    status = "CASE WHEN kind = 'task' THEN 'done' ELSE status END" if done else "status"
    yield d.step(
        f"UPDATE facts SET valid_to = ?, updated_at = ?, status = {status} "
        "WHERE id = ? AND user_id = ? AND valid_to IS NULL",
        (at, now, fact_id, user_id),
    )


def _mark_extracted(d: Dialect, session_id: str, until_id: int) -> Body[None]:
    yield d.step(
        "INSERT INTO session_state (session_id, facts_until_id) SELECT id, ? FROM sessions "
        "WHERE id = ? ON CONFLICT (session_id) DO UPDATE SET facts_until_id = "
        "excluded.facts_until_id",
        (until_id, session_id),
    )


def forget_fact(user_id: str, fact_id: int) -> Op[bool]:
    """Delete one of ``user_id``'s facts: its row, sources, vector and keyword entry. True if
    it existed. The facts it superseded stay (as history) unless forgotten too."""

    def body(d: Dialect) -> Body[bool]:
        sql = "DELETE FROM facts WHERE id = ? AND user_id = ?"
        gone = bool((yield d.step(sql, (fact_id, user_id))).rowcount)
        if gone:  # its keyword entry's bytes are compacted away at close (store/erasure.py)
            yield from mark_erased(d)
        return gone

    return Op(body, write=True)


def forget_current(user_id: str, subject: str | None, fact_id: int | None) -> Op[int]:
    """Forget ``user_id``'s current fact of ``subject`` (else the current fact ``fact_id``
    if it has no subject: a fact with a subject is named only by it):
    what deleting a LangGraph store item of the facts namespace does. Its id, or 0 if there
    was none. Written as one operation so that it can join a larger transaction."""

    def body(d: Dialect) -> Body[int]:
        sql = "SELECT id FROM facts WHERE user_id = ? AND valid_to IS NULL AND "
        if subject is not None:
            found = (yield d.step(sql + "subject = ? ORDER BY id", (user_id, subject))).rows
            if found or fact_id is None:
                return (yield from _forget_found(d, user_id, found))
        found = (yield d.step(sql + "id = ? AND subject IS NULL", (user_id, fact_id))).rows
        return (yield from _forget_found(d, user_id, found))

    return Op(body, write=True)


def _forget_found(d: Dialect, user_id: str, rows: Sequence[Any]) -> Body[int]:
    if not rows:
        return 0
    fact_id = int(rows[0][0])
    yield from forget_fact(user_id, fact_id).body(d)
    return fact_id


def delete_user_facts(user_id: str) -> Op[int]:
    """Delete every fact of ``user_id`` (current and history); how many."""

    def body(d: Dialect) -> Body[int]:
        yield d.step("UPDATE facts SET supersedes = NULL WHERE user_id = ?", (user_id,))
        count = int((yield d.step("DELETE FROM facts WHERE user_id = ?", (user_id,))).rowcount)
        if count:
            yield from mark_erased(d)
        return count

    return Op(body, write=True)


def import_facts(
    facts: Sequence[Fact], vectors: Sequence[bytes | None], model: str | None
) -> Op[list[int]]:
    """Store facts as they are (an import or a migration): their times, status, origin and
    the sources whose sessions exist here; ``supersedes`` is mapped to the new ids of the
    facts imported with them. Their new ids, in order."""

    def body(d: Dialect) -> Body[list[int]]:
        new_ids: dict[int, int] = {}
        out: list[int] = []
        for fact, blob in zip(facts, vectors, strict=True):
            row = (
                fact.user_id,
                fact.kind,
                fact.text,
                fact.subject,
                fact.status,
                to_micros(fact.valid_from),
                None if fact.valid_to is None else to_micros(fact.valid_to),
                to_micros(fact.recorded_at),
                to_micros(fact.updated_at),
                fact.origin,
                None if fact.supersedes is None else new_ids.get(fact.supersedes),
                blob,
                None if blob is None else model,
            )
            new_id = yield from _insert_fact(d, row)
            new_ids[fact.id] = new_id
            for source in fact.sources:
                sql = "SELECT 1 FROM sessions WHERE id = ?"
                if not (yield d.step(sql, (source.session_id,))).rows:
                    continue
                message = source.message_id
                if message is not None:
                    sql = "SELECT 1 FROM messages WHERE id = ? AND session_id = ?"
                    if not (yield d.step(sql, (message, source.session_id))).rows:
                        message = None
                yield from _add_source(d, new_id, FactSource(source.session_id, message))
            out.append(new_id)
        return out

    return Op(body, write=True)


# reads ------------------------------------------------------------------------------------
def list_facts(
    user_id: str | None,
    *,
    kinds: Sequence[str] | None = None,
    current: bool | None = True,
    as_of: int | None = None,
    status: str | None = None,
    ids: Sequence[int] | None = None,
    limit: int | None = None,
    on_corrupt: OnCorrupt = None,
) -> Op[list[Fact]]:
    """Facts, oldest first: ``user_id``'s (None: every user's, for export), of ``kinds``;
    ``current`` True (holding now), False (closed) or None (both); ``as_of``: those that held
    at that time instead; ``status`` for tasks; ``ids``: only these. A row edited outside
    harombe raises CorruptRowError, or goes to ``on_corrupt`` and is left out."""

    def body(d: Dialect) -> Body[list[Fact]]:
        where: list[str] = []
        params: list[Any] = []
        if user_id is not None:
            where.append("user_id = ?")
            params.append(user_id)
        if kinds:
            where.append(f"kind IN ({d.marks(len(kinds))})")
            params += list(kinds)
        if as_of is not None:
            where.append("valid_from <= ? AND (valid_to IS NULL OR valid_to > ?)")
            params += [as_of, as_of]
        elif current is True:
            where.append("valid_to IS NULL")
        elif current is False:
            where.append("valid_to IS NOT NULL")
        if status is not None:
            where.append("status = ?")
            params.append(status)
        if ids is not None:
            if not ids:
                return []
            where.append(f"id IN ({d.marks(len(ids))})")
            params += list(ids)
        sql = f"SELECT {FACT_COLUMNS} FROM facts"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY user_id, id LIMIT ?"
        params.append(d.no_limit if limit is None else limit)
        rows = (yield d.step(sql, params)).rows
        return (yield from _with_sources(d, rows, on_corrupt))

    return Op(body)


def users_with_facts() -> Op[list[str]]:
    """The users with current facts, sorted (a LangGraph store lists their namespaces)."""

    def body(d: Dialect) -> Body[list[str]]:
        sql = "SELECT DISTINCT user_id FROM facts WHERE valid_to IS NULL ORDER BY user_id"
        return [str(r[0]) for r in (yield d.step(sql)).rows]

    return Op(body)


def keyword_facts(
    user_id: str, query: str, *, limit: int, current: bool = True
) -> Op[list[tuple[int, float]]]:
    """``(fact id, score)`` of ``user_id``'s facts matching the words of ``query``, best first
    (BM25 on SQLite, ``ts_rank`` on PostgreSQL; higher is better on both)."""
    words = query_words(query)
    match = fts_query(words)
    alive = " AND f.valid_to IS NULL" if current else ""

    def body(d: Dialect) -> Body[list[tuple[int, float]]]:
        if match is None:
            return []
        if d.name == "sqlite":
            # Scored with the user's own statistics, not FTS5's over every user's facts (so
            # nothing another user writes moves these scores): see fts.facts_search_body.
            return (yield from facts_search_body(words, user_id, current, limit))
        else:
            # The words as the messages' keyword search reads them (Chinese, Japanese and
            # Korean as phrases of their characters, as the facts' index holds them).
            sql = (
                f"SELECT f.id, ts_rank(f.fts, q) AS r FROM facts f, "
                f"websearch_to_tsquery('{TS_CONFIG}', ?) AS q "
                f"WHERE f.fts @@ q AND f.user_id = ?{alive} ORDER BY r DESC, f.id LIMIT ?"
            )
            rows = (yield d.step(sql, (pg_query(words), user_id, limit))).rows
        return [(int(r[0]), float(r[1])) for r in rows]

    return Op(body)


def fact_vectors(user_id: str, model: str, *, current: bool = True) -> Op[list[tuple[int, bytes]]]:
    """``(fact id, float32 blob)`` of ``user_id``'s facts embedded by ``model``: what an exact
    search by meaning scores (a user's facts are few)."""
    alive = " AND valid_to IS NULL" if current else ""

    def body(d: Dialect) -> Body[list[tuple[int, bytes]]]:
        sql = (
            "SELECT id, vector FROM facts WHERE user_id = ? AND vector_model = ? "
            f"AND vector IS NOT NULL{alive}"
        )
        rows = (yield d.step(sql, (user_id, model))).rows
        return [(int(r[0]), bytes(r[1])) for r in rows]

    return Op(body)


def fact_keys(
    user_id: str, query: str, model: str | None, *, limit: int
) -> Op[tuple[list[tuple[int, float]], list[tuple[int, bytes]], list[tuple[int, int]]]]:
    """What search needs to use ``user_id``'s facts as keys of the messages they came from
    (``fact_weight``), read in one snapshot: the ``limit`` best facts by keyword for
    ``query`` (as :func:`keyword_facts`), every fact's vector of ``model`` (None: no vectors)
    and each fact's source messages ``(fact id, message id)``. Closed facts count too: a
    fact that stopped being true still says what its message said. Only facts with a
    source message are read; deleting the message deletes that link (and an extracted fact
    with no source left), so nothing deleted is found through a fact."""
    keyword = keyword_facts(user_id, query, limit=limit, current=False).body
    vectors = None if model is None else fact_vectors(user_id, model, current=False).body

    def body(
        d: Dialect,
    ) -> Body[tuple[list[tuple[int, float]], list[tuple[int, bytes]], list[tuple[int, int]]]]:
        sql = (
            "SELECT s.fact_id, s.message_id FROM facts f JOIN fact_sources s ON s.fact_id = f.id "
            "WHERE f.user_id = ? AND s.message_id IS NOT NULL"
        )
        sources = [(int(r[0]), int(r[1])) for r in (yield d.step(sql, (user_id,))).rows]
        if not sources:
            return [], [], []
        scored = yield from keyword(d)
        blobs = [] if vectors is None else (yield from vectors(d))
        return scored, blobs, sources

    return Op(body)


# sessions ---------------------------------------------------------------------------------
def get_session_state(session_id: str) -> Op[SessionState]:
    def body(d: Dialect) -> Body[SessionState]:
        sql = "SELECT outcome, important FROM session_state WHERE session_id = ?"
        rows = (yield d.step(sql, (session_id,))).rows
        if not rows:
            return SessionState(session_id)
        return SessionState(session_id, rows[0][0], bool(rows[0][1]))

    return Op(body)


def set_session_state(
    session_id: str, *, outcome: Any, important: Any, if_unset: bool = False
) -> Op[bool]:
    """Set a session's outcome and/or importance (``...``: keep); False for an unknown
    session. ``if_unset``: set the outcome only where none was set (what end_session does, so
    an application's own verdict wins)."""
    changes: dict[str, Any] = {}
    if outcome is not ...:
        changes["outcome"] = outcome
    if important is not ...:
        changes["important"] = bool(important)

    def body(d: Dialect) -> Body[bool]:
        if not (yield d.step("SELECT 1 FROM sessions WHERE id = ?", (session_id,))).rows:
            return False
        yield d.step(
            "INSERT INTO session_state (session_id) VALUES (?) ON CONFLICT (session_id) DO NOTHING",
            (session_id,),
        )
        for column, value in changes.items():
            sql = f"UPDATE session_state SET {column} = ? WHERE session_id = ?"
            if if_unset and column == "outcome":
                sql += " AND outcome IS NULL"
            yield d.step(sql, (value, session_id))
        return True

    return Op(body, write=True)


def pending_sessions(limit: int) -> Op[list[tuple[str, str, int]]]:
    """``(session id, owner, extracted until)`` of owned sessions with messages newer than
    their facts were extracted from: the background extractor's work list."""

    def body(d: Dialect) -> Body[list[tuple[str, str, int]]]:
        sql = (
            "SELECT s.id, s.user_id, COALESCE(st.facts_until_id, 0) FROM sessions s "
            "LEFT JOIN session_state st ON st.session_id = s.id WHERE s.user_id IS NOT NULL "
            "AND EXISTS (SELECT 1 FROM messages m WHERE m.session_id = s.id AND m.id > "
            "COALESCE(st.facts_until_id, 0)) ORDER BY s.updated_at LIMIT ?"
        )
        return [(r[0], r[1], int(r[2])) for r in (yield d.step(sql, (limit,))).rows]

    return Op(body)


def extracted_until(session_id: str) -> Op[int]:
    def body(d: Dialect) -> Body[int]:
        sql = "SELECT facts_until_id FROM session_state WHERE session_id = ?"
        rows = (yield d.step(sql, (session_id,))).rows
        return int(rows[0][0] or 0) if rows else 0

    return Op(body)


def mark_extracted(session_id: str, until_id: int) -> Op[None]:
    def body(d: Dialect) -> Body[None]:
        yield from _mark_extracted(d, session_id, until_id)

    return Op(body, write=True)


def ranked_sessions(
    user_id: str, exclude: str, limit: int
) -> Op[list[tuple[str, bool, str | None]]]:
    """``(session id, important, outcome)`` of the user's summarised sessions, newest first:
    what the budgeted context picks past sessions from."""

    def body(d: Dialect) -> Body[list[tuple[str, bool, str | None]]]:
        sql = (
            "SELECT s.id, COALESCE(st.important, ?), st.outcome FROM sessions s "
            "LEFT JOIN session_state st ON st.session_id = s.id WHERE s.user_id = ? "
            "AND s.id <> ? AND s.summary IS NOT NULL ORDER BY s.updated_at DESC LIMIT ?"
        )
        rows = (yield d.step(sql, (False, user_id, exclude, limit))).rows
        return [(r[0], bool(r[1]), r[2]) for r in rows]

    return Op(body)
