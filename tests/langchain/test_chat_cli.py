"""``harombe chat`` driven through a pseudo-terminal, through every slash command."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pexpect
import pytest

from harombe_core.manager import MemoryManager
from tests.langchain.hidden_integrations import child_env, hide

PROMPT = "you> "


def _start(
    db: str, *args: str, user: str | None = "ann", env: dict[str, str] | None = None
) -> pexpect.spawn:
    harombe = Path(sys.executable).with_name("harombe")
    env = {**(env or os.environ), "PYTHONWARNINGS": "ignore", "COLUMNS": "200", "TERM": "dumb"}
    who = ["--user", user] if user is not None else []
    return pexpect.spawn(
        str(harombe),
        ["chat", "--db", db, "--model", "fake:transcript", "--embedding", "none", *who, *args],
        env=env,
        encoding="utf-8",
        timeout=60,
        dimensions=(50, 250),
    )


def _spawn(db: str, *args: str, user: str | None = "ann") -> pexpect.spawn:
    child = _start(db, *args, user=user)
    child.expect(PROMPT)
    return child


def _quit(child: pexpect.spawn) -> None:
    child.sendline("/quit")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0


def _sessions(db: str) -> list[str]:
    with MemoryManager(db, embedding=None) as manager:
        return sorted(s.id for s in manager.list_sessions(limit=None))


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

    child.sendline("/forget")
    child.expect_exact("delete session trip and its 6 messages? This cannot be undone. [y/N] ")
    forgot = _say(child, "y")
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


@pytest.mark.timeout(120)
def test_recall_of_the_users_earlier_sessions_is_on_by_default(db_path: str) -> None:
    child = _spawn(db_path, "--session", "pets")
    _say(child, "My dog is called Biscuit and he loves the beach")
    _quit(child)

    child = _spawn(db_path)  # a new session of the same user
    reply = _say(child, "what is my dog called?")
    assert "system:Relevant context from past conversations:" in reply
    assert "My dog is called Biscuit" in reply
    _quit(child)

    child = _spawn(db_path, "--recall-tokens", "0")
    assert "Biscuit" not in _say(child, "what is my dog called?")
    _quit(child)
    child = _spawn(db_path, user="bo")  # another user's chat recalls nothing of ann's
    assert "Biscuit" not in _say(child, "what is my dog called?")
    _quit(child)


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("args", "complaint"),
    [
        (["--max-tokens", "-5"], "--max-tokens"),
        (["--recall-tokens", "-1"], "--recall-tokens"),
        (["--model", "no-such-provider:model"], "cannot build the chat model"),
        (["--session", "x" * 600], "512"),
    ],
    ids=["max-tokens", "recall-tokens", "model", "session-id"],
)
def test_bad_options_fail_at_start_up(db_path: str, args: list[str], complaint: str) -> None:
    child = _start(db_path, *args)
    index = child.expect_exact([PROMPT, pexpect.EOF])
    output = child.before
    child.close()
    assert index == 1, "the chat started with a bad option"
    assert complaint in " ".join(output.split())
    assert child.exitstatus not in (0, None)
    assert not os.path.exists(db_path) or _sessions(db_path) == []


@pytest.mark.timeout(120)
def test_a_start_stores_no_empty_session(db_path: str) -> None:
    for args in ([], ["--session", "idle"], ["--system", "Be brief."]):
        child = _spawn(db_path, *args)
        assert "new" in _say(child, "/sessions")
        _say(child, "/clear")
        _say(child, "/save")
        _quit(child)
    assert not os.path.exists(db_path) or _sessions(db_path) == []
    child = _spawn(db_path, "--session", "used", "--system", "Be brief.")
    _say(child, "hello")
    _quit(child)
    assert _sessions(db_path) == ["used"]
    with MemoryManager(db_path, embedding=None) as manager:
        session = manager.get_session("used")
        assert session is not None
        assert (session.system_prompt, session.user_id) == ("Be brief.", "ann")


@pytest.mark.timeout(120)
def test_forget_asks_first(db_path: str) -> None:
    child = _spawn(db_path, "--session", "keepme")
    _say(child, "something worth keeping")
    child.sendline("/forget")
    child.expect_exact("[y/N] ")
    assert "kept session keepme" in _say(child, "n")
    child.sendline("/forget")
    child.expect_exact("[y/N] ")
    assert "kept session keepme" in _say(child, "")  # Enter means no
    _quit(child)
    assert _sessions(db_path) == ["keepme"]


@pytest.mark.timeout(120)
def test_a_named_session_that_does_not_exist_is_announced(db_path: str) -> None:
    child = _start(db_path, "--session", "doesnotexist")
    child.expect(PROMPT)
    greeting = " ".join(child.before.split())
    assert "no session 'doesnotexist' yet: starting a new session with that name" in greeting
    _say(child, "first words")
    _quit(child)
    child = _start(db_path, "--session", "doesnotexist")
    child.expect(PROMPT)
    assert "session doesnotexist (2 messages)" in " ".join(child.before.split())
    _quit(child)


@pytest.mark.timeout(120)
def test_a_model_without_its_integration_names_the_package(
    db_path: str, tmp_path: Path
) -> None:
    env = child_env(tmp_path / "no-integrations")
    child = _start(db_path, "--model", "openai:gpt-4o-mini", env=env)
    assert child.expect_exact([PROMPT, pexpect.EOF]) == 1
    output = " ".join(child.before.split())
    child.close()
    assert child.exitstatus == 1
    assert "needs the 'langchain-openai' package" in output
    assert "pip install langchain-openai" in output
    assert "harombe-memory[langchain]" not in output
    assert not os.path.exists(db_path)


@pytest.mark.parametrize(
    ("model", "package"),
    [
        ("openai:gpt-4o-mini", "langchain-openai"),
        ("anthropic:claude-sonnet-4-5", "langchain-anthropic"),
        ("claude-3-5-haiku-latest", "langchain-anthropic"),  # provider inferred by LangChain
        ("groq:llama-3.3-70b-versatile", "langchain-groq"),
        ("google_genai:gemini-2.5-flash", "langchain-google-genai"),
        ("azure_ai:gpt-4o", "langchain-azure-ai"),
        ("bedrock_converse:anthropic.claude-3", "langchain-aws"),
    ],
)
def test_every_provider_names_its_integration_package(model: str, package: str) -> None:
    from harombe_core.errors import MissingExtraError
    from langchain_harombe.chat_cli import load_chat_model

    with hide(), pytest.raises(MissingExtraError) as caught:
        load_chat_model(model)
    assert caught.value.module == package
    assert str(caught.value).endswith(f"pip install {package}")


def test_quit_ends_the_prompt_line_when_input_is_piped(db_path: str) -> None:
    """Piped input is not echoed, so the chat ends the ``you> `` line itself on /quit."""
    import subprocess

    harombe = Path(sys.executable).with_name("harombe")
    done = subprocess.run(
        [str(harombe), "chat", "--db", db_path, "--model", "fake", "--embedding", "none"],
        input="hello\n/quit\n",
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.endswith(PROMPT + "\n"), repr(done.stdout[-40:])


def test_a_database_in_a_missing_folder_is_refused_not_created(tmp_path: Path) -> None:
    missing = tmp_path / "nonexistent" / "x.db"
    child = _start(str(missing))
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 1
    assert "does not exist" in child.before
    assert not missing.parent.exists()


def test_a_reply_with_extras_that_are_not_json_is_stored_readable(db_path: str) -> None:
    """A provider's reply may carry values JSON cannot hold (a -inf log-probability); the
    turn is stored with its text instead of failing after the model answered."""
    from langchain_core.messages import AIMessage

    from langchain_harombe import RecordingChatModel
    from langchain_harombe.chat import ChatSession

    reply = AIMessage("hello", response_metadata={"logprobs": [float("-inf")]})
    with MemoryManager(db_path, embedding=None) as mm:
        chat = ChatSession(mm, RecordingChatModel(responses=[reply]), session_id="s", write=str)
        assert chat.send("hi") == "hello"
        assert [(m.role, m.content) for m in mm.get_messages("s")] == [
            ("user", "hi"),
            ("assistant", "hello"),
        ]
