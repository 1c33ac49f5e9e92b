"""The thread graph and the node selectors that decide where a new message hangs.

A conversation is a forest of threads stored as a networkx ``DiGraph`` whose nodes carry a
:class:`~harombe_core.models.ConversationNode` under the ``"node"`` attribute and whose edges run
from parent to child. The rules every selector obeys (and :func:`check_thread_rules` verifies):

* the first human message is a root;
* an assistant message is always the child of the human message it answers;
* a human message attaches to an assistant message, or starts a new thread (a new root);
* no cycles and no orphans (every ``parent_id`` names a node of the graph).

A selector only ever picks among assistant nodes, so the last two rules hold by construction.

Three selectors:

``LinearNodeSelector``
    The newest assistant node: one straight thread, no model needed.
``EmbeddingNodeSelector``
    No LLM. Scores every assistant node by how well the new message matches the turn it would
    answer *and the thread that turn belongs to* (decayed running centroids of the human and the
    assistant side of the path to that node), plus a recency prior; below a similarity threshold
    the message starts a new thread. Comparing against the thread, not only one node, is what
    keeps interleaved conversations apart: one short reply ("ha, same here!") matches many nodes,
    but the thread's accumulated topics and voice point to one.
``LLMNodeSelector``
    Asks a chat model (any ``llm(prompt) -> str`` callable; the adapters wrap LangChain and
    LlamaIndex models into one) to choose, validates its answer against the candidates, retries
    with feedback naming what was wrong, and falls back to the newest assistant node.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import networkx as nx

from harombe_core.errors import InvalidInputError, ThreadRuleError
from harombe_core.flows import Call, Flow, Work, adrive, drive
from harombe_core.llm import ask
from harombe_core.models import ConversationNode, Message
from harombe_core.validate import show

if TYPE_CHECKING:
    import numpy as np

__all__ = [
    "EmbeddingNodeSelector",
    "LLMNodeSelector",
    "LinearNodeSelector",
    "NodeSelector",
    "ThreadRuleError",
    "add_node",
    "ancestors_path",
    "candidate_nodes",
    "check_thread_rules",
    "resolve_selector",
    "thread_path",
]

log = logging.getLogger(__name__)

HUMAN_ROLES = frozenset({"user"})


# --------------------------------------------------------------------------------------------
# graph helpers


def node_of(graph: nx.DiGraph, node_id: int) -> ConversationNode:
    """The :class:`ConversationNode` stored at ``node_id``."""
    node: ConversationNode = graph.nodes[node_id]["node"]
    return node


def add_node(graph: nx.DiGraph, node: ConversationNode) -> None:
    """Add ``node`` (and its edge from its parent) to ``graph``."""
    graph.add_node(node.id, node=node)
    if node.parent_id is not None:
        graph.add_edge(node.parent_id, node.id)


def candidate_nodes(graph: nx.DiGraph) -> list[int]:
    """Assistant node ids, oldest first: the only places a human message may attach."""
    return sorted(
        node_id
        for node_id, data in graph.nodes(data=True)
        if data["node"].message.role == "assistant"
    )


def ancestors_path(graph: nx.DiGraph, node_id: int, depth: int | None = None) -> list[int]:
    """``node_id`` and up to ``depth`` of its ancestors, root-most first (all if ``None``)."""
    path = [node_id]
    current = node_id
    while depth is None or len(path) <= depth:
        parent = node_of(graph, current).parent_id
        if parent is None or parent not in graph or parent in path:
            break
        path.append(parent)
        current = parent
    path.reverse()
    return path


def thread_path(graph: nx.DiGraph, leaf: int | None = None) -> list[int]:
    """The path from the thread root to ``leaf`` (default: the newest node)."""
    if graph.number_of_nodes() == 0:
        return []
    return ancestors_path(graph, max(graph.nodes) if leaf is None else leaf)


def check_thread_rules(graph: nx.DiGraph) -> None:
    """Raise :class:`ThreadRuleError` if ``graph`` breaks any threading rule."""
    if not nx.is_directed_acyclic_graph(graph):
        raise ThreadRuleError("the thread graph has a cycle; rebuild it from the store.")
    ordered = sorted(graph.nodes)
    for position, node_id in enumerate(ordered):
        node = node_of(graph, node_id)
        parent = node.parent_id
        role = node.message.role
        if parent is not None and parent not in graph:
            raise ThreadRuleError(f"node {node_id} is an orphan: its parent {parent} is missing.")
        preds = list(graph.predecessors(node_id))
        if preds != ([] if parent is None else [parent]):
            raise ThreadRuleError(
                f"node {node_id}: edges {preds} disagree with parent_id {parent}."
            )
        if position == 0 and parent is not None:
            raise ThreadRuleError(f"the first node {node_id} must be a root.")
        if role == "assistant":
            if parent is None or node_of(graph, parent).message.role not in HUMAN_ROLES:
                raise ThreadRuleError(
                    f"assistant node {node_id} must be the child of the human message it answers."
                )
        elif (
            role in HUMAN_ROLES
            and parent is not None
            and node_of(graph, parent).message.role != "assistant"
        ):
            raise ThreadRuleError(
                f"human node {node_id} must attach to an assistant node, not to {parent}."
            )


# --------------------------------------------------------------------------------------------
# selectors


@runtime_checkable
class NodeSelector(Protocol):
    """Chooses the parent of a new human message: an assistant node id, or ``None`` (new root)."""

    def select_parent(self, graph: nx.DiGraph, message: Message) -> int | None: ...


# A selector with ``uses_reply = True`` also receives the assistant's answer to the new message
# as ``reply=`` (ChatMemory appends whole exchanges, so the answer is known): it says more about
# the topic than a short human message alone.


class LinearNodeSelector:
    """The newest assistant node: plain chronological memory, no model involved."""

    name = "linear"
    #: What ChatMemory records as its mode; any other selector makes a ``"graph"``.
    mode = "linear"

    def select_parent(self, graph: nx.DiGraph, message: Message) -> int | None:
        candidates = candidate_nodes(graph)
        return candidates[-1] if candidates else None

    async def aselect_parent(self, graph: nx.DiGraph, message: Message) -> int | None:
        return self.select_parent(graph, message)


def _unit(matrix: np.ndarray) -> np.ndarray:
    import numpy as np

    norms = np.linalg.norm(matrix, axis=-1, keepdims=True)
    return np.asarray(matrix / np.maximum(norms, 1e-12), dtype=np.float32)


@dataclass(slots=True)
class _NodeState:
    vector: np.ndarray  # this message's embedding
    human_centroid: np.ndarray | None = None  # assistant nodes: decayed sum of the path's humans
    assistant_centroid: np.ndarray | None = None  # ... and of the path's assistants


class EmbeddingNodeSelector:
    """Attach a human message to the assistant node (and thread) it is most related to.

    For each assistant node ``a`` answering human ``h`` the score is a weighted mean of
    ``cos(q, a)`` (does the message reply to that turn), ``cos(q, h)`` (does it continue what the
    same person said), and ``cos(q, centroid)`` for the decayed centroids of the human and the
    assistant messages along the path from the root to ``a`` (is it the same conversation: its
    topics, its speaker's voice), minus ``recency_weight * log(1 + age)`` where age counts
    exchanges since ``a``, plus ``leaf_bonus`` if nothing answers ``a`` yet (conversations
    continue at their newest turn). If the best similarity is below ``new_thread_threshold`` the
    message starts a new thread.

    ``embedder`` is an :class:`~harombe_core.embeddings.Embedder` or a spec for
    :func:`~harombe_core.embeddings.resolve_embedder` (``"default"``: the bundled
    all-MiniLM-L6-v2, offline). Vectors are cached per node, so each message is embedded once.
    """

    name = "embedding"
    uses_reply = True

    def __init__(
        self,
        embedder: Any = "default",
        *,
        reply_weight: float = 2.0,
        speaker_weight: float = 0.25,
        thread_weight: float = 1.0,
        decay: float = 0.97,
        recency_weight: float = 0.02,
        leaf_bonus: float = 0.03,
        new_thread_threshold: float | None = 0.05,
        reply_query_weight: float = 0.25,
    ) -> None:
        if not 0.0 <= decay < 1.0:
            raise InvalidInputError(f"decay must be in [0, 1), got {decay!r}.")
        for label, value in (
            ("reply_weight", reply_weight),
            ("speaker_weight", speaker_weight),
            ("thread_weight", thread_weight),
        ):
            if value < 0:
                raise InvalidInputError(f"{label} must be >= 0, got {value!r}.")
        if reply_weight + speaker_weight + thread_weight <= 0:
            raise InvalidInputError("at least one of the weights must be positive.")
        self._embedder_spec = embedder
        self._embedder: Any = None
        self.reply_weight = reply_weight
        self.speaker_weight = speaker_weight
        self.thread_weight = thread_weight
        self.decay = decay
        self.recency_weight = recency_weight
        self.leaf_bonus = leaf_bonus
        self.new_thread_threshold = new_thread_threshold
        self.reply_query_weight = reply_query_weight
        self._state: dict[int, _NodeState] = {}

    @property
    def embedder(self) -> Any:
        """The embedder, resolved on first use (so building a selector loads no model)."""
        if self._embedder is None:
            spec = self._embedder_spec
            if isinstance(spec, str):
                from harombe_core.embeddings import resolve_embedder

                self._embedder = resolve_embedder(spec)
            else:
                self._embedder = spec
        return self._embedder

    def _embedding(self) -> Flow[Any]:
        """The embedder; resolving a named one may load a model, off the event loop if async."""
        if self._embedder is None and isinstance(self._embedder_spec, str):
            yield Work(lambda: self.embedder)
        return self.embedder

    def _embed(self, texts: list[str]) -> Flow[np.ndarray]:
        """``texts`` embedded: the embedder's own async method on the async path."""
        import numpy as np

        embedder = yield from self._embedding()
        vectors = yield Call(embedder.embed, texts, native=getattr(embedder, "aembed", None))
        return np.asarray(vectors, dtype=np.float32)

    def forget(self) -> None:
        """Drop cached vectors (after the graph was cleared or rebuilt)."""
        self._state.clear()

    def _sync(self, graph: nx.DiGraph) -> Flow[None]:
        """Embed the nodes not seen yet and derive the thread centroids, oldest first."""
        import numpy as np

        stale = [node_id for node_id in self._state if node_id not in graph]
        for node_id in stale:
            del self._state[node_id]
        missing = sorted(node_id for node_id in graph.nodes if node_id not in self._state)
        if not missing:
            return
        vectors = yield from self._embed([node_of(graph, i).message.content for i in missing])
        for node_id, vector in zip(missing, vectors, strict=True):
            self._state[node_id] = _NodeState(vector=vector)
        for node_id in missing:  # ids grow along every path, so parents are done first
            node = node_of(graph, node_id)
            if node.message.role != "assistant":
                continue
            state = self._state[node_id]
            human = node.parent_id
            human_vec = (
                self._state[human].vector if human is not None else np.zeros_like(state.vector)
            )
            previous = node_of(graph, human).parent_id if human is not None else None
            prev_state = self._state.get(previous) if previous is not None else None
            if prev_state is not None and prev_state.human_centroid is not None:
                state.human_centroid = human_vec + self.decay * prev_state.human_centroid
                assert prev_state.assistant_centroid is not None
                state.assistant_centroid = state.vector + self.decay * prev_state.assistant_centroid
            else:
                state.human_centroid = human_vec.copy()
                state.assistant_centroid = state.vector.copy()

    def _query(self, message: Message, reply: Message | None) -> Flow[np.ndarray]:
        import numpy as np

        if reply is None or self.reply_query_weight <= 0 or not reply.content.strip():
            embedder = yield from self._embedding()
            vector = yield Call(
                embedder.embed_query,
                message.content,
                native=getattr(embedder, "aembed_query", None),
            )
            return np.asarray(vector, dtype=np.float32)
        both = yield from self._embed([message.content, reply.content])
        return _unit(both[0] + self.reply_query_weight * both[1])

    def scores(
        self, graph: nx.DiGraph, message: Message, reply: Message | None = None
    ) -> tuple[list[int], np.ndarray, np.ndarray]:
        """Candidate ids, their similarity, and their final score (similarity plus priors)."""
        return drive(self._scores(graph, message, reply))

    def _scores(
        self, graph: nx.DiGraph, message: Message, reply: Message | None
    ) -> Flow[tuple[list[int], np.ndarray, np.ndarray]]:
        """:meth:`scores` written once: the embeddings are its only I/O."""
        import numpy as np

        candidates = candidate_nodes(graph)
        if not candidates:
            return [], np.zeros(0), np.zeros(0)
        yield from self._sync(graph)
        query = yield from self._query(message, reply)
        states = [self._state[c] for c in candidates]
        replies = np.stack([s.vector for s in states])
        speakers = np.stack(
            [
                self._state[p].vector
                if (p := node_of(graph, c).parent_id) is not None
                else np.zeros_like(query)
                for c in candidates
            ]
        )
        humans = _unit(np.stack([s.human_centroid for s in states]))  # type: ignore[misc]
        assistants = _unit(np.stack([s.assistant_centroid for s in states]))  # type: ignore[misc]
        total = self.reply_weight + self.speaker_weight + self.thread_weight
        similarity = (
            self.reply_weight * (replies @ query)
            + self.speaker_weight * (speakers @ query)
            + self.thread_weight * 0.5 * (humans @ query + assistants @ query)
        ) / total
        ages = np.arange(len(candidates))[::-1].astype(np.float32)
        leaves = np.array(
            [not any(True for _ in graph.successors(c)) for c in candidates], dtype=np.float32
        )
        score = similarity - self.recency_weight * np.log1p(ages) + self.leaf_bonus * leaves
        return candidates, similarity, score

    def select_parent(
        self, graph: nx.DiGraph, message: Message, reply: Message | None = None
    ) -> int | None:
        return drive(self._select(graph, message, reply))

    async def aselect_parent(
        self, graph: nx.DiGraph, message: Message, reply: Message | None = None
    ) -> int | None:
        return await adrive(self._select(graph, message, reply))

    def _select(
        self, graph: nx.DiGraph, message: Message, reply: Message | None
    ) -> Flow[int | None]:
        import numpy as np

        candidates, similarity, score = yield from self._scores(graph, message, reply)
        if not candidates:
            return None
        best = int(np.argmax(score))
        threshold = self.new_thread_threshold
        if threshold is not None and float(similarity[best]) < threshold:
            return None
        return candidates[best]


_SELECTION_INSTRUCTIONS = """You are an expert at analysing conversation threads. Choose which \
existing assistant message the new user message replies to or continues.

Consider, in order: direct continuation of a topic; related concepts; recency (recent messages \
are more often the right parent); a logical conversational flow.

Candidate assistant messages (id: text):
{context}

New user message: {message}

Answer with JSON only: {{"selected_node_id": <one of {ids}>, "reasoning": "<one sentence>"}}"""


def _parse_choice(answer: str) -> int | None:
    text = answer.strip()
    match = re.search(r"\{.*\}", text, re.DOTALL)
    if match:
        try:
            data = json.loads(match.group(0))
        except (ValueError, RecursionError):  # ValueError: also ints too long to read
            data = None
        if isinstance(data, dict):
            value = data.get("selected_node_id", data.get("node_id", data.get("id")))
            if isinstance(value, int) and not isinstance(value, bool):
                return value
            if isinstance(value, str) and value.strip().lstrip("-").isdigit():
                return int(value.strip())
    number = re.search(r"-?\d+", text)
    return int(number.group(0)) if number else None


class LLMNodeSelector:
    """Let a chat model choose the parent, with validation, retry with feedback, and fallback.

    ``llm`` is a callable ``llm(prompt: str) -> str`` (sync), or an object with an async
    ``acall(prompt)`` / an async callable for :meth:`aselect_parent`. The model sees the newest
    ``max_candidates`` assistant messages; an answer that is not one of their ids is sent back
    with feedback up to ``max_attempts`` times, after which (or if the model raises) the newest
    assistant node is used, as the unified chat-memory design prescribes, and a warning is
    logged.
    """

    name = "llm"

    def __init__(
        self,
        llm: Any,
        *,
        max_attempts: int = 3,
        max_candidates: int = 20,
        max_chars: int = 300,
    ) -> None:
        if not callable(llm) and not hasattr(llm, "acall"):
            raise InvalidInputError(
                "llm must be a callable llm(prompt) -> str or have an async acall(prompt); wrap "
                "LangChain/LlamaIndex models with their adapter's helper."
            )
        if max_attempts < 1 or max_candidates < 1:
            raise InvalidInputError("max_attempts and max_candidates must be >= 1.")
        self.llm = llm
        self.max_attempts = max_attempts
        self.max_candidates = max_candidates
        self.max_chars = max_chars
        self.last_fallback_reason: str | None = None

    def _prompt(self, graph: nx.DiGraph, message: Message, candidates: Sequence[int]) -> str:
        lines = []
        for node_id in candidates:
            node = node_of(graph, node_id)
            text = " ".join(node.message.content.split())[: self.max_chars]
            title = f"[{node.summary.title}] " if node.summary else ""
            lines.append(f"{node_id}: {title}{text}")
        return _SELECTION_INSTRUCTIONS.format(
            context="\n".join(lines),
            message=message.content[: self.max_chars * 4],
            ids=", ".join(map(str, candidates)),
        )

    def _flow(self, graph: nx.DiGraph, message: Message) -> Flow[int | None]:
        """The selection algorithm: asks the model, reads its answers (or its error)."""
        self.last_fallback_reason = None
        every = candidate_nodes(graph)
        if not every:
            return None
        if len(every) == 1:
            return every[0]
        candidates = every[-self.max_candidates :]
        prompt = self._prompt(graph, message, candidates)
        problem = ""
        for _attempt in range(self.max_attempts):
            answer = yield from ask(self.llm, prompt + problem)
            if isinstance(answer, BaseException):
                self.last_fallback_reason = f"the model failed: {answer!r}"
                break
            choice = _parse_choice(answer if isinstance(answer, str) else str(answer))
            if choice is not None and choice in candidates:
                return choice
            shown = "no id" if choice is None else f"id {choice}"
            problem = (
                f"\n\nYour previous answer ({answer!r:.200}) gave {shown}, which is not a "
                f"candidate. Answer again with one of: {', '.join(map(str, candidates))}."
            )
            self.last_fallback_reason = f"no valid id after {self.max_attempts} attempts"
        log.warning(
            "LLM node selection fell back to the newest node: %s", self.last_fallback_reason
        )
        return every[-1]

    def select_parent(self, graph: nx.DiGraph, message: Message) -> int | None:
        return drive(self._flow(graph, message))

    async def aselect_parent(self, graph: nx.DiGraph, message: Message) -> int | None:
        return await adrive(self._flow(graph, message))


def resolve_selector(selector: Any = "embedding", **options: Any) -> Any:
    """A selector from a name (``"linear"``, ``"embedding"``, ``"llm"``) or a selector object."""
    if selector is None or selector == "linear":
        return LinearNodeSelector()
    if selector == "embedding":
        return EmbeddingNodeSelector(**options)
    if selector == "llm":
        if "llm" not in options:
            raise InvalidInputError("selector='llm' needs llm=<callable prompt -> str>.")
        return LLMNodeSelector(**options)
    if hasattr(selector, "select_parent"):
        return selector
    raise InvalidInputError(
        f"unknown selector {show(selector)}; use 'linear', 'embedding', 'llm' or an object with "
        "select_parent(graph, message)."
    )
