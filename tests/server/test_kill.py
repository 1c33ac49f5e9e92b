"""A SIGKILL of ``harombe serve`` in the middle of a load loses no acknowledged write: every
message whose id the server returned is there, with its content, when a new server starts on
the same database. Bounded by count: the kill comes after a fixed number of acknowledgements,
and each client stops at its first failed request or after a fixed number of writes."""

from __future__ import annotations

import threading

import httpx
import pytest

from harombe_core.manager import MemoryManager
from harombe_core.server import HarombeClient, HarombeServerError
from harombe_core.server.keys import create_key
from harombe_core.server.process import ServerProcess

CLIENTS = 8
KILL_AFTER = 150  # acknowledged writes before the kill
MOST = 400  # writes per client at most (the kill comes long before)


def _keys(db: str) -> list[str]:
    with MemoryManager(db, embedding=None) as manager:
        return [create_key(manager.store, user_id=f"u{i}")[0] for i in range(CLIENTS)]


def _kill_mid_load(db: str) -> None:
    keys = _keys(db)
    server = ServerProcess(db).start()
    acked: list[dict[int, str]] = [{} for _ in keys]
    lock = threading.Lock()
    count = 0
    enough = threading.Event()

    alive = CLIENTS

    def client(i: int) -> None:
        nonlocal alive
        try:
            load(i)
        finally:
            with lock:
                alive -= 1
                if alive == 0:  # every client stopped early: do not wait for the count
                    enough.set()

    def load(i: int) -> None:
        nonlocal count
        with HarombeClient(server.url, api_key=keys[i], timeout=60) as http:
            for n in range(MOST):
                content = f"client {i} write {n}"
                try:
                    ids = http.save_messages(f"k{i}", [{"role": "user", "content": content}])
                except (httpx.HTTPError, HarombeServerError):
                    return  # the server is gone: what was acknowledged must be kept
                acked[i][ids[0]] = content
                with lock:
                    count += 1
                    if count >= KILL_AFTER:
                        enough.set()

    threads = [threading.Thread(target=client, args=(i,)) for i in range(CLIENTS)]
    for thread in threads:
        thread.start()
    enough.wait()
    server.kill()
    for thread in threads:
        thread.join()
    assert sum(len(a) for a in acked) >= KILL_AFTER

    with ServerProcess(db) as again:
        for i, key in enumerate(keys):
            with HarombeClient(again.url, api_key=key) as http:
                stored = {m["id"]: m["content"] for m in http.get_messages(f"k{i}")}
            lost = {mid: text for mid, text in acked[i].items() if stored.get(mid) != text}
            assert not lost, f"client {i} lost acknowledged writes: {lost}"


def test_sigkill_mid_load_loses_no_acknowledged_write_sqlite(fresh_db: str) -> None:
    _kill_mid_load(fresh_db)


@pytest.mark.slow
def test_sigkill_mid_load_loses_no_acknowledged_write_postgres(pg_server: object) -> None:
    _kill_mid_load(pg_server.create_database("killed"))  # type: ignore[attr-defined]
