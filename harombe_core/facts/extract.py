"""The offline fact extractor: first-person statements found by patterns, no model.

It reads what a user says about themself, one sentence at a time, and proposes:

- **tasks** from "remind me to ...", "I need to ...", "I have to ...", "don't let me forget
  to ...";
- **completions** (``close``) from "I booked ...", "I finished ...", "done with ...";
- **decisions** from "I decided to ...", "I'm going with ...";
- **preferences** from "I love / like / prefer / enjoy / hate / can't stand ...", keyed by
  what they are about, so "I hate sushi" after "I love sushi" supersedes it;
- **facts** keyed by subject for common attributes (home city, job, employer, diet, name,
  age, allergy, pet, partner, children, favourite things), and other first-person statements
  ("I am ...", "I have ...", "my sister ...", "I went ...") with a lower confidence.

Each proposal carries a confidence; :attr:`OfflineExtractor.min_confidence` drops those
below it (``benchmarks/facts_eval.py`` chooses it by leave-one-conversation-out). Questions,
conditionals and statements about someone else are left alone. The text of a fact is the
user's sentence turned to the third person ("I live in Lisbon" -> "Lives in Lisbon").
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from harombe_core.facts.models import FactProposal, FactSource
from harombe_core.models import Message

__all__ = ["SUBJECT_PATTERNS", "OfflineExtractor", "statements", "third_person"]

_SENTENCE = re.compile(r"(?<=[.!?;])\s+|\n+")
#: Where a sentence joins two first-person statements ("I live in Lisbon and I am vegetarian"):
#: each is a fact of its own, so neither keeps the other's words ("Lives in Lisbon and I am
#: vegetarian" was one fact, filed under the home city).
_AND_I = re.compile(r",?\s+(?:and|but)\s+(?=i(?:'m|'ve|'d|'ll)?\s)", re.I)
_CLAUSE_END = re.compile(r"\s*(?:,\s*(?:but|and|so|because)\b|\bbut\b|\bbecause\b).*$", re.I)

#: (subject, pattern, confidence): the pattern's group "v" is the attribute's value.
SUBJECT_PATTERNS: list[tuple[str, re.Pattern[str], float]] = [
    (s, re.compile(p, re.I), c)
    for s, p, c in [
        ("name", r"^(?:my name is|call me|i'm called|i am called)\s+(?P<v>[\w' -]{1,40})$", 0.9),
        (
            "home city",
            r"^i(?:'ve| have)?\s+(?:just\s+)?(?:live|moved|relocated|am living|'m living)\s+"
            r"(?:in|to)\s+(?P<v>.{2,60})$",
            0.9,
        ),
        ("home city", r"^i(?:'m| am)\s+(?:now\s+)?based in\s+(?P<v>.{2,60})$", 0.85),
        ("hometown", r"^i(?:'m| am)\s+(?:originally\s+)?from\s+(?P<v>.{2,60})$", 0.85),
        ("job", r"^i\s+work\s+as\s+(?:an?\s+)?(?P<v>.{2,60})$", 0.9),
        ("job", r"^my\s+(?:job|profession|occupation)\s+is\s+(?P<v>.{2,60})$", 0.9),
        ("employer", r"^i\s+(?:work|am working|'m working)\s+(?:at|for)\s+(?P<v>.{2,60})$", 0.85),
        (
            "diet",
            r"^i(?:'m| am)\s+(?:a\s+)?(?P<v>vegan|vegetarian|pescatarian|keto|gluten[- ]free"
            r"|lactose intolerant)\b.*$",
            0.9,
        ),
        ("diet", r"^i\s+(?:don't|do not|no longer)\s+eat\s+(?P<v>.{2,40})$", 0.85),
        ("allergy", r"^i(?:'m| am)\s+allergic to\s+(?P<v>.{2,40})$", 0.9),
        ("age", r"^i(?:'m| am)\s+(?P<v>\d{1,3})(?:\s+years old)?$", 0.85),
        (
            "favorite {k}",
            r"^my\s+fav(?:ou?rite)?\s+(?P<k>[\w ]{2,30}?)\s+is\s+(?P<v>.{2,60})$",
            0.85,
        ),
        ("pet", r"^i\s+(?:have|'ve got|got)\s+an?\s+(?P<v>(?:dog|cat|puppy|kitten)\b.*)$", 0.8),
        (
            "partner",
            r"^(?:my\s+(?:wife|husband|partner|girlfriend|boyfriend|fianc[ée]e?)\s+(?P<v>.{2,60}))$",
            0.6,
        ),
        ("children", r"^i\s+have\s+(?P<v>(?:\w+\s+)?(?:kids|children|sons?|daughters?)\b.*)$", 0.8),
    ]
]

_TASK = re.compile(
    r"^(?:please\s+)?(?:remind me to|don't let me forget to|i\s+(?:really\s+|still\s+)?"
    r"(?:need to|have to|must|should|'ve got to|have got to|gotta|need to remember to)"
    r"|i(?:'m| am) planning to|i plan to|i(?:'ll| will) have to)\s+(?P<v>.{3,120})$",
    re.I,
)
_DONE_VERBS = (
    "booked|finished|completed|submitted|paid|sent|bought|ordered|scheduled|cancelled|canceled"
    "|renewed|fixed|called|returned|signed|filed|posted|emailed|wrote|cleaned|picked up|did"
)
_DONE = re.compile(
    rf"^(?:i(?:'ve| have)?\s+(?:just\s+|already\s+|finally\s+)?(?P<verb>{_DONE_VERBS})\s+"
    r"(?P<v>.{2,120})|(?:i'm\s+|i am\s+)?(?:all\s+)?done\s+with\s+(?P<w>.{2,120}))$",
    re.I,
)
_DECISION = re.compile(
    r"^(?:i(?:'ve| have)?\s+decided\s+(?:to\s+)?|i(?:'m| am)\s+going with\s+|"
    r"we(?:'ll| will)\s+go with\s+|let's go with\s+)(?P<v>.{3,120})$",
    re.I,
)
_PREFERENCE = re.compile(
    r"^i\s+(?:really\s+|absolutely\s+|totally\s+)?(?P<verb>love|like|enjoy|prefer|adore|hate|"
    r"dislike|can't stand|cannot stand|don't like|do not like)\s+(?P<v>.{2,80})$",
    re.I,
)
_FIRST_PERSON = re.compile(
    r"^(?:i(?:'m|'ve|'d)?|my|we(?:'re|'ve)?|our)\s+(?P<v>.{3,200})$",
    re.I,
)
_MENTIONS_SELF = re.compile(r"\b(?:i|i'm|i've|i'd|my|myself)\b", re.I)
_SKIP = re.compile(
    r"^(?:i\s+(?:think|guess|wonder|hope|mean|see|know|bet|agree|understand|feel like you)|"
    r"i(?:'m| am)\s+(?:sure|glad|happy to hear|sorry|not sure)|if\b|what|how|why|when|where|"
    r"who|do you|did you|are you|can you|could you|would you)",
    re.I,
)
_IRREGULAR = {
    "am": "is",
    "'m": "is",
    "have": "has",
    "'ve": "has",
    "do": "does",
    "don't": "doesn't",
    "go": "goes",
    "was": "was",
    "'d": "would",
    "can't": "can't",
    "cannot": "cannot",
    "will": "will",
    "'ll": "will",
    "can": "can",
    "could": "could",
    "would": "would",
    "should": "should",
    "must": "must",
    "need": "needs",
}


def third_person(sentence: str) -> str:
    """ "I live in Lisbon" -> "Lives in Lisbon"; "I'm vegan" -> "Is vegan"; "My dog is Rex"
    -> "Their dog is Rex". Other text is kept as it is."""
    text = sentence.strip().rstrip(".!;")
    m = re.match(r"^i\s*('m|'ve|'d|'ll)\s+(.*)$", text, re.I) or re.match(
        r"^i\s+(\S+)\s*(.*)$", text, re.I
    )
    if m:
        verb, rest = m.group(1).lower(), m.group(2)
        if verb in _IRREGULAR:
            word = _IRREGULAR[verb]
        elif verb.endswith(("s", "sh", "ch", "x", "z", "o")) and not verb.endswith("ed"):
            word = verb + "es"
        elif verb.endswith("y") and len(verb) > 2 and verb[-2] not in "aeiou":
            word = verb[:-1] + "ies"
        elif verb.endswith("ed") or verb in {"went", "got", "made", "did", "saw", "took"}:
            word = verb
        else:
            word = verb + "s"
        text = f"{word} {rest}".strip()
    else:
        text = re.sub(r"^my\b", "their", text, flags=re.I)
        text = re.sub(r"^we\b", "they", text, flags=re.I)
        text = re.sub(r"^our\b", "their", text, flags=re.I)
    text = re.sub(r"\bmy\b", "their", text, flags=re.I)
    text = re.sub(r"\bmyself\b", "themself", text, flags=re.I)
    text = re.sub(r"\bme\b", "them", text, flags=re.I)
    return text[:1].upper() + text[1:]


def statements(text: str) -> list[str]:
    """The statements of a message the extractor reads one by one: its sentences, and the
    first-person clauses a sentence joins with "and I" / "but I"."""
    return [c for sentence in _SENTENCE.split(text) for c in _AND_I.split(sentence)]


def _clean(value: str) -> str:
    return _CLAUSE_END.sub("", value).strip(" ,.!;:\"'")


@dataclass
class OfflineExtractor:
    """Facts, preferences, tasks and completions from a user's own words, with no model.

    ``min_confidence`` drops weaker proposals (a sentence that only mentions the speaker
    scores 0.3, one that starts in the first person 0.5, a subject pattern 0.8-0.9). Its
    default is what leave-one-conversation-out chose on LoCoMo (``benchmarks/facts_eval.py``:
    coverage 0.78, precision 0.61); raise it to 0.5 for fewer, cleaner facts. ``roles`` are
    the authors read (the user by default: what an assistant says is not about the user).
    """

    min_confidence: float = 0.3
    roles: tuple[str, ...] = ("user",)

    def extract(self, messages: Sequence[Message]) -> list[FactProposal]:
        """Proposals from ``messages`` (each with the message as its source), in order."""
        out: list[FactProposal] = []
        for message in messages:
            if message.role not in self.roles or not message.content:
                continue
            source = None
            if message.session_id is not None:
                source = FactSource(message.session_id, message.id)
            for sentence in statements(message.content):
                proposal = self.sentence(sentence)
                if proposal is None or proposal[1] < self.min_confidence:
                    continue
                p = proposal[0]
                out.append(
                    FactProposal(
                        p.action,
                        p.text,
                        kind=p.kind,
                        subject=p.subject,
                        source=source,
                        at=message.created_at,
                    )
                )
        return out

    def sentence(self, raw: str) -> tuple[FactProposal, float] | None:
        """The proposal one sentence makes and its confidence, or None."""
        text = " ".join(raw.replace("’", "'").split()).strip(" \"'")
        if not text or text.endswith("?") or len(text) > 400:
            return None
        text = re.sub(
            r"^(?:(?:oh|well|yeah|yes|so|and|also|btw|actually|honestly|anyway|by the way|"
            r"wow|hey|haha|lol)[,!]?\s+)+",
            "",
            text,
            flags=re.I,
        )
        body = text.rstrip(".!;")
        if _SKIP.match(body):
            return None
        m = _TASK.match(body)
        if m:
            task = _clean(m.group("v"))
            task = re.sub(
                r"\b(?:my|me)\b",
                lambda w: {"my": "their", "me": "them"}[w.group(0).lower()],
                task,
                flags=re.I,
            )
            return FactProposal("add", task[:1].upper() + task[1:], kind="task"), 0.9
        m = _DONE.match(body)
        if m:
            what = m.group("v") or m.group("w") or ""
            verb = m.group("verb") or "finished"
            return FactProposal("close", _clean(f"{verb} {what}"), kind="task"), 0.8
        m = _DECISION.match(body)
        if m:
            return FactProposal("add", third_person(body), kind="decision"), 0.8
        m = _PREFERENCE.match(body)
        if m:
            about = _clean(m.group("v")).lower()
            about = re.sub(r"^(?:to|the|a|an|it when)\s+", "", about)
            if about:
                subject = f"opinion of {about}"[:80]
                return FactProposal(
                    "add", third_person(body), kind="preference", subject=subject
                ), 0.85
        for subject, pattern, confidence in SUBJECT_PATTERNS:
            m = pattern.match(body)
            if m:
                key = subject
                if "{k}" in subject:
                    key = subject.format(k=" ".join(m.group("k").lower().split()))
                value = _clean(m.group("v"))
                if not value:
                    continue
                return FactProposal("add", third_person(body), subject=key[:80]), confidence
        m = _FIRST_PERSON.match(body)
        if m and len(body.split()) >= 4:
            return FactProposal("add", third_person(body)), 0.5
        if _MENTIONS_SELF.search(body) and len(body.split()) >= 5:
            return FactProposal("add", body), 0.3
        return None
