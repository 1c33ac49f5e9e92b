"""How a LangGraph checkpoint becomes rows, and back (the checkpointer's serialisation).

A checkpoint is split the way LangGraph's PostgresSaver splits it, plus one step further:

* the checkpoint row holds the checkpoint itself with only its primitive channel values (None,
  str, int, float, bool) inline;
* every other channel value is a blob keyed by its channel *version*, written only in the put
  whose ``new_versions`` names it, so a channel that did not change costs nothing;
* a channel holding a list of LangChain messages is stored as a list of 16-byte references, one
  per message, to blobs kept once per thread (``checkpoint_message_blobs``, keyed by a hash of
  the serialised message). A step that appends one message to a thread of a thousand writes one
  message blob and 16 KB of references, where a checkpointer storing the list writes the whole
  list again; reading rebuilds the list from the blobs, each deserialised by the saver's serde
  exactly as a stored list would be.

A serialised message is compared with the bytes this process last wrote for the same message
id, so its hash is only computed when it changed. :class:`BlobCache` keeps those bytes (they are
immutable under their hash, so keeping them is always safe) and remembers, per thread, which
blobs are known to be in the database under the thread's current ``blob_epoch``; the epoch
changes whenever blobs may have been deleted, so a stale memory can never leave a reference
without its blob.
"""

from __future__ import annotations

import hashlib
import json
import operator
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from langchain_core.messages import BaseMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_serializable_checkpoint_metadata,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from harombe_core.errors import InvalidInputError

__all__ = [
    "HASH_SIZE",
    "REFS_TYPE",
    "BlobCache",
    "MessageList",
    "PutPlan",
    "assemble",
    "checked_id",
    "message_hash",
    "plan_put",
    "split_refs",
    "thread_key",
]

#: The type tag of a channel blob that holds message references instead of a serialised value.
REFS_TYPE = "harombe.message_refs"
HASH_SIZE = 16

_PRIMITIVES = (str, int, float, bool)


def message_hash(type_: str, blob: bytes) -> bytes:
    """The 16-byte key of a serialised message (its serde type and bytes)."""
    digest = hashlib.blake2b(type_.encode(), digest_size=HASH_SIZE)
    digest.update(b"\x00")
    digest.update(blob)
    return digest.digest()


def split_refs(refs: bytes) -> list[bytes]:
    """The hashes packed in a references blob, in order."""
    return [refs[i : i + HASH_SIZE] for i in range(0, len(refs), HASH_SIZE)]


def checked_id(value: Any, what: str) -> str:
    """A thread or user id as the session store keeps it (a str of 1 to 512 characters)."""
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise InvalidInputError(
            f"{what} must be a str (or an int), got {type(value).__name__}; pass it as "
            f"config={{'configurable': {{'{what}': '...'}}}}."
        )
    text = str(value)
    if not text or len(text) > 512 or "\x00" in text:
        raise InvalidInputError(
            f"{what} must be 1 to 512 characters without NUL bytes, got {text!r:.80}."
        )
    return text


def thread_key(config: RunnableConfig) -> tuple[str, str]:
    """(thread_id, checkpoint_ns) of a config, checked."""
    configurable = config.get("configurable") or {}
    if "thread_id" not in configurable or configurable["thread_id"] is None:
        raise InvalidInputError(
            "a checkpointer needs a thread: invoke the graph with "
            "config={'configurable': {'thread_id': '...'}}."
        )
    namespace = configurable.get("checkpoint_ns") or ""
    return checked_id(configurable["thread_id"], "thread_id"), str(namespace)


def config_user(config: RunnableConfig | None) -> str | None:
    """The run's ``user_id`` (from ``configurable``), or None when it names none."""
    configurable = (config or {}).get("configurable") or {}
    value = configurable.get("user_id")
    return None if value is None else checked_id(value, "user_id")


def _is_message_list(value: Any) -> bool:
    return type(value) is list and all(isinstance(m, BaseMessage) for m in value)


@dataclass(slots=True)
class MessageList:
    """A message-list channel of a checkpoint being put: its references and its messages."""

    version: str
    refs: bytes
    hashes: list[bytes]
    blobs: list[tuple[str, bytes]]
    messages: list[BaseMessage]


@dataclass(slots=True)
class PutPlan:
    """Everything a put writes, computed before its transaction starts."""

    thread_id: str
    namespace: str
    checkpoint_id: str
    parent_id: str | None
    run_id: str | None
    user_id: str | None
    type: str
    checkpoint: bytes
    metadata: str
    blobs: list[tuple[str, str, str, bytes | None]] = field(default_factory=list)
    lists: dict[str, MessageList] = field(default_factory=dict)
    #: The version of each channel the checkpoint holds (to find an unchanged message list).
    versions: dict[str, str] = field(default_factory=dict)
    #: Channels whose value is kept in the checkpoint row itself.
    inline: frozenset[str] = frozenset()

    def message_blobs(self) -> list[tuple[bytes, str, bytes]]:
        """(hash, type, blob) of every message the checkpoint references."""
        return [
            (digest, type_, blob)
            for entry in self.lists.values()
            for digest, (type_, blob) in zip(entry.hashes, entry.blobs, strict=True)
        ]


class BlobCache:
    """Serialised messages this process has seen, per thread, bounded in bytes (LRU)."""

    def __init__(self, max_bytes: int = 64 * 1024 * 1024) -> None:
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._threads: OrderedDict[str, _ThreadBlobs] = OrderedDict()
        self._bytes = 0

    def _thread(self, thread_id: str) -> _ThreadBlobs:
        entry = self._threads.get(thread_id)
        if entry is None:
            entry = self._threads[thread_id] = _ThreadBlobs()
        self._threads.move_to_end(thread_id)
        return entry

    def serialise(
        self, serde: SerializerProtocol, thread_id: str, messages: Sequence[BaseMessage]
    ) -> tuple[list[bytes], list[tuple[str, bytes]]]:
        """(hashes, (type, blob) pairs) of ``messages``.

        A message this process serialised before for the thread, still the same object with
        the same field values (``is``: a field set to a new value, as LangChain's
        human-in-the-loop edit does, is seen), is not serialised again; so a step costs the
        messages it added or replaced, not the whole list. (A message mutated deep inside one
        of its fields, such as a tool call's argument dict edited in place, is not seen:
        LangGraph state is updated by returning new messages, not by mutating stored ones.)
        """
        with self._lock:
            seen = self._thread(thread_id).by_id  # read without the lock: dict.get is atomic
        hashes: list[bytes] = []
        dumped: list[tuple[str, bytes]] = []
        fresh: dict[str, _Seen] = {}
        for message in messages:
            key = message.id
            known = seen.get(key) if key is not None else None
            if known is not None and known.message is message and known.same_fields(message):
                hashes.append(known.digest)
                dumped.append((known.type, known.blob))
                continue
            type_, blob = serde.dumps_typed(message)
            if known is not None and known.blob == blob and known.type == type_:
                digest = known.digest
            else:
                digest = message_hash(type_, blob)
            if key is not None:
                fresh[key] = _Seen(message, tuple(message.__dict__.values()), type_, blob, digest)
            hashes.append(digest)
            dumped.append((type_, blob))
        if fresh:
            with self._lock:
                self._thread(thread_id).by_id.update(fresh)
        return hashes, dumped

    def unwritten(
        self, thread_id: str, epoch: str, blobs: Sequence[tuple[bytes, str, bytes]]
    ) -> list[tuple[bytes, str, bytes]]:
        """The ``blobs`` not known to be stored under ``epoch`` (all of them, if it changed)."""
        with self._lock:
            entry = self._threads.get(thread_id)
            if entry is None or entry.epoch != epoch:
                return list(blobs)
            written = entry.written
            return [b for b in blobs if b[0] not in written]

    def remember(
        self,
        thread_id: str,
        blobs: Sequence[tuple[bytes, str, bytes]],
        *,
        epoch: str | None = None,
        keep: Sequence[bytes] = (),
    ) -> None:
        """Keep ``blobs`` (hash, type, blob); with ``epoch`` they are also known to be stored
        under it. ``keep`` (the newest checkpoint's references) survives when the thread's
        share is trimmed."""
        with self._lock:
            entry = self._thread(thread_id)
            if epoch is not None and entry.epoch != epoch:
                entry.epoch, entry.written = epoch, set()
            known = entry.blobs
            for digest, type_, blob in blobs:
                if digest not in known:
                    known[digest] = (type_, blob)
                    entry.size += len(blob)
                    self._bytes += len(blob)
                if epoch is not None:
                    entry.written.add(digest)
            if keep and len(known) > 2 * len(keep) + 256:
                self._trim(entry, set(keep))
            while self._bytes > self.max_bytes and len(self._threads) > 1:
                _, oldest = self._threads.popitem(last=False)
                self._bytes -= oldest.size

    def _trim(self, entry: _ThreadBlobs, keep: set[bytes]) -> None:
        kept = {h: p for h, p in entry.blobs.items() if h in keep}
        size = sum(len(p[1]) for p in kept.values())
        self._bytes += size - entry.size
        entry.blobs, entry.size = kept, size
        entry.written &= keep
        entry.by_id = {k: v for k, v in entry.by_id.items() if v.digest in keep}

    def known(self, thread_id: str, hashes: Sequence[bytes]) -> dict[bytes, tuple[str, bytes]]:
        """The blobs among ``hashes`` held in memory."""
        with self._lock:
            entry = self._threads.get(thread_id)
            if entry is None:
                return {}
            return {h: entry.blobs[h] for h in hashes if h in entry.blobs}

    def mirror(self, thread_id: str) -> Any:
        """What this process last mirrored into the thread's session (a ``Mirror``), or None."""
        with self._lock:
            entry = self._threads.get(thread_id)
            return None if entry is None else entry.mirror

    def set_mirror(self, thread_id: str, mirror: Any) -> None:
        with self._lock:
            self._thread(thread_id).mirror = mirror

    def forget(self, thread_ids: Sequence[str]) -> None:
        """Drop what is known about these threads (they were deleted or rewritten)."""
        with self._lock:
            for thread_id in thread_ids:
                entry = self._threads.pop(thread_id, None)
                if entry is not None:
                    self._bytes -= entry.size


@dataclass(slots=True)
class _Seen:
    """A message as last serialised: the object, its field values, its blob and hash."""

    message: BaseMessage
    values: tuple[Any, ...]
    type: str
    blob: bytes
    digest: bytes

    def same_fields(self, message: BaseMessage) -> bool:
        current = message.__dict__
        return len(current) == len(self.values) and all(
            map(operator.is_, self.values, current.values())
        )


@dataclass(slots=True)
class _ThreadBlobs:
    epoch: str | None = None
    written: set[bytes] = field(default_factory=set)
    blobs: dict[bytes, tuple[str, bytes]] = field(default_factory=dict)
    by_id: dict[str, _Seen] = field(default_factory=dict)
    mirror: Any = None
    size: int = 0


def plan_put(
    serde: SerializerProtocol,
    cache: BlobCache,
    config: RunnableConfig,
    checkpoint: Checkpoint,
    metadata: CheckpointMetadata,
    new_versions: ChannelVersions,
) -> PutPlan:
    """Serialise a checkpoint into the rows a put writes (no I/O)."""
    thread_id, namespace = thread_key(config)
    configurable = config["configurable"]
    inline: dict[str, Any] = {}
    plan_blobs: list[tuple[str, str, str, bytes | None]] = []
    lists: dict[str, MessageList] = {}
    for channel, value in checkpoint["channel_values"].items():
        if value is None or isinstance(value, _PRIMITIVES):
            inline[channel] = value
            continue
        version = new_versions.get(channel)
        if version is None:
            continue  # unchanged: its blob was written by the put that changed it
        if _is_message_list(value):
            hashes, dumped = cache.serialise(serde, thread_id, value)
            refs = b"".join(hashes)
            lists[channel] = MessageList(str(version), refs, hashes, dumped, value)
            plan_blobs.append((channel, str(version), REFS_TYPE, refs))
        else:
            plan_blobs.append((channel, str(version), *serde.dumps_typed(value)))
    stored = dict(checkpoint)
    stored["channel_values"] = inline
    type_, blob = serde.dumps_typed(stored)
    meta = get_serializable_checkpoint_metadata(config, metadata)
    try:
        meta_json = json.dumps(meta, ensure_ascii=False, allow_nan=False, default=_no_json)
    except ValueError as exc:
        raise InvalidInputError(f"checkpoint metadata must be JSON: {exc}.") from exc
    run_id = meta.get("run_id")
    return PutPlan(
        thread_id=thread_id,
        namespace=namespace,
        checkpoint_id=str(checkpoint["id"]),
        parent_id=configurable.get("checkpoint_id"),
        run_id=None if run_id is None else str(run_id),
        user_id=config_user(config),
        type=type_,
        checkpoint=blob,
        metadata=meta_json,
        blobs=plan_blobs,
        lists=lists,
        versions={k: str(v) for k, v in checkpoint["channel_versions"].items()},
        inline=frozenset(inline),
    )


def _no_json(value: Any) -> Any:
    raise ValueError(f"{type(value).__name__} is not a JSON type")


def needed_blobs(checkpoint: Checkpoint) -> list[tuple[str, str]]:
    """(channel, version) of the values a stored checkpoint keeps outside its row."""
    inline = checkpoint["channel_values"]
    return [(c, str(v)) for c, v in checkpoint["channel_versions"].items() if c not in inline]


def assemble(
    serde: SerializerProtocol,
    row: Sequence[Any],
    checkpoint: Checkpoint,
    blobs: Mapping[tuple[str, str], tuple[str, bytes | None]],
    messages: Mapping[bytes, tuple[str, bytes]],
    writes: Sequence[Sequence[Any]],
) -> CheckpointTuple:
    """A CheckpointTuple from its row ``(thread_id, ns, id, parent_id, metadata, ...)``, its
    decoded checkpoint, channel blobs, message blobs and pending writes."""
    thread_id, namespace, checkpoint_id, parent_id, metadata = row[:5]
    values = checkpoint["channel_values"]
    for channel, version in needed_blobs(checkpoint):
        type_, blob = blobs.get((channel, version), ("", None))
        if blob is None:
            continue
        if type_ == REFS_TYPE:
            values[channel] = [serde.loads_typed(messages[h]) for h in split_refs(blob)]
        else:
            values[channel] = serde.loads_typed((type_, blob))
    return CheckpointTuple(
        config={
            "configurable": {
                "thread_id": thread_id,
                "checkpoint_ns": namespace,
                "checkpoint_id": checkpoint_id,
            }
        },
        checkpoint=checkpoint,
        metadata=cast(CheckpointMetadata, json.loads(metadata)),
        parent_config=(
            {
                "configurable": {
                    "thread_id": thread_id,
                    "checkpoint_ns": namespace,
                    "checkpoint_id": parent_id,
                }
            }
            if parent_id
            else None
        ),
        pending_writes=[
            (task_id, channel, serde.loads_typed((type_, bytes(blob))))
            for task_id, channel, type_, blob in writes
        ],
    )
