"""``HarombeMemory``: a LlamaIndex ``BaseMemory`` backed by the harombe store.

Pass it as ``memory=`` to any chat engine or agent. Every message is written to SQLite as it is
put, so a new process that builds the same memory (same ``storage_path`` and ``session_id``)
continues the conversation; without a ``session_id`` each memory gets a new session, as
LlamaIndex's own ``Memory`` does, so two users never share one by default.

``get`` returns the newest messages that fit the token limit, counted as LlamaIndex counts them
(text, with tool calls and their results included), never starting on an assistant or tool
turn, and never nothing: when even the newest turn does not fit, it is returned whole, as
LlamaIndex's ``Memory`` keeps its last turn. The window is the core's
(:meth:`~harombe_core.manager.MemoryManager.get_context` with
:class:`~harombe_core.tokens.TextTokenCounter`, LlamaIndex's counting): it reads only the rows
it can use, never the whole session. When the
engine passes the user's input, the most relevant turns of the user's earlier sessions come
first as one system message (only with a ``user_id``: recall never reaches sessions not known
to be the same user's), found by meaning and by keyword with the bundled offline model.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Callable, Sequence
from typing import Any, Literal

from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.bridge.pydantic import Field, PrivateAttr
from llama_index.core.llms.llm import LLM
from llama_index.core.memory.types import BaseMemory
from llama_index.core.storage.chat_store.base_db import MessageStatus

from harombe_core import MemoryManager
from harombe_core.errors import InvalidBudgetError, InvalidInputError
from harombe_core.integration import Call, Fix, Flow, Threader, adrive, drive, resolve_selector
from harombe_core.models import Message, Session
from harombe_core.tokens import TextTokenCounter
from harombe_core.validate import (
    MAX_TOP_K,
    check_budget,
    check_count,
    check_id,
    check_location,
    known_arguments,
    optional_id,
    pydantic_errors,
)
from llamaindex_harombe._recall import fit_context
from llamaindex_harombe.convert import from_llamaindex_list, to_llamaindex
from llamaindex_harombe.llm import LlamaIndexLLM

__all__ = [
    "DEFAULT_EMBEDDING",
    "DEFAULT_STORAGE_PATH",
    "DEFAULT_TOKEN_LIMIT",
    "DEFAULT_VECTOR_STORE",
    "LLAMAINDEX_EMBEDDING",
    "HarombeMemory",
    "embedding_field",
    "vector_store_field",
]

#: Where memories live unless told otherwise (one file for every session and user).
DEFAULT_STORAGE_PATH = "~/.harombe/memory.db"
#: The same default as LlamaIndex's ChatMemoryBuffer when no LLM is given.
DEFAULT_TOKEN_LIMIT = 3000
_CONTEXT_RATIO = 0.75  # LlamaIndex's share of an LLM's context window given to history
#: Semantic memory by default, as in the core and the LangChain adapter: the bundled, offline
#: all-MiniLM-L6-v2 with an embedded Chroma index beside the database. ``embedding=None`` keeps
#: keyword search only.
DEFAULT_EMBEDDING = "default"
DEFAULT_VECTOR_STORE = "database"


def embedding_field() -> Any:
    """The ``embedding`` field of every component opened from a path: one default for all."""
    return Field(
        default=DEFAULT_EMBEDDING,
        description="Embedding model for search by meaning ('default': the bundled offline "
        "all-MiniLM-L6-v2; 'llamaindex': Settings.embed_model; None: keyword search only).",
    )


def vector_store_field() -> Any:
    return Field(default=DEFAULT_VECTOR_STORE, description="Vector index ('chroma').")


Strategy = Literal["simple", "summarization", "hybrid", "threaded"]


#: ``embedding`` value meaning "a LlamaIndex embedding model" (``embed_model=``, else
#: ``Settings.embed_model``), recorded by ``to_dict`` in place of the model object.
LLAMAINDEX_EMBEDDING = "llamaindex"


def open_manager(
    storage_path: str | os.PathLike[str],
    embedding: Any,
    vector_store: Any,
    embed_model: BaseEmbedding | None = None,
) -> MemoryManager:
    """A MemoryManager for a location; semantic memory only when both parts are named.

    ``embedding="default"`` is the bundled model, loaded once per process and shared by every
    component (see :mod:`harombe_core.embeddings`).
    ``embedding="llamaindex"`` (implied by ``embed_model``) embeds with ``embed_model`` or, when
    reopening from a dict, LlamaIndex's ``Settings.embed_model``; the vector index refuses a
    different model than the one it was built with.
    """
    if embed_model is not None:
        embedding = LLAMAINDEX_EMBEDDING
        vector_store = vector_store or DEFAULT_VECTOR_STORE
    if embedding is None or vector_store is None:
        return MemoryManager(storage_path, embedding=None, vector_store=None)
    if embedding == LLAMAINDEX_EMBEDDING:
        from llama_index.core import Settings

        from llamaindex_harombe.embeddings import LlamaIndexEmbedder

        if embed_model is None:
            try:
                embed_model = Settings.embed_model
            except ImportError as exc:  # LlamaIndex's default is OpenAI's, if installed
                raise InvalidInputError(
                    "embedding='llamaindex' embeds with LlamaIndex's Settings.embed_model, "
                    f"which is not usable here ({exc}). Set Settings.embed_model, pass "
                    "embed_model=..., or use embedding='default' (the bundled model)."
                ) from None
        embedding = LlamaIndexEmbedder(embed_model)
    return MemoryManager(storage_path, embedding=embedding, vector_store=vector_store)


def describe_manager(manager: MemoryManager) -> tuple[str, Any, Any]:
    """(storage_path, embedding, vector_store) that reopen ``manager``'s store from a dict."""
    from llamaindex_harombe.embeddings import LlamaIndexEmbedder

    if not isinstance(manager, MemoryManager):
        raise InvalidInputError(
            f"manager must be a harombe_core.MemoryManager, got {type(manager).__name__}."
        )
    location = manager.store.location
    if not manager.semantic_enabled:
        return location, None, None
    named = manager.vector_store
    vector_store = named if named in ("database", "chroma", "pgvector") else DEFAULT_VECTOR_STORE
    if isinstance(manager.embedder, LlamaIndexEmbedder):
        return location, LLAMAINDEX_EMBEDDING, vector_store
    return location, DEFAULT_EMBEDDING, vector_store


class HarombeMemory(BaseMemory):
    """Persistent, token-windowed chat memory with recall of earlier sessions.

    Build it with :meth:`from_defaults`. ``to_dict()`` records where the store is (never its
    contents), so ``HarombeMemory.from_dict(memory.to_dict())`` in another process, or a
    serialised workflow ``Context``, reopens the same conversation.
    """

    session_id: str = Field(
        default_factory=lambda: str(uuid.uuid4()),
        description="The conversation this memory reads and writes (default: a new one).",
    )
    user_id: str | None = Field(
        default=None,
        description=(
            "The user this memory acts for: owner of the session it creates; a session of "
            "another user (or, without user_id, of any user) is refused with "
            "SessionOwnershipError. Scopes recall."
        ),
    )
    token_limit: int = Field(
        default=DEFAULT_TOKEN_LIMIT,
        description="Budget of get(), in tokens of message text as LlamaIndex counts them.",
    )
    storage_path: str = Field(default=DEFAULT_STORAGE_PATH, description="SQLite file or URL.")
    embedding: str | None = embedding_field()
    vector_store: str | None = vector_store_field()
    strategy: str = Field(
        default="simple",
        description=(
            "'simple' (newest messages that fit), 'summarization' (summary of older messages, "
            "then the newest keep_last), 'hybrid' (also keeps important messages) or "
            "'threaded' (the current thread of the conversation graph)."
        ),
    )
    keep_last: int = Field(
        default=6, description="Newest messages kept verbatim by 'summarization' and 'hybrid'."
    )
    thread_selector: Literal["linear", "embedding", "llm"] = Field(
        default="embedding",
        description=(
            "With strategy='threaded', how a user message finds the turn it continues: "
            "'embedding' (semantic memory's model, else the bundled one), 'llm' (the llm "
            "given to from_defaults, else LlamaIndex's Settings.llm) or 'linear'."
        ),
    )
    system_prompt: str | None = Field(
        default=None, description="System prompt of a session created by this memory."
    )
    rag: bool = Field(default=True, description="Recall earlier sessions when get(input=...).")
    rag_top_k: int = Field(default=5, description="How many past messages to recall at most.")
    rag_max_tokens: int = Field(
        default=512, description="Most tokens the recalled context may take from the budget."
    )
    rag_scope: Literal["user", "all"] = Field(
        default="user",
        description=(
            "'user': recall from this user's other sessions (nothing without user_id: no other "
            "session is known to be theirs); 'all': from all of user_id's other sessions when "
            "a user_id is given (never another user's), else from every session of every user."
        ),
    )
    profile_tokens: int = Field(
        default=0,
        description=(
            "With a user_id and > 0: the user's profile from harombe's user memory (facts and "
            "preferences most relevant to the input, within this many tokens) and their open "
            "tasks, in a system message in front, as HarombeMemoryMiddleware(profile_tokens=) "
            "gives a LangChain agent. Facts come from a manager with user_memory=True (or "
            "end_session, add_fact)."
        ),
    )

    _manager: MemoryManager = PrivateAttr()
    _owns_manager: bool = PrivateAttr(default=True)
    _threader: Threader | None = PrivateAttr(default=None)

    def __init__(
        self,
        *,
        manager: MemoryManager | None = None,
        embed_model: BaseEmbedding | None = None,
        llm: LLM | None = None,
        **data: Any,
    ) -> None:
        known_arguments("HarombeMemory", [*type(self).model_fields, "class_name"], data)
        if manager is not None and embed_model is not None:
            raise InvalidInputError("pass embed_model or manager, not both.")
        if embed_model is not None:
            data["embedding"] = LLAMAINDEX_EMBEDDING
            data["vector_store"] = data.get("vector_store") or DEFAULT_VECTOR_STORE
        if manager is not None:
            location, embedding, vector_store = describe_manager(manager)
            data.setdefault("storage_path", location)
            data.setdefault("embedding", embedding)
            data.setdefault("vector_store", vector_store)
        with pydantic_errors("HarombeMemory"):
            super().__init__(**data)
        check_id(self.session_id, "session_id")
        optional_id(self.user_id, "user_id")
        if check_budget(self.token_limit, "token_limit") < 1:
            raise InvalidBudgetError(
                f"token_limit must be at least 1 token, as in LlamaIndex's ChatMemoryBuffer "
                f"and Memory; got {self.token_limit}."
            )
        check_budget(self.rag_max_tokens, "rag_max_tokens")
        if check_budget(self.profile_tokens, "profile_tokens") and self.user_id is None:
            raise InvalidInputError(
                "profile_tokens puts a user's profile in front of the model, and this memory "
                "acts for no user: pass user_id='...' too (or leave profile_tokens at 0)."
            )
        check_count(self.keep_last, "keep_last", high=MAX_TOP_K)
        check_count(self.rag_top_k, "rag_top_k", high=MAX_TOP_K)
        if self.strategy not in ("simple", "summarization", "hybrid", "threaded"):
            raise InvalidInputError(
                f"unknown strategy {self.strategy!r}; use 'simple', 'summarization', 'hybrid' "
                "or 'threaded'."
            )
        if self.strategy == "threaded" and self.thread_selector == "llm" and llm is None:
            llm = _settings_llm()  # (before the store is opened: nothing to close on error)
        if manager is None:
            manager = open_manager(
                self.storage_path, self.embedding, self.vector_store, embed_model
            )
            self._owns_manager = True
        else:
            self._owns_manager = False
        self._manager = manager
        if self._check() is None:
            manager.create_session(
                self.system_prompt, user_id=self.user_id, session_id=self.session_id
            )
        if self.strategy == "threaded":
            self._threader = Threader(
                manager, self.session_id, self._selector(llm), user_id=self.user_id
            )

    def _selector(self, llm: LLM | None) -> Any:
        if self.thread_selector == "linear":
            return resolve_selector("linear")
        if self.thread_selector == "llm":
            assert llm is not None  # (Settings.llm when none was given: see __init__)
            return resolve_selector("llm", llm=LlamaIndexLLM(llm))
        embedder = self._manager.embedder if self._manager.semantic_enabled else "default"
        return resolve_selector("embedding", embedder=embedder)

    @classmethod
    def class_name(cls) -> str:
        return "HarombeMemory"

    @classmethod
    def from_defaults(
        cls,
        chat_history: list[ChatMessage] | None = None,
        llm: LLM | None = None,
        token_limit: int | None = None,
        *,
        session_id: str | None = None,
        user_id: str | None = None,
        storage_path: str | os.PathLike[str] | None = None,
        manager: MemoryManager | None = None,
        strategy: Strategy = "simple",
        keep_last: int = 6,
        thread_selector: Literal["linear", "embedding", "llm"] = "embedding",
        system_prompt: str | None = None,
        embedding: str | None = DEFAULT_EMBEDDING,
        vector_store: str | None = DEFAULT_VECTOR_STORE,
        embed_model: BaseEmbedding | None = None,
        rag: bool = True,
        rag_top_k: int = 5,
        rag_max_tokens: int = 512,
        rag_scope: Literal["user", "all"] = "user",
        profile_tokens: int = 0,
        **kwargs: Any,
    ) -> HarombeMemory:
        """Open (or create) ``session_id`` in the store at ``storage_path`` (or ``manager``).

        Without ``session_id`` the memory gets a new session (a UUID, as LlamaIndex's ``Memory``
        does); pass the same ``session_id`` (and ``user_id``) again to continue a conversation.
        A session owned by another user than ``user_id`` is refused with
        ``SessionOwnershipError``.

        ``token_limit`` defaults to 3/4 of ``llm``'s context window, as LlamaIndex's buffers do,
        else 3000. ``chat_history``, if given, replaces what the session holds (the engines pass
        it this way through ``memory_cls``). ``embedding`` names the embedding model that
        recalls by meaning as well as by keyword (``"default"``: the bundled, offline
        all-MiniLM-L6-v2, loaded once per process; ``None``: keywords only); or pass a
        LlamaIndex ``embed_model`` (for example ``Settings.embed_model``) instead.
        ``profile_tokens`` (with a ``user_id``) puts the user's profile and open tasks in front.
        """
        if llm is not None and not isinstance(llm, LLM):
            raise InvalidInputError(f"llm must be a LlamaIndex LLM, got {type(llm).__name__}.")
        if token_limit is None:
            token_limit = (
                int(llm.metadata.context_window * _CONTEXT_RATIO)
                if llm is not None
                else DEFAULT_TOKEN_LIMIT
            )
        if manager is not None and storage_path is not None:
            raise InvalidInputError("pass storage_path or manager, not both.")
        fields: dict[str, Any] = {
            "user_id": user_id,
            "token_limit": token_limit,
            "strategy": strategy,
            "keep_last": keep_last,
            "thread_selector": thread_selector,
            "system_prompt": system_prompt,
            "rag": rag,
            "rag_top_k": rag_top_k,
            "rag_max_tokens": rag_max_tokens,
            "rag_scope": rag_scope,
            "profile_tokens": profile_tokens,
            **kwargs,
        }
        if session_id is not None:
            fields["session_id"] = session_id
        if manager is None:
            fields["storage_path"] = check_location(storage_path or DEFAULT_STORAGE_PATH)
            fields["embedding"] = embedding
            fields["vector_store"] = vector_store if embedding is not None else None
        memory = cls(manager=manager, embed_model=embed_model, llm=llm, **fields)
        if chat_history is not None:
            memory.set(chat_history)
        return memory

    # plumbing -----------------------------------------------------------------------------
    def _check(self) -> Session | None:
        """The session if this memory may use it (None if new); SessionOwnershipError if not."""
        return self._manager.check_owner(self.session_id, self.user_id, exact=True)

    async def _acheck(self) -> Session | None:
        return await self._manager.acheck_owner(self.session_id, self.user_id, exact=True)

    @property
    def manager(self) -> MemoryManager:
        """The MemoryManager underneath (for search, export and everything else harombe does)."""
        return self._manager

    @property
    def tokenizer_fn(self) -> Callable[[str], list[int]]:
        """Counts text with this memory's counter; chat engines use it to charge their prefix
        messages (system prompt) to the window, through ``initial_token_count``."""
        counter = self._manager.token_counter

        def tokenize(text: str) -> list[int]:
            return [0] * counter.count_text(text)

        return tokenize

    def close(self) -> None:
        """Close the store if this memory opened it (a manager passed in is left open)."""
        if self._owns_manager:
            self._manager.close()

    def count_tokens(self, messages: Sequence[ChatMessage]) -> int:
        """Tokens ``messages`` take from ``token_limit``: their text, names and tool calls,
        counted as LlamaIndex's memories count (no per-message framing)."""
        counter = TextTokenCounter(self._manager.token_counter)
        return counter.count_messages(from_llamaindex_list(messages, "count_tokens"))

    def _budget(self, initial_token_count: int) -> int:
        check_budget(initial_token_count, "initial_token_count")
        if initial_token_count > self.token_limit:
            # ChatMemoryBuffer's error (a ValueError) with its exact text, then how to fix it.
            advice = (
                f"(initial_token_count={initial_token_count} > token_limit={self.token_limit}): "
                "the engine's own prompt (system prompt, prefix messages) does not fit; raise "
                "token_limit or shorten that prompt."
            )
            raise InvalidBudgetError(
                "Initial token count exceeds token limit", fix=Fix(api=advice, cli=advice)
            )
        return self.token_limit - initial_token_count

    def _recall_query(self, input: object) -> Flow[str | None]:
        """What to recall for: the engine's input, else the newest user message (as
        LlamaIndex's own memory blocks do), so agents and SimpleChatEngine recall too.

        None when there is nothing to recall from: with ``rag_scope="user"`` and no
        ``user_id`` no other session is known to be this user's (the window already shows this
        one), so the memory stays inside the current session."""
        if input is not None and not isinstance(input, (str, ChatMessage)):
            # ChatMemoryBuffer ignores ``input``, so get(500) meant as a token reserve silently
            # reserves nothing there; here it is refused, with the keyword that does reserve.
            hint = (
                f" To reserve tokens for a prompt, pass initial_token_count={input!r}."
                if isinstance(input, int) and not isinstance(input, bool)
                else ""
            )
            raise InvalidInputError(
                f"input must be the user's message (a str or ChatMessage), got "
                f"{type(input).__name__}.{hint}"
            )
        if not self.rag or self.rag_top_k <= 0:
            return None
        if self.rag_scope == "user" and self.user_id is None:
            return None
        if input:
            return input.content or None if isinstance(input, ChatMessage) else input
        mm = self._manager
        newest: Message | None = yield Call(
            mm.get_newest_user_message,
            self.session_id,
            user_id=self.user_id,
            native=mm.aget_newest_user_message,
        )
        return None if newest is None else newest.content

    def _rag_args(self, budget: int) -> dict[str, Any]:
        return {
            "max_tokens": min(self.rag_max_tokens, budget),
            # A user-bound memory recalls only its user's sessions, whatever rag_scope says:
            # "all" reaches every user only for a memory built without a user_id.
            "user_id": self.user_id,
            "exclude_session_id": self.session_id,
            "top_k": self.rag_top_k,
        }

    def _context(self, recalled: list[Message], budget: int) -> list[Message]:
        message = fit_context(recalled, self._manager, min(self.rag_max_tokens, budget))
        return [message] if message is not None else []

    def _get(self, input: object, initial_token_count: int) -> Flow[list[ChatMessage]]:
        """:meth:`get` and :meth:`aget` written once: the owner check, the recall and the
        window are the manager's public sync/async pairs (async: one hop per store operation)."""
        budget = self._budget(initial_token_count)
        mm = self._manager
        session: Session | None = yield Call(
            mm.check_owner, self.session_id, self.user_id, exact=True, native=mm.acheck_owner
        )
        context: list[Message] = []
        query = yield from self._recall_query(input)
        if self.profile_tokens > 0 and self.user_id is not None:
            about = query or (input.content if isinstance(input, ChatMessage) else input)
            note = yield from mm.user_memory.note(
                self.user_id,
                max_tokens=min(self.profile_tokens, budget),
                query=about if isinstance(about, str) and about else None,
            )
            if note is not None:
                context.append(Message(role="system", content=note))
        if query:
            args = self._rag_args(budget)
            recalled = yield Call(
                mm.get_relevant_context, query, native=mm.aget_relevant_context, **args
            )
            context += self._context(recalled, budget)
        if len(context) > 1:  # one system message in front, as models expect
            context = [Message(role="system", content="\n\n".join(m.content for m in context))]
        if session is None:  # deleted behind this memory's back (e.g. by a chat store)
            return []
        # Recalled context and the conversation window, within ``budget`` when they fit. The
        # conversation comes first: if its window had to fall back to the newest turn beside
        # the recalled context, the context is dropped and the window chosen again.
        counter = TextTokenCounter(mm.token_counter)
        spent = counter.count_messages(context)
        window = yield self._window(counter, max(budget - spent, 0))
        if context and sum(m.token_count or 0 for m in window) + spent > budget:
            context = []
            window = yield self._window(counter, budget)
        return [to_llamaindex(m) for m in _merge_system(context, window)]

    def _window(self, counter: TextTokenCounter, budget: int) -> Call[list[Message]]:
        """The core's window of this session in LlamaIndex's counting (each message carries
        its cost), never empty while the session has a message."""
        mm = self._manager
        return Call(
            mm.get_context,
            self.session_id,
            self.strategy,
            budget,
            native=mm.aget_context,
            start_on_user=True,
            keep_last=self.keep_last,
            user_id=self.user_id,
            token_counter=counter,
            keep_newest_turn=True,
        )

    # BaseMemory ---------------------------------------------------------------------------
    def get(
        self, input: str | None = None, initial_token_count: int = 0, **kwargs: Any
    ) -> list[ChatMessage]:
        """The window that fits ``token_limit - initial_token_count``, recalled context first.

        Tool calls and their results are counted and never separated; the window never begins
        on an assistant or tool message; when not even the newest turn fits, that turn is
        returned whole rather than nothing. With ``rag`` on, the messages of earlier sessions
        most relevant to ``input`` (or, without it, to the newest user message) come first as
        one system message, inside the budget. ``initial_token_count`` above ``token_limit``
        raises InvalidBudgetError (a ValueError, as ChatMemoryBuffer raises).
        """
        return drive(self._get(input, initial_token_count))

    async def aget(
        self, input: str | None = None, initial_token_count: int = 0, **kwargs: Any
    ) -> list[ChatMessage]:
        """Async twin of :meth:`get`, on the manager's async methods."""
        return await adrive(self._get(input, initial_token_count))

    def get_all(self, status: MessageStatus | None = None) -> list[ChatMessage]:
        """Every message of the session, oldest first (no window, no recall).

        ``status`` is ``Memory``'s: harombe archives nothing (older messages leave the window,
        never the history), so ``ACTIVE`` is every message and ``ARCHIVED`` none.
        """
        self._check()
        if status == MessageStatus.ARCHIVED:
            return []
        stored = self._manager.get_messages(self.session_id, user_id=self.user_id)
        return [to_llamaindex(m) for m in stored]

    async def aget_all(self, status: MessageStatus | None = None) -> list[ChatMessage]:
        """Async twin of :meth:`get_all`."""
        await self._acheck()
        if status == MessageStatus.ARCHIVED:
            return []
        stored = await self._manager.aget_messages(self.session_id, user_id=self.user_id)
        return [to_llamaindex(m) for m in stored]

    def _save(self, messages: Sequence[ChatMessage]) -> None:
        converted = from_llamaindex_list(messages, "put_messages")
        self._check()
        if self._threader is not None:
            self._threader.append(converted)
        else:
            self._manager.save_messages(self.session_id, converted, user_id=self.user_id)

    def put(self, message: ChatMessage) -> None:
        """Store one message (committed before this returns)."""
        self._save([message])

    async def aput(self, message: ChatMessage) -> None:
        await self.aput_messages([message])

    def put_messages(self, messages: Sequence[ChatMessage]) -> None:
        """Store several messages in one transaction (a tool call and its results together,
        with their thread links when ``strategy="threaded"``)."""
        self._save(messages)

    async def aput_messages(self, messages: Sequence[ChatMessage]) -> None:
        if self._threader is not None:
            converted = from_llamaindex_list(messages, "aput_messages")
            await self._acheck()
            await self._threader.aappend(converted)
            return
        await self._acheck()
        await self._manager.asave_messages(
            self.session_id, from_llamaindex_list(messages, "aput_messages"), user_id=self.user_id
        )

    def set(self, messages: Sequence[ChatMessage]) -> None:
        """Replace the session's messages with ``messages``, in one transaction (of concurrent
        sets, one history stays: never two merged)."""
        converted = from_llamaindex_list(messages, "set")
        self._check()
        self._manager.set_messages(self.session_id, converted, user_id=self.user_id)
        self._forget_threads()

    def _forget_threads(self) -> None:
        if self._threader is not None:
            self._threader.forget()

    async def aset(self, messages: Sequence[ChatMessage]) -> None:
        """Async twin of :meth:`set`."""
        converted = from_llamaindex_list(messages, "aset")
        await self._acheck()
        await self._manager.aset_messages(self.session_id, converted, user_id=self.user_id)
        self._forget_threads()

    def reset(self, status: MessageStatus | None = None) -> None:
        """Forget this session's messages (the session and other sessions stay).

        ``status=ARCHIVED`` forgets nothing: harombe archives nothing (see :meth:`get_all`).
        """
        self._check()
        if status == MessageStatus.ARCHIVED:
            return
        self._manager.clear_session(self.session_id, user_id=self.user_id)
        self._forget_threads()

    async def areset(self, status: MessageStatus | None = None) -> None:
        """Async twin of :meth:`reset`."""
        await self._acheck()
        if status == MessageStatus.ARCHIVED:
            return
        await self._manager.aclear_session(self.session_id, user_id=self.user_id)
        self._forget_threads()

    # serialisation, as ChatMemoryBuffer offers it -------------------------------------------
    def to_string(self) -> str:
        """This memory as JSON: where the store and the session are, never the messages."""
        return self.to_json()

    @classmethod
    def from_string(cls, json_str: str) -> HarombeMemory:
        """Reopen a memory from :meth:`to_string` (same store, same session)."""
        if not isinstance(json_str, str):
            raise InvalidInputError(f"from_string takes a str, got {type(json_str).__name__}.")
        try:
            data = json.loads(json_str)
        except (ValueError, RecursionError) as exc:
            raise InvalidInputError(f"from_string takes what to_string wrote: {exc}") from None
        if not isinstance(data, dict):
            raise InvalidInputError("from_string takes what to_string wrote (a JSON object).")
        return cls.from_dict(data)


def _settings_llm() -> LLM:
    """LlamaIndex's ``Settings.llm``, which its own LLM-driven pieces default to; a memory
    reopened from a dict (a serialised workflow ``Context``) has no other model to ask."""
    from llama_index.core import Settings

    try:
        return Settings.llm
    except (ImportError, ValueError) as exc:  # its default is OpenAI's: not installed, no key
        raise InvalidInputError(
            "thread_selector='llm' asks an LLM where each message continues the conversation: "
            f"pass llm=..., set LlamaIndex's Settings.llm, or use 'embedding' ({exc})."
        ) from None


def _merge_system(context: list[Message], window: list[Message]) -> list[Message]:
    """Recalled context goes after the session's system prompt, before the conversation."""
    if not context:
        return window
    head = [m for m in window[:1] if m.role == "system" and m.id is None]
    return head + context + window[len(head) :]
