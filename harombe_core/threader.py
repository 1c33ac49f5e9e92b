"""Threader: where each new message of a session hangs in its conversation graph, written once.

``ChatMemory``, the LangChain history (``strategy="threaded"``) and the LlamaIndex memory all
thread through this class, with one rule for a batch of messages: a user message hangs where
the node selector says (given the batch's next assistant message as ``reply`` when the selector
``uses_reply``), and must hang under an assistant message; any other message hangs under the
message before it in the batch, or under the session's newest message if it comes first. The
messages and every parent link they need are written in one transaction, so a crash leaves a
whole exchange or none of it.

The graph is the store's view, kept up to date incrementally: before each write the Threader
reads only the rows added since it last looked (and the session's message count); a count
that does not add up (a clear, a delete, a replace by anyone) makes it read the session again.
So an append costs O(new rows), not O(history), and a history object made per call reuses the
same view through :func:`shared_threader`.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import networkx as nx

from harombe_core.flows import Call, Flow, Work, adrive, drive
from harombe_core.models import ConversationNode, Message, MessageSummary
from harombe_core.store import ops
from harombe_core.store.base import MessageStore
from harombe_core.threads import ThreadRuleError, add_node, node_of

__all__ = ["Threader", "selector_mode", "shared_threader"]

T = TypeVar("T")
#: Threaders kept per manager by :func:`shared_threader` (the least recently used go first).
CACHE_SIZE = 128


class Host(Protocol):
    """What a Threader needs of a :class:`~harombe_core.manager.MemoryManager`."""

    @property
    def store(self) -> MessageStore: ...

    def save_messages(
        self, session_id: str, messages: Any, *, user_id: str | None = None
    ) -> list[int]: ...

    def atomic(self, fn: Callable[[], T]) -> T: ...


def selector_mode(selector: Any) -> str:
    """``"linear"`` for a selector that always continues the newest turn, else ``"graph"``."""
    return str(getattr(selector, "mode", "graph"))


@dataclass(eq=False)
class Threader:
    """The thread graph of one session and the writes that grow it.

    ``with_summaries`` loads each message's stored summary into its node (ChatMemory shows them).
    """

    host: Host = field(repr=False)
    session_id: str
    selector: Any
    user_id: str | None = None
    with_summaries: bool = False
    _graph: nx.DiGraph | None = field(default=None, init=False, repr=False)
    _newest: int | None = field(default=None, init=False, repr=False)
    _count: int = field(default=0, init=False, repr=False)
    _unstored_links: list[tuple[int, int]] = field(default_factory=list, init=False, repr=False)
    _lock: threading.RLock = field(default_factory=threading.RLock, init=False, repr=False)

    # the view -----------------------------------------------------------------------------
    @property
    def graph(self) -> nx.DiGraph:
        """The session's conversation graph as last read or written (read on first use)."""
        with self._lock:
            if self._graph is None:
                self._load()
            assert self._graph is not None
            return self._graph

    def forget(self) -> None:
        """Drop the view: the next use reads the session again (it was cleared or replaced)."""
        with self._lock:
            self._graph, self._newest, self._count = None, None, 0
            self._unstored_links = []
            forget = getattr(self.selector, "forget", None)
            if forget is not None:
                forget()

    def refresh(self) -> nx.DiGraph:
        """The graph brought up to date with what others wrote: O(new rows) unless the session
        lost messages meanwhile (then it is read again)."""
        with self._lock:
            if self._graph is None:
                return self._load()
            store = self.host.store
            session = store.run(ops.get_session(self.session_id))
            count = session.message_count if session is not None else 0
            new = store.run(ops.get_messages(self.session_id, after_id=self._newest))
            if self._count + len(new) != count:
                return self._load()
            for message in new:
                self._add(message, message.parent_id)
            return self._graph

    def _load(self) -> nx.DiGraph:
        """Read the whole session. A session written without threading (no parent links at
        all) is one thread, each message following the one before; those links are stored
        with the next write (reading writes nothing). An assistant message without a parent
        right after a user message (a crash between an exchange's two writes, in an older
        file) answers that message, and is repaired in the store."""
        store = self.host.store
        messages = store.run(ops.get_messages(self.session_id))
        summaries = (
            store.run(ops.get_message_summaries([m.id for m in messages if m.id is not None]))
            if self.with_summaries
            else {}
        )
        self._graph, self._newest, self._count = nx.DiGraph(), None, 0
        forget = getattr(self.selector, "forget", None)
        if forget is not None:
            forget()
        linear = all(m.parent_id is None for m in messages)
        self._unstored_links = []
        previous: Message | None = None
        for message in messages:
            assert message.id is not None
            parent = message.parent_id
            if linear and previous is not None and previous.id is not None:
                parent = previous.id
                self._unstored_links.append((message.id, parent))
            elif (
                parent is None
                and message.role == "assistant"
                and previous is not None
                and previous.role == "user"
            ):
                parent = previous.id
                store.run(ops.set_parent(message.id, parent))
            raw = summaries.get(message.id)
            summary = MessageSummary(**raw) if raw and {"title", "summary"} <= set(raw) else None
            self._add(message, parent, summary)
            previous = message
        return self._graph

    def _add(self, message: Message, parent: int | None, summary: Any = None) -> None:
        assert self._graph is not None
        assert message.id is not None
        if parent is not None and parent not in self._graph:
            parent = None  # its parent was deleted (or is in another session): a new thread
        add_node(
            self._graph,
            ConversationNode(
                id=message.id,
                message=message.with_ids(parent_id=parent),
                summary=summary,
                parent_id=parent,
                timestamp=message.created_at,
            ),
        )
        self._newest = message.id if self._newest is None else max(self._newest, message.id)
        self._count += 1

    # choosing parents (written once; append and aappend only drive the selector) ----------
    def _requests(self, batch: Sequence[Message]) -> list[tuple[int, dict[str, Any]]]:
        """The user messages of ``batch`` the selector must place, with their extra arguments.

        A user message after an assistant message of the same batch continues it when the
        selector is linear; other selectors choose among the stored messages.
        """
        graph = self.graph
        requests: list[tuple[int, dict[str, Any]]] = []
        linear = selector_mode(self.selector) == "linear"
        for index, message in enumerate(batch):
            if message.role != "user" or (index == 0 and graph.number_of_nodes() == 0):
                continue
            if linear and any(m.role == "assistant" for m in batch[:index]):
                continue
            extra: dict[str, Any] = {}
            after = batch[index + 1] if index + 1 < len(batch) else None
            if getattr(self.selector, "uses_reply", False) and after and after.role == "assistant":
                extra["reply"] = after
            requests.append((index, extra))
        return requests

    def _check(self, chosen: Any) -> int | None:
        graph = self.graph
        if chosen is None:
            return None
        if isinstance(chosen, bool) or not isinstance(chosen, int) or chosen not in graph:
            raise ThreadRuleError(f"the node selector chose {chosen!r}, which is not a node.")
        role = node_of(graph, chosen).message.role
        if role != "assistant":
            raise ThreadRuleError(
                f"the node selector chose {chosen}, a {role} message; a human message must "
                "attach to an assistant message."
            )
        return chosen

    def _parents(
        self, batch: Sequence[Message], chosen: dict[int, int | None]
    ) -> list[tuple[int | None, int | None]]:
        """Per message: (a stored parent id, or the index of a parent in the batch)."""
        graph = self.graph
        newest = max(graph.nodes) if graph.number_of_nodes() else None
        parents: list[tuple[int | None, int | None]] = []
        last_assistant: int | None = None
        for index, message in enumerate(batch):
            if index in chosen:
                parents.append((chosen[index], None))
            elif message.role == "user" and index > 0 and last_assistant is not None:
                parents.append((None, last_assistant))  # a linear selector, inside the batch
            elif message.role == "user":
                parents.append((None, None))  # the first message of an empty session
            elif index == 0:
                parents.append((newest, None))
            else:
                parents.append((None, index - 1))
            if message.role == "assistant":
                last_assistant = index
        return parents

    # writing ------------------------------------------------------------------------------
    def _tip(self) -> tuple[int | None, int]:
        """The graph brought up to date, as (newest message id, message count): what the
        parents about to be chosen were chosen from."""
        with self._lock:
            self.refresh()
            return self._newest, self._count

    def _write(
        self, batch: Sequence[Message], chosen: dict[int, int | None], seen: tuple[int | None, int]
    ) -> list[int] | None:
        """Store ``batch`` with its parent links (and any pending ones) in one transaction;
        None, with nothing written, if the session moved on since ``seen`` (another writer
        appended or deleted after the parents were chosen: they must be chosen again)."""
        with self._lock:
            parents = self._parents(batch, chosen)
            links, store = self._unstored_links, self.host.store
            prepared = [
                message.with_ids(parent_id=stored)
                for message, (stored, _) in zip(batch, parents, strict=True)
            ]

            def write() -> list[int]:
                if self._moved_on(seen):
                    raise _MovedOn
                for message_id, parent_id in links:
                    store.run(ops.set_parent(message_id, parent_id))
                ids = self.host.save_messages(self.session_id, prepared, user_id=self.user_id)
                for new_id, (_, in_batch) in zip(ids, parents, strict=True):
                    if in_batch is not None:
                        store.run(ops.set_parent(new_id, ids[in_batch]))
                return ids

            try:
                ids = self.host.atomic(write)
            except _MovedOn:
                return None
            self._unstored_links = []
            for message, new_id, (stored, in_batch) in zip(batch, ids, parents, strict=True):
                parent = stored if in_batch is None else ids[in_batch]
                self._add(message.with_ids(id=new_id, session_id=self.session_id), parent)
            return ids

    def _moved_on(self, seen: tuple[int | None, int]) -> bool:
        """Inside the write's transaction: has the session changed since ``seen``?"""
        newest, count = seen
        store = self.host.store
        session = store.run(ops.get_session(self.session_id))
        if (session.message_count if session is not None else 0) != count:
            return True
        return newest is not None and bool(
            store.run(ops.get_messages(self.session_id, after_id=newest, limit=1))
        )

    def append(self, batch: Sequence[Message]) -> list[int]:
        """Thread and store ``batch`` in one transaction; returns the new ids in order."""
        with self._lock:
            return drive(self._append(batch))

    async def aappend(self, batch: Sequence[Message]) -> list[int]:
        """Async twin of :meth:`append`: the selector's async method when it has one, and the
        store off the event loop."""
        return await adrive(self._append(batch))

    def _append(self, batch: Sequence[Message]) -> Flow[list[int]]:
        # Parents are chosen from the graph as it was, then written only if the session is
        # still as it was (checked in the write's transaction); else chosen again. So tasks,
        # memories or processes appending at once continue one another, as one after another
        # would, instead of each hanging its turn where the session ended before any wrote.
        while True:
            seen = yield Work(self._tip)
            chosen: dict[int, int | None] = {}
            select = self.selector.select_parent
            aselect = getattr(self.selector, "aselect_parent", None)  # optional for a selector
            for index, extra in self._requests(batch):
                answer = yield Call(select, self.graph, batch[index], native=aselect, **extra)
                chosen[index] = self._check(answer)
            ids: list[int] | None = yield Work(self._write, batch, chosen, seen)
            if ids is not None:
                return ids


class _MovedOn(Exception):
    """Raised inside a write's transaction to roll it back: the session changed since its
    parents were chosen."""


_shared: weakref.WeakKeyDictionary[Any, OrderedDict[tuple[Any, ...], Threader]] = (
    weakref.WeakKeyDictionary()
)
_shared_lock = threading.Lock()


def shared_threader(
    host: Host,
    session_id: str,
    key: Any,
    make_selector: Callable[[], Any],
    *,
    user_id: str | None = None,
) -> Threader:
    """The Threader of ``session_id`` kept on ``host`` for selectors named ``key``, so that
    objects made per call (a LangChain history per request) reuse one view of the session."""
    with _shared_lock:
        cache = _shared.setdefault(host, OrderedDict())
        wanted = (session_id, user_id, key)
        threader = cache.get(wanted)
        if threader is None:
            threader = Threader(host, session_id, make_selector(), user_id=user_id)
            cache[wanted] = threader
            while len(cache) > CACHE_SIZE:
                cache.popitem(last=False)
        cache.move_to_end(wanted)
        return threader
