"""Short English for what the ``harombe`` command and the demo print.

Counts read as a person would write them: ``1 session``, ``2 sessions``, ``1,204 messages``.
"""

from __future__ import annotations

__all__ = ["plural"]


def plural(count: int, word: str, words: str | None = None) -> str:
    """``count`` and ``word``, in the plural (``words``, else ``word + "s"``) unless it is 1."""
    return f"{count:,} {word if count == 1 else (words or word + 's')}"
