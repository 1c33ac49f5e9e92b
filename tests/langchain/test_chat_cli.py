"""``harombe chat`` driven through a pseudo-terminal, through every slash command."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pexpect
import pytest

from harombe_core.manager import MemoryManager

PROMPT = "you> "


def _spawn(db: str, *args: str) -> pexpect.spawn:
    harombe = Path(sys.executable).with_name("harombe")
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "COLUMNS": "200", "TERM": "dumb"}
    child = pexpect.spawn(
        str(harombe),
        ["chat", "--db", db, "--model", "fake:transcript", "--embedding", "none",
         "--user", "ann", *args],
        env=env,
        encoding="utf-8",
        timeout=60,
        dimensions=(50, 250),
    )
    child.expect(PROMPT)
    return child


def _say(child: pexpect.spawn, line: str) -> str:
    child.sendline(line)
    child.expect(PROMPT)
    # Drop the echoed input line; keep what the program printed.
    before: str = child.before
    return before.split("\n", 1)[1] if "\n" in before else ""


@pytest.mark.timeout(120)
def test_chat_through_every_slash_command(db_path: str) -> None:
    child = _spawn(db_path, "--session", "trip", "--system", "Be brief.")
    assert "saw system:Be brief. | human:I go to Lisbon in May" in _say(
        child, "I go to Lisbon in May"
    )
    second = _say(child, "Where do I go?")
    assert "saw system:Be brief. | human:I go to Lisbon in May | ai:saw" in second
    assert second.rstrip().endswith("human:Where do I go?")

    history = _say(child, "/history")
    assert "user: I go to Lisbon in May" in history
    assert "user: Where do I go?" in history
    assert _say(child, "/save").strip().startswith("saved session trip (4 messages)")

    cleared = _say(child, "/clear")
    assert "context cleared (4 messages kept in the database)" in cleared
    after_clear = _say(child, "fresh start")
    assert "saw system:Be brief. | human:fresh start" in after_clear
    assert "Lisbon" not in after_clear, "cleared turns are no longer sent to the model"
    assert "user: I go to Lisbon in May" in _say(child, "/history"), "but still stored"

    found = _say(child, "/search Lisbon")
    assert "[trip] user: I go to Lisbon in May" in found

    forgot = _say(child, "/forget")
    assert "forgot session trip; new session" in forgot
    new_session = forgot.strip().rsplit(" ", 1)[-1]
    _say(child, "hello again")
    sessions = _say(child, "/sessions")
    assert f"* {new_session}" in sessions
    assert "trip" not in sessions
    assert "no session trip" in _say(child, "/load trip")
    assert "unknown command /nope" in _say(child, "/nope")
    assert "/search <query>" in _say(child, "/help")
    child.sendline("/quit")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0

    with MemoryManager(db_path, embedding=None) as manager:
        assert not manager.session_exists("trip")
        assert manager.get_messages(new_session)[0].content == "hello again"


@pytest.mark.timeout(120)
def test_chat_restart_and_load(db_path: str) -> None:
    child = _spawn(db_path, "--session", "a")
    _say(child, "remember the code 4711")
    child.sendline("/quit")
    child.expect(pexpect.EOF)
    child.close()

    child = _spawn(db_path, "--session", "b")
    assert "* b" in _say(child, "/sessions")
    assert "loaded session a (2 messages)" in _say(child, "/load a")
    reply = _say(child, "what was the code?")
    assert "human:remember the code 4711 | ai:saw human:remember the code 4711" in reply
    child.sendline("/quit")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
