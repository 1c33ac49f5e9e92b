"""The conversation ``HarombeMemory`` hands an engine, counted the way LlamaIndex counts.

LlamaIndex's memories charge a message for its text (``ChatMemoryBuffer`` counts the joined
contents, ``Memory`` each message's blocks), and its engines charge their own prompt with
``tokenizer_fn`` on the text alone. harombe's store keeps what a chat API bills: the text plus a
few tokens of framing per message. Counted with the framing, a ``token_limit`` would keep fewer
messages than LlamaIndex's memories keep for the same number, so here each stored cost is taken
back to the message's text, name and tool calls (tool calls count: an agent's arguments can be
long) before the core's pure window functions choose what fits.

When nothing of the conversation fits, the newest turn is sent anyway, from its user message on:
LlamaIndex's ``Memory`` never flushes the last turn and ``ChatMemoryBuffer`` returns the last
message. A model is never sent nothing, and an over-long message reaches the model (which can
say it is too long) instead of vanishing without a trace.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator, Sequence

from harombe_core.manager import MemoryManager
from harombe_core.models import Message, Session
from harombe_core.strategies import (
    SUMMARY_MARKER,
    Window,
    hybrid_window,
    summarization_window,
    thread_path_newest_first,
    window_newest,
)
from harombe_core.tokens import TokenCounter

__all__ = ["LlamaIndexCosts", "conversation_window", "newest_turn"]

# Budget that holds everything: the core builds the summary, the window is chosen here.
_UNLIMITED = sys.maxsize


class LlamaIndexCosts:
    """What a message costs against a LlamaIndex ``token_limit``, from its stored count.

    The framing a counter adds to every message (an empty message of the same role costs
    exactly that) is taken off, so what remains is the text, the name and the tool calls.
    """

    def __init__(self, counter: TokenCounter) -> None:
        self._counter = counter
        self._framing: dict[str, int] = {}

    def _frame(self, role: str) -> int:
        cost = self._framing.get(role)
        if cost is None:
            cost = self._framing[role] = self._counter.count_message(
                Message(role=role, content="")  # type: ignore[arg-type]
            )
        return cost

    def of(self, message: Message) -> int:
        billed = message.token_count
        if billed is None:
            billed = self._counter.count_message(message)
        return max(billed - self._frame(message.role), 0)

    def costed(self, message: Message) -> Message:
        """``message`` carrying its LlamaIndex cost as ``token_count`` (what windows read)."""
        return message.with_ids(token_count=self.of(message))

    def each(self, newest_first: Iterable[Message]) -> Iterator[Message]:
        return (self.costed(m) for m in newest_first)

    def total(self, messages: Sequence[Message]) -> int:
        return sum(self.of(m) for m in messages)


def newest_turn(newest_first: Iterable[Message]) -> list[Message]:
    """The newest turn, oldest first: the newest user message and everything after it.

    A session without a user message gives its newest message that is not a tool result, with
    the results that follow it (a tool result alone would be refused by a model API).
    """
    taken: list[Message] = []
    for message in newest_first:
        taken.append(message)
        if message.role == "user":
            return taken[::-1]
    start = next((i for i, m in enumerate(taken) if m.role != "tool"), 0)
    return taken[: start + 1][::-1]


def _system(manager: MemoryManager, session: Session) -> list[Message]:
    if session.system_prompt is None:
        return []
    prompt = Message(
        role="system",
        content=session.system_prompt,
        session_id=session.id,
        created_at=session.created_at,
    )
    return [prompt.with_ids(token_count=manager.store.system_prompt_tokens(session.id))]


def _summary(
    manager: MemoryManager, session_id: str, keep_last: int, user_id: str | None
) -> Message | None:
    """The session's summary of what is older than the newest ``keep_last`` messages.

    The core brings it up to date (incrementally, only when the boundary moved); both the
    summarization and the hybrid strategies summarise up to the same boundary.
    """
    built = manager.get_context(
        session_id, "summarization", _UNLIMITED, keep_last=keep_last, user_id=user_id
    )
    return next((m for m in built if m.metadata.get("harombe") == SUMMARY_MARKER), None)


def conversation_window(
    manager: MemoryManager,
    session: Session,
    *,
    strategy: str,
    max_tokens: int,
    keep_last: int,
    user_id: str | None,
) -> Window:
    """The session's messages for ``strategy`` within ``max_tokens`` (LlamaIndex's count).

    The system prompt leads, the window never starts on an assistant or tool turn, and tool
    calls stay with their results. If no message of the conversation fits, the newest turn is
    returned beyond the budget (``Window.tokens`` then exceeds ``max_tokens``).
    """
    costs = LlamaIndexCosts(manager.token_counter)
    sid = session.id
    store = manager.store
    system = [costs.costed(m) for m in _system(manager, session)]
    reserved = costs.total(system)
    path: list[Message] | None = None
    if strategy == "threaded":
        every = manager.get_messages(sid)
        if any(m.parent_id is not None for m in every):  # never threaded: one linear thread
            path = thread_path_newest_first(every)
    chosen = list(system)
    if reserved <= max_tokens:
        if strategy in ("summarization", "hybrid"):
            summary = _summary(manager, sid, keep_last, user_id)
            fit = summarization_window if strategy == "summarization" else hybrid_window
            chosen = fit(
                costs.each(store.iter_newest(sid)),
                max_tokens,
                system=system,
                summary=costs.costed(summary) if summary is not None else None,
                keep_last=keep_last,
                start_on_user=True,
            ).messages
        else:
            newest = path if path is not None else store.iter_newest(sid)
            chosen = system + window_newest(
                costs.each(newest), max_tokens, reserved_tokens=reserved, start_on_user=True
            ).messages
    turn = newest_turn(path if path is not None else store.iter_newest(sid))
    if turn and turn[-1].id not in {m.id for m in chosen}:
        # The newest message did not fit: the newest turn goes in whole, after the system
        # prompt and the summary (older messages the hybrid strategy kept stay before it).
        ids = {m.id for m in turn}
        chosen = [m for m in chosen if m.id is None or m.id not in ids] + [
            costs.costed(m) for m in turn
        ]
    return Window(messages=chosen, tokens=costs.total(chosen))
