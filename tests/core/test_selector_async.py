"""The embedding node selector is one flow: async awaits the embedder's own async methods.

With an embedder that has a native async form (a framework's embeddings client), choosing a
parent on the async path takes no worker thread, and it chooses what the sync path chooses.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import networkx as nx
import numpy as np
import pytest

from harombe_core.embeddings.base import NativeAsyncEmbedder
from harombe_core.models import ConversationNode, Message
from harombe_core.testing import FakeEmbedder
from harombe_core.threads import EmbeddingNodeSelector, add_node


class AsyncClient(NativeAsyncEmbedder):
    """A fake remote embedder whose async calls never leave the event loop."""

    def __init__(self) -> None:
        self._fake = FakeEmbedder()
        self._name = "async-client"
        self._dimension = self._fake.dimension

    def _embed_batch(self, texts: list[str]) -> Any:
        return self._fake.embed(texts)

    async def _aembed_batch(self, texts: list[str]) -> Any:
        await asyncio.sleep(0)
        return self._fake.embed(texts)

    async def aembed_query(self, text: str) -> Any:
        return (await self.aembed([text]))[0]


def _graph() -> nx.DiGraph:
    graph = nx.DiGraph()
    turns: list[tuple[Any, str, int | None]] = [
        ("user", "how do I bake sourdough bread", None),
        ("assistant", "feed the starter, then bake the bread hot", 1),
        ("user", "what is the capital of France", None),
        ("assistant", "Paris is the capital of France", 3),
    ]
    for number, (role, text, parent) in enumerate(turns, start=1):
        message = Message(role=role, content=text, id=number)
        add_node(graph, ConversationNode(id=number, message=message, parent_id=parent))
    return graph


QUESTIONS: Sequence[tuple[str, str | None]] = [
    ("and how long should the bread bake", None),
    ("which river runs through that capital of France", "the Seine"),
    ("tell me about quantum chromodynamics", None),
]


@pytest.mark.parametrize(("text", "reply"), QUESTIONS)
async def test_async_selection_takes_no_thread_and_matches_sync(
    text: str, reply: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    graph = _graph()
    message = Message(role="user", content=text)
    answer = None if reply is None else Message(role="assistant", content=reply)
    expected = EmbeddingNodeSelector(AsyncClient()).select_parent(graph, message, answer)
    sync_scores = EmbeddingNodeSelector(AsyncClient()).scores(graph, message, answer)

    def no_thread(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the selector ran in a worker thread")

    monkeypatch.setattr(asyncio, "to_thread", no_thread)
    selector = EmbeddingNodeSelector(AsyncClient())
    assert await selector.aselect_parent(graph, message, answer) == expected
    monkeypatch.undo()
    assert np.allclose(selector.scores(graph, message, answer)[2], sync_scores[2])
