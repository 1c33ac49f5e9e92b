"""Summaries of messages and sessions, with or without a language model.

Two summaries exist, both from the unified chat-memory design:

* a :class:`~harombe_core.models.MessageSummary` per message (a title and at most two
  sentences), which labels thread-graph nodes and helps an LLM selector choose among them;
* a :class:`SessionSummary` per session: a paragraph plus structured facts, decisions, action
  items, preferences, topics and the outcome. It is what the ``summarization`` and ``hybrid``
  strategies show in place of old messages, and what session-end stores and embeds.

:class:`LLMSummarizer` asks a model (any ``llm(prompt) -> str`` callable) for JSON and validates
it; :class:`ExtractiveSummarizer` needs no model at all (sentence scoring and a few patterns), so
summary memory works offline. Summarising is incremental: a session summary is updated from the
previous one plus the messages after ``summary_until_id``, never from the whole history again.
A summariser that fails raises :class:`~harombe_core.errors.SummarizationError`; callers store
messages first, so a failure never loses one.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from itertools import pairwise
from typing import Any, Protocol, TypeVar, runtime_checkable

from harombe_core.errors import InvalidInputError, SummarizationError
from harombe_core.flows import Flow, adrive, drive
from harombe_core.llm import acall_llm, ask, call_llm
from harombe_core.models import Message, MessageSummary
from harombe_core.store.unspaced import UNSPACED

__all__ = [
    "ExtractiveSummarizer",
    "LLMSummarizer",
    "SessionSummary",
    "Summarizer",
    "acall_llm",
    "call_llm",
    "resolve_summarizer",
]

T = TypeVar("T")

_LIST_FIELDS = ("facts", "decisions", "action_items", "preferences", "topics")
_MAX_ITEMS = 20


# --------------------------------------------------------------------------------------------
# the session summary


@dataclass(slots=True)
class SessionSummary:
    """The structured summary of a session (stored as the session's ``summary_data``)."""

    summary: str = ""
    facts: list[str] = field(default_factory=list)
    decisions: list[str] = field(default_factory=list)
    action_items: list[str] = field(default_factory=list)
    preferences: list[str] = field(default_factory=list)
    topics: list[str] = field(default_factory=list)
    outcome: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Any) -> SessionSummary:
        """Validate a mapping (an LLM's JSON or a stored ``summary_data``)."""
        if not isinstance(data, dict):
            raise SummarizationError(
                f"a session summary must be a JSON object, got {type(data).__name__}."
            )
        summary = data.get("summary", "")
        if not isinstance(summary, str):
            raise SummarizationError('"summary" must be a string paragraph.')
        outcome = data.get("outcome") or ""
        lists: dict[str, list[str]] = {}
        for name in _LIST_FIELDS:
            value = data.get(name) or []
            if isinstance(value, str):
                value = [value]
            if not isinstance(value, list):
                raise SummarizationError(f'"{name}" must be a list of strings.')
            lists[name] = [str(v).strip() for v in value if str(v).strip()]
        return cls(summary=summary.strip(), outcome=str(outcome).strip(), **lists)

    def merged_with(self, newer: SessionSummary) -> SessionSummary:
        """This (older) summary updated by ``newer``: lists unioned, newest paragraph appended."""
        lists = {
            name: _dedupe([*getattr(self, name), *getattr(newer, name)])[-_MAX_ITEMS:]
            for name in _LIST_FIELDS
        }
        paragraph = " ".join(p for p in (self.summary, newer.summary) if p)
        return SessionSummary(
            summary=_clip(paragraph, 1200, keep="end"),
            outcome=newer.outcome or self.outcome,
            **lists,
        )

    def as_text(self) -> str:
        """The summary as text for a prompt: the paragraph, then each non-empty list."""
        parts = [self.summary] if self.summary else []
        for name in _LIST_FIELDS:
            items = getattr(self, name)
            if items:
                parts.append(f"{name.replace('_', ' ').capitalize()}: " + "; ".join(items))
        if self.outcome:
            parts.append(f"Outcome: {self.outcome}")
        return "\n".join(parts)


def _dedupe(items: Sequence[str]) -> list[str]:
    seen: dict[str, str] = {}
    for item in items:
        seen.setdefault(item.lower(), item)
    return list(seen.values())


def _clip(text: str, limit: int, *, keep: str = "start") -> str:
    if len(text) <= limit:
        return text
    return text[:limit].rstrip() + "…" if keep == "start" else "…" + text[-limit:].lstrip()


@runtime_checkable
class Summarizer(Protocol):
    """Summarises one message, and a session incrementally (from its previous summary)."""

    def summarize_message(self, message: Message) -> MessageSummary: ...

    def summarize_session(
        self, messages: Sequence[Message], previous: SessionSummary | None = None
    ) -> SessionSummary: ...


# --------------------------------------------------------------------------------------------
# extractive (no model)

#: A sentence ends at . ! ? and a space, or at the full-width 。！？ of Chinese and Japanese,
#: which no space follows.
_SENTENCE = re.compile(r"(?<=[.!?])\s+|(?<=[。！？])\s*|\n+")
#: A word of any alphabet: a letter, then letters, apostrophes or hyphens (not only A-Z: a
#: session held in Russian or German had no content word, so no summary at all).
_WORD = re.compile(r"[^\W\d_](?:[^\W\d_]|['\-])+")
_STOPWORDS = frozenset(
    (  # noqa: SIM905 - a word list reads better as text
        "a about above after again all also am an and any are as at be because been before being "
        "but by can could did do does doing don't down during each few for from further had has "
        "have having he her here hers him his how i i'm i've if in into is it it's its just let's "
        "like me more most my no nor not now of off on once only or other our ours out over own "
        "really same she should so some such than that that's the their them then there these they "
        "this those through to too under until up very was we we're were what when where which "
        "while who whom why will with would you you're your yours yeah yes oh ok okay thanks thank "
        "hey hi hello sure great good well get got one would much many lot things thing know think "
        "going want "
        # conversational filler: acknowledgements and words that say nothing about the subject
        "noted note notes old new will can't won't didn't isn't doesn't please perfect exciting "
        "quick cool nice lovely awesome fine right maybe also just still even let anything "
        "something everything nothing make made take need needs way sounds done "
    ).split()
)
_PATTERNS = {
    "preferences": re.compile(
        r"\b(i|we) (really |do(n't| not) |)(like|love|prefer|enjoy|hate|dislike|favou?rite|"
        r"want)\b|\bmy favou?rite\b|\bcan('|no)t stand\b|\bwould be (great|nice|ideal)\b|"
        r"\bno [a-z ]{2,30} please\b|\bprefers?\b",
        re.I,
    ),
    "decisions": re.compile(
        r"\b(decided|decide to|we'll|let's|agreed|going to go with|will use|chose|choose to)\b",
        re.I,
    ),
    "action_items": re.compile(
        r"\b(need to|todo|to-do|remember to|remind (me|us)|don't forget|follow up|next step|"
        r"have to|must|make sure|by (mon|tues|wednes|thurs|fri|satur|sun)day|"
        r"by \d{1,2} [A-Z][a-z]+|by [A-Z][a-z]+ \d{1,2}|before (the )?\w+day)\b",
        re.I,
    ),
    "facts": re.compile(
        r"\b(i am|i'm|my name|i live|i work|i have|i've been|my \w+ (is|are|was))\b", re.I
    ),
}


def _sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE.split(text) if len(s.strip()) > 2]


def _keywords(text: str) -> list[str]:
    """The content words of ``text``, lowered: words of three letters or more outside the stop
    words, and for a run of Chinese, Japanese or Korean characters (no spaces between its
    words) the overlapping pairs of its characters, as its keyword search looks them up."""
    words: list[str] = []
    for word in _WORD.findall(text):
        word = word.lower()
        if UNSPACED.search(word):
            chars = [c for c in word if UNSPACED.match(c)]
            words += [a + b for a, b in pairwise(chars)] or chars
        elif len(word) > 2 and word not in _STOPWORDS:
            words.append(word)
    return words


def _topics(counts: Counter[str], limit: int) -> list[str]:
    """The most frequent content words, a plural counted with its singular ("rows" is "row")."""
    merged: Counter[str] = Counter()
    for word, count in counts.items():
        single = word[:-1] if word.endswith("s") and word[:-1] in counts else word
        merged[single] += count
    return [w for w, _ in merged.most_common(limit)]


def _says_something(sentence: str) -> bool:
    """A statement with some content: not a question, not an acknowledgement ("Will do.",
    "Exciting!"), which tells nothing about how a conversation ended."""
    return not sentence.rstrip().endswith(("?", "？")) and len(_keywords(sentence)) >= 2


def _outcome(spoken: Sequence[Message]) -> str:
    """How the conversation ended: the last statement with content in the assistant's last
    replies (its final answer, not "Will do."); nothing when they only acknowledge or ask."""
    replies = [m for m in spoken if m.role == "assistant"]
    for reply in reversed(replies[-2:]):
        statements = [s for s in _sentences(reply.content) if _says_something(s)]
        if statements:
            return statements[-1]
    return ""


class ExtractiveSummarizer:
    """Summaries without a model: the most informative sentences, patterns, frequent words.

    Sentences are scored by the frequency of their content words across the text (the classic
    Luhn method), and the best ``max_sentences`` are kept in conversation order. Facts,
    preferences, decisions and action items are sentences matching simple patterns (a request
    to be reminded, a deadline, "I can't stand ..."); topics are the most frequent content words,
    conversational filler ("noted", "will", "please") left out; the outcome is the last statement
    with content in the assistant's final replies, not an acknowledgement such as "Will do.".
    Crude next to a model, but deterministic, free and offline, and it keeps names, numbers and
    dates verbatim.
    """

    name = "extractive"

    def __init__(self, *, max_sentences: int = 4, max_topics: int = 6) -> None:
        self.max_sentences = max_sentences
        self.max_topics = max_topics

    def summarize_message(self, message: Message) -> MessageSummary:
        sentences = _sentences(message.content) or [message.content.strip() or "(empty)"]
        words = sentences[0].split()
        title = " ".join(words[:8]).rstrip(".,;:!?") + ("…" if len(words) > 8 else "")
        return MessageSummary(title=title or "(empty)", summary=_clip(" ".join(sentences[:2]), 300))

    def summarize_session(
        self, messages: Sequence[Message], previous: SessionSummary | None = None
    ) -> SessionSummary:
        spoken = [m for m in messages if m.role in ("user", "assistant") and m.content.strip()]
        tagged = [(m.role, s) for m in spoken for s in _sentences(m.content)]
        counts = Counter(w for _, s in tagged for w in _keywords(s))
        scored = []
        for index, (_role, sentence) in enumerate(tagged):
            words = _keywords(sentence)
            if not words:
                continue
            score = sum(counts[w] for w in set(words)) / (len(words) ** 0.5)
            scored.append((score, index))
        best = sorted(i for _, i in sorted(scored, reverse=True)[: self.max_sentences])
        found: dict[str, list[str]] = {name: [] for name in _PATTERNS}
        for role, sentence in tagged:
            for name, pattern in _PATTERNS.items():
                if (role == "user" or name in ("decisions", "action_items")) and pattern.search(
                    sentence
                ):
                    found[name].append(_clip(sentence, 200))
        outcome = _outcome(spoken)
        current = SessionSummary(
            summary=_clip(" ".join(tagged[i][1] for i in best), 800),
            facts=_dedupe(found["facts"])[:_MAX_ITEMS],
            decisions=_dedupe(found["decisions"])[:_MAX_ITEMS],
            action_items=_dedupe(found["action_items"])[:_MAX_ITEMS],
            preferences=_dedupe(found["preferences"])[:_MAX_ITEMS],
            topics=_topics(counts, self.max_topics),
            outcome=_clip(outcome, 200),
        )
        return previous.merged_with(current) if previous is not None else current


# --------------------------------------------------------------------------------------------
# with a model

_MESSAGE_PROMPT = """You are an expert at summarising messages. Give a clear, descriptive title \
for the main topic and a concise summary of at most two sentences (intent, key concepts, \
requests, details useful for threading).

Message:
{content}

Answer with JSON only: {{"title": "...", "summary": "..."}}"""

_SESSION_PROMPT = """Summarise this conversation for long-term memory.
{previous}
Conversation:
{transcript}

Answer with JSON only, with exactly these keys:
{{"summary": "<one paragraph>", "facts": ["<facts about the user>"], "decisions": [...], \
"action_items": [...], "preferences": ["<user preferences>"], "topics": ["<short topic>"], \
"outcome": "<how the conversation ended>"}}"""


def _json_object(answer: str) -> Any:
    match = re.search(r"\{.*\}", answer, re.DOTALL)
    if not match:
        raise SummarizationError(f"the model's answer has no JSON object: {answer!r:.200}")
    try:
        return json.loads(match.group(0))
    except (ValueError, RecursionError) as exc:  # ValueError: also ints too long to read
        raise SummarizationError(
            f"the model's JSON does not parse ({exc}): {answer!r:.200}"
        ) from exc


def _parse_session(answer: str) -> SessionSummary:
    return SessionSummary.from_dict(_json_object(answer))


def _transcript(messages: Sequence[Message], limit: int) -> str:
    lines = [f"{m.name or m.role}: {m.content}" for m in messages if m.content.strip()]
    return _clip("\n".join(lines), limit, keep="end")


class LLMSummarizer:
    """Summaries from a model: ``llm(prompt) -> str`` (sync) or an object with async ``acall``.

    The answer must be JSON with the expected fields; an invalid answer is retried once with the
    error, then :class:`~harombe_core.errors.SummarizationError` is raised (the caller keeps the
    messages and may fall back to :class:`ExtractiveSummarizer`).
    """

    name = "llm"

    def __init__(self, llm: Any, *, max_attempts: int = 2, max_transcript_chars: int = 12_000):
        if not callable(llm) and not hasattr(llm, "acall"):
            raise InvalidInputError("llm must be a callable llm(prompt) -> str or have acall().")
        self.llm = llm
        self.max_attempts = max(1, max_attempts)
        self.max_transcript_chars = max_transcript_chars

    @staticmethod
    def _message_prompt(message: Message) -> str:
        return _MESSAGE_PROMPT.format(content=message.content[:8000])

    def _session_prompt(self, messages: Sequence[Message], previous: SessionSummary | None) -> str:
        before = ""
        if previous is not None:
            before = (
                "\nThe summary of the earlier part (update it with the new messages):\n"
                + json.dumps(previous.to_dict(), ensure_ascii=False)
                + "\n"
            )
        return _SESSION_PROMPT.format(
            previous=before, transcript=_transcript(messages, self.max_transcript_chars)
        )

    @staticmethod
    def _parse_message(answer: str) -> MessageSummary:
        data = _json_object(answer)
        if not isinstance(data, dict) or not isinstance(data.get("title"), str):
            raise SummarizationError('expected {"title": str, "summary": str}.')
        summary = data.get("summary")
        if not isinstance(summary, str):
            raise SummarizationError('"summary" must be a string.')
        return MessageSummary(title=data["title"].strip(), summary=summary.strip())

    def _flow(self, prompt: str, parse: Callable[[str], T]) -> Flow[T]:
        """Ask, validate, retry once with the error; the same on the sync and async paths.

        A model that raises InvalidInputError (an async-only model called from sync code, or a
        model refusing its input) is the caller's mistake and is re-raised as is; any other
        failure of the user's model is reported as SummarizationError.
        """
        problem = ""
        for _ in range(self.max_attempts):
            answer = yield from ask(self.llm, prompt + problem)
            if isinstance(answer, InvalidInputError):
                raise answer
            if isinstance(answer, BaseException):
                raise SummarizationError(f"the summarising model failed: {answer!r}") from answer
            try:
                return parse(answer)
            except SummarizationError as exc:
                problem = f"\n\nYour previous answer was invalid ({exc}). Answer with valid JSON."
        raise SummarizationError(f"no valid summary after {self.max_attempts} attempts{problem}")

    def _message_flow(self, message: Message) -> Flow[MessageSummary]:
        return self._flow(self._message_prompt(message), self._parse_message)

    def _session_flow(
        self, messages: Sequence[Message], previous: SessionSummary | None
    ) -> Flow[SessionSummary]:
        return self._flow(self._session_prompt(messages, previous), _parse_session)

    def summarize_message(self, message: Message) -> MessageSummary:
        return drive(self._message_flow(message))

    async def asummarize_message(self, message: Message) -> MessageSummary:
        return await adrive(self._message_flow(message))

    def summarize_session(
        self, messages: Sequence[Message], previous: SessionSummary | None = None
    ) -> SessionSummary:
        return drive(self._session_flow(messages, previous))

    async def asummarize_session(
        self, messages: Sequence[Message], previous: SessionSummary | None = None
    ) -> SessionSummary:
        return await adrive(self._session_flow(messages, previous))


def resolve_summarizer(spec: Any = None) -> Summarizer:
    """``None``/``"extractive"`` (no model), a Summarizer object, or a model callable (LLM)."""
    if spec is None or spec == "extractive":
        return ExtractiveSummarizer()
    if isinstance(spec, str):
        raise InvalidInputError(
            f"unknown summarizer {spec!r}; use 'extractive', a Summarizer, or llm=<callable>."
        )
    if hasattr(spec, "summarize_session") and hasattr(spec, "summarize_message"):
        return spec
    if callable(spec) or hasattr(spec, "acall"):
        return LLMSummarizer(spec)
    raise InvalidInputError(
        f"cannot use {type(spec).__name__} as a summarizer; pass 'extractive', a Summarizer, or "
        "a callable llm(prompt) -> str."
    )
