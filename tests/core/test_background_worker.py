"""One background worker per process serves every kind of derived work, in priority order.

Checkpointed threads' sessions, SQLite's keyword index, embeddings, summary backlogs and fact
extraction are jobs of the same thread (``harombe-worker``): no thread per manager, per
database or per kind. The worker is held (``hold_background``) so that what runs first is
shown without depending on timing.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from harombe_core import folding
from harombe_core.context import SYNC_FOLD
from harombe_core.folding import SummaryFolder
from harombe_core.manager import MemoryManager
from harombe_core.models import Message
from harombe_core.store.fts import KEYWORD_MARK
from harombe_core.summarize import ExtractiveSummarizer
from harombe_core.testing import FakeEmbedder, hold_background


def _workers() -> list[str]:
    return sorted(t.name for t in threading.enumerate() if t.name.startswith("harombe-"))


def test_a_ready_job_of_a_higher_priority_goes_first() -> None:
    done: list[str] = []
    low = SummaryFolder(lambda key, _: done.append(f"low {key}") or False)
    high = SummaryFolder(lambda key, _: done.append(f"high {key}") or False, priority=5)
    with hold_background():
        low.request("a", 0)
        low.request("b", 0)
        high.request("c", 0)
        high.request("d", 0)
    low.flush()
    high.flush()
    assert done == ["high c", "high d", "low a", "low b"]


def test_a_lingering_job_waits_and_a_burst_of_requests_is_one_job() -> None:
    done: list[str] = []
    folder = SummaryFolder(lambda key, _: done.append(key) or False, linger=0.05)
    with hold_background():
        for _ in range(5):
            folder.request("burst", 0)
    assert folder.flush()
    assert done == ["burst"]


def test_drain_does_the_waiting_jobs_on_the_calling_thread() -> None:
    ran_on: list[str] = []
    folder = SummaryFolder(
        lambda key, _: ran_on.append(threading.current_thread().name) or False, linger=60
    )
    with hold_background():
        folder.request("x", 0)
        folder.drain()
        assert ran_on == [threading.current_thread().name]
        assert folder.pending() == 0


def test_facts_are_extracted_on_the_shared_worker(tmp_path: Path) -> None:
    with MemoryManager(str(tmp_path / "facts.db"), embedding=None, user_memory=True) as mm:
        sid = mm.create_session(user_id="ann")
        with hold_background():  # nothing is extracted while the worker is held
            mm.save_message(sid, {"role": "user", "content": "I work as a nurse in Lisbon."})
            assert mm.get_facts("ann") == []
        done = threading.Event()
        probe = SummaryFolder(lambda *_: done.set() or False, priority=-5)
        probe.request("after the facts", 0)  # runs once the worker has nothing of higher rank
        assert done.wait(60)
        assert [f.text for f in mm.get_facts("ann")] != []
        assert "harombe-facts" not in _workers()
        assert _workers().count("harombe-worker") == 1


def test_the_kinds_rank_as_a_user_expects() -> None:
    """A saved message is made readable, then searchable by keyword and by meaning, before
    it is summarised or learnt from."""
    order = [folding.SESSIONS, folding.KEYWORDS, folding.VECTORS, folding.SUMMARIES, folding.FACTS]
    assert order == sorted(order, reverse=True)


@pytest.mark.parametrize("vector_store", ["database", "chroma"])
def test_a_whole_memory_runs_on_one_background_thread(tmp_path: Path, vector_store: str) -> None:
    """SQLite, semantic memory (the default index or Chroma), keyword indexing, summary
    folding and fact extraction, on two databases and several managers, in a fresh process:
    the only harombe background thread is the worker (the pool that overlaps a request's
    own reads is not background work)."""
    if vector_store == "chroma" and importlib.util.find_spec("chromadb") is None:
        pytest.skip("chromadb is not installed")
    script = f"""
        import threading
        from harombe_core import MemoryManager, Message
        from harombe_core.testing import FakeEmbedder

        managers = []
        for name in ("a.db", "a.db", "b.db"):
            mm = MemoryManager(name, embedding=FakeEmbedder(), vector_store={vector_store!r},
                               user_memory=True)
            mm.summary_chunk = 10
            managers.append(mm)
            sid = mm.create_session(user_id="ann")
            mm.save_messages(sid, [Message(role="user", content=f"I live in Lisbon, turn {{i}}")
                                   for i in range({SYNC_FOLD * 3})])
            mm.get_context(sid, "summarization", 300, keep_last=4)  # a backlog to fold
            mm.search("Lisbon", top_k=3)
        for mm in managers:
            mm.flush()
        # harombe-flow_N: the pool that overlaps the reads of one request (a search's
        # vector and keyword halves), on the request path, idle between requests.
        names = sorted(t.name for t in threading.enumerate()
                       if t.name.startswith("harombe-") and not t.name.startswith("harombe-flow"))
        print(",".join(names))
        for mm in managers:
            mm.close()
        """
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "harombe-worker"


class _Recorder:
    """What the worker did, in order: embedding batches, folds, keyword catch-ups."""

    def __init__(self) -> None:
        self.done: list[str] = []


class _Embedder(FakeEmbedder):
    def __init__(self, log: _Recorder) -> None:
        super().__init__()
        self.log = log

    def embed(self, texts: Any) -> Any:
        if threading.current_thread().name == "harombe-worker":
            self.log.done.append(f"vectors {len(texts)}")
        return super().embed(texts)


class _Summarizer(ExtractiveSummarizer):
    def __init__(self, log: _Recorder) -> None:
        super().__init__()
        self.log = log

    def summarize_session(self, messages: Any, previous: Any = None) -> Any:
        if threading.current_thread().name == "harombe-worker":
            self.log.done.append("fold")
        return super().summarize_session(messages, previous)


def _wait_for_the_worker() -> None:
    """Return once the worker has no ready job left of any kind (a probe of the lowest rank
    runs then)."""
    done = threading.Event()
    probe = SummaryFolder(lambda *_: done.set() or False, priority=folding.FACTS - 10)
    probe.request("probe", 0)
    assert done.wait(60)
    probe.close()


def _mark(mm: MemoryManager) -> int:
    rows = mm.store.query("SELECT value FROM harombe_meta WHERE key = ?", (KEYWORD_MARK,))
    return int(rows[0][0]) if rows else 0


def test_keywords_and_vectors_come_before_folding_one_batch_per_step(tmp_path: Path) -> None:
    log = _Recorder()
    with MemoryManager(str(tmp_path / "m.db"), embedding=_Embedder(log)) as mm:
        mm._semantic.batch_size = 8
        mm.summarizer = _Summarizer(log)
        mm.summary_chunk = 10
        keywords = mm.store._keywords._jobs  # SQLite's keyword indexer on the worker
        step = keywords._step

        def index_keywords(key: str, until: int) -> bool:
            more = step(key, until)
            log.done.append(f"keywords {_mark(mm)}")
            return more

        keywords._step = index_keywords
        sid = mm.create_session()
        with hold_background():
            ids = mm.save_messages(
                sid, [Message(role="user", content=f"turn {i} about boats") for i in range(80)]
            )
            mm.get_context(sid, "summarization", 300, keep_last=4)  # the backlog is handed over
            assert _mark(mm) < ids[-1], "nothing is indexed while the worker is held"
            time.sleep(0.2)  # past the embedder's linger: every job is ready at release
        _wait_for_the_worker()  # (not flush(): it would embed on this thread)
    first_fold = log.done.index("fold")
    assert log.done[0] == f"keywords {ids[-1]}"  # the keyword index first, in one step
    assert log.done[1:first_fold] == ["vectors 8"] * 10  # then every batch, one per step
    assert "vectors 8" not in log.done[first_fold:]  # (a fold embeds its summary: 1 text)


def test_a_job_of_higher_rank_waits_for_one_batch_not_for_the_backlog(tmp_path: Path) -> None:
    log = _Recorder()
    with MemoryManager(str(tmp_path / "m.db"), embedding=_Embedder(log)) as mm:
        mm._semantic.batch_size = 4
        urgent = SummaryFolder(
            lambda *_: log.done.append("session") or False, priority=folding.SESSIONS
        )
        original = mm._semantic.embedder.embed

        def embed(texts: Any) -> Any:
            if not log.done:
                urgent.request("thread", 0)  # handed over while the first batch is embedded
            return original(texts)

        mm._semantic.embedder.embed = embed  # type: ignore[method-assign]
        sid = mm.create_session()
        with hold_background():
            mm.save_messages(sid, [Message(role="user", content=f"m {i}") for i in range(40)])
            time.sleep(0.2)  # past the embedder's linger
        _wait_for_the_worker()
        urgent.close()
    assert log.done == ["vectors 4", "session"] + ["vectors 4"] * 9  # 40 messages, 4 a batch


def test_keyword_indexing_runs_on_the_worker_and_flush_waits_for_it(tmp_path: Path) -> None:
    with MemoryManager(str(tmp_path / "m.db"), embedding=None) as mm:
        sid = mm.create_session()
        with hold_background():
            last = mm.save_messages(sid, [Message(role="user", content="kites and boats")])[-1]
            assert _mark(mm) < last
            assert mm.search("kites", top_k=1)  # found all the same: the tail is scored
        mm.flush()
        assert _mark(mm) == last
        names = [t.name for t in threading.enumerate()]
        assert "harombe-keywords" not in names
        assert "harombe-embedder" not in names


@pytest.mark.parametrize("vector_store", ["database", "chroma"])
def test_flush_with_no_time_left_answers_whether_the_background_caught_up(
    tmp_path: Path, vector_store: str
) -> None:
    """``flush(timeout=0)`` asks "is everything embedded?": it returns when nothing is
    waiting (it raised "timed out ... with messages still waiting" even then), and raises
    EmbeddingError while a message is."""
    from harombe_core.errors import EmbeddingError

    path = str(tmp_path / "m.db")
    with MemoryManager(path, embedding=FakeEmbedder(), vector_store=vector_store) as mm:
        mm.save_message("s", Message(role="user", content="kites and boats"))
        mm.flush()
        mm.flush(timeout=0)
        with hold_background():
            mm.save_message("s", Message(role="user", content="boats and kites"))
            with pytest.raises(EmbeddingError, match="still waiting"):
                mm.flush(timeout=0)
        mm.flush()
        mm.flush(timeout=0)
