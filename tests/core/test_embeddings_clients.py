"""Ollama and OpenAI clients against a fake HTTP server on 127.0.0.1 (never the internet)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np
import pytest

from harombe_core.embeddings import (
    CachedEmbedder,
    OllamaEmbedder,
    OpenAIEmbedder,
    resolve_embedder,
)
from harombe_core.errors import EmbeddingError
from harombe_core.testing import FakeEmbedder

FAKE = FakeEmbedder(dimension=32)


@dataclass
class Behaviour:
    """What the fake server does next; tests change it and read what it received."""

    requests: list[tuple[str, dict[str, str], dict[str, Any]]] = field(default_factory=list)
    fail_next: list[int] = field(default_factory=list)  # statuses to answer before succeeding
    api_key: str | None = None
    drop_one: bool = False
    shuffle: bool = False


class _Handler(BaseHTTPRequestHandler):
    behaviour: Behaviour

    def log_message(self, format: str, *args: Any) -> None:  # keep test output clean
        return

    def _send(self, status: int, payload: Any) -> None:
        body = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        b = self.behaviour
        length = int(self.headers.get("Content-Length", "0"))
        payload = json.loads(self.rfile.read(length))
        b.requests.append((self.path, dict(self.headers), payload))
        if b.fail_next:
            self._send(b.fail_next.pop(0), {"error": "temporary trouble"})
            return
        texts = payload["input"] if isinstance(payload["input"], list) else [payload["input"]]
        vectors = FAKE.embed(texts).tolist()
        if b.drop_one:
            vectors = vectors[:-1]
        if self.path == "/api/embed":
            if payload.get("model") != "nomic-embed-text":
                self._send(404, {"error": f"model {payload.get('model')!r} not found"})
                return
            self._send(200, {"model": payload["model"], "embeddings": vectors})
        elif self.path == "/v1/embeddings":
            if b.api_key and self.headers.get("Authorization") != f"Bearer {b.api_key}":
                self._send(401, {"error": {"message": "Incorrect API key provided"}})
                return
            if payload.get("dimensions"):
                vectors = [v[: payload["dimensions"]] for v in vectors]
            data = [
                {"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)
            ]
            if b.shuffle:
                data.reverse()  # the API does not promise order: clients must sort by index
            self._send(200, {"object": "list", "data": data, "model": payload["model"]})
        else:
            self._send(404, {"error": "no such route"})


@pytest.fixture
def server() -> Iterator[tuple[str, Behaviour]]:
    behaviour = Behaviour()
    handler = type("Handler", (_Handler,), {"behaviour": behaviour})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", behaviour
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()


def test_ollama_embeds_in_batches(server: tuple[str, Behaviour]) -> None:
    url, behaviour = server
    embedder = OllamaEmbedder("nomic-embed-text", base_url=url, batch_size=2)
    texts = ["hello there", "general kenobi", "a third text"]
    vectors = embedder.embed(texts)
    np.testing.assert_allclose(vectors, FAKE.embed(texts), atol=1e-6)
    assert [r[2]["input"] for r in behaviour.requests] == [texts[:2], texts[2:]]
    assert all(r[0] == "/api/embed" for r in behaviour.requests)
    assert embedder.name == "ollama/nomic-embed-text"
    assert embedder.dimension == 32  # learnt from the first answer: no extra request
    assert len(behaviour.requests) == 2
    probing = OllamaEmbedder("nomic-embed-text", base_url=url)
    assert probing.dimension == 32  # asked before any embedding: one short probe
    assert len(behaviour.requests) == 3
    assert embedder.embed([]).shape == (0, 32)


def test_ollama_host_env_and_resolve(
    server: tuple[str, Behaviour], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, _ = server
    monkeypatch.setenv("OLLAMA_HOST", url.removeprefix("http://"))
    embedder = resolve_embedder("ollama:nomic-embed-text")
    assert isinstance(embedder, CachedEmbedder)  # remote calls are cached by default
    assert isinstance(embedder.inner, OllamaEmbedder)
    assert embedder.inner.base_url == url
    assert embedder.embed_query("hi").shape == (32,)
    assert embedder.embed_query("hi").shape == (32,)
    assert embedder.hits == 1
    assert isinstance(resolve_embedder("ollama:nomic-embed-text", cache=False), OllamaEmbedder)


def test_ollama_unknown_model_is_a_clear_error(server: tuple[str, Behaviour]) -> None:
    url, _ = server
    with pytest.raises(EmbeddingError, match=r"HTTP 404.*model exists"):
        OllamaEmbedder("not-pulled", base_url=url, dimension=32).embed(["x"])


def test_openai_sorts_by_index_and_sends_the_key(server: tuple[str, Behaviour]) -> None:
    url, behaviour = server
    behaviour.api_key, behaviour.shuffle = "sk-test", True
    embedder = OpenAIEmbedder("local-embedder", base_url=f"{url}/v1", api_key="sk-test")
    texts = ["first", "second", "third"]
    np.testing.assert_allclose(embedder.embed(texts), FAKE.embed(texts), atol=1e-6)
    path, headers, payload = behaviour.requests[0]
    assert path == "/v1/embeddings"
    assert headers["Authorization"] == "Bearer sk-test"
    assert payload == {"model": "local-embedder", "input": texts, "encoding_format": "float"}
    assert embedder.name == "openai/local-embedder"
    assert embedder.dimension == 32


def test_openai_dimensions_change_the_name(server: tuple[str, Behaviour]) -> None:
    url, behaviour = server
    embedder = OpenAIEmbedder("text-embedding-3-small", base_url=f"{url}/v1", dimensions=16)
    assert embedder.name == "openai/text-embedding-3-small@16"
    assert embedder.dimension == 16
    vectors = embedder.embed(["several words here", "and a few more over there"])
    assert vectors.shape == (2, 16)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)  # renormalised
    assert behaviour.requests[0][2]["dimensions"] == 16


def test_openai_wrong_key_is_a_clear_error(server: tuple[str, Behaviour]) -> None:
    url, behaviour = server
    behaviour.api_key = "sk-right"
    embedder = OpenAIEmbedder("text-embedding-3-small", base_url=f"{url}/v1", api_key="sk-wrong")
    with pytest.raises(EmbeddingError, match=r"HTTP 401.*API key"):
        embedder.embed(["x"])


def test_transient_errors_are_retried(server: tuple[str, Behaviour]) -> None:
    url, behaviour = server
    behaviour.fail_next = [503, 429]
    embedder = OpenAIEmbedder("m", base_url=f"{url}/v1", dimensions=32)
    assert embedder.embed(["x"]).shape == (1, 32)
    assert len(behaviour.requests) == 3
    behaviour.fail_next = [500, 500, 500]
    with pytest.raises(EmbeddingError, match="HTTP 500"):
        embedder.embed(["y"])


def test_wrong_count_is_an_error(server: tuple[str, Behaviour]) -> None:
    url, behaviour = server
    behaviour.drop_one = True
    with pytest.raises(EmbeddingError, match="2 vectors"):
        OllamaEmbedder("nomic-embed-text", base_url=url, dimension=32).embed(["a", "b"])
    with pytest.raises(EmbeddingError, match="2 embeddings"):
        OpenAIEmbedder("m", base_url=f"{url}/v1", dimensions=32).embed(["a", "b"])


def test_wrong_dimension_is_an_error(server: tuple[str, Behaviour]) -> None:
    url, _ = server
    with pytest.raises(EmbeddingError, match=r"shape \(1, 32\), expected \(1, 64\)"):
        OllamaEmbedder("nomic-embed-text", base_url=url, dimension=64).embed(["a"])


def test_unreachable_server_is_a_clear_error() -> None:
    import socket

    with socket.socket() as sock:  # a port that was free a moment ago: nothing listens there
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    embedder = OllamaEmbedder("nomic-embed-text", base_url=f"http://127.0.0.1:{port}", dimension=8)
    with pytest.raises(EmbeddingError, match="cannot reach Ollama"):
        embedder.embed(["x"])


async def test_async_client_inside_a_running_loop(server: tuple[str, Behaviour]) -> None:
    url, _ = server
    embedder = resolve_embedder("openai:text-embedding-3-small", cache=True)
    assert embedder.name == "openai/text-embedding-3-small"
    client = OpenAIEmbedder("m", base_url=f"{url}/v1", dimensions=32)
    vectors = await client.aembed(["one", "two"])
    np.testing.assert_allclose(vectors, FAKE.embed(["one", "two"]), atol=1e-6)
    query = await client.aembed_query("one")
    np.testing.assert_allclose(query, vectors[0], atol=1e-6)


def test_printing_a_client_makes_no_request(server: tuple[str, Behaviour]) -> None:
    """repr/str never ask the server for the dimension; they show it once it is known."""
    url, behaviour = server
    ollama = OllamaEmbedder("nomic-embed-text", base_url=url)
    openai = OpenAIEmbedder("some-compatible-model", base_url=f"{url}/v1")
    shown = [repr(ollama), str(ollama), repr(openai), repr(CachedEmbedder(ollama))]
    assert behaviour.requests == []
    assert shown[0] == f"OllamaEmbedder(name='ollama/nomic-embed-text', base_url='{url}')"
    assert "dimension" not in shown[2]
    assert shown[3].startswith("CachedEmbedder(OllamaEmbedder(")
    ollama.embed(["learn the size"])
    assert "dimension=32" in repr(ollama)
    assert len(behaviour.requests) == 1
