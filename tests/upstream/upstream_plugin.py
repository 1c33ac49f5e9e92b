"""A pytest plugin that runs the frameworks' own test files on harombe's adapters, unchanged.

The frameworks' tests name the class they test (``SqliteStore``, ``InMemoryStore``,
``SimpleChatStore``, ...). For every test module that names one of :data:`BINDINGS`, each test
runs twice: ``control`` with the framework's own class, ``harombe`` with harombe's adapter bound
to that name in the module (the module's globals, for that run only). Nothing in the test files
is edited; ``run.py`` beside this file points pytest at a checkout of the framework with this
plugin loaded.

What harombe's run does not do is declared here, with its reason:

* :data:`CANNOT_APPLY`: the test is about the framework class's own internals (its private SQL,
  its sync-in-async refusal); harombe's run is skipped.
* :data:`DIFFERENCES`: harombe behaves otherwise on purpose (safer, and documented in the
  adapter's docs page); harombe's run is an expected failure (``xfail(strict=True)``), so the day
  it starts passing the suite says so.
* ``flaky``: tests the framework marks ``@pytest.mark.flaky`` (a wall-clock margin of half a
  second) run on harombe on a moved clock; their control runs are skipped, since no retry plugin
  runs here and they would make the run depend on machine speed.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

IMPLS = ["control", "harombe"]


def _langgraph() -> dict[str, tuple[Any, Any]]:
    import langgraph_savers
    import langgraph_stores as lg
    from langgraph.store.memory import InMemoryStore

    return {
        "SqliteStore": (lg.LangGraphSqliteStore, lg.HarombeSqliteStore),
        "AsyncSqliteStore": (lg.LangGraphAsyncSqliteStore, lg.HarombeAsyncSqliteStore),
        "InMemoryStore": (InMemoryStore, lg.HarombeMemoryStore),
        **langgraph_savers.bindings(),
    }


def _llamaindex() -> dict[str, tuple[Any, Any]]:
    import llamaindex_classes as li

    return li.bindings()


def _langchain() -> dict[str, tuple[Any, Any]]:
    import langchain_classes as lc

    return lc.bindings()


_SOURCES: dict[str, Callable[[], dict[str, tuple[Any, Any]]]] = {
    "langgraph": _langgraph,
    "llama_index": _llamaindex,
    "langchain_core": _langchain,
}
_loaded: dict[str, tuple[Any, Any]] = {}


def bindings() -> dict[str, tuple[Any, Any]]:
    """Name in a test module -> (the framework's class, harombe's), for the installed frameworks."""
    if not _loaded:
        for package, load in _SOURCES.items():
            try:
                importlib.import_module(package)
            except ImportError:
                continue
            _loaded.update(load())
    return _loaded


SQLITE_INTERNALS = "tests SqliteStore's own SQL (its helpers, migrations or sqlite_master tables)"
CANNOT_APPLY: dict[tuple[str, str], str] = {
    ("checkpoint-sqlite/tests/test_store.py", "test_nonnull_migrations"): SQLITE_INTERNALS,
    ("checkpoint-sqlite/tests/test_store.py", "test_escape_glob_literal"): SQLITE_INTERNALS,
    ("checkpoint-sqlite/tests/test_store.py", "test_namespace_match_pattern"): SQLITE_INTERNALS,
    (
        "checkpoint-sqlite/tests/test_store.py",
        "test_list_namespaces_prefix_uses_indexable_condition",
    ): SQLITE_INTERNALS,
    ("checkpoint-sqlite/tests/test_store.py", "test_vector_store_initialization"): (
        SQLITE_INTERNALS + "; its index_config checks run in tests/langchain/test_store_contract.py"
    ),
    ("checkpoint-sqlite/tests/test_async_store.py", "test_no_running_loop"): (
        "AsyncSqliteStore is async-only and refuses sync calls on its event loop; HarombeStore "
        "has both flavours (as InMemoryStore), so its sync methods work there"
    ),
    ("checkpoint-postgres/tests/test_sync.py", "test_nonnull_migrations"): (
        "reads PostgresSaver.MIGRATIONS, its own SQL"
    ),
    ("checkpoint-sqlite/tests/test_sqlite.py", "test_informative_async_errors"): (
        "SqliteSaver is sync-only and refuses its async methods (naming AsyncSqliteSaver); "
        "HarombeSaver has both flavours, so its async methods work"
    ),
    ("checkpoint/tests/test_store.py", "test_get_text_at_path"): "opens no store",
    ("checkpoint/tests/test_store.py", "test_async_batch_store"): "opens no store",
    ("checkpoint/tests/test_store.py", "test_async_batch_store_handles_cancellation"): (
        "opens no store"
    ),
    (
        "llama-index-core/tests/storage/chat_store/test_simple_chat_store.py",
        "test_persist_non_ascii_unescaped",
    ): (
        "SimpleChatStore's JSON file (persist / from_persist_path); harombe's chat store writes "
        "each message to its database as it is added"
    ),
    ("llama-index-core/tests/storage/chat_store/test_sql.py", "test_delete_message"): (
        "reads SQLAlchemyChatStore's private table and session factory for the row ids"
    ),
    ("llama-index-core/tests/memory/test_memory_base.py", "test_initialization"): (
        "asserts Memory's token_flush_size (how much Memory flushes from its queue at a time; "
        "harombe windows instead of flushing) and the token_limit of which Memory gives the chat "
        "history chat_history_token_ratio (harombe's token_limit is that share)"
    ),
} | {
    ("llama-index-core/tests/memory/test_memory_base.py", f"test_estimate_token_count_{kind}"): (
        "Memory's private _estimate_token_count, tokenizer_fn and per-media estimates; harombe "
        "counts as LlamaIndex's default tokenizer does (tool call arguments included), see "
        "tests/llamaindex/test_memory.py"
    )
    for kind in (
        ["text", "image", "video", "audio", "document", "tool_call", "thinking", "citable_block"]
    )
}
CANNOT_APPLY |= {
    (f"checkpoint-postgres/tests/{file}", "test_get_checkpoint_no_channel_values"): (
        "patches PostgresSaver's private _load_checkpoint_tuple"
    )
    for file in ("test_sync.py", "test_async.py")
}
# InMemorySaver's tests that build their threads in its private dicts.
CANNOT_APPLY |= {
    ("checkpoint/tests/test_memory.py", name): (
        "builds its thread by writing InMemorySaver's private storage / blobs / writes dicts; "
        "get_delta_channel_history on threads a graph wrote runs in checkpoint-sqlite's "
        "test_get_delta_channel_history.py and test_delta_channel_migration.py"
    )
    for name in [
        "test_load_blobs_omits_delta_channel",
        "test_get_channel_writes_collects_ancestor_writes_only",
        "test_get_channel_writes_at_root_returns_empty",
        "test_fallback_returns_ancestor_writes_oldest_first",
        "test_async_fallback_returns_ancestor_writes_oldest_first",
        "test_async_fallback_concurrent_tasks_do_not_interfere",
        "test_seed_from_pre_delta_ancestor_blob",
        "test_seed_bounds_walk_without_dropping_its_own_writes",
    ]
}
_TOKENS_AS_INPUT = (
    "deliberate (docs/llamaindex.md): the test passes its token reserve as get()'s first "
    "argument, input, which ChatMemoryBuffer ignores; harombe recalls with input, so a number "
    "there is refused with InvalidInputError naming initial_token_count="
)
DIFFERENCES: dict[tuple[str, str], str] = {
    ("llama-index-core/tests/memory/test_chat_memory_buffer.py", name): _TOKENS_AS_INPUT
    for name in [
        "test_get_when_initial_tokens_less_than_limit_returns_history",
        "test_get_when_space_for_second_message_and_answer_removes_only_first_message_and_answer",
    ]
} | {
    (
        "llama-index-core/tests/memory/test_memory_base.py",
        "test_manage_queue_flushes_large_tool_calls",
    ): (
        "deliberate (docs/llamaindex.md): harombe archives nothing, so every message stays ACTIVE "
        "(older messages leave the window get() builds, never the history)"
    ),
    ("checkpoint-sqlite/tests/test_store.py", "test_sql_injection_vulnerability"): (
        "deliberate (docs/langchain.md): a filter key is bound as a SQL parameter, so any key is "
        "accepted, as InMemoryStore and PostgresStore accept it, and the injected key matches "
        "nothing; SqliteStore refuses keys outside [A-Za-z0-9_.-] with ValueError"
    ),
    ("checkpoint-sqlite/tests/test_sqlite.py", "test_checkpoint_search_sql_injection_prevention"): (
        "deliberate (docs/upstream-suites.md): list() matches metadata filter keys outside SQL, "
        "so any key is accepted, as InMemorySaver and PostgresSaver accept it, and the injected "
        "key matches nothing; SqliteSaver refuses keys it cannot put in its SQL with ValueError"
    ),
    (
        "checkpoint-sqlite/tests/test_get_delta_channel_history.py",
        "test_seed_present_when_snapshot_in_ancestor_sync",
    ): (
        "by design (docs/upstream-suites.md): put() stores the values of the channels named in "
        "new_versions only (BaseCheckpointSaver's contract, as InMemorySaver and PostgresSaver "
        "do); the test rewrites a stored checkpoint's channel value with new_versions={}, which "
        "only SqliteSaver (it stores every value inside the checkpoint) takes"
    ),
}
# LangGraph's PostgreSQL saver tests of a compatibility step of PostgresSaver's alone.
DIFFERENCES |= {
    (f"checkpoint-postgres/tests/{file}", "test_pending_sends_migration"): (
        "as LangGraph's SqliteSaver and InMemorySaver (docs/upstream-suites.md): a checkpoint's "
        "values are those it was put with; PostgresSaver also moves the TASKS writes of a "
        "format-v<4 checkpoint's parent into its values, for rows its own older versions wrote "
        "(graphs of today put those values in the checkpoint)"
    )
    for file in ("test_sync.py", "test_async.py")
}


_STALE = "fails on the framework's own class at the installed version (the test is newer or older)"
# Tests the framework's own class fails where it is installed: both runs are expected failures
# that may pass (xfail, not strict), so the outcome of each is shown and none fails the run.
CONTROL_FAILS: dict[tuple[str, str], str] = (
    {
        ("llama-index-core/tests/storage/chat_store/test_simple_chat_store.py", name): _STALE
        for name in [
            "test_delete_chat_message_out_of_bounds",
            "test_delete_last_chat_message_from_empty_history",
            "test_persist_non_ascii_unescaped",
        ]
    }
    | {
        ("llama-index-core/tests/memory/test_chat_memory_buffer.py", name): _STALE
        for name in [
            "test_get_when_initial_tokens_exceed_limit_raises_value_error",
            "test_get_when_initial_tokens_same_as_limit_removes_message",
            "test_get_when_space_for_assistant_message_removes_assistant_message_at_start_of_history",
            "test_get_when_space_for_all_but_first_message_removes_first_message_and_answer",
            "test_sting_save_load",
            "test_dict_save_load",
        ]
    }
    | {
        ("checkpoint-sqlite/tests/test_conformance_delta.py", "test_delta_channel_conformance"): (
            _STALE + ": langgraph-checkpoint-conformance has no delta_channel_history capability"
        )
    }
    | {
        ("llama-index-core/tests/memory/test_memory_base.py", name): _STALE
        for name in [
            "test_estimate_token_count_tool_call",
            "test_estimate_token_count_thinking",
            "test_estimate_token_count_citable_block",
            "test_manage_queue_flushes_large_tool_calls",
        ]
    }
)


def where(request: pytest.FixtureRequest) -> str:
    """``<package folder>/<test file>`` of a test (``checkpoint-sqlite/tests/test_store.py``),
    the key of the tables above; ``run.py`` names the package folder."""
    path = Path(request.module.__file__).relative_to(request.config.rootpath)
    return f"{os.environ.get('HAROMBE_UPSTREAM_PACKAGE', '')}/{path.as_posix()}"


def _bound(module: Any) -> dict[str, tuple[Any, Any]]:
    return {name: pair for name, pair in bindings().items() if name in vars(module)}


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "flaky(retries): the framework's own retry marker")
    if os.environ.get("HAROMBE_UPSTREAM_PACKAGE") == "checkpoint-postgres":
        _serve_langgraph_postgres()


#: Where LangGraph's PostgreSQL tests find their server (their conftest's DEFAULT_POSTGRES_URI).
LANGGRAPH_POSTGRES_PORT = 5441


def _serve_langgraph_postgres() -> None:
    """A local PostgreSQL server where LangGraph's checkpoint-postgres tests look for one
    (``localhost:5441``, user ``postgres``; what its docker compose file starts), unless one
    listens there already; harombe's databases go on it too, and it stops with the run."""
    import socket

    with socket.socket() as probe:
        if probe.connect_ex(("127.0.0.1", LANGGRAPH_POSTGRES_PORT)) == 0:
            return
    import langgraph_stores

    from harombe_core.store.pg_server import EmbeddedPostgres

    server = EmbeddedPostgres(port=LANGGRAPH_POSTGRES_PORT)
    server.start()
    langgraph_stores.use_server(server)


def pytest_unconfigure(config: pytest.Config) -> None:
    module = _imported_module("langgraph_stores")
    if module is not None:
        module.stop_server()


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "upstream_impl" in metafunc.fixturenames and _bound(metafunc.module):
        metafunc.parametrize("upstream_impl", IMPLS, indirect=True)


@pytest.fixture(autouse=True)
def upstream_impl(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Bind the framework's names in the test module to this run's classes."""
    impl = getattr(request, "param", "control")
    module = request.module
    key = (where(request), request.node.originalname)
    if impl == "harombe":
        if key in CANNOT_APPLY:
            pytest.skip(f"cannot apply to harombe: {CANNOT_APPLY[key]}")
        if key in DIFFERENCES:
            request.applymarker(pytest.mark.xfail(strict=True, reason=DIFFERENCES[key]))
        elif key in CONTROL_FAILS:
            request.applymarker(pytest.mark.xfail(strict=False, reason=CONTROL_FAILS[key]))
    elif key in CONTROL_FAILS:
        request.applymarker(pytest.mark.xfail(strict=False, reason=CONTROL_FAILS[key]))
    if impl == "harombe" and _params(request).get("saver_name") == "shallow":
        pytest.skip(
            "cannot apply to harombe: ShallowPostgresSaver (deprecated by LangGraph) keeps only "
            "each thread's newest checkpoint; HarombeSaver keeps every one, as PostgresSaver"
        )
    if impl == "control" and request.node.get_closest_marker("flaky") and _bound(module):
        pytest.skip("the framework marks this test flaky on the wall clock: harombe's run only")
    for name, (control, harombe) in _bound(module).items():
        monkeypatch.setattr(module, name, harombe if impl == "harombe" else control)
    if impl == "harombe" and "TTLConfig" in vars(module):
        _move_clock(module, monkeypatch)
    try:
        yield impl
    finally:
        if impl == "harombe":
            for close in _closers():
                close()


def _params(request: pytest.FixtureRequest) -> dict[str, Any]:
    callspec = getattr(request.node, "callspec", None)
    return dict(callspec.params) if callspec is not None else {}


def _move_clock(module: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """harombe's TTL runs: the store's clock moves with the test module's sleeps."""
    import langgraph_stores as lg

    import langchain_harombe.store as store_module

    clock = lg.MovedClock()
    monkeypatch.setattr(store_module, "_now", clock)
    if "time" in vars(module):
        monkeypatch.setattr(module, "time", lg.MovedTime(clock))
    if "asyncio" in vars(module):
        monkeypatch.setattr(module, "asyncio", lg.MovedAsyncio(clock))


def _closers() -> list[Callable[[], None]]:
    found: list[Callable[[], None]] = []
    for name in ("langgraph_savers", "langgraph_stores", "llamaindex_classes", "langchain_classes"):
        module = _imported_module(name)
        if module is not None and hasattr(module, "close_all"):
            found.append(module.close_all)
    return found


def _imported_module(name: str) -> Any:
    import sys

    return sys.modules.get(name)


_counts: dict[tuple[str, str], dict[str, int]] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Count outcomes per test file and run (control / harombe) for the summary."""
    if report.when != "call" and not (report.when == "setup" and report.outcome != "passed"):
        return
    params = report.nodeid.partition("[")[2]
    impl = "harombe" if "harombe" in params.split("-") or "harombe]" in params else "control"
    file = report.nodeid.split("::")[0]
    outcome = report.outcome
    if hasattr(report, "wasxfail"):
        outcome = "xfailed" if report.skipped else "xpassed"
    counts = _counts.setdefault((file, impl), {})
    counts[outcome] = counts.get(outcome, 0) + 1


def pytest_terminal_summary(terminalreporter: Any) -> None:
    terminalreporter.section("upstream tests: outcomes per file and run")
    for (file, impl), counts in sorted(_counts.items()):
        shown = ", ".join(f"{n} {outcome}" for outcome, n in sorted(counts.items()))
        terminalreporter.write_line(f"{file} [{impl}]: {shown}")
