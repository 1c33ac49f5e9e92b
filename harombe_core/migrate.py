"""Copy a whole memory store to another backend (SQLite to PostgreSQL and back).

Why it works the way it does:

* Only the store protocol is used to read and write, so any pair of backends works, and what
  arrives is exactly what the destination would have stored itself (keyword index included).
* Messages are appended per session in order, a batch per transaction. The destination's messages
  of a session are therefore always a prefix of the source's, so a re-run after an interruption
  pairs that prefix up by position, checks it is the same content, and continues after it: no
  duplicates, nothing skipped. Message ids are re-assigned by the destination; ``parent_id``
  threads and ``summary_until_id`` are translated through that pairing.
* Long-term key-value items (the LangGraph store of the LangChain adapter) and their vectors are
  copied after the sessions, by :mod:`harombe_core.migrate_items`, resumable the same way; so
  are the LangGraph checkpoints of its threads, row for row (:mod:`harombe_core.migrate_tables`).
* At the end both stores are compared session by session: counts and a SHA-256 over every field
  (threads expressed as positions, not ids), and every store item field by field. A mismatch is
  an error, never a warning.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harombe_core.errors import InvalidInputError, StoreError, StoreNotFoundError
from harombe_core.migrate_items import copy_store_items, verify_store_items
from harombe_core.migrate_tables import CHECKPOINT_TABLES, copy_tables, verify_tables
from harombe_core.models import Message, Session
from harombe_core.store.base import MessageStore

__all__ = ["MigrationError", "MigrationReport", "migrate", "session_checksum"]

_DONE_KEY = "migrate.done:"


class MigrationError(StoreError):
    """The destination does not match the source (or holds a different session of the same id)."""


@dataclass
class MigrationReport:
    """What a migration did and what it verified."""

    sessions: int = 0
    messages: int = 0
    copied_messages: int = 0
    skipped_sessions: int = 0
    store_items: int = 0
    copied_store_items: int = 0
    checkpoint_rows: int = 0
    copied_checkpoint_rows: int = 0
    checksums: dict[str, str] = field(default_factory=dict)
    verified: bool = False


def _canonical(message: Message, position: dict[int, int], summary: Any) -> list[Any]:
    parent = message.parent_id
    return [
        message.role,
        message.content,
        message.name,
        message.tool_calls,
        message.tool_call_id,
        message.metadata,
        message.created_at.isoformat(),
        message.token_count,
        None if parent is None else position.get(parent, f"external:{parent}"),
        summary,
    ]


def session_checksum(store: MessageStore, session: Session) -> tuple[int, str]:
    """(message count, SHA-256) of a session, independent of the ids the backend assigned."""
    messages = store.get_messages(session.id)
    position = {int(m.id or 0): n for n, m in enumerate(messages)}
    summaries = store.get_message_summaries([int(m.id or 0) for m in messages])
    digest = hashlib.sha256()
    head = [
        session.id,
        session.user_id,
        session.system_prompt,
        store.system_prompt_tokens(session.id),
        session.metadata,
        session.created_at.isoformat(),
        session.summary,
        session.summary_data,
        None if session.summary_until_id is None else position.get(session.summary_until_id),
    ]
    digest.update(json.dumps(head, sort_keys=True, ensure_ascii=False).encode())
    for message in messages:
        row = _canonical(message, position, summaries.get(int(message.id or 0)))
        digest.update(json.dumps(row, sort_keys=True, ensure_ascii=False).encode())
    return len(messages), digest.hexdigest()


def _all_sessions(store: MessageStore) -> list[Session]:
    sessions = store.list_sessions(limit=None)
    return sorted(sessions, key=lambda s: (s.created_at, s.id))


def _same(a: Message, b: Message) -> bool:
    return (a.role, a.content, a.name, a.tool_calls, a.tool_call_id, a.metadata, a.created_at) == (
        b.role, b.content, b.name, b.tool_calls, b.tool_call_id, b.metadata, b.created_at
    )


def _copy_session(
    src: MessageStore,
    dst: MessageStore,
    session: Session,
    batch_size: int,
    on_batch: Callable[[int], None],
) -> int:
    sid = session.id
    existing = dst.get_session(sid)
    if existing is None:
        dst.create_session(
            sid,
            user_id=session.user_id,
            system_prompt=session.system_prompt,
            system_prompt_tokens=src.system_prompt_tokens(sid),
            metadata=session.metadata,
            created_at=session.created_at,
        )
    elif existing.user_id != session.user_id or existing.created_at != session.created_at:
        raise MigrationError(
            f"the destination already has a different session {sid!r}; migrate into an empty "
            "database or delete that session first."
        )
    source = src.get_messages(sid)
    done = dst.get_messages(sid)
    if len(done) > len(source) or not all(
        _same(a, b) for a, b in zip(source, done, strict=False)
    ):
        raise MigrationError(
            f"session {sid!r} in the destination does not continue the source's messages; "
            "migrate into an empty database or delete that session first."
        )
    id_map = {int(a.id or 0): int(b.id or 0) for a, b in zip(source, done, strict=False)}
    copied = 0
    for start in range(len(done), len(source), batch_size):
        batch = source[start : start + batch_size]
        rows = []
        for message in batch:
            parent = message.parent_id
            mapped = id_map.get(parent) if parent is not None else None
            rows.append(message.with_ids(id=None, session_id=None, parent_id=mapped))
        new_ids = dst.add_messages(sid, rows, user_id=session.user_id)
        id_map.update({int(m.id or 0): n for m, n in zip(batch, new_ids, strict=True)})
        copied += len(batch)
        on_batch(len(batch))
    return copied


def _finish_session(src: MessageStore, dst: MessageStore, session: Session) -> bool:
    """Threads, summaries and activity time: idempotent, so safe to redo after a crash.

    Returns False when a parent lives in a session not copied yet (fixed by a second pass).
    """
    complete = True
    sid = session.id
    source = src.get_messages(sid)
    target = dst.get_messages(sid)
    id_map = {int(a.id or 0): int(b.id or 0) for a, b in zip(source, target, strict=True)}
    for a, b in zip(source, target, strict=True):
        wanted = None if a.parent_id is None else id_map.get(a.parent_id)
        if a.parent_id is not None and wanted is None:
            wanted = _foreign_parent(src, dst, a.parent_id)
            complete = complete and wanted is not None
        if b.parent_id != wanted:
            dst.set_parent(int(b.id or 0), wanted)
    summaries = src.get_message_summaries(list(id_map))
    have = dst.get_message_summaries(list(id_map.values()))
    for old_id, summary in summaries.items():
        if have.get(id_map[old_id]) != summary:
            dst.set_message_summary(id_map[old_id], summary)
    until = session.summary_until_id
    dst.update_session(
        sid,
        summary=session.summary,
        summary_data=session.summary_data,
        summary_until_id=None if until is None else id_map.get(until),
    )
    _set_updated_at(dst, sid, session)
    return complete


def _foreign_parent(src: MessageStore, dst: MessageStore, parent_id: int) -> int | None:
    """A parent in another session: find its copy by that session's position."""
    found = src.get_messages_by_ids([parent_id])
    if not found or found[0].session_id is None:
        return None
    other = found[0].session_id
    source = src.get_messages(other)
    target = dst.get_messages(other)
    for a, b in zip(source, target, strict=False):
        if a.id == parent_id:
            return b.id
    return None


def _set_updated_at(dst: MessageStore, sid: str, session: Session) -> None:
    """Keep the source's activity time, so ordering and pruning behave as before the move."""
    from harombe_core.store.sql_body import Body, sql_runner
    from harombe_core.store.sqlite import to_micros

    try:
        runner = sql_runner(dst)
    except InvalidInputError:
        return
    micros = to_micros(session.updated_at)

    def body() -> Body[None]:
        yield runner.step("UPDATE sessions SET updated_at = ? WHERE id = ?", (micros, sid))

    runner.run(body)


def migrate(
    source: str | os.PathLike[str] | MessageStore,
    destination: str | os.PathLike[str] | MessageStore,
    *,
    batch_size: int = 500,
    progress: bool = True,
    on_batch: Callable[[int], None] | None = None,
) -> MigrationReport:
    """Copy every session, message, thread, summary, store item and checkpoint to
    ``destination``.

    Either may be a SQLite path, a ``postgresql://`` URL or an open store. Re-running after an
    interruption continues where it stopped. Raises StoreNotFoundError if the source does not
    exist (nothing is created at either end), NotAHarombeDatabaseError if either end is a file
    that is not a harombe database or is damaged (it is left untouched), InvalidInputError if
    both are the same store, and MigrationError if the verification at the end finds any
    difference.
    """
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise InvalidInputError(f"batch_size must be a positive int, got {batch_size!r}.")
    from tqdm.auto import tqdm

    from harombe_core.manager import open_store

    _check_ends(source, destination)
    src = open_store(source)
    owns_src = src is not source
    try:
        dst = open_store(destination)
    except BaseException:
        if owns_src:
            src.close()
        raise
    owns_dst = dst is not destination
    if src is dst or (src.location == dst.location and src.location != ":memory:"):
        for store, owned in ((src, owns_src), (dst, owns_dst and dst is not src)):
            if owned:
                store.close()
        raise _same_store(src.location)
    report = MigrationReport()
    forward: list[Session] = []
    try:
        sessions = _all_sessions(src)
        total = src.count_messages()
        report.sessions, report.messages = len(sessions), total
        with tqdm(total=total, unit="msg", desc="migrating", disable=not progress) as bar:
            for session in sessions:
                marker = _DONE_KEY + session.id
                if dst.get_meta(marker) == "1":
                    report.skipped_sessions += 1
                    bar.update(session.message_count)
                    continue

                def step(n: int) -> None:
                    bar.update(n)
                    if on_batch is not None:
                        on_batch(n)

                already = dst.count_messages(session.id)
                bar.update(already)
                report.copied_messages += _copy_session(src, dst, session, batch_size, step)
                if not _finish_session(src, dst, session):
                    forward.append(session)
                dst.set_meta(marker, "1")
        # Threads across sessions may point forward: redo those once everything is copied.
        for session in forward:
            _finish_session(src, dst, session)
        report.store_items, report.copied_store_items = copy_store_items(
            src, dst, batch_size=batch_size
        )
        report.checkpoint_rows, report.copied_checkpoint_rows = copy_tables(
            src, dst, CHECKPOINT_TABLES, batch_size=batch_size
        )
        _verify(src, dst, sessions, report)
    finally:
        if owns_src:
            src.close()
        if owns_dst:
            dst.close()
    return report


def _check_ends(
    source: str | os.PathLike[str] | MessageStore,
    destination: str | os.PathLike[str] | MessageStore,
) -> None:
    """Refuse a source that does not exist, and a destination that is the source, before
    either is opened: opening a path or an empty database creates a store there."""
    src = os.fspath(source) if isinstance(source, (str, os.PathLike)) else None
    dst = os.fspath(destination) if isinstance(destination, (str, os.PathLike)) else None
    if src is None:
        return
    if src.startswith(_POSTGRES):
        from harombe_core.store.postgres import redact_url, store_exists

        if not store_exists(src):
            raise StoreNotFoundError(
                f"{redact_url(src)} holds no harombe store; check the source URL. Nothing was "
                "created at either end."
            )
    elif src not in (":memory:", ""):
        path = Path(src).expanduser()
        if not path.exists():
            raise StoreNotFoundError(
                f"no database at {path}; check the source path. Nothing was created at either "
                "end."
            )
        if path.is_file() and path.stat().st_size == 0:
            raise StoreNotFoundError(
                f"{path} is an empty file, not a harombe database, so there is nothing to "
                "migrate. Nothing was created at either end."
            )
    if dst is not None and _same_place(src, dst):
        raise _same_store(src)


_POSTGRES = ("postgresql://", "postgres://")


def _same_place(a: str, b: str) -> bool:
    """Whether two locations are one store: the same real file, or the same database."""
    if a.startswith(_POSTGRES) and b.startswith(_POSTGRES):
        from harombe_core.store.postgres import same_database

        return same_database(a, b)
    if a.startswith(_POSTGRES) or b.startswith(_POSTGRES) or ":memory:" in (a, b):
        return False
    first, second = Path(a).expanduser(), Path(b).expanduser()
    if first.resolve() == second.resolve():
        return True
    try:
        return os.path.samefile(first, second)  # hard links too
    except OSError:  # the destination does not exist yet
        return False


def _same_store(location: str) -> InvalidInputError:
    return InvalidInputError(
        f"the source and the destination are the same store ({location}); migrate to another "
        "path or URL."
    )


def _verify(
    src: MessageStore, dst: MessageStore, sessions: list[Session], report: MigrationReport
) -> None:
    problems = []
    for session in sessions:
        copy = dst.get_session(session.id)
        if copy is None:
            problems.append(f"{session.id}: missing")
            continue
        want = session_checksum(src, session)
        got = session_checksum(dst, copy)
        if want != got:
            problems.append(f"{session.id}: source {want[0]} messages {want[1][:12]}, "
                            f"destination {got[0]} messages {got[1][:12]}")
        report.checksums[session.id] = want[1]
    if src.count_messages() > dst.count_messages():
        problems.append(
            f"source has {src.count_messages()} messages, destination {dst.count_messages()}"
        )
    problems += verify_store_items(src, dst)
    problems += verify_tables(src, dst, CHECKPOINT_TABLES)
    if problems:
        raise MigrationError(
            "verification failed; the destination differs from the source:\n  "
            + "\n  ".join(problems[:20])
        )
    report.verified = True
