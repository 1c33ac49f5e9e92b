"""HarombeClient and AsyncHarombeClient against a real ``harombe serve``: the same calls, the
same answers, and the server's errors as HarombeServerError with the library's message."""

from __future__ import annotations

import uuid

import pytest

from harombe_core.errors import HarombeError
from harombe_core.server import AsyncHarombeClient, HarombeClient, HarombeServerError
from tests.server.conftest import Served


def test_sync_client_round_trip(served: Served) -> None:
    sid = f"c-{uuid.uuid4().hex[:8]}"
    with HarombeClient(served.url, api_key=served.ann) as client:
        assert client.me() == {"user_id": "ann", "admin": False}
        client.create_session(session_id=sid, system_prompt="Be kind.", metadata={"a": 1})
        ids = client.save_messages(
            sid,
            [
                {"role": "user", "content": "The boiler service is due in March."},
                {"role": "assistant", "content": "I will remind you."},
            ],
        )
        assert len(ids) == 2
        assert client.save_message(sid, "user", "Thanks", name="Ann") > ids[-1]
        messages = client.get_messages(sid)
        assert [m["content"] for m in messages][-1] == "Thanks"
        assert messages[-1]["name"] == "Ann"
        assert client.get_window(sid, max_tokens=4000)["messages"][0]["role"] == "system"
        assert client.get_context(sid, strategy="hybrid")["messages"]
        hits = client.search("boiler service")
        assert hits[0]["message"]["id"] == ids[0]
        assert client.update_session(sid, metadata={"b": 2})["metadata"] == {"b": 2}
        assert client.summarize(sid)["summary"]
        assert "boiler" in client.export(sid, "text")
        assert sid in [s["id"] for s in client.list_sessions()]
        assert client.profile()["user_id"] == "ann"
        assert client.delete_session(sid) is True


def test_sync_client_errors(served: Served) -> None:
    with HarombeClient(served.url, api_key=served.ann) as client:
        with pytest.raises(HarombeServerError) as caught:
            client.save_message("x-ann", "robot", "hi")
        assert caught.value.status == 422
        assert caught.value.error == "InvalidMessageError"
        assert isinstance(caught.value, HarombeError)
        client.save_message("x-ann", "user", "mine")
    with HarombeClient(served.url, api_key=served.bob) as client:
        with pytest.raises(HarombeServerError) as caught:
            client.get_messages("x-ann")
        assert caught.value.status == 404  # another user's session reads as missing
        assert caught.value.error == "SessionNotFoundError"
    with HarombeClient(served.url) as client, pytest.raises(HarombeServerError) as caught:
        client.list_sessions()
    assert caught.value.status == 401


async def test_async_client_round_trip(served: Served) -> None:
    sid = f"a-{uuid.uuid4().hex[:8]}"
    async with AsyncHarombeClient(served.url, api_key=served.bob) as client:
        assert (await client.ame())["user_id"] == "bob"
        await client.acreate_session(session_id=sid)
        first = await client.asave_message(sid, "user", "Bob plays the cello on Sundays.")
        await client.asave_messages(sid, [{"role": "assistant", "content": "Lovely."}])
        assert (await client.aget_messages(sid))[0]["id"] == first
        assert (await client.aget_window(sid))["tokens"] > 0
        assert (await client.aget_context(sid, strategy="simple"))["messages"]
        assert (await client.asearch("cello"))[0]["message"]["id"] == first
        assert (await client.aupdate_session(sid, metadata={"x": 1}))["metadata"] == {"x": 1}
        assert (await client.asummarize(sid))["summary"]
        assert "cello" in await client.aexport(sid, "text")
        assert sid in [s["id"] for s in await client.alist_sessions()]
        assert (await client.aprofile())["user_id"] == "bob"
        assert (await client.aget_session(sid))["id"] == sid
        assert await client.adelete_session(sid) is True
        with pytest.raises(HarombeServerError):
            await client.aget_session(sid)


def test_the_server_page_python_example_runs_as_pasted(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/server.md's HarombeClient block, run as a script (it once had a top-level
    ``async with`` and an unexplained ``KEY``): the key from ``HAROMBE_KEY`` as the page says,
    and the URL of this test's server in place of the page's default port."""
    import re
    from pathlib import Path

    page = (Path(__file__).resolve().parents[2] / "docs" / "server.md").read_text("utf-8")
    (block,) = [
        code
        for code in re.findall(r"^```python\n(.*?)^```", page, re.S | re.M)
        if "HarombeClient(URL" in code
    ]
    monkeypatch.setenv("HAROMBE_KEY", served.ann)
    namespace: dict[str, object] = {"__name__": "__main__"}
    exec(
        compile(block.replace("http://127.0.0.1:8765", served.url), "server.md", "exec"), namespace
    )
    assert namespace["hits"]
    with HarombeClient(served.url, api_key=served.ann) as client:
        contents = [m["content"] for m in client.get_messages("trip")]
    assert contents[-2:] == ["I moved to Lisbon in May.", "And to Porto in June."]
