"""Threading of messages put through ``HarombeMemory(strategy="threaded")``.

LlamaIndex hands memory one message at a time. A user message is attached, by harombe's node
selector, to the assistant turn it continues (possibly an old one: the conversation goes back to
an earlier topic); every other message continues the message before it, so a tool call, its
results and the answer stay one chain. ``get`` then shows the model the current thread only.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import networkx as nx

from harombe_core.manager import MemoryManager
from harombe_core.models import ConversationNode, Message
from harombe_core.threads import add_node

__all__ = ["Threader"]


class Threader:
    """Keeps the session's thread graph and gives each new message its ``parent_id``.

    The graph is read from the store once and then kept up to date; if another process wrote to
    the session in between (its newest id is not ours), it is read again.
    """

    def __init__(self, manager: MemoryManager, session_id: str, selector: Any) -> None:
        self._manager = manager
        self._session_id = session_id
        self.selector = selector
        self._graph: nx.DiGraph | None = None
        self._newest: int | None = None
        self._lock = threading.Lock()

    def _stored_newest(self) -> int | None:
        for message in self._manager.store.iter_newest(self._session_id):
            return message.id
        return None

    def _graph_now(self) -> nx.DiGraph:
        newest = self._stored_newest()
        if self._graph is None or newest != self._newest:
            graph = nx.DiGraph()
            for message in self._manager.get_messages(self._session_id):
                self._add(graph, message)
            self._graph, self._newest = graph, newest
        return self._graph

    @staticmethod
    def _add(graph: nx.DiGraph, message: Message) -> None:
        assert message.id is not None
        parent = message.parent_id if message.parent_id in graph else None
        add_node(
            graph,
            ConversationNode(
                id=message.id, message=message, parent_id=parent, timestamp=message.created_at
            ),
        )

    def save(self, messages: Sequence[Message], user_id: str | None) -> list[int]:
        """Thread and store ``messages`` (one transaction per message: each needs its parent)."""
        ids: list[int] = []
        with self._lock:
            graph = self._graph_now()
            for message in messages:
                if message.role == "user":
                    parent = self.selector.select_parent(graph, message)
                else:
                    parent = self._newest
                threaded = message.with_ids(parent_id=parent)
                (new_id,) = self._manager.save_messages(
                    self._session_id, [threaded], user_id=user_id
                )
                self._add(graph, threaded.with_ids(id=new_id, session_id=self._session_id))
                self._newest = new_id
                ids.append(new_id)
        return ids

    def forget(self) -> None:
        """Drop the cached graph (the session was replaced or cleared)."""
        with self._lock:
            self._graph, self._newest = None, None
