"""The ONNX model cache: keyed by the model's content, one file per model, written atomically.

A small random BERT (same tokenizer and layout as all-MiniLM-L6-v2, 32 dimensions, one layer)
is converted here: the cache's rules do not depend on the weights, and it converts in about a
second where the bundled model takes tens (that one is covered by test_embeddings.py).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from harombe_core.embeddings.onnx import OnnxEmbedder, cache_dir
from harombe_core.embeddings.sentence_transformers import bundled_model_path
from harombe_core.errors import EmbeddingError

_COPIED = (
    "tokenizer.json",
    "vocab.txt",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "modules.json",
    "sentence_bert_config.json",
)


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import torch
    from transformers import BertConfig, BertModel

    source = bundled_model_path()
    target = tmp_path_factory.mktemp("tiny") / "model"
    (target / "1_Pooling").mkdir(parents=True)
    for name in _COPIED:
        shutil.copy(source / name, target / name)
    pooling = json.loads((source / "1_Pooling" / "config.json").read_text(encoding="utf-8"))
    pooling["word_embedding_dimension"] = 32
    (target / "1_Pooling" / "config.json").write_text(json.dumps(pooling), encoding="utf-8")
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=30522,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
    )
    BertModel(config).save_pretrained(target)
    return target


def test_a_model_that_is_not_bert_is_exported_with_torch_and_embeds_as_sentence_transformers(
    tiny_model: Path, cache: Path, tmp_path: Path
) -> None:
    """The fallback for encoders the graph builder does not know (here a small RoBERTa): one
    cached file, exported by torch in standard operators, the reference's vectors."""
    if importlib.util.find_spec("sentence_transformers") is None:
        pytest.skip("the reference needs the st extra")
    import torch
    from sentence_transformers import SentenceTransformer
    from transformers import RobertaConfig, RobertaModel

    target = tmp_path / "roberta"
    shutil.copytree(tiny_model, target)
    (target / "config.json").unlink()
    (target / "model.safetensors").unlink()
    torch.manual_seed(0)
    config = RobertaConfig(
        vocab_size=30522,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        pad_token_id=0,
    )
    RobertaModel(config).save_pretrained(target)
    texts = ["hello there", "a longer sentence about a trip to Lisbon in May", "ok"]
    vectors = OnnxEmbedder(target).embed(texts)
    assert [p.name for p in _model_files(cache)] == ["model.onnx"]
    reference = SentenceTransformer(str(target), device="cpu").encode(
        texts, normalize_embeddings=True
    )
    assert (vectors * reference).sum(axis=1).min() >= 0.9999


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "cache"
    monkeypatch.setenv("HAROMBE_CACHE_DIR", str(folder))
    return folder


def _model_files(cache: Path) -> list[Path]:
    """Every file the conversions left, except the small remembered hashes."""
    return sorted(p for p in (cache / "onnx").rglob("*") if p.is_file() and "keys" not in p.parts)


def test_the_suite_never_writes_into_the_users_cache() -> None:
    real = Path("~/.cache/harombe").expanduser()
    assert cache_dir() != real
    assert Path(os.environ["HAROMBE_CACHE_DIR"]) == cache_dir()
    assert not cache_dir().resolve().is_relative_to(real.resolve())


def test_one_file_per_model_keyed_by_its_content(
    tiny_model: Path, cache: Path, tmp_path: Path
) -> None:
    first = OnnxEmbedder(tiny_model).model_file()
    assert _model_files(cache) == [first]  # no plain export kept beside it, no scratch left
    assert first.name == "model.onnx"
    # The same model installed somewhere else (another virtual environment) shares the entry.
    elsewhere = tmp_path / "other-venv" / "site-packages" / "model"
    shutil.copytree(tiny_model, elsewhere)
    stamp = first.stat().st_mtime_ns
    assert OnnxEmbedder(elsewhere).model_file() == first
    assert first.stat().st_mtime_ns == stamp  # reused, not converted again
    assert _model_files(cache) == [first]
    vectors = OnnxEmbedder(elsewhere).embed(["hello there", "general kenobi"])
    np.testing.assert_allclose(
        vectors, OnnxEmbedder(tiny_model).embed(["hello there", "general kenobi"])
    )
    # Other weights are another model: another entry.
    changed = tmp_path / "changed"
    shutil.copytree(tiny_model, changed)
    config = json.loads((changed / "config.json").read_text(encoding="utf-8"))
    config["layer_norm_eps"] = 1e-6
    (changed / "config.json").write_text(json.dumps(config), encoding="utf-8")
    other = OnnxEmbedder(changed).model_file()
    assert other.parent != first.parent
    assert len(_model_files(cache)) == 2


def test_int8_keeps_its_own_single_file(tiny_model: Path, cache: Path) -> None:
    full = OnnxEmbedder(tiny_model).model_file()
    int8 = OnnxEmbedder(tiny_model, quantize=True).model_file()
    assert int8.parent == full.parent
    assert int8.name == "model.int8-per-channel.onnx"
    assert _model_files(cache) == sorted([full, int8])


def test_a_killed_conversions_scratch_is_cleared(tiny_model: Path, cache: Path) -> None:
    target = OnnxEmbedder(tiny_model).model_file()
    stale = target.parent / ".convert-killed"
    stale.mkdir()
    (stale / "model.raw.onnx").write_bytes(b"half an export")
    old = time.time() - 7 * 3600
    os.utime(stale, (old, old))
    running = target.parent / ".convert-running"  # a conversion still at work: left alone
    running.mkdir()
    target.unlink()
    OnnxEmbedder(tiny_model).model_file()
    assert not stale.exists()
    assert running.exists()


_CONVERT = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    go = Path(sys.argv[2])
    while not go.exists():
        time.sleep(0.01)
    from harombe_core.embeddings.onnx import OnnxEmbedder
    embedder = OnnxEmbedder(sys.argv[1])
    path = embedder.model_file()
    print(path, float(embedder.embed(["the same text"])[0].sum()))
    """
)


@pytest.mark.slow  # two processes import torch and convert on a shared CPU
@pytest.mark.timeout(300)
def test_processes_converting_at_once_all_get_a_whole_file(
    tiny_model: Path, cache: Path, tmp_path: Path
) -> None:
    go = tmp_path / "go"
    env = {**os.environ, "HAROMBE_CACHE_DIR": str(cache), "PYTHONWARNINGS": "ignore"}
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", _CONVERT, str(tiny_model), str(go)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for _ in range(2)
    ]
    go.touch()  # both start converting into the empty cache together
    results = []
    for worker in workers:
        out, err = worker.communicate(timeout=280)
        assert worker.returncode == 0, err
        path, total = out.split()
        results.append((path, round(float(total), 5)))
    assert len(set(results)) == 1  # one file, and the same vectors from it
    (path, _), *_ = results
    assert _model_files(cache) == [Path(path)]  # no torn file, no scratch, no raw export
    assert OnnxEmbedder(tiny_model).embed(["the same text"]).shape == (1, 32)


def test_a_cache_that_cannot_be_written_says_how_to_point_it_elsewhere(
    tiny_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read-only home (a container) or a file where the cache folder goes: a typed error
    that names HAROMBE_CACHE_DIR, not a bare OSError from deep inside the first embed."""
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("x", encoding="utf-8")
    monkeypatch.setenv("HAROMBE_CACHE_DIR", str(blocker))
    with pytest.raises(EmbeddingError, match="HAROMBE_CACHE_DIR") as info:
        OnnxEmbedder(tiny_model).model_file()
    assert str(blocker) in str(info.value)
    assert blocker.read_text(encoding="utf-8") == "x"
