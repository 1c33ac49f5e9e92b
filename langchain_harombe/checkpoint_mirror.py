"""A checkpointed thread's messages as a harombe session, kept equal to its newest checkpoint.

The session of a thread (same id) holds, in order, the messages of the newest checkpoint of the
thread's main namespace, as ordinary harombe messages: searchable, windowed, summarised,
exportable. Each such row carries, under ``metadata[MIRROR_KEY]``, the hash of the serialised
message (the key its checkpoint blob is stored under), so the rows the checkpointer manages are
known, and told apart from any message written to the session some other way (those are left
alone). :func:`reconcile` moves the session to a new head in the head's own transaction:

* the common case, a head whose list starts with the list the session holds, is found by
  comparing two references blobs (one ``bytes.startswith``), and only the new messages are
  converted and inserted: a step costs its new messages, whatever the thread's length;
* otherwise (a removed or edited message, a fork, a rollback, or nothing known about the
  session in this process) the session's rows are read and the longest prefix of them that the
  new list keeps in order stays: removed messages are deleted and, from the first message
  inserted before a kept one, the rest is rewritten.

What this process last mirrored is trusted only while the database agrees nothing else happened
since: the session has the message count and newest message id it left (message ids are never
reused, so any write or delete in the session changes one of them), so other processes and
``harombe`` commands never leave it stale.

When it runs
============

A put does not write the session: it marks the thread in ``checkpoint_mirror_due`` (in its own
transaction) and hands it to :class:`MirrorJobs`, which runs :meth:`CheckpointTables.mirror` on
the process's background thread (the one that folds summary backlogs): the session is made to
hold the thread's newest checkpoint and the mark is cleared, in one transaction. Several puts
of a turn become one such transaction. The session's messages are derived data, like their
vectors, so:

* **read your writes**: every read of messages or sessions through the store of this process
  first applies what is owed (:mod:`harombe_core.store.pending`), on the reading thread;
* ``MemoryManager.flush()`` and ``close()`` apply it too;
* **a kill loses nothing**: the mark commits with the checkpoint, and the next open of the
  database, by any ``MemoryManager`` in any process, saver or not, writes every marked thread's
  session before its first read (:mod:`~langchain_harombe.checkpoint_owed`); a saver opened on
  it hands them to its own jobs too.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from langchain_core.messages import BaseMessage

from harombe_core.integration import Body, SqlRunner
from harombe_core.models import Message
from langchain_harombe.checkpoint_rows import HASH_SIZE, split_refs
from langchain_harombe.convert import storable_message

__all__ = [
    "MIRROR_KEY",
    "Head",
    "Mirror",
    "ThreadState",
    "convert_ahead",
    "convert_with",
    "diff",
    "mirror_from_json",
    "mirror_json",
    "reconcile",
]

#: Metadata key of a session message that mirrors a checkpoint message (its hash, in hex).
MIRROR_KEY = "langgraph_message"


class Mirror(NamedTuple):
    """What a session mirrors: checkpoint ``head_id``'s messages (channel ``version``,
    ``refs``), and the session's message count and newest message id right after."""

    head_id: str
    version: str | None
    message_count: int
    max_id: int
    refs: bytes


@dataclass(frozen=True, slots=True)
class ThreadState:
    """A thread as a transaction found it (``epoch`` is None for a new thread)."""

    owner: str | None
    message_count: int
    max_id: int
    head_id: str | None
    epoch: str | None
    due: bool = False  # the session is marked as owed a checkpoint's messages

    @classmethod
    def from_row(cls, row: Sequence[object]) -> ThreadState:
        """The thread as a row ``(owner, message count, newest message id, newest checkpoint
        id, blob epoch, owed)`` gives it."""
        owner, count, max_id, head_id, epoch, due = row[:6]
        return cls(
            owner=None if owner is None else str(owner),
            message_count=int(str(count)),
            max_id=int(str(max_id or 0)),
            head_id=None if head_id is None else str(head_id),
            epoch=None if epoch is None else str(epoch),
            due=bool(due),
        )


@dataclass(frozen=True, slots=True)
class Head:
    """The messages of the checkpoint ``checkpoint_id`` that becomes the thread's newest.

    ``refs`` is None when not read yet (an unchanged list: the caller reads it only if the
    session cannot be shown to hold it already); ``messages`` are the LangChain messages
    behind ``refs`` when the caller has them (a put), else they are loaded by hash.
    """

    checkpoint_id: str
    version: str | None
    refs: bytes | None
    messages: Sequence[BaseMessage] | None = None


def diff(old: Sequence[tuple[bytes, int]], new: Sequence[bytes]) -> tuple[int, list[int]]:
    """How to turn the mirrored ``old`` (hash, message id) into ``new`` (hashes), in order.

    Returns (k, ids): the first ``k`` hashes of ``new`` are kept messages, ``ids`` are the
    messages to delete, and ``new[k:]`` is what to append.
    """
    last = {digest: index for index, digest in enumerate(new)}
    kept = 0
    doomed: list[int] = []
    for n, (digest, message_id) in enumerate(old):
        if kept < len(new) and new[kept] == digest:
            kept += 1
        elif last.get(digest, -1) >= kept:
            # New messages come before this one: it and everything after are rewritten.
            doomed.extend(entry[1] for entry in old[n:])
            break
        else:
            doomed.append(message_id)
    return kept, doomed


def reconcile(
    runner: SqlRunner,
    thread_id: str,
    state: ThreadState,
    head: Head,
    *,
    cached: Mirror | None,
    convert: Callable[[BaseMessage], Message],
    load_refs: Callable[[str | None], Body[bytes]],
    load_messages: Callable[[list[bytes]], Body[list[BaseMessage]]],
    converted: dict[int, Message] | None = None,
    removed: list[int] | None = None,
) -> Body[Mirror]:
    """Make the session hold ``head``'s messages; returns what it then mirrors.
    ``converted``: some of ``head.messages`` converted ahead (see :func:`convert_ahead`);
    ``removed``, when given, receives the ids of the messages deleted (a ``RemoveMessage``,
    an edit, a rollback), whose bytes the files then owe an erasure."""
    step = runner.step
    trusted = (
        cached is not None
        and cached.message_count == state.message_count
        and cached.max_id == state.max_id
    )
    if trusted and cached is not None and head.version == cached.version:
        return cached._replace(head_id=head.checkpoint_id)  # the same list: nothing to write
    refs = head.refs
    if refs is None:
        refs = yield from load_refs(head.version)
    if trusted and cached is not None and refs.startswith(cached.refs):
        kept, doomed = len(cached.refs) // HASH_SIZE, list[int]()
        tail = split_refs(refs[len(cached.refs) :])
    else:
        rows = (
            yield step(
                "SELECT id, metadata FROM messages WHERE session_id = ? ORDER BY id",
                (thread_id,),
            )
        ).rows
        new = split_refs(refs)
        kept, doomed = diff(_mirrored(rows), new)
        tail = new[kept:]
        trusted = False
    if head.messages is not None:
        appended = list(head.messages[kept:])
    else:
        appended = yield from load_messages(tail)
    prepared = []
    ready = dict(converted or {})  # a retried transaction converts again what it used
    for message, digest in zip(appended, tail, strict=True):
        row = ready.pop(id(message), None)
        row = convert(message) if row is None else row
        row.metadata[MIRROR_KEY] = digest.hex()
        prepared.append(row)
    ids: list[int] = []
    if removed is not None:
        removed.extend(doomed)
    if prepared or doomed:
        ids = yield from runner.add_messages(
            thread_id, prepared, user_id=state.owner, replace_ids=doomed
        )
    if trusted:
        count, max_id = state.message_count + len(ids), ids[-1] if ids else state.max_id
    else:
        found = (
            yield step(
                "SELECT message_count, (SELECT MAX(id) FROM messages WHERE session_id = ?) "
                "FROM sessions WHERE id = ?",
                (thread_id, thread_id),
            )
        ).rows[0]
        count, max_id = int(found[0]), int(found[1] or 0)
    return Mirror(head.checkpoint_id, head.version, count, max_id, refs)


def mirror_json(mirror: Mirror | None) -> list[object] | None:
    """A mirror as JSON (a write's result is recorded for exactly-once retries)."""
    if mirror is None:
        return None
    return [*mirror[:4], mirror.refs.hex()]


def mirror_from_json(value: Sequence[object] | None) -> Mirror | None:
    if value is None:
        return None
    head_id, version, count, max_id, refs = value
    return Mirror(
        str(head_id),
        None if version is None else str(version),
        int(str(count)),
        int(str(max_id)),
        bytes.fromhex(str(refs)),
    )


def convert_ahead(
    cached: Mirror | None, head: Head | None, convert: Callable[[BaseMessage], Message]
) -> dict[int, Message]:
    """The messages of ``head`` that :func:`reconcile` will likely append (those after the
    list last mirrored, ``cached``, when the head extends it), converted now, outside any
    transaction; by ``id()`` of the LangChain message."""
    if head is None or head.messages is None or head.refs is None or cached is None:
        return {}
    if not head.refs.startswith(cached.refs):
        return {}
    return {id(m): convert(m) for m in head.messages[len(cached.refs) // HASH_SIZE :]}


def _mirrored(rows: Sequence[Sequence[object]]) -> list[tuple[bytes, int]]:
    """(hash, id) of the session rows that mirror checkpoint messages, in order."""
    out: list[tuple[bytes, int]] = []
    for message_id, metadata in rows:
        if MIRROR_KEY not in str(metadata):
            continue
        digest = json.loads(str(metadata)).get(MIRROR_KEY)
        if isinstance(digest, str):
            out.append((bytes.fromhex(digest), int(str(message_id))))
    return out


def convert_with(counter: object) -> Callable[[BaseMessage], Message]:
    """LangChain message -> harombe message with its token count (``counter.count_message``)."""
    count = counter.count_message  # type: ignore[attr-defined]

    def convert(message: BaseMessage) -> Message:
        stored = storable_message(message)
        return stored.with_ids(token_count=count(stored))

    return convert
