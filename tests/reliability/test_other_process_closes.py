"""A process holds a file through several openers while another process opens, writes and
closes it: nothing either acknowledged may be lost, whether the first closes or is killed.

Closing any descriptor of a file drops every POSIX lock the process holds on it. When several
openers in one process each checked the file with Python's ``open()``, the other process then
believed it was the last user and deleted the ``-wal``/``-shm`` under the first: after a close
the file held 1 of the other's 10 messages, after a SIGKILL 1 of the first's 10.
"""

from __future__ import annotations

import os
import signal
import stat
from pathlib import Path

import pytest

from tests.reliability.openers import (
    KINDS,
    acknowledged,
    context,
    first_process,
    integrity,
    other_process,
    stored_contents,
)


@pytest.mark.parametrize("ending", ["close", "sigkill"])
@pytest.mark.parametrize("kind", KINDS)
def test_another_process_closing_the_file_loses_nothing(
    tmp_path: Path, kind: str, ending: str
) -> None:
    db = str(tmp_path / "memory.db")
    first_acks, other_acks = tmp_path / "first.acks", tmp_path / "other.acks"
    ctx = context()
    report, go, finish = ctx.Queue(), ctx.Event(), ctx.Event()
    first = ctx.Process(
        target=first_process, args=(db, kind, str(first_acks), report, go, finish)
    )
    first.start()
    try:
        assert report.get(timeout=60) == "ready"
        other = ctx.Process(target=other_process, args=(db, str(other_acks), 10, "other"))
        other.start()
        other.join(timeout=60)
        assert other.exitcode == 0
        go.set()
        files = report.get(timeout=60)
        assert report.get(timeout=60) == "written"
        if ending == "sigkill":
            os.kill(first.pid or 0, signal.SIGKILL)
        else:  # (never set an Event a killed process waits on: set() waits for its waiters)
            finish.set()
        first.join(timeout=60)
    finally:
        if first.is_alive():
            first.kill()
    assert first.exitcode == (-signal.SIGKILL if ending == "sigkill" else 0)

    # The other process's close left the first's -wal and -shm in place.
    assert files == {"wal": True, "shm": True}
    acked = acknowledged(first_acks) + acknowledged(other_acks)
    assert len(acked) == 20
    stored = stored_contents(db)
    assert {text: stored[text] for text in acked} == dict.fromkeys(acked, 1)
    assert integrity(db) == "ok"
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(db + suffix):
            assert stat.S_IMODE(os.stat(db + suffix).st_mode) == 0o600
