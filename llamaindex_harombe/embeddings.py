"""Any LlamaIndex ``BaseEmbedding`` as a harombe :class:`~harombe_core.embeddings.Embedder`.

An application that already configured an embedding model for LlamaIndex (``Settings.embed_model``,
an OpenAI or HuggingFace embedding, ``MockEmbedding`` in tests) can give harombe the same model::

    MemoryManager(path, embedding=LlamaIndexEmbedder(Settings.embed_model))

Queries go through the model's query embedding and stored messages through its text embedding,
since instruction-tuned models embed the two differently. Vectors are normalised, as every harombe
embedder's are, so cosine similarity is a dot product.
"""

from __future__ import annotations

import numpy as np
from llama_index.core.base.embeddings.base import BaseEmbedding

from harombe_core.embeddings import FloatArray
from harombe_core.errors import EmbeddingError, InvalidInputError
from harombe_core.integration import NativeAsyncEmbedder, validate_vectors

__all__ = ["LlamaIndexEmbedder"]


class LlamaIndexEmbedder(NativeAsyncEmbedder):
    """Wraps ``embed_model``; ``dimension`` is measured once if not given.

    ``name`` is ``llamaindex:<class>:<model_name>`` so that a vector index built with one model
    refuses to open with another.
    """

    def __init__(self, embed_model: BaseEmbedding, *, dimension: int | None = None) -> None:
        if not isinstance(embed_model, BaseEmbedding):
            raise InvalidInputError(
                "embed_model must be a llama_index BaseEmbedding, got "
                f"{type(embed_model).__name__}."
            )
        self.embed_model = embed_model
        self._name = f"llamaindex:{embed_model.class_name()}:{embed_model.model_name}"
        if dimension is None:
            probe = self._call(lambda: [embed_model.get_text_embedding("dimension probe")])
            dimension = len(probe[0])
        if isinstance(dimension, bool) or not isinstance(dimension, int) or dimension <= 0:
            raise InvalidInputError(f"dimension must be a positive int, got {dimension!r}.")
        self._dimension = dimension

    def _call(self, fn: object) -> list[list[float]]:
        try:
            result = fn()  # type: ignore[operator]
        except Exception as exc:  # a provider's own error, re-raised typed with its cause
            raise EmbeddingError(f"{self._name} failed: {exc}") from exc
        return list(result)

    def _embed_batch(self, texts: list[str]) -> FloatArray:
        vectors = self._call(lambda: self.embed_model.get_text_embedding_batch(texts))
        return np.asarray(vectors, dtype=np.float32)

    def embed_query(self, text: str) -> FloatArray:
        if not isinstance(text, str):
            raise InvalidInputError(f"embed_query() takes one str, got {type(text).__name__}.")
        vector = self._call(lambda: [self.embed_model.get_query_embedding(text)])
        result: FloatArray = validate_vectors(vector, 1, self.dimension, self.name)[0]
        return result

    async def _aembed_batch(self, texts: list[str]) -> list[list[float]]:
        try:
            return await self.embed_model.aget_text_embedding_batch(texts)
        except Exception as exc:
            raise EmbeddingError(f"{self._name} failed: {exc}") from exc

    async def aembed_query(self, text: str) -> FloatArray:
        if not isinstance(text, str):
            raise InvalidInputError(f"aembed_query() takes one str, got {type(text).__name__}.")
        try:
            vector = await self.embed_model.aget_query_embedding(text)
        except Exception as exc:
            raise EmbeddingError(f"{self._name} failed: {exc}") from exc
        result: FloatArray = validate_vectors([vector], 1, self.dimension, self.name)[0]
        return result
