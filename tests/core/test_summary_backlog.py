"""Long summary backlogs are folded by the background folder, never on ``get_context``.

A summariser that records which thread runs it and which messages it is given shows that a
long backlog is never summarised on the caller's thread, that ``flush()`` waits for the whole
backlog, and that no message is summarised twice when the background and a caller's
``summarize_session()`` meet.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from harombe_core.context import SYNC_FOLD
from harombe_core.manager import MemoryManager
from harombe_core.models import Message
from harombe_core.summarize import ExtractiveSummarizer


class Recording(ExtractiveSummarizer):
    """The extractive summariser, noting the thread and the message ids of every call."""

    def __init__(self) -> None:
        super().__init__()
        self.threads: list[int] = []
        self.ids: list[int] = []

    def summarize_session(self, messages: Any, previous: Any = None) -> Any:
        self.threads.append(threading.get_ident())
        self.ids.extend(m.id for m in messages)
        return super().summarize_session(messages, previous)


def _session(mm: MemoryManager, count: int) -> str:
    sid = mm.create_session("be brief")
    mm.save_messages(
        sid,
        [
            Message(role="user" if i % 2 == 0 else "assistant", content=f"turn {i} about boats")
            for i in range(count)
        ],
    )
    return sid


@pytest.fixture
def mm(tmp_path: Path) -> Any:
    manager = MemoryManager(str(tmp_path / "m.db"), embedding=None)
    manager.summary_chunk = 40
    try:
        yield manager
    finally:
        manager.close()


@pytest.mark.parametrize("strategy", ["summarization", "hybrid"])
def test_a_long_backlog_is_folded_in_the_background(mm: MemoryManager, strategy: str) -> None:
    recording = Recording()
    mm.summarizer = recording
    sid = _session(mm, SYNC_FOLD * 4)
    first = mm.get_context(sid, strategy, 500, keep_last=4)
    assert first[-1].content == f"turn {SYNC_FOLD * 4 - 1} about boats"
    assert threading.get_ident() not in recording.threads  # nothing folded on the caller
    mm.flush()
    ids = [m.id for m in mm.get_messages(sid)]
    assert mm.get_session(sid).summary_until_id == ids[-5]  # all but the newest keep_last
    assert sorted(recording.ids) == ids[:-4]  # each message summarised once
    context = mm.get_context(sid, strategy, 500, keep_last=4)
    assert any(m.metadata.get("harombe") == "summary" for m in context)


def test_a_short_backlog_is_folded_at_once(mm: MemoryManager) -> None:
    recording = Recording()
    mm.summarizer = recording
    sid = _session(mm, SYNC_FOLD // 2)
    context = mm.get_context(sid, "summarization", 500, keep_last=4)
    assert any(m.metadata.get("harombe") == "summary" for m in context)
    assert recording.threads == [threading.get_ident()]


def test_summarize_session_and_the_background_never_fold_twice(mm: MemoryManager) -> None:
    recording = Recording()
    mm.summarizer = recording
    sid = _session(mm, SYNC_FOLD * 4)
    mm.get_context(sid, "summarization", 500, keep_last=4)  # hands the backlog over
    summary = mm.summarize_session(sid)  # folds everything, whatever the folder has done
    mm.flush()
    ids = [m.id for m in mm.get_messages(sid)]
    assert summary is not None
    assert mm.get_session(sid).summary_until_id == ids[-1]
    assert sorted(recording.ids) == ids


def test_close_stops_the_folder_mid_backlog(tmp_path: Path) -> None:
    path = str(tmp_path / "m.db")
    mm = MemoryManager(path, embedding=None)
    mm.summary_chunk = 10
    sid = _session(mm, SYNC_FOLD * 6)
    mm.get_context(sid, "summarization", 500, keep_last=4)
    mm.close()  # waits for the step in hand; the rest is left for later
    again = MemoryManager(path, embedding=None)
    try:
        again.get_context(sid, "summarization", 500, keep_last=4)
        again.flush()
        ids = [m.id for m in again.get_messages(sid)]
        assert again.get_session(sid).summary_until_id == ids[-5]
    finally:
        again.close()


def test_a_session_cleared_while_folding_keeps_no_summary_of_it(mm: MemoryManager) -> None:
    mm.summary_chunk = 10
    sid = _session(mm, SYNC_FOLD * 6)
    mm.get_context(sid, "summarization", 500, keep_last=4)  # the folding starts
    mm.clear_session(sid)  # whatever step is in hand, its summary is not stored after this
    mm.flush()
    session = mm.get_session(sid)
    assert session.summary is None
    assert session.summary_until_id is None
    mm.save_messages(sid, [Message(role="user", content="a new start about kites")] * 8)
    context = mm.get_context(sid, "summarization", 500, keep_last=4)
    assert "boats" not in " ".join(m.content for m in context)


def test_a_program_that_never_closes_exits_cleanly_mid_backlog(tmp_path: Path) -> None:
    """The folding thread is stopped at interpreter exit after the step in hand; what it had
    folded is stored, the rest is folded by a later call."""
    import subprocess
    import sys

    path = tmp_path / "m.db"
    script = f"""
from harombe_core.manager import MemoryManager
from harombe_core.models import Message
mm = MemoryManager({str(path)!r}, embedding=None)
mm.summary_chunk = 5
sid = mm.create_session(session_id="s")
mm.save_messages(sid, [Message(role="user", content=f"turn {{i}} about boats") for i in range(400)])
mm.get_context(sid, "summarization", 500, keep_last=4)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr.decode()
    mm = MemoryManager(str(path), embedding=None)
    try:
        mm.get_context("s", "summarization", 500, keep_last=4)
        mm.flush()
        ids = [m.id for m in mm.get_messages("s")]
        assert mm.get_session("s").summary_until_id == ids[-5]
    finally:
        mm.close()
