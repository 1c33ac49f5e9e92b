"""Make LangChain's provider integrations look uninstalled, whatever this environment holds.

The chat command's "this model needs package X" errors are tested against a Python where the
integration packages are missing; a development environment may have some of them installed
(LangMem, for one, depends on langchain-openai and langchain-anthropic). A finder placed first
on ``sys.meta_path`` refuses those modules as Python does for a missing one, in this process
(:func:`hide`) or in a child process (:func:`child_env`, through ``sitecustomize``).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

#: The integration modules of the providers the chat tests name.
INTEGRATIONS = (
    "langchain_openai",
    "langchain_anthropic",
    "langchain_groq",
    "langchain_google_genai",
    "langchain_azure_ai",
    "langchain_aws",
)

_FINDER_SOURCE = '''
import sys


class HiddenIntegrations:
    """Refuses the named top-level modules as if they were not installed."""

    def __init__(self, names):
        self.names = frozenset(names)

    def find_spec(self, fullname, path=None, target=None):
        if fullname.partition(".")[0] in self.names:
            raise ModuleNotFoundError(f"No module named {fullname!r}", name=fullname)
        return None
'''


class _Hidden:
    def __init__(self, names: Sequence[str]) -> None:
        self.names = frozenset(names)

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> None:
        if fullname.partition(".")[0] in self.names:
            raise ModuleNotFoundError(f"No module named {fullname!r}", name=fullname)
        return None


@contextmanager
def hide(names: Sequence[str] = INTEGRATIONS) -> Iterator[None]:
    """In this process, ``import`` of ``names`` fails as for a package not installed."""
    finder = _Hidden(names)
    saved = {
        key: sys.modules.pop(key)
        for key in list(sys.modules)
        if key.partition(".")[0] in finder.names
    }
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)
        sys.modules.update(saved)


def child_env(folder: Path, names: Sequence[str] = INTEGRATIONS) -> dict[str, str]:
    """The environment of a child Python in which ``names`` are not installed."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sitecustomize.py").write_text(
        _FINDER_SOURCE + f"\nsys.meta_path.insert(0, HiddenIntegrations({list(names)!r}))\n",
        encoding="utf-8",
    )
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(folder), path) if p)}
