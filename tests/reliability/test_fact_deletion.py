"""A forgotten fact is gone: once forgetting returns nothing finds it, and after close no byte
of its text, its subject or its vector is left in any file of the store.

As ``test_deletion.py`` does for messages: unique tokens, forget by every route (the manager,
its async twin, all of a user's facts, the whole user, the LangGraph store's delete, the
command line, a process killed right after forgetting), close, then read every file under the
store's folder as bytes. A control fact that was kept must still be found, so a scan that
reads nothing cannot pass. The facts are added by the user (no message holds their words), and
the store embeds them (FakeEmbedder), so the vector's own bytes are looked for too. On
PostgreSQL, as far as the message tests go there: no search, listing or row finds it.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from harombe_core.manager import MemoryManager
from harombe_core.testing import FakeEmbedder
from tests.reliability.test_deletion import files_holding, token


def _open(db: Path | str) -> MemoryManager:
    return MemoryManager(str(db), embedding=FakeEmbedder(), token_counter="approximate")


def _vector_bytes(text: str) -> bytes:
    """What the store keeps as the fact's vector (float32 of the fake model)."""
    return np.asarray(FakeEmbedder().embed([text]), dtype=np.float32)[0].tobytes()


def files_holding_bytes(folder: Path, needle: bytes) -> list[str]:
    return [
        str(p.relative_to(folder)) for p in sorted(folder.rglob("*")) if needle in p.read_bytes()
    ]


def _cli_forget(mm: MemoryManager, user: str, fact_id: int) -> None:
    from typer.testing import CliRunner

    from harombe_core.cli import app

    db = mm.store.location
    mm.close()  # the command opens the file itself
    args = ["facts", "--forget", str(fact_id), "--user", user, "--db", db]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output


def _store_delete(mm: MemoryManager, user: str, fact_id: int) -> None:
    from langchain_harombe import HarombeStore

    HarombeStore(mm).delete(("harombe", "facts", user), f"secret {user[-6:]}")


FORGETS: dict[str, Callable[[MemoryManager, str, int], Any]] = {
    "forget_fact": lambda mm, user, fid: mm.forget_fact(user, fid),
    "aforget_fact": lambda mm, user, fid: asyncio.run(mm.aforget_fact(user, fid)),
    "forget_user_facts": lambda mm, user, fid: mm.forget_user_facts(user),
    "forget_user": lambda mm, user, fid: mm.forget_user(user),
    "store_delete": _store_delete,
    "cli": _cli_forget,
}


@pytest.mark.parametrize("how", sorted(FORGETS))
def test_a_forgotten_fact_leaves_no_byte(tmp_path: Path, how: str) -> None:
    secret, control = token(), token()
    user = "u-" + token()
    folder = tmp_path / "store"
    folder.mkdir()
    text = f"Keeps the spare key under the {secret} statue"
    mm = _open(folder / "m.db")
    try:
        fact = mm.add_fact(user, text, subject=f"secret {user[-6:]}")
        mm.add_fact("keeper", f"Parks in bay {control}")
        assert [h.fact.id for h in mm.search_facts(user, secret)] == [fact.id]
        FORGETS[how](mm, user, fact.id)
        if how != "cli":
            assert mm.search_facts(user, secret) == []
            assert mm.get_facts(user, include_history=True) == []
    finally:
        mm.close()
    with _open(folder / "m.db") as mm:
        assert mm.get_facts(user, include_history=True) == []
        assert [f.text for f in mm.get_facts("keeper")] == [f"Parks in bay {control}"]
    assert files_holding(folder, secret) == []
    assert files_holding(folder, user[-6:]) == []  # the subject too
    assert files_holding_bytes(folder, _vector_bytes(text)) == []
    assert "m.db" in files_holding(folder, control)
    assert "m.db" in files_holding_bytes(folder, _vector_bytes(f"Parks in bay {control}"))


_KILLED = textwrap.dedent(
    """
    import os, signal, sys
    from harombe_core.manager import MemoryManager

    db, secret, control = sys.argv[1:4]
    mm = MemoryManager(db, embedding=None)
    fact = mm.add_fact("ann", f"The alarm code is {secret}")
    mm.add_fact("bob", f"The gate code is {control}")
    assert mm.forget_fact("ann", fact.id)
    print("forgotten", flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
    """
)


def test_a_process_killed_after_forgetting_leaves_the_erasure_owed(tmp_path: Path) -> None:
    """The forgetting transaction records the erasure it owes, so the next open and close
    finishes it even if the process that forgot never closed."""
    secret, control = token(), token()
    folder = tmp_path / "store"
    folder.mkdir()
    db = folder / "m.db"
    done = subprocess.run(
        [sys.executable, "-c", _KILLED, str(db), secret, control],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert "forgotten" in done.stdout, done.stderr
    assert done.returncode == -signal.SIGKILL
    with MemoryManager(str(db), embedding=None) as mm:
        assert mm.search_facts("ann", secret) == []
    assert files_holding(folder, secret) == []
    assert "m.db" in files_holding(folder, control)


def test_facts_that_only_deleted_messages_said_leave_no_byte(tmp_path: Path) -> None:
    """An extracted fact goes with the last message it came from, by every message deletion."""
    from harombe_core import Message

    secret, control = token(), token()
    folder = tmp_path / "store"
    folder.mkdir()
    with MemoryManager(str(folder / "m.db"), embedding=None) as mm:
        ids = mm.save_messages(
            "s1",
            [
                Message(role="user", content=f"I live in {secret.capitalize()}ville."),
                Message(role="user", content=f"I work as a {control}."),
            ],
            user_id="ann",
        )
        mm.end_session("s1")
        assert len(mm.get_facts("ann")) == 2
        mm.replace_messages("s1", [ids[0]])
        assert [f.text for f in mm.get_facts("ann", include_history=True)] == [
            f"Works as a {control}"
        ]
    assert files_holding(folder, secret) == []
    assert "m.db" in files_holding(folder, control)


@pytest.mark.parametrize("how", ["one message", "clear_session", "delete_session"])
def test_messages_deleted_while_their_facts_are_extracted_leave_no_fact(
    tmp_path: Path, how: str
) -> None:
    """Another caller deletes while a batch is with the extractor: the facts of the deleted
    messages are not stored, the others are, and the extraction returns. It used to fail as a
    whole with ``InvalidInputError: FOREIGN KEY constraint failed`` (logged as a failed
    background round, with a back-off, when the background worker was extracting)."""
    import threading

    from harombe_core import Message
    from harombe_core.facts.extract import OfflineExtractor

    inside, go = threading.Event(), threading.Event()

    class Held(OfflineExtractor):
        def extract(self, messages: Any) -> Any:
            inside.set()
            go.wait(60)
            return super().extract(messages)

    secret, control = token(), token()
    folder = tmp_path / "store"
    folder.mkdir()
    with MemoryManager(str(folder / "m.db"), embedding=None, fact_extractor=Held()) as mm:
        ids = mm.save_messages(
            "s1",
            [
                Message(role="user", content=f"I live in {secret.capitalize()}ville."),
                Message(role="user", content=f"I work as a {control}."),
            ],
            user_id="ann",
        )
        outcome: list[Any] = []

        def extract() -> None:
            try:
                outcome.append(mm.extract_facts("s1"))
            except Exception as exc:  # reported below
                outcome.append(exc)

        extractor = threading.Thread(target=extract)
        extractor.start()
        assert inside.wait(60)  # the batch of both messages is with the extractor
        if how == "one message":
            mm.replace_messages("s1", [ids[0]])
        elif how == "clear_session":
            mm.clear_session("s1")
        else:
            mm.delete_session("s1")
        go.set()
        extractor.join(60)
        assert outcome == [2]
        kept = [f"Works as a {control}"] if how == "one message" else []
        assert [f.text for f in mm.get_facts("ann", include_history=True)] == kept
    assert files_holding(folder, secret) == []


def test_forgetting_on_postgres_leaves_nothing_to_find(pg_url: str) -> None:
    secret, control = token(), token()
    with MemoryManager(pg_url, embedding=FakeEmbedder()) as mm:
        fact = mm.add_fact("ann", f"The alarm code is {secret}", subject="alarm")
        mm.add_fact("ann", f"The gate code is {control}")
        mm.add_fact("bob", f"The alarm code is {secret}")  # the same words, another user
        assert mm.forget_fact("ann", fact.id)
        assert [h.fact.text for h in mm.search_facts("ann", secret) if secret in h.fact.text] == []
        assert [f.text for f in mm.get_facts("ann", include_history=True)] == [
            f"The gate code is {control}"
        ]
        import psycopg

        with psycopg.connect(pg_url) as conn:  # no row, keyword vector or embedding left of it
            rows = conn.execute(
                "SELECT count(*) FROM facts WHERE user_id = %s AND (text LIKE %s OR fts @@ "
                "plainto_tsquery('english', %s))",
                ("ann", f"%{secret}%", secret),
            ).fetchall()
        assert rows[0][0] == 0
        assert [h.fact.user_id for h in mm.search_facts("bob", secret)] == ["bob"]
        assert mm.forget_user_facts("ann") == 1
        assert mm.get_facts("ann", include_history=True) == []
        assert len(mm.get_facts("bob")) == 1
