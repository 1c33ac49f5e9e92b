"""How retrieved candidates are scored and ordered: fusion, context evidence, decay, MMR.

Everything here is pure: it takes what :meth:`~harombe_core.retrieval.Retriever.gather` read
from the store and the vector index (:class:`Candidates`) and the weights in force
(:class:`RetrievalSettings`), and returns hits in order. Kept apart from the retriever, which
does the I/O, so the ranking can be read, tested and tuned on its own (the recall benchmark
re-ranks the same candidates under many weights with :func:`evidence` and :func:`rank`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from harombe_core.errors import InvalidInputError
from harombe_core.models import Message, SearchHit
from harombe_core.query_time import TimeRange, in_ranges

if TYPE_CHECKING:
    from harombe_core.config import RagSection

__all__ = [
    "EVIDENCE",
    "STOPWORDS",
    "WORDS",
    "Candidates",
    "RetrievalSettings",
    "asks_judgement",
    "evidence",
    "evidence_weights",
    "mmr_select",
    "named_speakers",
    "rank",
    "without_names",
]


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
#: A word of a query or of a speaker's name.
WORDS = re.compile(r"\w+", re.UNICODE)


#: How many of a session's best fused scores make its ``session_weight`` evidence: a few, so
#: one lucky turn does not carry a session, nor does a long session win by size.
SESSION_EVIDENCE = 3


@dataclass(frozen=True, slots=True)
class RetrievalSettings:
    """Defaults for every search; built from the ``rag:`` config block.

    ``fusion`` is ``"score"`` (normalised score fusion) or ``"rrf"`` (reciprocal-rank fusion,
    ``rrf_k`` damping how much the very top ranks dominate); ``candidates`` is how many
    hits each side proposes per result asked for (more finds more, at the cost of time).

    Context evidence, each added to a hit's fused score (0 turns it off):

    * ``neighbor_weight``: times the best fused score of the turns just before and after it
      in its session. An answer ("Yes, last May") is found through the question it answers,
      and a question through its answer; the neighbours also become candidates.
    * ``session_weight``: times the mean of the best three fused scores in its session. A
      conversation that keeps matching the query is more likely to hold the answer.
    * ``speaker_weight``: when the query names the message's speaker (its ``name``; "what
      did Ann say about ..."). With ``names_as_keywords`` off, names of speakers are
      matched this way only and left out of the keyword query.
    * ``time_weight``: when the query names a date, month, year or relative time ("on 9
      November", "in 2023", "last week") and the message was written then, or up to
      ``time_slack_days`` after (people tell of things after they happen).
    * ``length_weight``: times the message's length in tokens over ``length_tokens`` (at most
      1). A prior, the same for every query: in a chat, the long turns are where people tell
      what they did, have and like; the short ones ("Wow, that's awesome!") react. BM25
      discounts long texts and a mean-pooled embedding dilutes them, which buries exactly the
      turns that hold facts.
    * ``statement_weight``: when the message states rather than asks (its last sentence does
      not end with a question mark). Asked questions ("What did you paint?") share the words
      of later searches but hold no answer; the reply does.
    * ``person_weight``: when the query asks for a judgement about a person it names (a
      yes/no or speculative question: "Would Ann enjoy ...?", "Is Bo likely to ...?",
      :func:`asks_judgement`) and the message is that person's. Such a question is answered
      from what the person said of themselves across the conversation, rarely in the
      question's words; on top of ``speaker_weight``, which holds for every question naming
      a speaker (a higher one for all of them would bury the turns of questions that name a
      person only to ask about what they were told).
    * ``fact_weight`` (off by default): times the mean score of the user's facts that came
      from the message (each fact scored against the query as a turn is: its cosine,
      min-max scaled over the best facts, and its BM25, averaged). A fact an LLM extracted
      says what a turn meant in other words than the turn ("Ann is single" for "since the
      breakup it's just me"), so it is a second key to that turn; the best facts' messages
      also become candidates. Only facts with source messages count, and only for a search
      scoped to a user (or to a session, whose owner's facts are read). Off by default: it
      helps facts an LLM wrote, not the offline extractor's, which repeat the turn's own
      words (``docs/ranking.md``).

    ``name_free_weight``: the vector side also compares every candidate with the query
    without the names of the speakers it names (:func:`without_names`; "What did Ann
    paint?" -> "What did paint?") and fuses ``cosine + name_free_weight * name-free
    cosine``. Each message is embedded with its speaker's name, so a name in the query
    pulls every turn of that speaker (and every turn that mentions them) toward it by about
    as much, whatever it says: a share of the query's meaning spent on who, which the
    ``speaker_weight`` and ``person_weight`` columns already say, instead of on what. Kept
    half named (the query's own cosine stays in the sum) because the name still tells the
    two speakers apart. Only the fusion uses it: ``vector_score`` and ``min_similarity``
    stay the cosine to the query as asked.

    Pseudo-relevance feedback (Rocchio, on the vector side): ``feedback_weight`` moves the
    query's vector toward the mean vector of the ``feedback_docs`` best candidates by fused
    score (``q + feedback_weight * mean``, renormalised) and fuses the candidates' cosines to
    that vector instead. A question names a thing in the asker's words; the best matches name
    it in the conversation's words, and the turns that share those find their way up. Only
    the fusion uses it: ``vector_score`` and ``min_similarity`` stay the cosine to the query.
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
    neighbor_weight: float = 0.4
    session_weight: float = 0.7
    speaker_weight: float = 0.2
    time_weight: float = 0.8
    time_slack_days: float = 7.0
    length_weight: float = 0.4
    length_tokens: int = 80
    statement_weight: float = 0.2
    person_weight: float = 0.2
    name_free_weight: float = 1.0
    names_as_keywords: bool = False
    feedback_weight: float = 0.0
    feedback_docs: int = 3
    fact_weight: float = 0.0

    @classmethod
    def from_config(cls, rag: RagSection) -> RetrievalSettings:
        """The settings ``rag`` names (every field both share); the rest keep their defaults."""
        given = rag.model_dump()
        return cls(**{f.name: given[f.name] for f in fields(cls) if f.name in given})


@dataclass(slots=True)
class Candidates:
    """What :meth:`Retriever.gather` found for one query, before any weight is applied.

    ``messages`` are in scope (the store checked them); ``pooled`` are the ids the vector and
    keyword sides proposed (the rest are neighbours); ``outside`` are neighbours outside the
    scope, known only by their cosine, which lend evidence but are never returned;
    ``unembedded`` are candidates the embedder has not reached yet (no vector, so no cosine);
    ``vectors`` the stored vectors of the candidates, read only when pseudo-relevance feedback
    needs them (``feedback_weight > 0``); ``name_free_cosine`` every candidate's cosine to
    the query without the names of the speakers it names (``name_free_weight``; empty when
    the query names no speaker); ``fact_score`` each candidate's mean score of the user's
    facts it is a source of (``fact_weight``; empty when facts were not read).
    """

    messages: dict[int, Message] = field(default_factory=dict)
    cosine: dict[int, float] = field(default_factory=dict)
    keyword_score: dict[int, float] = field(default_factory=dict)
    vector_rank: dict[int, int] = field(default_factory=dict)
    keyword_rank: dict[int, int] = field(default_factory=dict)
    pooled: frozenset[int] = frozenset()
    adjacent: dict[int, set[int]] = field(default_factory=dict)
    outside: frozenset[int] = frozenset()
    speakers: frozenset[str] = frozenset()
    judgement: bool = False
    times: list[TimeRange] = field(default_factory=list)
    query_vector: Any = None
    unembedded: frozenset[int] = frozenset()
    vectors: dict[int, Any] = field(default_factory=dict)
    name_free_cosine: dict[int, float] = field(default_factory=dict)
    fact_score: dict[int, float] = field(default_factory=dict)


def named_speakers(query: str, messages: Iterable[Message]) -> frozenset[str]:
    """The words of ``query`` that name a speaker of ``messages`` (casefolded).

    A speaker is named by any word of their ``name`` ("Ann" names "Ann Lee"); words of one
    letter and stopwords never count.
    """
    words = {w.casefold() for w in WORDS.findall(query)}
    named: set[str] = set()
    for message in messages:
        if message.name:
            for part in WORDS.findall(message.name):
                folded = part.casefold()
                if folded in words and len(folded) > 1 and folded not in STOPWORDS:
                    named.add(folded)
    return frozenset(named)


def without_names(query: str, speakers: frozenset[str]) -> str:
    """``query`` without the words that name ``speakers`` (casefolded name words, as
    :func:`named_speakers` returns them) and their possessive ``'s``; spaces collapsed.

    "What is Ann's favourite book?" -> "What is favourite book?": what the vector side
    compares the candidates with for ``name_free_weight``.
    """
    if not speakers:
        return query
    text = query
    for name in sorted(speakers, key=len, reverse=True):
        text = re.sub(rf"\b{re.escape(name)}(?:['\u2019]s)?\b", " ", text, flags=re.IGNORECASE)
    return " ".join(text.split())


def _speaks(message: Message, speakers: frozenset[str]) -> bool:
    return bool(message.name) and any(
        part.casefold() in speakers for part in WORDS.findall(message.name or "")
    )


#: The columns of :func:`evidence`, in order; each but the first is scaled by the setting
#: ``<name>_weight`` and added to the fused score.
EVIDENCE = (
    "fused",
    "neighbor",
    "session",
    "speaker",
    "time",
    "length",
    "statement",
    "person",
    "fact",
)


def evidence(
    found: Candidates, settings: RetrievalSettings, *, min_similarity: float | None = None
) -> tuple[list[Message], npt.NDArray[np.float64]]:
    """The hits-to-be and their evidence, one row each, columns :data:`EVIDENCE`.

    ``fused``: the fused score of the turn (see :func:`_fusion`; depends on the fusion
    weights). ``neighbor``: the best fused score of the turns just before and after it in its
    session. ``session``: the mean of the :data:`SESSION_EVIDENCE` best fused scores among its
    session's candidates. ``speaker``: 1 if the query names its speaker. ``time``: 1 if it was
    written in a time the query names (or up to ``time_slack_days`` after). ``length``: its
    token count over ``length_tokens``, at most 1 (:func:`length_prior`). ``statement``: 1
    unless its last sentence asks (:func:`asks`). ``person``: 1 if the query asks for a
    judgement about a person (:func:`asks_judgement`) and names its speaker. ``fact``: the
    mean score of the user's facts it is a source of (0 without; ``found.fact_score``).

    Neighbours are candidates only when ``neighbor_weight > 0`` (as ``search`` gathers them);
    ``min_similarity`` drops rows here (an excluded session never reaches the candidates:
    the store leaves it out of the scope); keyword-only search has no cosine to judge, so it
    drops nothing there (a ``rag.min_similarity`` in the config must not empty every keyword
    search of a manager opened with ``embedding=None``).
    """
    s = settings
    hybrid = found.query_vector is not None
    cosine = found.cosine
    if hybrid and s.name_free_weight > 0 and found.name_free_cosine:
        cosine = name_free_cosines(found, s.name_free_weight)
    fuse = _fusion(s.fusion, s.rrf_k, s.vector_weight, s.keyword_weight, found, hybrid, cosine)
    if hybrid and s.feedback_weight > 0 and s.vector_weight > 0 and found.vectors:
        cosine = feedback_cosines(found, fuse, s.feedback_weight, s.feedback_docs)
        fuse = _fusion(s.fusion, s.rrf_k, s.vector_weight, s.keyword_weight, found, hybrid, cosine)
    with_neighbors = s.neighbor_weight > 0
    base = {mid: fuse(mid) for mid in found.messages}
    if with_neighbors:
        for mid in found.outside:
            base[mid] = fuse(mid)
    by_session: dict[str, list[float]] = {}
    for mid in found.pooled:
        sid = found.messages[mid].session_id or ""
        by_session.setdefault(sid, []).append(base[mid])
    session_best = {
        sid: sum(top) / len(top)
        for sid, scores in by_session.items()
        for top in [sorted(scores, reverse=True)[:SESSION_EVIDENCE]]
    }
    messages: list[Message] = []
    rows: list[tuple[float, ...]] = []
    for mid in found.messages if with_neighbors else found.pooled:
        message = found.messages[mid]
        if (
            min_similarity is not None
            and hybrid  # keyword-only search has no cosines: nothing to judge, all kept
            and mid not in found.unembedded  # no cosine to judge yet: kept on its keywords
            and found.cosine.get(mid, -math.inf) < min_similarity
        ):
            continue
        around = [base[n] for n in found.adjacent.get(mid, ()) if n in base]
        speaker = bool(found.speakers) and _speaks(message, found.speakers)
        when = bool(found.times) and in_ranges(message.created_at, found.times, s.time_slack_days)
        rows.append(
            (
                base[mid],
                max(around, default=0.0) if with_neighbors else 0.0,
                session_best.get(message.session_id or "", 0.0),
                float(speaker),
                float(when),
                length_prior(message, s.length_tokens),
                0.0 if asks(message.content) else 1.0,
                float(speaker and found.judgement),
                found.fact_score.get(mid, 0.0),
            )
        )
        messages.append(message)
    return messages, np.array(rows, dtype=np.float64).reshape(len(rows), len(EVIDENCE))


def length_prior(message: Message, length_tokens: int) -> float:
    """``message``'s length in tokens over ``length_tokens``, at most 1 (its stored token
    count; a message without one counts a token per four characters)."""
    tokens = message.token_count
    if tokens is None:
        tokens = len(message.content) // 4
    return min(tokens / max(length_tokens, 1), 1.0)


#: The end of a sentence: what decides whether a message's last sentence asks.
_SENTENCE_END = re.compile(r"[.!?\uff1f\uff01\u3002]")


def asks(text: str) -> bool:
    """Whether ``text``'s last sentence is a question (the last ``.``, ``!`` or ``?`` is a
    ``?``; full-width marks count). Whatever follows without an end mark (an attachment's
    caption, an emoji) does not change it."""
    ends = _SENTENCE_END.findall(text)
    return bool(ends) and ends[-1] in "?\uff1f"


#: A question that asks for a judgement rather than a recorded fact: one that opens with an
#: auxiliary verb (a yes/no question: "Would ...", "Does ...", "Is ...") or speculates
#: ("likely", "might", "probably").
_JUDGEMENT = re.compile(
    r"^\W*(?:would|could|might|will|can|does|do|did|is|are|was|were|has|have)\b"
    r"|\b(?:likely|might|probably)\b",
    re.IGNORECASE,
)


def asks_judgement(query: str) -> bool:
    """Whether ``query`` asks for a judgement (yes/no or speculative) rather than a fact.

    "Would Ann enjoy a pottery class?", "Is Bo likely to move?", "What might Ann like?" do;
    "What did Ann paint?" and "When did Bo move?" do not. About a person the query names, such
    a question is answered by what that person said of themselves (``person_weight``).
    """
    return bool(_JUDGEMENT.search(query))


def evidence_weights(settings: RetrievalSettings) -> npt.NDArray[np.float64]:
    """The weight of each :data:`EVIDENCE` column under ``settings``."""
    s = settings
    return np.array(
        [
            1.0,
            s.neighbor_weight,
            s.session_weight,
            s.speaker_weight,
            s.time_weight,
            s.length_weight,
            s.statement_weight,
            s.person_weight,
            s.fact_weight,
        ],
        dtype=np.float64,
    )


def rank(
    found: Candidates,
    settings: RetrievalSettings,
    *,
    min_similarity: float | None = None,
    now: datetime | None = None,
) -> list[SearchHit]:
    """Every candidate of ``found`` as a hit, best first: its :func:`evidence` weighted by
    ``settings`` and summed, then decayed by age (``temporal_decay``).

    Scores are put on a 0..1 scale a person can read (see :class:`~harombe_core.models.
    SearchHit`): the weighted sum is divided by the weights of the evidence this query can
    have (speaker and time only when it names a speaker or a time), and each BM25 by the
    best of the search. Both divisors are the same for every hit, so the order is the order of
    the raw sums.
    """
    messages, table = evidence(found, settings, min_similarity=min_similarity)
    weights = evidence_weights(settings)
    applicable = weights.copy()
    applicable[EVIDENCE.index("speaker")] *= bool(found.speakers)
    applicable[EVIDENCE.index("time")] *= bool(found.times)
    applicable[EVIDENCE.index("person")] *= bool(found.speakers) and found.judgement
    applicable[EVIDENCE.index("fact")] *= bool(found.fact_score)
    scores = table @ weights / (applicable.sum() or 1.0)
    best_keyword = max(found.keyword_score.values(), default=0.0) or 1.0
    if settings.temporal_decay > 0:
        reference = now or datetime.now(UTC)
        for i, message in enumerate(messages):
            age_days = max((reference - message.created_at).total_seconds() / 86_400, 0.0)
            scores[i] *= math.exp(-settings.temporal_decay * age_days)
    hits = []
    for message, score in zip(messages, scores, strict=True):
        mid = int(message.id or 0)
        keyword = found.keyword_score.get(mid)
        relative = None if keyword is None else keyword / best_keyword
        hits.append(SearchHit(message, float(score), found.cosine.get(mid), relative))
    hits.sort(key=lambda h: (-h.score, -(h.message.id or 0)))
    return hits


def name_free_cosines(found: Candidates, weight: float) -> dict[int, float]:
    """Every candidate's cosine to the query plus ``weight`` times its cosine to the query
    without the speakers' names (``name_free_weight``). The sum is only ever min-max scaled
    over the candidates, so its scale does not matter: weight 1 is the mean of the two."""
    free = found.name_free_cosine
    return {mid: c + weight * free.get(mid, c) for mid, c in found.cosine.items()}


def feedback_cosines(
    found: Candidates, fuse: Callable[[int], float], weight: float, docs: int
) -> dict[int, float]:
    """Every candidate's cosine to the query moved toward its best matches (Rocchio).

    The ``docs`` best pooled candidates by fused score ``fuse`` that have a vector lend their
    mean: ``q' = q + weight * mean``, normalised. A candidate without a stored vector keeps
    its cosine to the query; the vector side's ranks follow the new cosines.
    """
    with_vector = [m for m in found.pooled if m in found.vectors]
    best = sorted(with_vector, key=lambda m: (-fuse(m), -m))[:docs]
    if not best:
        return found.cosine
    query = np.asarray(found.query_vector, dtype=np.float64)
    moved = query + weight * np.mean([found.vectors[m] for m in best], axis=0)
    moved /= np.linalg.norm(moved) or 1.0
    cosine = dict(found.cosine)
    for mid, vector in found.vectors.items():
        if mid in cosine:
            cosine[mid] = float(np.dot(vector, moved))
    return cosine


def _fusion(
    method: str,
    rrf_k: int,
    wv: float,
    wk: float,
    found: Candidates,
    hybrid: bool,
    cosine: dict[int, float] | None = None,
) -> Callable[[int], float]:
    """The fused score of a candidate id.

    ``"score"`` (default): a weighted mean of the cosine, min-max scaled over the candidates
    the two sides proposed, and BM25 scaled by the best BM25 (0 where the words did not
    match). Scaling per query makes the two comparable, and unlike rank fusion a clear win on
    one side is not flattened into a rank. ``"rrf"``: weighted reciprocal-rank fusion,
    ``w / (rrf_k + rank)``. Keyword-only search (no semantic memory) is BM25 scaled by the best.

    A candidate not embedded yet (``found.unembedded``: a backlog being embedded in the
    background) has no cosine, which is not a bad one: its keyword side alone is its score,
    on the full scale, as keyword search would rank it, so a store part-way through embedding
    does not bury what the embedder has not reached. ``cosine`` replaces ``found.cosine``
    (:func:`name_free_cosines`, or pseudo-relevance feedback's cosines to the moved query).
    """
    keyword_score, unembedded = found.keyword_score, found.unembedded
    cosine = found.cosine if cosine is None else cosine
    best = max(keyword_score.values(), default=0.0) or 1.0
    if not hybrid:
        return lambda mid: keyword_score.get(mid, 0.0) / best
    if wv == 0 and wk == 0:
        return lambda mid: cosine.get(mid, 0.0)
    if method == "rrf":
        vector_rank, keyword_rank = found.vector_rank, found.keyword_rank
        if cosine is not found.cosine:
            order = sorted(vector_rank, key=lambda m: (-cosine.get(m, -math.inf), m))
            vector_rank = {m: r for r, m in enumerate(order)}

        def rrf(mid: int) -> float:
            if mid in unembedded:
                rank_ = keyword_rank.get(mid)
                return 0.0 if rank_ is None or wk == 0 else (wv + wk) / (rrf_k + 1 + rank_)
            score = 0.0
            if mid in vector_rank:
                score += wv / (rrf_k + 1 + vector_rank[mid])
            if mid in keyword_rank:
                score += wk / (rrf_k + 1 + keyword_rank[mid])
            return score

        return rrf
    if method != "score":
        raise InvalidInputError(f"fusion must be 'score' or 'rrf', got {method!r}.")
    pooled = [cosine[m] for m in found.pooled if m in cosine]
    low = min(pooled, default=0.0)
    span = max(pooled, default=0.0) - low or 1.0
    total = wv + wk

    def scaled(mid: int) -> float:
        keyword = keyword_score.get(mid, 0.0) / best
        if mid in unembedded:
            return keyword if wk > 0 else 0.0
        vector = (cosine[mid] - low) / span if mid in cosine else 0.0
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
