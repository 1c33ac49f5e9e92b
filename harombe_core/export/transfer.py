"""Between the store and records: exporting sessions, and importing records all or nothing
(validated completely first, then written in one transaction, so a failure or a killed
process part-way leaves the store as it was).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from harombe_core.errors import (
    ImportFormatError,
    InvalidInputError,
    SessionNotFoundError,
)
from harombe_core.export.files import iter_records, resolve_output_path, safe_filename, write_text
from harombe_core.export.io import check_format, dumps
from harombe_core.export.records import EXTENSIONS, ImportResult, SessionRecord, place_facts
from harombe_core.flows import Call, Flow, Run, Work, adrive, drive
from harombe_core.models import Message
from harombe_core.store import ops

if TYPE_CHECKING:
    from harombe_core.manager import MemoryManager

__all__ = [
    "OnConflict",
    "aexport_store",
    "aimport_file",
    "export_store",
    "export_to_directory",
    "import_file",
    "import_records",
    "read_session",
]


def read_session(manager: MemoryManager, session_id: str) -> SessionRecord:
    """A stored session with all its messages and per-message summaries.

    Raises SessionNotFoundError if there is no such session.
    """
    return drive(_read_session(manager, session_id))


def _read_session(manager: MemoryManager, session_id: str) -> Flow[SessionRecord]:
    """:func:`read_session` written once: on the async path, the store's async reads."""
    from harombe_core.facts.ops import extracted_until

    session = yield Call(manager.get_session, session_id, native=manager.aget_session)
    if session is None:
        raise SessionNotFoundError.of(session_id, manager.store.location)
    messages = yield Call(manager.get_messages, session_id, native=manager.aget_messages)
    ids = [m.id for m in messages if m.id is not None]
    summaries = (yield Run(manager.store, ops.get_message_summaries(ids))) if ids else {}
    record = SessionRecord.from_session(session, messages, summaries)
    # What user memory keeps of the session (None when it keeps nothing).
    state = yield Call(manager.get_session_state, session_id, native=manager.aget_session_state)
    until = (yield Run(manager.store, extracted_until(session_id))) or None
    if state.outcome is not None or state.important or until is not None:
        record.state = {
            "outcome": state.outcome,
            "important": state.important,
            "facts_until_id": until,
        }
    return record


def _sessions(manager: MemoryManager, user_id: str | None) -> Flow[list[tuple[str, str | None]]]:
    """``(session id, owner)`` of every session (of ``user_id``), oldest activity first, so an
    export reads (and re-imports) in the order it happened."""
    found = yield Call(manager.list_sessions, None, user_id, native=manager.alist_sessions)
    return [(s.id, s.user_id) for s in reversed(found)]


def export_store(
    manager: MemoryManager,
    fmt: str = "json",
    *,
    session_id: str | None = None,
    user_id: str | None = None,
) -> str:
    """The text of an export: one session (``session_id``) or every session (of ``user_id``).

    Given both, the session must be that user's (SessionOwnershipError otherwise): an
    application exporting for its user names them, and never hands out another user's session.

    A single session in JSON is one session document; a store export is a bundle. A store's
    (or a user's) export carries their facts too, in every format (see :func:`dumps`).
    """
    return drive(_export_store(manager, fmt, session_id, user_id))


async def aexport_store(
    manager: MemoryManager,
    fmt: str = "json",
    *,
    session_id: str | None = None,
    user_id: str | None = None,
) -> str:
    """Async twin of :func:`export_store` (the store's async reads, one thread hop each)."""
    return await adrive(_export_store(manager, fmt, session_id, user_id))


def _export_store(
    manager: MemoryManager, fmt: str, session_id: str | None, user_id: str | None
) -> Flow[str]:
    check_format(fmt)
    if session_id is not None:
        if user_id is not None:  # the caller's user: their own session only
            yield Call(manager.check_owner, session_id, user_id, native=manager.acheck_owner)
        record = yield from _read_session(manager, session_id)
        text: str = yield Work(dumps, [record], fmt, bundle=False)
        return text
    sessions = yield from _sessions(manager, user_id)
    records = []
    for sid, _ in sessions:
        records.append((yield from _read_session(manager, sid)))
    facts = yield from _facts_of(manager, sessions, user_id)
    text = yield Work(dumps, records, fmt, bundle=True, facts=facts)
    return text


def _facts_of(
    manager: MemoryManager, sessions: Sequence[tuple[str, str | None]], user_id: str | None
) -> Flow[list[dict[str, Any]]]:
    """The user-memory facts (history included) of the exported sessions' owners, or of
    ``user_id``: what a store's export carries besides its sessions."""
    users = [user_id] if user_id is not None else sorted({u for _, u in sessions if u})
    found: list[dict[str, Any]] = []
    for uid in users:
        facts = yield Call(manager.get_facts, uid, include_history=True, native=manager.aget_facts)
        found.extend(fact.to_dict() for fact in facts)
    return found


def export_to_directory(
    manager: MemoryManager,
    directory: str | os.PathLike[str],
    fmt: str = "json",
    *,
    user_id: str | None = None,
    session_ids: Sequence[str] | None = None,
) -> list[Path]:
    """One file per session in ``directory``, named from the session id by :func:`safe_filename`.

    With ``session_ids`` and ``user_id`` every session must be that user's
    (SessionOwnershipError before anything is written).

    Exporting a whole store or user (no ``session_ids``) also carries their facts: each in
    the file of the newest session it came from (its user's newest otherwise), so importing
    that file brings it back; facts with no session to ride with go to ``facts`` + extension.
    """
    check_format(fmt)
    if session_ids is not None:
        sessions: list[tuple[str, str | None]] = [(sid, None) for sid in session_ids]
        if user_id is not None:  # the caller's user: their own sessions only, checked first
            for sid in session_ids:
                manager.check_owner(sid, user_id)
        facts: list[dict[str, Any]] = []
    else:
        sessions = drive(_sessions(manager, user_id))
        facts = drive(_facts_of(manager, sessions, user_id))
    placed, left = place_facts(sessions, facts)
    written = []
    for (sid, _), carried in zip(sessions, placed, strict=True):
        path = resolve_output_path(safe_filename(sid, EXTENSIONS[fmt]), directory)
        text = dumps([read_session(manager, sid)], fmt, bundle=False, facts=carried)
        written.append(write_text(path, text))
    if left:
        path = resolve_output_path(safe_filename("facts", EXTENSIONS[fmt]), directory)
        written.append(write_text(path, dumps([], fmt, bundle=True, facts=left)))
    return written


OnConflict = Literal["error", "new_id", "skip"]


def import_records(
    manager: MemoryManager,
    records: Iterable[SessionRecord],
    *,
    on_conflict: OnConflict = "error",
    user_id: str | None = None,
) -> ImportResult:
    """Write validated records into the store in one transaction: all of them, or none.

    A store's JSON export also carries its users' facts (user memory, history included): they
    are imported with the sessions, their sources pointing at the imported messages.
    A session id already in the store is an error (``on_conflict="error"``), is imported under
    a new id (``"new_id"``) or is left alone (``"skip"``). Records without an id get a new one.
    ``user_id`` overrides the owner recorded in the file. Message ids are assigned by the store;
    ``parent_id`` links and summaries are rewired to the new ids. If anything fails, or the
    process is killed part-way, the store is left as it was, so the same import can simply be
    run again. With semantic memory, the imported messages are embedded in the background like
    any saved message (see :func:`import_file`).
    """
    held = records if isinstance(records, Sequence) else list(records)
    return _import(manager, lambda extras: iter(held), on_conflict, user_id)


def _import(
    manager: MemoryManager,
    produce: Callable[[dict[str, Any]], Iterator[SessionRecord]],
    on_conflict: str,
    user_id: str | None,
) -> ImportResult:
    """Check every record (``produce(extras)`` yields them afresh each time, then fills
    ``extras`` with the file's facts), then write them all in one transaction."""
    if on_conflict not in ("error", "new_id", "skip"):
        raise InvalidInputError(
            f"on_conflict must be 'error', 'new_id' or 'skip', got {on_conflict!r}."
        )
    # First pass, outside any transaction: a bad file never holds the write lock, and ids
    # already stored are reported all at once.
    seen: set[str] = set()
    extras: dict[str, Any] = {}
    for record in produce(extras):
        _check_unique(record, seen)
    facts = _fact_records(extras.get("facts") or [], user_id)
    existing = [sid for sid in seen if manager.session_exists(sid)]
    if existing and on_conflict == "error":
        raise _conflict(existing[0], len(existing))

    def write() -> dict[str, Any]:
        # Runs inside the transaction (again, if a PostgreSQL transaction is retried): the
        # ids are checked once more, as another writer may have added one since.
        result = ImportResult()
        written: set[str] = set()
        moved: dict[str, tuple[str, dict[int, int]]] = {}  # old session id -> new id, ids
        for record in produce({}):
            _check_unique(record, written)
            sid = record.session_id
            if sid is not None and manager.session_exists(sid):
                if on_conflict == "error":
                    raise _conflict(sid, 1)
                if on_conflict == "skip":
                    result.skipped.append(sid)
                    continue
                sid = None
            sid = sid or uuid.uuid4().hex
            owner = user_id if user_id is not None else record.user_id
            mapping = _write_record(manager, sid, record, owner)
            if record.session_id is not None:
                moved[record.session_id] = (sid, mapping)
            result.session_ids.append(sid)
            result.messages += len(record.messages)
        result.facts = _write_facts(manager, facts, moved)
        return asdict(result)

    return ImportResult(**manager.atomic(write))


def _check_unique(record: SessionRecord, seen: set[str]) -> None:
    if record.session_id is None:
        return
    if record.session_id in seen:
        raise ImportFormatError(f"session {record.session_id!r} appears twice in the file.")
    seen.add(record.session_id)


def _conflict(session_id: str, count: int) -> InvalidInputError:
    return InvalidInputError(
        f"session {session_id!r} is already in the store ({count} of the file's sessions are); "
        "nothing was imported. Import under new ids (on_conflict='new_id', CLI --on-conflict "
        "new-id) or skip them (on_conflict='skip')."
    )


def _fact_records(data: list[Any], user_id: str | None) -> list[Any]:
    """The file's fact records, checked before anything is written (``user_id`` overrides
    their owner, as it does the sessions')."""
    from harombe_core.facts.models import Fact

    facts = []
    for number, item in enumerate(data):
        try:
            fact = Fact.from_dict(item)
        except InvalidInputError as exc:
            raise ImportFormatError(f"facts[{number}]: {exc}") from None
        facts.append(fact if user_id is None else replace(fact, user_id=user_id))
    return facts


def _write_facts(
    manager: MemoryManager, facts: list[Any], moved: dict[str, tuple[str, dict[int, int]]]
) -> int:
    """Store the file's facts in the import's transaction, their sources pointing at the
    sessions and messages as imported (a source in no imported session is dropped)."""
    if not facts:
        return 0
    from harombe_core.facts.models import FactSource
    from harombe_core.facts.ops import import_facts

    placed = []
    for fact in facts:
        sources = tuple(
            FactSource(moved[s.session_id][0], moved[s.session_id][1].get(s.message_id or -1))
            for s in fact.sources
            if s.session_id in moved
        )
        placed.append(replace(fact, sources=sources))
    manager.store.run(import_facts(placed, [None] * len(placed), None))
    return len(placed)


def _write_record(
    manager: MemoryManager, sid: str, record: SessionRecord, user_id: str | None
) -> dict[int, int]:
    """Store one session and its messages; the map of the file's message ids to the new ones."""
    store = manager.store
    prompt_tokens = (
        0
        if record.system_prompt is None
        else manager.token_counter.count_message(
            Message(role="system", content=record.system_prompt)
        )
    )
    store.run(
        ops.create_session(
            sid,
            user_id=user_id,
            system_prompt=record.system_prompt,
            system_prompt_tokens=prompt_tokens,
            metadata=record.metadata,
            created_at=record.created_at,
        )
    )
    unlinked = [
        m.with_ids(id=None, session_id=None, parent_id=None, token_count=None)
        for m in record.messages
    ]
    new_ids = manager.save_messages(sid, unlinked)
    mapping = {
        m.id: new for m, new in zip(record.messages, new_ids, strict=True) if m.id is not None
    }
    for message, new_id in zip(record.messages, new_ids, strict=True):
        if message.parent_id is not None:
            store.run(ops.set_parent(new_id, mapping[message.parent_id]))
        if message.id is not None and message.id in record.message_summaries:
            store.run(ops.set_message_summary(new_id, record.message_summaries[message.id]))
    if record.summary is not None or record.summary_data is not None:
        store.run(
            ops.update_session(
                sid,
                summary=record.summary,
                summary_data=record.summary_data,
                summary_until_id=mapping.get(record.summary_until_id)
                if record.summary_until_id is not None
                else None,
            )
        )
    if record.state is not None:
        _write_state(manager, sid, record.state, mapping)
    return mapping


def _write_state(
    manager: MemoryManager, sid: str, state: dict[str, Any], mapping: dict[int, int]
) -> None:
    """The session's outcome, importance and extraction progress, its message id mapped to
    the imported ones (the newest imported message at or before it)."""
    from harombe_core.facts.ops import mark_extracted, set_session_state

    store = manager.store
    store.run(set_session_state(sid, outcome=state["outcome"], important=state["important"]))
    until = state["facts_until_id"]
    done = [new for old, new in mapping.items() if until is not None and old <= until]
    if done:
        store.run(mark_extracted(sid, max(done)))


def import_file(
    manager: MemoryManager,
    path: str | os.PathLike[str],
    *,
    fmt: str | None = None,
    on_conflict: OnConflict = "error",
    user_id: str | None = None,
) -> ImportResult:
    """Import a JSON or JSONL export into the store (format from the content unless ``fmt``).

    All or nothing: the whole file is validated first, a bad file raises
    :class:`ImportFormatError` naming the line or node at fault and writes nothing, and the
    sessions are then written in one transaction, so a failure or a killed process leaves the
    store as it was and the import can be run again. The file is streamed (read twice, a
    session at a time), so memory follows its largest session. Imported sessions keep their
    dates: their last activity is their newest message, so they sort among live sessions by
    when they happened (and ``prune_old_sessions`` or ``auto_prune_days`` treats old history
    as old).

    When ``manager`` has semantic memory, the imported messages are embedded in the background
    as soon as the import commits, as saved messages are: it returns without waiting (a large
    import takes minutes to embed on a CPU), search finds the messages by their keywords until
    each is embedded, and ``manager.flush()`` waits for all of them (with a progress bar on a
    terminal; ``flush(progress=callback)`` reports to a function).
    """
    return drive(_importing_file(manager, path, fmt, on_conflict, user_id))


async def aimport_file(
    manager: MemoryManager,
    path: str | os.PathLike[str],
    *,
    fmt: str | None = None,
    on_conflict: OnConflict = "error",
    user_id: str | None = None,
) -> ImportResult:
    """Async twin of :func:`import_file`: the file is read, checked and written in one
    transaction in a worker thread (the transaction's writes are synchronous calls)."""
    return await adrive(_importing_file(manager, path, fmt, on_conflict, user_id))


def _importing_file(
    manager: MemoryManager,
    path: str | os.PathLike[str],
    fmt: str | None,
    on_conflict: str,
    user_id: str | None,
) -> Flow[ImportResult]:
    def produce(extras: dict[str, Any]) -> Iterator[SessionRecord]:
        return iter_records(path, fmt, extras)

    result: ImportResult = yield Work(_import, manager, produce, on_conflict, user_id)
    return result
