"""LlamaIndex adapter for harombe memory.

``HarombeMemory`` gives any chat engine or agent persistent, windowed memory with recall of
earlier sessions by passing ``memory=``; ``HarombeChatStore`` / ``HarombeDBChatStore`` make
LlamaIndex's own memories persistent; ``HarombeMemoryBlock`` adds long-term recall to LlamaIndex's
``Memory`` and ``HarombeProfileBlock`` the user's profile and open tasks; ``HarombeRetriever``
serves past messages to any engine that takes a retriever. The public API is exactly ``__all__``.
"""

from harombe_core.integration import requires_packages as _requires_packages

# Without the ``llamaindex`` extra the first import fails deep inside; say which extra to install.
with _requires_packages("llamaindex_harombe", "llamaindex", ("llama_index",)):
    from llamaindex_harombe.blocks import HarombeMemoryBlock, HarombeProfileBlock
    from llamaindex_harombe.chat_store import HarombeChatStore, HarombeDBChatStore
    from llamaindex_harombe.convert import LI_KEY, from_llamaindex, to_llamaindex
    from llamaindex_harombe.embeddings import LlamaIndexEmbedder
    from llamaindex_harombe.llm import LlamaIndexLLM, node_selector, summarizer
    from llamaindex_harombe.memory import HarombeMemory
    from llamaindex_harombe.retriever import HarombeRetriever

__all__ = [
    "LI_KEY",
    "HarombeChatStore",
    "HarombeDBChatStore",
    "HarombeMemory",
    "HarombeMemoryBlock",
    "HarombeProfileBlock",
    "HarombeRetriever",
    "LlamaIndexEmbedder",
    "LlamaIndexLLM",
    "from_llamaindex",
    "node_selector",
    "summarizer",
    "to_llamaindex",
]
