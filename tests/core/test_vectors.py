"""The VectorIndex protocol on real ChromaDB (in memory and on disk) and the in-memory double."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from harombe_core.errors import InvalidInputError, StoreError
from harombe_core.testing import InMemoryVectorIndex
from harombe_core.vectors.base import VectorIndex, matches_where
from harombe_core.vectors.chroma import ChromaVectorIndex, chroma_where


def _unit(rng: np.random.Generator, n: int, dim: int = 16) -> np.ndarray:
    v = rng.normal(size=(n, dim)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def _meta(i: int) -> dict[str, object]:
    return {
        "message_id": i,
        "session_id": f"s{i % 3}",
        "user_id": f"u{i % 2}",
        "role": "user" if i % 2 == 0 else "assistant",
        "created_at": 1_000 * i,
    }


@pytest.fixture(params=["chroma-memory", "chroma-disk", "in-memory"])
def index(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[VectorIndex]:
    if request.param == "chroma-memory":
        ix: VectorIndex = ChromaVectorIndex(mode="memory")
    elif request.param == "chroma-disk":
        ix = ChromaVectorIndex(mode="persistent", path=str(tmp_path / "db.chroma"))
    else:
        ix = InMemoryVectorIndex()
    yield ix
    ix.close()


def test_implements_protocol(index: VectorIndex) -> None:
    assert isinstance(index, VectorIndex)


def test_nearest_is_the_vector_itself_with_cosine_one(index: VectorIndex) -> None:
    vectors = _unit(np.random.default_rng(0), 30)
    index.upsert(list(range(1, 31)), vectors, [_meta(i) for i in range(1, 31)])
    matches = index.query(vectors[6], 3)
    assert matches[0].message_id == 7
    assert matches[0].similarity == pytest.approx(1.0, abs=1e-4)
    assert matches[0].similarity >= matches[1].similarity >= matches[2].similarity


def test_a_batch_that_does_not_line_up_is_refused_and_writes_nothing(index: VectorIndex) -> None:
    vectors = _unit(np.random.default_rng(2), 4)
    with pytest.raises(InvalidInputError, match="one vector per id"):
        index.upsert([1, 2, 3], vectors, [_meta(i) for i in (1, 2, 3)])
    with pytest.raises(InvalidInputError, match="one vector per id"):
        index.upsert([1], vectors[0], [_meta(1)])  # a single row, not a matrix
    with pytest.raises(InvalidInputError, match="one metadata mapping per id"):
        index.upsert([1, 2, 3, 4], vectors, [_meta(1)])
    assert index.count() == 0
    index.upsert([], np.zeros((0, 16), dtype=np.float32), [])
    assert index.count() == 0


def test_upsert_is_idempotent(index: VectorIndex) -> None:
    vectors = _unit(np.random.default_rng(1), 10)
    for _ in range(3):
        index.upsert(list(range(10)), vectors, [_meta(i) for i in range(10)])
    assert index.count() == 10
    replacement = _unit(np.random.default_rng(2), 1)
    index.upsert([4], replacement, [_meta(4)])
    assert index.count() == 10
    assert index.query(replacement[0], 1)[0].message_id == 4


def test_where_filters_by_metadata(index: VectorIndex) -> None:
    vectors = _unit(np.random.default_rng(3), 30)
    index.upsert(list(range(30)), vectors, [_meta(i) for i in range(30)])
    found = index.query(vectors[0], 30, {"session_id": "s1"})
    assert found
    assert all(m.message_id % 3 == 1 for m in found)
    found = index.query(vectors[0], 30, {"user_id": "u0", "role": {"$in": ["user"]}})
    assert found
    assert all(m.message_id % 2 == 0 for m in found)
    found = index.query(vectors[0], 30, {"created_at": {"$gte": 5_000, "$lte": 9_000}})
    assert sorted(m.message_id for m in found) == [5, 6, 7, 8, 9]


def test_delete_delete_where_clear_and_get(index: VectorIndex) -> None:
    vectors = _unit(np.random.default_rng(4), 12)
    index.upsert(list(range(12)), vectors, [_meta(i) for i in range(12)])
    index.delete([0, 1])
    assert index.count() == 10
    index.delete_where({"session_id": "s2"})
    assert index.count() == 10 - len([i for i in range(2, 12) if i % 3 == 2])
    got = index.get_vectors([3, 999])
    assert list(got) == [3]
    np.testing.assert_allclose(got[3], vectors[3], atol=1e-5)
    index.clear()
    assert index.count() == 0
    assert index.query(vectors[0], 5) == []


def test_persistent_chroma_survives_reopen(tmp_path: Path) -> None:
    vectors = _unit(np.random.default_rng(5), 5)
    first = ChromaVectorIndex(mode="persistent", path=str(tmp_path / "c"))
    first.upsert(list(range(5)), vectors, [_meta(i) for i in range(5)])
    first.close()
    again = ChromaVectorIndex(mode="persistent", path=str(tmp_path / "c"))
    assert again.count() == 5
    assert again.query(vectors[2], 1)[0].message_id == 2


def test_in_memory_chroma_indexes_are_private() -> None:
    a, b = ChromaVectorIndex(mode="memory"), ChromaVectorIndex(mode="memory")
    a.upsert([1], _unit(np.random.default_rng(6), 1), [_meta(1)])
    assert (a.count(), b.count()) == (1, 0)
    a.close()
    b.close()


def test_bad_mode_is_a_typed_error() -> None:
    with pytest.raises(StoreError, match="persistent, memory or http"):
        ChromaVectorIndex(mode="cloud")


def test_where_translation() -> None:
    assert chroma_where(None) is None
    assert chroma_where({"session_id": "s"}) == {"session_id": "s"}
    assert chroma_where({"user_id": "u", "created_at": {"$gte": 1, "$lte": 2}}) == {
        "$and": [{"user_id": "u"}, {"created_at": {"$gte": 1}}, {"created_at": {"$lte": 2}}]
    }
    assert matches_where({"role": "user"}, {"role": {"$in": ["user", "tool"]}})
    assert not matches_where({"created_at": 5}, {"created_at": {"$gte": 6}})


def test_ids_lists_what_the_index_holds(index: VectorIndex) -> None:
    vectors = _unit(np.random.default_rng(7), 6)
    index.upsert(list(range(6)), vectors, [_meta(i) for i in range(6)])
    index.delete([2])
    assert sorted(index.ids()) == [0, 1, 3, 4, 5]  # type: ignore[attr-defined]


def test_chroma_errors_reach_callers_typed(tmp_path: Path) -> None:
    from harombe_core.errors import InvalidInputError, VectorIndexError

    ix = ChromaVectorIndex(mode="persistent", path=str(tmp_path / "c"))
    vectors = _unit(np.random.default_rng(8), 2)
    ix.upsert([1, 2], vectors, [_meta(1), _meta(2)])
    with pytest.raises(InvalidInputError, match="refused to query"):
        ix.query(vectors[0], 2, {"role": {"$in": [None]}})
    ix._client.delete_collection(ix._collection_name)  # deleted under this client
    assert ix.count() == 0  # reopened, not an error
    ix._client.close()  # Chroma's backend stopped under the index
    with pytest.raises(VectorIndexError, match="harombe reindex"):
        ix.query(vectors[0], 2)
    ix.close()
