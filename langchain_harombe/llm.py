"""Any LangChain chat model as harombe's LLM hook: a plain ``llm(prompt: str) -> str``.

The core's summariser and LLM node selector take a callable so that the core never imports a
framework; this adapter makes ``ChatOpenAI(...)``, ``ChatOllama(...)`` or any ``BaseChatModel``
fit it (``LLMSummarizer(llm=chat_model_callable(model))``), with an async twin for ``await``.
"""

from __future__ import annotations

from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import HumanMessage, SystemMessage

from harombe_core.errors import InvalidInputError, SummarizationError

__all__ = ["ChatModelCallable", "chat_model_callable", "node_selector", "summarizer"]


class ChatModelCallable:
    """``callable(prompt) -> text`` over a LangChain chat model (``acall`` for async).

    ``system_prompt`` (optional) is sent before every prompt. Model failures become
    :class:`~harombe_core.errors.SummarizationError`, which the core catches to fall back to its
    extractive summary instead of losing the turn.
    """

    def __init__(self, model: BaseChatModel, *, system_prompt: str | None = None) -> None:
        if not isinstance(model, BaseChatModel):
            raise InvalidInputError(
                f"expected a LangChain chat model (BaseChatModel), got {type(model).__name__}; "
                "build one with langchain.chat_models.init_chat_model('provider:model')."
            )
        self.model = model
        self.system_prompt = system_prompt

    def _messages(self, prompt: str) -> list[Any]:
        if not isinstance(prompt, str):
            raise InvalidInputError(f"prompt must be a str, got {type(prompt).__name__}.")
        head = [SystemMessage(self.system_prompt)] if self.system_prompt else []
        return [*head, HumanMessage(prompt)]

    def __call__(self, prompt: str) -> str:
        messages = self._messages(prompt)
        try:
            reply = self.model.invoke(messages)
        except Exception as exc:  # any provider failure becomes the core's typed error
            raise SummarizationError(f"{self!r} failed: {exc}") from exc
        return str(reply.text)

    async def acall(self, prompt: str) -> str:
        messages = self._messages(prompt)
        try:
            reply = await self.model.ainvoke(messages)
        except Exception as exc:  # any provider failure becomes the core's typed error
            raise SummarizationError(f"{self!r} failed: {exc}") from exc
        return str(reply.text)

    def __repr__(self) -> str:
        return f"ChatModelCallable({type(self.model).__name__})"


def chat_model_callable(
    model: BaseChatModel, *, system_prompt: str | None = None
) -> ChatModelCallable:
    """Wrap ``model`` as the ``llm(prompt) -> str`` callable the core's LLM features take."""
    return ChatModelCallable(model, system_prompt=system_prompt)


def summarizer(model: BaseChatModel, **options: Any) -> Any:
    """harombe's ``LLMSummarizer`` driven by a LangChain chat model."""
    from harombe_core import LLMSummarizer

    return LLMSummarizer(llm=ChatModelCallable(model), **options)


def node_selector(model: BaseChatModel, **options: Any) -> Any:
    """harombe's ``LLMNodeSelector`` (where a message hangs in the thread) on a chat model."""
    from harombe_core import LLMNodeSelector

    return LLMNodeSelector(llm=ChatModelCallable(model), **options)
