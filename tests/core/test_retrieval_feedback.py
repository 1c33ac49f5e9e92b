"""Pseudo-relevance feedback on the vector side: the query's vector moves toward its best
matches, so a turn worded like them climbs, while the scores users read stay the cosine to
the query itself."""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
import pytest

from harombe_core.config import MemoryConfig, load_config
from harombe_core.errors import ConfigError, InvalidInputError
from harombe_core.manager import MemoryManager
from harombe_core.models import Message
from harombe_core.ranking import Candidates, RetrievalSettings, feedback_cosines, rank
from harombe_core.store.base import SearchScope

WHEN = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)


def _unit(*values: float) -> np.ndarray:
    vector = np.array(values, dtype=np.float64)
    return vector / np.linalg.norm(vector)


def _candidates() -> Candidates:
    """Three turns: the best match on both sides (1), one near the query only (2) and one
    near the best match but farther from the query (3)."""
    query = _unit(1, 0, 0)
    vectors = {1: _unit(0.8, 0.6, 0), 2: _unit(0.55, 0, 0.835), 3: _unit(0.45, 0.89, 0)}
    found = Candidates(query_vector=query, vectors=vectors)
    for mid, vector in vectors.items():
        found.messages[mid] = Message(
            role="user", content=f"turn {mid}", id=mid, session_id=f"s{mid}", created_at=WHEN
        )
        found.cosine[mid] = float(vector @ query)
    found.keyword_score = {1: 4.0}
    found.vector_rank = {
        m: r for r, m in enumerate(sorted(vectors, key=lambda m: -found.cosine[m]))
    }
    found.keyword_rank = {1: 0}
    found.pooled = frozenset(vectors)
    return found


def _order(found: Candidates, feedback: float, fusion: str = "score") -> list[int]:
    settings = RetrievalSettings(
        feedback_weight=feedback,
        feedback_docs=1,
        fusion=fusion,
        neighbor_weight=0.0,
        session_weight=0.0,
    )
    return [int(h.message.id or 0) for h in rank(found, settings)]


def test_feedback_lifts_the_turn_that_resembles_the_best_match() -> None:
    found = _candidates()
    assert _order(found, 0.0) == [1, 2, 3]  # by cosine to the query, 2 beats 3
    assert _order(found, 1.0) == [1, 3, 2]  # moved toward turn 1, 3 beats 2
    assert _order(found, 0.0, "rrf") == [1, 2, 3]
    assert _order(found, 1.0, "rrf") == [1, 3, 2]


def test_feedback_cosines_are_the_cosines_to_the_moved_query() -> None:
    found = _candidates()
    moved = _unit(*(found.query_vector + 0.5 * found.vectors[1]))
    cosine = feedback_cosines(found, lambda m: found.keyword_score.get(m, 0.0), 0.5, 1)
    for mid, vector in found.vectors.items():
        assert cosine[mid] == pytest.approx(float(vector @ moved))
    # The candidates' own cosines (what hits report as vector_score) are left alone.
    assert found.cosine[2] == pytest.approx(0.55 / np.linalg.norm([0.55, 0, 0.835]))


def test_vector_score_stays_the_cosine_to_the_query() -> None:
    found = _candidates()
    hits = rank(found, RetrievalSettings(feedback_weight=1.0, feedback_docs=1))
    assert {int(h.message.id or 0): h.vector_score for h in hits} == found.cosine


def test_without_vectors_feedback_changes_nothing() -> None:
    found = _candidates()
    found.vectors = {}
    assert _order(found, 1.0) == _order(found, 0.0) == [1, 2, 3]


def test_search_reads_the_vectors_feedback_needs_and_takes_the_option() -> None:
    with MemoryManager(":memory:") as mm:
        sid = mm.create_session(user_id="u")
        mm.save_messages(
            sid,
            [
                Message(role="user", content="We adopted a kitten called Miso last week."),
                Message(role="user", content="Miso sleeps on the radiator all afternoon."),
                Message(role="user", content="The quarterly report is due on Friday."),
            ],
        )
        mm.flush()
        settings = RetrievalSettings(feedback_weight=1.0)
        found = mm.retriever.gather("my cat", 5, SearchScope(user_id="u"), settings)
        assert set(found.vectors) == set(found.messages)
        off = mm.retriever.gather(
            "my cat", 5, SearchScope(user_id="u"), RetrievalSettings(feedback_weight=0)
        )
        assert off.vectors == {}
        with_feedback = mm.search_similar("my cat", top_k=3, user_id="u", feedback_weight=1.0)
        assert len(with_feedback) == 3
        for bad in (-0.5, float("nan"), "1"):
            with pytest.raises(InvalidInputError, match="feedback_weight"):
                mm.search("my cat", user_id="u", feedback_weight=bad)


def test_feedback_is_configured_under_rag() -> None:
    config = MemoryConfig.model_validate({"rag": {"feedback_weight": 0.5, "feedback_docs": 5}})
    settings = RetrievalSettings.from_config(config.rag)
    assert (settings.feedback_weight, settings.feedback_docs) == (0.5, 5)
    with pytest.raises(ConfigError, match="feedback_docs"):
        load_config({"rag": {"feedback_docs": 0}})
    with pytest.raises(ConfigError, match="feedback_weight"):
        load_config({"rag": {"feedback_weight": -1}})
