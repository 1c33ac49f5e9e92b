"""benchmarks/threading.py measures what it names: exchanges, interleaving, attachment accuracy.

Runs on a small LoCoMo-shaped file written here (no LoCoMo data in the tests).
"""

from __future__ import annotations

import importlib.util
import json
import random
from pathlib import Path
from types import ModuleType

import pytest

from harombe_core.chat_memory import ChatMemory
from harombe_core.threads import LinearNodeSelector

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    # Loaded under another name: the file is called like the standard library's threading.
    spec = importlib.util.spec_from_file_location(
        "threading_benchmark", ROOT / "benchmarks" / "threading.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


TOPICS = {
    "c1": ("Alice", "Bob", "garden", ["tomatoes", "roses", "compost", "seeds", "watering"]),
    "c2": ("Carol", "Dave", "guitar", ["chords", "strings", "songs", "amps", "frets"]),
    "c3": ("Erin", "Frank", "hiking", ["trails", "boots", "summits", "maps", "tents"]),
}


def _conversation(sample_id: str) -> dict:
    a, b, topic, things = TOPICS[sample_id]
    turns = []
    for n, thing in enumerate(things):
        turns.append({"speaker": a, "dia_id": f"D1:{2 * n + 1}", "text": f"Hey {b}, my {topic} "
                      f"{thing} are doing well!"})
        turns.append({"speaker": b, "dia_id": f"D1:{2 * n + 2}", "text": f"Great {a[:3]}! Tell "
                      f"me more about the {topic} {thing}."})
    # a speaker who talks twice in a row is one message
    turns.append({"speaker": a, "dia_id": "D1:11", "text": f"One more {topic} story."})
    turns.append({"speaker": a, "dia_id": "D1:12", "text": "And another."})
    turns.append({"speaker": b, "dia_id": "D1:13", "text": f"Love your {topic} stories."})
    return {"sample_id": sample_id, "conversation": {"speaker_a": a, "speaker_b": b,
                                                     "session_1": turns}, "qa": []}


@pytest.fixture
def data_file(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps([_conversation(c) for c in TOPICS]))
    return path


def test_exchanges_are_pairs_without_speaker_names(bench: ModuleType, data_file: Path) -> None:
    conversations = bench.load_conversations(str(data_file))
    assert sorted(conversations) == ["c1", "c2", "c3"]
    first = conversations["c1"]
    assert len(first) == 6
    assert first[0].human == "Hey my garden tomatoes are doing well!"
    assert first[0].assistant == "Great Tell me more about the garden tomatoes."
    assert first[-1].human == "One more garden story. And another."
    for exchanges in conversations.values():
        for e in exchanges:
            for name in ("Alice", "Bob", "Carol", "Dave", "Erin", "Frank", "Ali", "Car"):
                assert name not in e.human + e.assistant


def test_sessions_interleave_different_conversations_in_order(
    bench: ModuleType, data_file: Path
) -> None:
    conversations = bench.load_conversations(str(data_file))
    sessions = bench.build_sessions(
        conversations, sessions=4, per_session=3, max_exchanges=0, rng=random.Random(1)
    )
    for order in sessions:
        assert len(order) == 18
        for cid, exchanges in conversations.items():
            assert [e for e in order if e.source == cid] == exchanges
        assert order != sorted(order, key=lambda e: e.source)  # really interleaved


def test_attachment_accuracy_counts_parents_from_the_same_conversation(
    bench: ModuleType,
) -> None:
    ex = bench.Exchange
    order = [ex("A", "a1", "x"), ex("B", "b1", "x"), ex("A", "a2", "x"), ex("A", "a3", "x"),
             ex("B", "b2", "x")]
    memory = ChatMemory.threaded(LinearNodeSelector())
    for e in order:
        memory.append(e.human, e.assistant)
    # linear: b1 under a1 (B was new: wrong), a2 under b1 (wrong), a3 under a2 (right),
    # b2 under a3 (wrong); the first node is not scored
    assert bench.attachment_accuracy(memory, order) == (1, 4)
    memory.close()


def test_the_benchmark_prints_every_selector(
    bench: ModuleType, data_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert bench.main(["--data", str(data_file), "--sessions", "2", "--seed", "3"]) == 0
    out = capsys.readouterr().out
    assert "2 sessions x 3 interleaved conversations, 36 exchanges, seed 3" in out
    for name in ("linear", "nearest", "nearest-any", "embedding"):
        line = next(row for row in out.splitlines() if row.strip().startswith(f"{name}:"))
        accuracy = float(line.split("attachment accuracy")[1].split("%")[0])
        assert 0.0 <= accuracy <= 100.0
    # three conversations on three different topics: the embedding selector keeps them apart
    embedding = next(row for row in out.splitlines() if row.strip().startswith("embedding:"))
    assert float(embedding.split("attachment accuracy")[1].split("%")[0]) >= 80.0
