"""benchmarks/locomo_recall.py runs on any file of LoCoMo's shape, and says what it skipped.

The public release has gaps and malformed ids that the development split happens not to show
(a session number missing, dates missing or in other formats, photo-only turns, evidence such
as "D:11:26", "D30:05" or naming no turn, questions without ``answer``, categories as text).
The conversations here are crafted in the test; no LoCoMo data is used.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def lr() -> Iterator[ModuleType]:
    spec = importlib.util.spec_from_file_location(
        "locomo_recall", ROOT / "benchmarks" / "locomo_recall.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["locomo_recall"] = module  # its dataclasses look their module up
    path = list(sys.path)
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path[:] = path  # the script trims its own folder from sys.path
    yield module
    sys.modules.pop("locomo_recall", None)


def turn(dia_id: str | None, speaker: str, text: str | None, **extra: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"speaker": speaker, **extra}
    if dia_id is not None:
        out["dia_id"] = dia_id
    if text is not None:
        out["text"] = text
    return out


def conversation() -> dict[str, Any]:
    conv: dict[str, Any] = {
        "speaker_a": "Ann",
        "speaker_b": "Bo",
        "session_1_date_time": "1:56 pm on 8 May, 2023",
        "session_1": [
            turn("D1:1", "Ann", "I adopted a puppy named Biscuit last weekend"),
            # A photo and no text, as the public release has them.
            turn(
                "D1:2",
                "Bo",
                None,
                img_url=["https://example.com/k.jpg"],
                blip_caption="a red kayak",
            ),
        ],
        # session_2 is missing: its date is there, its turns are not.
        "session_2_date_time": "3:00 pm on 9 May, 2023",
        "session_3_date_time": "2023/05/20 (Sat) 02:21",
        "session_3": [
            turn("D3:1", "Ann", "My sister moved to Lisbon for a design job"),
            turn("D3:2", "Bo", "Lisbon has great tiles and pastries"),
            turn("D3:3", "Ann", "She sends photos of the trams"),
            turn("D3:4", "Bo", "Trams there are yellow"),
            turn("D3:5", "Ann", "I plan to visit her in the autumn"),
        ],
        "session_4": [],  # empty, and no date
        "session_5": [turn(None, "Bo", "I started learning the cello")],  # no dia_id, no date
        "session_12_date_time": "2023-07-01T10:00:00",
        "session_12": [turn("D12:1", "Ann", "Biscuit chewed my running shoes")],
    }
    # Up to 35 sessions: numbered past 9 and past 12, in the order of their numbers.
    for n in range(13, 36):
        conv[f"session_{n}_date_time"] = f"10:00 am on {n - 12} August, 2023"
        conv[f"session_{n}"] = [turn(f"D{n}:1", "Bo", f"Week {n} marathon training log")]
    return conv


QA = [
    {
        "question": "What is the puppy called?",
        "answer": "Biscuit",
        "evidence": ["D1:1"],
        "category": 4,
    },
    {
        "question": "What did Bo share a photo of?",
        "answer": "kayak",
        "evidence": ["D1:2"],
        "category": "1",
    },
    {
        "question": "Where did the sister move?",
        "answer": "Lisbon",
        "evidence": ["D3:1; D3:2"],
        "category": 2,
    },
    {
        "question": "When does Ann visit?",
        "answer": "autumn",
        "evidence": ["D3:05"],
        "category": "temporal",
    },
    {
        "question": "What did Biscuit chew?",
        "adversarial_answer": "shoes",
        "evidence": ["D:12:1"],
        "category": 5,
    },
    {"question": "What is Bo learning?", "answer": "cello", "evidence": ["D5:1"], "category": 4},
    {"question": "Week 35?", "answer": "marathon", "evidence": ["D35:1"], "category": 3},
    {"question": "Which pet?", "answer": "puppy", "evidence": ["D1:1", "D99:1"], "category": 4},
    {"question": "No evidence at all", "answer": "x", "evidence": [], "category": 3},
    {"question": "Evidence missing", "answer": "x", "category": 3},
    {"question": "Evidence naming no turn", "answer": "x", "evidence": ["D99:1"], "category": 1},
    {"question": "Malformed evidence", "answer": "x", "evidence": ["D"], "category": 1},
    {"answer": "no question text", "evidence": ["D1:1"], "category": 1},
    {"question": "Unknown category", "answer": "Biscuit", "evidence": ["D12:1"], "category": 9},
]
SKIPPED = {
    "no evidence": 2,
    "evidence names no turn of the conversation": 1,
    "evidence malformed (no D<session>:<turn> id)": 1,
    "no question text": 1,
}


def sample() -> dict[str, Any]:
    return {"sample_id": "conv-x", "conversation": conversation(), "qa": QA}


def test_evidence_ids_as_the_public_release_spells_them(lr: ModuleType) -> None:
    assert lr.parse_evidence(["D8:6; D9:17", "D30:05", "D:11:26", "D", "", "D10:19, D10:20"]) == {
        "D8:6",
        "D9:17",
        "D30:5",
        "D11:26",
        "D10:19",
        "D10:20",
    }
    assert lr.parse_evidence("D2:3") == {"D2:3"}
    assert lr.parse_evidence(None) == set()


def test_session_dates_in_several_formats(lr: ModuleType) -> None:
    assert lr.parse_date("1:56 pm on 8 May, 2023") == datetime(2023, 5, 8, 13, 56)
    assert lr.parse_date("2023/05/20 (Sat) 02:21") == datetime(2023, 5, 20, 2, 21)
    assert lr.parse_date("2023-07-01T10:00:00") == datetime(2023, 7, 1, 10)
    assert lr.parse_date("10:00 am on 3 Aug, 2023") == datetime(2023, 8, 3, 10)
    assert lr.parse_date("sometime") is None
    assert lr.parse_date(None) is None


def test_every_session_is_read_in_number_order_with_a_date(lr: ModuleType) -> None:
    notes = lr.Notes()
    sessions = lr.sessions_of(sample(), notes)
    assert [s.number for s in sessions] == [1, 3, 4, 5, *range(12, 36)]
    dates = [s.date for s in sessions]
    assert all(isinstance(d, datetime) for d in dates)
    # A session without a date takes the previous one's: the order of time is kept.
    assert dates[2] == dates[3] == datetime(2023, 5, 20, 2, 21)
    assert dates == sorted(dates)
    assert sessions[3].turns[0].dia_id == "D5:1"
    assert notes.count("session date missing") == 2
    assert notes.count("turn without a usable dia_id (numbered by position)") == 1


def test_questions_are_kept_or_skipped_with_a_reason(lr: ModuleType) -> None:
    notes = lr.Notes()
    questions = lr.questions_of([sample()], notes)
    skipped = {reason: len(places) for reason, places in notes.skipped.items()}
    assert skipped == SKIPPED
    assert len(questions) + sum(SKIPPED.values()) == len(QA)
    by_text = {q.text: q for q in questions}
    assert by_text["Where did the sister move?"].evidence == {"D3:1", "D3:2"}
    assert by_text["When does Ann visit?"].evidence == {"D3:5"}
    assert by_text["When does Ann visit?"].category == 2
    assert by_text["What did Bo share a photo of?"].category == 1
    assert by_text["What did Biscuit chew?"].evidence == {"D12:1"}
    assert by_text["Week 35?"].evidence == {"D35:1"}
    # An id naming no turn is dropped from a question that has others, and said so.
    assert by_text["Which pet?"].evidence == {"D1:1"}
    assert notes.count("evidence id naming no turn (dropped from the question)") == 1
    assert by_text["Unknown category"].category == 0
    assert "no evidence" in "\n".join(notes.lines())


def test_the_benchmark_runs_and_prints_what_it_skipped(
    lr: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = {"sample_id": "conv-y", "conversation": {"speaker_a": "C", "speaker_b": "D"}}
    path = tmp_path / "locomo_like.json"
    path.write_text(json.dumps([sample(), broken]), encoding="utf-8")
    code = lr.main(["--data", str(path), "--embedding", "none", "--k", "1", "5"])
    out = capsys.readouterr().out
    assert code == 0
    kept = len(QA) - sum(SKIPPED.values())
    assert f"{kept} of {len(QA)} questions scored ({sum(SKIPPED.values())} skipped)" in out
    for reason, count in SKIPPED.items():
        assert f"skipped {count}: {reason}" in out
    assert "skipped 1: conversation without a list of questions (qa)" in out
    assert "other category (n=1)" in out
    # Every turn is stored, photo-only ones with their caption.
    assert f"{2 + 5 + 1 + 1 + 23} messages" in out


def test_a_file_with_nothing_to_score_says_so(
    lr: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "empty.json"
    path.write_text(json.dumps([{"sample_id": "c", "conversation": {}, "qa": QA[8:10]}]))
    assert lr.main(["--data", str(path), "--embedding", "none"]) == 1
    out = capsys.readouterr().out
    assert "0 of 2 questions scored (2 skipped)" in out
    assert "nothing to score" in out
