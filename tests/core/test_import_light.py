"""``import harombe_core`` stays light: heavy libraries load only when a feature needs them.

Each check runs in a fresh interpreter, so nothing another test imported can hide a regression.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

HEAVY = [
    "torch",
    "chromadb",
    "sentence_transformers",
    "transformers",
    "onnxruntime",
    "langchain",
    "langchain_core",
    "langchain_community",
    "langgraph",
    "llama_index",
    "numpy",
    "psycopg",
    "sqlalchemy",
]
# Light enough for a store, but still not needed merely to import the package.
NOT_AT_IMPORT = ["pydantic", "pydantic_core", "yaml", "tiktoken", "networkx", "typer", "rich"]


def _loaded_after(code: str) -> set[str]:
    script = textwrap.dedent(code) + textwrap.dedent(
        """
        import json, sys
        print(json.dumps(sorted({name.split(".")[0] for name in sys.modules})))
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    return set(json.loads(result.stdout.strip().splitlines()[-1]))


def test_import_harombe_core_is_light() -> None:
    loaded = _loaded_after("import harombe_core")
    assert loaded.isdisjoint(HEAVY), sorted(loaded & set(HEAVY))
    assert loaded.isdisjoint(NOT_AT_IMPORT), sorted(loaded & set(NOT_AT_IMPORT))


def test_public_names_resolve_without_heavy_imports() -> None:
    loaded = _loaded_after(
        """
        import harombe_core
        for name in harombe_core.__all__:
            getattr(harombe_core, name)
        """
    )
    assert loaded.isdisjoint(HEAVY), sorted(loaded & set(HEAVY))


@pytest.mark.parametrize("counter", ["exact", "approximate"])
def test_a_store_without_semantic_memory_never_loads_models(counter: str) -> None:
    loaded = _loaded_after(
        f"""
        from harombe_core import MemoryManager, Message
        with MemoryManager(":memory:", embedding=None, token_counter={counter!r}) as mm:
            sid = mm.create_session(system_prompt="sys")
            mm.save_message(sid, Message(role="user", content="hello"))
            assert mm.get_recent_messages(sid, max_tokens=100)[-1].content == "hello"
            mm.store.keyword_search("hello")
        """
    )
    assert loaded.isdisjoint(HEAVY), sorted(loaded & set(HEAVY))
