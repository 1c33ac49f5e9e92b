"""A fake chat model for tests and demos, shipped so users can test their own chains offline.

:class:`RecordingChatModel` answers from a script (or echoes the last user message) and records
every list of messages it was sent, so a test can assert exactly what the model saw. It accepts
``bind_tools`` (tool calls come from the script), which makes it usable with ``create_agent``.
``harombe chat --model fake`` uses it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool
from pydantic import Field

__all__ = ["RecordingChatModel"]


class RecordingChatModel(BaseChatModel):
    """Scripted (or echoing) chat model that records its inputs.

    ``responses`` are returned in order (strings become ``AIMessage``; an ``AIMessage`` may carry
    ``tool_calls``), or ``respond(messages)`` computes each reply from the input. When the
    script runs out, or if none was given, the model answers ``"echo: <last human message>"``
    (with ``echo="transcript"`` it lists every message it was sent, so a demo or an end-to-end
    test can see the context). ``calls`` holds a copy of every input, one list per call.
    """

    responses: list[Any] = Field(default_factory=list)  # AIMessage or str
    calls: list[list[BaseMessage]] = Field(default_factory=list)
    position: int = 0
    echo: str = "last"  # "last": echo the last human message; "transcript": every message
    respond: Callable[[list[BaseMessage]], Any] | None = None  # reply computed from the input

    @property
    def _llm_type(self) -> str:
        return "harombe-recording-fake"

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        self.calls.append([m.model_copy() for m in messages])
        if self.respond is not None:
            reply = self.respond(messages)
            message = AIMessage(content=reply) if isinstance(reply, str) else reply
        elif self.position < len(self.responses):
            reply = self.responses[self.position]
            self.position += 1
            message = AIMessage(content=reply) if isinstance(reply, str) else reply.model_copy()
        else:
            message = AIMessage(content=self._echo(messages))
        return ChatResult(generations=[ChatGeneration(message=message)])

    def _echo(self, messages: list[BaseMessage]) -> str:
        if self.echo == "transcript":
            return "saw " + " | ".join(f"{m.type}:{m.text}" for m in messages)
        last = next((m for m in reversed(messages) if isinstance(m, HumanMessage)), None)
        return f"echo: {last.text if last is not None else ''}"

    def bind_tools(
        self,
        tools: Sequence[dict[str, Any] | type | Callable[..., Any] | BaseTool],
        *,
        tool_choice: str | None = None,
        **kwargs: Any,
    ) -> Runnable[LanguageModelInput, AIMessage]:
        """Accept any tools: which tool is called is decided by the script, not the model."""
        return self
