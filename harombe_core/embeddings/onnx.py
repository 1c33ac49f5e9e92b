"""ONNX Runtime backend: the same sentence-transformers model, about twice as fast on CPU.

The model's graph is built once from its safetensors (:mod:`harombe_core.embeddings.onnx_graph`:
BERT written op by op in standard operators, which onnxruntime fuses as it loads them, pooling
and normalisation inside), with no torch, and cached on disk; after that only ``onnxruntime``,
``tokenizers`` and numpy run. Texts are tokenized with the model's own fast tokenizer, sorted
by length and batched so little time goes on padding. A model that is not a BERT encoder is
exported with torch instead, where torch is installed (the ``st`` extra).

The cache (:func:`cache_dir`) holds one file per model, in a folder named by a hash of the
model's content (weights, config, pooling, build version), so every virtual environment with
the same model shares it. Intermediate files live in a scratch folder that is removed once
the final file is in place, and every file appears by an atomic rename: several processes
building at once each finish with a whole file, never a torn one. The first build says so in
a log line (it takes a few seconds; every later start reads the cached file).

At full precision the vectors match sentence-transformers to float rounding (cosine > 0.9999),
so the embedder keeps the model's name and an index built by either backend serves both.
``quantize=True`` uses int8 dynamic quantisation: faster again, vectors a little different,
so it reports a different name (``...#int8``) and never mixes into a full-precision index.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
import threading
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from harombe_core.embeddings.base import BaseEmbedder, FloatArray
from harombe_core.errors import EmbeddingError, InvalidInputError, MissingExtraError, requires_extra

if TYPE_CHECKING:
    import onnxruntime
    from tokenizers import Tokenizer

__all__ = ["OnnxEmbedder", "cache_dir", "export_onnx", "onnx_available"]

_log = logging.getLogger(__name__)

_EXPORT_VERSION = "5"  # bump when the built graph changes, so old caches are not reused
_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


def onnx_available() -> bool:
    """True when onnxruntime and tokenizers are importable (the ``onnx`` extra)."""
    import importlib.util

    return all(importlib.util.find_spec(m) is not None for m in ("onnxruntime", "tokenizers"))


def cache_dir() -> Path:
    """Where exported models live: ``HAROMBE_CACHE_DIR``, else ``$XDG_CACHE_HOME/harombe``."""
    explicit = os.environ.get("HAROMBE_CACHE_DIR")
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or "~/.cache"
    return Path(base).expanduser() / "harombe"


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise EmbeddingError(f"cannot read {path}: {exc}") from exc
    return data if isinstance(data, dict) else {}


def _pooling_mode(model_dir: Path) -> str:
    """The sentence-transformers pooling of this model: ``mean`` or ``cls`` (others refused)."""
    config = _read_json(model_dir / "1_Pooling" / "config.json")
    if not config or config.get("pooling_mode_mean_tokens"):
        return "mean"
    if config.get("pooling_mode_cls_token"):
        return "cls"
    raise EmbeddingError(
        f"the model in {model_dir} uses a pooling the ONNX backend does not implement "
        "(only mean and CLS pooling); use the sentence-transformers backend ('st:<path>')"
    )


#: The files of a model directory whose content decides what the export contains.
_CONTENT_FILES = ("model.safetensors", "pytorch_model.bin", "config.json")
#: A scratch folder older than this is left over from a killed conversion and is removed.
_STALE_SCRATCH_SECONDS = 6 * 3600


def _replace_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` by an atomic rename (readers see the old or the new file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=path.name, suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp_name, path)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise


def content_key(files: list[Path], salt: str) -> str:
    """A SHA-256 of ``salt`` and the content of ``files``: the cache key of what is converted
    from them, the same wherever (in whichever virtual environment) the files are installed.

    Hashing 90 MB of weights costs a few tenths of a second, so the result is remembered in
    the cache under the files' paths, sizes and modification times; files that change
    (another size or time) are hashed again.
    """
    stamp = "|".join(
        [salt, *(f"{p.resolve()}:{p.stat().st_size}:{p.stat().st_mtime_ns}" for p in files)]
    )
    memo = cache_dir() / "onnx" / "keys" / hashlib.sha256(stamp.encode()).hexdigest()[:32]
    try:
        known = memo.read_text(encoding="utf-8").strip()
    except OSError:
        known = ""
    if len(known) == 32 and all(c in "0123456789abcdef" for c in known):
        return known
    digest = hashlib.sha256(salt.encode())
    for path in files:
        digest.update(f"|{path.name}|".encode())
        with path.open("rb") as handle:
            digest.update(hashlib.file_digest(handle, "sha256").digest())
    key = digest.hexdigest()[:32]
    try:
        _replace_text(memo, key)
    except OSError as exc:  # a read-only cache still works, it only hashes every time
        _log.debug("cannot remember the model hash in %s: %s", memo, exc)
    return key


def _remove_stale_scratch(folder: Path) -> None:
    """Delete scratch folders that a killed conversion left behind (not a running one's)."""
    import shutil
    import time

    for scratch in folder.glob(".convert-*"):
        try:
            old = time.time() - scratch.stat().st_mtime > _STALE_SCRATCH_SECONDS
        except OSError:
            continue
        if old:
            shutil.rmtree(scratch, ignore_errors=True)


def export_onnx(model_dir: Path, target: Path, pooling: str = "mean") -> Path:
    """Export ``model_dir`` (a Hugging Face encoder) to ``target`` with torch.

    Only for models :func:`~harombe_core.embeddings.onnx_graph.build_bert_graph` cannot build
    (not a BERT encoder); the bundled model never comes here. The graph takes ``input_ids``,
    ``attention_mask``, ``token_type_ids`` and returns ``embedding``: pooled and
    L2-normalised, so inference needs nothing but onnxruntime.
    Written to a temporary file and renamed, so a crash or a concurrent export never leaves a
    half-written model behind. Needs torch, transformers and onnx (only at export time).
    """
    with requires_extra(
        "exporting a model to ONNX (done once, then cached)", extra="st", module="torch"
    ):
        import torch
        from transformers import AutoModel
    with requires_extra("exporting a model to ONNX", extra="onnx", module="onnx"):
        import onnx  # noqa: F401  (torch.onnx.export needs it)

    from transformers.utils import logging as hf_logging

    # Eager attention traces to plain ops that every onnxruntime runs; sdpa does not. The
    # one-time export should not print a weights-loading bar into the caller's output.
    bar = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        model = AutoModel.from_pretrained(
            str(model_dir), local_files_only=True, attn_implementation="eager"
        ).eval()
    finally:
        if bar:
            hf_logging.enable_progress_bar()

    class _Pooled(torch.nn.Module):
        def __init__(self, encoder: Any) -> None:
            super().__init__()
            self.encoder = encoder

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            hidden = self.encoder(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            ).last_hidden_state
            if pooling == "cls":
                pooled = hidden[:, 0]
            else:
                mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
                pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(pooled, p=2.0, dim=-1)

    # Two rows of different lengths so nothing about batch or padding is baked into the trace.
    ids = torch.tensor([[101, 7592, 2088, 102], [101, 7592, 102, 0]], dtype=torch.long)
    mask = (ids != 0).to(torch.long)
    types = torch.zeros_like(ids)
    dynamic = {"0": "batch", "1": "sequence"}
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=target.name, suffix=".tmp", dir=target.parent)
    os.close(fd)
    try:
        with warnings.catch_warnings(), torch.no_grad():
            # The legacy TorchScript exporter warns about itself and about traced shape checks
            # in transformers' mask helpers; the graph is verified against the reference in
            # the test suite, so these warnings carry no news for a user.
            warnings.simplefilter("ignore")
            torch.onnx.export(
                _Pooled(model),
                (ids, mask, types),
                tmp_name,
                input_names=list(_INPUTS),
                output_names=["embedding"],
                dynamic_axes={
                    **{name: {0: dynamic["0"], 1: dynamic["1"]} for name in _INPUTS},
                    "embedding": {0: "batch"},
                },
                opset_version=17,
                do_constant_folding=True,
                dynamo=False,
            )
        os.replace(tmp_name, target)
    except RuntimeError as exc:  # torch's OnnxExporterError is one too
        Path(tmp_name).unlink(missing_ok=True)
        raise EmbeddingError(
            f"could not export {model_dir} to ONNX with torch {torch.__version__}: {exc}. "
            "Use the sentence-transformers backend ('st') instead"
        ) from exc
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise
    return target


def quantize_onnx(source: Path, target: Path) -> Path:
    """int8 dynamic quantisation of the weights (activations stay float)."""
    with requires_extra("int8 quantisation", extra="onnx", module="onnx"):
        from onnxruntime.quantization import QuantType, quantize_dynamic
    fd, tmp_name = tempfile.mkstemp(prefix=target.name, suffix=".tmp", dir=target.parent)
    os.close(fd)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            # Per-channel scales keep cosine to the full model near 0.99; per-tensor scales
            # measured about 0.95 on chat text, which reorders neighbours.
            quantize_dynamic(str(source), tmp_name, weight_type=QuantType.QInt8, per_channel=True)
        os.replace(tmp_name, target)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise
    return target


class OnnxEmbedder(BaseEmbedder):
    """Embeds with ONNX Runtime on CPU; default model: the bundled all-MiniLM-L6-v2.

    ``model`` is a sentence-transformers model directory (exported to ONNX on first use and
    cached under :func:`cache_dir`) or a ready ``.onnx`` file whose graph returns pooled
    ``embedding`` (then the tokenizer is read from the same directory). ``threads`` sets
    onnxruntime's intra-op threads (default: all cores). Texts of similar length run together,
    at most ``batch_size`` of them and ``batch_tokens`` tokens once padded (measured on 2 cores:
    small batches whose activations stay in cache embed more texts per CPU-second than 32
    texts of a hundred tokens).
    """

    def __init__(
        self,
        model: str | os.PathLike[str] | None = None,
        *,
        quantize: bool = False,
        threads: int | None = None,
        batch_size: int = 32,
        batch_tokens: int = 512,
        max_length: int | None = None,
        name: str | None = None,
    ) -> None:
        if not onnx_available():
            raise MissingExtraError("ONNX embeddings", extra="onnx", module="onnxruntime")
        if batch_size < 1 or batch_tokens < 1:
            raise InvalidInputError(
                f"batch_size and batch_tokens must be >= 1, got {batch_size} and {batch_tokens}"
            )
        from harombe_core.embeddings.sentence_transformers import BUNDLED_NAME, bundled_model_path

        if model is None:
            source = bundled_model_path()
            default_name = BUNDLED_NAME
        else:
            source = Path(os.fspath(model)).expanduser()
            if not source.exists():
                raise EmbeddingError(
                    f"no model at {source}: pass a sentence-transformers model directory or an "
                    ".onnx file (models are never downloaded at run time)"
                )
            bundled = bundled_model_path().resolve()
            default_name = BUNDLED_NAME if source.resolve() == bundled else str(source.resolve())
        self._onnx_file: Path | None = source if source.suffix == ".onnx" else None
        self._model_dir = source.parent if self._onnx_file else source
        if not (self._model_dir / "tokenizer.json").exists():
            raise EmbeddingError(
                f"{self._model_dir} has no tokenizer.json (a fast tokenizer is needed); "
                "use the sentence-transformers backend for this model"
            )
        self._pooling = _pooling_mode(self._model_dir)
        self.quantize = quantize
        self._name = name or (default_name + ("#int8" if quantize else ""))
        self._dimension = self._read_dimension()
        st_config = _read_json(self._model_dir / "sentence_bert_config.json")
        self.max_length = int(max_length or st_config.get("max_seq_length") or 256)
        self.batch_size = batch_size
        self.batch_tokens = batch_tokens
        self.threads = threads
        self._session: onnxruntime.InferenceSession | None = None
        self._tokenizer: Tokenizer | None = None
        self._pad_id = 0
        self._lock = threading.Lock()

    def _read_dimension(self) -> int:
        pooling = _read_json(self._model_dir / "1_Pooling" / "config.json")
        config = _read_json(self._model_dir / "config.json")
        size = pooling.get("word_embedding_dimension") or config.get("hidden_size")
        if not size:
            raise EmbeddingError(
                f"cannot tell the embedding size of the model in {self._model_dir}"
            )
        return int(size)

    def model_file(self) -> Path:
        """The ``.onnx`` file in use, converting (and quantising) it first if needed.

        The cache keeps the one file in use: ``model.onnx``, or
        ``model.int8-per-channel.onnx`` with ``quantize``; what the latter is made from is
        written to a scratch folder beside it and removed.
        """
        if self._onnx_file is not None and not self.quantize:
            return self._onnx_file
        if self._onnx_file is not None:
            key = content_key([self._onnx_file], "onnx file")
        else:
            names = (self._model_dir / name for name in _CONTENT_FILES)
            key = content_key(
                [p for p in names if p.exists()], f"export {_EXPORT_VERSION}|{self._pooling}"
            )
        folder = cache_dir() / "onnx" / key
        target = folder / ("model.int8-per-channel.onnx" if self.quantize else "model.onnx")
        if target.exists():
            return target
        try:
            folder.mkdir(parents=True, exist_ok=True)
            _remove_stale_scratch(folder)
            scratch_folder = tempfile.TemporaryDirectory(prefix=".convert-", dir=folder)
        except OSError as exc:  # a read-only home (a container), a file where the folder goes
            raise EmbeddingError(
                f"cannot build the ONNX model of {self._name} in {folder} "
                f"({exc.strerror or exc}): the model cache must be a writable folder. Point "
                "HAROMBE_CACHE_DIR (or XDG_CACHE_HOME) at one, for example "
                "HAROMBE_CACHE_DIR=/tmp/harombe-cache; the model is built there once."
            ) from exc
        _log.warning(
            "building the ONNX model of %s%s once (a few seconds; cached in %s)",
            self._name,
            " with int8 weights" if self.quantize else "",
            folder,
        )
        with scratch_folder as scratch:
            if self.quantize:
                raw = self._onnx_file or self._build(Path(scratch))
                quantize_onnx(raw, target)
            else:
                built = self._build(Path(scratch))
                os.replace(built, target)
        return target

    def _build(self, scratch: Path) -> Path:
        """The model's graph in ``scratch``: built from its safetensors without torch, or, for
        a model that is not a BERT encoder, exported with torch where it is installed.

        Either is left in standard operators for onnxruntime to fuse as it loads it: its
        transformer optimizer's ``Attention`` and ``SkipLayerNormalization`` measured about
        15% fewer texts per CPU-second on CPU, on the built graph and on torch's export alike
        (see :mod:`~harombe_core.embeddings.onnx_graph`)."""
        import importlib.util

        from harombe_core.embeddings.onnx_graph import build_bert_graph

        target = scratch / "model.onnx"
        try:
            model = build_bert_graph(self._model_dir, self._pooling)
        except EmbeddingError:
            if importlib.util.find_spec("torch") is None:
                raise
            return export_onnx(self._model_dir, target, self._pooling)
        import onnx

        onnx.save(model, str(target))
        return target

    def _load(self) -> None:
        import onnxruntime as ort
        from tokenizers import Tokenizer

        path = self.model_file()
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.intra_op_num_threads = self.threads or (os.cpu_count() or 1)
        options.inter_op_num_threads = 1
        # Threads that spin between runs burn a core for nothing while the worker waits for
        # the next batch, or while the application shares the machine: measured 15-20% more
        # texts per CPU-second without, and no slower on a busy machine.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        try:
            session = ort.InferenceSession(
                str(path), sess_options=options, providers=["CPUExecutionProvider"]
            )
        except Exception as exc:  # onnxruntime raises its own untyped errors
            raise EmbeddingError(
                f"onnxruntime cannot load {path}: {exc}. Delete the file to re-export it"
            ) from exc
        tokenizer = Tokenizer.from_file(str(self._model_dir / "tokenizer.json"))
        tokenizer.enable_truncation(max_length=self.max_length)
        # tokenizer.json of many models pads every text to a fixed length; batches are padded
        # here instead, each to its own longest text.
        tokenizer.no_padding()
        self._pad_id = tokenizer.token_to_id("[PAD]") or 0
        self._input_names = {i.name for i in session.get_inputs()}
        self._tokenizer = tokenizer
        self._session = session

    def _ensure_loaded(self) -> tuple[onnxruntime.InferenceSession, Tokenizer]:
        if self._session is None or self._tokenizer is None:
            with self._lock:
                if self._session is None:
                    self._load()
        session, tokenizer = self._session, self._tokenizer
        if session is None or tokenizer is None:  # pragma: no cover - _load sets both or raises
            raise EmbeddingError(f"{self._name} did not load")
        return session, tokenizer

    def _embed_batch(self, texts: list[str]) -> FloatArray:
        session, tokenizer = self._ensure_loaded()
        # Tokenize all, then batch by token count so each batch is padded to about one length
        # (characters are a rough guide: "🙂" or a URL is many tokens); order restored at the
        # end. Chat mixes "ok" with paragraphs, and padding is work the model does for nothing.
        encodings = tokenizer.encode_batch(texts)
        lengths = [len(e.ids) for e in encodings]
        order = sorted(range(len(texts)), key=lengths.__getitem__)
        out = np.empty((len(texts), self._dimension), dtype=np.float32)
        for chunk in self._batches(order, lengths):
            width = lengths[chunk[-1]]
            ids = np.full((len(chunk), width), self._pad_id, dtype=np.int64)
            mask = np.zeros((len(chunk), width), dtype=np.int64)
            types = np.zeros((len(chunk), width), dtype=np.int64)
            for row, i in enumerate(chunk):
                n = lengths[i]
                ids[row, :n] = encodings[i].ids
                mask[row, :n] = 1
                types[row, :n] = encodings[i].type_ids
            feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
            feed = {k: v for k, v in feed.items() if k in self._input_names}
            try:
                (vectors,) = session.run(["embedding"], feed)
            except Exception as exc:  # onnxruntime raises its own untyped errors
                raise EmbeddingError(f"{self._name} failed on {len(chunk)} texts: {exc}") from exc
            out[chunk] = vectors
        return out

    def _batches(self, order: list[int], lengths: list[int]) -> list[list[int]]:
        """``order`` (shortest first) cut into batches of at most ``batch_size`` texts and at
        most ``batch_tokens`` tokens once padded: many short texts run together, long ones
        in smaller groups whose activations stay in the CPU's cache."""
        batches: list[list[int]] = []
        current: list[int] = []
        for i in order:
            if current and (
                len(current) >= self.batch_size
                or (len(current) + 1) * lengths[i] > self.batch_tokens
            ):
                batches.append(current)
                current = []
            current.append(i)
        if current:
            batches.append(current)
        return batches
