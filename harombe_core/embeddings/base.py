"""The ``Embedder`` protocol: what every embedding backend promises the rest of harombe.

The vector index records ``name`` and ``dimension`` beside the vectors it stores, so two
embedders whose vectors are not interchangeable (another model, another pooling, another
precision that changes the geometry) must report different names; opening an index with a
different embedder is then a clear error instead of silently meaningless similarities.

Every embedder returns float32, L2-normalised rows, so cosine similarity is a dot product and
every backend is interchangeable for the code above it.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import weakref
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from harombe_core.errors import ConfigError, EmbeddingError, InvalidInputError
from harombe_core.flows import off_loop

__all__ = [
    "BaseEmbedder",
    "Embedder",
    "FloatArray",
    "NativeAsyncEmbedder",
    "aidentity",
    "check_texts",
    "identity",
    "legacy_name",
    "normalize_rows",
    "one_text",
    "validate_vectors",
]

FloatArray = npt.NDArray[np.float32]

#: The text every embedder embeds once to tell its vectors from another's of the same name.
IDENTITY_PROBE = "harombe identity probe: the quick brown fox jumps over the lazy dog"
_IDENTITY = re.compile(r"@\d+:[0-9a-f]{16}$")
_identities: weakref.WeakKeyDictionary[object, str] = weakref.WeakKeyDictionary()


def _identity_of(name: str, probe: FloatArray) -> str:
    """``name@dimension:fingerprint``: the fingerprint hashes the probe's vector rounded to
    two decimals (what another model changes; not the last bits a BLAS build may)."""
    vector = np.asarray(probe, dtype=np.float32).ravel()
    rounded = np.round(vector * 100).astype(np.int16).tobytes()
    return f"{name}@{vector.shape[0]}:{hashlib.sha256(rounded).hexdigest()[:16]}"


def _cached(embedder: object) -> str | None:
    try:
        return _identities.get(embedder)
    except TypeError:  # neither hashable nor weakly referenceable: computed each time
        return None


def _remember(embedder: object, found: str) -> str:
    with contextlib.suppress(TypeError):  # not weakly referenceable: not cached
        _identities[embedder] = found
    return found


def identity(embedder: Embedder) -> str:
    """What a stored vector records as the model that made it: ``name``, dimension and a
    fingerprint of the embedding of a fixed probe text, so two embedders of one name (two
    lambdas of one module, a model swapped behind a name) are told apart. Embeds the probe
    once per embedder object (cached while it lives)."""
    found = _cached(embedder)
    if found is None:
        found = _remember(
            embedder, _identity_of(embedder.name, embedder.embed_query(IDENTITY_PROBE))
        )
    return found


async def aidentity(embedder: Embedder) -> str:
    """:func:`identity` with the embedder's async method (the event loop is not blocked)."""
    found = _cached(embedder)
    if found is None:
        probe = await embedder.aembed_query(IDENTITY_PROBE)
        found = _remember(embedder, _identity_of(embedder.name, probe))
    return found


def legacy_name(model: str) -> str | None:
    """The bare embedder name vectors were recorded with before :func:`identity` (``None``
    if ``model`` is not an identity): such vectors are still compared, as they were."""
    return model[: model.rindex("@")] if _IDENTITY.search(model) else None


@runtime_checkable
class Embedder(Protocol):
    """Turns text into unit-length float32 vectors.

    ``embed(texts)`` returns shape ``(len(texts), dimension)``; an empty sequence gives
    ``(0, dimension)``. ``embed_query`` (alias ``embed_single``) returns one 1-D vector.
    ``aembed`` / ``aembed_query`` are the async twins and never block the event loop.
    Failures raise :class:`~harombe_core.errors.EmbeddingError`.
    """

    @property
    def name(self) -> str:
        """Stable id the vector index records, e.g. ``sentence-transformers/all-MiniLM-L6-v2``."""
        ...

    @property
    def dimension(self) -> int:
        """Length of every vector this embedder returns."""
        ...

    def embed(self, texts: Sequence[str]) -> FloatArray:
        """Embed a batch: float32, shape ``(n, dimension)``, L2-normalised rows."""
        ...

    def embed_query(self, text: str) -> FloatArray:
        """Embed one text: float32, shape ``(dimension,)``, unit length."""
        ...

    def embed_single(self, text: str) -> FloatArray:
        """Alias of :meth:`embed_query`."""
        ...

    async def aembed(self, texts: Sequence[str]) -> FloatArray:
        """Async twin of :meth:`embed`."""
        ...

    async def aembed_query(self, text: str) -> FloatArray:
        """Async twin of :meth:`embed_query`."""
        ...


def check_texts(texts: Sequence[str]) -> list[str]:
    """Validate the input of ``embed``: a sequence of ``str`` (a bare string is a common slip)."""
    if isinstance(texts, str):
        raise InvalidInputError(
            "embed() takes a sequence of strings, not one string; use embed_query(text) "
            "for a single text or wrap it in a list"
        )
    items = list(texts)
    for i, text in enumerate(items):
        if not isinstance(text, str):
            raise InvalidInputError(
                f"embed() item {i} is {type(text).__name__}, not str; pass text only"
            )
    return items


def normalize_rows(vectors: npt.ArrayLike) -> FloatArray:
    """Return ``vectors`` as float32 with unit-length rows (zero rows stay zero)."""
    array = np.asarray(vectors, dtype=np.float32)
    if array.ndim != 2:
        raise EmbeddingError(f"expected a 2-D array of vectors, got shape {array.shape}")
    norms = np.linalg.norm(array, axis=1, keepdims=True)
    norms[norms == 0.0] = 1.0
    return np.ascontiguousarray(array / norms, dtype=np.float32)


def validate_vectors(vectors: npt.ArrayLike, count: int, dimension: int, source: str) -> FloatArray:
    """Check a backend's output: ``count`` finite rows of ``dimension``, then normalise them.

    Backends are outside our control (a remote server, a user's model), so a wrong shape or a
    NaN is caught here with a message naming the backend, not three layers up in the index.
    """
    array = np.asarray(vectors, dtype=np.float32)
    if count == 0:
        return np.zeros((0, dimension), dtype=np.float32)
    if array.ndim != 2 or array.shape != (count, dimension):
        raise EmbeddingError(
            f"{source} returned vectors of shape {array.shape}, expected ({count}, {dimension}); "
            "check that the model and its configured dimension match"
        )
    if not np.isfinite(array).all():
        raise EmbeddingError(f"{source} returned NaN or infinite values; the model output is bad")
    return normalize_rows(array)


def one_text(text: object, method: str) -> str:
    """``text`` when it is one str; else the error that points a batch to the batch method."""
    if not isinstance(text, str):
        batch = method.removesuffix("_query")
        raise InvalidInputError(
            f"{method}() takes one str, got {type(text).__name__}; use {batch}() for a batch"
        )
    return text


class BaseEmbedder:
    """Shared plumbing: subclasses implement ``_embed_batch`` on validated, non-empty input.

    Input checking, empty input, shape validation, normalisation, the query alias and the async
    twins are written once here, so each backend is only the code that talks to its model.
    """

    _name: str
    _dimension: int

    @property
    def name(self) -> str:
        return self._name

    @property
    def dimension(self) -> int:
        return self._dimension

    def _embed_batch(self, texts: list[str]) -> npt.ArrayLike:  # pragma: no cover - abstract
        raise NotImplementedError

    def embed(self, texts: Sequence[str]) -> FloatArray:
        items = check_texts(texts)
        if not items:
            return np.zeros((0, self.dimension), dtype=np.float32)
        return validate_vectors(self._embed_batch(items), len(items), self.dimension, self.name)

    def embed_query(self, text: str) -> FloatArray:
        result: FloatArray = self.embed([one_text(text, "embed_query")])[0]
        return result

    def embed_single(self, text: str) -> FloatArray:
        return self.embed_query(text)

    async def aembed(self, texts: Sequence[str]) -> FloatArray:
        # Model inference is CPU-bound and releases the GIL in torch/onnxruntime: a worker
        # thread keeps the event loop responsive.
        items = check_texts(texts)
        return await off_loop(self.embed, items)

    async def aembed_query(self, text: str) -> FloatArray:
        return await off_loop(self.embed_query, text)

    def _repr_fields(self) -> dict[str, object]:
        """What the repr shows: only what is known without a model load or a network call.

        Backends that learn their dimension from the model or a server override this with the
        dimension they know so far (None until then), so printing an embedder costs nothing.
        """
        return {"name": self.name, "dimension": getattr(self, "_dimension", None)}

    def __repr__(self) -> str:
        shown = ", ".join(f"{k}={v!r}" for k, v in self._repr_fields().items() if v is not None)
        return f"{type(self).__name__}({shown})"


class NativeAsyncEmbedder(BaseEmbedder):
    """A backend with its own async batch call (a framework's embeddings object, which may be
    a network client): :meth:`aembed` awaits :meth:`_aembed_batch` on the event loop instead of
    running the sync path in a worker thread, with the same checks as :meth:`embed`.
    """

    async def _aembed_batch(self, texts: list[str]) -> npt.ArrayLike:  # pragma: no cover
        raise NotImplementedError

    async def aembed(self, texts: Sequence[str]) -> FloatArray:
        items = check_texts(texts)
        if not items:
            return np.zeros((0, self.dimension), dtype=np.float32)
        rows = await self._aembed_batch(items)
        return validate_vectors(rows, len(items), self.dimension, self.name)


_DEVICE = re.compile(r"cpu|cuda(:\d+)?|mps")


def forced_device() -> str | None:
    """The device ``HAROMBE_DEVICE`` names, or None when it is unset or empty.

    Checked here, once for every backend, because a misspelt value ("gpu", "cuda0") used to be
    taken silently: the ONNX path read anything but ``cuda...`` as the CPU, and
    sentence-transformers failed later, deep inside torch, on the first embedding.

    Raises :class:`~harombe_core.errors.ConfigError` naming the variable and the values it takes.
    """
    value = os.environ.get("HAROMBE_DEVICE", "").strip()
    if not value:
        return None
    if not _DEVICE.fullmatch(value):
        raise ConfigError(
            f"HAROMBE_DEVICE={value!r} is not a device: use cpu, cuda, cuda:N (a GPU's index) "
            "or mps, or unset it to let harombe choose"
        )
    return value
