"""Any LangChain ``Embeddings`` as a harombe ``Embedder``.

harombe's vector index needs to know a model's name and dimension (it refuses to mix vectors
of two models) and wants unit-length float32 rows; LangChain embeddings give lists of floats of
a length you only learn by calling them. This wrapper supplies the name, measures the dimension
once, validates and normalises every batch, and uses the model's own async methods for the
async twins. With ``probe=False`` the dimension is learnt from the first batch instead of a
probe call, so embeddings that only work asynchronously (an ``async def`` function wrapped by
LangGraph) are usable from async code.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from langchain_core.embeddings import Embeddings

from harombe_core.embeddings import FloatArray
from harombe_core.errors import EmbeddingError, InvalidInputError
from harombe_core.integration import NativeAsyncEmbedder
from harombe_core.validate import keywords_checked

__all__ = ["LangChainEmbedder", "as_embedder"]


class LangChainEmbedder(NativeAsyncEmbedder):
    """Wrap ``embeddings`` (e.g. ``OpenAIEmbeddings()``, ``OllamaEmbeddings(...)``).

    Args:
        embeddings: The LangChain embeddings object.
        name: Stable id recorded in the vector index; default ``langchain/<Class>/<model>``.
            Give a distinct name whenever two configurations produce different vectors.
        dimension: Vector length; measured with one call when omitted.
        probe: Measure an omitted dimension now (one sync call, so a broken model fails here);
            ``False`` learns it from the first batch embedded, sync or async.
    """

    @keywords_checked
    def __init__(
        self,
        embeddings: Embeddings,
        *,
        name: str | None = None,
        dimension: int | None = None,
        probe: bool = True,
    ) -> None:
        if not isinstance(embeddings, Embeddings):
            raise InvalidInputError(
                f"expected a LangChain Embeddings object, got {type(embeddings).__name__}."
            )
        self.embeddings = embeddings
        model = next(
            (
                str(getattr(embeddings, attr))
                for attr in ("model", "model_name", "model_id")
                if getattr(embeddings, attr, None)
            ),
            None,
        )
        self._name = name or "/".join(
            p for p in ("langchain", type(embeddings).__name__, model) if p
        )
        self._measured: int | None = None
        if dimension is None and probe:
            dimension = self._probe()
        if dimension is not None:
            self._measured = self._checked(dimension)

    @property
    def dimension(self) -> int:
        if self._measured is None:
            self._measured = self._checked(self._probe())
        return self._measured

    def _probe(self) -> int:
        try:
            return len(self.embeddings.embed_query("dimension probe"))
        except Exception as exc:  # any backend failure becomes our typed error
            raise EmbeddingError(f"{self._name} failed on a probe text: {exc}") from exc

    def _checked(self, dimension: object) -> int:
        if isinstance(dimension, bool) or not isinstance(dimension, int) or dimension <= 0:
            raise EmbeddingError(f"{self._name} reports an invalid dimension {dimension!r}.")
        return dimension

    def _learn(self, rows: Sequence[Sequence[float]]) -> None:
        """Take the dimension from the first batch when it was neither given nor probed."""
        if self._measured is None and len(rows) and hasattr(rows[0], "__len__"):
            self._measured = self._checked(len(rows[0]))

    def _embed_batch(self, texts: list[str]) -> FloatArray:
        try:
            rows = self.embeddings.embed_documents(texts)
        except Exception as exc:  # any backend failure becomes our typed error
            raise EmbeddingError(f"{self._name} failed to embed {len(texts)} texts: {exc}") from exc
        self._learn(rows)
        return np.asarray(rows, dtype=np.float32)

    async def _aembed_batch(self, texts: list[str]) -> list[list[float]]:
        try:
            rows = await self.embeddings.aembed_documents(texts)
        except Exception as exc:  # any backend failure becomes our typed error
            raise EmbeddingError(f"{self._name} failed to embed {len(texts)} texts: {exc}") from exc
        self._learn(rows)
        return rows

    async def aembed_query(self, text: str) -> FloatArray:
        if not isinstance(text, str):
            raise InvalidInputError(f"aembed_query() takes one str, got {type(text).__name__}")
        result: FloatArray = (await self.aembed([text]))[0]
        return result


def as_embedder(value: object) -> object:
    """A harombe embedder from a LangChain ``Embeddings`` (anything else is returned as is)."""
    return LangChainEmbedder(value) if isinstance(value, Embeddings) else value
