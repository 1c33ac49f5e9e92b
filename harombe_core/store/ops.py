"""Message-store operations written once for every SQL dialect.

Each function checks its arguments (before any transaction starts) and returns an
:class:`~harombe_core.store.runner.Op`: a body of ``?`` statements that the store runs in one
transaction with its own locking, retries and error types (``store.run(op)`` or
``await store.arun(op)``). What differs between SQLite and PostgreSQL is in the
:class:`~harombe_core.store.runner.Dialect`, so the two backends cannot drift apart here.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Collection, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from harombe_core.errors import InvalidInputError, SessionNotFoundError
from harombe_core.models import Message, Session
from harombe_core.owners import check_owner
from harombe_core.store import fts, fts_scope
from harombe_core.store.base import UNSET, KeywordHit, SearchScope, adjacent_ids_sql
from harombe_core.store.context_sql import important_before_sql, is_threaded_sql, thread_path_sql
from harombe_core.store.erasure import mark_erased, relink_successors
from harombe_core.store.fts import CONTEXT_SQL
from harombe_core.store.rows import (
    MESSAGE_COLUMNS,
    SESSION_COLUMNS,
    OnCorrupt,
    check_id,
    check_summary,
    dumps,
    message_ids,
    readable_messages,
    row_to_message,
    row_to_session,
    row_to_summary,
    scope_messages,
    scope_sql,
    session_changes,
    session_span,
    to_micros,
)
from harombe_core.store.runner import Body, Dialect, Op
from harombe_core.store.schema import (
    PG_NOT_WORD,
    PG_SCHEMA_VERSION,
    SCHEMA_VERSION,
    TS_CONFIG,
    TSVECTOR_SQL,
)
from harombe_core.store.unspaced import phrase as spaced_phrase
from harombe_core.validate import optional_count, optional_id

__all__ = [
    "KeywordShortcuts",
    "add_messages",
    "adjacent_ids",
    "clear_session",
    "count_messages",
    "count_session_messages",
    "create_session",
    "delete_session",
    "delete_sessions_before",
    "get_message_summaries",
    "get_messages",
    "get_messages_by_ids",
    "get_meta",
    "get_session",
    "important_before",
    "is_threaded",
    "keyword_search",
    "list_sessions",
    "mark_embedded",
    "neighbours",
    "newest_rows",
    "pending_count",
    "pending_embeddings",
    "rebuild_keyword_index",
    "replace_messages",
    "reset_embedded",
    "scope_size",
    "session_and_prompt",
    "set_message_summary",
    "set_meta",
    "set_parent",
    "stats",
    "summaries_matching",
    "summarised_sessions",
    "system_prompt_tokens",
    "thread_path",
    "update_session",
]

#: Ids per ``IN (...)`` list: well under SQLite's variable limit, and one plan on PostgreSQL.
CHUNK = 500


def _chunks(ids: list[int]) -> list[list[int]]:
    return [ids[start : start + CHUNK] for start in range(0, len(ids), CHUNK)]


# sessions -------------------------------------------------------------------------------------
def create_session(
    session_id: str,
    *,
    user_id: str | None = None,
    system_prompt: str | None = None,
    system_prompt_tokens: int = 0,
    metadata: Mapping[str, Any] | None = None,
    created_at: datetime | None = None,
) -> Op[None]:
    """Insert a session with these fields (each checked as :func:`update_session` checks it;
    ``created_at`` defaults to now). InvalidInputError if the id is taken: nothing is changed
    then, and the stored session is kept."""
    check_id(session_id, "session_id")
    fields = session_changes(
        user_id=user_id,
        system_prompt=system_prompt,
        system_prompt_tokens=system_prompt_tokens,
        metadata=metadata,
    )
    now = to_micros(created_at or datetime.now(UTC))
    columns = ", ".join(["id", *fields, "created_at", "updated_at"])

    def body(d: Dialect) -> Body[None]:
        sql = (
            f"INSERT INTO sessions ({columns}) "
            f"VALUES ({d.marks(len(fields) + 3)}) ON CONFLICT (id) DO NOTHING"
        )
        if (yield d.step(sql, (session_id, *fields.values(), now, now))).rowcount != 1:
            raise InvalidInputError(
                f"session {session_id!r} already exists; load it with load_session() or "
                "choose another id."
            )

    return Op(body, write=True)


def get_session(session_id: str) -> Op[Session | None]:
    check_id(session_id, "session_id")

    def body(d: Dialect) -> Body[Session | None]:
        sql = f"SELECT {SESSION_COLUMNS} FROM sessions WHERE id = ?"
        rows = (yield d.step(sql, (session_id,))).rows
        return row_to_session(rows[0]) if rows else None

    return Op(body)


def session_and_prompt(session_id: str) -> Op[tuple[Session, list[Message]] | None]:
    """The session and its system prompt as the message that leads its history (none without
    one), costed with the token count stored beside it; None if there is no such session.

    One statement: what every window (``get_context``, ``get_window``, ``load_session``) reads
    before the session's newest rows.
    """
    check_id(session_id, "session_id")

    def body(d: Dialect) -> Body[tuple[Session, list[Message]] | None]:
        sql = f"SELECT {SESSION_COLUMNS}, system_prompt_tokens FROM sessions WHERE id = ?"
        rows = (yield d.step(sql, (session_id,))).rows
        if not rows:
            return None
        session = row_to_session(rows[0][:-1])
        if session.system_prompt is None:
            return session, []
        prompt = Message(
            role="system",
            content=session.system_prompt,
            session_id=session.id,
            created_at=session.created_at,
            token_count=int(rows[0][-1] or 0),
        )
        return session, [prompt]

    return Op(body)


def update_session(
    session_id: str,
    *,
    user_id: Any = UNSET,
    system_prompt: Any = UNSET,
    system_prompt_tokens: Any = UNSET,
    metadata: Any = UNSET,
    summary: Any = UNSET,
    summary_data: Any = UNSET,
    summary_until_id: Any = UNSET,
) -> Op[None]:
    """Change the given fields of a session (UNSET ones are kept; each is checked against its
    kind and size limit before the transaction starts). SessionNotFoundError if there is no
    such session; with no field given, nothing is read or written.

    On SQLite a change of owner also puts the session's vectors back on the tail, in the same
    transaction: its vector index files each vector under its owner, and the tail is searched
    exactly until the index owner files them again (PostgreSQL's index reads the owner from
    the session row, so it needs nothing).
    """
    check_id(session_id, "session_id")
    changes = session_changes(
        user_id=user_id,
        system_prompt=system_prompt,
        system_prompt_tokens=system_prompt_tokens,
        metadata=metadata,
        summary=summary,
        summary_data=summary_data,
        summary_until_id=summary_until_id,
    )
    # Column names come from session_changes' fixed table, never from the caller.
    assignments = ", ".join(f"{column} = ?" for column in changes)

    def body(d: Dialect) -> Body[None]:
        if not changes:
            return
        moved = False
        if "user_id" in changes and d.name == "sqlite":
            sql = "SELECT user_id FROM sessions WHERE id = ?"
            owner = (yield d.step(sql, (session_id,))).rows
            moved = bool(owner) and owner[0][0] != changes["user_id"]
        sql = f"UPDATE sessions SET {assignments} WHERE id = ?"
        if (yield d.step(sql, (*changes.values(), session_id))).rowcount == 0:
            raise SessionNotFoundError(
                f"no session {session_id!r}; create it first (MemoryManager.create_session)."
            )
        if d.name == "sqlite" and ("summary" in changes or "summary_json" in changes):
            # The trigger indexed the summary as it is; Chinese, Japanese and Korean characters
            # are set apart here, not in the trigger, so that other programs can still write
            # the file (a trigger calling harombe_spaced would fail in them).
            yield d.step(
                "UPDATE sessions_fts SET summary = harombe_spaced(summary) "
                "WHERE rowid = (SELECT rowid FROM sessions WHERE id = ?) "
                "AND harombe_spaced(summary) <> summary",
                (session_id,),
            )
        if moved:
            yield d.step(
                "UPDATE messages SET embedded = FALSE WHERE session_id = ? AND embedded",
                (session_id,),
            )

    return Op(body, write=True, empty=not changes)


def system_prompt_tokens(session_id: str) -> Op[int]:
    """The tokens of the session's system prompt, as counted when it was set (0 if none)."""

    def body(d: Dialect) -> Body[int]:
        sql = "SELECT system_prompt_tokens FROM sessions WHERE id = ?"
        rows = (yield d.step(sql, (session_id,))).rows
        return int(rows[0][0]) if rows else 0

    return Op(body)


def list_sessions(
    limit: int | None = 10, user_id: str | None = None, offset: int = 0
) -> Op[list[Session]]:
    """Sessions (of ``user_id`` only, if given) with the most recent activity first."""

    def body(d: Dialect) -> Body[list[Session]]:
        sql = f"SELECT {SESSION_COLUMNS} FROM sessions"
        params: list[Any] = []
        if user_id is not None:
            sql += " WHERE user_id = ?"
            params.append(user_id)
        sql += f" ORDER BY updated_at DESC, {d.session_order} DESC LIMIT ? OFFSET ?"
        params += [d.no_limit if limit is None else limit, offset]
        return [row_to_session(r) for r in (yield d.step(sql, params)).rows]

    return Op(body)


def summarised_sessions(user_id: str | None) -> Op[list[tuple[str, str, str | None]]]:
    """``(id, summary, summary_json)`` of the sessions with a summary, of ``user_id`` only
    (None: every user's), in :func:`list_sessions`' order. With a user the rows come through
    the ``sessions_user_updated`` index: the cost follows that user's sessions, not the store,
    and no session without a summary (nor any other column) is read."""
    user_id = optional_id(user_id, "user_id")

    def body(d: Dialect) -> Body[list[tuple[str, str, str | None]]]:
        sql = "SELECT id, summary, summary_json FROM sessions WHERE summary <> ''"
        params: list[Any] = []
        if user_id is not None:
            sql += " AND user_id = ?"
            params.append(user_id)
        sql += f" ORDER BY updated_at DESC, {d.session_order} DESC"
        rows = (yield d.step(sql, params)).rows
        return [(str(r[0]), str(r[1]), r[2]) for r in rows]

    return Op(body)


def summaries_matching(words: Sequence[str]) -> Op[list[tuple[str, str, str | None]]]:
    """``(id, summary, summary_json)`` of the sessions, of every user, whose summary or topics
    hold any of ``words``, in :func:`list_sessions`' order. They are found through the
    summaries' keyword index (migration 10), so the cost follows the sessions that match, not
    the store. The index matches at least every session that holds one of the words as a word
    (SQLite's also finds other forms of it): the caller scores what comes back."""
    terms = sorted({str(w) for w in words if str(w)})

    def body(d: Dialect) -> Body[list[tuple[str, str, str | None]]]:
        if not terms:
            return []
        if d.name == "sqlite":
            match = " OR ".join(
                '"' + spaced_phrase(term).replace('"', '""') + '"' for term in terms
            )
            sql = (
                "SELECT s.id, s.summary, s.summary_json FROM sessions_fts f "
                "JOIN sessions s ON s.rowid = f.rowid "
                "WHERE sessions_fts MATCH ? AND s.summary <> '' "
                "ORDER BY s.updated_at DESC, s.rowid DESC"
            )
            params: list[Any] = [match]
        else:
            # Each word as the trigger indexed the text: runs of word characters (as the
            # database's locale has them), the 'simple' configuration, a Chinese, Japanese or
            # Korean run as the phrase of its characters (PG migration 13).
            word = (
                "phraseto_tsquery('simple', "
                f"harombe_spaced(regexp_replace(?, '{PG_NOT_WORD}', ' ', 'g')))"
            )
            query = " || ".join([word] * len(terms))
            sql = (
                "SELECT id, summary, summary_json FROM sessions "
                f"WHERE summary_fts @@ ({query}) AND summary <> '' "
                f"ORDER BY updated_at DESC, {d.session_order} DESC"
            )
            params = list(terms)
        rows = (yield d.step(sql, params)).rows
        return [(str(r[0]), str(r[1]), r[2]) for r in rows]

    return Op(body)


def delete_session(session_id: str) -> Op[bool]:
    check_id(session_id, "session_id")

    def body(d: Dialect) -> Body[bool]:
        gone = (yield d.step("DELETE FROM sessions WHERE id = ?", (session_id,))).rowcount > 0
        if gone:
            yield from mark_erased(d)
        return gone

    return Op(body, write=True)


def delete_sessions_before(cutoff: datetime) -> Op[list[str]]:
    """Delete sessions with no activity since ``cutoff``; the op's result is their ids."""
    limit = to_micros(cutoff)

    def body(d: Dialect) -> Body[list[str]]:
        sql = "DELETE FROM sessions WHERE updated_at < ? RETURNING id"
        gone = [r[0] for r in (yield d.step(sql, (limit,))).rows]
        if gone:
            yield from mark_erased(d)
        return gone

    return Op(body, write=True)


# messages -------------------------------------------------------------------------------------
def add_messages(
    session_id: str,
    messages: Sequence[Message],
    *,
    user_id: str | None = None,
    replace_ids: Sequence[int] = (),
) -> Op[list[int]]:
    """Insert messages (creating the session if needed) in one transaction; their ids.

    ``replace_ids`` are messages of this session deleted in the same transaction, so a
    framework's "replace the history" never leaves half a history. A ``user_id`` that is not
    the session's owner rolls the whole call back (:func:`~harombe_core.owners.check_owner`).
    PostgreSQL writes each message's keyword vector (with the turn it answers) in the same
    transaction; SQLite's keyword index catches up in the background (store/fts.py).
    """
    replace = replace_messages(session_id, messages, user_id=user_id, replace_ids=replace_ids)

    def body(d: Dialect) -> Body[list[int]]:
        _removed, ids = yield from replace.body(d)
        return ids

    return Op(body, write=True, adds_messages=True)


def replace_messages(
    session_id: str,
    messages: Sequence[Message],
    *,
    user_id: str | None = None,
    replace_ids: Sequence[int] | None = (),
) -> Op[tuple[list[int], list[int]]]:
    """:func:`add_messages` that also says what it deleted: ``(removed ids, new ids)``.

    ``replace_ids=None`` deletes every message the session holds when the transaction runs,
    so "set the history" is one step: ids read before it would miss a message another writer
    added meanwhile, and two concurrent sets would then leave both histories.
    """
    check_id(session_id, "session_id")
    owner_id = optional_id(user_id, "user_id")
    doomed = None if replace_ids is None else message_ids(replace_ids)
    rows = [_message_row(message) for message in messages]
    created, active = session_span([r[6] for r in rows], time.time_ns() // 1000)

    def body(d: Dialect) -> Body[tuple[list[int], list[int]]]:
        # The upsert takes the session's row lock first (writers to one session queue here,
        # so ids grow in commit order within it) and returns the owner.
        ((owner,),) = (
            yield d.step(
                "INSERT INTO sessions (id, user_id, created_at, updated_at) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (id) DO UPDATE SET updated_at = CASE WHEN sessions.updated_at > "
                "excluded.updated_at THEN sessions.updated_at ELSE excluded.updated_at END "
                "RETURNING user_id",
                (session_id, owner_id, created, active),
            )
        ).rows
        check_owner(session_id, owner, owner_id)
        removed: list[int] = []
        if doomed is None:  # the whole history, read under the session's lock
            sql = "DELETE FROM messages WHERE session_id = ? RETURNING id"
            removed = sorted(int(r[0]) for r in (yield d.step(sql, (session_id,))).rows)
        for chunk in _chunks(doomed or []):
            sql = (
                f"DELETE FROM messages WHERE session_id = ? AND id IN ({d.marks(len(chunk))}) "
                "RETURNING id"
            )
            removed += [int(r[0]) for r in (yield d.step(sql, (session_id, *chunk))).rows]
        if removed:  # nothing derived from the deleted messages may keep their words
            yield from relink_successors(d, session_id, removed)
            yield from mark_erased(d)
        context: str | None = None
        if d.name == "postgres":  # the keyword vector holds the turn each message answers
            sql = "SELECT content FROM messages WHERE session_id = ? ORDER BY id DESC LIMIT 1"
            previous = (yield d.step(sql, (session_id,))).rows
            context = previous[0][0] if previous else ""
        ids: list[int] = []
        for row in rows:
            columns, values, extra = _MESSAGE_INSERT, d.marks(len(row) + 1), []
            if context is not None:
                columns += ", context, fts"
                values += f", ?, {TSVECTOR_SQL}"
                extra = [context, row[1], context]
                context = row[1]
            sql = f"INSERT INTO messages ({columns}) VALUES ({values}) RETURNING id"
            ids.append(int((yield d.step(sql, (session_id, *row, *extra))).rows[0][0]))
        yield d.step(
            "UPDATE sessions SET message_count = message_count + ? WHERE id = ?",
            (len(rows) - len(removed), session_id),
        )
        return removed, ids

    return Op(body, write=True, adds_messages=True)


_MESSAGE_INSERT = (
    "session_id, role, content, name, tool_calls, tool_call_id, metadata, created_at, "
    "token_count, parent_id"
)


def _message_row(message: Message) -> tuple[Any, ...]:
    """A message's stored values, in :data:`_MESSAGE_INSERT` order after the session id."""
    if message.token_count is None:
        raise InvalidInputError("token_count must be set before a message is stored.")
    return (
        message.role,
        message.content,
        message.name,
        None if message.tool_calls is None else dumps(message.tool_calls),
        message.tool_call_id,
        dumps(message.metadata) if message.metadata else "{}",
        to_micros(message.created_at),
        message.token_count,
        message.parent_id,
    )


def get_messages(
    session_id: str, after_id: int | None = None, limit: int | None = None
) -> Op[list[Message]]:
    """The session's messages in order, after ``after_id`` (None: from the first), at most
    ``limit`` (None: all)."""
    check_id(session_id, "session_id")
    after = None if after_id is None else (">", int(after_id))

    def body(d: Dialect) -> Body[list[Message]]:
        rows = yield from _session_rows(d, session_id, after, "", limit)
        return [row_to_message(r) for r in rows]

    return Op(body)


def newest_rows(session_id: str, before_id: int | None, limit: int) -> Op[list[Any]]:
    """A page of the session's message rows, newest first, older than ``before_id`` (None:
    from the newest): one seek and a short scan of the ``(session_id, id)`` index. Rows, not
    messages: the newest-first reader (:mod:`harombe_core.context_reads`) turns into
    messages only the rows a window takes."""
    check_id(session_id, "session_id")
    before = None if before_id is None else ("<", int(before_id))

    def body(d: Dialect) -> Body[list[Any]]:
        return (yield from _session_rows(d, session_id, before, " DESC", int(limit)))

    return Op(body)


def _session_rows(
    d: Dialect, session_id: str, bound: tuple[str, int] | None, order: str, limit: int | None
) -> Body[list[Any]]:
    """Rows of a session's messages by id (``order`` "" or " DESC"), those with
    ``id <op> value`` for a ``bound`` of ``(op, value)``: one range of the
    ``(session_id, id)`` index."""
    sql = f"SELECT {MESSAGE_COLUMNS} FROM messages m WHERE m.session_id = ?"
    params: list[Any] = [session_id]
    if bound is not None:
        sql += f" AND m.id {bound[0]} ?"
        params.append(bound[1])
    sql += f" ORDER BY m.id{order} LIMIT ?"
    params.append(d.no_limit if limit is None else limit)
    rows: list[Any] = (yield d.step(sql, params)).rows
    return rows


def important_before(
    session_id: str,
    before_id: int | None,
    threshold: float,
    max_tokens: int,
    limit: int = 64,
) -> Op[list[Message]]:
    """Newest first, up to ``limit`` important messages of the session older than
    ``before_id`` (None: any), with importance >= ``threshold`` and at most ``max_tokens``
    tokens each (through the ``messages_important`` partial index: the cost follows the
    window, see :mod:`~harombe_core.store.context_sql`)."""
    check_id(session_id, "session_id")
    params: list[Any] = [session_id]
    if before_id is not None:
        params.append(int(before_id))
    params += [float(threshold), int(max_tokens), int(limit)]

    def body(d: Dialect) -> Body[list[Message]]:
        sql = important_before_sql(d.name, MESSAGE_COLUMNS, "?", bounded=before_id is not None)
        return [row_to_message(r) for r in (yield d.step(sql, params)).rows]

    return Op(body)


def is_threaded(session_id: str) -> Op[bool]:
    """Whether any message of the session has a parent (else it is one linear thread)."""
    check_id(session_id, "session_id")

    def body(d: Dialect) -> Body[bool]:
        return bool((yield d.step(is_threaded_sql("?"), (session_id,))).rows[0][0])

    return Op(body)


def thread_path(session_id: str, max_tokens: int, *, max_depth: int = 100_000) -> Op[list[Message]]:
    """The thread of the session's newest message, newest first, stopping at the first
    message past ``max_tokens`` (included) or at ``max_depth`` messages. A link to a message
    of another session ends the path, as a link to a deleted one does."""
    check_id(session_id, "session_id")
    params = [session_id, session_id, int(max_tokens), int(max_depth)]

    def body(d: Dialect) -> Body[list[Message]]:
        rows = (yield d.step(thread_path_sql(MESSAGE_COLUMNS, "?"), params)).rows
        path: list[Message] = []
        seen: set[int] = set()
        for row in rows:  # a cycle of links (set_parent allows one) ends where it closes
            message = row_to_message(row)
            if message.id in seen:
                break
            seen.add(message.id)  # type: ignore[arg-type]
            path.append(message)
        return path

    return Op(body)


def get_messages_by_ids(ids: Sequence[int], scope: SearchScope | None = None) -> Op[list[Message]]:
    """Messages with these ids that fall inside ``scope``, in the order of ``ids``."""
    wanted = message_ids(ids)
    where, scope_params = scope_sql(scope)

    def body(d: Dialect) -> Body[list[Message]]:
        found: dict[int, Message] = {}
        for chunk in _chunks(wanted):
            sql = (
                f"SELECT {MESSAGE_COLUMNS} FROM messages m JOIN sessions s ON s.id = m.session_id "
                f"WHERE m.id IN ({d.marks(len(chunk))}){where}"
            )
            rows = (yield d.step(sql, [*chunk, *scope_params])).rows
            found.update((int(m.id or 0), m) for m in scope_messages(rows, scope))
        return [found[i] for i in wanted if i in found]

    return Op(body, empty=not wanted)


def adjacent_ids(ids: Sequence[int]) -> Op[dict[int, tuple[int | None, int | None]]]:
    """For each existing id: the ids just before and after it in its session (or None)."""
    wanted = list(dict.fromkeys(message_ids(ids)))

    def body(d: Dialect) -> Body[dict[int, tuple[int | None, int | None]]]:
        out: dict[int, tuple[int | None, int | None]] = {}
        for chunk in _chunks(wanted):
            sql = adjacent_ids_sql(f"m.id IN ({d.marks(len(chunk))})")
            for mid, before, after in (yield d.step(sql, chunk)).rows:
                out[int(mid)] = (before, after)
        return out

    return Op(body, empty=not wanted)


def neighbours(
    ids: Sequence[int], known: Collection[int], scope: SearchScope | None = None
) -> Op[tuple[dict[int, tuple[int | None, int | None]], list[Message]]]:
    """:func:`adjacent_ids` of ``ids``, and the neighbours not in ``known`` that fall inside
    ``scope`` (:func:`get_messages_by_ids`), in one read: a search's context turns."""
    adjacent = adjacent_ids(ids)

    def body(
        d: Dialect,
    ) -> Body[tuple[dict[int, tuple[int | None, int | None]], list[Message]]]:
        pairs = yield from adjacent.body(d)
        wanted = {i for pair in pairs.values() for i in pair if i is not None} - set(known)
        if not wanted:
            return pairs, []
        return pairs, (yield from get_messages_by_ids(sorted(wanted), scope).body(d))

    return Op(body, empty=adjacent.empty)


def count_messages(session_id: str | None = None) -> Op[int]:
    """Messages of the session (its kept count), or of the whole store with None."""

    def body(d: Dialect) -> Body[int]:
        if session_id is None:
            return int((yield d.step("SELECT COUNT(*) FROM messages")).rows[0][0])
        sql = "SELECT message_count FROM sessions WHERE id = ?"
        rows = (yield d.step(sql, (session_id,))).rows
        return int(rows[0][0]) if rows else 0

    return Op(body)


#: Per dialect: whether message ``m``'s metadata holds the string ``?`` under the key ``?``.
_METADATA_IS = {
    "sqlite": "COALESCE(json_type(m.metadata, ?) = 'text' AND json_extract(m.metadata, ?) = ?, 0)",
    "postgres": (
        "COALESCE(jsonb_typeof(m.metadata::jsonb -> ?) = 'string' "
        "AND (m.metadata::jsonb ->> ?) = ?, false)"
    ),
}


def count_session_messages(
    session_id: str, after_id: int | None, unless: Mapping[str, str] | None
) -> Op[int]:
    """How many messages of a session have an id above ``after_id`` (None: any) and none of
    the ``unless`` metadata values (key -> string). One ``COUNT`` over the session's range of
    the ``(session_id, id)`` index (or, asked for every message, the session's own count): no
    row is sent back, and no other session is read."""
    check_id(session_id, "session_id")
    after_id = optional_count(after_id, "after_id")
    if unless is not None and not isinstance(unless, Mapping):
        raise InvalidInputError(
            f"unless_metadata must be a dict, got {type(unless).__name__}; "
            'e.g. {"status": "archived"}.'
        )
    keys = list((unless or {}).items())
    for key, value in keys:
        if not isinstance(key, str) or not isinstance(value, str):
            raise InvalidInputError(
                "unless_metadata must map strings to strings, got "
                f"{type(key).__name__} -> {type(value).__name__}; compare with the string "
                'the messages store, e.g. {"status": "archived"}.'
            )

    def body(d: Dialect) -> Body[int]:
        if after_id is None and not keys:  # kept by every write, in the same transaction
            sql = "SELECT message_count FROM sessions WHERE id = ?"
            rows = (yield d.step(sql, (session_id,))).rows
            return int(rows[0][0]) if rows else 0
        sql = "SELECT COUNT(*) FROM messages m WHERE m.session_id = ?"
        params: list[Any] = [session_id]
        if after_id is not None:
            sql += " AND m.id > ?"
            params.append(after_id)
        for key, value in keys:
            sql += f" AND NOT {_METADATA_IS[d.name]}"
            path = "$." + json.dumps(key) if d.name == "sqlite" else key
            params += [path, path, value]
        return int((yield d.step(sql, params)).rows[0][0])

    return Op(body)


def scope_size(scope: SearchScope) -> Op[int | None]:
    """Messages a session or user scope can hold (an upper bound, from the sessions' counts);
    None if it names neither."""

    def body(d: Dialect) -> Body[int | None]:
        left_out = scope.exclude_session_id
        if scope.session_id is not None:
            if scope.session_id == left_out:
                return 0
            sql = "SELECT message_count FROM sessions WHERE id = ?"
            rows = (yield d.step(sql, (scope.session_id,))).rows
            return int(rows[0][0]) if rows else 0
        if scope.user_id is not None:
            sql = "SELECT COALESCE(SUM(message_count), 0) FROM sessions WHERE user_id = ?"
            params: tuple[str, ...] = (scope.user_id,)
            if left_out is not None:
                sql += " AND id <> ?"
                params += (left_out,)
            return int((yield d.step(sql, params)).rows[0][0])
        return None

    return Op(body)


def clear_session(session_id: str) -> Op[int]:
    check_id(session_id, "session_id")

    def body(d: Dialect) -> Body[int]:
        sql = "DELETE FROM messages WHERE session_id = ?"
        count = (yield d.step(sql, (session_id,))).rowcount
        if count:
            yield from mark_erased(d)
        yield d.step(
            "UPDATE sessions SET message_count = 0, summary = NULL, summary_json = NULL, "
            "summary_until_id = NULL WHERE id = ?",
            (session_id,),
        )
        return int(count)

    return Op(body, write=True)


def set_parent(message_id: int, parent_id: int | None) -> Op[None]:
    mid = message_ids([message_id])[0]
    pid = None if parent_id is None else message_ids([parent_id])[0]

    def body(d: Dialect) -> Body[None]:
        sql = "UPDATE messages SET parent_id = ? WHERE id = ?"
        if (yield d.step(sql, (pid, mid))).rowcount == 0:
            raise InvalidInputError(f"no message with id {message_id}")

    return Op(body, write=True)


def set_message_summary(message_id: int, summary: Mapping[str, Any] | None) -> Op[None]:
    value = None if summary is None else dumps(check_summary(summary, "message summary"))
    mid = message_ids([message_id])[0]

    def body(d: Dialect) -> Body[None]:
        yield d.step("UPDATE messages SET summary_json = ? WHERE id = ?", (value, mid))

    return Op(body, write=True)


def get_message_summaries(ids: Sequence[int]) -> Op[dict[int, dict[str, Any]]]:
    wanted = message_ids(ids)

    def body(d: Dialect) -> Body[dict[int, dict[str, Any]]]:
        out: dict[int, dict[str, Any]] = {}
        for chunk in _chunks(wanted):
            sql = (
                f"SELECT id, summary_json FROM messages WHERE id IN ({d.marks(len(chunk))}) "
                "AND summary_json IS NOT NULL"
            )
            for mid, value in (yield d.step(sql, chunk)).rows:
                out[int(mid)] = row_to_summary(mid, value)
        return out

    return Op(body, empty=not wanted)


# derived indexes and metadata -----------------------------------------------------------------
def mark_embedded(ids: Sequence[int]) -> Op[None]:
    wanted = message_ids(ids)

    def body(d: Dialect) -> Body[None]:
        for chunk in _chunks(wanted):
            sql = f"UPDATE messages SET embedded = TRUE WHERE id IN ({d.marks(len(chunk))})"
            yield d.step(sql, chunk)

    return Op(body, write=True, empty=not wanted)


#: A message (alias ``m``) whose vector is not stored yet: SQLite keeps the vectors in a table
#: of their own, and a message flagged not embedded may already have one there (embedded, not
#: yet in the vector index: :mod:`harombe_core.vectors.stored`).
NO_VECTOR = "NOT EXISTS (SELECT 1 FROM message_vectors v WHERE v.message_id = m.id)"


def pending_embeddings(limit: int, on_corrupt: OnCorrupt = None) -> Op[list[tuple[Message, str]]]:
    """The oldest ``limit`` messages not embedded yet, each with the turn it answers (its
    vector's text); an unreadable row goes to ``on_corrupt`` (``rows.readable_messages``)."""

    def body(d: Dialect) -> Body[list[tuple[Message, str]]]:
        if d.name == "sqlite":
            sql = (
                f"SELECT {MESSAGE_COLUMNS}, {CONTEXT_SQL} FROM messages m WHERE m.embedded = 0 "
                f"AND {NO_VECTOR} AND m.id > ? ORDER BY m.id LIMIT ?"
            )
        else:  # the turn is kept with each message (for its keyword vector)
            sql = (
                f"SELECT {MESSAGE_COLUMNS}, m.context FROM messages m WHERE NOT m.embedded "
                "AND m.id > ? ORDER BY m.id LIMIT ?"
            )
        after = -(2**63)  # (ids are 64-bit; a crafted row may hold a negative one)
        while True:
            rows = (yield d.step(sql, (after, limit))).rows
            out = readable_messages(rows, on_corrupt)
            if out or len(rows) < limit:  # (only rows passed over: read on past them)
                return out
            after = rows[-1][0]

    return Op(body)


def pending_count() -> Op[int]:
    """How many messages are not embedded yet (read through the partial index of unflagged
    rows, so it costs the backlog, not the store)."""

    def body(d: Dialect) -> Body[int]:
        if d.name == "sqlite":
            sql = f"SELECT COUNT(*) FROM messages m WHERE m.embedded = 0 AND {NO_VECTOR}"
        else:
            sql = "SELECT COUNT(*) FROM messages WHERE NOT embedded"
        return int((yield d.step(sql)).rows[0][0])

    return Op(body)


def reset_embedded() -> Op[int]:
    def body(d: Dialect) -> Body[int]:
        return (yield d.step("UPDATE messages SET embedded = FALSE WHERE embedded")).rowcount

    return Op(body, write=True)


def get_meta(key: str) -> Op[str | None]:
    def body(d: Dialect) -> Body[str | None]:
        rows = (yield d.step("SELECT value FROM harombe_meta WHERE key = ?", (key,))).rows
        return rows[0][0] if rows else None

    return Op(body)


def set_meta(key: str, value: str) -> Op[None]:
    def body(d: Dialect) -> Body[None]:
        yield d.step(
            "INSERT INTO harombe_meta (key, value) VALUES (?, ?) "
            "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (key, value),
        )

    return Op(body, write=True)


# the keyword index ----------------------------------------------------------------------------
def keyword_search(
    query: str, *, limit: int = 10, scope: SearchScope | None = None
) -> Op[list[KeywordHit]]:
    """Messages in ``scope`` matching ``query`` by keyword, best first; ``score`` is positive,
    higher is better.

    The keyword index differs by backend in more than its SQL: on SQLite, BM25 over each
    message and the turn it answers, with a user's or session's own statistics in its scope
    (:mod:`harombe_core.store.fts_scope`), plus the unindexed tail; on PostgreSQL, rank over the
    weighted ``tsvector`` of the same two texts. Both read the words of ``query`` alike (at
    most 64, each quoted: no query syntax gets through), and a query without one asks nothing.
    """
    words = fts.query_words(query) if isinstance(query, str) else []

    def body(d: Dialect) -> Body[list[KeywordHit]]:
        if not words or limit <= 0:
            return []
        if d.name == "sqlite":  # the scope's size picks the plan
            size = None if scope is None else (yield from scope_size(scope).body(d))
            if size == 0:  # nothing is in scope (an unknown user, or only the excluded one)
                return []
            return (yield from fts_scope.keyword_body(words, limit, scope, size))
        return (yield from fts.pg_keyword_body(d, words, limit, scope))

    return Op(body, empty=not words or limit <= 0)


def rebuild_keyword_index() -> Op[int]:
    """Recreate the keyword index from the messages (idempotent); the rows indexed: SQLite's
    FTS5 rows, or PostgreSQL's context and ``tsvector`` of every message.

    On SQLite it also sets apart the Chinese, Japanese and Korean characters of the facts' and
    the summaries' keyword entries that another program wrote (their triggers index the text
    as it is; harombe's own writes space it), so those are found by a word inside a run too."""

    def body(d: Dialect) -> Body[int]:
        if d.name == "sqlite":
            count = yield from fts.rebuild_body()
            for table, column in (("facts_fts", "text"), ("sessions_fts", "summary")):
                yield d.step(
                    f"UPDATE {table} SET {column} = harombe_spaced({column}) "
                    f"WHERE harombe_spaced({column}) <> {column}"
                )
            return count
        result = yield d.step(
            "WITH ctx AS (SELECT id, COALESCE(LAG(content) OVER (PARTITION BY session_id "
            "ORDER BY id), '') AS context FROM messages) "
            "UPDATE messages m SET context = ctx.context, "
            f"fts = setweight(to_tsvector('{TS_CONFIG}', harombe_spaced(m.content)), 'A') || "
            f"setweight(to_tsvector('{TS_CONFIG}', harombe_spaced(ctx.context)), 'B') "
            "FROM ctx WHERE ctx.id = m.id"
        )
        return int(result.rowcount)

    return Op(body, write=True, exactly_once=False)


#: The relations a PostgreSQL store's size counts (everything harombe keeps in the schema).
_PG_TABLES = (
    "'sessions', 'messages', 'harombe_meta', 'harombe_writes', 'message_vectors', "
    "'store_items', 'store_vectors', 'checkpoints', 'checkpoint_blobs', "
    "'checkpoint_writes', 'checkpoint_message_blobs', 'checkpoint_threads'"
)


def stats() -> Op[dict[str, Any]]:
    """Counts (sessions, users, messages, tokens, pending embeddings), the schema version and
    the bytes the store takes: on SQLite the database file and its WAL (0 in memory), on
    PostgreSQL harombe's tables. The caller adds the store's ``location``."""

    def body(d: Dialect) -> Body[dict[str, Any]]:
        sql = "SELECT COUNT(*), COUNT(DISTINCT user_id) FROM sessions"
        sessions, users = (yield d.step(sql)).rows[0]
        if d.name == "sqlite":
            waiting = f"(SELECT COUNT(*) FROM messages m WHERE m.embedded = 0 AND {NO_VECTOR})"
        else:
            waiting = "COUNT(*) FILTER (WHERE NOT embedded)"
        sql = f"SELECT COUNT(*), COALESCE(SUM(token_count), 0), {waiting} FROM messages"
        messages, tokens, pending = (yield d.step(sql)).rows[0]
        if d.name == "sqlite":
            sql = "SELECT file FROM pragma_database_list WHERE name = 'main'"
            path = (yield d.step(sql)).rows[0][0]
            size = 0
            for suffix in ("", "-wal") if path else ():
                with contextlib.suppress(OSError):
                    size += os.stat(path + suffix).st_size
        else:
            size = (
                yield d.step(
                    "SELECT COALESCE(SUM(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
                    "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.relkind = 'r' "
                    f"AND n.nspname = current_schema() AND c.relname IN ({_PG_TABLES})"
                )
            ).rows[0][0]
        return {
            "schema_version": SCHEMA_VERSION if d.name == "sqlite" else PG_SCHEMA_VERSION,
            "sessions": int(sessions),
            "users": int(users),
            "messages": int(messages),
            "tokens": int(tokens),
            "pending_embeddings": int(pending),
            "bytes": int(size),
        }

    return Op(body)


class KeywordShortcuts:
    """The keyword index's operations as methods of a store, for callers of a store itself
    (its contract tests, benchmarks, a script): one line each over ``run``, as LangGraph's
    ``BaseStore.search`` is over ``batch``. The library runs the operations."""

    def run(self, op: Op[Any]) -> Any:  # pragma: no cover - the store's own
        raise NotImplementedError

    def keyword_search(
        self, query: str, *, limit: int = 10, scope: SearchScope | None = None
    ) -> list[KeywordHit]:
        """:func:`keyword_search` run by this store."""
        hits: list[KeywordHit] = self.run(keyword_search(query, limit=limit, scope=scope))
        return hits

    def rebuild_keyword_index(self) -> int:
        """:func:`rebuild_keyword_index` run by this store."""
        count: int = self.run(rebuild_keyword_index())
        return count
