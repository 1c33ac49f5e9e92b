"""One flow, two drivers: the sync and async twins of an operation run the same logic.

Covers harombe_core.flows (requests, store operations, drive/adrive) and harombe_core.llm's
prompt flows, including the summariser and the LLM node selector, whose sync and async paths
must agree.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest

from harombe_core.errors import InvalidInputError, SummarizationError
from harombe_core.flows import Call, Flow, Parallel, Run, Subflow, Work, adrive, drive
from harombe_core.llm import PromptFlow, arun_prompts, run_prompts
from harombe_core.models import Message
from harombe_core.store import ops
from harombe_core.summarize import LLMSummarizer

MESSAGE = Message(role="user", content="We chose Postgres for billing.")


def _double(x: int) -> int:
    return 2 * x


def _fails(x: int) -> int:
    raise KeyError(x)


def _sums(a: int, b: int) -> Flow[int]:
    """Add two doubled numbers, recovering from a failed request."""
    first, second = yield Parallel(Call(_double, a), Work(_double, b))
    try:
        yield Call(_fails, first)
    except KeyError:
        second += 1
    return int(first + second)


def test_drive_and_adrive_give_the_same_result() -> None:
    assert drive(_sums(1, 2)) == 7
    assert asyncio.run(adrive(_sums(1, 2))) == 7


def test_a_request_error_is_thrown_into_the_flow_and_propagates_if_unhandled() -> None:
    def flow() -> Flow[int]:
        value: int = yield Call(_fails, 3)
        return value

    with pytest.raises(KeyError):
        drive(flow())
    with pytest.raises(KeyError):
        asyncio.run(adrive(flow()))


async def test_async_uses_the_native_form_on_the_loop_and_threads_otherwise() -> None:
    loop_thread = threading.get_ident()
    seen: list[int] = []

    def blocking() -> str:
        seen.append(threading.get_ident())
        return "sync"

    async def native() -> str:
        seen.append(threading.get_ident())
        return "native"

    def flow() -> Flow[list[str]]:
        with_native = yield Call(blocking, native=native)
        without = yield Call(blocking)
        return [with_native, without]

    assert await adrive(flow()) == ["native", "sync"]
    assert seen[0] == loop_thread  # no thread hop where a native async form exists
    assert seen[1] != loop_thread  # blocking work never runs on the event loop
    assert drive(flow()) == ["sync", "sync"]


async def test_parallel_runs_concurrently_when_async() -> None:
    both_started = asyncio.Event()
    started = 0

    async def wait_for_the_other() -> int:
        nonlocal started
        started += 1
        if started == 2:
            both_started.set()
        await asyncio.wait_for(both_started.wait(), timeout=5)
        return started

    def flow() -> Flow[list[int]]:
        results: list[int] = yield Parallel(
            Call(lambda: 0, native=wait_for_the_other), Call(lambda: 0, native=wait_for_the_other)
        )
        return results

    assert await adrive(flow()) == [2, 2]


def test_parallel_requests_overlap_on_the_sync_path_too() -> None:
    # Each request waits for the other at a barrier: they finish only if they run together
    # (the timeout only stops a broken build from hanging; it is not a speed threshold).
    barrier = threading.Barrier(2, timeout=60)

    def meet(value: int) -> int:
        barrier.wait()
        return value

    def flow() -> Flow[list[int]]:
        results: list[int] = yield Parallel(Work(meet, 1), Work(meet, 2))
        return results

    assert drive(flow()) == [1, 2]


async def test_a_subflow_overlaps_with_other_requests_on_both_paths() -> None:
    """A flow of several requests runs beside a request (as a search's vector side beside its
    keyword side): each of the subflow's requests takes its own way, the subflow none."""
    barrier = threading.Barrier(2, timeout=60)

    def meet(value: int) -> int:
        barrier.wait()
        return value

    def side() -> Flow[int]:
        first: int = yield Work(meet, 1)  # meets the other request
        second: int = yield Call(lambda: 10)
        return first + second

    def flow() -> Flow[list[int]]:
        results: list[int] = yield Parallel(Subflow(side()), Work(meet, 2))
        return results

    assert drive(flow()) == [11, 2]
    barrier.reset()
    assert await adrive(flow()) == [11, 2]


def test_a_failing_parallel_request_fails_the_flow_after_the_others_finish() -> None:
    finished: list[int] = []

    def later(value: int) -> int:
        finished.append(value)
        return value

    def flow() -> Flow[list[int]]:
        results: list[int] = yield Parallel(Work(_fails, 1), Work(later, 2))
        return results

    with pytest.raises(KeyError):
        drive(flow())
    assert finished == [2]


class _Recording:
    """A store's runner that records which path ran each operation."""

    def __init__(self) -> None:
        self.paths: list[str] = []

    def run(self, op: str) -> str:
        self.paths.append("run")
        return op.upper()

    async def arun(self, op: str) -> str:
        self.paths.append("arun")
        return op.upper()


async def test_a_store_operation_runs_on_the_stores_own_runner_on_each_path() -> None:
    store = _Recording()

    def flow() -> Flow[str]:
        first: str = yield Run(store, "a")  # type: ignore[arg-type]
        second: str = yield Run(store, "b")  # type: ignore[arg-type]
        return first + second

    assert drive(flow()) == "AB"
    assert await adrive(flow()) == "AB"
    assert store.paths == ["run", "run", "arun", "arun"]


def test_a_real_store_operation_runs_in_a_flow(tmp_path: Path) -> None:
    from harombe_core import SQLiteStore

    store = SQLiteStore(str(tmp_path / "m.db"))
    try:
        store.run(ops.create_session("s1", user_id="u1"))

        def flow() -> Flow[str | None]:
            session = yield Run(store, ops.get_session("s1"))
            return None if session is None else session.user_id

        assert drive(flow()) == "u1"
        assert asyncio.run(adrive(flow())) == "u1"
    finally:
        store.close()


# ---- prompt flows -------------------------------------------------------------------------


def _echo_flow() -> PromptFlow[list[str]]:
    answers: list[str] = []
    for prompt in ("a", "b"):
        answer = yield prompt
        answers.append(repr(answer) if isinstance(answer, BaseException) else answer)
    return answers


def test_prompt_flows_receive_answers_and_errors_alike_on_both_paths() -> None:
    def model(prompt: str) -> str:
        if prompt == "b":
            raise RuntimeError("down")
        return prompt.upper()

    expected = ["A", "RuntimeError('down')"]
    assert run_prompts(_echo_flow(), model) == expected
    assert asyncio.run(arun_prompts(_echo_flow(), model)) == expected


class _AsyncOnly:
    async def acall(self, prompt: str) -> str:
        return '{"title": "t", "summary": "s"}'


def _refuses(prompt: str) -> str:
    raise InvalidInputError("the model refuses this input")


async def _arefuses(prompt: str) -> str:
    raise InvalidInputError("the model refuses this input")


def _broken(prompt: str) -> str:
    raise ConnectionError("model server down")


def _summarize_on(path: str, summarizer: LLMSummarizer) -> Any:
    if path == "sync":
        return summarizer.summarize_session([MESSAGE])
    return asyncio.run(summarizer.asummarize_session([MESSAGE]))


@pytest.mark.parametrize(
    ("path", "llm"),
    [("sync", _refuses), ("async", _refuses), ("async", _arefuses)],
    ids=["sync", "async-with-sync-model", "async-with-async-model"],
)
def test_summarizer_reraises_invalid_input_on_both_paths(path: str, llm: Any) -> None:
    summarizer = LLMSummarizer(llm)
    with pytest.raises(InvalidInputError, match="refuses"):
        _summarize_on(path, summarizer)


@pytest.mark.parametrize("path", ["sync", "async"])
def test_summarizer_reports_a_failing_model_typed_on_both_paths(path: str) -> None:
    summarizer = LLMSummarizer(_broken)
    with pytest.raises(SummarizationError, match="model server down") as caught:
        _summarize_on(path, summarizer)
    assert isinstance(caught.value.__cause__, ConnectionError)


def test_async_only_model_in_sync_code_is_an_invalid_input() -> None:
    summarizer = LLMSummarizer(_AsyncOnly())
    with pytest.raises(InvalidInputError, match="async-only"):
        summarizer.summarize_message(MESSAGE)
    assert asyncio.run(summarizer.asummarize_message(MESSAGE)).title == "t"
