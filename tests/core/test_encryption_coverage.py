"""Encryption covers everything stored: with a key, no file holds a readable user, session,
text or vector; and a vector index the key cannot cover (Chroma) is refused, not half-used."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pytest

from harombe_core.config import load_config
from harombe_core.errors import UnencryptedIndexError
from harombe_core.manager import MemoryManager
from harombe_core.models import Message
from harombe_core.testing import FakeEmbedder

pytest.importorskip("sqlcipher3")

KEY = "correct horse battery staple"
USER = "user-quokka-7731"
SESSION = "session-narwhal-4402"
TEXTS = [
    "my locker combination is 31-17-5 at the pelican gym",
    "the surprise party for Ingrid is on the ninth of March",
]

#: Words of the texts looked for alone (8 bytes or more: a shorter run turns up by chance in
#: encrypted bytes).
WORDS = ["combination", "pelican gym", "surprise party", "of March"]


def _every_file(folder: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _needles(text: str) -> list[bytes]:
    return [text.encode("utf-8"), text.encode("utf-16-le"), text.encode("utf-16-be")]


def _stored_vectors(db: Path) -> list[bytes]:
    with MemoryManager(str(db), embedding=None, encryption_key=KEY) as mm:
        return [bytes(r[0]) for r in mm.store.query("SELECT vector FROM message_vectors")]


def _assert_nothing_readable(folder: Path, vectors: list[bytes]) -> None:
    files = _every_file(folder)
    assert files, "the memory wrote no file"
    for path, raw in files.items():
        assert not raw.startswith(b"SQLite format 3"), path  # an unencrypted SQLite file
        for secret in [USER, SESSION, *TEXTS, *WORDS]:
            for needle in _needles(secret):
                assert needle not in raw, (path, secret)
        for vector in vectors:  # every 16-byte run of a vector that is not mostly zeros
            runs = (vector[i : i + 16] for i in range(0, len(vector) - 16, 4))
            for run in (r for r in runs if r.count(0) <= 8):
                assert run not in raw, path


def test_the_default_index_keeps_every_vector_inside_the_encrypted_file(tmp_path: Path) -> None:
    db = tmp_path / "memory.db"
    with MemoryManager(str(db), embedding=FakeEmbedder(), encryption_key=KEY) as mm:
        mm.create_session(session_id=SESSION, user_id=USER)
        mm.save_messages(SESSION, [Message(role="user", content=t) for t in TEXTS])
        mm.flush()
        assert (
            mm.search_similar("locker combination", top_k=1, user_id=USER)[0].content == (TEXTS[0])
        )
        assert mm.search_similar("party for Ingrid", top_k=1)[0].content == TEXTS[1]
        open_files = set(_every_file(tmp_path))
    assert not any("chroma" in p.name for p in open_files)  # no second storage engine
    vectors = _stored_vectors(db)
    assert len(vectors) == len(TEXTS)
    assert all(np.frombuffer(v, dtype=np.float32).any() for v in vectors)
    _assert_nothing_readable(tmp_path, vectors)
    with pytest.raises(sqlite3.DatabaseError):  # without the key it is not even a database
        sqlite3.connect(db).execute("SELECT * FROM sqlite_master").fetchall()


def test_the_files_of_an_open_memory_are_encrypted_too(tmp_path: Path) -> None:
    db = tmp_path / "memory.db"
    with MemoryManager(str(db), embedding=FakeEmbedder(), encryption_key=KEY) as mm:
        mm.create_session(session_id=SESSION, user_id=USER)
        mm.save_messages(SESSION, [Message(role="user", content=t) for t in TEXTS])
        mm.flush()
        vectors = [bytes(r[0]) for r in mm.store.query("SELECT vector FROM message_vectors")]
        _assert_nothing_readable(tmp_path, vectors)  # the WAL while it is in use


@pytest.mark.parametrize("how", ["argument", "environment"])
def test_chroma_beside_an_encrypted_database_is_refused_before_anything_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    db = tmp_path / "memory.db"
    key = {"encryption_key": KEY} if how == "argument" else {}
    if how == "environment":
        monkeypatch.setenv("HAROMBE_DB_KEY", KEY)
    with pytest.raises(UnencryptedIndexError, match="vector_store='database'"):
        MemoryManager(str(db), embedding=FakeEmbedder(), vector_store="chroma", **key)
    assert list(tmp_path.iterdir()) == []  # no database, no index folder


def test_a_configured_chroma_server_beside_an_encrypted_database_is_refused(
    tmp_path: Path,
) -> None:
    config = load_config(
        {
            "memory": {"storage_path": str(tmp_path / "m.db"), "encryption_key": KEY},
            "vector_store": {"mode": "http", "port": 9},  # never reached: refused first
        }
    )
    with pytest.raises(UnencryptedIndexError):
        MemoryManager(
            str(tmp_path / "m.db"), embedding=FakeEmbedder(), config=config, encryption_key=KEY
        )


def test_a_store_opened_elsewhere_with_a_key_is_refused_chroma_too(tmp_path: Path) -> None:
    from harombe_core.store.sqlite import SQLiteStore

    store = SQLiteStore(tmp_path / "m.db", encryption_key=KEY)
    try:
        assert store.encrypted
        with pytest.raises(UnencryptedIndexError):
            MemoryManager(store, embedding=FakeEmbedder(), vector_store="chroma")
        assert not (tmp_path / "m.db.chroma").exists()
    finally:
        store.close()


def test_chroma_in_memory_is_allowed_with_a_key_it_writes_nothing(tmp_path: Path) -> None:
    pytest.importorskip("chromadb")
    config = load_config({"vector_store": {"provider": "chroma", "mode": "memory"}})
    db = tmp_path / "memory.db"
    with MemoryManager(str(db), embedding=FakeEmbedder(), config=config, encryption_key=KEY) as mm:
        mm.create_session(session_id=SESSION, user_id=USER)
        mm.save_messages(SESSION, [Message(role="user", content=t) for t in TEXTS])
        mm.flush()
        assert mm.search_similar("party for Ingrid", top_k=1)[0].content == TEXTS[1]
    _assert_nothing_readable(tmp_path, _stored_vectors(db))
