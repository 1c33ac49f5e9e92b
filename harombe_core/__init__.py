"""harombe memory: persistent, windowed, threaded and searchable conversation memory.

The public API is exactly ``__all__``. Names are imported lazily so that ``import harombe_core``
stays light (no torch, chromadb, langchain or llama_index until a feature needs them).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from harombe_core import errors as _errors
from harombe_core.errors import *  # noqa: F403  (every error class, as errors.__all__ lists them)
from harombe_core.lazy import lazy_attributes as _lazy_attributes
from harombe_core.limits import Limits, current_limits, set_limits
from harombe_core.models import ConversationNode, Message, MessageSummary, SearchHit, Session

if TYPE_CHECKING:
    from harombe_core.chat_memory import ChatMemory
    from harombe_core.config import MemoryConfig
    from harombe_core.facts.extract import OfflineExtractor
    from harombe_core.facts.llm import LLMExtractor
    from harombe_core.facts.models import Fact, FactHit, FactSource, Profile, SessionState
    from harombe_core.manager import MemoryManager
    from harombe_core.store.sqlite import SQLiteStore
    from harombe_core.strategies import ContextBudget
    from harombe_core.summarize import ExtractiveSummarizer, LLMSummarizer, SessionSummary
    from harombe_core.threads import EmbeddingNodeSelector, LinearNodeSelector, LLMNodeSelector

__version__ = "0.1.0"

_LAZY: dict[str, str] = {
    "MemoryManager": "harombe_core.manager",
    "MemoryConfig": "harombe_core.config",
    "SQLiteStore": "harombe_core.store.sqlite",
    "ChatMemory": "harombe_core.chat_memory",
    "LinearNodeSelector": "harombe_core.threads",
    "EmbeddingNodeSelector": "harombe_core.threads",
    "LLMNodeSelector": "harombe_core.threads",
    "ExtractiveSummarizer": "harombe_core.summarize",
    "LLMSummarizer": "harombe_core.summarize",
    "SessionSummary": "harombe_core.summarize",
    "ContextBudget": "harombe_core.strategies",
    "Fact": "harombe_core.facts.models",
    "FactHit": "harombe_core.facts.models",
    "FactSource": "harombe_core.facts.models",
    "Profile": "harombe_core.facts.models",
    "SessionState": "harombe_core.facts.models",
    "OfflineExtractor": "harombe_core.facts.extract",
    "LLMExtractor": "harombe_core.facts.llm",
}

__all__ = [
    "ChatMemory",
    "ContextBudget",
    "ConversationNode",
    "EmbeddingNodeSelector",
    "ExtractiveSummarizer",
    "Fact",
    "FactHit",
    "FactSource",
    "LLMExtractor",
    "LLMNodeSelector",
    "LLMSummarizer",
    "Limits",
    "LinearNodeSelector",
    "MemoryConfig",
    "MemoryManager",
    "Message",
    "MessageSummary",
    "OfflineExtractor",
    "Profile",
    "SQLiteStore",
    "SearchHit",
    "Session",
    "SessionState",
    "SessionSummary",
    "__version__",
    "current_limits",
    "set_limits",
]
__all__ += _errors.__all__


__getattr__, __dir__ = _lazy_attributes(__name__, _LAZY, __all__)
