"""The Chroma server mode: a real `chroma run` on loopback, reached through its HTTP client."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from harombe_core.config import MemoryConfig
from harombe_core.manager import MemoryManager
from harombe_core.models import Message
from harombe_core.testing import FakeEmbedder


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def chroma_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    binary = Path(sys.executable).parent / "chroma"
    if not binary.exists():
        found = shutil.which("chroma")
        if found is None:
            pytest.skip("the chroma server command is not installed")
        binary = Path(found)
    port = _free_port()
    folder = tmp_path_factory.mktemp("chroma-server")
    process = subprocess.Popen(
        [str(binary), "run", "--path", str(folder), "--host", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or process.poll() is not None:
                    pytest.fail("the local chroma server did not start")
                time.sleep(0.2)
        yield port
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_memory_manager_over_a_chroma_server(chroma_server: int, db_path: str) -> None:
    config = MemoryConfig.model_validate(
        {"vector_store": {"mode": "http", "port": chroma_server, "collection": "test-http"}}
    )
    with MemoryManager(db_path, embedding=FakeEmbedder(), config=config) as mm:
        sid = mm.create_session(user_id="ann")
        mm.save_messages(
            sid,
            [
                Message(role="user", content="the red kite flew over the hill"),
                Message(role="user", content="tax forms are due in April"),
            ],
        )
        mm.flush()
        assert mm._semantic.index.name.startswith("chroma http://127.0.0.1")
        assert mm._semantic.index.count() == 2
        assert not Path(db_path + ".chroma").exists()
        mm._semantic.exact_search_limit = 0  # answer through the server, not the SQLite copy
        assert mm.search_similar("red kite", top_k=1, user_id="ann")[0].content.startswith(
            "the red kite"
        )
        assert mm.reindex(progress=False)["vectors"] == 2
