"""Any LlamaIndex LLM as the plain ``llm(prompt) -> str`` hook harombe's core takes.

harombe's LLM summariser and LLM node selector need only "text in, text out", so they stay free
of any framework. ``LlamaIndexLLM`` adapts a LlamaIndex ``LLM`` to that hook (chat models through
``chat``, completion models through ``complete``), and :func:`summarizer` / :func:`node_selector`
build the core objects from it in one call.
"""

from __future__ import annotations

import importlib
from typing import Any

from llama_index.core.base.llms.types import ChatMessage, MessageRole
from llama_index.core.llms.llm import LLM

from harombe_core.errors import InvalidInputError

__all__ = ["LlamaIndexLLM", "node_selector", "summarizer"]


class LlamaIndexLLM:
    """``LlamaIndexLLM(llm)("prompt")`` returns the model's text; ``await .acall(prompt)`` too."""

    def __init__(self, llm: LLM) -> None:
        if not isinstance(llm, LLM):
            raise InvalidInputError(
                f"llm must be a llama_index LLM, got {type(llm).__name__}; any other callable "
                "taking a prompt and returning text can be given to harombe directly."
            )
        self.llm = llm

    @property
    def _chat(self) -> bool:
        return bool(self.llm.metadata.is_chat_model)

    def __call__(self, prompt: str) -> str:
        if self._chat:
            response = self.llm.chat([ChatMessage(role=MessageRole.USER, content=prompt)])
            return response.message.content or ""
        return self.llm.complete(prompt).text

    async def acall(self, prompt: str) -> str:
        """Async twin of calling the object (the provider's own async client)."""
        if self._chat:
            response = await self.llm.achat([ChatMessage(role=MessageRole.USER, content=prompt)])
            return response.message.content or ""
        return (await self.llm.acomplete(prompt)).text

    def __repr__(self) -> str:
        return f"LlamaIndexLLM({self.llm.class_name()})"


def _core(module: str, name: str) -> Any:
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise InvalidInputError(
            f"{name} is not available in this harombe_core ({module}); upgrade harombe-memory."
        ) from exc


def summarizer(llm: LLM, **kwargs: Any) -> Any:
    """harombe's ``LLMSummarizer`` driven by a LlamaIndex LLM."""
    return _core("harombe_core.summarize", "LLMSummarizer")(llm=LlamaIndexLLM(llm), **kwargs)


def node_selector(llm: LLM, **kwargs: Any) -> Any:
    """harombe's ``LLMNodeSelector`` (where a message hangs in the thread) on a LlamaIndex LLM."""
    return _core("harombe_core.threads", "LLMNodeSelector")(llm=LlamaIndexLLM(llm), **kwargs)
