"""Hybrid retrieval: vector and keyword candidates, fused, decayed, diversified, budgeted.

How a query is answered:

1. Candidates come from two places: the vector index (cosine to the query's embedding; each
   message was embedded together with the turn it answers) and the store's FTS5 index (BM25
   over the message and the turn it answers). Either side alone misses things the other finds:
   names, numbers and rare words are the keyword side's strength, paraphrase the vector side's.
2. Every vector candidate is re-read from the store *with the caller's scope*, so nothing
   outside the user or session asked for can come back, whatever the index returned.
3. The two lists are fused: by default the cosine (min-max scaled over the candidates) and
   BM25 (scaled by the best match) are averaged with the configured weights; weighted
   reciprocal-rank fusion is the alternative. Scores are then optionally decayed by age
   (``temporal_decay`` per day), filtered by ``min_similarity`` and diversified by MMR.

Without semantic memory, the same entry points run keyword search alone and say so
(:attr:`Retriever.mode` is ``"keyword"``; hits carry no ``vector_score``).
"""

from __future__ import annotations

import asyncio
import logging
import math
import re
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import numpy as np

from harombe_core.errors import EmbeddingError, InvalidInputError
from harombe_core.models import Message, SearchHit, Session
from harombe_core.store.base import KeywordHit, MessageStore, SearchScope
from harombe_core.validate import (
    MAX_TOP_K,
    check_budget,
    check_count,
    check_number,
    check_options,
    check_query,
    check_roles,
    optional_id,
    optional_number,
    optional_time,
)

if TYPE_CHECKING:
    from harombe_core.config import RagSection
    from harombe_core.vectors.indexer import SemanticMemory

__all__ = [
    "CONTEXT_HEADER",
    "RetrievalSettings",
    "Retriever",
    "context_message",
    "format_context",
    "mmr_select",
    "rag_messages",
]

log = logging.getLogger(__name__)

CONTEXT_HEADER = "Relevant context from past conversations:"

#: Function words dropped from the keyword side's query. BM25 gives them almost no weight, but
#: each one matches most rows, so OR-ing them in makes a keyword search cost grow with the
#: whole store instead of with the matches that matter.
STOPWORDS = frozenset(
    """a about after again all also am an and any are as at be because been before being but by
    can could did do does doing done for from had has have having he her here hers him his how i
    if in into is it its just me my myself no nor not now of off on once only or other our ours
    out over own same she should so some such than that the their theirs them then there these
    they this those through to too under until up very was we were what when where which while
    who whom why will with would you your yours yourself""".split()  # noqa: SIM905
)
_WORDS = re.compile(r"\w+", re.UNICODE)


_EXECUTOR: ThreadPoolExecutor | None = None
_EXECUTOR_LOCK = threading.Lock()


def _background() -> ThreadPoolExecutor:
    """Threads for the keyword side of searches (shared, created on first use)."""
    global _EXECUTOR
    with _EXECUTOR_LOCK:
        if _EXECUTOR is None:
            _EXECUTOR = ThreadPoolExecutor(max_workers=4, thread_name_prefix="harombe-keyword")
        return _EXECUTOR


def keyword_query(query: str) -> str:
    """The query for the keyword side: its words minus stopwords (all of them if none is left)."""
    words = _WORDS.findall(query)
    kept = [w for w in words if w.lower() not in STOPWORDS]
    return " ".join(kept or words)


@dataclass(frozen=True, slots=True)
class RetrievalSettings:
    """Defaults for every search; built from the ``rag:`` config block.

    ``fusion`` is ``"score"`` (normalised score fusion) or ``"rrf"`` (reciprocal-rank fusion,
    ``rrf_k`` damping how much the very top ranks dominate); ``candidates`` is how many
    hits each side proposes per result asked for (more finds more, at the cost of time).
    """

    top_k: int = 5
    min_similarity: float | None = None
    temporal_decay: float = 0.0
    vector_weight: float = 1.0
    keyword_weight: float = 1.0
    mmr_lambda: float | None = None
    max_context_tokens: int = 2048
    fusion: str = "score"
    rrf_k: int = 60
    candidates: int = 4
    min_candidates: int = 40

    @classmethod
    def from_config(cls, rag: RagSection) -> RetrievalSettings:
        return cls(
            top_k=rag.top_k,
            min_similarity=rag.min_similarity,
            temporal_decay=rag.temporal_decay,
            vector_weight=rag.vector_weight,
            keyword_weight=rag.keyword_weight,
            mmr_lambda=rag.mmr_lambda,
            max_context_tokens=rag.max_context_tokens,
        )


#: The keyword options every search entry point takes besides its named arguments.
SEARCH_OPTIONS = frozenset(
    {
        "roles",
        "since",
        "until",
        "exclude_session_id",
        "temporal_decay",
        "mmr_lambda",
        "vector_weight",
        "keyword_weight",
        "now",
    }
)
#: Largest weight of either side of hybrid search (they are relative: only the ratio counts).
MAX_WEIGHT = 1_000_000.0


def check_search_options(options: dict[str, Any], extra: frozenset[str] = frozenset()) -> None:
    """Refuse an option no search knows, naming the ones that exist (a typo is not ignored)."""
    check_options(options, SEARCH_OPTIONS | extra, "the search options")


def _check_k(value: Any, what: str = "top_k") -> int:
    return check_count(value, what, high=MAX_TOP_K)


class Retriever:
    """Search over one store (and its semantic memory, when there is one)."""

    def __init__(
        self,
        store: MessageStore,
        semantic: SemanticMemory | None = None,
        settings: RetrievalSettings | None = None,
    ) -> None:
        self.store = store
        self.semantic = semantic
        self.settings = settings or RetrievalSettings()

    @property
    def mode(self) -> str:
        """``"hybrid"`` (vector + keyword) or ``"keyword"`` (semantic memory is off)."""
        return "hybrid" if self.semantic is not None else "keyword"

    # the core search ------------------------------------------------------------------------
    def search(
        self,
        query: str,
        top_k: int | None = None,
        session_id: str | None = None,
        user_id: str | None = None,
        min_similarity: float | None = None,
        *,
        roles: Sequence[str] | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        exclude_session_id: str | None = None,
        temporal_decay: float | None = None,
        mmr_lambda: float | None = None,
        vector_weight: float | None = None,
        keyword_weight: float | None = None,
        now: datetime | None = None,
    ) -> list[SearchHit]:
        """The best ``top_k`` messages for ``query`` inside the scope, best first, with scores.

        ``score`` is the fused (and decayed) score; ``vector_score`` the cosine similarity
        (``None`` where unknown) and ``keyword_score`` the BM25 score (``None`` if the words
        did not match). ``min_similarity`` drops hits whose cosine is below it.
        """
        s = self.settings
        query = check_query(query)
        k = _check_k(s.top_k if top_k is None else top_k)
        min_sim = optional_number(
            s.min_similarity if min_similarity is None else min_similarity,
            "min_similarity",
            low=-1.0,
            high=1.0,
        )
        decay = check_number(
            s.temporal_decay if temporal_decay is None else temporal_decay,
            "temporal_decay",
            low=0.0,
        )
        lam = optional_number(
            s.mmr_lambda if mmr_lambda is None else mmr_lambda, "mmr_lambda", low=0.0, high=1.0
        )
        wv = check_number(
            s.vector_weight if vector_weight is None else vector_weight,
            "vector_weight",
            low=0.0,
            high=MAX_WEIGHT,
        )
        wk = check_number(
            s.keyword_weight if keyword_weight is None else keyword_weight,
            "keyword_weight",
            low=0.0,
            high=MAX_WEIGHT,
        )
        scope = SearchScope(
            user_id=optional_id(user_id, "user_id"),
            session_id=optional_id(session_id, "session_id"),
            roles=check_roles(roles),
            since=optional_time(since, "since"),
            until=optional_time(until, "until"),
        )
        exclude_session_id = optional_id(exclude_session_id, "exclude_session_id")
        now = optional_time(now, "now")
        if k == 0 or not query.strip():
            return []
        pool = max(k * s.candidates, s.min_candidates)
        if exclude_session_id is not None:
            pool *= 2

        want_keyword = wk > 0 or self.semantic is None
        pending: Future[list[KeywordHit]] | None = None
        if want_keyword and self.semantic is not None:
            # SQLite runs the keyword query with the GIL released, so it overlaps with
            # embedding the query and the vector search instead of adding to them.
            pending = _background().submit(
                self.store.keyword_search, keyword_query(query), limit=pool, scope=scope
            )

        vector_rank: dict[int, int] = {}
        cosine: dict[int, float] = {}
        vector_messages: list[Message] = []
        query_vector = None
        semantic = self.semantic
        if semantic is not None:
            try:
                query_vector = semantic.embed_query(query)
            except EmbeddingError as exc:
                # An embedding outage must not take search down: the keyword side still works.
                log.warning("query embedding failed, searching by keyword only: %s", exc)
                semantic = None
        wants_vectors = wv > 0 or min_sim is not None or lam is not None
        if semantic is not None and query_vector is not None and wants_vectors:
            matches = semantic.nearest(query_vector, pool, scope)
            # The store decides what is in scope; the index only proposed.
            vector_messages = self.store.get_messages_by_ids(
                [m.message_id for m in matches], scope
            )
            allowed = {int(m.id or 0) for m in vector_messages}
            rank = 0
            for match in matches:
                if match.message_id in allowed:
                    cosine[match.message_id] = match.similarity
                    if wv > 0:
                        vector_rank[match.message_id] = rank
                        rank += 1

        if pending is not None:
            keyword = pending.result()
        elif want_keyword:
            keyword = self.store.keyword_search(keyword_query(query), limit=pool, scope=scope)
        else:
            keyword = []
        by_id: dict[int, Message] = {int(h.message.id or 0): h.message for h in keyword}
        keyword_rank = {int(h.message.id or 0): r for r, h in enumerate(keyword)}
        keyword_score = {int(h.message.id or 0): h.score for h in keyword}
        for message in vector_messages:
            by_id.setdefault(int(message.id or 0), message)
        if semantic is not None and query_vector is not None:
            missing = [i for i in by_id if i not in cosine]
            if missing:
                for mid, vec in semantic.vectors_for(missing).items():
                    cosine[mid] = float(np.dot(vec, query_vector))

        fuse = _fusion(s.fusion, s.rrf_k, wv, wk, cosine, vector_rank, keyword_rank, keyword_score)
        hits: list[SearchHit] = []
        reference = now or datetime.now(UTC)
        for mid, message in by_id.items():
            if exclude_session_id is not None and message.session_id == exclude_session_id:
                continue
            vscore = cosine.get(mid)
            if min_sim is not None and (vscore is None or vscore < min_sim):
                continue
            score = keyword_score.get(mid, 0.0) if semantic is None else fuse(mid)
            if decay > 0:
                age_days = max((reference - message.created_at).total_seconds() / 86_400, 0.0)
                score *= math.exp(-decay * age_days)
            hits.append(SearchHit(message, score, vscore, keyword_score.get(mid)))
        hits.sort(key=lambda h: (-h.score, -(h.message.id or 0)))
        if lam is not None and semantic is not None and len(hits) > 1:
            vectors = semantic.vectors_for([h.message.id or 0 for h in hits[: k * 4]])
            return mmr_select(hits[: k * 4], vectors, k, lam)
        return hits[:k]

    def search_similar(
        self,
        query: str,
        top_k: int | None = None,
        session_id: str | None = None,
        user_id: str | None = None,
        min_similarity: float | None = None,
        **options: Any,
    ) -> list[Message]:
        """Like :meth:`search`, returning only the messages (each as it was saved)."""
        check_search_options(options)
        hits = self.search(query, top_k, session_id, user_id, min_similarity, **options)
        return [hit.message for hit in hits]

    def search_by_topic(
        self,
        topic: str,
        top_k: int | None = None,
        user_id: str | None = None,
        **options: Any,
    ) -> list[Session]:
        """Sessions that talk about ``topic``, the most relevant first.

        A session ranks by the sum of its messages' scores among the hits, so a conversation
        that keeps returning to a topic beats one that mentions it once.
        """
        check_search_options(options)
        k = _check_k(self.settings.top_k if top_k is None else top_k)
        hits = self.search(topic, min(max(k * 10, 50), MAX_TOP_K), user_id=user_id, **options)
        totals: dict[str, float] = {}
        for hit in hits:
            totals[hit.session_id] = totals.get(hit.session_id, 0.0) + hit.score
        ranked = sorted(totals, key=lambda sid: -totals[sid])[:k]
        sessions = [self.store.get_session(sid) for sid in ranked]
        return [session for session in sessions if session is not None]

    def get_relevant_context(
        self,
        query: str,
        max_tokens: int | None = None,
        session_id: str | None = None,
        user_id: str | None = None,
        exclude_session_id: str | None = None,
        **options: Any,
    ) -> list[Message]:
        """The best hits whose stored token counts fit ``max_tokens``, best first.

        Hits that do not fit are skipped (a shorter one further down may still fit). Exclude
        the current session so the prompt is not given back the turns its window already has.
        """
        budget = check_budget(
            self.settings.max_context_tokens if max_tokens is None else max_tokens
        )
        check_search_options(options, frozenset({"top_k"}))
        top_k = options.pop("top_k", None)
        wanted = _check_k(top_k) if top_k is not None else self.settings.top_k
        k = min(max(wanted, 1) * 4, MAX_TOP_K)
        hits = self.search(
            query,
            k,
            session_id=session_id,
            user_id=user_id,
            exclude_session_id=exclude_session_id,
            **options,
        )
        chosen: list[Message] = []
        used = 0
        for hit in hits:
            cost = hit.message.token_count or 0
            if used + cost <= budget:
                chosen.append(hit.message)
                used += cost
            if top_k is not None and len(chosen) >= top_k:
                break
        return chosen

    # async twins ----------------------------------------------------------------------------
    async def asearch(self, query: str, *args: Any, **kwargs: Any) -> list[SearchHit]:
        return await asyncio.to_thread(self.search, query, *args, **kwargs)

    async def asearch_similar(self, query: str, *args: Any, **kwargs: Any) -> list[Message]:
        return await asyncio.to_thread(self.search_similar, query, *args, **kwargs)

    async def asearch_by_topic(self, topic: str, *args: Any, **kwargs: Any) -> list[Session]:
        return await asyncio.to_thread(self.search_by_topic, topic, *args, **kwargs)

    async def aget_relevant_context(self, query: str, *args: Any, **kwargs: Any) -> list[Message]:
        return await asyncio.to_thread(self.get_relevant_context, query, *args, **kwargs)


def _fusion(
    method: str,
    rrf_k: int,
    wv: float,
    wk: float,
    cosine: dict[int, float],
    vector_rank: dict[int, int],
    keyword_rank: dict[int, int],
    keyword_score: dict[int, float],
) -> Callable[[int], float]:
    """The fused score of a candidate id.

    ``"score"`` (default): a weighted mean of the cosine, min-max scaled over the candidates,
    and BM25 scaled by the best BM25 (0 where the words did not match). Scaling per query
    makes the two comparable, and unlike rank fusion a clear win on one side is not flattened
    into a rank. ``"rrf"``: weighted reciprocal-rank fusion, ``w / (rrf_k + rank)``.
    """
    if wv == 0 and wk == 0:
        return lambda mid: cosine.get(mid, 0.0)
    if method == "rrf":

        def rrf(mid: int) -> float:
            score = 0.0
            if mid in vector_rank:
                score += wv / (rrf_k + 1 + vector_rank[mid])
            if mid in keyword_rank:
                score += wk / (rrf_k + 1 + keyword_rank[mid])
            return score

        return rrf
    if method != "score":
        raise InvalidInputError(f"fusion must be 'score' or 'rrf', got {method!r}.")
    low = min(cosine.values(), default=0.0)
    span = max(cosine.values(), default=0.0) - low or 1.0
    best = max(keyword_score.values(), default=0.0) or 1.0
    total = wv + wk

    def scaled(mid: int) -> float:
        vector = (cosine[mid] - low) / span if mid in cosine else 0.0
        keyword = keyword_score.get(mid, 0.0) / best
        return (wv * vector + wk * keyword) / total

    return scaled


def mmr_select(
    hits: Sequence[SearchHit], vectors: dict[int, Any], k: int, lam: float
) -> list[SearchHit]:
    """Maximal marginal relevance: trade relevance against similarity to what was picked.

    Relevance is the hit's score scaled to [0, 1]; ``lam = 1`` is plain ranking, ``lam = 0``
    pure diversity. Hits without a vector are ranked by relevance alone.
    """
    if not hits:
        return []
    top = max(h.score for h in hits) or 1.0
    remaining = list(hits)
    chosen: list[SearchHit] = []
    chosen_vectors: list[Any] = []
    while remaining and len(chosen) < k:
        best_index, best_value = 0, -math.inf
        for index, hit in enumerate(remaining):
            relevance = hit.score / top
            vector = vectors.get(hit.message.id or 0)
            redundancy = 0.0
            if vector is not None and chosen_vectors:
                redundancy = max(float(np.dot(vector, other)) for other in chosen_vectors)
            value = lam * relevance - (1.0 - lam) * redundancy
            if value > best_value:
                best_index, best_value = index, value
        hit = remaining.pop(best_index)
        chosen.append(hit)
        vector = vectors.get(hit.message.id or 0)
        if vector is not None:
            chosen_vectors.append(vector)
    return chosen


def format_context(messages: Sequence[Message], header: str = CONTEXT_HEADER) -> str:
    """Retrieved messages as prompt text: oldest first, each with its date and speaker."""
    if not messages:
        return ""
    lines = [header]
    for message in sorted(messages, key=lambda m: (m.created_at, m.id or 0)):
        speaker = f"{message.name} ({message.role})" if message.name else message.role
        lines.append(f"- [{message.created_at:%Y-%m-%d %H:%M}] {speaker}: {message.content}")
    return "\n".join(lines)


def context_message(messages: Sequence[Message], header: str = CONTEXT_HEADER) -> Message | None:
    """The system message a RAG prompt carries (``None`` when nothing was retrieved)."""
    text = format_context(messages, header)
    return Message(role="system", content=text) if text else None


def rag_messages(
    query: str,
    context: Sequence[Message],
    history: Sequence[Message] = (),
    system_prompt: str | None = None,
) -> list[Message]:
    """A prompt in the RAG agent's shape: system prompt, retrieved context, history, question."""
    out: list[Message] = []
    if system_prompt:
        out.append(Message(role="system", content=system_prompt))
    extra = context_message(context)
    if extra is not None:
        out.append(extra)
    # A windowed history leads with the session's system prompt; keep one system prompt only.
    out.extend(m for m in history if not (system_prompt and m.role == "system"))
    out.append(Message(role="user", content=query))
    return out
