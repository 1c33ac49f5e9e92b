"""The README's examples run, so they cannot drift from the library.

Every ```python block of README.md runs in a fresh namespace, in a temporary folder with a
temporary HOME (so ``~/.harombe/memory.db`` is a new database), offline. A block may use one
name the README leaves to the reader, a model: ``NEEDS`` gives it an offline fake (a LangChain
chat model, a LlamaIndex LLM, a ``prompt -> str`` callable). A statement whose comment starts
with an error's name (``# SessionOwnershipError: ...``) must raise that error. The YAML
configuration block is loaded with ``MemoryManager.from_config``. No block is skipped; a new one
runs too, and fails here until it runs offline.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import harombe_core
from harombe_core import ChatMemory, MemoryManager

README = Path(__file__).resolve().parent.parent / "README.md"
_FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)


def _chat_model() -> Any:
    from langchain_harombe import RecordingChatModel

    return RecordingChatModel()


def _llama_llm() -> Any:
    from llama_index.core.llms import MockLLM

    return MockLLM()


def _callable_llm() -> Callable[[str], str]:
    """``my_llm(prompt) -> str`` for the threaded memory: picks a thread and writes summaries."""

    def my_llm(prompt: str) -> str:
        if "title" in prompt.lower() and "summary" in prompt.lower():
            return '{"title": "Router reset", "summary": "How to reset the router."}'
        return "NEW"

    return my_llm


#: Section of the README -> the names its block leaves to the reader, and offline fakes.
NEEDS: dict[str, dict[str, Callable[[], Any]]] = {
    "LangChain": {"model": _chat_model},
    "LlamaIndex": {"llm": _llama_llm},
    "Threaded memory and summaries": {"my_llm": _callable_llm},
}


def _blocks(language: str) -> list[tuple[str, str]]:
    """``(section, code)`` for every fenced block of ``language``, in order."""
    text = README.read_text(encoding="utf-8")
    found = []
    for match in _FENCE.finditer(text):
        if match.group(1) != language:
            continue
        headings = re.findall(r"^## (.+)$", text[: match.start()], re.M)
        found.append((headings[-1] if headings else "", match.group(2)))
    return found


def _expected_errors(code: str) -> dict[int, str]:
    """Line number -> error name, for statements whose comment starts with an error's name."""
    expected = {}
    for token in tokenize.generate_tokens(io.StringIO(code).readline):
        if token.type == tokenize.COMMENT:
            name = token.string.lstrip("# ").split(":")[0].split(" ")[0]
            if name.endswith("Error") and hasattr(harombe_core, name):
                expected[token.start[0]] = name
    return expected


def _run(code: str, namespace: dict[str, Any]) -> None:
    """Run ``code`` statement by statement; those marked with an error must raise it."""
    expected = _expected_errors(code)
    for statement in ast.parse(code).body:
        compiled = compile(ast.Module(body=[statement], type_ignores=[]), str(README), "exec")
        error = expected.get(statement.lineno)
        if error is None:
            exec(compiled, namespace)
            continue
        with pytest.raises(getattr(harombe_core, error)):
            exec(compiled, namespace)


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("HAROMBE_DB", raising=False)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    return tmp_path


BLOCKS = _blocks("python")


def test_the_readme_has_its_examples() -> None:
    sections = [section for section, _ in BLOCKS]
    for expected in ("Python API", "Users and sessions", "LangChain", "LlamaIndex"):
        assert expected in sections
    assert set(NEEDS) <= set(sections), "NEEDS names a section without a python block"


@pytest.mark.timeout(300)
@pytest.mark.parametrize(("section", "code"), BLOCKS, ids=[s for s, _ in BLOCKS])
def test_python_block_runs(section: str, code: str, home: Path) -> None:
    namespace: dict[str, Any] = {"__name__": "readme"}
    namespace.update({name: make() for name, make in NEEDS.get(section, {}).items()})
    try:
        _run(code, namespace)
    finally:
        from langchain_harombe import HarombeStore

        for value in namespace.values():
            if isinstance(value, (HarombeStore, MemoryManager, ChatMemory)):
                value.close()


def test_yaml_configuration_block_loads(home: Path) -> None:
    (yaml_block,) = (code for _, code in _blocks("yaml"))
    (home / "harombe.yaml").write_text(yaml_block, encoding="utf-8")
    with MemoryManager.from_config(home / "harombe.yaml") as mm:
        assert mm.max_history_tokens == 4096
        assert mm.semantic_enabled
        assert mm.store.location == str(home / "home" / ".harombe" / "memory.db")
