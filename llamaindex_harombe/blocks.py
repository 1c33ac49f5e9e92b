"""``HarombeMemoryBlock``: long-term recall for LlamaIndex's ``Memory``.

``Memory`` keeps a short FIFO queue and hands the messages it flushes to its memory blocks. This
block keeps them in harombe, unless they are there already (``Memory``'s queue is a
``HarombeDBChatStore`` on the same database: the flushed messages are its archived rows), and, on
every ``get``, recalls the past messages most relevant to the latest turns: flushed ones and
those of earlier sessions, by meaning and by keyword.

The session whose recall is asked for arrives with each call, so one block shared by many
``Memory`` objects keeps their sessions apart (LlamaIndex's ``VectorMemoryBlock`` stores the first
session id in its query filter and then answers every later session with it).
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict, defaultdict
from typing import Any, Literal

from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.bridge.pydantic import BaseModel, Field, PrivateAttr
from llama_index.core.memory.memory import BaseMemoryBlock

from harombe_core import MemoryManager
from harombe_core.errors import InvalidInputError
from harombe_core.models import Message
from harombe_core.validate import check_location, known_arguments
from llamaindex_harombe._owned import OwnedManager
from llamaindex_harombe._recall import fit_context
from llamaindex_harombe.chat_store import holds_its_queue
from llamaindex_harombe.convert import from_llamaindex
from llamaindex_harombe.memory import (
    DEFAULT_STORAGE_PATH,
    describe_manager,
    embedding_field,
    vector_store_field,
)

__all__ = ["HarombeMemoryBlock", "HarombeProfileBlock"]

#: Recalled texts a block remembers the messages of, for ``atruncate`` (``Memory`` truncates
#: right after the ``get`` that made the text; a block may serve several sessions at once).
_REMEMBERED = 16


class HarombeMemoryBlock(OwnedManager, BaseMemoryBlock[str]):
    """Recall from harombe as a ``Memory`` block (returns text for the memory template).

    ``scope``: ``"session"`` recalls only the session being asked for; ``"user"`` everything
    ``user_id`` said in any session; ``"all"`` every session of ``user_id`` when one is given
    (as the LangChain retriever's ``all_users=True`` with a user), else the whole database
    (one-user applications, an operator's tool): a user-bound block never recalls another
    user's messages.
    With a ``user_id`` the block acts for that user: a session of another user (or of none) is
    refused with ``SessionOwnershipError``, for recall and for storing flushed messages alike
    (give ``Memory``'s chat store the same ``user_id``); without one it reaches only sessions
    that have no owner.
    """

    name: str = Field(default="harombe_recall", description="Block name in the memory template.")
    description: str | None = Field(
        default="Relevant messages recalled from earlier in this and past conversations."
    )
    storage_path: str = Field(default=DEFAULT_STORAGE_PATH, description="SQLite file or URL.")
    embedding: str | None = embedding_field()
    vector_store: str | None = vector_store_field()
    scope: Literal["session", "user", "all"] = Field(default="session")
    user_id: str | None = Field(default=None, description="Owner; required for scope='user'.")
    top_k: int = Field(default=5, description="Most messages recalled per get.")
    max_tokens: int = Field(default=512, description="Most tokens the recalled text may take.")
    query_window: int = Field(
        default=2, description="How many of the newest messages form the recall query."
    )
    persist_flushed: bool = Field(
        default=True,
        description=(
            "Store messages flushed from short-term memory, so they can be recalled. Messages "
            "of a session whose queue is a HarombeDBChatStore on this database are never "
            "stored twice (they are there, and searchable, already). False: store nothing."
        ),
    )

    _manager: MemoryManager = PrivateAttr()
    _owns_manager: bool = PrivateAttr(default=True)
    _recalled: OrderedDict[str, list[Message]] = PrivateAttr(default_factory=OrderedDict)

    def __init__(self, *, manager: MemoryManager | None = None, **data: Any) -> None:
        super().__init__(**_location_fields(type(self), manager, data))
        if self.scope == "user" and self.user_id is None:
            raise InvalidInputError("scope='user' needs user_id; or use scope='session'.")
        self._take_manager(manager, self.storage_path, self.embedding, self.vector_store)

    async def _aget(
        self,
        messages: list[ChatMessage] | None = None,
        session_id: str | None = None,
        **block_kwargs: Any,
    ) -> str:
        if not messages:
            return ""
        recent = messages[-self.query_window :] if self.query_window > 0 else messages
        query = " ".join(m.content or "" for m in recent).strip()
        if not query:
            return ""
        if self.scope == "session":
            if session_id is None:
                raise InvalidInputError(
                    "scope='session' needs the session id, which Memory passes; when calling "
                    "the block yourself pass session_id=..."
                )
            await self._manager.acheck_owner(session_id, self.user_id, exact=True)
            where: dict[str, Any] = {"session_id": session_id, "user_id": self.user_id}
        else:  # "user", or "all": with a user_id given only that user's sessions
            where = {"user_id": self.user_id}
        # Recall enriches the prompt: a row edited outside harombe is left out with a warning
        # (an explicit search raises it), so one bad row cannot fail every turn of its user.
        top_k = self.top_k + len(messages)
        hits = await self._manager.asearch(query, top_k=top_k, skip_unreadable=True, **where)
        # What the model already sees in the window is not "recalled".
        visible = {(m.role.value, m.content or "") for m in messages}
        fresh = [
            h.message for h in hits if (_li_role(h.message), h.message.content) not in visible
        ][: self.top_k]
        context = fit_context(fresh, self._manager, self.max_tokens)
        if context is None:
            return ""
        self._remember(context.content, fresh)
        return context.content

    def _remember(self, text: str, recalled: list[Message]) -> None:
        """Keep what ``text`` was made of (best first), for :meth:`atruncate`."""
        self._recalled[text] = recalled
        self._recalled.move_to_end(text)
        while len(self._recalled) > _REMEMBERED:
            self._recalled.popitem(last=False)

    async def atruncate(self, content: str, tokens_to_truncate: int) -> str | None:
        """A shorter recall: ``Memory`` asks a block whose ``priority`` is not 0 to give back
        ``tokens_to_truncate`` when the prompt is over its ``token_limit``. The weakest recalled
        messages go first, so the best ones stay (LlamaIndex's own blocks drop their whole
        text); None when not even the best one fits, or the text is not this block's."""
        recalled = self._recalled.get(content)
        if recalled is None:
            return None
        size = self._manager.count_tokens([Message(role="system", content=content)])
        shorter = fit_context(recalled, self._manager, size - max(tokens_to_truncate, 0))
        return shorter.content if shorter is not None else None

    async def _aput(self, messages: list[ChatMessage]) -> None:
        by_session: dict[str, list[Message]] = defaultdict(list)
        for message in messages:
            session = message.additional_kwargs.pop("session_id", None)
            if not self.persist_flushed:
                continue
            if session is None:
                raise InvalidInputError(
                    "a message flushed to HarombeMemoryBlock carries no session_id; call "
                    "block.aput(messages, session_id=...)."
                )
            by_session[str(session)].append(from_llamaindex(message))
        for sid in list(by_session):
            known = await self._manager.acheck_owner(sid, self.user_id, exact=True)
            if known is not None and holds_its_queue(known):
                del by_session[sid]  # flushed from a queue in this database: stored already
        await asyncio.gather(
            *(
                self._manager.asave_messages(sid, batch, user_id=self.user_id)
                for sid, batch in by_session.items()
            )
        )


def _location_fields(
    block: type[BaseModel], manager: MemoryManager | None, data: dict[str, Any]
) -> dict[str, Any]:
    """A block's fields: where a given ``manager`` lives (unless given), or the checked
    ``storage_path``; a misspelt one is refused (pydantic would drop it)."""
    known_arguments(block.__name__, [*block.model_fields, "class_name"], data)
    if manager is not None:
        location, embedding, vector_store = describe_manager(manager)
        data.setdefault("storage_path", location)
        data.setdefault("embedding", embedding)
        data.setdefault("vector_store", vector_store)
    elif "storage_path" in data:
        data["storage_path"] = check_location(data["storage_path"])
    return data


def _li_role(message: Message) -> str:
    extra = message.metadata.get("li")
    if isinstance(extra, dict) and isinstance(extra.get("role"), str):
        return str(extra["role"])
    return message.role


class HarombeProfileBlock(OwnedManager, BaseMemoryBlock[str]):
    """The user's profile and open tasks from harombe's user memory, as a ``Memory`` block.

    Where LlamaIndex's ``FactExtractionMemoryBlock`` asks an LLM for facts on every flush and
    keeps them in the block (in process, per block), this block reads the facts harombe keeps
    per user in the database: extracted off the request path (``end_session``, the background
    extractor) or added by the application, with their history and sources, shared by every
    process. ``get`` returns the profile within ``max_tokens``, most relevant to the latest
    turns first, then the open tasks; a flush extracts the flushed session's new messages
    (``extract_flushed``), with the manager's extractor (offline unless it was given a model).
    """

    name: str = Field(default="user_profile", description="Block name in the memory template.")
    description: str | None = Field(default="What is known about the user, and their open tasks.")
    storage_path: str = Field(default=DEFAULT_STORAGE_PATH, description="SQLite file or URL.")
    embedding: str | None = embedding_field()
    vector_store: str | None = vector_store_field()
    user_id: str = Field(description="Whose profile.")
    max_tokens: int = Field(default=200, description="Most tokens the profile may take.")
    include_tasks: bool = Field(default=True, description="Also list the open tasks.")
    query_window: int = Field(
        default=2, description="How many of the newest messages rank the profile's facts."
    )
    extract_flushed: bool = Field(
        default=True, description="Extract facts from a flushed session stored in harombe."
    )

    _manager: MemoryManager = PrivateAttr()
    _owns_manager: bool = PrivateAttr(default=True)

    def __init__(self, *, manager: MemoryManager | None = None, **data: Any) -> None:
        super().__init__(**_location_fields(type(self), manager, data))
        self._take_manager(manager, self.storage_path, self.embedding, self.vector_store)

    async def _aget(
        self,
        messages: list[ChatMessage] | None = None,
        session_id: str | None = None,
        **block_kwargs: Any,
    ) -> str:
        recent = (messages or [])[-self.query_window :] if self.query_window > 0 else []
        query = " ".join(m.content or "" for m in recent).strip() or None
        # It enriches a prompt: an unreadable fact is left out with a warning, not raised.
        profile = await self._manager.aget_profile(
            self.user_id, self.max_tokens, query=query, skip_unreadable=True
        )
        parts = [profile.text] if profile.text else []
        if self.include_tasks:
            tasks = await self._manager.aget_open_tasks(self.user_id, skip_unreadable=True)
            if tasks:
                parts.append("Open tasks:\n" + "\n".join(f"- {t.text}" for t in tasks))
        return "\n".join(parts)

    async def _aput(self, messages: list[ChatMessage]) -> None:
        sessions = {
            str(m.additional_kwargs.pop("session_id"))
            for m in messages
            if m.additional_kwargs.get("session_id") is not None
        }
        if not self.extract_flushed:
            return
        for sid in sorted(sessions):
            known = await self._manager.acheck_owner(sid, self.user_id, exact=True)
            if known is not None:
                await self._manager.aextract_facts(sid)
