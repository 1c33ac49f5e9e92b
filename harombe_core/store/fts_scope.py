"""A user's or a session's keyword search, scored with the scope's own BM25 statistics.

FTS5's ``bm25()`` weighs a word by how many rows of the whole file hold it and divides by the
whole file's average length. When several users share one file (a ``harombe serve`` with user
keys, an application passing ``user_id``), another user's messages would then move a user's
scores, their order, and which rows make the cut: a user could learn whether a rare word (a
name, a diagnosis) is in someone else's messages by searching it and comparing scores. A
search scoped to a user or a session (:func:`scoped`) is scored here instead, with FTS5's
formula (:func:`~harombe_core.store.fts.bm25`) over the scope's statistics alone; the user's
facts likewise (:func:`facts_search_body`). Unscoped searches keep FTS5's own ranking
(:func:`harombe_core.store.fts.search_body`).
"""

from __future__ import annotations

import functools
import math
import re
import sqlite3
from collections.abc import Callable, Sequence
from typing import Any

from harombe_core.store import fts
from harombe_core.store.base import KeywordHit, SearchScope
from harombe_core.store.fts import (
    COMMON_MIN_ROWS,
    K1,
    Instances,
    Split,
    behind,
    bm25,
    fts_query,
    index_terms,
    phrase_count,
    rarer_words,
    read_tail,
    span_rows,
    sparse,
    split_tail,
    tail_rows,
    tokens,
    totals,
    varint,
)
from harombe_core.store.rows import MESSAGE_COLUMNS, scope_messages, scope_sql
from harombe_core.store.runner import Body, Step
from harombe_core.validate import MAX_COUNT

__all__ = ["SCOPE_STATISTICS", "facts_search_body", "keyword_body", "scoped", "search_body"]

#: Whether a search scoped to a user or a session scores with the scope's own statistics
#: rather than FTS5's over the whole file (a switch for benchmarks and tests).
SCOPE_STATISTICS = True
#: At most this many rowid ranges a search seeks (see :func:`_scope_ranges`).
_MAX_RANGES = 200


def scoped(scope: SearchScope | None) -> bool:
    """Whether a keyword search in ``scope`` is scored here: it names a user or a session."""
    return (
        SCOPE_STATISTICS
        and scope is not None
        and (scope.user_id is not None or scope.session_id is not None)
    )


def keyword_body(
    words: Sequence[str], limit: int, scope: SearchScope | None, size: int | None
) -> Body[list[KeywordHit]]:
    """The SQLite body of :func:`~harombe_core.store.ops.keyword_search`: a :func:`scoped`
    scope's here (:func:`search_body`), any other FTS5's own ranking
    (:func:`harombe_core.store.fts.search_body`; ``size`` is the scope's size)."""
    if scope is not None and scoped(scope):
        return (yield from search_body(words, limit, scope))
    return (yield from fts.search_body(words, limit, scope, size))


def _whole_file(scope: SearchScope) -> Body[bool]:
    """Whether ``scope`` holds every message of the file (the file has one user, or one
    session). With every message indexed, its statistics are then the index's, and FTS5's
    own ranking, unscoped, gives the same results to the last bit (``fts.bm25`` follows
    FTS5's arithmetic, and both break ties to the newer message) at a fraction of the cost:
    no pass over the scope's rows. A filter beyond the user and the session (roles, dates, an
    excluded session) narrows the scope below the file, so it is never the whole file here.
    One seek in the sessions' user index."""
    if scope.roles is not None or scope.since is not None or scope.until is not None:
        return False
    if scope.exclude_session_id is not None:
        return False
    other: list[str] = []
    params: list[Any] = []
    if scope.user_id is not None:
        other.append("user_id IS NOT ?")
        params.append(scope.user_id)
    if scope.session_id is not None:
        other.append("id IS NOT ?")
        params.append(scope.session_id)
    rows = (
        yield Step(f"SELECT EXISTS (SELECT 1 FROM sessions WHERE {' OR '.join(other)})", params)
    ).rows
    return not rows[0][0]


def search_body(words: Sequence[str], limit: int, scope: SearchScope) -> Body[list[KeywordHit]]:
    """The SQLite body of :func:`~harombe_core.store.ops.keyword_search` for a :func:`scoped`
    scope: one read snapshot, the index as it is plus the scope's messages not indexed yet
    (scored alike, as part of the scope), best first (ties to the newer message)."""
    read = yield from read_tail(scope)
    path, upto, _, tail = read
    if not tail and (yield from _whole_file(scope)):
        # Every message is in the scope and indexed: FTS5 ranks and cuts on its own (the
        # file's tail is the scope's, read above: empty).
        whole = SearchScope(on_corrupt=scope.on_corrupt)  # (equal to no scope: unscoped)
        return (yield from fts.search_body(words, limit, whole, None, read))
    split = split_tail([(r[3], r[-1]) for r in tail])
    if tail:
        behind(path, len(tail))
    return (yield from _scope_search(words, limit, scope, tail, split, upto))


def _scope_ranges(scope: SearchScope) -> Body[list[tuple[int, int]] | None]:
    """The rowid ranges that hold a user's or a session's messages: each session's first and
    last id, overlapping ones merged (sessions written at the same time interleave; another
    user's rows inside a range are read, then left out). One range over every rowid for more
    than ``_MAX_RANGES`` sessions: each range is a seek in every word's row list, so past a
    few hundred one pass costs less. None when the scope names no user or session."""
    spans = yield from span_rows(scope, _MAX_RANGES)
    if spans is None:
        return None
    if len(spans) > _MAX_RANGES:
        # Only the first sessions were read: one range over every rowid (the scope's ids
        # keep what is in it), never one that would end before a later session's messages.
        return [(0, MAX_COUNT)]
    merged: list[tuple[int, int]] = []
    for low, high in sorted(spans):
        if merged and low <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(high, merged[-1][1]))
        else:
            merged.append((low, high))
    return merged


def _scope_search(
    words: Sequence[str],
    limit: int,
    scope: SearchScope,
    tail: Sequence[Any],
    split: Sequence[Split],
    upto: int,
) -> Body[list[KeywordHit]]:
    """A user's or a session's keyword search scored with the scope's own statistics.

    FTS5's ``bm25()`` weighs a word by how many rows of the whole file hold it, and divides by
    the whole file's average length, so another user's messages would move this user's
    scores and order: a user could learn whether a rare word is in someone else's messages by
    comparing scores. Here every statistic is the scope's: its rows and tokens (FTS5's own
    per-row sizes, ``messages_fts_docsize``), each word's rows in the scope, and each row's
    instances of each word (FTS5's ``highlight()`` marks them, the tokenizer's own work); the
    formula is FTS5's (:func:`bm25`). Every row of the scope that holds a word is scored, not
    a cut FTS5 made by the file's statistics, so which rows make the top ``limit`` depends on
    the scope alone too. Common words are left out by the scope's counts
    (:func:`rarer_words`); the tail (messages not indexed yet) counts as part of the scope.

    The cost follows the scope's matching rows, and the scope's size for its totals.
    """
    where, params = scope_sql(scope)
    scope_rows = f"FROM messages m JOIN sessions s ON s.id = m.session_id WHERE m.id <= ?{where}"
    rows, total = yield from _scopetotals(scope_rows, [upto, *params])
    rows += len(split)
    total += sum(len(a) + len(b) for a, b in split)
    everything, _ = yield from totals()
    if rows - len(split) == everything:
        # The scope holds every indexed row (one user in the file): no filter to apply.
        ranges: list[tuple[int, int]] | None = None
    else:
        ranges = yield from _scope_ranges(scope)

    def matching(columns: str, column_args: Sequence[Any], match: str) -> tuple[str, list[Any]]:
        """SQL selecting ``id`` and ``columns`` of the scope's indexed rows that ``match``.
        FTS5 seeks to each range of the scope's rowids (a small user's rows among many
        others' are read alone), and the scope's ids keep what is in it."""
        arm = (
            f"SELECT messages_fts.rowid AS id{columns} FROM messages_fts WHERE messages_fts MATCH ?"
        )
        if ranges is None:
            return arm, [*column_args, match]
        inner = " UNION ALL ".join(f"{arm} AND messages_fts.rowid BETWEEN ? AND ?" for _ in ranges)
        inner_args = [v for low, high in ranges for v in (*column_args, match, low, high)]
        return (
            f"SELECT * FROM ({inner}) WHERE +id IN (SELECT m.id {scope_rows})",
            [*inner_args, upto, *params],
        )

    phrases = {w: index_terms(w) for w in words}
    kept = [w for w in words if phrases[w]]
    counts: dict[str, int] = {}
    if len(kept) > 1:  # each word's rows in the scope: which are common, and what each weighs
        parts = [matching("", [], fts_query([word]) or "") for word in kept]
        found = (
            yield Step(
                "SELECT " + ", ".join(f"(SELECT COUNT(*) FROM ({sql}))" for sql, _ in parts),
                [value for _, args in parts for value in args],
            )
        ).rows[0]
        for word, n in zip(kept, found, strict=True):
            counts[word] = int(n) + tail_rows(split, phrases[word])
        if rows > COMMON_MIN_ROWS:  # below it no word is common
            kept = rarer_words(kept, counts, rows)
    minor, bound = _minor_words(kept, counts, rows, limit)
    tail_docs = [
        sparse([(phrase_count(a, phrases[w]), phrase_count(b, phrases[w])) for w in kept])
        for a, b in split
    ]
    freqs = yield from _scope_instances(matching, kept, minor, phrases, rest=False)
    while True:
        if counts:
            hits = [counts[w] for w in kept]
        else:
            hits = [tail_rows(split, phrases[w]) for w in kept]
            for row, _ in freqs.values():
                for i, _, _ in row:
                    hits[i] += 1
        ids = list(freqs)
        scored = [*ids, *(int(r[0]) for r in tail)]
        docs = [freqs[i][0] for i in ids] + tail_docs
        sizes = [freqs[i][1] for i in ids] + [len(a) + len(b) for a, b in split]
        scores = bm25(docs, sizes, [min(n, rows) for n in hits], rows, total)
        best = sorted(
            ((score, mid) for score, mid in zip(scores, scored, strict=True) if score > 0),
            key=lambda pair: (-pair[0], -pair[1]),
        )[:limit]
        # A row holding only minor words scores below ``bound``: if the last row kept scores
        # at least that, no row left unread could have taken its place. Else they are read
        # too (only they: the others are read already) and everything is ranked again.
        if not minor or (len(best) == limit and best[-1][0] >= bound):
            break
        freqs.update((yield from _scope_instances(matching, kept, minor, phrases, rest=True)))
        minor = []
    wanted = {mid for _, mid in best if mid in freqs}
    by_id = {int(m.id or 0): m for m in scope_messages((r[:-1] for r in tail), scope)}
    if wanted:
        marks = ", ".join("?" * len(wanted))
        found = (
            yield Step(
                f"SELECT {MESSAGE_COLUMNS} FROM messages m WHERE m.id IN ({marks})", list(wanted)
            )
        ).rows
        by_id.update((int(m.id or 0), m) for m in scope_messages(found, scope))
    # A row deleted between the reads is left out (one snapshot: it cannot be, but a message
    # is never made up).
    return [KeywordHit(by_id[mid], score) for score, mid in best if mid in by_id]


def _minor_words(
    words: Sequence[str], counts: dict[str, int], rows: int, limit: int
) -> tuple[list[str], float]:
    """The words so common in the scope that rows holding only them are not read, and the
    score such a row stays below (BM25's term weight is below idf * (k1 + 1)).

    The commonest words go while their bound stays under half the rarest word's idf: a row
    with the rarest word once, at the scope's average length, scores about that idf. The
    caller checks the bound against the scores it got, and reads every row when it fails,
    so the result is exactly what scoring every row gives. None go when the other words are
    in fewer than ``limit`` rows (the check would fail)."""
    if len(words) < 2 or not counts:
        return [], 0.0
    # (a word's rows are at most the scope's: a docsize row deleted outside harombe drops
    # a row from the scope's totals, never its words from the index)
    held = {w: min(counts[w], rows) for w in words}
    idf = {w: max(math.log((rows - held[w] + 0.5) / (held[w] + 0.5)), 1e-6) for w in words}
    ranked = sorted(words, key=lambda w: (idf[w], w))
    target = idf[ranked[-1]] / 2
    minor: list[str] = []
    bound = 0.0
    for word in ranked[:-1]:
        if bound + idf[word] * (K1 + 1) >= target:
            break
        minor.append(word)
        bound += idf[word] * (K1 + 1)
    if sum(counts[w] for w in words if w not in minor) < limit:
        return [], 0.0
    return minor, bound


def _scope_instances(
    matching: Callable[[str, Sequence[Any], str], tuple[str, list[Any]]],
    kept: Sequence[str],
    minor: Sequence[str],
    phrases: dict[str, tuple[str, ...]],
    *,
    rest: bool,
) -> Body[dict[int, tuple[Instances, int]]]:
    """Each indexed row of the scope holding a word of ``kept`` that is not in ``minor`` (with
    ``rest``: each holding only words of ``minor``): its instances of every word of ``kept``
    and its tokens. One pass: highlight() marks the instances of all the words (the
    tokenizer's own work, in SQLite), and the marked text says which word each is.

    highlight() copies the text built so far at each instance, so its cost grows with the
    row's length times its instances: a row longer than ``_HIGHLIGHT_CHARS`` (one message of
    a million characters repeating the word took seconds a search) is read as it is instead,
    and its terms counted here, in one pass over them."""
    major = [w for w in kept if w not in minor]
    if rest:
        match = f"({fts_query(minor)}) NOT ({fts_query(major)})"
    elif not major:
        return {}
    elif minor:  # rows with a major word; highlight() marks the minor words in them too
        match = f"({fts_query(major)}) AND ({fts_query(kept)})"
    else:
        match = fts_query(major) or ""
    short_row = f"{_ROW_CHARS} <= {_HIGHLIGHT_CHARS}"
    sql, args = matching(
        f", CASE WHEN {short_row} THEN highlight(messages_fts, 0, ?, ?) END AS a, "
        f"CASE WHEN {short_row} THEN highlight(messages_fts, 1, ?, ?) END AS b, "
        f"CASE WHEN NOT {short_row} THEN messages_fts.content END AS whole_a, "
        f"CASE WHEN NOT {short_row} THEN messages_fts.context END AS whole_b",
        [_OPEN, _CLOSE, _OPEN, _CLOSE],
        match,
    )
    found = (
        yield Step(
            f"SELECT f.id, f.a, f.b, d.sz, {_SHORT_SIZE}, f.whole_a, f.whole_b FROM ({sql}) f "
            "JOIN messages_fts_docsize d ON d.id = f.id",
            args,
        )
    ).rows
    wanted = [phrases[w] for w in kept]
    count, starting = _instance_counter(wanted), _starting(wanted)
    out: dict[int, tuple[Instances, int]] = {}
    for rowid, content, context, sz, short, whole_a, whole_b in found:
        if content is None and context is None:  # a long row, read as it is
            a = _phrase_counts(starting, tokens(whole_a, indexed=True))
            b = _phrase_counts(starting, tokens(whole_b, indexed=True))
        else:
            a, b = count(content), count(context)
        row = [(i, a.get(i, 0), b.get(i, 0)) for i in sorted(a.keys() | b.keys())]
        out[int(rowid)] = (row, _size(sz, rowid) if short is None else int(short))
    return out


def facts_search_body(
    words: Sequence[str], user_id: str, current: bool, limit: int
) -> Body[list[tuple[int, float]]]:
    """``(fact id, score)`` of ``user_id``'s facts holding any of ``words``, best first (ties to
    the older fact): FTS5's BM25 over ``facts_fts`` with the user's own statistics (the
    user's facts, current ones only with ``current``), for the reason
    :func:`_scope_search` gives: another user's facts change nothing here. A user's facts
    are few, so every one that holds a word is scored."""
    alive = " AND f.valid_to IS NULL" if current else ""
    sizes = (
        yield Step(
            "SELECT d.sz, d.id FROM facts f JOIN facts_fts_docsize d ON d.id = f.id "
            f"WHERE f.user_id = ?{alive}",
            (user_id,),
        )
    ).rows
    rows, total = len(sizes), sum(_size(r[0], r[1], "facts_fts") for r in sizes)
    kept = [w for w in words if index_terms(w)]
    wanted = [index_terms(w) for w in kept]
    freqs: dict[int, Instances] = {}
    lengths: dict[int, int] = {}
    if kept:
        short = f"length(facts_fts.text) <= {_HIGHLIGHT_CHARS}"  # (see _scope_instances)
        found = (
            yield Step(
                f"SELECT facts_fts.rowid, CASE WHEN {short} THEN highlight(facts_fts, 0, ?, ?) "
                f"END, (SELECT sz FROM facts_fts_docsize WHERE id = facts_fts.rowid), CASE WHEN "
                f"NOT {short} THEN facts_fts.text END FROM facts_fts CROSS JOIN facts f "
                f"ON f.id = facts_fts.rowid WHERE facts_fts MATCH ? AND f.user_id = ?{alive}",
                (_OPEN, _CLOSE, fts_query(kept), user_id),
            )
        ).rows
        count, starting = _instance_counter(wanted), _starting(wanted)
        for rowid, text, sz, whole in found:
            held = count(text) if whole is None else _phrase_counts(starting, tokens(whole))
            freqs[int(rowid)] = [(i, n, 0) for i, n in sorted(held.items())]
            lengths[int(rowid)] = _size(sz, rowid, "facts_fts")
    hits = [sum(1 for row in freqs.values() for i, _, _ in row if i == k) for k in range(len(kept))]
    ids = list(freqs)
    scores = bm25([freqs[i] for i in ids], [lengths[i] for i in ids], hits, rows, total)
    best = sorted(
        ((mid, score) for mid, score in zip(ids, scores, strict=True) if score > 0),
        key=lambda pair: (-pair[1], pair[0]),
    )
    return best[:limit]


#: What :func:`_scope_search` has ``highlight()`` put around the instances of the words
#: (private-use characters: chat text does not hold them).
_OPEN, _CLOSE = "\ue000", "\ue001"
_MARKED = re.compile(f"{_OPEN}(.*?){_CLOSE}", re.DOTALL)


@functools.lru_cache(maxsize=16_384)
def _marked_terms(text: str) -> tuple[str, ...]:
    return tokens(text)


#: Rows longer than this (characters of the message and its turn) have their instances
#: counted from their terms rather than marked by highlight() (see :func:`_scope_instances`).
_HIGHLIGHT_CHARS = 20_000
_ROW_CHARS = (
    "(COALESCE(length(messages_fts.content), 0) + COALESCE(length(messages_fts.context), 0))"
)


#: The phrases a search counts, by their first term: ``term -> [(phrase index, phrase)]``.
Starting = dict[str, list[tuple[int, tuple[str, ...]]]]


def _starting(phrases: Sequence[tuple[str, ...]]) -> Starting:
    starting: Starting = {}
    for i, phrase in enumerate(phrases):
        starting.setdefault(phrase[0], []).append((i, phrase))
    return starting


def _phrase_counts(starting: Starting, terms: Sequence[str]) -> dict[int, int]:
    """Each phrase's instances (by phrase index) in a column's ``terms``: what highlight()
    marks, counted in one pass."""
    held: dict[int, int] = {}
    for j, term in enumerate(terms):
        for i, phrase in starting.get(term, ()):
            if len(phrase) == 1 or tuple(terms[j : j + len(phrase)]) == phrase:
                held[i] = held.get(i, 0) + 1
    return held


def _instance_counter(phrases: Sequence[tuple[str, ...]]) -> Callable[[str | None], dict[int, int]]:
    """A function giving each phrase's instances (by phrase index) in a column that
    ``highlight()`` marked. A marked stretch is one instance, or several that overlap
    (merged): every phrase is counted in its terms. Stretches repeat ("the", "The"), so each
    distinct one is read once per search."""
    starting = _starting(phrases)
    seen: dict[str, list[tuple[int, int]]] = {}

    def count(text: str | None) -> dict[int, int]:
        out: dict[int, int] = {}
        for stretch in _MARKED.findall(text or ""):
            found = seen.get(stretch)
            if found is None:
                found = seen[stretch] = list(
                    _phrase_counts(starting, _marked_terms(stretch)).items()
                )
            for i, n in found:
                out[i] = out.get(i, 0) + n
        return out

    return count


def _size(blob: Any, rowid: Any, table: str = "messages_fts") -> int:
    """A row's tokens from its ``docsize`` record (one varint per column).

    A record that is not one (edited outside harombe) is what FTS5's own ``bm25()`` reports
    as "database disk image is malformed": raised as that, so the store names the damaged
    keyword index and its repair (``harombe reindex``) as it does for FTS5's own reads,
    rather than an IndexError from deep in the scoring."""
    try:
        if type(blob) is not bytes:
            raise TypeError(type(blob).__name__)
        total = at = 0
        while at < len(blob):
            value, at = varint(blob, at)
            total += value
    except (IndexError, TypeError) as exc:
        raise sqlite3.DatabaseError(
            f"database disk image is malformed: {table}_docsize row {rowid} does not decode"
        ) from exc
    return total


_BYTE = "COALESCE(unicode(CAST(substr(d.sz, {}, 1) AS TEXT)), 0)"
#: The tokens of a row (alias ``d`` of ``messages_fts_docsize``) whose two columns are each
#: shorter than 128 tokens, in SQL; NULL for a longer row (decode ``d.sz``: :func:`_size`).
_SHORT_SIZE = f"CASE WHEN length(d.sz) = 2 THEN {_BYTE.format(1)} + {_BYTE.format(2)} END"


def _scopetotals(scope_rows: str, params: Sequence[Any]) -> Body[tuple[int, int]]:
    """(rows, tokens) of the indexed messages of a scope (``scope_rows``: its FROM and WHERE).

    A row's sizes are one varint per column, one byte each below 128 tokens: SQL sums those
    (a byte below 0x80 is its own character), and only the longer rows' records are read
    here, so a user with 100,000 messages costs one pass in SQLite, not 100,000 rows."""
    joined = scope_rows.replace("WHERE", "JOIN messages_fts_docsize d ON d.id = m.id WHERE", 1)
    rows, short = (
        yield Step(f"SELECT COUNT(*), COALESCE(SUM({_SHORT_SIZE}), 0) {joined}", params)
    ).rows[0]
    longer = (yield Step(f"SELECT d.sz, d.id {joined} AND length(d.sz) <> 2", params)).rows
    return int(rows), int(short) + sum(_size(r[0], r[1]) for r in longer)
