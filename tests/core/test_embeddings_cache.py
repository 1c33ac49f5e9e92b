"""The embedding cache, the shipped test doubles, validation and the async contract."""

from __future__ import annotations

import asyncio
import threading

import numpy as np
import pytest

from harombe_core.embeddings import CachedEmbedder, Embedder, resolve_embedder
from harombe_core.embeddings.base import BaseEmbedder, FloatArray
from harombe_core.errors import EmbeddingError, InvalidInputError
from harombe_core.testing import FailingEmbedder, FakeEmbedder


def test_fake_embedder_is_deterministic_and_meaningful() -> None:
    a, b = FakeEmbedder(), FakeEmbedder()
    texts = [
        "How do I embed text?",
        "how to create embeddings for my texts",
        "The weather in Paris is sunny today.",
    ]
    va, vb = a.embed(texts), b.embed(texts)
    np.testing.assert_array_equal(va, vb)
    assert isinstance(a, Embedder)
    assert va.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(va, axis=1), 1.0, atol=1e-5)
    # Paraphrases overlap through shared words and trigrams ("embed"/"embeddings",
    # "puppy"/"puppies"); unrelated text is near orthogonal.
    assert va[0] @ va[1] > va[0] @ va[2] + 0.1
    puppy, puppies, weather = a.embed(["I adopted a puppy", "we adopted two puppies", texts[2]])
    assert puppy @ puppies > puppy @ weather + 0.1
    assert FakeEmbedder(ngram_weight=0).name != a.name  # different geometry, different name
    assert a.embed([""]).shape == (1, 256)
    assert not np.any(a.embed([""]))  # no content, no direction


def test_fake_embedder_rejects_bad_settings() -> None:
    with pytest.raises(InvalidInputError):
        FakeEmbedder(dimension=2)
    with pytest.raises(InvalidInputError):
        FakeEmbedder(ngram_weight=-1)


def test_cache_hits_skip_the_model() -> None:
    inner = FakeEmbedder()
    cache = CachedEmbedder(inner)
    first = cache.embed(["hello", "world", "hello"])
    assert inner.texts_embedded == 2  # duplicates in one batch are embedded once
    second = cache.embed(["world", "hello"])
    assert inner.texts_embedded == 2
    assert cache.hits == 2
    np.testing.assert_array_equal(second, first[[1, 0]])
    np.testing.assert_array_equal(cache.embed_query("hello"), first[0])
    assert (cache.name, cache.dimension) == (inner.name, inner.dimension)
    assert isinstance(cache, Embedder)
    assert cache.embed([]).shape == (0, 256)


def test_cache_is_lru_and_bounded() -> None:
    inner = FakeEmbedder()
    cache = CachedEmbedder(inner, max_entries=2)
    cache.embed(["a1"])
    cache.embed(["b2"])
    cache.embed(["a1"])  # a1 is now the most recent
    cache.embed(["c3"])  # evicts b2
    assert len(cache) == 2
    before = inner.texts_embedded
    cache.embed(["a1"])
    assert inner.texts_embedded == before
    cache.embed(["b2"])
    assert inner.texts_embedded == before + 1
    cache.clear()
    assert len(cache) == 0
    assert cache.hits == cache.misses == 0
    with pytest.raises(InvalidInputError):
        CachedEmbedder(inner, max_entries=0)


def test_callers_cannot_corrupt_the_cache() -> None:
    cache = CachedEmbedder(FakeEmbedder())
    out = cache.embed(["stable"])
    original = out.copy()
    out[:] = 0.0  # the caller owns what it got back
    np.testing.assert_array_equal(cache.embed(["stable"]), original)


def test_cache_is_keyed_by_exact_text() -> None:
    cache = CachedEmbedder(FakeEmbedder())
    cache.embed(["Hello"])
    cache.embed(["hello", "Hello "])
    assert cache.hits == 0
    assert len(cache) == 3


def test_resolve_wraps_objects_only_on_request() -> None:
    fake = FakeEmbedder()
    assert resolve_embedder(fake) is fake
    wrapped = resolve_embedder(fake, cache=True)
    assert isinstance(wrapped, CachedEmbedder)
    assert wrapped.inner is fake
    assert resolve_embedder(wrapped, cache=True) is wrapped  # never wrapped twice
    assert resolve_embedder(wrapped, cache=False) is fake


class _LangChainLikeEmbeddings:
    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [[1.0] for _ in texts]


class _LlamaIndexLikeEmbedding:
    def get_text_embedding_batch(self, texts: list[str]) -> list[list[float]]:
        return [[1.0] for _ in texts]


class _ChatModelLike:
    def invoke(self, prompt: str) -> str:
        return prompt


@pytest.mark.parametrize(
    ("spec", "fix"),
    [
        (_LangChainLikeEmbeddings(), "langchain_harombe.LangChainEmbedder(_LangChainLike"),
        (_LlamaIndexLikeEmbedding(), "llamaindex_harombe.LlamaIndexEmbedder(_LlamaIndexLike"),
        (_ChatModelLike(), "it is a chat model or LLM, not an embeddings model"),
    ],
)
def test_a_framework_object_as_embedder_says_what_to_pass(spec: object, fix: str) -> None:
    """The frameworks' embeddings need the adapter's wrapper, and a chat model is no embedder:
    the message says which, recognised by methods (the core imports neither framework)."""
    with pytest.raises(InvalidInputError, match="cannot use") as info:
        resolve_embedder(spec)
    assert fix in str(info.value)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("bogus", "unknown embedder 'bogus'"),
        ("no spaces/allowed here", "unknown embedder"),
        (42, "cannot use int as an embedder"),
        (object(), "cannot use object as an embedder"),
    ],
)
def test_resolve_rejects_unknown_specs_and_says_what_is_accepted(
    spec: object, message: str
) -> None:
    with pytest.raises(InvalidInputError, match=message) as info:
        resolve_embedder(spec)
    text = str(info.value)
    for accepted in ("'default'", "'onnx'", "'ollama:<model>'", "'openai:<model>'", "'st"):
        assert accepted in text
    assert isinstance(info.value, ValueError)  # InvalidInputError is a ValueError too


@pytest.mark.parametrize("spec", ["ollama:", "openai:", "ollama:  "])
def test_resolve_needs_a_model_name_for_remote_backends(spec: str) -> None:
    with pytest.raises(InvalidInputError, match="names no model"):
        resolve_embedder(spec)


class _Broken(BaseEmbedder):
    def __init__(self, output: FloatArray) -> None:
        self._name, self._dimension, self._output = "broken", 4, output

    def _embed_batch(self, texts: list[str]) -> FloatArray:
        return self._output


def test_wrong_shapes_and_nan_become_embedding_errors() -> None:
    with pytest.raises(EmbeddingError, match=r"shape \(1, 3\), expected \(1, 4\)"):
        _Broken(np.ones((1, 3), dtype=np.float32)).embed(["x"])
    with pytest.raises(EmbeddingError, match=r"expected \(2, 4\)"):
        _Broken(np.ones((1, 4), dtype=np.float32)).embed(["x", "y"])
    with pytest.raises(EmbeddingError, match="NaN"):
        _Broken(np.full((1, 4), np.nan, dtype=np.float32)).embed(["x"])
    unnormalised = _Broken(np.array([[3.0, 4.0, 0.0, 0.0]])).embed(["x"])
    np.testing.assert_allclose(unnormalised, [[0.6, 0.8, 0.0, 0.0]], atol=1e-6)
    assert unnormalised.dtype == np.float32


def test_failing_embedder_double() -> None:
    flaky = FailingEmbedder(fail_after=1)
    assert flaky.embed(["fine"]).shape == (1, 256)
    with pytest.raises(EmbeddingError, match="unavailable"):
        flaky.embed(["now it fails"])


class _Gated(FakeEmbedder):
    """Blocks inside the model call until the event loop sets the gate."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()

    def _embed_batch(self, texts: list[str]) -> FloatArray:
        if not self.gate.wait(timeout=10):
            raise EmbeddingError("the event loop never ran while embedding")
        return super()._embed_batch(texts)


async def test_async_twins_do_not_block_the_event_loop() -> None:
    for embedder in (_Gated(), CachedEmbedder(_Gated())):
        gated = embedder if isinstance(embedder, _Gated) else embedder.inner
        assert isinstance(gated, _Gated)
        gate = gated.gate
        task = asyncio.ensure_future(embedder.aembed(["while the loop runs"]))
        await asyncio.sleep(0)  # if aembed blocked the loop, this line would wait for it
        assert not task.done()
        gate.set()  # runs on the loop, so it proves the loop kept going during the model call
        vectors = await task
        assert vectors.shape == (1, 256)
        query = await embedder.aembed_query("while the loop runs")
        np.testing.assert_allclose(query, vectors[0], atol=1e-6)


async def test_async_input_is_checked_before_the_thread_hop() -> None:
    with pytest.raises(InvalidInputError):
        await FakeEmbedder().aembed("bare string")
    with pytest.raises(InvalidInputError):
        await CachedEmbedder(FakeEmbedder()).aembed_query(["not", "one"])  # type: ignore[arg-type]


def test_a_local_model_is_loaded_once_per_process_whatever_it_is_called() -> None:
    """``"default"`` and the bundled model's aliases each resolve to one shared embedder, so
    managers, histories and memory blocks naming the model hold one copy of its weights."""
    from harombe_core.embeddings.sentence_transformers import bundled_model_path

    onnx = resolve_embedder("onnx")
    assert resolve_embedder("onnx") is onnx
    assert resolve_embedder(f"onnx:{bundled_model_path()}") is onnx
    assert resolve_embedder("default") is resolve_embedder("default")
    assert isinstance(onnx, CachedEmbedder)
    assert resolve_embedder("onnx", cache=False) is onnx.inner
