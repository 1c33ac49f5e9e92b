"""Copy a whole memory store to another backend (SQLite to PostgreSQL and back).

Why it works the way it does:

* Only the store protocol is used to read and write, so any pair of backends works, and what
  arrives is exactly what the destination would have stored itself (keyword index included).
* Messages are appended per session in order, a batch per transaction. The destination's messages
  of a session are therefore always a prefix of the source's, so a re-run after an interruption
  pairs that prefix up by position, checks it is the same content, and continues after it: no
  duplicates, nothing skipped. Message ids are re-assigned by the destination; ``parent_id``
  threads and ``summary_until_id`` are translated through that pairing.
* Long-term key-value items (the LangGraph store of the LangChain adapter) and their vectors are
  copied after the sessions, by :mod:`harombe_core.migrate.items`, resumable the same way; so
  are the LangGraph checkpoints of its threads, row for row (:mod:`harombe_core.migrate.tables`),
  and user memory: facts with their sources translated by position, and session state
  (:mod:`harombe_core.migrate.facts`); and the server's API keys (their hashes), row for row,
  so a server moved to the destination accepts the keys its clients hold.
* At the end both stores are compared session by session: counts and a SHA-256 over every field
  (threads expressed as positions, not ids), and every store item field by field. A mismatch is
  an error, never a warning.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from harombe_core.checkpoint_safety import AllowList, TypePolicy
from harombe_core.errors import InvalidInputError, MigrationError, StoreNotFoundError
from harombe_core.migrate.checksum import session_checksum
from harombe_core.migrate.facts import copy_facts, verify_facts
from harombe_core.migrate.items import copy_store_items, verify_store_items
from harombe_core.migrate.sessions import all_sessions, copy_session, finish_session
from harombe_core.migrate.tables import (
    CHECKPOINT_MARKS,
    CHECKPOINT_TABLES,
    KEY_TABLES,
    check_tables,
    copy_tables,
    verify_tables,
)
from harombe_core.models import Session
from harombe_core.store import ops
from harombe_core.store.base import MessageStore

__all__ = ["MigrationError", "MigrationReport", "migrate", "session_checksum"]

_DONE_KEY = "migrate.done:"


@dataclass
class MigrationReport:
    """What a migration did and what it verified."""

    sessions: int = 0
    messages: int = 0
    copied_messages: int = 0
    skipped_sessions: int = 0
    store_items: int = 0
    copied_store_items: int = 0
    checkpoint_rows: int = 0
    copied_checkpoint_rows: int = 0
    facts: int = 0
    copied_facts: int = 0
    api_keys: int = 0
    copied_api_keys: int = 0
    checksums: dict[str, str] = field(default_factory=dict)
    verified: bool = False


def migrate(
    source: str | os.PathLike[str] | MessageStore,
    destination: str | os.PathLike[str] | MessageStore,
    *,
    batch_size: int = 500,
    progress: bool = True,
    on_batch: Callable[[int], None] | None = None,
    allowed_types: AllowList = None,
) -> MigrationReport:
    """Copy every session, message, thread, summary, store item, checkpoint, fact and API key
    (its hash: ``harombe serve``'s clients keep their keys) to ``destination``.

    Either may be a SQLite path, a ``postgresql://`` URL or an open store. Re-running after an
    interruption continues where it stopped. Raises StoreNotFoundError if the source does not
    exist (nothing is created at either end), NotAHarombeDatabaseError if either end is a file
    that is not a harombe database or is damaged (it is left untouched), InvalidInputError if
    both are the same store, UnsafeCheckpointError (before anything is copied) if a LangGraph
    checkpoint row would revive a type that is neither LangGraph's own nor in
    ``allowed_types`` (``(module, name)`` pairs or classes, as ``HarombeSaver``'s
    ``allowed_msgpack_modules``), and MigrationError if the verification at the end finds any
    difference.
    """
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise InvalidInputError(f"batch_size must be a positive int, got {batch_size!r}.")
    policy = TypePolicy(allowed_types)
    from tqdm.auto import tqdm

    from harombe_core.manager import open_store

    _check_ends(source, destination)
    src = open_store(source)
    owns_src = src is not source
    try:
        # Refuse a crafted checkpoint row before the destination is even created.
        check_tables(src, CHECKPOINT_TABLES, policy)
        dst = open_store(destination)
    except BaseException:
        if owns_src:
            src.close()
        raise
    owns_dst = dst is not destination
    if src is dst or (src.location == dst.location and src.location != ":memory:"):
        for store, owned in ((src, owns_src), (dst, owns_dst and dst is not src)):
            if owned:
                store.close()
        raise _same_store(src.location)
    report = MigrationReport()
    forward: list[Session] = []
    try:
        sessions = all_sessions(src)
        total = src.run(ops.count_messages())
        report.sessions, report.messages = len(sessions), total
        with tqdm(total=total, unit="msg", desc="migrating", disable=not progress) as bar:
            for session in sessions:
                marker = _DONE_KEY + session.id
                if dst.run(ops.get_meta(marker)) == "1":
                    report.skipped_sessions += 1
                    bar.update(session.message_count)
                    continue

                def step(n: int) -> None:
                    bar.update(n)
                    if on_batch is not None:
                        on_batch(n)

                already = dst.run(ops.count_messages(session.id))
                bar.update(already)
                report.copied_messages += copy_session(src, dst, session, batch_size, step)
                if not finish_session(src, dst, session):
                    forward.append(session)
                dst.run(ops.set_meta(marker, "1"))
        # Threads across sessions may point forward: redo those once everything is copied.
        for session in forward:
            finish_session(src, dst, session)
        report.store_items, report.copied_store_items = copy_store_items(
            src, dst, batch_size=batch_size
        )
        report.checkpoint_rows, report.copied_checkpoint_rows = copy_tables(
            src, dst, CHECKPOINT_TABLES, batch_size=batch_size
        )
        copy_tables(src, dst, CHECKPOINT_MARKS, batch_size=batch_size)
        report.facts, report.copied_facts = copy_facts(src, dst)
        report.api_keys, report.copied_api_keys = copy_tables(
            src, dst, KEY_TABLES, batch_size=batch_size
        )
        _verify(src, dst, sessions, report)
    finally:
        if owns_src:
            src.close()
        if owns_dst:
            dst.close()
    return report


def _check_ends(
    source: str | os.PathLike[str] | MessageStore,
    destination: str | os.PathLike[str] | MessageStore,
) -> None:
    """Refuse a source that does not exist, and a destination that is the source, before
    either is opened: opening a path or an empty database creates a store there."""
    src = os.fspath(source) if isinstance(source, (str, os.PathLike)) else None
    dst = os.fspath(destination) if isinstance(destination, (str, os.PathLike)) else None
    if src is None:
        return
    if src.startswith(_POSTGRES):
        from harombe_core.store.postgres import redact_url, store_exists

        if not store_exists(src):
            raise StoreNotFoundError(
                f"{redact_url(src)} holds no harombe store; check the source URL. Nothing was "
                "created at either end."
            )
    elif src not in (":memory:", ""):
        path = Path(src).expanduser()
        if not path.exists():
            raise StoreNotFoundError(
                f"no database at {path}; check the source path. Nothing was created at either "
                "end."
            )
        if path.is_file() and path.stat().st_size == 0:
            raise StoreNotFoundError(
                f"{path} is an empty file, not a harombe database, so there is nothing to "
                "migrate. Nothing was created at either end."
            )
    if dst is not None and _same_place(src, dst):
        raise _same_store(src)


_POSTGRES = ("postgresql://", "postgres://")


def _same_place(a: str, b: str) -> bool:
    """Whether two locations are one store: the same real file, or the same database."""
    if a.startswith(_POSTGRES) and b.startswith(_POSTGRES):
        from harombe_core.store.postgres import same_database

        return same_database(a, b)
    if a.startswith(_POSTGRES) or b.startswith(_POSTGRES) or ":memory:" in (a, b):
        return False
    first, second = Path(a).expanduser(), Path(b).expanduser()
    if first.resolve() == second.resolve():
        return True
    try:
        return os.path.samefile(first, second)  # hard links too
    except OSError:  # the destination does not exist yet
        return False


def _same_store(location: str) -> InvalidInputError:
    return InvalidInputError(
        f"the source and the destination are the same store ({location}); migrate to another "
        "path or URL."
    )


def _verify(
    src: MessageStore, dst: MessageStore, sessions: list[Session], report: MigrationReport
) -> None:
    problems = []
    for session in sessions:
        copy = dst.run(ops.get_session(session.id))
        if copy is None:
            problems.append(f"{session.id}: missing")
            continue
        want = session_checksum(src, session)
        got = session_checksum(dst, copy)
        if want != got:
            problems.append(f"{session.id}: source {want[0]} messages {want[1][:12]}, "
                            f"destination {got[0]} messages {got[1][:12]}")
        report.checksums[session.id] = want[1]
    have, copied = src.run(ops.count_messages()), dst.run(ops.count_messages())
    if have > copied:
        problems.append(f"source has {have} messages, destination {copied}")
    problems += verify_store_items(src, dst)
    problems += verify_tables(src, dst, CHECKPOINT_TABLES)
    problems += verify_tables(src, dst, KEY_TABLES)
    problems += verify_facts(src, dst)
    if problems:
        raise MigrationError(
            "verification failed; the destination differs from the source:\n  "
            + "\n  ".join(problems[:20])
        )
    report.verified = True
