"""What a user sees when they print harombe objects in a REPL or a log line."""

from __future__ import annotations

from pathlib import Path

from harombe_core import MemoryManager, Message
from harombe_core.models import Session
from harombe_core.testing import FakeEmbedder, InMemoryVectorIndex


def _ended(path: str) -> MemoryManager:
    mm = MemoryManager(
        path, embedding=FakeEmbedder(dimension=384), vector_store=InMemoryVectorIndex()
    )
    mm.save_messages(
        "trip",
        [
            Message(role="user", content="We fly to Lisbon on May 3rd and stay four nights."),
            Message(role="assistant", content="Noted: Lisbon, May 3rd to 7th."),
        ],
        user_id="ann",
    )
    mm.end_session("trip")
    return mm


def test_a_summarised_session_prints_without_its_embedding(tmp_path: Path) -> None:
    with _ended(str(tmp_path / "m.db")) as mm:
        session = mm.get_session("trip")
        assert session is not None
        vector = (session.summary_data or {})["embedding"]["vector"]
        assert len(vector) == 384  # the embedding is stored and returned...
        for shown in (repr(session), str(session), repr(mm.list_sessions())):
            assert "<384 floats>" in shown  # ...but printed as its size
            assert repr(vector[0]) not in shown
            assert len(shown) < 1_500
        assert "summary_data={" in repr(session)
        assert "id='trip'" in repr(session)
        assert "user_id='ann'" in repr(session)
        assert session.summary is not None
        assert repr(session.summary) in repr(session)


def test_session_repr_keeps_summary_data_that_has_no_vector() -> None:
    data = {"summary": "s", "embedding": {"model": "m"}}
    assert "'embedding': {'model': 'm'}" in repr(Session(id="x", summary_data=data))
    assert "summary_data=None" in repr(Session(id="y"))


def test_manager_repr_says_where_and_whether_semantic(tmp_path: Path) -> None:
    path = str(tmp_path / "m.db")
    with MemoryManager(path, embedding=None, max_history_tokens=1000) as plain:
        assert repr(plain) == f"MemoryManager({path!r}, semantic=off, max_history_tokens=1000)"
    assert repr(plain).endswith(", closed)")  # still printable once closed
    with MemoryManager(
        str(tmp_path / "s.db"), embedding=FakeEmbedder(), vector_store="chroma"
    ) as semantic:
        shown = repr(semantic)
    assert "semantic=on" in shown
    assert f"embedding={FakeEmbedder().name!r}" in shown
    assert "vector_store='chroma " in shown
    assert repr(MemoryManager(":memory:", embedding=None)).startswith("MemoryManager(':memory:'")
