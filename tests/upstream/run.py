"""Run the frameworks' own test files on harombe's adapters, the frameworks' classes as control.

    python tests/upstream/run.py --langgraph ~/src/langgraph --llama-index ~/src/llama_index \\
        --langchain ~/src/langchain

Each option is a checkout of the framework's repository (``git clone``; a release tag close to
the installed version is best). The files listed below run with their own pytest configuration,
from a temporary copy of the folder's ``tests`` (so the checkout's source never shadows the
installed framework), and with :mod:`upstream_plugin`, which runs each test twice: on the
framework's class (``control``) and on harombe's adapter (``harombe``), and prints the outcomes
per file and run. Nothing of the frameworks' is copied into this repository.

LangGraph's ``libs/checkpoint-postgres`` tests look for a PostgreSQL server at
``localhost:5441``; unless one listens there, the plugin starts a local one on that port.

Exit status: 0 when every run passed (or was skipped or an expected failure with its reason
declared in :mod:`upstream_plugin`), else pytest's.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent

# checkout option -> [(package folder, its test files)]
SUITES: dict[str, list[tuple[str, list[str]]]] = {
    "langgraph": [
        ("libs/checkpoint", ["tests/test_store.py", "tests/test_memory.py"]),
        (
            "libs/checkpoint-sqlite",
            [
                "tests/test_store.py",
                "tests/test_async_store.py",
                "tests/test_ttl.py",
                "tests/test_sqlite.py",
                "tests/test_aiosqlite.py",
                "tests/test_get_delta_channel_history.py",
                "tests/test_delta_channel_migration.py",
                "tests/test_conformance_delta.py",
            ],
        ),
        # LangGraph's PostgreSQL tests: the plugin starts a local server where they look for
        # one (localhost:5441) unless one listens there.
        ("libs/checkpoint-postgres", ["tests/test_sync.py", "tests/test_async.py"]),
    ],
    "llama_index": [
        (
            "llama-index-core",
            [
                "tests/storage/chat_store/test_simple_chat_store.py",
                "tests/memory/test_chat_memory_buffer.py",
                "tests/storage/chat_store/test_sql.py",
                "tests/memory/test_memory_base.py",
            ],
        ),
    ],
    "langchain": [
        ("libs/core", ["tests/unit_tests/runnables/test_history.py"]),
    ],
}


def run(checkouts: dict[str, Path], extra: list[str]) -> int:
    """Run every suite whose checkout is given; the worst exit status."""
    status = 0
    env = dict(os.environ)
    # The framework's folder goes first on sys.path (pytest puts it there: its ``tests``
    # package must win over harombe's); then the plugin, then harombe's packages.
    env["PYTHONPATH"] = os.pathsep.join(
        [str(HERE), str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    )
    for name, checkout in checkouts.items():
        for folder, files in SUITES[name]:
            package = checkout / folder
            present = [f for f in files if (package / f).exists()]
            missing = sorted(set(files) - set(present))
            if missing:
                print(f"# {package}: not found, skipped: {', '.join(missing)}", file=sys.stderr)
            if not present:
                continue
            # The tests run from a copy of the folder's tests (and its pytest configuration), so
            # that the framework's source in the checkout never shadows the installed framework.
            work = Path(tempfile.mkdtemp(prefix="harombe-upstream-"))
            shutil.copytree(package / "tests", work / "tests")
            if (package / "pyproject.toml").exists():
                shutil.copy(package / "pyproject.toml", work / "pyproject.toml")
            command = [
                sys.executable,
                "-P",
                "-m",
                "pytest",
                "-p",
                "upstream_plugin",
                "-p",
                "no:cacheprovider",
                "--rootdir",
                str(work),
                *extra,
                *present,
            ]
            print(f"# {package}: pytest {' '.join(command[4:])}", flush=True)
            try:
                env["HAROMBE_UPSTREAM_PACKAGE"] = Path(folder).name
                done = subprocess.run(command, cwd=work, env=env, check=False)
            finally:
                shutil.rmtree(work, ignore_errors=True)
            status = status or done.returncode
    return status


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--langgraph", type=Path, help="a checkout of langchain-ai/langgraph")
    parser.add_argument("--llama-index", type=Path, help="a checkout of run-llama/llama_index")
    parser.add_argument("--langchain", type=Path, help="a checkout of langchain-ai/langchain")
    parser.add_argument(
        "--postgres",
        action="store_true",
        help="harombe's LangGraph stores on PostgreSQL (a local server is started) "
        "instead of SQLite",
    )
    parser.add_argument("pytest_args", nargs="*", help="passed to pytest (after --)")
    args = parser.parse_args(argv)
    checkouts = {
        name: path
        for name, path in [
            ("langgraph", args.langgraph),
            ("llama_index", args.llama_index),
            ("langchain", args.langchain),
        ]
        if path is not None
    }
    if not checkouts:
        parser.error("give at least one checkout: --langgraph, --llama-index or --langchain")
    if args.postgres:
        os.environ["HAROMBE_UPSTREAM_BACKEND"] = "postgres"
    return run(checkouts, args.pytest_args)


if __name__ == "__main__":
    sys.exit(main())
