"""LlamaIndex's classes and harombe's, opened the way LlamaIndex's own tests open them.

LlamaIndex's tests build ``SimpleChatStore()``, ``SQLAlchemyChatStore(...)``,
``ChatMemoryBuffer.from_defaults(...)`` and ``Memory(...)``;
:mod:`upstream_plugin` binds those names, per run, to LlamaIndex's class (the control) or to the
harombe class below: ``HarombeChatStore`` / ``HarombeMemory`` on a fresh database of their own
(a file in a temporary folder, so that ``to_dict`` / ``from_dict`` can reopen it).
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

from llama_index.core.memory.chat_memory_buffer import ChatMemoryBuffer
from llama_index.core.memory.memory import Memory
from llama_index.core.storage.chat_store import SimpleChatStore
from llama_index.core.storage.chat_store.sql import SQLAlchemyChatStore

from llamaindex_harombe import HarombeChatStore, HarombeDBChatStore, HarombeMemory

_folders: list[Path] = []
_opened: list[Any] = []


def _new_database() -> str:
    folder = Path(tempfile.mkdtemp(prefix="harombe-upstream-"))
    _folders.append(folder)
    return str(folder / "memory.db")


class HarombeSimpleChatStore(HarombeChatStore):
    """``HarombeChatStore`` opened as LlamaIndex's tests open ``SimpleChatStore()``."""

    def __init__(self, **data: Any) -> None:
        data.setdefault("storage_path", _new_database())
        data.setdefault("embedding", None)
        super().__init__(**data)
        _opened.append(self)


class HarombeBufferMemory(HarombeMemory):
    """``HarombeMemory`` opened as LlamaIndex's tests open ``ChatMemoryBuffer.from_defaults``."""

    @classmethod
    def from_defaults(cls, *args: Any, **kwargs: Any) -> HarombeMemory:  # type: ignore[override]
        kwargs.setdefault("storage_path", _new_database())
        kwargs.setdefault("embedding", None)
        memory = super().from_defaults(*args, **kwargs)
        _opened.append(memory)
        return memory


class HarombeMemoryLike(HarombeMemory):
    """``HarombeMemory`` opened as LlamaIndex's tests open ``Memory(token_limit=,
    token_flush_size=, chat_history_token_ratio=, session_id=)``.

    ``Memory`` gives the chat history ``token_limit * chat_history_token_ratio`` tokens (the rest
    is its memory blocks'), so that is harombe's ``token_limit`` here. ``token_flush_size`` is
    how much ``Memory`` moves out of its queue at a time: harombe windows instead of flushing,
    so it has no such setting; nor a ``tokenizer_fn`` (it counts as LlamaIndex's default
    tokenizer does).
    """

    def __init__(self, **data: Any) -> None:
        ratio = data.pop("chat_history_token_ratio", 0.7)
        data.pop("token_flush_size", None)
        data.pop("tokenizer_fn", None)
        if "token_limit" in data:
            data["token_limit"] = int(data["token_limit"] * ratio)
        data.setdefault("storage_path", _new_database())
        data.setdefault("embedding", None)
        super().__init__(**data)
        _opened.append(self)

    @classmethod
    def from_defaults(cls, **kwargs: Any) -> HarombeMemory:  # type: ignore[override]
        return cls(**kwargs)


class HarombeSQLChatStore(HarombeDBChatStore):
    """``HarombeDBChatStore`` opened as LlamaIndex's tests open ``SQLAlchemyChatStore(table_name=,
    async_database_uri=)``: a fresh database of its own (the table and URI are SQLAlchemy's)."""

    def __init__(self, *, table_name: str = "", async_database_uri: str = "", **data: Any) -> None:
        data.setdefault("storage_path", _new_database())
        data.setdefault("embedding", None)
        super().__init__(**data)
        _opened.append(self)


def bindings() -> dict[str, tuple[Any, Any]]:
    return {
        "SimpleChatStore": (SimpleChatStore, HarombeSimpleChatStore),
        "ChatMemoryBuffer": (ChatMemoryBuffer, HarombeBufferMemory),
        "Memory": (Memory, HarombeMemoryLike),
        "SQLAlchemyChatStore": (SQLAlchemyChatStore, HarombeSQLChatStore),
    }


def close_all() -> None:
    """Close what a test opened and remove its databases."""
    while _opened:
        opened = _opened.pop()
        close = getattr(opened, "close", None)
        if close is not None:
            close()
    while _folders:
        shutil.rmtree(_folders.pop(), ignore_errors=True)
