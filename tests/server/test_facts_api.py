"""The user's facts over the server: the JSON API, both clients and the MCP tools, each acting
for its key's user only (another user's fact answers exactly as a missing one)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from harombe_core.server import AsyncHarombeClient, HarombeClient, HarombeServerError
from tests.server.conftest import Served
from tests.server.test_mcp import http_session, result_json


def _tag() -> str:
    return uuid.uuid4().hex[:8]


def test_a_fact_kept_searched_corrected_and_forgotten_through_the_client(served: Served) -> None:
    city = f"city{_tag()}"
    with HarombeClient(served.url, api_key=served.ann) as ann:
        kept = ann.add_fact(f"lives in Lisbon {city}", subject=f"home {city}")
        assert (kept["user_id"], kept["kind"], kept["valid_to"]) == ("ann", "fact", None)
        assert kept["id"] in [f["id"] for f in ann.facts()]
        assert ann.add_fact(f"lives in Lisbon {city}", subject=f"home {city}")["id"] == kept["id"]

        hits = ann.facts(f"Lisbon {city}")
        assert hits[0]["fact"]["id"] == kept["id"]
        assert hits[0]["keyword_score"] is not None
        assert ann.facts(f"quantum chromodynamics {_tag()}", min_similarity=0.4) == []

        moved = ann.correct_fact(kept["id"], f"lives in Porto {city}")
        assert moved["supersedes"] == kept["id"]
        history = ann.get_fact_history(moved["id"])
        assert [f["text"] for f in history] == [f"lives in Lisbon {city}", f"lives in Porto {city}"]
        assert ann.get_fact(kept["id"])["valid_to"] is not None
        assert kept["id"] not in [f["id"] for f in ann.facts()]
        assert kept["id"] in [f["id"] for f in ann.facts(include_history=True)]

        task = ann.add_fact(f"renew the passport {city}", kind="task")
        assert task["id"] in [f["id"] for f in ann.facts(kind="task")]
        assert ann.complete_task(task["id"])["status"] == "done"

        assert ann.forget_fact(moved["id"]) is True
        assert moved["id"] not in [h["fact"]["id"] for h in ann.facts(f"Porto {city}")]
        with pytest.raises(HarombeServerError) as gone:
            ann.get_fact(moved["id"])
        assert (gone.value.status, gone.value.error) == (404, "FactNotFoundError")

        with pytest.raises(HarombeServerError) as bad_kind:
            ann.add_fact("x", kind="rumour")
        assert bad_kind.value.status == 422


def test_another_users_fact_answers_as_a_missing_one(served: Served) -> None:
    with HarombeClient(served.url, api_key=served.ann) as ann:
        secret = ann.add_fact(f"PIN is {_tag()}")
    missing = 10**9
    with served.http(served.bob) as bob:
        for method, path, body in (
            ("GET", "/api/facts/{}", None),
            ("GET", "/api/facts/{}/history", None),
            ("PATCH", "/api/facts/{}", {"text": "changed"}),
            ("POST", "/api/facts/{}/complete", None),
            ("DELETE", "/api/facts/{}", None),
        ):
            theirs = bob.request(method, path.format(secret["id"]), json=body)
            nobody = bob.request(method, path.format(missing), json=body)
            assert theirs.status_code == nobody.status_code == 404, (method, path)
            assert theirs.json()["error"] == nobody.json()["error"] == "FactNotFoundError"
            assert theirs.text.replace(str(secret["id"]), "N") == nobody.text.replace(
                str(missing), "N"
            )
        assert bob.get("/api/facts", params={"user_id": "ann"}).status_code == 403
        assert secret["text"] not in bob.get("/api/facts").text
    with HarombeClient(served.url, api_key=served.ann) as ann:
        assert ann.get_fact(secret["id"]) == secret  # untouched


def test_an_admin_names_the_user_whose_facts_it_reaches(served: Served) -> None:
    with HarombeClient(served.url, api_key=served.admin) as admin:
        with pytest.raises(HarombeServerError) as unnamed:
            admin.facts()
        assert unnamed.value.status == 403
        made = admin.add_fact(f"prefers tea {_tag()}", kind="preference", user_id="bob")
        assert made["user_id"] == "bob"
    with HarombeClient(served.url, api_key=served.bob) as bob:
        assert made["id"] in [f["id"] for f in bob.facts(kind="preference")]


async def test_the_async_client_twins(served: Served) -> None:
    async with AsyncHarombeClient(served.url, api_key=served.ann) as ann:
        kept = await ann.aadd_fact(f"plays the cello {_tag()}", subject="instrument")
        assert (await ann.aget_fact(kept["id"]))["text"] == kept["text"]
        assert [f["id"] for f in await ann.aget_fact_history(kept["id"])] == [kept["id"]]
        fixed = await ann.acorrect_fact(kept["id"], "plays the viola")
        task = await ann.aadd_fact(f"book a tuner {_tag()}", kind="task")
        assert (await ann.acomplete_task(task["id"]))["status"] == "done"
        assert fixed["id"] in [f["id"] for f in await ann.afacts()]
        assert await ann.aforget_fact(fixed["id"]) is True


async def test_mcp_fact_tools_keep_find_complete_and_forget(served: Served) -> None:
    tag = _tag()
    async with http_session(served, served.ann) as session:
        kept = result_json(
            await session.call_tool(
                "remember_fact", {"text": f"allergic to peanuts {tag}", "subject": "allergy"}
            )
        )
        assert set(kept) == {"fact_id", "kind", "text", "subject", "since"}
        task = result_json(
            await session.call_tool(
                "remember_fact", {"text": f"call the vet {tag}", "kind": "task"}
            )
        )
        assert task["status"] == "open"
        found = result_json(await session.call_tool("search_facts", {"query": f"peanuts {tag}"}))
        assert found[0]["fact_id"] == kept["fact_id"]
        done = result_json(await session.call_tool("complete_task", {"fact_id": task["fact_id"]}))
        assert done["status"] == "done"
        forgotten = result_json(
            await session.call_tool("forget_fact", {"fact_id": kept["fact_id"]})
        )
        assert forgotten["deleted"] is True
        again = result_json(await session.call_tool("search_facts", {"query": f"peanuts {tag}"}))
        assert kept["fact_id"] not in [hit["fact_id"] for hit in again]
        refused = await session.call_tool("forget_fact", {"fact_id": kept["fact_id"]})
        assert refused.isError
        assert "FactNotFoundError" in refused.content[0].text
        bad: Any = await session.call_tool("remember_fact", {"text": "x", "kind": "rumour"})
        assert bad.isError
    async with http_session(served, served.bob) as session:
        theirs = await session.call_tool("complete_task", {"fact_id": task["fact_id"]})
        assert theirs.isError
        assert "FactNotFoundError" in theirs.content[0].text
