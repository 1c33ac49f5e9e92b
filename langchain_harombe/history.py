"""HarombeChatMessageHistory: a LangChain chat history backed by a harombe store.

``messages`` is not the whole session but the *view* a model should get: the newest turns that
fit ``max_tokens`` (``strategy="simple"``), or the threaded, summarised or hybrid context the
core assembles. The view is computed from the store alone, so two reads with no write between
them return the same list, which ``RunnableWithMessageHistory`` relies on when it subtracts the
history from its input. Writes go through one transaction per batch.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any, Literal

from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.messages import BaseMessage
from langchain_core.runnables.utils import ConfigurableFieldSpec

from harombe_core import MemoryManager
from harombe_core.errors import InvalidInputError, InvalidMessageError
from harombe_core.integration import Call, Flow, Threader, adrive, drive
from harombe_core.models import Message, Session
from harombe_core.validate import (
    check_budget,
    check_flag,
    check_id,
    check_list,
    check_options,
    keywords_checked,
    optional_id,
    show,
)
from langchain_harombe.convert import from_langchain, storable_message, to_langchain

__all__ = [
    "HarombeChatMessageHistory",
    "Strategy",
    "conversation_history_factory",
    "conversation_history_fields",
    "session_history_factory",
]

Strategy = Literal["simple", "threaded", "summarization", "hybrid", "all"]
_STRATEGIES: frozenset[str] = frozenset(("simple", "threaded", "summarization", "hybrid", "all"))
#: What ``context_options`` may set: the keyword arguments of ``MemoryManager.get_context``.
_CONTEXT_OPTIONS: frozenset[str] = frozenset(("keep_last", "query", "budget", "user_profile"))
#: What ``manager_options`` may set: ``MemoryManager``'s keyword arguments.
_MANAGER_OPTIONS: frozenset[str] = frozenset(
    ("max_history_tokens", "embedding", "vector_store", "token_counter", "config", "encryption_key")
)


def _converted(messages: Any, *, storable: bool = False) -> list[Message]:
    """A batch of LangChain messages as harombe messages (a lone message is refused); with
    ``storable``, a message that cannot be stored whole is kept in its readable form
    (:func:`~langchain_harombe.convert.storable_message`) instead of refused."""
    batch = check_list(
        messages,
        "add_messages",
        of="LangChain messages",
        single=(BaseMessage,),
        error=InvalidMessageError,
        hint="wrap a single message in a list or call add_message()",
    )
    convert = storable_message if storable else from_langchain
    return [convert(m) for m in batch]


def resolve_manager(
    manager: MemoryManager | None,
    storage_path: str | os.PathLike[str] | None,
    manager_options: dict[str, Any] | None,
    *,
    owner: str,
    defaults: dict[str, Any] | None = None,
) -> tuple[MemoryManager, bool]:
    """The manager to use and whether we opened it (and so must close it).

    A ``storage_path`` opens a manager with ``manager_options`` over the core's defaults:
    semantic memory with the bundled model, as everywhere in harombe (the model is loaded once
    per process and the semantic memory is shared per database, so a history per request costs
    neither again). ``manager_options={"embedding": None}`` keeps keyword search only.
    ``defaults`` are the caller's own defaults, under ``manager_options``.
    """
    if manager is not None and storage_path is not None:
        raise InvalidInputError(f"{owner}: pass manager= or storage_path=, not both.")
    if manager is not None:
        if not isinstance(manager, MemoryManager):
            raise InvalidInputError(
                f"{owner}: manager must be a harombe_core.MemoryManager, got "
                f"{type(manager).__name__}; open one on the file and pass that: "
                f"MemoryManager({_path_example(manager)})."
            )
        return manager, False
    if storage_path is None:
        raise InvalidInputError(
            f"{owner}: pass manager=MemoryManager(...) or storage_path='path/to/memory.db'."
        )
    options = check_options(manager_options, _MANAGER_OPTIONS, "manager_options")
    return MemoryManager(storage_path, **{**(defaults or {}), **options}), True


class HarombeChatMessageHistory(BaseChatMessageHistory):
    """Persistent, windowed chat history for ``RunnableWithMessageHistory`` and friends.

    Args:
        session_id: The conversation; created on first write if it does not exist.
        manager: A :class:`~harombe_core.MemoryManager` to share (preferred in applications).
        storage_path: Or a database path; the history then opens (and owns) its own manager.
        user_id: The user this history acts for: a new session is created for them, and a
            session of another user (or of none) is refused with ``SessionOwnershipError`` on
            every read and write, so a guessed or reused ``session_id`` never shows another
            user's messages. Without it the history reaches only sessions that have no owner.
        strategy: ``"simple"`` (token window), ``"threaded"``, ``"summarization"``, ``"hybrid"``
            (the core's context strategies) or ``"all"`` (every message, no window).
        max_tokens: Budget of the view (default: the manager's ``max_history_tokens``).
        start_on_user: Never let the view begin with an assistant turn.
        system_prompt: Set as the session's system prompt when the session is created.
        manager_options: Keyword arguments for the manager opened from ``storage_path``
            (semantic memory is on by default; ``{"embedding": None}`` for keywords only).
        context_options: Extra keyword arguments for ``MemoryManager.get_context``.
        node_selector: With ``strategy="threaded"``, where each new user message hangs in the
            conversation graph: ``"embedding"`` (default when the manager has semantic memory),
            ``"linear"`` (default otherwise), ``"llm"``-style selectors such as
            ``langchain_harombe.node_selector(chat_model)``, or any object with
            ``select_parent(graph, message)``. Writes then thread the messages; the view is the
            path from the thread's root to the newest message.
    """

    @keywords_checked
    def __init__(
        self,
        session_id: str,
        *,
        manager: MemoryManager | None = None,
        storage_path: str | os.PathLike[str] | None = None,
        user_id: str | None = None,
        strategy: Strategy = "simple",
        max_tokens: int | None = None,
        start_on_user: bool = False,
        system_prompt: str | None = None,
        manager_options: dict[str, Any] | None = None,
        context_options: dict[str, Any] | None = None,
        node_selector: Any = None,
    ) -> None:
        self._configure(
            session_id,
            manager=manager,
            storage_path=storage_path,
            user_id=user_id,
            strategy=strategy,
            max_tokens=max_tokens,
            start_on_user=start_on_user,
            manager_options=manager_options,
            context_options=context_options,
            node_selector=node_selector,
        )
        existing = self._check()
        if system_prompt is not None and existing is None:
            self.manager.create_session(system_prompt, None, user_id, session_id=session_id)

    def _configure(
        self,
        session_id: str,
        *,
        manager: MemoryManager | None,
        storage_path: str | os.PathLike[str] | None,
        user_id: str | None,
        strategy: Strategy,
        max_tokens: int | None,
        start_on_user: bool,
        manager_options: dict[str, Any] | None,
        context_options: dict[str, Any] | None,
        node_selector: Any,
    ) -> None:
        """Check and keep the arguments (everything ``__init__`` does but read the store)."""
        check_id(session_id, "session_id")
        optional_id(user_id, "user_id")
        if not isinstance(strategy, str) or strategy not in _STRATEGIES:
            raise InvalidInputError(
                f"unknown strategy {show(strategy)}; use one of {sorted(_STRATEGIES)}."
            )
        if max_tokens is not None:
            check_budget(max_tokens)
        check_flag(start_on_user, "start_on_user")
        # A manager subclass may take more context options; MemoryManager's own are known.
        own = (
            not isinstance(manager, MemoryManager)
            or type(manager).get_context is MemoryManager.get_context
        )
        check_options(context_options, _CONTEXT_OPTIONS if own else None, "context_options")
        self.manager, self._owns_manager = resolve_manager(
            manager, storage_path, manager_options, owner="HarombeChatMessageHistory"
        )
        self.session_id = session_id
        self.user_id = user_id
        self.strategy: Strategy = strategy
        self.max_tokens = max_tokens
        self.start_on_user = start_on_user
        self.context_options = dict(context_options or {})
        self.node_selector = node_selector

    def _check(self) -> Session | None:
        """The session if this history may use it (None if new); SessionOwnershipError if not."""
        return self.manager.check_owner(self.session_id, self.user_id, exact=True)

    async def _acheck(self) -> Session | None:
        return await self.manager.acheck_owner(self.session_id, self.user_id, exact=True)

    # reads --------------------------------------------------------------------------------
    def view(self) -> list[Message]:
        """The strategy's view of the session as harombe messages (what :attr:`messages`
        converts), each with its store id."""
        return drive(viewing(self))

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]
        """The strategy's view of the session, oldest first, as LangChain messages."""
        return [to_langchain(m) for m in self.view()]

    async def aget_messages(self) -> list[BaseMessage]:
        return [to_langchain(m) for m in await adrive(viewing(self))]

    def get_all_messages(self) -> list[BaseMessage]:
        """Every stored message of the session, whatever the strategy."""
        self._check()
        stored = self.manager.get_messages(self.session_id, user_id=self.user_id)
        return [to_langchain(m) for m in stored]

    # writes -------------------------------------------------------------------------------
    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        """Store ``messages`` in one transaction (all or none), threading them if asked."""
        drive(saving(self, messages))

    async def aadd_messages(self, messages: Sequence[BaseMessage]) -> None:
        await adrive(saving(self, messages))

    def _threader(self) -> Threader:
        """The session's Threader, shared by every history of this manager with the same
        selector (a history made per request reuses the view instead of re-reading it)."""
        from harombe_core.integration import resolve_selector, shared_threader

        spec = self.node_selector
        if spec is None:
            spec = "embedding" if self.manager.embedder is not None else "linear"
        key = spec if isinstance(spec, str) else id(spec)

        def make() -> Any:
            if spec == "embedding" and self.node_selector is None:
                return resolve_selector("embedding", embedder=self.manager.embedder)
            return resolve_selector(spec)

        return shared_threader(self.manager, self.session_id, key, make, user_id=self.user_id)

    def clear(self) -> None:
        """Delete the session's messages (the session itself, its owner and prompt stay)."""
        self._check()
        self.manager.clear_session(self.session_id, user_id=self.user_id)

    async def aclear(self) -> None:
        await self._acheck()
        await self.manager.aclear_session(self.session_id, user_id=self.user_id)

    def close(self) -> None:
        """Close the manager if this history opened it from ``storage_path``."""
        if self._owns_manager:
            self.manager.close()

    def __repr__(self) -> str:
        return (
            f"HarombeChatMessageHistory(session_id={self.session_id!r}, "
            f"user_id={self.user_id!r}, strategy={self.strategy!r}, max_tokens={self.max_tokens})"
        )


def viewing(history: HarombeChatMessageHistory) -> Flow[list[Message]]:
    """``history.view()`` written once for both paths, over the manager's sync/async pairs
    (the agent middleware runs it as part of its own flow)."""
    m, sid, uid = history.manager, history.session_id, history.user_id
    yield Call(m.check_owner, sid, uid, exact=True, native=m.acheck_owner)
    if history.strategy == "all":
        stored: list[Message] = yield Call(m.get_messages, sid, user_id=uid, native=m.aget_messages)
        return stored
    context: list[Message] = yield Call(
        m.get_context,
        sid,
        strategy=history.strategy,
        max_tokens=history.max_tokens,
        start_on_user=history.start_on_user,
        user_id=uid,
        native=m.aget_context,
        **history.context_options,
    )
    return context


def saving(
    history: HarombeChatMessageHistory, messages: Sequence[BaseMessage], *, storable: bool = False
) -> Flow[None]:
    """``history.add_messages(messages)`` written once for both paths, over the manager's
    pairs: one transaction, all or none. ``storable`` is for messages the caller's framework
    keeps whole elsewhere (an agent's state): one harombe cannot store as it is (an artifact
    of Documents, text with NUL bytes) is stored in its readable form, marked partial."""
    batch = _converted(messages, storable=storable)
    if not batch:
        return
    m, sid, uid = history.manager, history.session_id, history.user_id
    yield Call(m.check_owner, sid, uid, exact=True, native=m.acheck_owner)
    if history.strategy == "threaded":
        threader = history._threader()
        yield Call(threader.append, batch, native=threader.aappend)
    else:
        yield Call(m.save_messages, sid, batch, user_id=uid, native=m.asave_messages)


def unchecked_history(
    session_id: str, *, manager: MemoryManager, **options: Any
) -> HarombeChatMessageHistory:
    """A history over a shared manager whose owner check is left to the flows that use it
    (:func:`viewing` and :func:`saving` check it again), so an async caller (the agent
    middleware) makes one without a store read on the event loop."""
    history = HarombeChatMessageHistory.__new__(HarombeChatMessageHistory)
    history._configure(
        session_id, manager=manager, storage_path=None, manager_options=None, **options
    )
    return history


def session_history_factory(
    manager: MemoryManager, **options: Any
) -> Callable[[str], HarombeChatMessageHistory]:
    """``get_session_history`` for ``RunnableWithMessageHistory`` keyed by ``session_id``.

    ``options`` are passed to every :class:`HarombeChatMessageHistory` (strategy, max_tokens...).
    """

    def get_session_history(session_id: str) -> HarombeChatMessageHistory:
        return HarombeChatMessageHistory(session_id, manager=manager, **options)

    return get_session_history


def conversation_history_factory(
    manager: MemoryManager, **options: Any
) -> Callable[[str, str], HarombeChatMessageHistory]:
    """The two-key form: ``get_session_history(user_id, conversation_id)``.

    Each (user, conversation) pair is its own session, owned by ``user_id``
    (:meth:`~harombe_core.MemoryManager.conversation_session_id`: ``"{user}:{conversation}"``
    with ``%`` and ``:`` in the user id escaped, so no two pairs share an id), and two users can
    use the same conversation id without seeing each other's messages. Histories stored by
    earlier versions under the unescaped id are found and continued. Pass
    :func:`conversation_history_fields` as ``history_factory_config``; both keys are required.
    """
    if "user_id" in options:
        raise InvalidInputError(
            "conversation_history_factory takes the user from each call (the 'user_id' "
            "configurable field); do not pass user_id= to the factory."
        )

    def get_session_history(user_id: str, conversation_id: str) -> HarombeChatMessageHistory:
        session_id = manager.conversation_session_id(user_id, conversation_id)
        return HarombeChatMessageHistory(session_id, manager=manager, user_id=user_id, **options)

    return get_session_history


def conversation_history_fields() -> list[ConfigurableFieldSpec]:
    """``history_factory_config`` matching :func:`conversation_history_factory`."""
    return [
        ConfigurableFieldSpec(
            id=f"{what}_id",
            annotation=str,
            name=name,
            description=f"Unique identifier for the {what}.",
            default="",
            is_shared=True,
        )
        for what, name in (("user", "User ID"), ("conversation", "Conversation ID"))
    ]


def _path_example(value: object) -> str:
    """The value itself when it looks like the path meant, else a placeholder path."""
    return repr(os.fspath(value)) if isinstance(value, str | os.PathLike) else "'memory.db'"
