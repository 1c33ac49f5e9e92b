"""``harombe chat``: a terminal chat over any LangChain chat model, with persistent memory.

The model is named as LangChain's ``init_chat_model`` wants it (``openai:gpt-4o-mini``,
``ollama:llama3.2``...), or ``fake`` for an offline echo model (demos and tests). Every turn is
stored as it happens; the model is sent the session's system prompt, the newest turns that fit
``--max-tokens``, earlier turns relevant to the new message, the user's and the assistant's
(recall, up to ``--recall-tokens``, 500 by default as in the agent middleware), and the new
message. A session is stored with its first message, so a
chat that is opened and left stores nothing. Slash commands manage sessions:

``/sessions`` list, ``/load <id>`` switch, ``/save`` confirm what is stored, ``/history`` show
every stored message, ``/clear`` start the model's context afresh (the history stays in the
database and stays searchable), ``/forget`` delete the session (after asking), ``/search
<query>`` search all of the user's sessions, ``/help``, ``/quit``.

With a user (``--user``) the chat acts for that user only: it lists, loads, searches and
recalls their sessions, and refuses another user's session with ``SessionOwnershipError``.
Without one it is the database owner's tool and sees every session; recall then stays inside
the current session (no other session is known to be the same person's), as in
:class:`~langchain_harombe.HarombeMemoryMiddleware`.
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Callable, Sequence
from typing import Any, TextIO

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage

from harombe_core import MemoryManager
from harombe_core.errors import HarombeError, InvalidInputError, MissingExtraError
from harombe_core.integration import plural, requires_extra
from harombe_core.models import Message, Session
from harombe_core.validate import check_budget
from langchain_harombe._packages import missing_package, package_of
from langchain_harombe._recall import DEFAULT_RECALL_TOKENS, recall
from langchain_harombe.convert import from_langchain, storable_message, to_langchain
from langchain_harombe.testing import RecordingChatModel

__all__ = [
    "DEFAULT_RECALL_TOKENS",
    "ChatSession",
    "integration_package",
    "load_chat_model",
    "run_chat",
]

#: Session metadata key: messages with this id or lower are outside the model's context.
CONTEXT_START_KEY = "chat_context_after_id"

HELP = """commands:
  /sessions          list sessions
  /load <session>    switch to a session
  /save              show what is stored for this session
  /history           show every stored message of this session
  /clear             clear the model's context (history stays in the database)
  /forget            delete this session (asks first) and start a new one
  /search <query>    search your past messages
  /help              this help
  /quit              leave"""


def integration_package(model: str, error: ImportError) -> str:
    """The pip package ``init_chat_model`` needs for ``model`` (``langchain-openai`` for
    ``openai:gpt-4o-mini``), named as LangChain names it: the integration module of the
    model's provider, with ``_`` written ``-``.

    The provider table is LangChain's own (``_BUILTIN_PROVIDERS``), so every provider it knows
    is covered; if a LangChain version lays it out differently, the module that failed to
    import names the package instead.
    """
    try:
        from langchain.chat_models import base

        _, provider = base._parse_model(model, None)
        return package_of(base._BUILTIN_PROVIDERS[provider][0])
    except (ImportError, AttributeError, KeyError, TypeError, ValueError):
        return missing_package(error, "langchain")


def load_chat_model(name: str) -> BaseChatModel:
    """A chat model by name: a ``provider:model`` for ``init_chat_model``, or a fake one.

    ``fake`` echoes the last message; ``fake:transcript`` replies with every message it was sent
    (to see what the memory gives the model). Neither needs a network or an API key. A model
    whose integration package is missing raises MissingExtraError naming that package.
    """
    if name in ("fake", "fake:echo"):
        return RecordingChatModel()
    if name == "fake:transcript":
        return RecordingChatModel(echo="transcript")
    with requires_extra("harombe chat", "langchain", "langchain"):
        from langchain.chat_models import init_chat_model
    try:
        return init_chat_model(name)
    except ImportError as exc:
        package = integration_package(name, exc)
        raise MissingExtraError(
            f"the chat model {name!r}", "langchain", package, install=f"pip install {package}"
        ) from exc
    except ValueError as exc:
        raise InvalidInputError(
            f"cannot build the chat model {name!r}: {exc}. Use provider:model (for example "
            "openai:gpt-4o-mini, with its integration package installed) or 'fake'."
        ) from exc


def check_chat_options(max_tokens: Any, recall_tokens: Any) -> None:
    """Refuse bad budgets before anything is opened (InvalidBudgetError naming the option)."""
    check_budget(max_tokens, "max_tokens")
    check_budget(recall_tokens, "recall_tokens")


class ChatSession:
    """The state of one chat: which session, its context window, and the commands on it.

    ``write`` shows a line to the user and ``ask`` asks a question and returns the answer
    (``/forget`` asks before deleting anything).
    """

    def __init__(
        self,
        manager: MemoryManager,
        model: BaseChatModel,
        *,
        session_id: str | None = None,
        user_id: str | None = None,
        system_prompt: str | None = None,
        max_tokens: int = 4096,
        recall_tokens: int = DEFAULT_RECALL_TOKENS,
        write: Callable[[str], Any] = print,
        ask: Callable[[str], str] = input,
    ) -> None:
        check_chat_options(max_tokens, recall_tokens)
        self.manager = manager
        self.model = model
        self.user_id = user_id
        self.system_prompt = system_prompt
        self.max_tokens = max_tokens
        self.recall_tokens = recall_tokens
        self.write = write
        self.ask = ask
        self.session_id = session_id or uuid.uuid4().hex[:12]
        self.named_session = session_id is not None
        self._stored()  # checks the id and that the user may use this session, before any chat

    def _stored(self) -> Session | None:
        """The current session's record, or None while nothing is stored in it."""
        return self.manager.get_session(self.session_id, user_id=self.user_id)

    def greeting(self, model_name: str) -> str:
        """What the chat is about to do: which model, and which session (new or continued)."""
        stored = self._stored()
        if stored is not None:
            where = f"session {stored.id} ({plural(stored.message_count, 'message')})"
        elif self.named_session:
            where = (
                f"no session {self.session_id!r} yet: starting a new session with that name "
                "(stored with your first message)"
            )
        else:
            where = f"new session {self.session_id}"
        return f"harombe chat: model {model_name}, {where}; /help for commands"

    # context ------------------------------------------------------------------------------
    def _context_start(self) -> int:
        stored = self._stored()
        return 0 if stored is None else int(stored.metadata.get(CONTEXT_START_KEY, 0))

    def _window(self) -> list[Message]:
        after = self._context_start()
        window = self.manager.get_recent_messages(
            self.session_id, self.max_tokens, user_id=self.user_id
        )
        return [m for m in window if m.id is None or m.id > after]

    def context(self) -> list[BaseMessage]:
        """What the model is sent before the new message: system prompt and recent turns."""
        return [to_langchain(m) for m in self._window()]

    def recalled(self, text: str, shown: Sequence[Message] = ()) -> str | None:
        """Relevant past turns for ``text`` as system-message text (None if nothing fits).

        Turns already in the context, and turns of this session before a ``/clear``, are left
        out: the model either has them or was asked to start afresh.
        """
        after = self._context_start()
        ids = {m.id for m in shown}
        found = [
            m
            for m in recall(
                self.manager,
                text,
                session_id=self.session_id,
                user_id=self.user_id,
                max_tokens=self.recall_tokens,
            )
            if m.id not in ids and not (m.session_id == self.session_id and (m.id or 0) <= after)
        ]
        return self.manager.format_context(found) if found else None

    def send(self, text: str) -> str:
        """One turn: the model answers ``text``; both messages are stored together (the first
        turn of a new session creates it, with its system prompt, in the same transaction)."""
        human = HumanMessage(text)
        window = self._window()
        context = [to_langchain(m) for m in window]
        if self.system_prompt and not any(isinstance(m, SystemMessage) for m in context):
            context = [SystemMessage(self.system_prompt), *context]
        recalled = self.recalled(text, window)
        if recalled:
            if context and isinstance(context[0], SystemMessage):
                context[0] = SystemMessage(f"{context[0].text}\n\n{recalled}")
            else:
                context = [SystemMessage(recalled), *context]
        reply = self.model.invoke([*context, human])
        # A reply whose extras are not JSON (a provider's NaN log-probability, say) is kept in
        # its readable form rather than lost with the turn the model was paid for.
        self._store([from_langchain(human), storable_message(reply)])
        return str(reply.text)

    def _store(self, messages: list[Message]) -> None:
        def write() -> None:
            if self._stored() is None:
                self.manager.create_session(
                    self.system_prompt, None, self.user_id, session_id=self.session_id
                )
            self.manager.save_messages(self.session_id, messages, user_id=self.user_id)

        self.manager.atomic(write)

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

    def _nothing_stored(self, what: str) -> bool:
        """Say so and return True when the current session has nothing stored yet."""
        if self._stored() is not None:
            return False
        self.write(f"{what}: session {self.session_id} has no messages yet")
        return True

    def cmd_sessions(self, _: str) -> None:
        sessions = self.manager.list_sessions(limit=20, user_id=self.user_id)
        if all(s.id != self.session_id for s in sessions):
            self.write(f"* {self.session_id}  new: stored with its first message")
        elif not sessions:
            self.write("no sessions")
        for s in sessions:
            mark = "*" if s.id == self.session_id else " "
            self.write(
                f"{mark} {s.id}  {plural(s.message_count, 'message')}  "
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
        self.named_session = True
        count = len(self.manager.get_messages(arg, user_id=self.user_id))
        self.write(f"loaded session {arg} ({plural(count, 'message')})")

    def cmd_save(self, _: str) -> None:
        if self._nothing_stored("nothing to save"):
            return
        # Every turn is committed as it happens; this makes it visible and waits for search.
        self.manager.flush()
        count = len(self.manager.get_messages(self.session_id, user_id=self.user_id))
        self.write(f"saved session {self.session_id} ({plural(count, 'message')})")

    def cmd_history(self, _: str) -> None:
        messages = self.manager.get_messages(self.session_id, user_id=self.user_id)
        if not messages:
            self.write("no messages")
        for m in messages:
            self.write(f"[{m.id}] {m.role}: {m.content}")

    def cmd_clear(self, _: str) -> None:
        session = self._stored()
        if session is None:
            self.write("context cleared (nothing was stored yet)")
            return
        messages = self.manager.get_messages(self.session_id, user_id=self.user_id)
        last = messages[-1].id if messages else 0
        self.manager.update_session(
            self.session_id, metadata={**session.metadata, CONTEXT_START_KEY: last}
        )
        kept = plural(len(messages), "message")
        self.write(f"context cleared ({kept} kept in the database)")

    def cmd_forget(self, _: str) -> None:
        if self._nothing_stored("nothing to forget"):
            return
        old = self.session_id
        count = len(self.manager.get_messages(old, user_id=self.user_id))
        try:
            answer = self.ask(
                f"delete session {old} and its {plural(count, 'message')}? "
                "This cannot be undone. [y/N] "
            )
        except EOFError:
            answer = ""
        if answer.strip().lower() not in ("y", "yes"):
            self.write(f"kept session {old}")
            return
        self.manager.delete_session(old, user_id=self.user_id)
        self.session_id = uuid.uuid4().hex[:12]
        self.named_session = False
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
    recall_tokens: int = DEFAULT_RECALL_TOKENS,
    stdin: TextIO | None = None,
) -> None:
    """The interactive loop behind ``harombe chat``.

    Every option is checked, the model built and the session's owner verified before the
    first prompt, so a bad start fails at once (and stores nothing) instead of on every turn.
    """
    check_chat_options(max_tokens, recall_tokens)
    chat_model = load_chat_model(model)
    semantic = embedding.lower() not in ("none", "off", "")
    manager = MemoryManager(
        db if memory else ":memory:",
        embedding=embedding if semantic else None,
        vector_store="database" if semantic else None,
    )

    interactive = stdin is None and sys.stdin.isatty()

    def read(prompt: str) -> str:
        if stdin is None:
            return input(prompt)
        print(prompt, end="", flush=True)
        line = stdin.readline()
        if not line:
            raise EOFError
        return line.rstrip("\n")

    try:
        chat = ChatSession(
            manager,
            chat_model,
            session_id=session_id,
            user_id=user_id,
            system_prompt=system_prompt,
            max_tokens=max_tokens,
            recall_tokens=recall_tokens,
            ask=read,
        )
        print(chat.greeting(model))
        while True:
            try:
                line = read("you> ")
            except (EOFError, KeyboardInterrupt):
                print()
                break
            if not line.strip():
                continue
            try:
                if line.startswith("/"):
                    if not chat.command(line):
                        if not interactive:  # the line typed was not echoed: end the prompt
                            print()
                        break
                    continue
                print(f"ai> {chat.send(line)}")
            except HarombeError as exc:
                print(f"error: {exc.cli_message()}")
    finally:
        manager.close()
