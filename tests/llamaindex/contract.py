"""Tests that state a LlamaIndex contract run over LlamaIndex's own class and harombe's.

A case is written once and parametrised over the kinds; the LlamaIndex classes are controls.
Where a control does not do what the case states (the installed llama-index-core differs from
the upstream test the case mirrors), the case is skipped for that control with the reason: the
behaviour is then not LlamaIndex's, and the report says so. harombe's classes must pass.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from llama_index.core import __version__ as LLAMA_INDEX_VERSION

__all__ = ["contract", "is_harombe"]


def is_harombe(kind: str) -> bool:
    return kind.startswith("Harombe")


@contextmanager
def contract(kind: str, what: str) -> Iterator[None]:
    """The block is LlamaIndex's contract: a control that breaks it is skipped, harombe fails."""
    try:
        yield
    except (Exception, pytest.fail.Exception) as exc:
        if is_harombe(kind):
            raise
        detail = str(exc).splitlines()[0][:120] if str(exc) else ""
        pytest.skip(
            f"{kind} of llama-index-core {LLAMA_INDEX_VERSION} does not {what} "
            f"({type(exc).__name__}: {detail})"
        )
