"""The runner of the frameworks' own test files (tests/upstream/run.py) runs each test on the
framework's class and on harombe's, on a stand-in checkout with one test file of our own."""

from __future__ import annotations

import importlib.util
import textwrap
from pathlib import Path

import pytest

RUNNER = Path(__file__).parent / "upstream" / "run.py"
TEST_FILE = """
from llama_index.core.llms import ChatMessage
from llama_index.core.storage.chat_store import SimpleChatStore


def test_a_message_comes_back() -> None:
    store = SimpleChatStore()
    store.add_message("k", ChatMessage(role="user", content="hi"))
    assert [m.content for m in store.get_messages("k")] == ["hi"]
    print("ran on", type(store).__name__)
"""


def test_each_test_runs_on_the_framework_class_and_on_harombes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    spec = importlib.util.spec_from_file_location("upstream_run", RUNNER)
    assert spec is not None
    assert spec.loader is not None
    run = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(run)
    tests = tmp_path / "llama-index-core" / "tests"
    tests.mkdir(parents=True)
    (tests / "__init__.py").write_text("")
    (tests / "test_stand_in.py").write_text(textwrap.dedent(TEST_FILE))
    monkeypatch.setattr(
        run, "SUITES", {"llama_index": [("llama-index-core", ["tests/test_stand_in.py"])]}
    )
    assert run.run({"llama_index": tmp_path}, ["-s"]) == 0
    out = capfd.readouterr().out
    assert "ran on SimpleChatStore" in out
    assert "ran on HarombeSimpleChatStore" in out
    assert "tests/test_stand_in.py [control]: 1 passed" in out
    assert "tests/test_stand_in.py [harombe]: 1 passed" in out
