"""Ollama embeddings through its ``/api/embed`` endpoint (standard library only)."""

from __future__ import annotations

import os
from typing import Any

from harombe_core.embeddings._http import HttpEmbedder
from harombe_core.errors import InvalidInputError

__all__ = ["OllamaEmbedder"]


def _default_base_url() -> str:
    """``OLLAMA_HOST`` as Ollama itself reads it (scheme optional), else the local default."""
    host = os.environ.get("OLLAMA_HOST", "").strip()
    if not host:
        return "http://127.0.0.1:11434"
    return host if "://" in host else f"http://{host}"


class OllamaEmbedder(HttpEmbedder):
    """Embeds with a model served by Ollama (``ollama pull nomic-embed-text`` first).

    ``dimension`` is asked of the server with one short request the first time it is needed,
    unless given. ``name`` is ``ollama/<model>``. Texts go in batches of ``batch_size``.
    """

    service = "Ollama"

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        dimension: int | None = None,
        batch_size: int = 64,
        timeout: float = 120.0,
        truncate: bool = True,
    ) -> None:
        if not model or not isinstance(model, str):
            raise InvalidInputError("OllamaEmbedder needs a model name, e.g. 'nomic-embed-text'")
        self.model = model
        self.base_url = (base_url or _default_base_url()).rstrip("/")
        self._name = f"ollama/{model}"
        self._dimension_known = dimension
        self.batch_size = batch_size
        self.timeout = timeout
        self.truncate = truncate

    def _request(self, texts: list[str]) -> list[Any]:
        return self._post_list(
            "/api/embed",
            {"model": self.model, "input": texts, "truncate": self.truncate},
            "embeddings",
            len(texts),
            f"Ollama at {self.base_url} returned no 'embeddings' list of {len(texts)} vectors "
            f"for model {self.model!r} (is it an embedding model?)",
        )
