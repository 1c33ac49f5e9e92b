"""OpenAI-compatible embeddings through ``/v1/embeddings`` (standard library only).

Works with OpenAI and with servers that speak its API (vLLM, LM Studio, llama.cpp's server,
LiteLLM, Azure's compatible endpoint) by pointing ``base_url`` at them.
"""

from __future__ import annotations

import os
from typing import Any

from harombe_core.embeddings._http import HttpEmbedder
from harombe_core.errors import EmbeddingError, InvalidInputError

__all__ = ["OpenAIEmbedder"]

_KNOWN_DIMENSIONS = {
    "text-embedding-3-small": 1536,
    "text-embedding-3-large": 3072,
    "text-embedding-ada-002": 1536,
}


class OpenAIEmbedder(HttpEmbedder):
    """Embeds with an OpenAI (or compatible) embeddings endpoint.

    ``api_key`` defaults to ``OPENAI_API_KEY`` and ``base_url`` to ``OPENAI_BASE_URL`` or
    ``https://api.openai.com/v1``. ``dimensions`` asks text-embedding-3 models for shorter
    vectors (and becomes part of ``name``, since such vectors are not interchangeable).
    """

    def __init__(
        self,
        model: str = "text-embedding-3-small",
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        dimensions: int | None = None,
        batch_size: int = 256,
        timeout: float = 60.0,
    ) -> None:
        if not model or not isinstance(model, str):
            raise InvalidInputError(
                "OpenAIEmbedder needs a model name, e.g. 'text-embedding-3-small'"
            )
        if dimensions is not None and dimensions < 1:
            raise InvalidInputError(f"dimensions must be a positive int, got {dimensions}")
        self.model = model
        self.base_url = (
            base_url or os.environ.get("OPENAI_BASE_URL") or "https://api.openai.com/v1"
        ).rstrip("/")
        self.api_key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        self.dimensions = dimensions
        self._name = f"openai/{model}" + (f"@{dimensions}" if dimensions else "")
        self._dimension_known = dimensions or _KNOWN_DIMENSIONS.get(model)
        self.batch_size = batch_size
        self.timeout = timeout

    def _request(self, texts: list[str]) -> list[Any]:
        payload: dict[str, Any] = {"model": self.model, "input": texts, "encoding_format": "float"}
        if self.dimensions is not None:
            payload["dimensions"] = self.dimensions
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        data = self._post_list(
            "/embeddings",
            payload,
            "data",
            len(texts),
            f"{self.base_url}/embeddings returned no 'data' list of {len(texts)} embeddings",
            headers=headers,
            service="OpenAI embeddings endpoint",
        )
        try:
            ordered = sorted(data, key=lambda item: int(item["index"]))
            return [item["embedding"] for item in ordered]
        except (KeyError, TypeError, ValueError) as exc:
            raise EmbeddingError(
                f"{self.base_url}/embeddings answered in an unexpected format: {exc}"
            ) from exc
