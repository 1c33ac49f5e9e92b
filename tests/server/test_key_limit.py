"""One API key may have at most ``--max-concurrent-per-key`` requests in flight: more get a
typed 429 with ``Retry-After``, other keys are not affected, and once the requests end the key
is served again at once. Requests are held in flight by their own bodies (the client sends
the rest only when told), so nothing here depends on timing."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx

from harombe_core.server.process import ServerProcess, create_key_cli


def _held_body(release: threading.Event) -> Iterator[bytes]:
    """A chunked append body whose end is sent only once ``release`` is set."""
    yield b'{"messages": [{"role": "user", '
    release.wait(120)
    yield b'"content": "held"}]}'


def test_a_key_over_its_cap_gets_429_until_its_requests_end(tmp_path: Path) -> None:
    db = str(tmp_path / "memory.db")
    ann, bob = create_key_cli(db, user="ann"), create_key_cli(db, user="bob")
    server = ServerProcess(db, extra=["--max-concurrent-per-key", "2"]).start()
    release = threading.Event()
    answers: list[int] = []

    def held(sid: str) -> None:
        with httpx.Client(base_url=server.url, timeout=120) as http:
            answer = http.post(
                f"/api/sessions/{sid}/messages",
                content=_held_body(release),
                headers={"Authorization": f"Bearer {ann}", "Content-Type": "application/json"},
            )
            answers.append(answer.status_code)

    threads = [
        threading.Thread(target=held, args=(f"held-{uuid.uuid4().hex[:8]}",)) for _ in range(2)
    ]
    try:
        for thread in threads:
            thread.start()
        with (
            httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {ann}"}) as a,
            httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {bob}"}) as b,
        ):
            refused = None
            for _ in range(6000):  # until the server has both held requests in hand
                answer = a.get("/api/me")
                if answer.status_code == 429:
                    refused = answer
                    break
                assert answer.status_code == 200
                time.sleep(0.01)
            assert refused is not None
            assert refused.headers["retry-after"] == "1"
            assert refused.json()["error"] == "TooManyRequestsError"
            assert "--max-concurrent-per-key" in refused.json()["detail"]
            assert b.get("/api/me").status_code == 200  # another key is not held up
            release.set()
            for thread in threads:
                thread.join(120)
            assert answers == [201, 201]
            assert a.get("/api/me").status_code == 200  # served again as soon as they ended
            assert len(a.get("/api/sessions").json()) == 2
    finally:
        release.set()
        server.stop()


def test_the_command_lines_default_cap_is_the_apps() -> None:
    import inspect

    from harombe_core.server.api import MAX_CONCURRENT_PER_KEY
    from harombe_core.server.cli import serve_command

    default = inspect.signature(serve_command).parameters["max_concurrent_per_key"].default
    assert default == MAX_CONCURRENT_PER_KEY == 64
