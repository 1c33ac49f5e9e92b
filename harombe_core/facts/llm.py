"""The LLM fact extractor: one model call per batch of messages, proposing changes as JSON.

The model sees the user's related current facts (with their ids) and the new messages, and
answers with operations: ``add`` a fact, ``update`` fact N with new text, ``close`` fact N (no
longer true, or a task done). The answer is checked whole before anything is proposed: text
that is not that JSON, an unknown action or kind, a missing text, too many operations, each
raises :class:`~harombe_core.errors.FactExtractionError` and nothing of the batch is written.
Ids the model invents are harmless: consolidation honours a target only when it is a current
fact of this user, and a source only when it is a message of the batch.

The model is a LangChain chat model (``invoke``/``ainvoke``), a LlamaIndex LLM
(``complete``/``acomplete``) or a callable ``llm(prompt) -> str`` (with ``acall`` for async),
used without importing either framework (:mod:`harombe_core.llm` calls each kind, the async
path through its own async method).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from harombe_core.errors import FactExtractionError, InvalidInputError
from harombe_core.facts.models import (
    ACTIONS,
    FACT_KINDS,
    MAX_SUBJECT_CHARS,
    Fact,
    FactProposal,
    FactSource,
)
from harombe_core.flows import Flow
from harombe_core.llm import ask
from harombe_core.models import Message

__all__ = ["PROMPT", "LLMExtractor", "parse_answer"]

#: Most operations one answer may hold (a batch proposes a few; more is a runaway answer).
MAX_OPERATIONS = 64
#: Longest fact text accepted from a model.
MAX_TEXT = 500

PROMPT = """You maintain a memory of facts about a user.
Current facts (id, kind, subject, text):
{facts}

New messages (id, role, text):
{messages}

Propose changes to the user's memory from what the USER says about themself: facts,
preferences, tasks they must do, decisions. Answer with JSON only:
{{"operations": [
  {{"action": "add", "kind": "fact|preference|task|decision", "text": "...",
    "subject": "short key such as home city, or null", "message_id": <id>}},
  {{"action": "update", "target_id": <fact id>, "text": "new text", "message_id": <id>}},
  {{"action": "close", "target_id": <fact id>, "message_id": <id>}}
]}}
Use "update" when a message changes a current fact, "close" when a fact stopped being true or
a task is done. Answer {{"operations": []}} when nothing is worth remembering."""


class LLMExtractor:
    """Facts from a model: one call per batch, against the user's related current facts.

    ``max_facts``: the current facts shown to the model (the most related to the batch's words
    first), so the prompt stays small however much the user has said.
    """

    def __init__(self, llm: Any, *, max_facts: int = 40) -> None:
        if not (callable(llm) or any(hasattr(llm, n) for n in ("acall", "invoke", "complete"))):
            raise InvalidInputError(
                f"llm must be a LangChain chat model, a LlamaIndex LLM or a callable "
                f"llm(prompt) -> str, got {type(llm).__name__}."
            )
        self.llm = llm
        self.max_facts = max_facts

    def propose(
        self, messages: Sequence[Message], current: Sequence[Fact]
    ) -> Flow[list[FactProposal]]:
        """The flow: one prompt, the answer parsed; raises FactExtractionError."""
        shown = _related(current, messages, self.max_facts)
        prompt = PROMPT.format(
            facts="\n".join(f"{f.id} | {f.kind} | {f.subject or '-'} | {f.text}" for f in shown)
            or "(none)",
            messages="\n".join(f"{m.id} | {m.role} | {m.content}" for m in messages),
        )
        answer = yield from ask(self.llm, prompt)
        if isinstance(answer, BaseException):
            raise FactExtractionError(f"the fact extractor's model failed: {answer}") from answer
        return parse_answer(answer, messages)


def _related(current: Sequence[Fact], messages: Sequence[Message], limit: int) -> list[Fact]:
    words = {w for m in messages for w in re.findall(r"\w+", m.content.lower()) if len(w) > 3}
    scored = sorted(
        current,
        key=lambda f: (-len(words & set(re.findall(r"\w+", f.text.lower()))), -f.id),
    )
    return scored[:limit]


def _json_object(text: str) -> Any:
    cleaned = re.sub(r"^\s*```(?:json)?|```\s*$", "", text.strip(), flags=re.I).strip()
    try:
        return json.loads(cleaned)
    except ValueError:
        start, end = cleaned.find("{"), cleaned.rfind("}")
        if start < 0 or end <= start:
            raise FactExtractionError(
                f"the fact extractor's model answered no JSON object: {text[:120]!r}"
            ) from None
        try:
            return json.loads(cleaned[start : end + 1])
        except ValueError as exc:
            raise FactExtractionError(
                f"the fact extractor's model answered malformed JSON ({exc}): {text[:120]!r}"
            ) from None


def parse_answer(text: str, messages: Sequence[Message]) -> list[FactProposal]:
    """The proposals of a model's answer, checked whole (FactExtractionError if any is bad)."""
    data = _json_object(text)
    operations = data.get("operations") if isinstance(data, dict) else data
    if not isinstance(operations, list):
        raise FactExtractionError('the answer must be {"operations": [...]}.')
    if len(operations) > MAX_OPERATIONS:
        raise FactExtractionError(
            f"the answer holds {len(operations)} operations, more than {MAX_OPERATIONS}."
        )
    by_id = {m.id: m for m in messages if m.id is not None}
    fallback = next((m for m in reversed(messages) if m.role == "user"), None)
    out: list[FactProposal] = []
    for number, op in enumerate(operations):
        out.append(_proposal(op, number, by_id, fallback))
    return out


def _proposal(
    op: Any, number: int, by_id: dict[int, Message], fallback: Message | None
) -> FactProposal:
    where = f"operation {number}"
    if not isinstance(op, dict):
        raise FactExtractionError(f"{where} must be an object, got {type(op).__name__}.")
    action = op.get("action")
    if action not in ACTIONS:
        raise FactExtractionError(f"{where}: action must be one of {ACTIONS}, got {action!r}.")
    kind = op.get("kind") or "fact"
    if kind not in FACT_KINDS:
        raise FactExtractionError(f"{where}: kind must be one of {FACT_KINDS}, got {kind!r}.")
    text = op.get("text")
    if action != "close" and (not isinstance(text, str) or not text.strip()):
        raise FactExtractionError(f"{where}: {action} needs a non-empty text.")
    if text is not None and (not isinstance(text, str) or len(text) > MAX_TEXT or "\x00" in text):
        raise FactExtractionError(f"{where}: text must be a str of at most {MAX_TEXT} chars.")
    target = op.get("target_id")
    if action in ("update", "close") and (isinstance(target, bool) or not isinstance(target, int)):
        raise FactExtractionError(f"{where}: {action} needs an integer target_id.")
    subject = op.get("subject")
    if subject is not None and (
        not isinstance(subject, str) or not subject.strip() or len(subject) > MAX_SUBJECT_CHARS
    ):
        subject = None
    named = op.get("message_id")
    message = by_id.get(named) if isinstance(named, int) else None
    message = message or fallback
    source = None
    if message is not None and message.session_id is not None:
        source = FactSource(message.session_id, message.id)
    return FactProposal(
        action,
        " ".join((text or "").split()),
        kind=kind,
        subject=None if subject is None else " ".join(subject.lower().split()),
        target_id=target if action != "add" else None,
        source=source,
        at=None if message is None else message.created_at,
    )
