"""Hybrid retrieval: vector and keyword candidates, fused, weighed with their context, decayed,
diversified, budgeted.

How a query is answered:

1. Candidates come from two places: the vector index (cosine to the query's embedding; each
   message was embedded together with the turn it answers) and the store's FTS5 index (BM25
   over the message and the turn it answers). Either side alone misses things the other finds:
   names, numbers and rare words are the keyword side's strength, paraphrase the vector side's.
   A word of the query that names a speaker of the candidates ("what did Ann say") is matched
   against who spoke rather than as a word, unless ``names_as_keywords``.
2. Every vector candidate is re-read from the store *with the caller's scope*, so nothing
   outside the user or session asked for can come back, whatever the index returned.
3. The two lists are fused: by default the cosine (min-max scaled over the candidates) and
   BM25 (scaled by the best match) are averaged with the configured weights; weighted
   reciprocal-rank fusion is the alternative. A message the background embedder has not
   reached yet (a store opened with a backlog, an import being embedded) has no cosine: it is
   scored by its keyword side alone, so search stays complete while embedding catches up.
4. Each candidate's fused score is weighed with its context (:func:`evidence`): the turns
   just before and after it (which join the candidates), its session, whether the query names
   its speaker, whether it was written in a time the query names, how long it is and whether
   it states rather than asks (the long statements are where people tell things), and whether
   it is the turn of a person the query asks a judgement about ("Would Ann ...?"). Each kind
   has a weight in :class:`RetrievalSettings`; the defaults are the ones that recalled best on
   conversations the choice was not made on (``benchmarks/locomo_recall.py --cv``).
5. Scores are then optionally decayed by age (``temporal_decay`` per day), filtered by
   ``min_similarity`` and diversified by MMR.

Steps 3 to 5 are pure and live in :mod:`harombe_core.ranking`; this module does the I/O.

Without semantic memory, the same entry points run keyword search alone and say so
(:attr:`Retriever.mode` is ``"keyword"``; hits carry no ``vector_score``).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Collection, Sequence
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from harombe_core.errors import EmbeddingError
from harombe_core.flows import Call, Flow, Parallel, Run, Subflow, Work, drive
from harombe_core.models import Message, SearchHit, Session
from harombe_core.query_time import query_time_ranges, slack_end
from harombe_core.store import ops
from harombe_core.store.base import KeywordHit, MessageStore, OnCorrupt, SearchScope
from harombe_core.store.rows import LeftOut
from harombe_core.validate import (
    MAX_TOP_K,
    check_budget,
    check_count,
    check_flag,
    check_number,
    check_options,
    check_query,
    check_roles,
    optional_id,
    optional_number,
    optional_time,
)

if TYPE_CHECKING:
    from harombe_core.ranking import (
        EVIDENCE,
        Candidates,
        RetrievalSettings,
        evidence,
        evidence_weights,
        mmr_select,
        named_speakers,
        rank,
    )
    from harombe_core.vectors.indexer import SemanticMemory

__all__ = [
    "CONTEXT_HEADER",
    "EVIDENCE",
    "Candidates",
    "RetrievalSettings",
    "Retriever",
    "context_message",
    "evidence",
    "evidence_weights",
    "format_context",
    "mmr_select",
    "named_speakers",
    "rag_messages",
    "rank",
]

log = logging.getLogger(__name__)


def __getattr__(name: str) -> Any:
    """The public names this module offers from :mod:`harombe_core.ranking` (those in
    ``__all__`` not defined here), imported on first use.

    Ranking needs numpy, so it is imported when a search runs or one of its names is first
    asked for, not with this module: the manager reads the retriever's method signatures
    while ``import harombe_core`` stays light.
    """
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from harombe_core import ranking

    value = getattr(ranking, name)
    globals()[name] = value
    return value


CONTEXT_HEADER = "Relevant context from past conversations:"

#: At least this many of each side's best candidates have their neighbours read (``top_k`` if
#: larger): enough for the top of the ranking, a fraction of what every candidate would cost.
NEIGHBOR_SEEDS = 10
#: At most this many of the time ranges a query names get a keyword search of their own.
TIME_QUERIES = 3
#: A named time range that already holds this many of the pool's candidates gets none: its turns
#: are in reach, and adding more low-scored ones only moves the other candidates' scaling (on
#: LoCoMo, searching every range cost 0.6 points of recall@5, cross-validated; this kept it).
TIME_POOL_ENOUGH = 1


def _keyword_in_times(
    store: MessageStore,
    text: str,
    keyword: list[KeywordHit],
    pool: int,
    scope: SearchScope,
    times: Sequence[Any],
    slack_days: float,
    pooled: Collection[Message] = (),
) -> Flow[list[KeywordHit]]:
    """``keyword`` with the best keyword hits written in the times the query names (up to
    ``slack_days`` after each, as ``time_weight`` counts them), best score first.

    The time a query names only weighs candidates, so they must be in the pool: over a long
    history ("what did we say about the garden yesterday?" after a year of talking about the
    garden) the store-wide best matches are all from other days. One keyword search per range
    (:data:`TIME_QUERIES` at most; a date without a year is not one range) scoped to it finds
    that day's. Their BM25 scores are the index's, comparable with the store-wide ones. A range
    where ``pooled`` (the candidates gathered so far) already has :data:`TIME_POOL_ENOUGH`
    messages is left as it is.
    """
    merged = {int(h.message.id or 0): h for h in keyword}
    for span in [t for t in times if not t.any_year][:TIME_QUERIES]:
        since = span.start if scope.since is None else max(scope.since, span.start)
        end = slack_end(span, slack_days)
        until = end if scope.until is None else min(scope.until, end)
        if since >= until:
            continue
        inside = sum(1 for m in pooled if since <= m.created_at < until)
        if inside >= TIME_POOL_ENOUGH:
            continue
        timed = replace(scope, since=since, until=until)
        for hit in (yield Run(store, ops.keyword_search(text, limit=pool, scope=timed))):
            merged.setdefault(int(hit.message.id or 0), hit)
    return sorted(merged.values(), key=lambda h: -h.score)


def keyword_query(query: str) -> str:
    """The query for the keyword side: its words minus stopwords (all of them if none is left)."""
    from harombe_core.ranking import STOPWORDS, WORDS

    words = WORDS.findall(query)
    kept = [w for w in words if w.lower() not in STOPWORDS]
    return " ".join(kept or words)


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
        "neighbor_weight",
        "session_weight",
        "speaker_weight",
        "time_weight",
        "feedback_weight",
        "length_weight",
        "statement_weight",
        "person_weight",
        "name_free_weight",
        "fact_weight",
        "now",
        "skip_unreadable",
    }
)
#: Largest weight of either side of hybrid search (they are relative: only the ratio counts).
MAX_WEIGHT = 1_000_000.0


def check_search_options(options: dict[str, Any], extra: frozenset[str] = frozenset()) -> None:
    """Refuse an option no search knows, naming the ones that exist (a typo is not ignored)."""
    check_options(options, SEARCH_OPTIONS | extra, "the search options")


def _check_k(value: Any, what: str = "top_k") -> int:
    return check_count(value, what, high=MAX_TOP_K)


def _add_cosines(
    found: Candidates,
    semantic: SemanticMemory | None,
    keep_vectors: bool = False,
    on_corrupt: OnCorrupt = None,
) -> Flow[None]:
    """The cosine of every candidate (and neighbour) that the vector side did not propose,
    and which of them are not embedded yet (they have none). ``keep_vectors`` also keeps
    every candidate's vector (pseudo-relevance feedback moves the query with them). A vector
    edited outside harombe raises, or goes to ``on_corrupt`` (the search's scope's)."""
    if semantic is None or found.query_vector is None:
        return
    import numpy as np

    known = found.vectors.keys() if keep_vectors else found.cosine.keys()
    missing = [i for i in (*found.messages, *found.outside) if i not in known]
    if missing:
        vectors, pending = yield Work(semantic.vectors_or_pending, missing, on_corrupt)
        for mid, vec in vectors.items():
            found.cosine.setdefault(mid, float(np.dot(vec, found.query_vector)))
            if keep_vectors:
                found.vectors[mid] = vec
        found.unembedded |= pending


def _add_name_free_cosines(
    found: Candidates,
    semantic: SemanticMemory | None,
    query: str,
    embedded: tuple[str, Any] | None,
    on_corrupt: OnCorrupt = None,
) -> Flow[None]:
    """Every candidate's (and neighbour's) cosine to ``query`` without the names of the
    speakers it names (``name_free_weight``), only for a query that names a speaker.

    ``embedded`` is a name-free text the vector side already embedded beside the query (in
    the same model call), with its vector: used when it is this text, else the text is
    embedded here. The candidates' stored vectors are read once. An embedding outage leaves
    them out (the query's own cosines still rank).
    """
    import numpy as np

    from harombe_core.ranking import without_names

    if semantic is None or found.query_vector is None:
        return
    text = without_names(query, found.speakers)
    if not text or text == query:
        return
    if embedded is not None and embedded[0] == text:
        free = embedded[1]
    else:
        embedder = semantic.embedder
        try:
            vector = yield Call(
                embedder.embed_query, text, native=getattr(embedder, "aembed_query", None)
            )
        except EmbeddingError as exc:
            log.warning("name-free query embedding failed, ranking without it: %s", exc)
            return
        free = np.asarray(vector, dtype=np.float32)
    wanted = [i for i in (*found.messages, *found.outside) if i in found.cosine]
    missing = [i for i in wanted if i not in found.vectors]
    stored = (yield Work(semantic.vectors_for, missing, on_corrupt)) if missing else {}
    vectors = {**found.vectors, **stored}
    found.name_free_cosine = {mid: float(vectors[mid] @ free) for mid in wanted if mid in vectors}


#: At most this many speakers' name words are remembered for :attr:`Retriever.named`.
NAMED_LIMIT = 10_000


class Retriever:
    """Search over one store (and its semantic memory, when there is one)."""

    def __init__(
        self,
        store: MessageStore,
        semantic: SemanticMemory | None = None,
        settings: RetrievalSettings | None = None,
    ) -> None:
        from harombe_core.ranking import RetrievalSettings

        self.store = store
        self.semantic = semantic
        self.settings = settings or RetrievalSettings()
        #: The name words of speakers that earlier queries named (casefolded): a query that
        #: names one again has its name-free text embedded in the same model call as
        #: itself (``name_free_weight``), at a fraction of the cost of a second call.
        self.named: set[str] = set()
        #: Where a search that passes over unreadable rows tells of them (once per row).
        self.passed_over = LeftOut(store.location, "the recalled context")

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
        **options: Any,
    ) -> list[SearchHit]:
        """:meth:`search_flow` on the calling thread (its options, its errors)."""
        return drive(self.search_flow(query, top_k, session_id, user_id, min_similarity, **options))

    def search_flow(
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
        neighbor_weight: float | None = None,
        session_weight: float | None = None,
        speaker_weight: float | None = None,
        time_weight: float | None = None,
        feedback_weight: float | None = None,
        length_weight: float | None = None,
        statement_weight: float | None = None,
        person_weight: float | None = None,
        name_free_weight: float | None = None,
        fact_weight: float | None = None,
        now: datetime | None = None,
        skip_unreadable: bool = False,
    ) -> Flow[list[SearchHit]]:
        """The best ``top_k`` messages for ``query`` inside the scope, best first, with scores.

        ``score`` (0..1) is the fused score with the context evidence of
        :class:`RetrievalSettings`, decayed by age when asked; ``vector_score`` the cosine
        similarity (``None`` where unknown) and ``keyword_score`` (0..1) the BM25 score relative
        to the best keyword match (``None`` if the words did not match); see
        :class:`~harombe_core.models.SearchHit`. ``min_similarity`` drops hits whose cosine is
        below it (a message not embedded yet has none and is kept on its keywords; keyword-only
        search has no cosines and ignores it). Every
        weight left ``None`` comes from the settings (the ``rag:`` config).

        A row edited outside harombe that cannot be read raises its CorruptRowError, naming
        it; with ``skip_unreadable`` (recall that only enriches a prompt, which one bad row
        must not fail turn after turn) it is left out, with one warning naming it.

        A flow: every store read is a :class:`~harombe_core.flows.Run` of one operation and
        every embedding or vector read a request of its own, so the async path
        (``MemoryManager.asearch``) takes one thread hop per read and none around the call.
        """
        from harombe_core.ranking import mmr_select, rank

        s = self.settings
        query = check_query(query)
        k = _check_k(s.top_k if top_k is None else top_k)
        overrides: dict[str, Any] = {
            "temporal_decay": temporal_decay,
            "vector_weight": vector_weight,
            "keyword_weight": keyword_weight,
            "neighbor_weight": neighbor_weight,
            "session_weight": session_weight,
            "speaker_weight": speaker_weight,
            "time_weight": time_weight,
            "feedback_weight": feedback_weight,
            "length_weight": length_weight,
            "statement_weight": statement_weight,
            "person_weight": person_weight,
            "name_free_weight": name_free_weight,
            "fact_weight": fact_weight,
        }
        for name, value in overrides.items():
            if value is not None:
                high = None if name == "temporal_decay" else MAX_WEIGHT
                overrides[name] = check_number(value, name, low=0.0, high=high)
        settings = replace(s, **{n: v for n, v in overrides.items() if v is not None})
        min_sim = optional_number(
            s.min_similarity if min_similarity is None else min_similarity,
            "min_similarity",
            low=-1.0,
            high=1.0,
        )
        lam = optional_number(
            s.mmr_lambda if mmr_lambda is None else mmr_lambda, "mmr_lambda", low=0.0, high=1.0
        )
        passing_over = self.passed_over if check_flag(skip_unreadable, "skip_unreadable") else None
        scope = SearchScope(
            user_id=optional_id(user_id, "user_id"),
            session_id=optional_id(session_id, "session_id"),
            roles=check_roles(roles),
            since=optional_time(since, "since"),
            until=optional_time(until, "until"),
            exclude_session_id=optional_id(exclude_session_id, "exclude_session_id"),
            on_corrupt=passing_over,
        )
        now = optional_time(now, "now")
        if k == 0 or not query.strip():
            return []
        found = yield from self.gather_flow(
            query,
            k,
            scope,
            settings,
            min_similarity=min_sim,
            mmr_lambda=lam,
            now=now,
        )
        hits = rank(found, settings, min_similarity=min_sim, now=now)
        if lam is not None and found.query_vector is not None and len(hits) > 1:
            assert self.semantic is not None
            ids = [h.message.id or 0 for h in hits[: k * 4]]
            vectors = yield Work(self.semantic.vectors_for, ids, scope.on_corrupt)
            return mmr_select(hits[: k * 4], vectors, k, lam)
        return hits[:k]

    def gather(
        self,
        query: str,
        k: int,
        scope: SearchScope,
        settings: RetrievalSettings,
        *,
        exclude_session_id: str | None = None,
        min_similarity: float | None = None,
        mmr_lambda: float | None = None,
        neighbors: bool | None = None,
        now: datetime | None = None,
    ) -> Candidates:
        """:meth:`gather_flow` on the calling thread."""
        flow = self.gather_flow(
            query,
            k,
            scope,
            settings,
            exclude_session_id=exclude_session_id,
            min_similarity=min_similarity,
            mmr_lambda=mmr_lambda,
            neighbors=neighbors,
            now=now,
        )
        return drive(flow)

    def gather_flow(
        self,
        query: str,
        k: int,
        scope: SearchScope,
        settings: RetrievalSettings,
        *,
        exclude_session_id: str | None = None,
        min_similarity: float | None = None,
        mmr_lambda: float | None = None,
        neighbors: bool | None = None,
        now: datetime | None = None,
    ) -> Flow[Candidates]:
        """Everything :func:`rank` needs for one query: the candidates of both sides, read
        through the store with ``scope``, and the evidence around them.

        Separate from ranking so that weights can be compared over the same candidates (the
        recall benchmark cross-validates them this way); ``search`` is ``gather`` + ``rank``.
        ``neighbors`` (default: whether ``settings.neighbor_weight > 0``) also reads the
        adjacent turns of the best candidates, which become candidates themselves.
        """
        from harombe_core.ranking import (
            WORDS,
            Candidates,
            asks_judgement,
            named_speakers,
            without_names,
        )

        s = settings
        wv, wk = s.vector_weight, s.keyword_weight
        pool = max(k * s.candidates, s.min_candidates)
        if exclude_session_id is not None and scope.exclude_session_id is None:
            # Left out by the store, not after it: the session's own matches must not take
            # the places of the other sessions' in the pool.
            scope = replace(scope, exclude_session_id=exclude_session_id)
        want_keyword = wk > 0 or self.semantic is None
        keyword_text = keyword_query(query)
        found = Candidates(times=query_time_ranges(query, now) if s.time_weight > 0 else [])
        wants_vectors = wv > 0 or min_similarity is not None or mmr_lambda is not None
        semantic: Any = None
        vector_messages: list[Message] = []
        keyword: list[KeywordHit] = []
        name_free = s.name_free_weight > 0 and wv > 0
        # A name an earlier query named: its name-free text is embedded with the query.
        guess = (
            self.named.intersection(w.casefold() for w in WORDS.findall(query))
            if name_free
            else set()
        )
        extra = without_names(query, frozenset(guess)) if guess else None
        embedded: tuple[str, Any] | None = None
        keyword_side = Run(self.store, ops.keyword_search(keyword_text, limit=pool, scope=scope))
        if self.semantic is None:
            keyword = yield keyword_side
        else:
            vector_side = self._vector_side(query, pool, scope, found, wants_vectors, wv, extra)
            if want_keyword:
                # SQLite runs the keyword query with the GIL released, so it overlaps with
                # embedding the query and the vector search instead of adding to them.
                (semantic, vector_messages, embedded), keyword = yield Parallel(
                    Subflow(vector_side), keyword_side
                )
            else:
                semantic, vector_messages, embedded = yield from vector_side
        for message in vector_messages:
            found.messages.setdefault(int(message.id or 0), message)
        for hit in keyword:
            found.messages.setdefault(int(hit.message.id or 0), hit.message)
        found.speakers = named_speakers(query, found.messages.values())
        found.judgement = asks_judgement(query)
        if keyword and found.speakers and not s.names_as_keywords:
            # The query names who spoke: that is matched against each message's speaker
            # (speaker_weight), not as a word. As a word, a name is rare in the whole store
            # and dominates BM25, though in a conversation it mostly appears in what the
            # *other* people say to that person.
            rest = " ".join(
                w for w in WORDS.findall(keyword_text) if w.casefold() not in found.speakers
            )
            if rest.strip():
                keyword_text = rest
                keyword = yield Run(self.store, ops.keyword_search(rest, limit=pool, scope=scope))
                for hit in keyword:
                    found.messages.setdefault(int(hit.message.id or 0), hit.message)
        if keyword_text.strip() and found.times and (want_keyword or self.semantic is None):
            keyword = yield from _keyword_in_times(
                self.store,
                keyword_text,
                keyword,
                pool,
                scope,
                found.times,
                s.time_slack_days,
                list(found.messages.values()),
            )
            for hit in keyword:
                found.messages.setdefault(int(hit.message.id or 0), hit.message)
        found.keyword_rank = {int(h.message.id or 0): r for r, h in enumerate(keyword)}
        found.keyword_score = {int(h.message.id or 0): h.score for h in keyword}
        found.pooled = frozenset(found.messages)
        if s.fact_weight > 0:
            yield from self._add_fact_keys(
                found, keyword_text, max(k, NEIGHBOR_SEEDS), pool, scope, s
            )
        feedback = s.feedback_weight > 0 and wv > 0
        yield from _add_cosines(found, semantic, feedback, scope.on_corrupt)
        if neighbors if neighbors is not None else s.neighbor_weight > 0:
            yield from self._add_neighbors(found, scope, max(k, NEIGHBOR_SEEDS))
            yield from _add_cosines(found, semantic, feedback, scope.on_corrupt)
        if name_free and found.speakers:
            if len(self.named) > NAMED_LIMIT:
                self.named.clear()
            self.named.update(found.speakers)
            yield from _add_name_free_cosines(found, semantic, query, embedded, scope.on_corrupt)
        return found

    def _vector_side(
        self,
        query: str,
        pool: int,
        scope: SearchScope,
        found: Candidates,
        wanted: bool,
        weight: float,
        extra: str | None = None,
    ) -> Flow[tuple[Any, list[Message], tuple[str, Any] | None]]:
        """Embed the query (into ``found``) and, if ``wanted``, read its nearest messages in
        scope (their cosines, and with a vector ``weight`` their ranks, into ``found``): the
        semantic memory still usable (None after an embedding outage), those messages, and
        ``extra`` with its vector when given (embedded in the same model call as the query:
        a query is embedded as any text is, ``embed_query`` being ``embed`` of one)."""
        import numpy as np

        semantic = self.semantic
        assert semantic is not None
        embedder = semantic.embedder
        embedded = None
        try:
            if extra is None or extra == query:
                native = getattr(embedder, "aembed_query", None)
                vector = yield Call(embedder.embed_query, query, native=native)
                found.query_vector = np.asarray(vector, dtype=np.float32)
            else:
                native = getattr(embedder, "aembed", None)
                both = yield Call(embedder.embed, [query, extra], native=native)
                both = np.asarray(both, dtype=np.float32)
                found.query_vector, embedded = both[0], (extra, both[1])
        except EmbeddingError as exc:
            # An embedding outage must not take search down: the keyword side still works.
            log.warning("query embedding failed, searching by keyword only: %s", exc)
            return None, [], None
        if not wanted or found.query_vector is None:
            return semantic, [], embedded
        matches = yield Work(semantic.nearest, found.query_vector, pool, scope)
        # The store decides what is in scope; the index only proposed.
        vector_messages = yield Run(
            self.store, ops.get_messages_by_ids([m.message_id for m in matches], scope)
        )
        allowed = {int(m.id or 0) for m in vector_messages}
        rank_ = 0
        for match in matches:
            if match.message_id in allowed:
                found.cosine[match.message_id] = match.similarity
                if weight > 0:
                    found.vector_rank[match.message_id] = rank_
                    rank_ += 1
        return semantic, vector_messages, embedded

    def _add_fact_keys(
        self,
        found: Candidates,
        keyword_text: str,
        seeds: int,
        pool: int,
        scope: SearchScope,
        settings: RetrievalSettings,
    ) -> Flow[None]:
        """The user's facts as extra keys of the messages they came from (``fact_weight``):
        each candidate's ``fact_score``, and the messages of the ``seeds`` best facts as
        candidates.

        Each fact is scored as a turn is: its cosine to the query (min-max scaled over the
        ``pool`` best facts) and its BM25 for the keyword side's words without the speakers'
        names (scaled by the best), averaged with the fusion weights. A message's score is
        the mean of its facts'. The facts are the scope's user's (a session's owner when
        only a session is given); the messages they name are read through the store with
        the scope, like every other candidate, so a fact never brings in a message outside
        it.
        """
        import numpy as np

        from harombe_core.facts import ops as fact_ops
        from harombe_core.ranking import WORDS

        user_id = scope.user_id
        if user_id is None and scope.session_id is not None:
            session = yield Run(self.store, ops.get_session(scope.session_id))
            user_id = None if session is None else session.user_id
        if user_id is None:
            return
        query_vector = found.query_vector
        semantic = self.semantic
        model = None if semantic is None or query_vector is None else str(semantic.embedder.name)
        words = [w for w in WORDS.findall(keyword_text) if w.casefold() not in found.speakers]
        keyword, blobs, sources = yield Run(
            self.store,
            fact_ops.fact_keys(user_id, " ".join(words) or keyword_text, model, limit=pool),
        )
        if not sources:
            return
        best = max((score for _, score in keyword), default=0.0) or 1.0
        by_keyword = {fid: score / best for fid, score in keyword}
        by_vector: dict[int, float] = {}
        blobs = [(fid, blob) for fid, blob in blobs if len(blob) == query_vector.nbytes]
        if blobs:
            matrix = np.frombuffer(b"".join(b for _, b in blobs), dtype=np.float32)
            cosines = matrix.reshape(len(blobs), -1) @ query_vector
            top = np.sort(cosines)[::-1][:pool]
            low, span = float(top[-1]), float(top[0] - top[-1]) or 1.0
            by_vector = {
                fid: max((float(c) - low) / span, 0.0)
                for (fid, _), c in zip(blobs, cosines, strict=True)
            }
        wv = settings.vector_weight if by_vector else 0.0
        wk = settings.keyword_weight
        if wv + wk == 0:
            return
        scores: dict[int, list[float]] = {}
        fact_score: dict[int, float] = {}
        for fid, mid in sources:
            score = fact_score.setdefault(
                fid, (wv * by_vector.get(fid, 0.0) + wk * by_keyword.get(fid, 0.0)) / (wv + wk)
            )
            scores.setdefault(mid, []).append(score)
        found.fact_score = {mid: sum(v) / len(v) for mid, v in scores.items()}
        ranked = sorted(fact_score, key=lambda fid: (-fact_score[fid], fid))[:seeds]
        wanted = {mid for fid, mid in sources if fid in ranked and fact_score[fid] > 0}
        missing = sorted(wanted - found.messages.keys())
        if missing:
            read = yield Run(self.store, ops.get_messages_by_ids(missing, scope))
            for message in read:
                found.messages[int(message.id or 0)] = message
            found.pooled = frozenset(found.messages)

    def _add_neighbors(self, found: Candidates, scope: SearchScope, seeds: int) -> Flow[None]:
        """Read the turns just before and after the best candidates (their context).

        The best ``seeds`` of each side (by cosine and by BM25) are the turns whose context
        can change the top of the ranking; reading the neighbours of every candidate would
        triple the rows a search reads for little gain. In-scope neighbours become candidates;
        out-of-scope ones (another role, outside the time window) only lend evidence. Both are
        in the candidate's own session, so the user boundary is never crossed.
        """
        pooled = sorted(found.pooled)
        by_cosine = sorted(pooled, key=lambda m: -found.cosine.get(m, -math.inf))[:seeds]
        by_keyword = [m for m in pooled if found.keyword_rank.get(m, seeds) < seeds]
        best = sorted({*by_cosine, *by_keyword})
        # The neighbours' ids, and those in scope read whole, in one store operation.
        adjacent, read = yield Run(
            self.store, ops.neighbours(best, frozenset(found.messages), scope)
        )
        for mid, pair in adjacent.items():
            for other in pair:
                if other is not None:
                    found.adjacent.setdefault(mid, set()).add(other)
                    found.adjacent.setdefault(other, set()).add(mid)
        wanted = found.adjacent.keys() - found.messages.keys()
        for message in read:
            found.messages[int(message.id or 0)] = message
        found.outside = frozenset(wanted - found.messages.keys())

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
        """:meth:`search_by_topic_flow` on the calling thread."""
        return drive(self.search_by_topic_flow(topic, top_k, user_id, **options))

    def search_by_topic_flow(
        self,
        topic: str,
        top_k: int | None = None,
        user_id: str | None = None,
        **options: Any,
    ) -> Flow[list[Session]]:
        """Sessions that talk about ``topic``, the most relevant first.

        A session ranks by the sum of its messages' scores among the hits, so a conversation
        that keeps returning to a topic beats one that mentions it once.
        """
        check_search_options(options)
        k = _check_k(self.settings.top_k if top_k is None else top_k)
        pool = min(max(k * 10, 50), MAX_TOP_K)
        hits = yield from self.search_flow(topic, pool, user_id=user_id, **options)
        totals: dict[str, float] = {}
        for hit in hits:
            totals[hit.session_id] = totals.get(hit.session_id, 0.0) + hit.score
        ranked = sorted(totals, key=lambda sid: -totals[sid])[:k]
        sessions = []
        for sid in ranked:
            session: Session | None = yield Run(self.store, ops.get_session(sid))
            if session is not None:
                sessions.append(session)
        return sessions

    def get_relevant_context(
        self,
        query: str,
        max_tokens: int | None = None,
        session_id: str | None = None,
        user_id: str | None = None,
        exclude_session_id: str | None = None,
        **options: Any,
    ) -> list[Message]:
        """:meth:`get_relevant_context_flow` on the calling thread."""
        flow = self.get_relevant_context_flow(
            query, max_tokens, session_id, user_id, exclude_session_id, **options
        )
        return drive(flow)

    def get_relevant_context_flow(
        self,
        query: str,
        max_tokens: int | None = None,
        session_id: str | None = None,
        user_id: str | None = None,
        exclude_session_id: str | None = None,
        **options: Any,
    ) -> Flow[list[Message]]:
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
        options.setdefault("skip_unreadable", True)  # it enriches a prompt: see search_flow
        hits = yield from self.search_flow(
            query,
            k,
            session_id=session_id,
            user_id=user_id,
            exclude_session_id=exclude_session_id,
            **options,
        )
        chosen: list[Message] = []
        seen: set[tuple[str, str | None, str]] = set()
        used = 0
        for hit in hits:
            # The same words said again (a retried question, a re-run script) add nothing for
            # the model; the best-ranked copy stands for them and the budget goes further.
            said = (hit.message.role, hit.message.name, hit.message.content)
            cost = hit.message.token_count or 0
            if said not in seen and used + cost <= budget:
                chosen.append(hit.message)
                seen.add(said)
                used += cost
            if top_k is not None and len(chosen) >= top_k:
                break
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
