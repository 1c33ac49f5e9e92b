"""The adapter's public API is exactly ``__all__``, and the core never imports LangChain."""

from __future__ import annotations

import subprocess
import sys

import langchain_harombe


def test_every_public_name_resolves() -> None:
    for name in langchain_harombe.__all__:
        assert getattr(langchain_harombe, name) is not None
    assert sorted(dir(langchain_harombe)) == sorted(langchain_harombe.__all__)


def test_core_and_cli_do_not_import_langchain() -> None:
    code = (
        "import sys, harombe_core, harombe_core.cli; "
        "bad = [m for m in sys.modules if m.split('.')[0] in "
        "('langchain', 'langchain_core', 'langgraph', 'langchain_harombe')]; "
        "print(bad); raise SystemExit(1 if bad else 0)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
