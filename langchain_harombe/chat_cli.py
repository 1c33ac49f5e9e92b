"""``harombe chat``: a terminal chat over any LangChain chat model, with persistent memory.

The model is named as LangChain's ``init_chat_model`` wants it (``openai:gpt-4o-mini``,
``ollama:llama3.2``...), or ``fake`` for an offline echo model (demos and tests). Every turn is
stored as it happens; the model is sent the session's system prompt, the newest turns that fit
``--max-tokens``, and the new message. Slash commands manage sessions:

``/sessions`` list, ``/load <id>`` switch, ``/save`` confirm what is stored, ``/history`` show
every stored message, ``/clear`` start the model's context afresh (the history stays in the
database and stays searchable), ``/forget`` delete the session, ``/search <query>`` search all
of the user's sessions, ``/help``, ``/quit``.

With a user (``--user``) the chat acts for that user only: it lists, loads and searches their
sessions, and refuses another user's session with ``SessionOwnershipError``. Without one it is
the database owner's tool and sees every session.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any, TextIO

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage

from harombe_core.errors import HarombeError, InvalidInputError, MissingExtraError
from harombe_core.manager import MemoryManager
from langchain_harombe.convert import from_langchain, to_langchain
from langchain_harombe.testing import RecordingChatModel

__all__ = ["ChatSession", "load_chat_model", "run_chat"]

#: Session metadata key: messages with this id or lower are outside the model's context.
CONTEXT_START_KEY = "chat_context_after_id"

HELP = """commands:
  /sessions          list sessions
  /load <session>    switch to a session
  /save              show what is stored for this session
  /history           show every stored message of this session
  /clear             clear the model's context (history stays in the database)
  /forget            delete this session and start a new one
  /search <query>    search your past messages
  /help              this help
  /quit              leave"""


def load_chat_model(name: str) -> BaseChatModel:
    """A chat model by name: a ``provider:model`` for ``init_chat_model``, or a fake one.

    ``fake`` echoes the last message; ``fake:transcript`` replies with every message it was sent
    (to see what the memory gives the model). Neither needs a network or an API key.
    """
    if name in ("fake", "fake:echo"):
        return RecordingChatModel()
    if name == "fake:transcript":
        return RecordingChatModel(echo="transcript")
    try:
        from langchain.chat_models import init_chat_model
    except ImportError as exc:  # pragma: no cover - langchain is in the same extra
        raise MissingExtraError("harombe chat", "langchain", "langchain") from exc
    try:
        return init_chat_model(name)
    except ImportError as exc:
        raise MissingExtraError(f"the chat model {name!r}", "langchain", exc.name or name) from exc
    except ValueError as exc:
        raise InvalidInputError(
            f"cannot build the chat model {name!r}: {exc}. Use provider:model (for example "
            "openai:gpt-4o-mini, with its integration package installed) or 'fake'."
        ) from exc


class ChatSession:
    """The state of one chat: which session, its context window, and the commands on it."""

    def __init__(
        self,
        manager: MemoryManager,
        model: BaseChatModel,
        *,
        session_id: str | None = None,
        user_id: str | None = None,
        system_prompt: str | None = None,
        max_tokens: int = 4096,
        write: Callable[[str], Any] = print,
    ) -> None:
        self.manager = manager
        self.model = model
        self.user_id = user_id
        self.system_prompt = system_prompt
        self.max_tokens = max_tokens
        self.write = write
        self.session_id = self._open(session_id)

    def _open(self, session_id: str | None) -> str:
        sid = session_id or uuid.uuid4().hex[:12]
        if self.manager.check_owner(sid, self.user_id) is None:
            self.manager.create_session(
                self.system_prompt, None, self.user_id, session_id=sid
            )
        return sid

    # context ------------------------------------------------------------------------------
    def context(self) -> list[BaseMessage]:
        """What the model is sent before the new message: system prompt and recent turns."""
        session = self.manager.load_session(self.session_id, user_id=self.user_id)
        after = int(session.metadata.get(CONTEXT_START_KEY, 0))
        window = self.manager.get_recent_messages(
            self.session_id, self.max_tokens, user_id=self.user_id
        )
        kept = [m for m in window if m.id is None or m.id > after]
        return [to_langchain(m) for m in kept]

    def send(self, text: str) -> str:
        """One turn: the model answers ``text``; both messages are stored together."""
        human = HumanMessage(text)
        context = self.context()
        if self.system_prompt and not any(isinstance(m, SystemMessage) for m in context):
            context = [SystemMessage(self.system_prompt), *context]
        reply = self.model.invoke([*context, human])
        self.manager.save_messages(
            self.session_id, [from_langchain(human), from_langchain(reply)], user_id=self.user_id
        )
        return str(reply.text)

    # commands -----------------------------------------------------------------------------
    def command(self, line: str) -> bool:
        """Run a slash command; False when the chat should end."""
        name, _, arg = line.strip().partition(" ")
        arg = arg.strip()
        handler = {
            "/sessions": self.cmd_sessions,
            "/load": self.cmd_load,
            "/save": self.cmd_save,
            "/history": self.cmd_history,
            "/clear": self.cmd_clear,
            "/forget": self.cmd_forget,
            "/search": self.cmd_search,
            "/help": lambda _: self.write(HELP),
        }.get(name)
        if name in ("/quit", "/exit"):
            return False
        if handler is None:
            self.write(f"unknown command {name}; /help lists them")
        else:
            handler(arg)
        return True

    def cmd_sessions(self, _: str) -> None:
        sessions = self.manager.list_sessions(limit=20, user_id=self.user_id)
        if not sessions:
            self.write("no sessions")
        for s in sessions:
            mark = "*" if s.id == self.session_id else " "
            self.write(
                f"{mark} {s.id}  {s.message_count} messages  "
                f"updated {s.updated_at:%Y-%m-%d %H:%M}"
            )

    def cmd_load(self, arg: str) -> None:
        if not arg:
            self.write("usage: /load <session>")
            return
        if self.manager.check_owner(arg, self.user_id) is None:
            self.write(f"no session {arg}; /sessions lists them")
            return
        self.session_id = arg
        count = len(self.manager.get_messages(arg, user_id=self.user_id))
        self.write(f"loaded session {arg} ({count} messages)")

    def cmd_save(self, _: str) -> None:
        # Every turn is committed as it happens; this makes it visible and waits for search.
        self.manager.flush()
        count = len(self.manager.get_messages(self.session_id, user_id=self.user_id))
        self.write(f"saved session {self.session_id} ({count} messages)")

    def cmd_history(self, _: str) -> None:
        messages = self.manager.get_messages(self.session_id, user_id=self.user_id)
        if not messages:
            self.write("no messages")
        for m in messages:
            self.write(f"[{m.id}] {m.role}: {m.content}")

    def cmd_clear(self, _: str) -> None:
        messages = self.manager.get_messages(self.session_id, user_id=self.user_id)
        last = messages[-1].id if messages else 0
        session = self.manager.load_session(self.session_id, user_id=self.user_id)
        self.manager.update_session(
            self.session_id, metadata={**session.metadata, CONTEXT_START_KEY: last}
        )
        self.write(f"context cleared ({len(messages)} messages kept in the database)")

    def cmd_forget(self, _: str) -> None:
        old = self.session_id
        self.manager.delete_session(old, user_id=self.user_id)
        self.session_id = self._open(None)
        self.write(f"forgot session {old}; new session {self.session_id}")

    def cmd_search(self, arg: str) -> None:
        if not arg:
            self.write("usage: /search <query>")
            return
        self.manager.flush()
        hits = self.manager.search(arg, top_k=5, user_id=self.user_id)
        if not hits:
            self.write("no matches")
        for h in hits:
            self.write(f"{h.score:.4g}  [{h.session_id}] {h.message.role}: {h.message.content}")


def run_chat(
    *,
    db: str,
    model: str,
    session_id: str | None,
    user_id: str | None,
    system_prompt: str | None,
    max_tokens: int,
    embedding: str,
    memory: bool,
    stdin: TextIO | None = None,
) -> None:
    """The interactive loop behind ``harombe chat``."""
    chat_model = load_chat_model(model)
    semantic = embedding.lower() not in ("none", "off", "")
    manager = MemoryManager(
        db if memory else ":memory:",
        embedding=embedding if semantic else None,
        vector_store="chroma" if semantic else None,
    )
    try:
        chat = ChatSession(
            manager,
            chat_model,
            session_id=session_id,
            user_id=user_id,
            system_prompt=system_prompt,
            max_tokens=max_tokens,
        )
        print(f"harombe chat: model {model}, session {chat.session_id}; /help for commands")
        while True:
            try:
                line = input("you> ") if stdin is None else stdin.readline().rstrip("\n")
            except (EOFError, KeyboardInterrupt):
                print()
                break
            if not line.strip():
                continue
            try:
                if line.startswith("/"):
                    if not chat.command(line):
                        break
                    continue
                print(f"ai> {chat.send(line)}")
            except HarombeError as exc:
                print(f"error: {exc}")
    finally:
        manager.close()
