"""Install advice in errors works from where the user is.

A newcomer who cloned the repository and ran ``pip install -e`` is told ``pip install -e
'.[plot]'`` (or the clone's path from another folder), not a command that fetches a second
copy of harombe from an index; an installed package gets the package name.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harombe_core import errors
from harombe_core.errors import MissingExtraError, install_command

ROOT = Path(__file__).resolve().parents[2]

in_clone = pytest.mark.skipif(
    errors._clone_root() != ROOT, reason="harombe is imported from an installed package here"
)


@in_clone
def test_in_the_clone_the_command_installs_the_clone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    assert install_command("plot") == "pip install -e '.[plot]'"


@in_clone
def test_from_another_folder_it_names_the_clone(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    assert install_command("plot") == f"pip install -e '{ROOT}[plot]'"


def test_an_installed_package_gets_the_package_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(errors, "_clone_root", lambda: None)
    assert install_command("plot") == "pip install 'harombe-memory[plot]'"
    message = str(MissingExtraError("drawing a graph", "plot", "matplotlib"))
    assert message.endswith("Install it with: pip install 'harombe-memory[plot]'")
