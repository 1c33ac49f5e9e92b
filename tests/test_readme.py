"""The README's examples (and those of the docs pages that teach the API) run, so they cannot
drift from the library.

Every ```python block of README.md and of the pages in ``PAGES`` runs in a fresh namespace, in a
temporary folder with a temporary HOME (so ``~/.harombe/memory.db`` is a new database), offline.
A block of a docs page may use one name the page leaves to the reader, a model: ``NEEDS`` gives
it an offline fake (a LangChain chat model, a ``prompt -> str`` callable); the README's blocks
and the adapters' first examples build their own, so they run as pasted. A statement whose
comment starts with an error's name (``# SessionOwnershipError: ...``) must raise that error. The
YAML configuration block is loaded with ``MemoryManager.from_config``. No block is skipped; a new
one runs too, and fails here until it runs offline. The README's blocks also run one after the
other on one database, in their order and in reverse, as a reader trying them all would.
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

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
#: Pages whose python blocks run here (other pages show fragments, shell or output).
PAGES = [
    README,
    ROOT / "docs" / "concepts.md",
    ROOT / "docs" / "langchain.md",
    ROOT / "docs" / "llamaindex.md",
    ROOT / "docs" / "threads-and-summaries.md",
    ROOT / "docs" / "search.md",
    ROOT / "docs" / "user-memory.md",
    ROOT / "docs" / "deletion.md",
    ROOT / "docs" / "encryption.md",
]
CONFIGURATION = ROOT / "docs" / "configuration.md"
_FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)


def _chat_model() -> Any:
    from langchain_harombe import RecordingChatModel

    return RecordingChatModel()


def _callable_llm() -> Callable[[str], str]:
    """``my_llm(prompt) -> str`` for the threaded memory: picks a thread and writes summaries."""

    def my_llm(prompt: str) -> str:
        if "title" in prompt.lower() and "summary" in prompt.lower():
            return '{"title": "Router reset", "summary": "How to reset the router."}'
        return "NEW"

    return my_llm


#: Page and section -> the names its blocks leave to the reader, and offline fakes.
NEEDS: dict[str, dict[str, Callable[[], Any]]] = {
    "langchain.md: The LangGraph store": {"model": _chat_model},
    "threads-and-summaries.md: Threaded memory": {"my_llm": _callable_llm},
    "user-memory.md: Extractors": {"model": _chat_model},
}


def _blocks(language: str, pages: list[Path] = PAGES) -> list[tuple[str, str]]:
    """``("page: section", code)`` for every fenced block of ``language``, in order."""
    found = []
    for page in pages:
        text = page.read_text(encoding="utf-8")
        for match in _FENCE.finditer(text):
            if match.group(1) != language:
                continue
            headings = re.findall(r"^## (.+)$", text[: match.start()], re.M)
            found.append((f"{page.name}: {headings[-1] if headings else ''}", match.group(2)))
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
    monkeypatch.setenv("MY_KEY", "a key the encryption page reads from the environment")
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    return tmp_path


BLOCKS = _blocks("python")


def test_the_readme_has_its_examples() -> None:
    sections = [section for section, _ in BLOCKS]
    for expected in ("Plain Python", "LangChain", "LlamaIndex", "Users and sessions"):
        assert f"README.md: {expected}" in sections
    assert set(NEEDS) <= set(sections), "NEEDS names a section without a python block"
    # The README's examples run as pasted: they build their own offline model.
    assert not [section for section in NEEDS if section.startswith("README.md: ")]
    # ... and run as a script: no statement there is expected to raise.
    assert not [s for s, code in BLOCKS if s.startswith("README.md: ") and _expected_errors(code)]


def _run_block(section: str, code: str) -> None:
    namespace: dict[str, Any] = {"__name__": "readme"}
    namespace.update({name: make() for name, make in NEEDS.get(section, {}).items()})
    try:
        _run(code, namespace)
    finally:
        from langchain_harombe import HarombeStore

        for value in namespace.values():
            if isinstance(value, (HarombeStore, MemoryManager, ChatMemory)):
                value.close()


@pytest.mark.timeout(300)
@pytest.mark.parametrize(("section", "code"), BLOCKS, ids=[s for s, _ in BLOCKS])
def test_python_block_runs(section: str, code: str, home: Path) -> None:
    _run_block(section, code)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("order", ["in order", "reversed"])
def test_the_readme_blocks_run_one_after_another_on_one_database(order: str, home: Path) -> None:
    """A reader tries every README example on the default ``~/.harombe/memory.db``: no block
    may collide with another's sessions (an owner, a thread id), in either order."""
    blocks = [(s, c) for s, c in BLOCKS if s.startswith("README.md: ")]
    for section, code in blocks if order == "in order" else blocks[::-1]:
        _run_block(section, code)


def test_yaml_configuration_block_loads(home: Path) -> None:
    (yaml_block,) = (code for _, code in _blocks("yaml", [CONFIGURATION]))
    (home / "harombe.yaml").write_text(yaml_block, encoding="utf-8")
    with MemoryManager.from_config(home / "harombe.yaml") as mm:
        assert mm.max_history_tokens == 4096
        assert mm.semantic_enabled
        assert mm.store.location == str(home / "home" / ".harombe" / "memory.db")
