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
since: the thread's newest checkpoint is the one it mirrored, and the session has the message
count and newest message id it left (any write or delete in the session changes one of them),
so other processes and ``harombe`` commands never leave it stale.
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

__all__ = ["MIRROR_KEY", "Head", "Mirror", "ThreadState", "convert_with", "diff", "reconcile"]

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
) -> Body[Mirror]:
    """Make the session hold ``head``'s messages; returns what it then mirrors."""
    step = runner.step
    trusted = (
        cached is not None
        and cached.head_id == state.head_id
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
    for message, digest in zip(appended, tail, strict=True):
        row = convert(message)
        row.metadata[MIRROR_KEY] = digest.hex()
        prepared.append(row)
    ids: list[int] = []
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
