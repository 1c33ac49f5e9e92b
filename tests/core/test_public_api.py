"""The public API of ``harombe_core`` is exactly ``__all__``, and every name in it works."""

from __future__ import annotations

import inspect
import subprocess
import sys

import pytest

import harombe_core
from harombe_core import errors

# Names the design promises (other packages and users import them).
PROMISED = {
    "MemoryManager",
    "Message",
    "Session",
    "SearchHit",
    "ConversationNode",
    "MessageSummary",
    "MemoryConfig",
    "SQLiteStore",
    "HarombeError",
    "__version__",
}
# Bindings every module with lazy exports has; not API, never in __all__.
PLUMBING = {"annotations", "TYPE_CHECKING", "Any"}


def test_all_has_no_duplicates_and_no_private_names() -> None:
    names = harombe_core.__all__
    assert len(names) == len(set(names))
    assert all(n == "__version__" or not n.startswith("_") for n in names)


def test_promised_names_are_public() -> None:
    assert set(harombe_core.__all__) >= PROMISED


def test_every_name_in_all_resolves_and_is_not_a_module() -> None:
    for name in harombe_core.__all__:
        value = getattr(harombe_core, name)
        assert not inspect.ismodule(value), name
        if inspect.isclass(value) or inspect.isfunction(value):
            assert value.__doc__, f"{name} has no docstring"


def test_nothing_public_outside_all() -> None:
    public = {
        name
        for name, value in vars(harombe_core).items()
        if not name.startswith("_") and not inspect.ismodule(value)
    }
    assert public - PLUMBING <= set(harombe_core.__all__)
    assert dir(harombe_core) == sorted(harombe_core.__all__)


def test_unknown_names_raise_attribute_error() -> None:
    with pytest.raises(AttributeError, match="NoSuchThing"):
        harombe_core.NoSuchThing  # type: ignore[attr-defined]  # noqa: B018


def test_every_error_is_exported_and_a_harombe_error() -> None:
    for name in errors.__all__:
        value = getattr(errors, name)
        assert issubclass(value, harombe_core.HarombeError), name
        assert name in harombe_core.__all__, name
        assert getattr(harombe_core, name) is value
        assert name in (errors.__doc__ or ""), f"{name} missing from the error tree docstring"


def test_star_import_gives_exactly_all() -> None:
    script = (
        "import harombe_core\n"
        "before = set(globals())\n"
        "from harombe_core import *\n"
        "print(sorted(set(globals()) - before - {'before'}))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(sorted(harombe_core.__all__))
