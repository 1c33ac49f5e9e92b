"""Process bodies and checks shared by the vector reliability tests.

Run in child processes (``multiprocessing`` spawn context), so everything here is importable
and picklable by name. Every message is unique (a ``t<session>x<i>`` token), and searches ask
for exactly the text that was embedded for it, so with the deterministic ``FakeEmbedder`` the
message is its own nearest neighbour: presence is what these tests prove, not ranking.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from harombe_core import MemoryManager, Message
from harombe_core import folding as background
from harombe_core.testing import FakeEmbedder
from harombe_core.vectors.indexer import embedding_text

SESSIONS = 15
PER_SESSION = 100


def token(session: str, i: int) -> str:
    return f"t{session}x{i}"


def text(session: str, i: int) -> str:
    """A message unlike every other: its token and four made-up words derived from it (so
    vectors are far apart, as real messages' are, and an approximate index finds each)."""
    digest = hashlib.blake2b(token(session, i).encode(), digest_size=16).hexdigest()
    return " ".join([token(session, i), *(digest[n : n + 8] for n in range(0, 32, 8))])


def manager(path: str, **kwargs: Any) -> MemoryManager:
    """A manager with semantic memory on the fake embedder (fast, deterministic), with an
    embedded Chroma index unless told otherwise: these workers prove Chroma's folder rules
    (one owner, the tail, checks at open)."""
    kwargs.setdefault("vector_store", "chroma")
    return MemoryManager(path, embedding=FakeEmbedder(), token_counter="approximate", **kwargs)


def fill(path: str, *, semantic: bool = True) -> list[int]:
    """1,500 messages over 15 sessions of three users; flushed when ``semantic``."""
    ids: list[int] = []
    opener = (
        manager(path)
        if semantic
        else MemoryManager(path, embedding=None, token_counter="approximate")
    )
    with opener as mm:
        for s in range(SESSIONS):
            sid = f"s{s}"
            mm.create_session(session_id=sid, user_id=f"u{s % 3}")
            ids += mm.save_messages(
                sid,
                [Message(role="user", content=text(sid, i)) for i in range(PER_SESSION)],
            )
        if semantic:
            mm.flush()
    return ids


def reindex(path: str, started: str) -> None:
    """Rebuild the index (killed by the test at a random moment)."""
    with manager(path) as mm:
        Path(started).write_text("go", encoding="utf-8")
        mm.reindex(progress=False)
        Path(started).write_text("done", encoding="utf-8")


def reembed(path: str, started: str) -> None:
    """Rebuild the index running the model again (killed at a random moment)."""
    with manager(path) as mm:
        Path(started).write_text("go", encoding="utf-8")
        mm.reindex(progress=False, reembed=True)
        Path(started).write_text("done", encoding="utf-8")


def backfill(path: str, started: str) -> None:
    """Embed what was stored without semantic memory (killed at a random moment)."""
    with manager(path) as mm:
        mm._semantic.stop()  # the backfill does the work, not the background worker
        Path(started).write_text("go", encoding="utf-8")
        mm.backfill_embeddings(batch_size=50, progress=False)
        Path(started).write_text("done", encoding="utf-8")


def writer(path: str, name: str, acks: str, count: int, pause: float) -> None:
    """Save one message at a time; after each commit, append its id and session to ``acks``."""
    with manager(path) as mm, open(acks, "a", encoding="utf-8") as out:
        sid = f"{name}"
        for i in range(count):
            mid = mm.save_message(sid, Message(role="user", content=text(sid, i)))
            out.write(f"{mid} {sid} {i}\n")
            out.flush()
            if pause:
                time.sleep(pause)


def read_acks(acks: Path) -> set[int]:
    """Acknowledged message ids (a torn last line is ignored)."""
    found: set[int] = set()
    for line in acks.read_text(encoding="utf-8").splitlines():
        parts = line.split()
        if len(parts) == 3:
            found.add(int(parts[0]))
    return found


def missing_from_search(mm: MemoryManager, ids: Iterable[int]) -> list[int]:
    """Ids that vector search alone does not bring back when asked for their own text.

    The query is exactly what was embedded for the message (the turn it answers, then the
    message), so the message itself is the nearest neighbour at cosine 1: presence is tested,
    not ranking.
    """
    wanted = set(ids)
    texts: dict[int, str] = {}
    for session in mm.list_sessions(limit=None):
        previous = ""
        for message in mm.get_messages(session.id):
            if message.id in wanted:
                texts[int(message.id or 0)] = embedding_text(message, previous)
            previous = message.content
    assert set(texts) == wanted, "some acknowledged messages are not in the store"
    missing = []
    for mid, text in texts.items():
        hits = mm.search_similar(text, top_k=5, keyword_weight=0.0)
        if mid not in {m.id for m in hits}:
            missing.append(mid)
    return missing


def embedders() -> int:
    """Embedders at work in this process: each is a kind of job on the process's one
    background thread (``harombe-worker``), never a thread of its own."""
    names = [t.name for t in threading.enumerate() if t.name.startswith("harombe-")]
    assert "harombe-embedder" not in names, names
    assert names.count("harombe-worker") <= 1, names
    kinds = list(background._folders)
    return sum(1 for f in kinds if f.priority == background.VECTORS and not f._closed)


def wait_for(path: Path, text: str, process: Any, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not (path.exists() and path.read_text(encoding="utf-8") in _accept(text)):
        assert process.is_alive() or path.exists(), "the child died before it started"
        assert time.monotonic() < deadline, f"no {text!r} from the child"
        time.sleep(0.005)


def _accept(text: str) -> Iterable[str]:
    return (text, "done")
