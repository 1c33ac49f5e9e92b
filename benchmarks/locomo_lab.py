"""A fast inner loop for ranking work on LoCoMo: gather once, re-rank in seconds.

``locomo_recall.py --cv`` ranks every question under a grid of thousands of weight settings,
which takes tens of minutes on a busy machine. To try one weight or one new evidence column,
this script gathers every question's candidates once (``Retriever.gather``, the pools the
``--k`` values need, every kind of evidence read) and keeps them in a pickle, then ranks them
under a small grid around the shipped weights, with each ``--set`` option's values added, and
prints the leave-one-conversation-out recall by category (the same choice rule as
``locomo_recall.py --cv``: best mean recall@k over the ``--k`` values on four conversations,
scored on the fifth). A run takes seconds to a minute. The full benchmark stays the final word.

    python benchmarks/locomo_lab.py --data ../shared/data/locomo/locomo_dev.json --gather
    python benchmarks/locomo_lab.py --data ../shared/data/locomo/locomo_dev.json \\
        --set person_weight=0,0.1,0.2,0.4

A new evidence column is tried by adding it to ``harombe_core.ranking.evidence`` with its
weight, then ``--set`` that weight (re-``--gather`` when ``Candidates`` changed shape).
``--column`` adds one of the columns measured here and not shipped (``docs/ranking.md``)
beside the shipped ones, with its weights from ``--column-weights``:

    python benchmarks/locomo_lab.py --data ../shared/data/locomo/locomo_dev.json \\
        --column soft --column-option threshold=0.6 --column-option replace=1 \\
        --column-weights 0,0.1,0.25,0.5

``--column facts`` and ``--column summaries`` add LoCoMo's LLM-written observations or session
summaries as extra keys of their turns (``TextKeys``); ``--gather --facts`` gathers with the
observations extracted as facts through the library's LLM extractor instead, so that
``--set fact_weight=0,0.4,0.8`` measures the library's own ``fact_weight``.

``--column late`` adds late interaction (ColBERT-style MaxSim over MiniLM's token vectors,
names out); ``--map`` trains a linear map of the query embedding on the other conversations'
question-evidence pairs (per held-out conversation, so no question is scored with a map that
saw its conversation) and mixes the mapped query's cosine into the candidates' by each
``--map-shares`` value (``--map-option both=1`` maps the turns' vectors too, ``name_free=1``
trains on the question without its names, ``kind=1`` diagonal, ``kind=0`` full, ``kind=16``
rank 16). Neither ships (``docs/ranking.md``); the flags measure them again:

    python benchmarks/locomo_lab.py --data ../shared/data/locomo/locomo_dev.json \\
        --map --map-option kind=16 --map-option both=1

The
pickle holds the candidates' messages (the conversations' text): it is written to the
temporary folder by default and is for this machine only, never for the repository.
"""

from __future__ import annotations

import sys
from pathlib import Path

# As in locomo_recall.py: this folder's threading.py must not shadow the standard library.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]

import argparse  # noqa: E402
import itertools  # noqa: E402
import math  # noqa: E402
import pickle  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections import Counter  # noqa: E402
from dataclasses import fields, replace  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

#: The grid every run searches: the shipped weights and the values folds chose on the full
#: grid of ``locomo_recall.py`` (``--set`` replaces or adds an entry).
GRID: dict[str, tuple[float, ...]] = {
    "vector_weight": (0.5, 1.0),
    "neighbor_weight": (0.4, 0.7),
    "session_weight": (0.4, 0.7),
    "speaker_weight": (0.0, 0.1, 0.2),
    "length_weight": (0.4, 0.6),
    "statement_weight": (0.2, 0.3),
}


def _locomo() -> Any:
    """``locomo_recall.py`` as a module (its data shapes and scoring are this script's too),
    found at the end of the path, after the standard library it must not shadow."""
    sys.path.append(str(_HERE))
    import locomo_recall

    return locomo_recall


def pools(ks: list[int], candidates: int, least: int) -> dict[int, int]:
    """The candidate pool ``search`` gathers for each k (``max(k * candidates, least)``)."""
    return {k: max(k * candidates, least) for k in ks}


def conversation_turns(sample: dict[str, Any], lr: Any) -> list[tuple[int, str, str, str]]:
    """Every turn of a LoCoMo conversation in order: (session, speaker, dia_id, text as
    ingested, a shared photo's caption included)."""
    return [
        (session.number, turn.speaker, turn.dia_id, lr.turn_content(turn.raw, True))
        for session in lr.sessions_of(sample, lr.Notes())
        for turn in session.turns
    ]


def content_words(text: str, drop: frozenset[str] = frozenset()) -> list[str]:
    """The casefolded words of ``text`` a keyword search weighs: no stopword, number, single
    letter or word of ``drop`` (the speakers a question names)."""
    from harombe_core.ranking import STOPWORDS, WORDS

    words = (w.casefold() for w in WORDS.findall(text))
    return [
        w for w in words if w not in STOPWORDS and len(w) > 1 and not w.isdigit() and w not in drop
    ]


class SoftTerms:
    """Soft BM25 (not shipped; ``docs/ranking.md``): each content word of the question
    expanded with the conversation's words closest to it, and the turn scored by BM25 over
    the expansions.

    Static word vectors are distilled from the embedder (each word of the conversation
    embedded alone, once). A question word ``q`` matches a word ``w`` of the turn with weight
    1 when they share the index's (porter) stem, else with their cosine when it is at least
    ``threshold`` and ``w`` is among ``q``'s ``expansions`` closest words. A question word
    counts its best match (``weight * idf(w) * tf-saturation``, BM25 with ``k1``, ``b`` over
    the conversation's turns); the column is the sum, over the best of the candidates.
    ``replace`` subtracts the keyword side's own scaled BM25, so the column's weight moves
    that share of the fused score from FTS5's BM25 to the soft one.
    """

    def __init__(
        self,
        data: list[dict[str, Any]],
        questions: list[Any],
        embedder: Any,
        lr: Any,
        threshold: float = 0.6,
        expansions: int = 10,
        replace: float = 0.0,
        k1: float = 1.2,
        b: float = 0.75,
    ) -> None:
        from harombe_core.store.fts import index_terms

        self.threshold, self.expansions, self.replace = threshold, expansions, bool(replace)
        self.k1, self.b = k1, b
        docs = [[content_words(t[3]) for t in conversation_turns(s, lr)] for s in data]
        vocabulary = sorted(
            {w for d in docs for ws in d for w in ws}
            | {w for q in questions for w in content_words(q.text)}
        )
        vectors = np.asarray(embedder.embed(vocabulary), dtype=np.float32)
        self.vector = dict(zip(vocabulary, vectors, strict=True))
        self.stem = {w: index_terms(w) for w in vocabulary}
        self.conversations = []
        for turns in docs:
            df = Counter(w for ws in turns for w in set(ws))
            words = sorted(df)
            self.conversations.append(
                {
                    "words": words,
                    "index": {w: i for i, w in enumerate(words)},
                    "matrix": np.stack([self.vector[w] for w in words]),
                    "idf": np.array(
                        [math.log(1 + (len(turns) - df[w] + 0.5) / (df[w] + 0.5)) for w in words]
                    ),
                    "avgdl": sum(map(len, turns)) / len(turns),
                }
            )
        self._matches: dict[tuple[int, str], Any] = {}

    def _match(self, question: Any, speakers: frozenset[str]) -> Any:
        """The weight of each (question word, conversation word) match, or None."""
        key = (question.conversation, question.text)
        if key not in self._matches:
            conv = self.conversations[question.conversation]
            asked = list(dict.fromkeys(content_words(question.text, speakers)))
            weights = None
            if asked:
                sims = np.stack([self.vector[w] for w in asked]) @ conv["matrix"].T
                same = np.array(
                    [[self.stem[q] == self.stem[w] for w in conv["words"]] for q in asked]
                )
                weights = np.where(same, 1.0, np.where(sims >= self.threshold, sims, 0.0))
                if weights.shape[1] > self.expansions:
                    least = -np.sort(-weights, axis=1)[:, self.expansions - 1 : self.expansions]
                    weights = np.where(weights >= least, weights, 0.0)
            self._matches[key] = weights
        return self._matches[key]

    def __call__(self, question: Any, found: Any, messages: list[Any], table: Any) -> Any:
        conv = self.conversations[question.conversation]
        weights = self._match(question, found.speakers)
        column = np.zeros(len(messages))
        if weights is not None:
            for i, message in enumerate(messages):
                words = content_words(message.content)
                counts = Counter(conv["index"][w] for w in words if w in conv["index"])
                if not counts:
                    continue
                at = np.array(list(counts))
                tf = np.array(list(counts.values()), dtype=np.float64)
                norm = self.k1 * (1 - self.b + self.b * len(words) / conv["avgdl"])
                saturation = tf * (self.k1 + 1) / (tf + norm)
                column[i] = (weights[:, at] * (conv["idf"][at] * saturation)).max(axis=1).sum()
            column /= column.max() or 1.0
        if self.replace:
            best = max(found.keyword_score.values(), default=0.0) or 1.0
            column -= [found.keyword_score.get(int(m.id or 0), 0.0) / best for m in messages]
        return column


class TurnWalk:
    """A walk over the conversation's whole turn graph (not shipped; ``docs/ranking.md``):
    personalised PageRank seeded by the ``seeds`` best fused scores.

    Edges join the adjacent turns of a session (weight ``adjacent``) and each turn with its
    ``similar`` most similar turns of the same speaker whose cosine is at least
    ``threshold`` (weight the cosine). The walk restarts at the seeds with probability
    ``1 - damping``; ``spread`` keeps only what it spread beyond the restart. The column is
    the walk's score over the best of the candidates.
    """

    def __init__(
        self,
        data: list[dict[str, Any]],
        embedder: Any,
        lr: Any,
        damping: float = 0.5,
        seeds: int = 20,
        similar: int = 5,
        threshold: float = 0.5,
        adjacent: float = 1.0,
        spread: float = 0.0,
    ) -> None:
        self.damping, self.seeds, self.spread = damping, int(seeds), bool(spread)
        self.graphs = []
        for sample in data:
            turns = conversation_turns(sample, lr)
            vectors = np.asarray(embedder.embed([f"{t[1]}: {t[3]}" for t in turns]))
            n = len(turns)
            edges = np.zeros((n, n))
            for i in range(n - 1):
                if turns[i][0] == turns[i + 1][0]:
                    edges[i, i + 1] = edges[i + 1, i] = adjacent
            sims = vectors @ vectors.T
            speakers = np.array([t[1] for t in turns])
            sims = np.where(speakers[:, None] == speakers[None, :], sims, -1.0)
            np.fill_diagonal(sims, -1.0)
            for i in range(n):
                for j in np.argsort(-sims[i])[: int(similar)]:
                    if sims[i, j] >= threshold:
                        edges[i, j] = edges[j, i] = max(edges[i, j], sims[i, j])
            degree = edges.sum(axis=1, keepdims=True)
            steps = edges / np.where(degree > 0, degree, 1.0)
            ids = {t[2]: i for i, t in enumerate(turns)}
            self.graphs.append((steps, ids))

    def __call__(self, question: Any, found: Any, messages: list[Any], table: Any) -> Any:
        steps, ids = self.graphs[question.conversation]
        at = [ids.get(m.metadata.get("dia_id")) for m in messages]
        restart = np.zeros(len(steps))
        for i in np.argsort(-table[:, 0], kind="stable")[: self.seeds]:
            if at[i] is not None:
                restart[at[i]] += max(table[i, 0], 0.0)
        if not restart.any():
            return np.zeros(len(messages))
        restart /= restart.sum()
        score = restart.copy()
        for _ in range(15):
            score = (1 - self.damping) * restart + self.damping * (steps.T @ score)
        if self.spread:
            score -= (1 - self.damping) * restart
        column = np.array([0.0 if i is None else score[i] for i in at])
        return column / (column.max() or 1.0)


class TextKeys:
    """LLM-written texts as extra keys of the turns they describe (``docs/ranking.md``):
    LoCoMo's ``observation`` facts (each with the turns it came from: a stand-in for an LLM
    fact extractor's output) or its ``session_summary`` texts (a stand-in for an LLM
    summariser's; each keys every turn of its session).

    Each key is scored for the question as a turn is: its cosine (to the question, plus
    ``name_free`` times its cosine to the question without the speakers' names),
    min-max scaled over the ``pool`` best keys, and its BM25 (SQLite FTS5, porter, the
    keyword side's query words, names out) over the best, averaged. A turn's column is the
    best score of its keys (``mean``: their mean) over the best of the candidates.
    """

    def __init__(
        self,
        data: list[dict[str, Any]],
        embedder: Any,
        lr: Any,
        kind: str = "facts",
        name_free: float = 1.0,
        pool: float = 40,
        keyword: float = 1.0,
        vector: float = 1.0,
        mean: float = 0.0,
    ) -> None:
        import sqlite3

        self.embedder, self.name_free, self.pool = embedder, name_free, int(pool)
        self.keyword, self.vector, self.mean = keyword, vector, bool(mean)
        self.conversations = []
        for sample in data:
            keys: list[tuple[str, frozenset[str]]] = []
            if kind == "facts":
                keys = [
                    (text, frozenset(turns)) for text, turns in lr.observations(sample) if turns
                ]
            else:
                summaries = sample.get("session_summary") or {}
                for session in lr.sessions_of(sample, lr.Notes()):
                    text = summaries.get(f"session_{session.number}_summary")
                    if text:
                        keys.append((text, frozenset(t.dia_id for t in session.turns)))
            db = sqlite3.connect(":memory:")
            db.execute(
                "CREATE VIRTUAL TABLE keys USING fts5(text, tokenize = "
                "'porter unicode61 remove_diacritics 2')"
            )
            db.executemany(
                "INSERT INTO keys (rowid, text) VALUES (?, ?)",
                [(i, t) for i, (t, _) in enumerate(keys)],
            )
            vectors = np.asarray(embedder.embed([t for t, _ in keys]), dtype=np.float32)
            of_turn: dict[str, list[int]] = {}
            for i, (_, turns) in enumerate(keys):
                for turn in turns:
                    of_turn.setdefault(turn, []).append(i)
            self.conversations.append((db, vectors, of_turn))
        self._scores: dict[tuple[int, str], Any] = {}

    def _key_scores(self, question: Any, found: Any) -> Any:
        from harombe_core.ranking import without_names
        from harombe_core.retrieval import keyword_query
        from harombe_core.store.fts import fts_query, query_words

        cache = (question.conversation, question.text)
        if cache in self._scores:
            return self._scores[cache]
        db, vectors, _ = self.conversations[question.conversation]
        query = np.asarray(self.embedder.embed_query(question.text), dtype=np.float32)
        cos = vectors @ query
        free = without_names(question.text, found.speakers)
        if self.name_free and free and free != question.text:
            cos = cos + self.name_free * (vectors @ self.embedder.embed_query(free))
        best = np.sort(cos)[::-1][: self.pool]
        low, span = best[-1], (best[0] - best[-1]) or 1.0
        vector = np.clip((cos - low) / span, 0.0, None)
        bm25 = np.zeros(len(cos))
        words = [w for w in query_words(keyword_query(free or question.text))]
        match = fts_query(words)
        if match:
            rows = db.execute(
                "SELECT rowid, -bm25(keys) FROM keys WHERE keys MATCH ?", (match,)
            ).fetchall()
            for i, score in rows:
                bm25[i] = score
            bm25 /= bm25.max() or 1.0
        scores = (self.vector * vector + self.keyword * bm25) / (self.vector + self.keyword)
        self._scores[cache] = scores
        return scores

    def __call__(self, question: Any, found: Any, messages: list[Any], table: Any) -> Any:
        _, _, of_turn = self.conversations[question.conversation]
        scores = self._key_scores(question, found)
        column = np.zeros(len(messages))
        for i, m in enumerate(messages):
            keys = of_turn.get(m.metadata.get("dia_id"), [])
            if keys:
                column[i] = scores[keys].mean() if self.mean else scores[keys].max()
        return column


def turn_vectors(data: list[dict[str, Any]], embedder: Any, lr: Any) -> list[dict[str, Any]]:
    """Every turn's stored vector, by ``dia_id``, per conversation: the text the index embeds
    (``"Speaker: text"``, ``embed_context`` off), through the embedding cache, so the vectors
    are the ones the candidates' cosines were computed with."""
    out = []
    for sample in data:
        turns = conversation_turns(sample, lr)
        vectors = np.asarray(embedder.embed([f"{t[1]}: {t[3]}" for t in turns]), dtype=np.float32)
        out.append({t[2]: vectors[i] for i, t in enumerate(turns)})
    return out


class QueryMap:
    """A learned linear map of the query embedding (not shipped; ``docs/ranking.md``).

    ``W = I + A`` is trained on the other conversations' questions (leave one conversation
    out: a question is only ever scored with a map that never saw its conversation) so that
    ``W q`` lies nearer the question's evidence turns: a listwise softmax (temperature
    ``temperature``) of each evidence turn against every non-evidence turn of the
    conversation (all of them, so the candidates' hard negatives are among them), plus
    ``ridge`` times ``|A|^2`` (toward the identity). ``kind``: 0 full, 1 diagonal, r > 1 low
    rank ``U V^T`` of rank r. ``both`` maps the turns too (``W q . W d``); ``name_free``
    trains on the question without the speakers' names. The candidates' cosines (and their
    name-free cosines) become ``(1 - share) * cos(q, d) + share * cos(W q, d)``, each share a
    grid point.
    """

    def __init__(
        self,
        data: list[dict[str, Any]],
        questions: list[Any],
        found: list[dict[int, Any]],
        embedder: Any,
        lr: Any,
        kind: float = 16,
        ridge: float = 0.1,
        temperature: float = 0.05,
        steps: float = 200,
        lr_rate: float = 0.01,
        both: float = 0.0,
        name_free: float = 0.0,
        seed: float = 0,
    ) -> None:
        import torch

        from harombe_core.ranking import without_names

        torch.manual_seed(int(seed))
        torch.set_num_threads(1)  # small matrices: threads only spin on a shared machine
        self.both, self.embedder = bool(both), embedder
        self.turns = turn_vectors(data, embedder, lr)
        self.question_vector: list[Any] = []
        self.free_vector: list[Any] = []
        for qi, q in enumerate(questions):
            any_found = next(iter(found[qi].values()))
            vector = np.asarray(embedder.embed_query(q.text), dtype=np.float32)
            free = without_names(q.text, any_found.speakers)
            self.question_vector.append(vector)
            self.free_vector.append(
                np.asarray(embedder.embed_query(free), dtype=np.float32)
                if free and free != q.text
                else None
            )
        conversations = sorted({q.conversation for q in questions})
        self.maps: dict[int, Any] = {}
        dim = len(self.question_vector[0])
        for held in conversations:
            # One (question vector, turn matrix, evidence mask) per training question.
            batches = []
            for c in conversations:
                if c == held:
                    continue
                ids = sorted(self.turns[c])
                matrix = torch.tensor(np.stack([self.turns[c][i] for i in ids]))
                at = {d: n for n, d in enumerate(ids)}
                rows, masks = [], []
                for qi, q in enumerate(questions):
                    if q.conversation != c:
                        continue
                    vector = self.question_vector[qi]
                    if name_free and self.free_vector[qi] is not None:
                        vector = self.free_vector[qi]
                    mask = np.zeros(len(ids), dtype=bool)
                    mask[[at[e] for e in q.evidence if e in at]] = True
                    if mask.any():
                        rows.append(vector)
                        masks.append(mask)
                batches.append(
                    (matrix, torch.tensor(np.stack(rows)), torch.tensor(np.stack(masks)))
                )
            k = int(kind)
            if k == 0:
                params = [torch.zeros(dim, dim, requires_grad=True)]
            elif k == 1:
                params = [torch.zeros(dim, requires_grad=True)]
            else:
                params = [
                    (0.01 * torch.randn(dim, k)).requires_grad_(),
                    (0.01 * torch.randn(dim, k)).requires_grad_(),
                ]

            def delta(params: list[Any] = params, k: int = k) -> Any:
                if k == 0:
                    return params[0]
                if k == 1:
                    return torch.diag(params[0])
                return params[0] @ params[1].T

            optimiser = torch.optim.Adam(params, lr=lr_rate)
            eye = torch.eye(dim)
            for _ in range(int(steps)):
                optimiser.zero_grad()
                w = eye + delta()
                loss = torch.zeros(())
                count = 0
                for matrix, rows, masks in batches:
                    mq = torch.nn.functional.normalize(rows @ w.T, dim=1)
                    docs = matrix
                    if self.both:
                        docs = torch.nn.functional.normalize(matrix @ w.T, dim=1)
                    logits = mq @ docs.T / temperature  # [question, turn]
                    negatives = logits.masked_fill(masks, -torch.inf).logsumexp(dim=1, keepdim=True)
                    per = (torch.logaddexp(logits, negatives) - logits)[masks]
                    loss = loss + per.sum()
                    count += int(masks.sum())
                (loss / count + ridge * (delta() ** 2).sum()).backward()
                optimiser.step()
            with torch.no_grad():
                self.maps[held] = (eye + delta()).numpy().astype(np.float32)
        self._cache: dict[tuple[int, int], Any] = {}

    def variant(self, qi: int, question: Any, found: Any, share: float) -> Any:
        """``found`` with its cosines mixed toward the mapped query's (``share``)."""
        if share == 0:
            return found
        w = self.maps[question.conversation]
        turns = self.turns[question.conversation]

        def mapped(vector: Any) -> Any:
            m = w @ vector
            return m / (np.linalg.norm(m) or 1.0)

        q = mapped(self.question_vector[qi])
        free = self.free_vector[qi]
        qf = None if free is None else mapped(free)
        cosine, name_free = dict(found.cosine), dict(found.name_free_cosine)
        for mid, message in found.messages.items():
            d = turns.get(message.metadata.get("dia_id"))
            if d is None:
                continue
            if self.both:
                d = mapped(d)
            if mid in cosine:
                cosine[mid] = (1 - share) * cosine[mid] + share * float(q @ d)
            if mid in name_free and qf is not None:
                name_free[mid] = (1 - share) * name_free[mid] + share * float(qf @ d)
        return replace(found, cosine=cosine, name_free_cosine=name_free)

    def coverage(self, questions: list[Any], pool: int) -> tuple[float, float]:
        """Recall of the plain and the mapped query's ``pool`` nearest turns (the vector
        side's pool, as the index would return it)."""
        plain, mapped = [], []
        for qi, q in enumerate(questions):
            turns = self.turns[q.conversation]
            ids = list(turns)
            matrix = np.stack([turns[i] for i in ids])
            w = self.maps[q.conversation]
            v = self.question_vector[qi]
            docs = matrix
            if self.both:
                docs = matrix @ w.T
                docs /= np.linalg.norm(docs, axis=1, keepdims=True)
            for vec, out, dm in ((v, plain, matrix), (w @ v, mapped, docs)):
                top = np.argsort(-(dm @ vec))[:pool]
                got = {ids[i] for i in top}
                out.append(len(q.evidence & got) / len(q.evidence))
        return 100 * float(np.mean(plain)), 100 * float(np.mean(mapped))


class LateInteraction:
    """ColBERT-style MaxSim over MiniLM's token vectors (not shipped; ``docs/ranking.md``).

    The question's content tokens (its words without stopwords or the speakers' names, as
    wordpieces) each take their best cosine to a token of the turn (the turn's text without
    the speaker's name), from the model's last hidden state before pooling; the column is
    their mean, min-max scaled over the candidates. ``replace`` subtracts the scaled
    cosine of the fused score's vector side, so the weight moves a share of it to MaxSim.
    """

    def __init__(
        self, data: list[dict[str, Any]], questions: list[Any], lr: Any, replace: float = 0.0
    ) -> None:
        from sentence_transformers import SentenceTransformer

        from harombe_core.embeddings.sentence_transformers import bundled_model_path

        self.replace = bool(replace)
        self.model = SentenceTransformer(str(bundled_model_path()), device="cpu")
        self.tokenizer = self.model.tokenizer
        self.turns: list[dict[str, Any]] = []
        for sample in data:
            turns = conversation_turns(sample, lr)
            texts = [t[3] for t in turns]
            tokens = self._tokens(texts)
            self.turns.append({t[2]: tokens[i] for i, t in enumerate(turns)})
        self._queries: dict[str, Any] = {}

    def _tokens(self, texts: list[str]) -> list[Any]:
        """Each text's normalised token vectors, [CLS], [SEP] and padding out."""
        out = self.model.encode(
            texts, output_value="token_embeddings", batch_size=64, convert_to_numpy=False
        )
        result = []
        for vectors in out:
            v = vectors.numpy()[1:-1] if len(vectors) > 2 else vectors.numpy()
            result.append(v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-9))
        return result

    def _query(self, text: str, speakers: frozenset[str]) -> Any:
        if text not in self._queries:
            from harombe_core.ranking import STOPWORDS, WORDS

            vectors = self.model.encode(
                [text], output_value="token_embeddings", convert_to_numpy=False
            )[0].numpy()
            encoding = self.tokenizer(text)
            keep = []
            for position, word in enumerate(encoding.word_ids()):
                if word is None:
                    continue
                start, end = encoding.word_to_chars(word)
                w = text[start:end].casefold()
                if WORDS.fullmatch(w) and w not in STOPWORDS and w not in speakers and len(w) > 1:
                    keep.append(position)
            v = vectors[keep] if keep else vectors[1:-1]
            self._queries[text] = v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-9)
        return self._queries[text]

    def __call__(self, question: Any, found: Any, messages: list[Any], table: Any) -> Any:
        q = self._query(question.text, found.speakers)
        turns = self.turns[question.conversation]
        column = np.zeros(len(messages))
        for i, m in enumerate(messages):
            d = turns.get(m.metadata.get("dia_id"))
            if d is not None and len(d):
                column[i] = float((q @ d.T).max(axis=1).mean())
        pooled = column[column > 0]
        if len(pooled):
            low, high = pooled.min(), pooled.max()
            column = np.clip((column - low) / ((high - low) or 1.0), 0.0, None)
        if self.replace:
            cos = np.array([found.cosine.get(int(m.id or 0), np.nan) for m in messages])
            ok = ~np.isnan(cos)
            if ok.any():
                low, high = cos[ok].min(), cos[ok].max()
                column -= np.where(ok, (cos - low) / ((high - low) or 1.0), 0.0)
        return column


def parse_options(items: list[str]) -> dict[str, float]:
    """``NAME=V`` options (``--column-option``, ``--map-option``) as keyword arguments."""
    options: dict[str, float] = {}
    for item in items:
        name, _, value = item.partition("=")
        options[name] = float(value)
    return options


def extra_column(args: argparse.Namespace, lr: Any, questions: list[Any]) -> Any:
    """The ``--column`` to measure, built over the conversations (None without one)."""
    if args.column is None:
        return None
    from harombe_core.embeddings import resolve_embedder

    options = parse_options(args.column_option)
    data = lr.read_data(args.data)
    embedder = lr.DiskCachedEmbedder(resolve_embedder("default"), args.cache)
    if args.column == "soft":
        return SoftTerms(data, questions, embedder, lr, **options)
    if args.column in ("facts", "summaries"):
        return TextKeys(data, embedder, lr, kind=args.column, **options)
    if args.column == "late":
        return LateInteraction(data, questions, lr, **options)
    return TurnWalk(data, embedder, lr, **options)


def gather(args: argparse.Namespace, lr: Any) -> None:
    """Ingest the conversations and pickle every question's candidates at every pool."""
    from harombe_core.store.base import SearchScope

    data = lr.read_data(args.data)
    questions = lr.questions_of(data)
    args.embedding, args.no_cache = "default", False
    with tempfile.TemporaryDirectory() as folder:
        mm = lr.open_manager(args, str(Path(folder) / "locomo.db"), False)
        try:
            lr.ingest_all(mm, data, True, "observations" if args.facts else None)
            retriever = mm.retriever
            base = retriever.settings
            every = replace(base, time_weight=1.0, neighbor_weight=1.0)
            if args.facts:
                every = replace(every, fact_weight=1.0)
            sizes = sorted(set(pools(args.k, base.candidates, base.min_candidates).values()))
            found = []
            for n, q in enumerate(questions):
                if n % 200 == 0:
                    print(f"  gather: question {n} of {len(questions)}", file=sys.stderr)
                scope = SearchScope(user_id=q.user)
                found.append(
                    {
                        size: retriever.gather(
                            q.text, size // base.candidates, scope, every, neighbors=True
                        )
                        for size in sizes
                    }
                )
        finally:
            mm.close()
    with args.candidates.open("wb") as out:
        pickle.dump({"questions": questions, "found": found, "settings": base}, out)
    print(f"candidates of {len(questions)} questions in {args.candidates}")


def parse_sets(items: list[str]) -> dict[str, tuple[float, ...]]:
    """``name=v1,v2`` options as grid entries (names checked against the settings)."""
    from harombe_core.ranking import RetrievalSettings

    known = {f.name for f in fields(RetrievalSettings)}
    out: dict[str, tuple[float, ...]] = {}
    for item in items:
        name, _, values = item.partition("=")
        if name not in known or not values:
            raise SystemExit(f"--set {item!r}: expected NAME=V1,V2 with a RetrievalSettings name")
        out[name] = tuple(float(v) for v in values.split(","))
    return out


def query_map(args: argparse.Namespace, lr: Any, questions: list[Any], found: Any) -> Any:
    """The ``--map`` to measure, trained per held-out conversation (None without one)."""
    if not args.map:
        return None
    from harombe_core.embeddings import resolve_embedder

    options = parse_options(args.map_option)
    data = lr.read_data(args.data)
    embedder = lr.DiskCachedEmbedder(resolve_embedder("default"), args.cache)
    started = time.perf_counter()
    mapping = QueryMap(data, questions, found, embedder, lr, **options)
    plain, mapped = mapping.coverage(questions, 40)
    print(
        f"query map trained in {time.perf_counter() - started:.0f} s; recall of the 40 nearest "
        f"turns: plain query {plain:.1f}, mapped {mapped:.1f}"
    )
    return mapping


def rank_grid(args: argparse.Namespace, lr: Any) -> None:
    """Leave-one-conversation-out recall of the grid over the pickled candidates."""
    from harombe_core.ranking import evidence, evidence_weights

    with args.candidates.open("rb") as source:
        saved = pickle.load(source)  # a file this script wrote on this machine
    questions, found, base = saved["questions"], saved["found"], saved["settings"]
    sets = parse_sets(args.set)
    grid = {**GRID, **sets}
    grid_sets = {*GRID, *sets}  # the settings' names (the column's weight is not one)
    column = extra_column(args, lr, questions)
    mapping = query_map(args, lr, questions, found)
    shares = tuple(args.map_shares) if mapping is not None else (0.0,)
    grid["map_share"] = shares
    if column is not None:
        grid[f"{args.column}_weight"] = tuple(args.column_weights)
    names = list(grid)
    points = [dict(zip(names, p, strict=True)) for p in itertools.product(*grid.values())]
    settings = [replace(base, **{n: v for n, v in p.items() if n in grid_sets}) for p in points]
    weights = np.stack([evidence_weights(s) for s in settings], axis=1)  # [column, point]
    if column is not None:
        weights = np.vstack([weights, [p[names[-1]] for p in points]])
    # Points that share the fusion weights and whether neighbours are candidates share one
    # evidence table (as in locomo_recall.grid_scores).
    groups: dict[tuple[float, ...], list[int]] = {}
    for n, s in enumerate(settings):
        key = (
            s.vector_weight,
            s.keyword_weight,
            float(s.neighbor_weight > 0),
            s.name_free_weight,
            points[n]["map_share"],
        )
        groups.setdefault(key, []).append(n)
    ks = args.k
    pool_of = pools(ks, base.candidates, base.min_candidates)
    recall_at = np.zeros((len(points), len(questions), len(ks)))
    started = time.perf_counter()
    for qi, q in enumerate(questions):
        for size, gathered in found[qi].items():
            wanted = [k for k in ks if pool_of[k] == size]
            for key, members in groups.items():
                candidates = gathered
                if mapping is not None:
                    candidates = mapping.variant(qi, q, gathered, key[-1])
                messages, table = evidence(candidates, settings[members[0]])
                if not messages:
                    continue
                if column is not None:
                    table = np.column_stack([table, column(q, candidates, messages, table)])
                ids, _, found_at = lr.ranked_hits(messages, table, weights[:, members], q)
                for k in wanted:
                    got = found_at[:, min(k, len(ids)) - 1]
                    recall_at[members, qi, ks.index(k)] = got / len(q.evidence)
    results = {tuple(p.values()): recall_at[n] for n, p in enumerate(points)}
    scores, chosen, overall = lr.cross_validate(results, questions, ks)
    took = time.perf_counter() - started
    print(f"cross-validated recall@k (%), {len(points)} settings ({took:.0f} s)")
    print("\n".join(lr.table(lr.by_category(scores, questions, ks), ks)))
    extra = [*([names[-1]] if column is not None else []), *(["map_share"] if mapping else [])]
    for option in [*sets, *extra]:
        n = names.index(option)
        picks = ", ".join(str(point[n]) for point in chosen)
        print(f"{option} chosen per held-out conversation: {picks}")
    print("chosen on all: " + ", ".join(f"{n}={v}" for n, v in zip(names, overall, strict=True)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True, type=Path, help="locomo JSON file")
    parser.add_argument("--k", type=int, nargs="+", default=[5, 10, 25, 50])
    parser.add_argument("--gather", action="store_true", help="ingest and pickle the candidates")
    parser.add_argument(
        "--facts",
        action="store_true",
        help="with --gather: LoCoMo's observations extracted as facts through the LLM "
        "extractor (locomo_recall.ObservationModel), read as keys (then --set fact_weight=...)",
    )
    parser.add_argument(
        "--candidates",
        type=Path,
        default=Path(tempfile.gettempdir()) / "harombe-locomo-candidates.pkl",
        help="the pickle of gathered candidates (default: in the temporary folder)",
    )
    parser.add_argument(
        "--cache",
        type=Path,
        default=Path(tempfile.gettempdir()) / "harombe-locomo-embeddings.sqlite",
        help="embedding cache file (shared with locomo_recall.py)",
    )
    parser.add_argument(
        "--set", action="append", default=[], help="NAME=V1,V2: a weight's values in the grid"
    )
    parser.add_argument(
        "--column",
        choices=("soft", "walk", "facts", "summaries", "late"),
        default=None,
        help="a measured, unshipped column beside the shipped ones: soft BM25, a turn walk, "
        "LLM-written keys, or late interaction (MaxSim over token vectors)",
    )
    parser.add_argument(
        "--column-option",
        action="append",
        default=[],
        help="NAME=V: an option of --column (soft: threshold, expansions, replace, k1, b; "
        "walk: damping, seeds, similar, threshold, adjacent, spread)",
    )
    parser.add_argument(
        "--column-weights",
        type=lambda text: [float(v) for v in text.split(",")],
        default=[0.0, 0.1, 0.2, 0.4, 0.8],
        help="V1,V2,...: the --column weights in the grid",
    )
    parser.add_argument(
        "--map",
        action="store_true",
        help="a learned linear map of the query embedding, trained per held-out conversation "
        "(QueryMap), its cosine mixed into the candidates' by --map-shares",
    )
    parser.add_argument(
        "--map-option",
        action="append",
        default=[],
        help="NAME=V: an option of --map (kind, ridge, temperature, steps, lr_rate, both, "
        "name_free, seed)",
    )
    parser.add_argument(
        "--map-shares",
        type=lambda text: [float(v) for v in text.split(",")],
        default=[0.0, 0.25, 0.5, 0.75, 1.0],
        help="V1,V2,...: the mapped query's share of the cosine in the grid",
    )
    args = parser.parse_args(argv)
    args.k = sorted(args.k)
    lr = _locomo()
    if args.gather or not args.candidates.exists():
        gather(args, lr)
    rank_grid(args, lr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
