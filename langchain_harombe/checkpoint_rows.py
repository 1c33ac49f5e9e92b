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
  list again; reading joins the blobs back into the bytes of the whole list and deserialises
  them in one call with the saver's serde, as a stored list would be read.

:class:`BlobCache` remembers, per thread and channel, the list it last serialised (each
message's class and field values, hashes and blobs), so a put serialises only the messages
that are new or changed; it keeps the blobs themselves for reads (immutable under their hash,
so keeping them is always safe) and which blobs are known to be stored under the thread's
current ``blob_epoch``. The epoch changes whenever blobs may have been deleted, so a stale
memory can never leave a reference without its blob.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
import operator
import struct
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, cast

from langchain_core.messages import BaseMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_id,
    get_checkpoint_metadata,
)
from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from harombe_core.errors import HarombeError, InvalidInputError, UnsafeCheckpointError
from harombe_core.integration import StepResult, corrupt_row
from harombe_core.validate import check_id

__all__ = [
    "HASH_SIZE",
    "REFS_TYPE",
    "UNDECODABLE",
    "BlobCache",
    "MessageList",
    "PutPlan",
    "PutState",
    "Serialised",
    "assemble",
    "checked_id",
    "checked_namespace",
    "checkpoint_config",
    "checkpoint_id_of",
    "config_user",
    "context_user",
    "load_messages",
    "message_array",
    "message_hash",
    "needed_blobs",
    "plan_put",
    "split_refs",
    "thread_key",
    "undecodable",
]

#: The type tag of a channel blob that holds message references instead of a serialised value.
REFS_TYPE = "harombe.message_refs"
HASH_SIZE = 16

_PRIMITIVES = (str, int, float, bool)
#: Channel blobs kept per thread (see BlobCache.remember_channels).
_CHANNELS_KEPT = 256


def message_hash(type_: str, blob: bytes) -> bytes:
    """The 16-byte key of a serialised message (its serde type and bytes)."""
    digest = hashlib.blake2b(type_.encode(), digest_size=HASH_SIZE)
    digest.update(b"\x00")
    digest.update(blob)
    return digest.digest()


def split_refs(refs: bytes) -> list[bytes]:
    """The hashes packed in a references blob, in order."""
    return [digest for (digest,) in _HASHES.iter_unpack(refs)]


_HASHES = struct.Struct(f"{HASH_SIZE}s")

#: What reading a stored value raises on bytes harombe never wrote (msgpack, JSON and struct
#: errors), and the refusal of a type nobody allowed (which then learns the row it came from).
UNDECODABLE = (ValueError, TypeError, KeyError, struct.error, UnsafeCheckpointError)


def undecodable(table: str, key: Mapping[str, Any], column: str, error: Exception) -> Exception:
    """The error for a stored value its decoder refused, naming the table, the row's key and
    the column: CorruptRowError for bytes no serializer wrote; a refused type stays
    UnsafeCheckpointError (a security refusal, caught as such) with the row's location added
    to its message and as ``table``, ``row_id``, ``column``. Called only in ``except``
    clauses, so reading a sound row costs nothing more."""
    where = dict(key)
    if isinstance(error, UnsafeCheckpointError):
        # A refused type is one the application stored and did not allow, or one written
        # into the file outside harombe: the row may well be harombe's own.
        located = corrupt_row(
            table,
            where,
            column,
            "was refused",
            cause="It names a type no one allowed: one the application stores itself (allow "
            "it as said below) or one written into the file outside harombe",
        )
        refused = UnsafeCheckpointError(
            f"{error.problem} It is {located.problem}",
            type_name=error.type_name,
            fix=error.fix,
        )
        refused.table, refused.row_id, refused.column = table, where, column
        return refused
    if isinstance(error, HarombeError):
        return error
    return corrupt_row(table, dict(key), column, f"could not be decoded ({type(error).__name__})")


def load_messages(serde: SerializerProtocol, blobs: list[tuple[str, bytes]]) -> list[Any]:
    """The messages of these blobs, as the serde reads a stored list of them (see
    :func:`message_array`)."""
    joined = message_array(serde, blobs)
    if joined is not None:
        return list(serde.loads_typed(joined))
    return [serde.loads_typed(blob) for blob in blobs]


def message_array(
    serde: SerializerProtocol, blobs: Sequence[tuple[str, bytes]]
) -> tuple[str, bytes] | None:
    """The serialised list of these messages, or None when the serde's format does not allow it.

    A list the JSON-plus serde writes is a msgpack array header followed by each element as
    it writes it alone, so blobs of that type are joined under one header: the very bytes a
    checkpointer storing the whole list would read, in one call.
    """
    if not isinstance(serde, JsonPlusSerializer) or {t for t, _ in blobs} - {"msgpack"}:
        return None
    count = len(blobs)
    header = bytes([0x90 | count]) if count < 16 else (
        b"\xdc" + count.to_bytes(2, "big") if count < 65536
        else b"\xdd" + count.to_bytes(4, "big")
    )
    return "msgpack", header + b"".join([b for _, b in blobs])


def checked_id(value: Any, what: str) -> str:
    """A thread or user id as the session store keeps it (a str of 1 to 512 characters)."""
    if type(value) is str and value.isascii() and 0 < len(value) <= 512 and "\x00" not in value:
        return value  # the common case, checked in C (ASCII is valid Unicode)
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
    return check_id(text, what)  # and valid Unicode (a lone surrogate cannot be stored)


def checkpoint_id_of(config: RunnableConfig | None) -> str | None:
    """The checkpoint id a config names (None when it names none), checked as an id."""
    value = get_checkpoint_id(config) if config is not None else None
    return None if not value else checked_id(value, "checkpoint_id")


def checked_namespace(value: Any) -> str:
    """A ``checkpoint_ns`` ("" for the main graph): text that can be stored."""
    text = str(value or "")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidInputError(
            f"checkpoint_ns is not valid Unicode text ({exc.reason} at position {exc.start}); "
            "pass the namespace LangGraph gave (configurable['checkpoint_ns'])."
        ) from None
    if "\x00" in text:
        raise InvalidInputError("checkpoint_ns must not contain NUL bytes.")
    return text


def thread_key(config: RunnableConfig) -> tuple[str, str]:
    """(thread_id, checkpoint_ns) of a config, checked."""
    configurable = config.get("configurable") or {}
    if "thread_id" not in configurable or configurable["thread_id"] is None:
        raise InvalidInputError(
            "a checkpointer needs a thread: invoke the graph with "
            "config={'configurable': {'thread_id': '...'}}."
        )
    namespace = checked_namespace(configurable.get("checkpoint_ns"))
    return checked_id(configurable["thread_id"], "thread_id"), namespace


#: Where LangGraph puts a run's ``Runtime`` in the config it hands the checkpointer
#: (``langgraph._internal._constants.CONFIG_KEY_RUNTIME``, not public).
_RUNTIME_KEY = "__pregel_runtime"


def config_user(config: RunnableConfig | None) -> str | None:
    """The run's ``user_id``, or None when it names none.

    ``configurable["user_id"]`` first, then the ``user_id`` of the run's runtime context
    (``agent.invoke(..., context=Context(user_id="ann"))``, LangChain 1.x's way to pass it), the
    order ``HarombeMemoryMiddleware`` reads them in: without the second, a thread the saver
    created for a run that names its user only in the context had no owner, and the
    middleware, acting for that user, was refused its session on the first turn.
    """
    configurable = (config or {}).get("configurable") or {}
    value = configurable.get("user_id")
    if value is None:
        value = context_user(getattr(configurable.get(_RUNTIME_KEY), "context", None))
    return None if value is None else checked_id(value, "user_id")


def context_user(context: Any) -> Any:
    """The ``user_id`` of a runtime context (a dict, a dataclass or a model), if it has one."""
    if context is None:
        return None
    if isinstance(context, dict):
        return context.get("user_id")
    return getattr(context, "user_id", None)


def _is_message_list(value: Any) -> bool:
    # By class, each class once: an isinstance per message (an ABC check, as pydantic models
    # are) would cost every put the length of the thread in Python calls.
    return type(value) is list and all(_is_message_class(t) for t in set(map(type, value)))


@functools.lru_cache(maxsize=256)
def _is_message_class(cls: type) -> bool:
    return issubclass(cls, BaseMessage)


#: A message's fields (its ``__dict__``), as ``map`` calls it.
_FIELDS = operator.attrgetter("__dict__")


@dataclass(slots=True)
class MessageList:
    """A message-list channel of a checkpoint being put: its references and its messages
    (``fresh``: the positions serialised by this put, whose blobs may not be stored yet)."""

    version: str
    refs: bytes
    hashes: list[bytes]
    blobs: list[tuple[str, bytes]]
    messages: list[BaseMessage]
    fresh: list[int]


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
    #: (channel, version) of the channels this checkpoint changed that have no blob: kept
    #: inline, or already consumed (a trigger channel); no put ever stores a blob for them.
    unstored: list[tuple[str, str]] = field(default_factory=list)

    #: The message blobs the put's transaction wrote (set by it, for the cache).
    written: list[tuple[bytes, str, bytes]] = field(default_factory=list)
    #: The results of its channel-blob inserts (set by it; see :meth:`blobs_stored`).
    inserted: list[StepResult] = field(default_factory=list)

    def blobs_stored(self) -> bool:
        """Whether the put's transaction inserted every channel blob (none had a same-keyed
        earlier put's value), so this process may keep the values as the stored ones.

        Asked after the commit: on PostgreSQL the inserts' counts then come back with the
        COMMIT, in its round trip (a count that never came back, the connection lost, counts
        as not stored: the blobs are then read back when needed)."""
        if not all(done.arrived for done in self.inserted):
            return False
        return sum(done.rowcount for done in self.inserted) == len(self.blobs)

    def head_hashes(self, channel: str) -> list[bytes]:
        entry = self.lists.get(channel)
        return entry.hashes if entry is not None else []


class PutState(NamedTuple):
    """A thread as this process's last put of it left it: its blob ``epoch``, its newest
    checkpoint of the main namespace (``head_id``) and whether its session is marked owed."""

    epoch: str
    head_id: str | None
    due: bool


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
        self,
        serde: SerializerProtocol,
        thread_id: str,
        key: tuple[str, str],
        messages: Sequence[BaseMessage],
    ) -> tuple[list[bytes], list[tuple[str, bytes]], list[int]]:
        """(hashes, (type, blob) pairs, fresh positions) of channel ``key``'s ``messages``.

        The longest prefix of the list that this process serialised last time for the same
        thread and channel, message for message with the same field values (by identity, or
        equal: a field set to a new value, as LangChain's human-in-the-loop edit does, is
        seen), is not serialised again; so a step costs the messages it added or replaced,
        not the whole list. (A message mutated deep inside one of its fields, such as a tool
        call's argument dict edited in place, is not seen: LangGraph state is updated by
        returning new messages, not by mutating stored ones.)
        """
        with self._lock:
            previous = self._thread(thread_id).lists.get(key)
        same = 0
        hashes: list[bytes] = []
        dumped: list[tuple[str, bytes]] = []
        values: list[tuple[type, dict[str, Any]]] = []
        if previous is not None:
            # Compared in place (a snapshot of each message's (class, fields) was kept when it
            # was serialised), by iterators that run in C: a step allocates for its new
            # messages only, and the comparison of a long unchanged prefix costs no Python
            # bytecode per message.
            kept = previous.values
            limit = min(len(kept), len(messages))
            current = zip(map(type, messages), map(_FIELDS, messages), strict=True)
            differs = map(operator.ne, current, kept)
            same = next(itertools.compress(itertools.count(), differs), limit)
            values = kept[:same]
            hashes, dumped = previous.hashes[:same], previous.blobs[:same]
        values += [(type(m), dict(m.__dict__)) for m in messages[same:]]
        fresh = list(range(same, len(messages)))
        for index in fresh:
            type_, blob = serde.dumps_typed(messages[index])
            hashes.append(message_hash(type_, blob))
            dumped.append((type_, blob))
        with self._lock:
            self._thread(thread_id).lists[key] = Serialised(values, hashes, dumped,
                                                            b"".join(hashes))
        return hashes, dumped, fresh

    def unwritten(
        self, thread_id: str, epoch: str, plan: PutPlan
    ) -> list[tuple[bytes, str, bytes]]:
        """The message blobs of ``plan`` not known to be stored under ``epoch``."""
        with self._lock:
            entry = self._threads.get(thread_id)
            written = entry.written if entry is not None and entry.epoch == epoch else set()
            rows: list[tuple[bytes, str, bytes]] = []
            for item in plan.lists.values():
                rows += [(item.hashes[i], *item.blobs[i]) for i in item.fresh]
                known = len(item.hashes) - len(item.fresh)  # the positions not serialised now
                if written.issuperset(item.hashes[:known] if item.fresh else item.hashes):
                    continue  # the common step: every earlier message stored (one C pass)
                stale = set(item.hashes) - written - {item.hashes[i] for i in item.fresh}
                if stale:  # a new epoch, or blobs of a put that did not commit
                    rows += [(h, *b) for h, b in zip(item.hashes, item.blobs, strict=True)
                             if h in stale]
        return rows

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
            self._remember(self._thread(thread_id), blobs, epoch, keep)
            self._evict()

    def remember_put(
        self,
        thread_id: str,
        epoch: str,
        blobs: Sequence[tuple[bytes, str, bytes]],
        keep: Sequence[bytes],
        channels: Sequence[tuple[str, str, str, str, bytes | None]],
        head_id: str | None = None,
    ) -> None:
        """What a committed put wrote: :meth:`remember` of its message ``blobs`` (stored under
        ``epoch``) and :meth:`remember_channels` of its ``channels``, under one hold of the
        lock and with one eviction (a put's bookkeeping, done on every step of a graph).
        ``head_id``: the put made that checkpoint the thread's newest and left its session
        marked owed (see :meth:`put_state`)."""
        with self._lock:
            entry = self._thread(thread_id)
            self._remember(entry, blobs, epoch, keep)
            self._remember_channels(entry, epoch, channels)
            if head_id is not None:
                entry.head_id, entry.due = head_id, True
            self._evict()

    def put_state(self, thread_id: str) -> PutState | None:
        """What this process's last put of the thread left it believing of the thread (None:
        nothing, or forgotten). A put may act on it only after its own transaction has
        confirmed it (see ``CheckpointTables.put``): another process may have changed it."""
        with self._lock:
            entry = self._threads.get(thread_id)
            if entry is None or entry.epoch is None:
                return None
            return PutState(entry.epoch, entry.head_id, entry.due)

    def mirrored(self, thread_id: str) -> None:
        """The thread's session is being written (the owed mark is being cleared): the next
        put marks it owed again."""
        with self._lock:
            entry = self._threads.get(thread_id)
            if entry is not None:
                entry.due = False

    def _remember(
        self,
        entry: _ThreadBlobs,
        blobs: Sequence[tuple[bytes, str, bytes]],
        epoch: str | None,
        keep: Sequence[bytes],
    ) -> None:
        """:meth:`remember` of one thread's ``entry`` (the caller holds the lock)."""
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

    def _trim(self, entry: _ThreadBlobs, keep: set[bytes]) -> None:
        kept = {h: p for h, p in entry.blobs.items() if h in keep}
        freed = sum(len(p[1]) for h, p in entry.blobs.items() if h not in keep)
        self._bytes -= freed
        entry.blobs, entry.size = kept, entry.size - freed
        entry.written &= keep

    def serialised(self, thread_id: str, key: tuple[str, str], refs: bytes) -> Serialised | None:
        """The list this process last serialised for channel ``key`` of the thread, if its
        references are ``refs`` (then its messages are exactly those of ``refs``)."""
        with self._lock:
            entry = self._threads.get(thread_id)
            found = None if entry is None else entry.lists.get(key)
        return found if found is not None and found.refs == refs else None

    def remember_channels(
        self,
        thread_id: str,
        epoch: str,
        blobs: Sequence[tuple[str, str, str, str, bytes | None]],
    ) -> None:
        """Keep channel blobs ``(namespace, channel, version, type, blob)`` known to be stored
        under the thread's blob ``epoch``. Under one epoch a blob's key names one value (it is
        written once, never updated, and deleting blobs starts a new epoch), so a read that
        finds the thread at that epoch may use them instead of reading them again."""
        with self._lock:
            self._remember_channels(self._thread(thread_id), epoch, blobs)
            self._evict()

    def _remember_channels(
        self,
        entry: _ThreadBlobs,
        epoch: str,
        blobs: Sequence[tuple[str, str, str, str, bytes | None]],
    ) -> None:
        """:meth:`remember_channels` of one thread's ``entry`` (the caller holds the lock)."""
        if entry.channels_epoch != epoch:
            self._drop_channels(entry)
            entry.channels_epoch = epoch
        channels = entry.channels
        for namespace, channel, version, type_, blob in blobs:
            key = (namespace, channel, version)
            if key not in channels:
                channels[key] = (type_, blob)
                size = len(blob or b"")
                entry.size += size
                self._bytes += size
        if len(channels) > _CHANNELS_KEPT:
            # The oldest first: reads mostly want the newest checkpoints' values.
            for key in list(channels)[: len(channels) - _CHANNELS_KEPT // 2]:
                size = len(channels.pop(key)[1] or b"")
                entry.size -= size
                self._bytes -= size

    def channel_blobs(
        self, thread_id: str, epoch: str | None, keys: Sequence[tuple[str, str, str]]
    ) -> dict[tuple[str, str, str], tuple[str, bytes | None]]:
        """Those of the thread's channel blobs ``keys`` (namespace, channel, version) kept by
        :meth:`remember_channels` under ``epoch``."""
        with self._lock:
            entry = self._threads.get(thread_id)
            if entry is None or epoch is None or entry.channels_epoch != epoch:
                return {}
            channels = entry.channels
            return {key: channels[key] for key in keys if key in channels}

    def _drop_channels(self, entry: _ThreadBlobs) -> None:
        size = sum(len(blob or b"") for _, blob in entry.channels.values())
        entry.size -= size
        self._bytes -= size
        entry.channels = {}

    def _evict(self) -> None:
        while self._bytes > self.max_bytes and len(self._threads) > 1:
            _, oldest = self._threads.popitem(last=False)
            self._bytes -= oldest.size

    def blobs_of(self, thread_id: str) -> Mapping[bytes, tuple[str, bytes]]:
        """The thread's blobs held in memory, by hash (a mapping only ever added to; read it
        without the lock: its replacement by a trim leaves it intact)."""
        with self._lock:
            entry = self._threads.get(thread_id)
            return {} if entry is None else entry.blobs

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
class Serialised:
    """A message list as last serialised: each message's class and a snapshot of its fields,
    hashes and blobs, position by position, its references blob, and (once read) the whole
    list's bytes."""

    values: list[tuple[type, dict[str, Any]]]
    hashes: list[bytes]
    blobs: list[tuple[str, bytes]]
    refs: bytes
    joined: tuple[str, bytes] | None = None

    def load(self, serde: SerializerProtocol) -> list[Any]:
        """The list, deserialised by ``serde`` (its bytes joined once, then kept)."""
        if self.joined is None:
            self.joined = message_array(serde, self.blobs)
        if self.joined is None:
            return [serde.loads_typed(blob) for blob in self.blobs]
        return list(serde.loads_typed(self.joined))


@dataclass(slots=True)
class _ThreadBlobs:
    epoch: str | None = None
    written: set[bytes] = field(default_factory=set)
    blobs: dict[bytes, tuple[str, bytes]] = field(default_factory=dict)
    lists: dict[tuple[str, str], Serialised] = field(default_factory=dict)
    mirror: Any = None
    size: int = 0
    channels_epoch: str | None = None
    channels: dict[tuple[str, str, str], tuple[str, bytes | None]] = field(default_factory=dict)
    head_id: str | None = None  # the newest checkpoint (main namespace) a put of ours wrote
    due: bool = False  # that put left the thread's session marked owed


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
            hashes, dumped, fresh = cache.serialise(serde, thread_id, (namespace, channel), value)
            refs = b"".join(hashes)
            lists[channel] = MessageList(str(version), refs, hashes, dumped, value, fresh)
            plan_blobs.append((channel, str(version), REFS_TYPE, refs))
        else:
            plan_blobs.append((channel, str(version), *serde.dumps_typed(value)))
    values = checkpoint["channel_values"]
    unstored = [
        (channel, str(version))
        for channel, version in new_versions.items()
        if channel in inline or channel not in values
    ]
    stored = dict(checkpoint)
    stored["channel_values"] = inline
    type_, blob = serde.dumps_typed(stored)
    meta = get_checkpoint_metadata(config, metadata)
    meta_json = _metadata_json(meta)
    run_id = meta.get("run_id")
    return PutPlan(
        thread_id=thread_id,
        namespace=namespace,
        checkpoint_id=checked_id(checkpoint["id"], "checkpoint id"),
        parent_id=checkpoint_id_of(config),
        run_id=None if run_id is None else str(run_id),
        user_id=config_user(config),
        type=type_,
        checkpoint=blob,
        metadata=meta_json,
        blobs=plan_blobs,
        lists=lists,
        versions={k: str(v) for k, v in checkpoint["channel_versions"].items()},
        inline=frozenset(inline),
        unstored=unstored,
    )


def _metadata_json(meta: dict[str, Any]) -> str:
    """A checkpoint's metadata as JSON, ``writes`` included, as LangGraph's SQLite and in-memory
    savers keep it (so ``list(filter={"writes": ...})`` finds it there and here). Graphs of older
    LangGraph versions put message objects in ``writes``: that value alone is then left out, as
    LangGraph's PostgresSaver always leaves it out, rather than refusing the step."""
    try:
        return _META_JSON.encode(meta)
    except ValueError as exc:
        if "writes" in meta:
            return _metadata_json({k: v for k, v in meta.items() if k != "writes"})
        raise InvalidInputError(f"checkpoint metadata must be JSON: {exc}.") from exc


def _no_json(value: Any) -> Any:
    raise ValueError(f"{type(value).__name__} is not a JSON type")


#: The encoder of checkpoint metadata, made once (``json.dumps`` with options builds one per
#: call, which a put would pay on every step).
_META_JSON = json.JSONEncoder(ensure_ascii=False, allow_nan=False, default=_no_json)


def needed_blobs(checkpoint: Checkpoint) -> list[tuple[str, str]]:
    """(channel, version) of the values a stored checkpoint keeps outside its row."""
    inline = checkpoint["channel_values"]
    return [(c, str(v)) for c, v in checkpoint["channel_versions"].items() if c not in inline]


def assemble(
    serde: SerializerProtocol,
    row: Sequence[Any],
    checkpoint: Checkpoint,
    blobs: Mapping[tuple[str, str], tuple[str, bytes | None]],
    refs: Mapping[tuple[str, str], list[bytes] | Serialised],
    messages: Mapping[bytes, tuple[str, bytes]],
    writes: Sequence[Sequence[Any]],
) -> CheckpointTuple:
    """A CheckpointTuple from its row ``(thread_id, ns, id, parent_id, metadata, ...)``, its
    decoded checkpoint, channel blobs, message lists (hashes, or a list this process
    serialised), message blobs and pending writes."""
    thread_id, namespace, checkpoint_id, parent_id, metadata = row[:5]
    values = checkpoint["channel_values"]
    loads = serde.loads_typed
    for key, (type_, blob) in blobs.items():
        if blob is None:
            continue
        try:
            if type_ == REFS_TYPE:
                listed = refs.get(key, [])
                if isinstance(listed, Serialised):
                    values[key[0]] = listed.load(serde)
                else:
                    values[key[0]] = load_messages(serde, [messages[h] for h in listed])
            else:
                values[key[0]] = loads((type_, blob))
        except UNDECODABLE as error:
            listed = refs.get(key, []) if type_ == REFS_TYPE else []
            stored: Mapping[bytes, tuple[str, bytes]] = messages
            if isinstance(listed, Serialised):  # a list this process wrote: its own blobs
                stored = dict(zip(listed.hashes, listed.blobs, strict=True))
                listed = listed.hashes
            bad = next((h for h in listed if _undecodable_message(serde, stored, h)), None)
            if isinstance(bad, bytes):
                where = {"thread_id": thread_id, "hash": bad}
                raise undecodable("checkpoint_message_blobs", where, "blob", error) from error
            where = {
                "thread_id": thread_id,
                "checkpoint_ns": namespace,
                "channel": key[0],
                "version": key[1],
            }
            raise undecodable("checkpoint_blobs", where, "blob", error) from error
    owner = row[7] if len(row) > 7 else None
    ckpt_key = {"thread_id": thread_id, "checkpoint_ns": namespace, "checkpoint_id": checkpoint_id}
    try:
        decoded_metadata = json.loads(metadata)
    except UNDECODABLE as error:
        raise undecodable("checkpoints", ckpt_key, "metadata", error) from error
    try:
        pending = [
            (task_id, channel, serde.loads_typed((type_, bytes(blob))))
            for task_id, channel, type_, blob in writes
        ]
    except UNDECODABLE as error:
        raise undecodable("checkpoint_writes", ckpt_key, "blob", error) from error
    return CheckpointTuple(
        config=_config(thread_id, namespace, checkpoint_id, owner),
        checkpoint=checkpoint,
        metadata=cast(CheckpointMetadata, decoded_metadata),
        parent_config=_config(thread_id, namespace, parent_id, owner) if parent_id else None,
        pending_writes=pending,
    )


def _undecodable_message(
    serde: SerializerProtocol, messages: Mapping[bytes, tuple[str, bytes]], digest: Any
) -> bool:
    """Whether the stored message ``digest`` names is there but does not decode (asked only
    after a channel failed, to name the row at fault)."""
    if not isinstance(digest, bytes) or digest not in messages:
        return False
    try:
        serde.loads_typed(messages[digest])
    except UNDECODABLE:
        return True
    return False


def checkpoint_config(
    thread_id: str, namespace: str, checkpoint_id: str, owner: str | None
) -> RunnableConfig:
    """The config of a stored checkpoint: it names the thread's owner, so a config handed
    back by LangGraph (state history, time travel) acts for that user."""
    configurable: dict[str, Any] = {
        "thread_id": thread_id,
        "checkpoint_ns": namespace,
        "checkpoint_id": checkpoint_id,
    }
    if owner is not None:
        configurable["user_id"] = owner
    return {"configurable": configurable}


_config = checkpoint_config
