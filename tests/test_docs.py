"""The docs site builds without a warning, and the README a newcomer meets first stays short.

``mkdocs build --strict`` fails on a broken link, a page missing from the nav, a missing
snippet, or an API reference (mkdocstrings) naming something that does not exist or a docstring
griffe cannot read, so the docs cannot drift from the code unnoticed.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"


@pytest.mark.timeout(300)
def test_the_docs_site_builds_strictly(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    api = (tmp_path / "site" / "api" / "index.html").read_text(encoding="utf-8")
    for name in ("MemoryManager", "HarombeSaver", "HarombeMemoryMiddleware", "HarombeMemory"):
        assert name in api


def test_the_readme_is_a_short_landing_page() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 250
    head = "\n".join(lines[:150])
    for section in ("## Two commands", "## Plain Python", "## LangChain", "## LlamaIndex"):
        assert section in head, f"{section} is not within the README's first 150 lines"
    for extra in ("`onnx`", "`onnx,langchain`", "`onnx,llamaindex`"):
        assert f"Extra: {extra}" in head or f"Extras: {extra}" in head
    for needed in ("create_agent", "HarombeSaver", "HarombeMemoryMiddleware", "HarombeStore"):
        assert needed in head


def test_the_readme_test_command_is_what_ci_runs() -> None:
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    ci = ci.replace("python -m pip", "pip").replace(" --quiet", "")
    readme = README.read_text(encoding="utf-8")
    for step in ("pip install torch==2.13.0", "pip install -e '.[dev]'", "python -m pytest -q"):
        assert step in ci
        assert step in readme


def test_the_readme_links_lead_somewhere() -> None:
    text = README.read_text(encoding="utf-8")
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    local = [t for t in targets if "://" not in t]
    assert local
    for target in local:
        assert (ROOT / target).exists(), f"README links to {target}, which does not exist"


def test_the_license_is_the_one_pyproject_declares() -> None:
    assert 'license = "MIT"' in (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert (ROOT / "LICENSE").read_text(encoding="utf-8").startswith("MIT License")
    assert (ROOT / "CHANGELOG.md").is_file()


@pytest.mark.parametrize("page", [README, ROOT / "docs" / "cli.md"], ids=lambda p: p.name)
def test_the_command_lists_name_every_harombe_command(page: Path) -> None:
    """A newcomer reads the README's command block (and the command page's) as the list of
    what ``harombe`` does."""
    import typer

    from harombe_core.cli import app

    text = page.read_text(encoding="utf-8")
    section = text[text.index("The `harombe` command") :]
    block = section[section.index("```") : section.index("```", section.index("```") + 3)]
    shown = set(re.findall(r"(?:harombe|\|) +([a-z]+)", block))
    commands = set(typer.main.get_command(app).commands)  # type: ignore[attr-defined]
    assert commands - shown == set(), f"commands missing from {page.name}'s `harombe` block"


def test_install_commands_in_the_docs_work_from_the_clone() -> None:
    """harombe-memory is installed from a clone (``pip install -e '.[extra]'``, as the README
    does); ``pip install 'harombe-memory[extra]'`` finds no such distribution on an index."""
    pages = [README, *sorted((ROOT / "docs").glob("*.md"))]
    wrong = [
        f"{page.name}: {line.strip()}"
        for page in pages
        for line in page.read_text(encoding="utf-8").splitlines()
        if re.search(r"pip install [\"']?harombe-memory", line)
    ]
    assert wrong == []


def test_the_documented_ranking_defaults_are_the_code_defaults() -> None:
    """The ranking page's evidence table and the configuration page's ``rag:`` block name each
    weight's default; a default chosen again must not leave either page behind."""
    from harombe_core.config import RagSection

    defaults = RagSection()
    ranking = (ROOT / "docs" / "ranking.md").read_text(encoding="utf-8")
    table = [line for line in ranking.splitlines() if line.startswith("| ")]
    documented = dict(re.findall(r"`(\w+)` \(([\d.]+)[):]", "\n".join(table)))
    assert {"neighbor_weight", "length_weight", "statement_weight"} <= set(documented)
    for name, value in documented.items():
        assert float(value) == float(getattr(defaults, name)), (name, value)

    configuration = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    rag = configuration.split("\nrag:\n", 1)[1].split("```", 1)[0]
    listed = dict(re.findall(r"^  (\w+): ([\d.]+)\b", rag, flags=re.MULTILINE))
    assert {"top_k", "length_weight", "statement_weight", "person_weight"} <= set(listed)
    for name, value in listed.items():
        assert float(value) == float(getattr(defaults, name)), (name, value)
