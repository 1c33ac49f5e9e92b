"""One background worker per process serves every kind of derived work, in priority order.

Summary backlogs, checkpointed threads' sessions and fact extraction are jobs of the same
thread (``harombe-worker``): no thread per manager or per kind. The worker is held
(``hold_background``) so that what runs first is shown without depending on timing.
"""

from __future__ import annotations

import threading
from pathlib import Path

from harombe_core.folding import SummaryFolder
from harombe_core.manager import MemoryManager
from harombe_core.testing import hold_background


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
