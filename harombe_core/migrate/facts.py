"""Copy user memory (facts, their sources and vectors, session state) between stores.

Runs after the sessions are copied. Message ids differ at the destination, so a fact's
sources are translated by position: the n-th message of a session there is the n-th here (the
session copy guarantees it). A user's facts are few, so all of them are written in one
transaction, and only into a destination that holds none yet: a re-run after an interruption
copies them whole or finds them there. Verification compares every fact field by field
(sources as session and position).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from harombe_core.facts import ops
from harombe_core.facts.models import Fact, FactSource
from harombe_core.store import ops as store_ops
from harombe_core.store.base import MessageStore
from harombe_core.store.runner import Body, Dialect, Op

__all__ = ["copy_facts", "verify_facts"]


def _rows() -> Op[list[tuple[Fact, bytes | None, str | None]]]:
    """Every fact with its vector and model, in id order (history before what superseded)."""

    def body(d: Dialect) -> Body[list[tuple[Fact, bytes | None, str | None]]]:
        facts = yield from ops.list_facts(None, current=None).body(d)
        rows = (yield d.step("SELECT id, vector, vector_model FROM facts")).rows
        vectors = {int(r[0]): (None if r[1] is None else bytes(r[1]), r[2]) for r in rows}
        facts.sort(key=lambda f: f.id)
        return [(f, *vectors[f.id]) for f in facts]

    return Op(body)


def _states() -> Op[list[tuple[str, str | None, bool, int | None]]]:
    def body(d: Dialect) -> Body[list[tuple[str, str | None, bool, int | None]]]:
        sql = "SELECT session_id, outcome, important, facts_until_id FROM session_state"
        return [(r[0], r[1], bool(r[2]), r[3]) for r in (yield d.step(sql)).rows]

    return Op(body)


def _positions(store: MessageStore, session_id: str) -> list[int]:
    return [int(m.id or 0) for m in store.run(store_ops.get_messages(session_id))]


def _translate(src: MessageStore, dst: MessageStore, facts: list[Fact]) -> list[Fact]:
    """The facts with their sources' message ids as the destination numbers them."""
    maps: dict[str, dict[int, int]] = {}
    out = []
    for fact in facts:
        sources = []
        for source in fact.sources:
            if source.session_id not in maps:
                here, there = _positions(src, source.session_id), _positions(dst, source.session_id)
                maps[source.session_id] = dict(zip(here, there, strict=False))
            mid = source.message_id
            sources.append(
                FactSource(
                    source.session_id, None if mid is None else maps[source.session_id].get(mid)
                )
            )
        out.append(_with(fact, tuple(sources)))
    return out


def _with(fact: Fact, sources: tuple[FactSource, ...]) -> Fact:
    return replace(fact, sources=sources)


def copy_facts(src: MessageStore, dst: MessageStore) -> tuple[int, int]:
    """(facts at the source, facts copied now): all of them, into a destination without any."""
    rows = src.run(_rows())
    if not rows or dst.run(ops.list_facts(None, current=None, limit=1)):
        return len(rows), 0
    facts = _translate(src, dst, [r[0] for r in rows])
    models = {r[2] for r in rows if r[2] is not None}
    model = models.pop() if len(models) == 1 else None
    blobs = [r[1] if model is not None and r[2] == model else None for r in rows]
    dst.run(ops.import_facts(facts, blobs, model))
    for session_id, outcome, important, until in src.run(_states()):
        if dst.run(ops.set_session_state(session_id, outcome=outcome, important=important)):
            mapped = dict(
                zip(_positions(src, session_id), _positions(dst, session_id), strict=False)
            )
            if until is not None and until in mapped:
                dst.run(ops.mark_extracted(session_id, mapped[until]))
    return len(rows), len(facts)


def _comparable(store: MessageStore) -> list[tuple[Any, ...]]:
    out = []
    for fact, _blob, _model in store.run(_rows()):
        sources = []
        for s in fact.sources:
            ids = _positions(store, s.session_id)
            sources.append(
                (s.session_id, None if s.message_id is None else ids.index(s.message_id))
            )
        data = fact.to_dict()
        data.pop("id")
        data.pop("supersedes")
        data["sources"] = sorted(sources, key=repr)
        out.append(tuple(sorted((k, repr(v)) for k, v in data.items())))
    return sorted(out)


def verify_facts(src: MessageStore, dst: MessageStore) -> list[str]:
    """Differences between the two stores' facts (empty when they agree)."""
    want, got = _comparable(src), _comparable(dst)
    if want == got:
        return []
    return [f"facts: source has {len(want)}, destination {len(got)} (or their fields differ)"]
