"""ChatMemory: linear or threaded conversation memory with the unified chat-memory API.

``ChatMemory()`` keeps one chronological thread; ``ChatMemory.threaded(...)`` lets a node
selector hang each human message under the assistant message it follows up, so several topics
interleaved in one chat become separate threads, and retrieval returns a hit together with the
turns above it in its own thread instead of whatever happened to be said just before.

The store is the source of truth: every exchange is saved as two messages of one session with
``parent_id`` set, per-message summaries go to the message's summary field, and ``graph`` (a
networkx ``DiGraph`` of :class:`~harombe_core.models.ConversationNode`) is rebuilt from the
store when a ChatMemory is opened on an existing session, so a restart restores every thread.
The JSON file written by :meth:`ChatMemory.save` is the unified chat-memory format (``version``,
``metadata``, ``nodes`` with ``parent_id``, ``edges``), written by :mod:`harombe_core.export`.
"""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import networkx as nx

from harombe_core.errors import InvalidInputError, InvalidMessageError, SummarizationError
from harombe_core.flows import Call, Flow, Run, Work, adrive, drive
from harombe_core.models import Message, MessageSummary, SearchHit, Session
from harombe_core.store import ops
from harombe_core.store.base import ClosesOnExit
from harombe_core.threader import Threader, selector_mode
from harombe_core.threads import (
    LinearNodeSelector,
    ancestors_path,
    node_of,
    resolve_selector,
)
from harombe_core.validate import (
    MAX_TOP_K,
    check_count,
    check_path,
    check_query,
    keywords_checked,
    optional_count,
    optional_id,
)

if TYPE_CHECKING:
    from harombe_core.manager import MemoryManager

__all__ = ["CHAT_EXPORT_FORMATS", "ChatMemory", "to_mermaid"]

log = logging.getLogger(__name__)

CHAT_EXPORT_FORMATS = ("json", "jsonl", "mermaid", "text")
_MERMAID_COLOURS = {"user": "#a7c7e7", "assistant": "#cdb4f6"}


def _as_message(value: Any, role: str) -> Message:
    """A harombe Message from a str, a Message, a dict, or any object with ``.content``."""
    if isinstance(value, Message):
        return value
    if isinstance(value, str):
        return Message(role=role, content=value)  # type: ignore[arg-type]
    if isinstance(value, Mapping):
        data = dict(value)
        data.setdefault("role", role)
        return Message.from_dict(data)
    content = getattr(value, "content", None)
    if isinstance(content, str):
        return Message(role=role, content=content)  # type: ignore[arg-type]
    raise InvalidMessageError(
        f"expected a str, a harombe Message or a dict with content, got {type(value).__name__}. "
        "The LangChain and LlamaIndex adapters convert their message types for you."
    )


def _mermaid_text(text: str, limit: int) -> str:
    flat = " ".join(text.split())[:limit]
    # Mermaid labels are quoted: quotes and brackets must be entities or the diagram breaks.
    for raw, entity in (('"', "#quot;"), ("<", "#lt;"), (">", "#gt;")):
        flat = flat.replace(raw, entity)
    return flat


def to_mermaid(graph: nx.DiGraph, *, max_chars: int = 60) -> str:
    """A Mermaid ``graph TD`` of the threads: H<n>/A<n> labels, humans blue, assistants purple."""
    lines = ["graph TD"]
    styles = []
    for node_id in sorted(graph.nodes):
        message = node_of(graph, node_id).message
        prefix = {"user": "H", "assistant": "A"}.get(message.role, "N")
        colour = _MERMAID_COLOURS.get(message.role, "#e0e0e0")
        lines.append(f'{node_id}["{prefix}{node_id}: {_mermaid_text(message.content, max_chars)}"]')
        styles.append(f"style {node_id} fill:{colour},stroke:#333,stroke-width:1px;")
    for parent, child in sorted(graph.edges):
        lines.append(f"{parent} --> {child}")
    lines.extend(styles)
    return "\n".join(lines)


class ChatMemory(ClosesOnExit):
    """Conversation memory with configurable threading, summaries and retrieval.

    ``node_selector`` chooses where each human message hangs (``None``: linear); ``summarizer``
    (optional) writes a :class:`~harombe_core.models.MessageSummary` for every message;
    ``context_depth`` (>= 0) is how many ancestors :meth:`retrieve` adds to each hit.
    ``memory`` is a :class:`~harombe_core.manager.MemoryManager` (its semantic search is used
    when it has one); ``storage_path`` opens one without semantic memory (default: in memory).
    ``session_id`` names the session holding this memory; an existing one is loaded.
    ``user_id`` is its owner: a new session is created for that user, and an existing one
    must be theirs (else :class:`~harombe_core.errors.SessionOwnershipError`).
    """

    @keywords_checked
    def __init__(
        self,
        node_selector: Any = None,
        summarizer: Any = None,
        context_depth: int = 5,
        *,
        memory: MemoryManager | None = None,
        storage_path: str | os.PathLike[str] | None = None,
        session_id: str | None = None,
        user_id: str | None = None,
    ) -> None:
        context_depth = check_count(context_depth, "context_depth")
        session_id = optional_id(session_id, "session_id")
        if memory is not None and storage_path is not None:
            raise InvalidInputError("pass either memory= or storage_path=, not both.")
        from harombe_core.manager import MemoryManager

        if memory is not None and not isinstance(memory, MemoryManager):
            raise InvalidInputError(
                f"memory must be a harombe_core.MemoryManager, got {type(memory).__name__}."
            )
        selector = (
            resolve_selector(node_selector) if node_selector is not None else LinearNodeSelector()
        )
        self.summarizer = summarizer
        self.context_depth = context_depth
        self._owns_manager = memory is None
        if memory is None:
            memory = MemoryManager(
                ":memory:" if storage_path is None else storage_path,
                embedding=None,
                vector_store=None,
            )
        self.memory = memory
        self.session_id = session_id if session_id is not None else uuid.uuid4().hex
        self.user_id = user_id
        self._threader = Threader(
            memory, self.session_id, selector, user_id=user_id, with_summaries=True
        )
        if memory.check_owner(self.session_id, user_id) is not None:
            self._threader.refresh()  # an existing session: its threads are restored now
        else:
            memory.create_session(
                session_id=self.session_id, metadata={"chat_memory": self.mode}, user_id=user_id
            )

    # construction -------------------------------------------------------------------------
    @classmethod
    def threaded(
        cls,
        selector: Any = "embedding",
        *,
        llm: Any = None,
        summarizer: Any = None,
        embedder: Any = "default",
        **kwargs: Any,
    ) -> ChatMemory:
        """Threaded memory: ``selector="embedding"`` (no LLM, default), ``"llm"`` or an object.

        ``llm`` (a callable ``prompt -> str``) makes the selector an
        :class:`~harombe_core.threads.LLMNodeSelector` and, unless ``summarizer`` is given, adds
        an :class:`~harombe_core.summarize.LLMSummarizer` with the same model.
        """
        from harombe_core.summarize import LLMSummarizer

        if llm is not None:
            if selector in ("embedding", "llm"):
                selector = resolve_selector("llm", llm=llm)
            if summarizer is None:
                summarizer = LLMSummarizer(llm)
        elif selector == "embedding":
            selector = resolve_selector("embedding", embedder=embedder)
        else:
            selector = resolve_selector(selector)
        return cls(node_selector=selector, summarizer=summarizer, **kwargs)

    @property
    def mode(self) -> str:
        """``"linear"`` or ``"graph"``, as the JSON format records it (from the selector)."""
        return selector_mode(self.node_selector)

    @property
    def node_selector(self) -> Any:
        """Where each human message hangs (see :mod:`harombe_core.threads`)."""
        return self._threader.selector

    @node_selector.setter
    def node_selector(self, selector: Any) -> None:
        self._threader.selector = resolve_selector(selector)

    @property
    def graph(self) -> nx.DiGraph:
        """The threads: a networkx ``DiGraph`` of ConversationNodes, kept by the Threader."""
        return self._threader.graph

    # writing ------------------------------------------------------------------------------
    @staticmethod
    def _exchange(human_message: Any, assistant_message: Any) -> list[Message]:
        human = _as_message(human_message, "user")
        assistant = _as_message(assistant_message, "assistant")
        if human.role != "user" or assistant.role != "assistant":
            raise InvalidMessageError(
                f"append takes a user message and an assistant message, got {human.role!r} and "
                f"{assistant.role!r}."
            )
        return [human, assistant]

    def append(self, human_message: Any, assistant_message: Any) -> tuple[int, int]:
        """Store one exchange and thread it; returns the two node ids (human, assistant).

        The two messages and their parent links are one transaction, committed before any
        summary is attempted, so a failing summariser never loses them (it is logged and the
        node keeps no summary).
        """
        human_id, assistant_id = self._threader.append(
            self._exchange(human_message, assistant_message)
        )
        drive(self._summarize_nodes((human_id, assistant_id)))
        return human_id, assistant_id

    async def aappend(self, human_message: Any, assistant_message: Any) -> tuple[int, int]:
        """Async twin of :meth:`append` (the selector and the store run off the event loop)."""
        human_id, assistant_id = await self._threader.aappend(
            self._exchange(human_message, assistant_message)
        )
        await adrive(self._summarize_nodes((human_id, assistant_id)))
        return human_id, assistant_id

    def _set_summary(self, node_id: int, summary: MessageSummary) -> None:
        self.memory.store.run(
            ops.set_message_summary(node_id, {"title": summary.title, "summary": summary.summary})
        )
        node_of(self.graph, node_id).summary = summary

    def _summarize_nodes(self, node_ids: Sequence[int]) -> Flow[None]:
        """Summarise and store each node (with a summariser): its async method when it has
        one; a failure is logged and the node keeps no summary."""
        summarizer = self.summarizer
        if summarizer is None:
            return
        asummarize = getattr(summarizer, "asummarize_message", None)  # optional
        for node_id in node_ids:
            message = node_of(self.graph, node_id).message
            try:
                summary = yield Call(summarizer.summarize_message, message, native=asummarize)
            except SummarizationError as exc:
                log.warning("message %s kept without a summary: %s", node_id, exc)
                continue
            yield Work(self._set_summary, node_id, summary)

    # reading ------------------------------------------------------------------------------
    @property
    def messages(self) -> list[Message]:
        """Every message in conversation order."""
        return [node_of(self.graph, i).message for i in sorted(self.graph.nodes)]

    def get_recent_messages(self, n_results: int = 10) -> list[Message]:
        """The newest ``n_results`` messages, oldest first."""
        if check_count(n_results, "n_results") == 0:
            return []
        return self.messages[-n_results:]

    def thread_of(self, node_id: int | None = None, depth: int | None = None) -> list[Message]:
        """The messages from the thread root (or ``depth`` ancestors up) to ``node_id``."""
        node_id = optional_count(node_id, "node_id")
        depth = optional_count(depth, "depth")
        if self.graph.number_of_nodes() == 0:
            return []
        leaf = max(self.graph.nodes) if node_id is None else node_id
        if leaf not in self.graph:
            raise InvalidInputError(f"no node {leaf} in this memory.")
        return [node_of(self.graph, i).message for i in ancestors_path(self.graph, leaf, depth)]

    def _hits(self, query: str, n_results: int) -> Flow[list[int]]:
        """Ids of the messages most relevant to ``query`` in this session, best first."""
        mm = self.memory
        if mm.semantic_enabled:
            yield Call(mm.flush, native=mm.aflush)  # what was just appended must be findable
            hits: list[SearchHit] = yield Call(
                mm.search, query, top_k=n_results, session_id=self.session_id, native=mm.asearch
            )
            return [h.message.id for h in hits if h.message.id is not None]
        from harombe_core.store.base import SearchScope

        scope = SearchScope(session_id=self.session_id)
        found = yield Run(mm.store, ops.keyword_search(query, limit=n_results, scope=scope))
        return [h.message.id for h in found if h.message.id is not None]

    def retrieve(
        self, query: str, n_results: int = 10, context_depth: int | None = None
    ) -> list[Message]:
        """Relevant messages with their thread context, in conversation order.

        Linear memory returns the newest ``n_results`` messages. Threaded memory finds the
        ``n_results`` best matches (hybrid search when semantic memory is on, BM25 otherwise),
        adds up to ``context_depth`` ancestors of each (default: the memory's), and returns the
        union without duplicates, oldest first.
        """
        return drive(self._retrieve(query, n_results, context_depth))

    async def aretrieve(
        self, query: str, n_results: int = 10, context_depth: int | None = None
    ) -> list[Message]:
        """Async twin of :meth:`retrieve`."""
        return await adrive(self._retrieve(query, n_results, context_depth))

    def _retrieve(
        self, query: str, n_results: int, context_depth: int | None
    ) -> Flow[list[Message]]:
        query = check_query(query)
        n_results = check_count(n_results, "n_results", high=MAX_TOP_K)
        context_depth = optional_count(context_depth, "context_depth")
        if self.mode == "linear":
            return self.get_recent_messages(n_results)
        depth = self.context_depth if context_depth is None else context_depth
        chosen: set[int] = set()
        for hit in (yield from self._hits(query, n_results)):
            if hit in self.graph:
                chosen.update(ancestors_path(self.graph, hit, depth))
        return [node_of(self.graph, i).message for i in sorted(chosen)]

    # housekeeping -------------------------------------------------------------------------
    def reset(self) -> None:
        """Forget every message of this memory (in the store too); the session stays."""
        self.memory.clear_session(self.session_id, user_id=self.user_id)
        self._threader.forget()

    def close(self) -> None:
        """Close the store if this memory opened it."""
        if self._owns_manager:
            self.memory.close()

    # export / import ----------------------------------------------------------------------
    def to_mermaid(self, *, max_chars: int = 60) -> str:
        """The thread graph as a Mermaid diagram; labels cut at ``max_chars`` characters."""
        return to_mermaid(self.graph, max_chars=check_count(max_chars, "max_chars"))

    def _record(self) -> Any:
        from harombe_core.export import SessionRecord

        # Deleted behind this memory's back, it is still this (now empty) session.
        session = self.memory.get_session(self.session_id) or Session(
            id=self.session_id, user_id=self.user_id
        )
        summaries = {
            i: {"title": n.summary.title, "summary": n.summary.summary}
            for i in self.graph.nodes
            if (n := node_of(self.graph, i)).summary is not None
        }
        return SessionRecord.from_session(session, self.messages, summaries)

    def to_dict(self) -> dict[str, Any]:
        """The unified chat-memory JSON document of this memory."""
        from harombe_core.export import session_to_dict

        return session_to_dict(self._record(), mode=self.mode)

    def export(self, format: str = "json") -> str:
        """This memory as ``json``, ``jsonl`` (OpenAI chat format), ``mermaid`` or ``text``."""
        if not isinstance(format, str):
            raise InvalidInputError(f"format must be a str, got {type(format).__name__}.")
        fmt = "text" if format == "plain_text" else format
        if fmt == "mermaid":
            return self.to_mermaid()
        if fmt == "json":
            import json

            return json.dumps(self.to_dict(), ensure_ascii=False, indent=2)
        if fmt in ("jsonl", "text"):
            from harombe_core.export import dumps

            return dumps([self._record()], fmt)
        raise InvalidInputError(
            f"unknown export format {format!r}; use one of {', '.join(CHAT_EXPORT_FORMATS)}."
        )

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the JSON document to ``path`` (atomically) and return the path."""
        from harombe_core.export import write_text

        return write_text(check_path(path), self.export("json"))

    @classmethod
    def load(
        cls,
        path: str | os.PathLike[str],
        *,
        node_selector: Any = None,
        summarizer: Any = None,
        context_depth: int = 5,
        memory: MemoryManager | None = None,
        storage_path: str | os.PathLike[str] | None = None,
    ) -> ChatMemory:
        """Read a JSON file written by :meth:`save` (or any unified chat-memory JSON file).

        The messages are imported into a new session of ``memory`` (default: in memory), with
        their threads and summaries. ``node_selector`` defaults to linear for a ``"linear"``
        file and to the embedding selector for a ``"graph"`` one.
        """
        from harombe_core.export import import_records, read_json, session_from_dict

        file = check_path(path)
        data = read_json(file)
        record = session_from_dict(data, where=str(file))
        mode = data.get("metadata", {}).get("mode") if isinstance(data, dict) else None
        if node_selector is None and mode == "graph":
            node_selector = "embedding"
        target = memory
        if target is None:
            from harombe_core.manager import MemoryManager

            target = MemoryManager(
                ":memory:" if storage_path is None else storage_path,
                embedding=None,
                vector_store=None,
            )
        result = import_records(target, [record], on_conflict="new_id")
        chat = cls(
            node_selector=node_selector,
            summarizer=summarizer,
            context_depth=context_depth,
            memory=target,
            session_id=result.session_ids[0],
        )
        chat._owns_manager = memory is None
        return chat

    def __repr__(self) -> str:
        return (
            f"ChatMemory(mode={self.mode!r}, session_id={self.session_id!r}, "
            f"nodes={self.graph.number_of_nodes()})"
        )
