"""Postgres out of disk: a typed StorageFullError, every acknowledged batch intact and readable,
no half-written batch, and writes resume once space is back.

The database lives in a tablespace on a small tmpfs, so only its table files run out of room
(the server's own WAL stays on the large disk, as on a server whose data volume fills up).
Mounting needs root; elsewhere the test is skipped with that reason.
"""

from __future__ import annotations

import base64
import os
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from harombe_core.errors import StorageFullError
from harombe_core.models import Message
from harombe_core.store import ops
from harombe_core.store.pg_server import EmbeddedPostgres
from harombe_core.store.postgres import PostgresStore


def _mount(point: Path, size: str, *, remount: bool = False) -> subprocess.CompletedProcess[str]:
    options = f"{'remount,' if remount else ''}size={size},mode=0755"
    return subprocess.run(
        ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(point)],
        capture_output=True,
        text=True,
        check=False,
    )


@pytest.fixture
def small_volume() -> Iterator[Path]:
    """An 8 MiB tmpfs owned by the user the Postgres server runs as."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small filesystem for the disk-full test needs root")
    point = Path(tempfile.mkdtemp(prefix="harombe-pg-full-"))
    point.chmod(0o755)
    mounted = _mount(point, "8m")
    if mounted.returncode != 0:
        point.rmdir()
        pytest.skip(f"cannot mount a small filesystem here: {mounted.stderr.strip()}")
    try:
        import pwd

        nobody = pwd.getpwnam("nobody")
        os.chown(point, nobody.pw_uid, nobody.pw_gid)
        yield point
    finally:
        subprocess.run(["umount", "-l", str(point)], capture_output=True, check=False)
        point.rmdir()


@pytest.fixture
def full_url(pg_server: EmbeddedPostgres, small_volume: Path) -> Iterator[str]:
    """A database whose tables live on the small volume."""
    import psycopg

    name = f"full{os.getpid()}"
    with psycopg.connect(pg_server.url, autocommit=True) as conn:
        conn.execute(f"CREATE TABLESPACE {name} LOCATION '{small_volume}'")
        conn.execute(f'CREATE DATABASE "{name}" TABLESPACE {name}')
    with psycopg.connect(pg_server.url_for(name), autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
    try:
        yield pg_server.url_for(name)
    finally:
        with psycopg.connect(pg_server.url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            conn.execute(f"DROP TABLESPACE IF EXISTS {name}")


def _incompressible(n: int, seed: int) -> str:
    """Text Postgres cannot shrink with TOAST compression, so each row really takes room."""
    return base64.b64encode(os.urandom(n) + seed.to_bytes(4, "big")).decode()


def test_disk_full_is_typed_and_loses_nothing(full_url: str, small_volume: Path) -> None:
    store = PostgresStore(full_url, max_size=2, retry_seconds=2)
    acked: list[tuple[int, str]] = []
    failure: StorageFullError | None = None
    try:
        for batch in range(400):  # 400 x 2 x 48 KiB is far beyond 8 MiB
            contents = [_incompressible(36_000, 2 * batch + i) for i in range(2)]
            try:
                ids = store.run(
                    ops.add_messages(
                        "s", [Message(role="user", content=c, token_count=1) for c in contents]
                    )
                )
            except StorageFullError as exc:
                failure = exc
                break
            acked.extend(zip(ids, contents, strict=True))
        assert failure is not None, "the volume never filled up"
        assert "disk" in str(failure).lower() or "space" in str(failure).lower()
        assert len(acked) >= 2

        # Reads still work while full, and return exactly what was acknowledged: nothing of
        # the failed batch, nothing half-written.
        stored = [(m.id, m.content) for m in store.run(ops.get_messages("s"))]
        assert stored == acked

        # Space comes back: the same store resumes writing without reopening.
        grown = _mount(small_volume, "64m", remount=True)
        assert grown.returncode == 0, grown.stderr
        more = store.run(
            ops.add_messages("s", [Message(role="user", content="after", token_count=1)])
        )
        assert [m.id for m in store.run(ops.get_messages("s"))][-1] == more[0]
        assert len(store.run(ops.get_messages("s"))) == len(acked) + 1
    finally:
        store.close()
