"""The LLM and embeddings bridges: LangChain models as the core's hooks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from langchain_core.embeddings import DeterministicFakeEmbedding, Embeddings
from langchain_core.messages import HumanMessage, SystemMessage

from harombe_core.embeddings.base import Embedder
from harombe_core.errors import EmbeddingError, InvalidInputError, SummarizationError
from harombe_core.manager import MemoryManager
from harombe_core.models import Message
from langchain_harombe import LangChainEmbedder, RecordingChatModel, chat_model_callable


class Broken(RecordingChatModel):
    def _generate(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("provider down")


def test_chat_model_as_prompt_callable() -> None:
    model = RecordingChatModel(responses=["a title", "async answer"])
    llm = chat_model_callable(model, system_prompt="You summarise.")
    assert llm("Summarise this") == "a title"
    assert model.calls == [[SystemMessage("You summarise."), HumanMessage("Summarise this")]]


async def test_chat_model_async_twin() -> None:
    model = RecordingChatModel(responses=["async answer"])
    assert await chat_model_callable(model).acall("q") == "async answer"
    assert model.calls == [[HumanMessage("q")]]


async def test_bridge_errors_are_typed() -> None:
    with pytest.raises(SummarizationError, match="provider down"):
        chat_model_callable(Broken())("x")
    with pytest.raises(SummarizationError, match="provider down"):
        await chat_model_callable(Broken()).acall("x")
    with pytest.raises(InvalidInputError, match="BaseChatModel"):
        chat_model_callable(lambda p: p)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="str"):
        chat_model_callable(RecordingChatModel())(3)  # type: ignore[arg-type]


def test_langchain_embeddings_as_embedder() -> None:
    embedder = LangChainEmbedder(DeterministicFakeEmbedding(size=24))
    assert isinstance(embedder, Embedder)
    assert embedder.dimension == 24
    assert embedder.name == "langchain/DeterministicFakeEmbedding"
    vectors = embedder.embed(["a", "b"])
    assert vectors.shape == (2, 24)
    assert vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert np.allclose(embedder.embed_query("a"), vectors[0])
    assert embedder.embed([]).shape == (0, 24)


async def test_embedder_async_twins() -> None:
    embedder = LangChainEmbedder(DeterministicFakeEmbedding(size=8), name="fake-8", dimension=8)
    assert embedder.name == "fake-8"
    assert (await embedder.aembed(["x", "y"])).shape == (2, 8)
    assert np.allclose(await embedder.aembed_query("x"), embedder.embed_query("x"))


async def test_embedder_learns_its_dimension_from_the_first_batch() -> None:
    """``probe=False``: no call at construction, so async-only embeddings (LangGraph wraps an
    ``async def`` this way) work from async code and fail clearly from sync code."""
    from langgraph.store.base.embed import ensure_embeddings

    async def aembed(texts: list[str]) -> list[list[float]]:
        return [[1.0, 2.0, 2.0] for _ in texts]

    embedder = LangChainEmbedder(ensure_embeddings(aembed), probe=False)
    vectors = await embedder.aembed(["a", "b"])
    assert vectors.shape == (2, 3)
    assert embedder.dimension == 3
    assert np.allclose(vectors[0], [1 / 3, 2 / 3, 2 / 3])
    with pytest.raises(EmbeddingError, match="async"):
        embedder.embed(["a"])


class WrongSize(Embeddings):
    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [[1.0, 0.0] for _ in texts]

    def embed_query(self, text: str) -> list[float]:
        return [1.0, 0.0, 0.0]


def test_embedder_validates_backend_output() -> None:
    with pytest.raises(EmbeddingError, match="shape"):
        LangChainEmbedder(WrongSize()).embed(["a"])
    with pytest.raises(InvalidInputError, match="Embeddings"):
        LangChainEmbedder("not embeddings")  # type: ignore[arg-type]


def test_manager_searches_with_langchain_embeddings(tmp_path: Path) -> None:
    embedder = LangChainEmbedder(DeterministicFakeEmbedding(size=32))
    with MemoryManager(str(tmp_path / "m.db"), embedding=embedder, vector_store="chroma") as mm:
        mm.save_messages("s", [Message(role="user", content="alpha"),
                               Message(role="user", content="omega")])
        mm.flush()
        hits = mm.search("alpha", top_k=1)
        assert hits[0].message.content == "alpha"
        assert hits[0].vector_score == pytest.approx(1.0, abs=1e-5)


def test_chat_model_as_the_core_summariser() -> None:
    from harombe_core.summarize import LLMSummarizer

    model = RecordingChatModel(
        responses=['{"title": "Lisbon trip", "summary": "Ann plans a trip to Lisbon in May."}']
    )
    summary = LLMSummarizer(llm=chat_model_callable(model)).summarize_message(
        Message(role="user", content="I am planning a trip to Lisbon in May.")
    )
    assert summary.title == "Lisbon trip"
    assert "Lisbon" in summary.summary
    assert "I am planning a trip to Lisbon in May." in model.calls[0][-1].text


async def test_chat_model_as_the_core_summariser_async() -> None:
    from harombe_core.summarize import LLMSummarizer

    model = RecordingChatModel(responses=['{"title": "Pasta", "summary": "Boil ten minutes."}'])
    summary = await LLMSummarizer(llm=chat_model_callable(model)).asummarize_message(
        Message(role="user", content="How long do I boil pasta?")
    )
    assert summary.title == "Pasta"


def _scripted(messages: list[Any]) -> str:
    """Summaries name the topic; thread selection always picks the oldest candidate."""
    import json
    import re

    prompt = messages[-1].text
    if '"selected_node_id"' in prompt:
        ids = [int(i) for i in re.findall(r"^(\d+): ", prompt, re.MULTILINE)]
        return json.dumps({"selected_node_id": ids[0]})
    topic = "Boats" if "boat" in prompt.lower() else "Other"
    return json.dumps({"title": topic, "summary": f"A message about {topic.lower()}."})


async def test_chat_model_drives_threading_and_summaries() -> None:
    from harombe_core.chat_memory import ChatMemory
    from harombe_core.models import MessageSummary
    from langchain_harombe import node_selector, summarizer

    model = RecordingChatModel(respond=_scripted)
    memory = ChatMemory(node_selector=node_selector(model), summarizer=summarizer(model))
    first = memory.append("my boat leaks", "patch the hull")
    memory.append("what about sails?", "check the seams")
    third = await memory.aappend("and the hull again?", "use epoxy")
    # The scripted model chose the oldest candidate: the first exchange's assistant turn.
    assert memory.graph.nodes[third[0]]["node"].parent_id == first[1]
    assert memory.graph.nodes[first[0]]["node"].summary == MessageSummary(
        title="Boats", summary="A message about boats."
    )
    assert any('"selected_node_id"' in call[-1].text for call in model.calls)
    memory.close()
