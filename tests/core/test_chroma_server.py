"""Chroma as a server: a real ``chroma run`` on 127.0.0.1, started by these tests.

Deployments that keep messages in SQLite (or Postgres) on many hosts share one Chroma server for
vectors (``vector_store: {mode: http, host, port, collection}``). Proven here: the VectorIndex
protocol in HTTP mode, vectors that outlive the client and a server restart, a MemoryManager
with SQLite messages and server-side vectors (save, flush, search, scoped search), two stores
sharing one server through their own collections, an index lost on the server rebuilt from the
store, and a clear error when no server listens. If the server cannot start, the tests fail.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from harombe_core.config import MemoryConfig
from harombe_core.errors import StoreError
from harombe_core.manager import MemoryManager
from harombe_core.models import Message
from harombe_core.store.pg_server import free_port
from harombe_core.testing import FakeEmbedder
from harombe_core.vectors.base import VectorIndex
from harombe_core.vectors.chroma import ChromaVectorIndex

#: Seconds to wait for the server's heartbeat before failing the run.
START_TIMEOUT = 90.0
#: No test here may hang on a stuck server.
pytestmark = pytest.mark.timeout(240)


class ChromaServer:
    """One ``chroma run`` process on 127.0.0.1 with its data in ``path``."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.port = free_port()
        self.host = "127.0.0.1"
        self.log = path.parent / f"chroma-{self.port}.log"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> None:
        chroma = Path(sys.executable).with_name("chroma")
        if not chroma.exists():
            pytest.fail(f"the chroma command is missing beside {sys.executable}", pytrace=False)
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                [str(chroma), "run", "--host", self.host, "--port", str(self.port),
                 "--path", str(self.path)],
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, "ANONYMIZED_TELEMETRY": "False", "NO_COLOR": "1"},
                start_new_session=True,  # its own process group, stopped as one below
            )
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                break
            heartbeat = f"{self.url}/api/v2/heartbeat"
            with contextlib.suppress(OSError), urllib.request.urlopen(heartbeat, timeout=2) as r:
                if r.status == 200:
                    return
            time.sleep(0.2)
        output = self.log.read_text(errors="replace")[-3000:]
        self.stop()
        pytest.fail(f"the Chroma server did not start on {self.url}:\n{output}", pytrace=False)

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=20)


@pytest.fixture(scope="module")
def chroma_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ChromaServer]:
    server = ChromaServer(tmp_path_factory.mktemp("chroma-server") / "data")
    server.start()
    try:
        yield server
    finally:
        server.stop()


_collections = iter(range(10**6))


def _collection(prefix: str) -> str:
    return f"{prefix}-{os.getpid()}-{next(_collections)}"


def _http_index(server: ChromaServer, collection: str | None = None) -> ChromaVectorIndex:
    return ChromaVectorIndex(
        mode="http", host=server.host, port=server.port,
        collection=collection or _collection("protocol"),
    )


def _config(server: ChromaServer, collection: str) -> MemoryConfig:
    return MemoryConfig.model_validate(
        {"vector_store": {"mode": "http", "host": server.host, "port": server.port,
                          "collection": collection}}
    )


def _unit(rng: np.random.Generator, n: int, dim: int = 16) -> np.ndarray:
    v = rng.normal(size=(n, dim)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def _meta(i: int) -> dict[str, object]:
    return {
        "message_id": i,
        "session_id": f"s{i % 3}",
        "user_id": f"u{i % 2}",
        "role": "user" if i % 2 == 0 else "assistant",
        "created_at": 1_000 * i,
    }


# the protocol over HTTP -----------------------------------------------------------------------
def test_http_index_implements_the_protocol(chroma_server: ChromaServer) -> None:
    index = _http_index(chroma_server)
    assert isinstance(index, VectorIndex)
    assert index.name.startswith(f"chroma http://127.0.0.1:{chroma_server.port}/")
    vectors = _unit(np.random.default_rng(0), 30)
    for _ in range(3):  # idempotent upsert
        index.upsert(list(range(30)), vectors, [_meta(i) for i in range(30)])
    assert index.count() == 30
    matches = index.query(vectors[6], 3)
    assert matches[0].message_id == 6
    assert matches[0].similarity == pytest.approx(1.0, abs=1e-4)
    found = index.query(vectors[0], 30, {"session_id": "s1"})
    assert sorted(m.message_id for m in found) == [i for i in range(30) if i % 3 == 1]
    found = index.query(vectors[0], 30, {"user_id": "u0", "role": {"$in": ["user"]}})
    assert sorted(m.message_id for m in found) == list(range(0, 30, 2))
    found = index.query(vectors[0], 30, {"created_at": {"$gte": 5_000, "$lte": 9_000}})
    assert sorted(m.message_id for m in found) == [5, 6, 7, 8, 9]
    np.testing.assert_allclose(index.get_vectors([3])[3], vectors[3], atol=1e-6)
    index.delete([0, 1])
    index.delete_where({"session_id": "s2"})
    assert index.count() == 30 - 2 - len([i for i in range(2, 30) if i % 3 == 2])
    index.clear()
    assert index.count() == 0
    index.close()


def test_vectors_outlive_the_client_and_a_server_restart(chroma_server: ChromaServer) -> None:
    collection = _collection("restart")
    vectors = _unit(np.random.default_rng(1), 8)
    first = _http_index(chroma_server, collection)
    first.upsert(list(range(8)), vectors, [_meta(i) for i in range(8)])
    first.close()
    chroma_server.stop()
    chroma_server.start()  # same --path and port: the data comes back
    second = _http_index(chroma_server, collection)
    assert second.count() == 8
    assert second.query(vectors[5], 1)[0].message_id == 5


def test_two_collections_on_one_server_are_independent(chroma_server: ChromaServer) -> None:
    a, b = _http_index(chroma_server), _http_index(chroma_server)
    vectors = _unit(np.random.default_rng(2), 4)
    a.upsert([1, 2], vectors[:2], [_meta(1), _meta(2)])
    b.upsert([1], vectors[3:], [_meta(1)])
    assert (a.count(), b.count()) == (2, 1)
    assert b.query(vectors[0], 5)[0].similarity == pytest.approx(float(vectors[3] @ vectors[0]),
                                                                 abs=1e-4)


def test_no_server_is_a_clear_typed_error() -> None:
    with pytest.raises(StoreError, match="cannot reach the Chroma server"):
        ChromaVectorIndex(mode="http", host="127.0.0.1", port=free_port())


# MemoryManager: SQLite messages, vectors on the shared server ---------------------------------
def _converse(mm: MemoryManager) -> dict[str, str]:
    sessions = {}
    for user, lines in {
        "ann": ["I am planning a sailing trip to Crete in June",
                "My daughter started violin lessons"],
        "bob": ["The sailing club meets every Thursday",
                "I am baking sourdough bread this weekend"],
    }.items():
        sid = mm.create_session(user_id=user)
        sessions[user] = sid
        mm.save_messages(sid, [Message(role="user", content=line) for line in lines])
    return sessions


def test_manager_with_sqlite_messages_and_server_vectors(
    chroma_server: ChromaServer, tmp_path: Path
) -> None:
    collection = _collection("manager")
    db = str(tmp_path / "memory.db")
    with MemoryManager(db, embedding=FakeEmbedder(256),
                       config=_config(chroma_server, collection)) as mm:
        assert mm._semantic.index.name.endswith(f":{chroma_server.port}/{collection}")
        sessions = _converse(mm)
        mm.flush()
        assert mm._semantic.index.count() == 4  # the vectors are on the server
        hits = mm.search("sailing trip", top_k=4)
        assert {h.message.session_id for h in hits} == set(sessions.values())
        scoped = mm.search("sailing", top_k=4, user_id="bob")
        assert scoped
        assert {h.message.session_id for h in scoped} == {sessions["bob"]}
        assert scoped[0].message.content == "The sailing club meets every Thursday"
        assert scoped[0].vector_score is not None
        in_session = mm.search("violin lessons", top_k=2, session_id=sessions["ann"],
                               keyword_weight=0.0)
        assert in_session[0].message.content == "My daughter started violin lessons"
    # A restart of the app finds its vectors on the server: nothing is embedded again.
    embedder = FakeEmbedder(256)
    with MemoryManager(db, embedding=embedder, config=_config(chroma_server, collection)) as mm:
        mm.flush()
        assert embedder.texts_embedded == 0
        assert mm._semantic.index.count() == 4


def test_two_stores_share_one_server_through_their_collections(
    chroma_server: ChromaServer, tmp_path: Path
) -> None:
    one = MemoryManager(str(tmp_path / "one.db"), embedding=FakeEmbedder(256),
                        config=_config(chroma_server, _collection("host-a")))
    two = MemoryManager(str(tmp_path / "two.db"), embedding=FakeEmbedder(256),
                        config=_config(chroma_server, _collection("host-b")))
    try:
        sid_one = one.create_session(user_id="ann")
        one.save_message(sid_one, Message(role="user", content="the red bicycle has a flat tyre"))
        sid_two = two.create_session(user_id="ann")
        two.save_message(sid_two, Message(role="user", content="quarterly invoice is overdue"))
        one.flush()
        two.flush()
        assert [m.content for m in one.search_similar("bicycle tyre", top_k=5)] == [
            "the red bicycle has a flat tyre"
        ]
        assert [m.content for m in two.search_similar("bicycle tyre", top_k=5,
                                                      min_similarity=0.2)] == []
    finally:
        one.close()
        two.close()


def test_collection_lost_on_the_server_is_rebuilt_from_the_store(
    chroma_server: ChromaServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    collection = _collection("lost")
    db = str(tmp_path / "memory.db")
    with MemoryManager(db, embedding=FakeEmbedder(256),
                       config=_config(chroma_server, collection)) as mm:
        _converse(mm)
        mm.flush()
    _http_index(chroma_server, collection).clear()  # someone wiped the shared server
    embedder = FakeEmbedder(256)
    with caplog.at_level("WARNING"), MemoryManager(
        db, embedding=embedder, config=_config(chroma_server, collection)
    ) as mm:
        deadline = time.monotonic() + 30
        while mm._semantic.index.count() < 4 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert mm._semantic.index.count() == 4
        assert embedder.texts_embedded == 0  # re-inserted from SQLite's copy, no model run
        assert any("rebuilding it from the store" in r.getMessage() for r in caplog.records)
        assert mm.search_similar("violin", top_k=1, user_id="ann")[0].content == (
            "My daughter started violin lessons"
        )
