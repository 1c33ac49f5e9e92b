"""Adapter packages add ``harombe`` subcommands through the ``harombe.cli`` entry point group.

Each scenario runs ``harombe`` in a fresh interpreter whose path holds a real installed
distribution (a ``.dist-info`` folder with ``entry_points.txt``), so the entry point machinery
is the one users get, not a patched stand-in.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from harombe_core.errors import install_command

ROOT = Path(__file__).resolve().parents[2]

# Makes the named packages impossible to import, as when an extra is not installed.
BLOCK = """
import importlib.abc, sys
class _Missing(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, _Missing())
"""


def _harombe(
    args: list[str], *, path: Path | None = None, blocked: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[str]:
    script = (
        f"BLOCKED = {set(blocked)!r}\n"
        + textwrap.dedent(BLOCK)
        + "from harombe_core.cli import main\n"
        + f"main({args!r})\n"
    )
    paths = [str(p) for p in (path, ROOT) if p is not None]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*paths, os.environ.get("PYTHONPATH", "")])}
    env["COLUMNS"] = "200"
    return subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env
    )


def _install(folder: Path, module: str, source: str, entry: str) -> Path:
    """A distribution on ``folder`` declaring ``entry`` in group ``harombe.cli``."""
    dist = folder / "harombe_adapter_probe-1.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: harombe-adapter-probe\nVersion: 1.0\n", encoding="utf-8"
    )
    (dist / "entry_points.txt").write_text(f"[harombe.cli]\n{entry}\n", encoding="utf-8")
    (folder / f"{module}.py").write_text(textwrap.dedent(source), encoding="utf-8")
    return folder


def test_an_installed_adapter_adds_its_command(tmp_path: Path) -> None:
    source = """
        import typer

        def register(app: typer.Typer) -> None:
            @app.command("probe")
            def probe(word: str = typer.Option("hi", "--word", metavar="WORD", help="Said.")):
                '''Say a word.'''
                print(f"probe says {word}")
    """
    path = _install(tmp_path, "probe_adapter", source, "probe = probe_adapter:register")
    listed = _harombe(["--help"], path=path)
    assert listed.returncode == 0, listed.stderr
    assert "probe" in listed.stdout
    assert "Say a word." in listed.stdout
    assert "chat" in listed.stdout  # the LangChain adapter's command is still there
    ran = _harombe(["probe", "--word", "hello"], path=path)
    assert ran.returncode == 0, ran.stderr
    assert "probe says hello" in ran.stdout


def test_an_adapter_missing_its_dependency_names_the_extra(tmp_path: Path) -> None:
    source = """
        import no_such_dependency_xyz

        def register(app):
            raise AssertionError("never reached")
    """
    path = _install(tmp_path, "broken_adapter", source, "fancy = broken_adapter:register [fancy]")
    listed = _harombe(["--help"], path=path)
    assert listed.returncode == 0, listed.stderr
    assert "fancy" in listed.stdout
    assert "needs the fancy extra" in listed.stdout
    ran = _harombe(["fancy", "--anything", "x"], path=path)
    assert ran.returncode == 1
    assert "Traceback" not in ran.stderr
    message = " ".join(ran.stderr.split())
    assert "harombe fancy needs the 'no_such_dependency_xyz' package" in message
    assert install_command("fancy") in message


@pytest.mark.parametrize("blocked", [("langchain_core",), ("langchain", "langchain_core")])
def test_chat_without_langchain_says_which_extra_to_install(
    tmp_path: Path, blocked: tuple[str, ...]
) -> None:
    listed = _harombe(["--help"], blocked=blocked)
    assert listed.returncode == 0, listed.stderr
    assert "chat" in listed.stdout
    db = str(tmp_path / "chat.db")
    ran = _harombe(["chat", "--db", db, "--embedding", "none"], blocked=blocked)
    assert ran.returncode == 1
    assert "Traceback" not in ran.stderr
    message = " ".join(ran.stderr.split())
    assert "harombe chat needs the" in message
    assert install_command("langchain") in message
    assert not Path(db).exists()  # nothing was created before the check


def test_the_core_command_line_never_imports_an_adapter() -> None:
    script = (
        "import sys\nimport harombe_core.cli\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0].endswith('_harombe')))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
