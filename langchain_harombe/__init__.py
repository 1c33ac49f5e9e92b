"""LangChain adapter: persistent, windowed, threaded and searchable memory for chains and agents.

The public API is exactly ``__all__``; names load lazily so importing the package stays cheap
until a piece is used (the LangGraph store and the agent middleware pull in langgraph).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from harombe_core.integration import lazy_attributes as _lazy_attributes

if TYPE_CHECKING:
    from langchain_harombe.checkpoint import HarombeSaver
    from langchain_harombe.checkpoint_serde import HarombeSerializer
    from langchain_harombe.convert import LC_KEY, from_langchain, to_langchain
    from langchain_harombe.embeddings import LangChainEmbedder
    from langchain_harombe.history import (
        HarombeChatMessageHistory,
        conversation_history_factory,
        conversation_history_fields,
        session_history_factory,
    )
    from langchain_harombe.llm import chat_model_callable, node_selector, summarizer
    from langchain_harombe.middleware import HarombeMemoryMiddleware
    from langchain_harombe.retriever import HarombeRetriever
    from langchain_harombe.store import HarombeStore
    from langchain_harombe.testing import RecordingChatModel

_LAZY: dict[str, str] = {
    "HarombeSaver": "langchain_harombe.checkpoint",
    "HarombeSerializer": "langchain_harombe.checkpoint_serde",
    "LC_KEY": "langchain_harombe.convert",
    "from_langchain": "langchain_harombe.convert",
    "to_langchain": "langchain_harombe.convert",
    "LangChainEmbedder": "langchain_harombe.embeddings",
    "HarombeChatMessageHistory": "langchain_harombe.history",
    "conversation_history_factory": "langchain_harombe.history",
    "conversation_history_fields": "langchain_harombe.history",
    "session_history_factory": "langchain_harombe.history",
    "chat_model_callable": "langchain_harombe.llm",
    "node_selector": "langchain_harombe.llm",
    "summarizer": "langchain_harombe.llm",
    "HarombeMemoryMiddleware": "langchain_harombe.middleware",
    "HarombeRetriever": "langchain_harombe.retriever",
    "HarombeStore": "langchain_harombe.store",
    "RecordingChatModel": "langchain_harombe.testing",
}

__all__ = [
    "LC_KEY",
    "HarombeChatMessageHistory",
    "HarombeMemoryMiddleware",
    "HarombeRetriever",
    "HarombeSaver",
    "HarombeSerializer",
    "HarombeStore",
    "LangChainEmbedder",
    "RecordingChatModel",
    "chat_model_callable",
    "conversation_history_factory",
    "conversation_history_fields",
    "from_langchain",
    "node_selector",
    "session_history_factory",
    "summarizer",
    "to_langchain",
]


#: The ``langchain`` extra: a name needing one of these when it is missing says to install it.
_EXTRA = ("langchain", ("langchain_core", "langchain", "langgraph", "orjson"))

__getattr__, __dir__ = _lazy_attributes(__name__, _LAZY, __all__, extra=_EXTRA)
