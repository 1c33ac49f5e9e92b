"""ChatMemory: persistence across restarts, JSON round trips, seed-format files, exports,
retrieval with thread context, summaries (and their failure), pictures and the graph command."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from harombe_core.chat_memory import ChatMemory
from harombe_core.errors import InvalidInputError, SummarizationError
from harombe_core.models import Message, MessageSummary
from harombe_core.store import ops
from harombe_core.summarize import ExtractiveSummarizer, LLMSummarizer
from harombe_core.testing import FakeEmbedder
from harombe_core.threads import EmbeddingNodeSelector, check_thread_rules

EXCHANGES = [
    ("How do I feed a sourdough starter?", "Equal weights of flour and water, daily."),
    ("My bike chain keeps slipping on hills", "Check chain wear and the rear derailleur."),
    ("Can I feed the sourdough starter rye flour?", "Yes, rye flour makes it more active."),
    ("The bike chain wear gauge reads 0.75", "Replace the chain, and check the cassette."),
]


def _threaded(**kwargs: object) -> ChatMemory:
    selector = EmbeddingNodeSelector(FakeEmbedder(), new_thread_threshold=None)
    return ChatMemory(node_selector=selector, **kwargs)  # type: ignore[arg-type]


def _fill(memory: ChatMemory) -> None:
    for human, assistant in EXCHANGES:
        memory.append(human, assistant)


def _parents(memory: ChatMemory) -> dict[str, int | None]:
    """Content -> parent content, independent of the ids a store assigned."""
    graph = memory.graph
    out = {}
    for node_id in graph.nodes:
        node = graph.nodes[node_id]["node"]
        parent = node.parent_id
        out[node.message.content] = (
            None if parent is None else graph.nodes[parent]["node"].message.content
        )
    return out  # type: ignore[return-value]


def test_threads_survive_a_restart_in_a_new_process(tmp_path: Path) -> None:
    db = tmp_path / "chat.db"
    memory = _threaded(storage_path=db, session_id="s1")
    _fill(memory)
    before = _parents(memory)
    memory.close()
    script = textwrap.dedent(
        f"""
        import json
        from harombe_core.chat_memory import ChatMemory
        m = ChatMemory(storage_path={str(db)!r}, session_id="s1")
        g = m.graph
        print(json.dumps({{g.nodes[n]["node"].message.content:
            (g.nodes[g.nodes[n]["node"].parent_id]["node"].message.content
             if g.nodes[n]["node"].parent_id is not None else None) for n in g.nodes}}))
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=120
    )
    assert json.loads(result.stdout) == before
    reopened = ChatMemory(storage_path=db, session_id="s1")
    assert _parents(reopened) == before
    check_thread_rules(reopened.graph)
    reopened.close()


def test_an_exchange_cut_between_its_two_writes_is_repaired_on_open(tmp_path: Path) -> None:
    db = tmp_path / "chat.db"
    memory = ChatMemory(storage_path=db, session_id="s")
    memory.append("q1", "a1")
    h, a = memory.append("q2", "a2")
    memory.memory.store.run(ops.set_parent(a, None))  # as if the process died before linking it
    memory.close()
    reopened = ChatMemory(storage_path=db, session_id="s")
    assert reopened.graph.nodes[a]["node"].parent_id == h
    check_thread_rules(reopened.graph)
    reopened.close()


def test_json_save_load_round_trip(tmp_path: Path) -> None:
    memory = _threaded(summarizer=ExtractiveSummarizer())
    _fill(memory)
    path = memory.save(tmp_path / "memory.json")
    data = json.loads(path.read_text())
    assert data["version"] == "1.0"
    assert data["metadata"]["mode"] == "graph"
    assert {"id", "role", "content", "timestamp", "parent_id", "summary"} <= set(data["nodes"][0])
    assert len(data["edges"]) == len(data["nodes"]) - 1  # one root: every other node has a parent
    loaded = ChatMemory.load(path)
    assert _parents(loaded) == _parents(memory)
    assert loaded.mode == "graph"
    assert [m.content for m in loaded.messages] == [m.content for m in memory.messages]
    assert [m.created_at for m in loaded.messages] == [m.created_at for m in memory.messages]
    summaries = [loaded.graph.nodes[n]["node"].summary for n in sorted(loaded.graph.nodes)]
    assert all(isinstance(s, MessageSummary) and s.title for s in summaries)
    # and it keeps threading after loading
    loaded.node_selector = EmbeddingNodeSelector(FakeEmbedder(), new_thread_threshold=None)
    h, _ = loaded.append("sourdough starter flour again", "yes")
    assert loaded.graph.nodes[h]["node"].parent_id is not None
    check_thread_rules(loaded.graph)
    memory.close()
    loaded.close()


def test_loads_a_file_in_the_seed_format(tmp_path: Path) -> None:
    seed = {
        "version": "1.0",
        "metadata": {
            "created_at": "2025-01-01T10:00:00",
            "last_modified": "2025-01-01T10:05:00",
            "mode": "graph",
            "total_messages": 4,
        },
        "nodes": [
            {
                "id": 1,
                "role": "user",
                "content": "Tell me about Python",
                "timestamp": "2025-01-01T10:00:00",
                "parent_id": None,
                "summary": {"title": "Python", "summary": "Asks about Python."},
            },
            {
                "id": 2,
                "role": "assistant",
                "content": "Python is a language.",
                "timestamp": "2025-01-01T10:00:01",
                "parent_id": 1,
            },
            {
                "id": 3,
                "role": "user",
                "content": "And its history?",
                "timestamp": "2025-01-01T10:01:00",
                "parent_id": 2,
            },
            {
                "id": 4,
                "role": "assistant",
                "content": "Created by Guido van Rossum.",
                "timestamp": "2025-01-01T10:01:01",
                "parent_id": 3,
            },
        ],
        "edges": [{"from": 1, "to": 2}, {"from": 2, "to": 3}, {"from": 3, "to": 4}],
    }
    path = tmp_path / "seed.json"
    path.write_text(json.dumps(seed))
    loaded = ChatMemory.load(path, node_selector=EmbeddingNodeSelector(FakeEmbedder()))
    assert [m.content for m in loaded.messages] == [n["content"] for n in seed["nodes"]]
    assert _parents(loaded) == {
        "Tell me about Python": None,
        "Python is a language.": "Tell me about Python",
        "And its history?": "Python is a language.",
        "Created by Guido van Rossum.": "And its history?",
    }
    first = loaded.graph.nodes[min(loaded.graph.nodes)]["node"]
    assert first.summary == MessageSummary(title="Python", summary="Asks about Python.")
    assert first.timestamp.isoformat().startswith("2025-01-01T10:00:00")
    loaded.close()


def test_mermaid_output() -> None:
    memory = ChatMemory()
    memory.append('Say "hi" <b>', "Hello!\nHow are you?")
    text = memory.to_mermaid()
    lines = text.splitlines()
    assert lines[0] == "graph TD"
    assert '1["H1: Say #quot;hi#quot; #lt;b#gt;"]' in lines
    assert '2["A2: Hello! How are you?"]' in lines
    assert "1 --> 2" in lines
    assert any(line.startswith("style 1 fill:#a7c7e7") for line in lines)
    assert any(line.startswith("style 2 fill:#cdb4f6") for line in lines)
    assert memory.export("mermaid") == text
    memory.close()


def test_jsonl_and_text_exports() -> None:
    memory = ChatMemory()
    memory.append("What is 2+2?", "4")
    line = memory.export("jsonl").strip()
    record = json.loads(line)
    assert [m["role"] for m in record["messages"]] == ["user", "assistant"]
    assert [m["content"] for m in record["messages"]] == ["What is 2+2?", "4"]
    text = memory.export("text")
    assert "What is 2+2?" in text
    assert "4" in text
    assert memory.export("plain_text") == text
    with pytest.raises(InvalidInputError, match="json, jsonl, mermaid, text"):
        memory.export("yaml")
    memory.close()


def test_linear_retrieve_is_the_newest_messages() -> None:
    memory = ChatMemory()
    for i in range(5):
        memory.append(f"q{i}", f"a{i}")
    assert [m.content for m in memory.retrieve("anything", n_results=3)] == ["a3", "q4", "a4"]
    memory.close()


def test_threaded_retrieve_walks_up_the_thread_in_conversation_order() -> None:
    memory = _threaded(context_depth=2)
    _fill(memory)
    found = memory.retrieve("cassette", n_results=1)  # BM25: semantic memory is off
    contents = [m.content for m in found]
    assert contents[-1] == "Replace the chain, and check the cassette."
    assert len(contents) == 3  # the hit and two ancestors
    assert contents[0] == "Check chain wear and the rear derailleur."
    ids = [m.id for m in found]
    assert ids == sorted(ids)  # conversation order
    assert [m.content for m in memory.retrieve("cassette", n_results=1, context_depth=0)] == [
        "Replace the chain, and check the cassette."
    ]
    both = memory.retrieve("chain sourdough", n_results=4, context_depth=5)
    assert len({m.id for m in both}) == len(both)  # deduplicated
    memory.close()


def test_context_depth_is_validated() -> None:
    with pytest.raises(InvalidInputError):
        ChatMemory(context_depth=-1)
    assert ChatMemory(context_depth=0).context_depth == 0


class FailingSummarizer:
    def summarize_message(self, message: Message) -> MessageSummary:
        raise SummarizationError("model unavailable")


def test_a_failing_summariser_never_loses_messages(caplog: pytest.LogCaptureFixture) -> None:
    memory = ChatMemory(summarizer=FailingSummarizer())
    memory.append("keep me", "and me")
    stored = memory.memory.get_messages(memory.session_id)
    assert [m.content for m in stored] == ["keep me", "and me"]
    assert all(memory.graph.nodes[n]["node"].summary is None for n in memory.graph.nodes)
    assert "without a summary" in caplog.text
    memory.close()


def test_llm_summarizer_with_a_broken_model_keeps_messages() -> None:
    def broken(prompt: str) -> str:
        raise ConnectionError("no network")

    memory = ChatMemory(summarizer=LLMSummarizer(broken))
    memory.append("q", "a")
    assert len(memory.memory.get_messages(memory.session_id)) == 2
    memory.close()


def test_llm_summaries_are_stored_per_node() -> None:
    memory = ChatMemory.threaded(
        llm=lambda prompt: '{"title": "Greeting", "summary": "Says hello."}'
    )
    h, a = memory.append("hello", "hi there")
    summaries = memory.memory.store.run(ops.get_message_summaries([h, a]))
    assert summaries[h] == {"title": "Greeting", "summary": "Says hello."}
    assert memory.graph.nodes[a]["node"].summary == MessageSummary("Greeting", "Says hello.")
    memory.close()


def test_reset_forgets_everything() -> None:
    memory = _threaded()
    _fill(memory)
    memory.reset()
    assert memory.graph.number_of_nodes() == 0
    assert memory.memory.get_messages(memory.session_id) == []
    h, _ = memory.append("fresh start", "ok")
    assert memory.graph.nodes[h]["node"].parent_id is None
    memory.close()


def test_append_accepts_messages_and_dicts_and_refuses_wrong_roles() -> None:
    memory = ChatMemory()
    memory.append(Message(role="user", content="hi", name="Ann"), {"content": "hello"})
    assert memory.messages[0].name == "Ann"
    with pytest.raises(InvalidInputError):
        memory.append(Message(role="assistant", content="x"), "y")
    with pytest.raises(InvalidInputError):
        memory.append(42, "y")
    memory.close()


async def test_async_append_and_retrieve() -> None:
    memory = _threaded()
    for human, assistant in EXCHANGES:
        await memory.aappend(human, assistant)
    assert memory.graph.number_of_nodes() == 8
    found = await memory.aretrieve("rye", n_results=1, context_depth=1)
    assert found[-1].content.startswith("Yes, rye flour")
    memory.close()


@pytest.mark.parametrize("suffix", ["png", "svg"])
def test_render_png_and_svg(tmp_path: Path, suffix: str) -> None:
    from harombe_core.graph_render import render_graph

    memory = _threaded()
    _fill(memory)
    target = tmp_path / f"threads.{suffix}"
    data = render_graph(memory.graph, target)
    assert target.read_bytes() == data
    if suffix == "png":
        assert data.startswith(b"\x89PNG")
    else:
        assert b"<svg" in data[:500]
        assert b"H1: How do I feed a sourdou" in data or b"H1" in data
    memory.close()


def test_graph_command(tmp_path: Path) -> None:
    from harombe_core.cli import app

    db = tmp_path / "chat.db"
    memory = _threaded(storage_path=db, session_id="talk")
    _fill(memory)
    memory.close()
    runner = CliRunner()
    out = tmp_path / "talk.svg"
    result = runner.invoke(app, ["graph", "talk", "--db", str(db), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert out.read_bytes().lstrip().startswith(b"<?xml")
    mermaid = runner.invoke(app, ["graph", "talk", "--db", str(db)])
    assert mermaid.exit_code == 0
    assert mermaid.stdout.startswith("graph TD")
    missing = runner.invoke(app, ["graph", "nope", "--db", str(db)])
    assert missing.exit_code == 1


def test_threaded_retrieve_uses_hybrid_search_with_semantic_memory() -> None:
    from harombe_core.manager import MemoryManager
    from harombe_core.testing import InMemoryVectorIndex

    mm = MemoryManager(":memory:", embedding=FakeEmbedder(), vector_store=InMemoryVectorIndex())
    memory = _threaded(memory=mm, context_depth=1)
    _fill(memory)
    assert mm.retriever.mode != "keyword"
    found = memory.retrieve("rye flour", n_results=1)
    assert [m.content for m in found] == [  # the best hit and its parent, in order
        "Can I feed the sourdough starter rye flour?",
        "Yes, rye flour makes it more active.",
    ]
    mm.close()
