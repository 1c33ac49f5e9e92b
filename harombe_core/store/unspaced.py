"""Text of scripts written without spaces between words, as the keyword indexes are given it.

FTS5's unicode61 tokenizer, and PostgreSQL's default parser, make one token of a whole run of
Han ideographs, Hiragana or Katakana (a whole Chinese or Japanese sentence), so no word inside
it could be found. Every writer of a keyword index (the messages' catch-up and rebuild in
``fts``, the relink after a delete in ``erasure``, the facts' triggers, PostgreSQL's
``harombe_spaced`` SQL function in ``schema``) passes the text through :func:`spaced`, which
sets each such character apart as a token of its own; a query's run is then looked up as
phrases of its characters (:func:`phrase`).

Korean is written with spaces, but its particles and endings are written onto the word
("서울에서", in Seoul): a search for "서울" must find it. Hangul syllables are set apart the
same way, the choice of Lucene's CJK analyzer (bigrams of Han, kana and Hangul alike). A prefix
match of Hangul words was the other candidate; it finds a noun only at the start of a word
(not "음식" in "한국음식"), and FTS5's prefix queries match terms no row count or tail
scorer here knows, so one kind of search would score unlike the other.
"""

from __future__ import annotations

import re

__all__ = ["PG_FOLDED", "PG_REWRITTEN", "PG_UNSPACED", "UNSPACED", "phrase", "spaced"]

#: Code point ranges of the scripts set apart: Hiragana and Katakana, CJK Extension A, CJK
#: Unified Ideographs, Hangul syllables, CJK Compatibility Ideographs, Extensions B-F and the
#: compatibility supplement.
_RANGES = (
    (0x3040, 0x30FF),
    (0x3400, 0x4DBF),
    (0x4E00, 0x9FFF),
    (0xAC00, 0xD7AF),
    (0xF900, 0xFAFF),
    (0x20000, 0x2FA1F),
)

#: One character of a script whose words are not set apart by spaces (see the module).
UNSPACED = re.compile("[" + "".join(f"{chr(a)}-{chr(b)}" for a, b in _RANGES) + "]")


def _pg_escape(code: int) -> str:
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


#: :data:`UNSPACED` as a PostgreSQL regular expression, in ASCII (``\\uXXXX`` escapes), so
#: the schema's SQL is the same bytes whatever the database's encoding.
PG_UNSPACED = "[" + "".join(f"{_pg_escape(a)}-{_pg_escape(b)}" for a, b in _RANGES) + "]"


#: Upper-case letters outside ASCII whose lower case is one character, in the scripts of
#: Latin (Latin-1 to Latin Extended Additional), Greek, Cyrillic, Armenian, Georgian and the
#: fullwidth forms. PostgreSQL's parser leaves them as they are in a "C" locale (only ASCII is
#: lowered there), so "Москву" was indexed as itself and never matched a query, which is
#: lowered; :data:`PG_FOLDED` lowers them first, whatever the database's locale.
_CASED = (
    (0x00C0, 0x024F),
    (0x0370, 0x052F),
    (0x0531, 0x0556),
    (0x10A0, 0x10CD),
    (0x1E00, 0x1FFF),
    (0xFF21, 0xFF3A),
)
_FOLDS = [
    (chr(code), chr(code).lower())
    for first, last in _CASED
    for code in range(first, last + 1)
    if len(chr(code).lower()) == 1 and chr(code).lower() != chr(code)
]


def _pg_unicode_literal(text: str) -> str:
    return "U&'" + "".join(f"\\{ord(c):04X}" for c in text) + "'"


#: ``{text}`` lowered as Python's ``str.lower`` lowers a query's words (for the letters of
#: ``_CASED``), as a PostgreSQL expression in ASCII: the ``translate`` runs only on text that
#: holds a character outside ASCII.
PG_FOLDED = (
    "CASE WHEN {text} ~ '[^\\x01-\\x7f]' THEN translate({text}, "
    + _pg_unicode_literal("".join(upper for upper, _ in _FOLDS))
    + ", "
    + _pg_unicode_literal("".join(lower for _, lower in _FOLDS))
    + ") ELSE {text} END"
)


#: A character the PostgreSQL index writes otherwise since :data:`PG_FOLDED` (PG migration
#: 13 re-indexes only the messages holding one): a capital it lowers, or one of
#: :data:`UNSPACED`.
PG_REWRITTEN = (
    "[" + "".join(_pg_escape(ord(upper)) for upper, _ in _FOLDS) + PG_UNSPACED[1:-1] + "]"
)


def spaced(text: str) -> str:
    """``text`` with each character of :data:`UNSPACED` set apart by spaces, so that it is a
    token of its own and any word of such text is found as the phrase of its characters.
    Other text is returned unchanged."""
    return UNSPACED.sub(r" \g<0> ", text) if UNSPACED.search(text) else text


def sql_spaced(value: object) -> object:
    """:func:`spaced` as SQLite's ``harombe_spaced``: a value that is not text (a blob written
    into a message by hand) has no words, rather than failing every catch-up and rebuild of
    the keyword index with "user-defined function raised exception"."""
    if type(value) is str:
        return spaced(value)
    return None if value is None else ""


def phrase(word: str) -> str:
    """A query word as the index holds it: a run of :data:`UNSPACED` characters as its
    characters separated by single spaces (to be quoted as a phrase), any other word as is."""
    return " ".join(spaced(word).split())
