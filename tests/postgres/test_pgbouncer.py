"""Behind pgbouncer in transaction pooling mode (each transaction may run on another server
connection): statements psycopg prepared on one connection are missing or clash on the next,
so the store notices and runs unprepared instead of failing every call.

pgbouncer before 1.21 also hands the server connection to a client for any message that
arrives after its transaction ended, even one that no answer ends (the Flush psycopg sends on
leaving pipeline mode), and every other client then waits until its query_wait_timeout. Whether
that Flush arrived after the COMMIT's answer was a race, lost by a few percent of pipelined
transactions here; sixty transactions make a regression show in most runs."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from harombe_core.models import Message
from harombe_core.store import ops
from harombe_core.store.pg_server import EmbeddedPostgres, free_port
from harombe_core.store.postgres import PostgresStore

PGBOUNCER = shutil.which("pgbouncer") or (
    "/usr/sbin/pgbouncer" if os.path.exists("/usr/sbin/pgbouncer") else None
)
pytestmark = pytest.mark.skipif(PGBOUNCER is None, reason="pgbouncer is not installed")


def _as_nobody() -> None:  # pgbouncer refuses to run as root
    if os.geteuid() == 0:
        import pwd

        entry = pwd.getpwnam("nobody")
        os.setgid(entry.pw_gid)
        os.setuid(entry.pw_uid)


@pytest.fixture
def bouncer(pg_server: EmbeddedPostgres) -> Iterator[str]:
    """host:port of a pgbouncer in transaction mode with ONE server connection per database."""
    folder = Path(tempfile.mkdtemp(prefix="harombe-pgbouncer-"))
    folder.chmod(0o777)
    port = free_port()
    (folder / "users.txt").write_text('"postgres" ""\n')
    (folder / "pgbouncer.ini").write_text(
        f"[databases]\n* = host={pg_server.host} port={pg_server.port}\n"
        f"[pgbouncer]\nlisten_addr = 127.0.0.1\nlisten_port = {port}\nauth_type = trust\n"
        f"auth_file = {folder}/users.txt\npool_mode = transaction\ndefault_pool_size = 1\n"
        "unix_socket_dir =\nignore_startup_parameters = extra_float_digits,options\n"
    )
    proc = subprocess.Popen(
        [str(PGBOUNCER), str(folder / "pgbouncer.ini")],
        preexec_fn=_as_nobody,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
                break
            time.sleep(0.05)
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(30)
        shutil.rmtree(folder, ignore_errors=True)


def test_two_processes_share_one_server_connection_through_pgbouncer(
    bouncer: str, pg_url: str
) -> None:
    url = f"postgresql://postgres@{bouncer}/{pg_url.rsplit('/', 1)[1]}"
    first = PostgresStore(url, max_size=1)
    second = PostgresStore(url, max_size=1)  # another process's pool, same server connection
    try:
        for n in range(30):  # past psycopg's prepare threshold on both; many transactions
            for store, sid in ((first, "a"), (second, "b")):
                store.run(
                    ops.add_messages(sid, [Message(role="user", content=f"{n}", token_count=1)])
                )
                assert store.run(ops.count_messages(sid)) == n + 1
        for store, sid in ((first, "a"), (second, "b")):
            assert [m.content for m in store.run(ops.get_messages(sid))] == [
                str(n) for n in range(30)
            ]
    finally:
        first.close()
        second.close()
