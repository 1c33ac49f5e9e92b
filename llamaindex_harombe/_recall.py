"""Recall of past messages for the retriever, the memory block and RAG in ``HarombeMemory``.

Search itself is harombe's hybrid retrieval (meaning and keywords; keywords alone without
semantic memory), scoped by the store. What is here is the part every LlamaIndex component
shares: turning recalled messages into one system-prompt text that fits a token budget.
"""

from __future__ import annotations

from collections.abc import Sequence

from harombe_core import MemoryManager
from harombe_core.integration import context_message
from harombe_core.models import Message

__all__ = ["fit_context"]


def fit_context(
    messages: Sequence[Message], manager: MemoryManager, max_tokens: int
) -> Message | None:
    """The RAG system message for ``messages`` (best first), within ``max_tokens``.

    The weakest messages are dropped until the formatted message, header and dates included,
    fits; ``None`` when nothing does.
    """
    # A tool-calling assistant turn has no text: as recalled context it would be an empty line.
    chosen = [m for m in messages if m.content.strip()]
    while chosen:
        message = context_message(chosen)
        if message is None:
            return None
        if manager.count_tokens([message]) <= max_tokens:
            return message
        chosen.pop()
    return None
