"""Using an adapter without its extra installed says which extra to install.

A newcomer who ran ``pip install -e '.[onnx]'`` (the README's demo) and then pasted the
LangChain or LlamaIndex example got a bare ``ModuleNotFoundError: No module named
'langchain_core'`` from deep inside the adapter. Now it is a typed ``MissingExtraError`` (still
an ``ImportError``) whose message is the command that installs the extra.

Each case runs in a fresh interpreter where the extra's packages cannot be imported
(``sys.modules[name] = None``, which is how Python reports a package that is not installed).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from harombe_core.errors import MissingExtraError
from harombe_core.integration import requires_packages

SCRIPT = """
import sys
for name in {hidden!r}:
    sys.modules[name] = None
from harombe_core.errors import MissingExtraError
try:
    {statement}
except MissingExtraError as exc:
    assert isinstance(exc, ImportError)
    print("MissingExtraError:", exc)
else:
    print("no error")
"""


def _run(hidden: tuple[str, ...], statement: str) -> str:
    code = textwrap.dedent(SCRIPT).format(hidden=hidden, statement=statement)
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.mark.parametrize("name", ["HarombeSaver", "HarombeChatMessageHistory", "HarombeStore"])
def test_a_langchain_name_without_the_langchain_extra_names_the_extra(name: str) -> None:
    hidden = ("langchain_core", "langchain", "langgraph")
    out = _run(hidden, f"from langchain_harombe import {name}")
    assert out.startswith(f"MissingExtraError: langchain_harombe.{name} needs the '")
    assert "[langchain]'" in out


def test_importing_the_llamaindex_adapter_without_its_extra_names_the_extra() -> None:
    out = _run(("llama_index",), "import llamaindex_harombe")
    assert out.startswith("MissingExtraError: llamaindex_harombe needs the 'llama_index' package")
    assert "[llamaindex]'" in out


def test_the_langchain_package_itself_still_imports_without_langchain() -> None:
    """``import langchain_harombe`` stays light: only a name that needs LangChain fails."""
    assert _run(("langchain_core",), "import langchain_harombe") == "no error"


def test_only_a_missing_package_of_the_extra_is_blamed_on_the_extra() -> None:
    """Another missing module, or a package there at a version without a name we use, keeps
    its own error: "install the extra" would not fix it."""
    with (
        pytest.raises(ModuleNotFoundError) as other,
        requires_packages("x", "langchain", ("langchain_core",)),
    ):
        raise ModuleNotFoundError("No module named 'yaml'", name="yaml")
    assert not isinstance(other.value, MissingExtraError)
    with (
        pytest.raises(ImportError) as version,
        requires_packages("x", "langchain", ("langchain_core",)),
    ):
        raise ImportError("cannot import name 'Foo' from 'langchain_core.messages'")
    assert not isinstance(version.value, MissingExtraError)
    with (
        pytest.raises(MissingExtraError, match=r"needs the 'langchain_core' package"),
        requires_packages("x", "langchain", ("langchain_core",)),
    ):
        raise ModuleNotFoundError("No module named", name="langchain_core.messages")


@pytest.mark.parametrize("spec", ["st", "sentence-transformers/all-MiniLM-L6-v2"])
def test_a_sentence_transformers_model_without_the_st_extra_fails_when_memory_opens(
    spec: str,
) -> None:
    """Not later, from the background worker on the first message embedded: the constructor
    names the extra, like the other backends."""
    out = _run(
        ("sentence_transformers",),
        f"from harombe_core import MemoryManager; MemoryManager(':memory:', embedding={spec!r})",
    )
    assert out.startswith("MissingExtraError: sentence-transformers embeddings"), out
    assert "[st]'" in out
