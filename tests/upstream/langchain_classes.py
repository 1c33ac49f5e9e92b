"""langchain-core's classes and harombe's, opened the way langchain-core's own tests open them.

langchain-core's chat history tests build ``InMemoryChatMessageHistory()``; :mod:`upstream_plugin`
binds that name, per run, to langchain-core's class (the control) or to
``HarombeChatMessageHistory`` on a fresh session of a fresh database (``HarombeHistory`` below).
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

from langchain_core.chat_history import InMemoryChatMessageHistory

from langchain_harombe import HarombeChatMessageHistory

_folders: list[Path] = []
_opened: list[Any] = []


class HarombeHistory(HarombeChatMessageHistory):
    """``HarombeChatMessageHistory`` opened as the tests open ``InMemoryChatMessageHistory()``."""

    def __init__(self, **kwargs: Any) -> None:
        folder = Path(tempfile.mkdtemp(prefix="harombe-upstream-"))
        _folders.append(folder)
        super().__init__(
            "upstream",
            storage_path=str(folder / "memory.db"),
            manager_options={"embedding": None},
        )
        _opened.append(self)
        if kwargs.get("messages"):
            self.add_messages(kwargs["messages"])


def bindings() -> dict[str, tuple[Any, Any]]:
    return {"InMemoryChatMessageHistory": (InMemoryChatMessageHistory, HarombeHistory)}


def close_all() -> None:
    while _opened:
        close = getattr(_opened.pop(), "close", None)
        if close is not None:
            close()
    while _folders:
        shutil.rmtree(_folders.pop(), ignore_errors=True)
