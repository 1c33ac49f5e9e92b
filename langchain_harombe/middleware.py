"""Agent memory for LangChain 1.x ``create_agent``, with no change to the agent's code.

``HarombeMemoryMiddleware`` does three things around every model call of the agent loop:

1. before the model: every message the agent state gained since the last save (the user's
   input, tool results) is stored, in one transaction;
2. the model is sent the session's windowed (or threaded, summarised, hybrid) history from the
   store instead of the raw state, optionally with relevant turns of the user's *other* sessions
   added to the system message (with no known user, relevant older turns of the same session:
   recall never crosses into sessions that are not known to be the same user's);
3. after the model: its reply (and its tool calls) is stored.

The session is the run's ``thread_id`` (``config={"configurable": {"thread_id": ...}}``) unless
a fixed ``session_id`` is given; the user is ``configurable["user_id"]`` or ``user_id`` on the
runtime context. As in LangGraph, a thread id names one conversation whoever runs it; the
session belongs to the user it was created for, and a run naming another user (or naming none,
on a user's thread) is refused with ``SessionOwnershipError`` before anything is stored or sent
to the model.

The current turn (from the last user message on, tool calls with their results) is always sent
whole, so a tool call is never separated from its result; older turns fill what is left of the
budget.

With ``checkpointer=HarombeSaver(...)`` on the same database the checkpointer already records
the thread's messages into that session with each checkpoint, so the middleware writes nothing
(nothing is stored twice) and adds to its view the newest messages of the state that are not
stored yet (a checkpoint may be saved after the next model call starts).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Annotated, Any, NamedTuple, NotRequired

from langchain.agents.middleware import AgentMiddleware, AgentState, ModelRequest, ModelResponse
from langchain.agents.middleware.types import PrivateStateAttr
from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage
from langgraph.config import get_config
from langgraph.constants import CONFIG_KEY_CHECKPOINTER
from langgraph.runtime import Runtime

from harombe_core import MemoryManager
from harombe_core.errors import InvalidInputError
from harombe_core.integration import Flow, adrive, drive
from harombe_core.models import Message
from harombe_core.validate import keywords_checked
from langchain_harombe._recall import DEFAULT_RECALL_TOKENS, recalling
from langchain_harombe.checkpoint_rows import context_user
from langchain_harombe.convert import storable_message, to_langchain
from langchain_harombe.history import (
    HarombeChatMessageHistory,
    Strategy,
    saving,
    unchecked_history,
    viewing,
)

__all__ = ["HarombeMemoryMiddleware", "HarombeMemoryState"]


class HarombeMemoryState(AgentState[Any]):
    """Agent state plus which of its messages are already stored (private to the middleware).

    ``harombe_saved_ids`` are the ids of the state's messages once stored: ids, not a count,
    because a node may shorten the list (``RemoveMessage``, as LangGraph's guides trim a
    thread), and a count would then skip the turns that follow. ``harombe_saved`` is the
    count kept by earlier versions, still read from their checkpoints."""

    harombe_saved: NotRequired[Annotated[int, PrivateStateAttr]]
    harombe_saved_ids: NotRequired[Annotated[list[str], PrivateStateAttr]]


class _Pending(NamedTuple):
    """Messages a save hook writes into ``history``, and the state's messages once they are."""

    history: HarombeChatMessageHistory
    messages: list[BaseMessage]
    state: list[BaseMessage]

    def saving(self) -> Flow[dict[str, Any]]:
        # The agent's state holds these messages whole; what harombe cannot store as it is (a
        # tool's artifact of Documents, text with NUL bytes) is kept in its readable form, as
        # HarombeSaver's copy of a thread keeps it, rather than failing the run mid-turn.
        yield from saving(self.history, self.messages, storable=True)
        ids = [m.id for m in self.state if m.id is not None]
        return {"harombe_saved": len(self.state), "harombe_saved_ids": ids}


def _key(message: BaseMessage) -> tuple[str, str]:
    """A LangChain message as the (role, content) a stored harombe message would have."""
    stored = storable_message(message)
    return stored.role, stored.content


class HarombeMemoryMiddleware(AgentMiddleware[HarombeMemoryState, Any, Any]):
    """Persistent, windowed memory (and optional recall of past sessions) for an agent.

    Args:
        manager: The :class:`~harombe_core.MemoryManager` holding the conversations.
        session_id: A fixed session; default: the run's ``thread_id``.
        user_id: A fixed owner; default: ``configurable["user_id"]`` or the runtime context's.
        strategy / max_tokens / start_on_user / context_options / node_selector: the context
            view (and, for ``"threaded"``, how turns are threaded), as in
            :class:`~langchain_harombe.HarombeChatMessageHistory`.
        recall_tokens: When semantic memory is on, up to this many tokens (default 500, as
            ``harombe chat``; 0 turns recall off) of relevant past turns, the user's and the
            assistant's, from the user's other sessions are added to the system message (from
            this session's older turns when the run names no user). What the model is sent
            anyway (the window and the turn being answered) is never recalled.
        profile_tokens: If > 0 and the run names a user, the user's profile from harombe's
            user memory (facts and preferences most relevant to the newest user message,
            within this many tokens) and their open tasks are added to the system message.
    """

    state_schema = HarombeMemoryState

    @keywords_checked
    def __init__(
        self,
        manager: MemoryManager,
        *,
        session_id: str | None = None,
        user_id: str | None = None,
        strategy: Strategy = "simple",
        max_tokens: int | None = None,
        start_on_user: bool = False,
        recall_tokens: int = DEFAULT_RECALL_TOKENS,
        profile_tokens: int = 0,
        context_options: dict[str, Any] | None = None,
        node_selector: Any = None,
    ) -> None:
        super().__init__()
        if not isinstance(manager, MemoryManager):
            raise InvalidInputError(
                f"manager must be a harombe_core.MemoryManager, got {type(manager).__name__}; "
                "open one on the file and pass that: MemoryManager('memory.db')."
            )
        self.manager = manager
        self.session_id = session_id
        self.user_id = user_id
        self.strategy: Strategy = strategy
        self.max_tokens = max_tokens
        self.start_on_user = start_on_user
        self.recall_tokens = recall_tokens
        self.profile_tokens = profile_tokens
        self.context_options = context_options
        self.node_selector = node_selector
        # Validates strategy and the other options once, not on the first model call.
        self._history("validate", None)

    # keys ---------------------------------------------------------------------------------
    def _keys(self, runtime: Runtime[Any] | None) -> tuple[str, str | None]:
        configurable: dict[str, Any] = {}
        try:
            configurable = dict(get_config().get("configurable") or {})
        except RuntimeError:  # called outside a runnable context (direct unit use)
            configurable = {}
        session_id = self.session_id or configurable.get("thread_id")
        if not session_id:
            raise InvalidInputError(
                "HarombeMemoryMiddleware needs a session: pass session_id=... or invoke the "
                "agent with config={'configurable': {'thread_id': '...'}}."
            )
        user_id = self.user_id or configurable.get("user_id")
        if user_id is None:
            user_id = context_user(getattr(runtime, "context", None))
        return str(session_id), None if user_id is None else str(user_id)

    def _history(self, session_id: str, user_id: str | None) -> HarombeChatMessageHistory:
        """The session's history; its owner is checked by every read and write of it (on the
        async path too, so making one reads nothing)."""
        return unchecked_history(
            session_id,
            manager=self.manager,
            user_id=user_id,
            strategy=self.strategy,
            max_tokens=self.max_tokens,
            start_on_user=self.start_on_user,
            context_options=self.context_options,
            node_selector=self.node_selector,
        )

    # saving -------------------------------------------------------------------------------
    def _unsaved(self, state: HarombeMemoryState) -> tuple[list[BaseMessage], list[BaseMessage]]:
        """The state's messages not stored yet, and all of them."""
        messages: list[BaseMessage] = list(state.get("messages") or [])
        count = state.get("harombe_saved") or 0
        saved_ids = state.get("harombe_saved_ids")
        if saved_ids is None:  # nothing stored yet, or a checkpoint of an earlier version
            return messages[count:], messages
        stored = set(saved_ids)
        # (a message without an id, which LangGraph's reducer never leaves in a graph's
        # state, is placed by the count)
        new = [
            m
            for i, m in enumerate(messages)
            if (m.id not in stored if m.id is not None else i >= count)
        ]
        return new, messages

    def _recorded(self, session_id: str) -> bool:
        """True when the graph's checkpointer records this thread into this very session."""
        try:
            configurable = get_config().get("configurable") or {}
        except RuntimeError:
            return False
        records = getattr(configurable.get(CONFIG_KEY_CHECKPOINTER), "records_session", None)
        return callable(records) and bool(
            records(self.manager, configurable.get("thread_id"), session_id)
        )

    def _pending(self, state: HarombeMemoryState, runtime: Runtime[Any]) -> _Pending | None:
        """What a save hook writes: ``None`` when the state holds nothing new, or when the
        graph's checkpointer already records this thread into this very session."""
        new, messages = self._unsaved(state)
        if not new:
            return None
        session_id, user_id = self._keys(runtime)
        if self._recorded(session_id):
            return None
        return _Pending(self._history(session_id, user_id), new, messages)

    def before_model(
        self, state: HarombeMemoryState, runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        """Save the messages the session lacks: before the model, the new input; after it
        (the same hook), the model's reply."""
        return drive(self._saving(state, runtime))

    async def abefore_model(
        self, state: HarombeMemoryState, runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        return await adrive(self._saving(state, runtime))

    def _saving(
        self, state: HarombeMemoryState, runtime: Runtime[Any]
    ) -> Flow[dict[str, Any] | None]:
        """The save hooks written once for both paths."""
        pending = self._pending(state, runtime)
        if pending is None:
            return None
        saved = yield from pending.saving()
        return saved

    after_model = before_model
    aafter_model = abefore_model

    # the model call -----------------------------------------------------------------------
    def _build(self, request: ModelRequest[Any]) -> Flow[ModelRequest[Any]]:
        """The request the model is sent, written once for both paths: the session's view,
        recalled turns and the user's profile, each read over the manager's sync/async pair."""
        session_id, user_id = self._keys(request.runtime)
        view = yield from viewing(self._history(session_id, user_id))
        recall = yield from self._recall(request.messages, session_id, user_id, view)
        profile = yield from self._profile(request.messages, user_id)
        notes = "\n\n".join(n for n in (profile, recall) if n)
        window = self._within_budget(list(request.messages), view)
        return self._assemble(request, window, notes or None)

    def _within_budget(
        self, state_messages: list[BaseMessage], view: list[Message]
    ) -> list[BaseMessage]:
        """The stored window, its oldest messages dropped so that the state's newest messages
        the store does not hold yet (a checkpointer may save the last step's checkpoint after
        this call starts) fit the budget beside it: the model gets the same window whether or
        not that save has landed. The system prompt is always kept."""
        window = [to_langchain(m) for m in view]
        ids = {m.id for m in window if m.id is not None}
        held = [i for i, m in enumerate(state_messages) if m.id is not None and m.id in ids]
        if not held or held[-1] + 1 >= len(state_messages):
            return window
        pending = [storable_message(m) for m in state_messages[held[-1] + 1 :]]
        budget = self.max_tokens if self.max_tokens is not None else self.manager.max_history_tokens
        spent = self.manager.count_tokens(pending) + sum(m.token_count or 0 for m in view)
        first = 1 if view and view[0].role == "system" else 0
        drop = first
        while spent > budget and drop < len(view):
            spent -= view[drop].token_count or 0
            drop += 1
        return window[:first] + window[drop:]

    def _profile(self, messages: Sequence[BaseMessage], user_id: str | None) -> Flow[str | None]:
        """The user's profile and open tasks, for the system message (None: nothing known)."""
        if self.profile_tokens <= 0 or user_id is None:
            return None
        query = next((m.text for m in reversed(messages) if isinstance(m, HumanMessage)), "")
        return (
            yield from self.manager.user_memory.note(
                user_id, max_tokens=self.profile_tokens, query=query.strip() or None
            )
        )

    def _recall(
        self,
        messages: Sequence[BaseMessage],
        session_id: str,
        user_id: str | None,
        view: Sequence[Message],
    ) -> Flow[str | None]:
        if self.recall_tokens <= 0 or not self.manager.semantic_enabled:
            return None
        query = next((m.text for m in reversed(messages) if isinstance(m, HumanMessage)), "")
        found = yield from recalling(
            self.manager,
            query,
            session_id=session_id,
            user_id=user_id,
            max_tokens=self.recall_tokens,
        )
        # Never recall what the model is sent anyway: the window, and the turn being answered
        # (from the newest user message on), which a checkpointer may have stored before this
        # call. Older turns of the state outside the window may be recalled: that is recall.
        shown = {m.id for m in view if m.id is not None}
        sent: set[tuple[str, str]] = {(m.role, m.content) for m in view}
        start = max((i for i, m in enumerate(messages) if isinstance(m, HumanMessage)), default=0)
        sent.update(_key(m) for m in messages[start:])
        context = [m for m in found if m.id not in shown and (m.role, m.content) not in sent]
        return self.manager.format_context(context) if context else None

    @staticmethod
    def _assemble(
        request: ModelRequest[Any], view: list[BaseMessage], recall: str | None
    ) -> ModelRequest[Any]:
        # The current turn (from the newest user message on) is sent whole even if the budget
        # is smaller, so the model always sees the question and every tool result it asked for.
        state_messages: list[BaseMessage] = list(request.messages)
        start = max(
            (i for i, m in enumerate(state_messages) if isinstance(m, HumanMessage)), default=0
        )
        current: list[BaseMessage] = state_messages[start:]
        view_ids = {m.id for m in view if m.id is not None}
        # The state's newest messages that the store does not hold yet (a checkpointer that
        # records the thread may save the last step's checkpoint after this call starts).
        stored = [i for i, m in enumerate(state_messages) if m.id is not None and m.id in view_ids]
        if stored and stored[-1] + 1 < len(state_messages):
            pending = state_messages[stored[-1] + 1 :]
            view = [*view, *pending]
            view_ids.update(m.id for m in pending if m.id is not None)
        if current and current[0].id is not None and current[0].id not in view_ids:
            view = current
        overrides: dict[str, Any] = {"messages": view}
        if recall:
            base = request.system_message.text if request.system_message is not None else ""
            overrides["system_message"] = SystemMessage(f"{base}\n\n{recall}" if base else recall)
        return request.override(**overrides)

    def wrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], ModelResponse[Any]],
    ) -> ModelResponse[Any]:
        return handler(drive(self._build(request)))

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelResponse[Any]:
        return await handler(await adrive(self._build(request)))
