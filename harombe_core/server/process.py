"""A real ``harombe serve`` in a child process on a free loopback port: for tests and benchmarks.

Users testing their own code against a harombe server, our tests and ``benchmarks/bench_serve.py``
all need the same thing: start the real command, wait until it answers, stop it (or kill it
mid-flight). :class:`ServerProcess` does that with nothing but the standard library and httpx.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from types import TracebackType

import httpx

from harombe_core.errors import HarombeError
from harombe_core.store.pg_server import free_port

__all__ = ["ServerProcess", "create_key_cli", "free_port"]


def _harombe(*args: str) -> list[str]:
    return [sys.executable, "-m", "harombe_core.cli", *args]


def create_key_cli(db: str, *, user: str | None = None, admin: bool = False) -> str:
    """A new key made by the real ``harombe keys create`` (what it prints on stdout)."""
    args = [
        "keys",
        "create",
        "--db",
        db,
        *(["--user", user] if user else []),
        *(["--admin"] if admin else []),
    ]
    done = subprocess.run(_harombe(*args), capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise HarombeError(f"harombe keys create failed: {done.stderr.strip()}")
    return done.stdout.strip()


class ServerProcess:
    """``harombe serve --db DB`` on 127.0.0.1 and a free port, started by :meth:`start`."""

    def __init__(self, db: str, *, extra: Sequence[str] = (), port: int | None = None) -> None:
        self.db = db
        self.port = port or free_port()
        self.extra = list(extra)
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen[bytes] | None = None
        # stderr goes to a file, not a pipe: a pipe nobody reads would block the server once full
        self.log = tempfile.TemporaryFile()  # noqa: SIM115  (closed by stop())

    def start(self, wait: float = 60.0) -> ServerProcess:
        """Start the server and return once it answers (HarombeError if it exits or does not
        answer within ``wait`` seconds)."""
        args = ["serve", "--db", self.db, "--host", "127.0.0.1", "--port", str(self.port)]
        self.process = subprocess.Popen(
            _harombe(*args, *self.extra),
            stdout=subprocess.DEVNULL,
            stderr=self.log,
            env=os.environ.copy(),
        )
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise HarombeError(f"harombe serve exited: {self.errors().strip()}")
            try:
                if httpx.get(self.url + "/openapi.json", timeout=2).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        self.stop()
        raise HarombeError(f"harombe serve did not answer on {self.url} within {wait:.0f} s")

    def errors(self) -> str:
        """What the server wrote on stderr so far."""
        self.log.seek(0)
        return self.log.read().decode(errors="replace")

    def kill(self) -> None:
        """SIGKILL: the process dies at once, mid-request if it is in one."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait()

    def stop(self) -> None:
        """Stop gracefully (SIGTERM), killing it if it does not stop within ten seconds."""
        if self.process is None or self.process.poll() is not None:
            self.log.close()
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.kill()
        self.log.close()

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
