"""Threading rules and the node selectors (linear, embedding, LLM with a fake model)."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import networkx as nx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harombe_core.chat_memory import ChatMemory
from harombe_core.errors import InvalidInputError
from harombe_core.models import ConversationNode, Message
from harombe_core.testing import FakeEmbedder
from harombe_core.threads import (
    EmbeddingNodeSelector,
    LinearNodeSelector,
    LLMNodeSelector,
    ThreadRuleError,
    add_node,
    candidate_nodes,
    check_thread_rules,
)


@pytest.fixture
def threaded() -> Iterator[ChatMemory]:
    memory = ChatMemory(node_selector=EmbeddingNodeSelector(FakeEmbedder()))
    yield memory
    memory.close()


def _node(node_id: int, role: str, parent: int | None) -> ConversationNode:
    return ConversationNode(
        id=node_id,
        message=Message(role=role, content=f"m{node_id}"),  # type: ignore[arg-type]
        parent_id=parent,
    )


def test_first_human_message_is_root_and_assistant_answers_it(threaded: ChatMemory) -> None:
    h, a = threaded.append("How do I bake sourdough bread?", "Feed the starter, then fold.")
    graph = threaded.graph
    assert graph.nodes[h]["node"].parent_id is None
    assert graph.nodes[a]["node"].parent_id == h
    assert list(graph.predecessors(a)) == [h]
    check_thread_rules(graph)


def test_human_attaches_to_an_assistant_and_rules_hold(threaded: ChatMemory) -> None:
    threaded.append("How do I bake sourdough bread?", "Feed the starter, then fold the dough.")
    threaded.append("My car engine makes a rattling noise", "Check the heat shield and exhaust.")
    h3, a3 = threaded.append("How long should the sourdough dough proof?", "About 4 hours.")
    parent = threaded.graph.nodes[h3]["node"].parent_id
    assert parent is not None
    assert threaded.graph.nodes[parent]["node"].message.role == "assistant"
    assert threaded.graph.nodes[a3]["node"].parent_id == h3
    check_thread_rules(threaded.graph)
    assert nx.is_directed_acyclic_graph(threaded.graph)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.tuples(st.sampled_from(["bread", "car", "tax", "garden"]), st.integers(0, 3)),
        min_size=1,
        max_size=12,
    ),
    st.sampled_from(["linear", "embedding", "llm"]),
)
def test_every_selector_keeps_every_rule(pairs: list[tuple[str, int]], kind: str) -> None:
    answers = iter(["7", "not a number", '{"selected_node_id": 2}'] * 100)
    selector = {
        "linear": LinearNodeSelector(),
        "embedding": EmbeddingNodeSelector(FakeEmbedder(), new_thread_threshold=0.2),
        "llm": LLMNodeSelector(lambda prompt: next(answers)),
    }[kind]
    memory = ChatMemory(node_selector=selector)
    try:
        for topic, n in pairs:
            memory.append(f"question about {topic} {n}", f"answer about {topic} {n}")
        graph = memory.graph
        check_thread_rules(graph)  # root first, assistant under its human, human under assistant
        assert graph.number_of_nodes() == 2 * len(pairs)
        for node_id in graph.nodes:  # no orphans: every parent is a node of the graph
            parent = graph.nodes[node_id]["node"].parent_id
            assert parent is None or parent in graph
        stored = memory.memory.get_messages(memory.session_id)
        assert [m.parent_id for m in stored] == [
            graph.nodes[m.id]["node"].parent_id for m in stored
        ]
    finally:
        memory.close()


def test_check_thread_rules_refuses_broken_graphs() -> None:
    graph = nx.DiGraph()
    add_node(graph, _node(1, "user", None))
    add_node(graph, _node(2, "user", 1))  # human under a human
    with pytest.raises(ThreadRuleError, match="assistant node"):
        check_thread_rules(graph)
    orphan = nx.DiGraph()
    add_node(orphan, _node(1, "user", None))
    orphan.add_node(2, node=_node(2, "assistant", 99))
    with pytest.raises(ThreadRuleError, match="orphan"):
        check_thread_rules(orphan)
    lonely = nx.DiGraph()
    add_node(lonely, _node(1, "user", None))
    add_node(lonely, _node(2, "assistant", None))
    with pytest.raises(ThreadRuleError, match="child of the human"):
        check_thread_rules(lonely)
    cyclic = nx.DiGraph()
    cyclic.add_node(1, node=_node(1, "user", 2))
    cyclic.add_node(2, node=_node(2, "assistant", 1))
    cyclic.add_edges_from([(1, 2), (2, 1)])
    with pytest.raises(ThreadRuleError, match="cycle"):
        check_thread_rules(cyclic)


def test_a_selector_that_picks_a_human_node_is_refused() -> None:
    class Bad:
        def select_parent(self, graph: nx.DiGraph, message: Message) -> int | None:
            return min(graph.nodes)  # the first human message

    memory = ChatMemory(node_selector=Bad())
    memory.append("hi", "hello")
    with pytest.raises(ThreadRuleError, match="assistant"):
        memory.append("again", "yes")
    assert memory.graph.number_of_nodes() == 2
    assert len(memory.memory.get_messages(memory.session_id)) == 2  # nothing half-written
    memory.close()


def test_linear_selector_is_chronological() -> None:
    memory = ChatMemory()
    ids = [memory.append(f"q{i}", f"a{i}") for i in range(4)]
    for (h, _), (_, previous_a) in zip(ids[1:], ids[:-1], strict=True):
        assert memory.graph.nodes[h]["node"].parent_id == previous_a
    assert candidate_nodes(memory.graph) == [a for _, a in ids]
    memory.close()


def test_embedding_selector_new_thread_below_threshold() -> None:
    selector = EmbeddingNodeSelector(FakeEmbedder(), new_thread_threshold=0.5)
    memory = ChatMemory(node_selector=selector)
    memory.append("sourdough starter flour water", "feed the sourdough starter flour daily")
    h, _ = memory.append("quarterly tax filing deadline", "the tax deadline is in April")
    assert memory.graph.nodes[h]["node"].parent_id is None  # unrelated: a new thread
    h2, _ = memory.append("sourdough starter smells of flour", "that is normal for a starter")
    assert memory.graph.nodes[h2]["node"].parent_id == 2
    check_thread_rules(memory.graph)
    memory.close()


def test_embedding_selector_separates_interleaved_topics_with_minilm() -> None:
    memory = ChatMemory.threaded()  # the bundled all-MiniLM-L6-v2, offline
    cooking = [
        ("I'm making a risotto tonight. Which rice should I use?", "Arborio or carnaroli rice."),
        ("Should I toast the rice before adding the stock?", "Yes, toast it in butter first."),
        ("How much parmesan goes into the risotto at the end?", "A generous handful, off heat."),
    ]
    car = [
        ("My car battery keeps dying overnight.", "Check for a parasitic drain with a meter."),
        ("The multimeter shows 300 milliamps with the engine off.", "That is a drain; pull fuses."),
        ("Pulling the radio fuse stopped the battery drain.", "The radio is the culprit then."),
    ]
    order = [cooking[0], car[0], cooking[1], car[1], cooking[2], car[2]]
    topic: dict[int, str] = {}
    followups = []
    for pair in order:
        h, a = memory.append(*pair)
        topic[h] = topic[a] = "cooking" if pair in cooking else "car"
        if pair not in (cooking[0], car[0]):
            followups.append(h)
    for h in followups:  # every follow-up continues its own topic, whatever came in between
        parent = memory.graph.nodes[h]["node"].parent_id
        assert parent is not None
        assert topic[parent] == topic[h], memory.graph.nodes[h]["node"].message.content
    memory.close()


class FakeLLM:
    """Answers from a script and records every prompt it was given."""

    def __init__(self, answers: list[str]) -> None:
        self.answers = list(answers)
        self.prompts: list[str] = []

    def __call__(self, prompt: str) -> str:
        self.prompts.append(prompt)
        return self.answers.pop(0)


def _three_exchanges(selector: object) -> ChatMemory:
    memory = ChatMemory(node_selector=LinearNodeSelector())
    memory.append("q1", "a1")
    memory.append("q2", "a2")
    memory.node_selector = selector
    return memory


def test_llm_selector_retries_invalid_ids_with_feedback_then_succeeds() -> None:
    llm = FakeLLM(["99", "I pick the first one", json.dumps({"selected_node_id": 2})])
    memory = _three_exchanges(LLMNodeSelector(llm, max_attempts=3))
    h, _ = memory.append("q3", "a3")
    assert memory.graph.nodes[h]["node"].parent_id == 2
    assert len(llm.prompts) == 3
    assert "99" in llm.prompts[1]
    assert "not a candidate" in llm.prompts[1]
    assert "2, 4" in llm.prompts[2]  # the feedback lists the valid ids
    memory.close()


def test_llm_selector_falls_back_to_newest_after_invalid_answers(
    caplog: pytest.LogCaptureFixture,
) -> None:
    llm = FakeLLM(["1", "3", "banana"])  # human ids and nonsense: never valid
    selector = LLMNodeSelector(llm, max_attempts=3)
    memory = _three_exchanges(selector)
    with caplog.at_level(logging.WARNING, logger="harombe_core.threads"):
        h, _ = memory.append("q3", "a3")
    assert memory.graph.nodes[h]["node"].parent_id == 4  # the newest assistant node
    assert len(llm.prompts) == 3
    assert selector.last_fallback_reason is not None
    assert "fell back" in caplog.text
    memory.close()


def test_llm_selector_falls_back_when_the_model_raises() -> None:
    def broken(prompt: str) -> str:
        raise TimeoutError("model timed out")

    selector = LLMNodeSelector(broken)
    memory = _three_exchanges(selector)
    h, _ = memory.append("q3", "a3")
    assert memory.graph.nodes[h]["node"].parent_id == 4
    assert "timed out" in (selector.last_fallback_reason or "")
    memory.close()


async def test_llm_selector_async_model() -> None:
    class AsyncLLM:
        def __init__(self) -> None:
            self.calls = 0

        async def acall(self, prompt: str) -> str:
            self.calls += 1
            return '{"selected_node_id": 2, "reasoning": "first topic"}'

    llm = AsyncLLM()
    memory = _three_exchanges(LLMNodeSelector(llm))
    h, _ = await memory.aappend("q3", "a3")
    assert memory.graph.nodes[h]["node"].parent_id == 2
    assert llm.calls == 1
    memory.close()


def test_llm_selector_validates_its_arguments() -> None:
    with pytest.raises(InvalidInputError):
        LLMNodeSelector("gpt-4o-mini")
    with pytest.raises(InvalidInputError):
        LLMNodeSelector(lambda p: "1", max_attempts=0)
