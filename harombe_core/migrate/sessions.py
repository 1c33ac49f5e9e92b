"""Copy one session's messages, threads, summaries and activity time to another store.

Messages go in order, a batch per transaction, so the destination's messages of a session are
always a prefix of the source's: a re-run pairs that prefix up by position, checks it holds the
same content and continues after it. Threads, summaries and the activity time are set after the
messages by :func:`finish_session`, which is idempotent, so it is safe to redo after a crash.
"""

from __future__ import annotations

from collections.abc import Callable

from harombe_core.errors import InvalidInputError, MigrationError
from harombe_core.models import Message, Session
from harombe_core.store import ops
from harombe_core.store.base import MessageStore

__all__ = ["all_sessions", "copy_session", "finish_session"]


def all_sessions(store: MessageStore) -> list[Session]:
    sessions = store.run(ops.list_sessions(limit=None))
    return sorted(sessions, key=lambda s: (s.created_at, s.id))


def _same(a: Message, b: Message) -> bool:
    return (a.role, a.content, a.name, a.tool_calls, a.tool_call_id, a.metadata, a.created_at) == (
        b.role, b.content, b.name, b.tool_calls, b.tool_call_id, b.metadata, b.created_at
    )


def copy_session(
    src: MessageStore,
    dst: MessageStore,
    session: Session,
    batch_size: int,
    on_batch: Callable[[int], None],
) -> int:
    sid = session.id
    existing = dst.run(ops.get_session(sid))
    if existing is None:
        dst.run(
            ops.create_session(
                sid,
                user_id=session.user_id,
                system_prompt=session.system_prompt,
                system_prompt_tokens=src.run(ops.system_prompt_tokens(sid)),
                metadata=session.metadata,
                created_at=session.created_at,
            )
        )
    elif existing.user_id != session.user_id or existing.created_at != session.created_at:
        raise MigrationError(
            f"the destination already has a different session {sid!r}; migrate into an empty "
            "database or delete that session first."
        )
    source = src.run(ops.get_messages(sid))
    done = dst.run(ops.get_messages(sid))
    if len(done) > len(source) or not all(_same(a, b) for a, b in zip(source, done, strict=False)):
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
        new_ids = dst.run(ops.add_messages(sid, rows, user_id=session.user_id))
        id_map.update({int(m.id or 0): n for m, n in zip(batch, new_ids, strict=True)})
        copied += len(batch)
        on_batch(len(batch))
    return copied


def finish_session(src: MessageStore, dst: MessageStore, session: Session) -> bool:
    """Threads, summaries and activity time: idempotent, so safe to redo after a crash.

    Returns False when a parent lives in a session not copied yet (fixed by a second pass).
    """
    complete = True
    sid = session.id
    source = src.run(ops.get_messages(sid))
    target = dst.run(ops.get_messages(sid))
    id_map = {int(a.id or 0): int(b.id or 0) for a, b in zip(source, target, strict=True)}
    for a, b in zip(source, target, strict=True):
        wanted = None if a.parent_id is None else id_map.get(a.parent_id)
        if a.parent_id is not None and wanted is None:
            wanted = _foreign_parent(src, dst, a.parent_id)
            complete = complete and wanted is not None
        if b.parent_id != wanted:
            dst.run(ops.set_parent(int(b.id or 0), wanted))
    summaries = src.run(ops.get_message_summaries(list(id_map)))
    have = dst.run(ops.get_message_summaries(list(id_map.values())))
    for old_id, summary in summaries.items():
        if have.get(id_map[old_id]) != summary:
            dst.run(ops.set_message_summary(id_map[old_id], summary))
    until = session.summary_until_id
    dst.run(
        ops.update_session(
            sid,
            summary=session.summary,
            summary_data=session.summary_data,
            summary_until_id=None if until is None else id_map.get(until),
        )
    )
    _set_updated_at(dst, sid, session)
    return complete


def _foreign_parent(src: MessageStore, dst: MessageStore, parent_id: int) -> int | None:
    """A parent in another session: find its copy by that session's position."""
    found = src.run(ops.get_messages_by_ids([parent_id]))
    if not found or found[0].session_id is None:
        return None
    other = found[0].session_id
    source = src.run(ops.get_messages(other))
    target = dst.run(ops.get_messages(other))
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
