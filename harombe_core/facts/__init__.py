"""User memory: each user's profile, facts with their history, and open tasks.

:mod:`~harombe_core.facts.models` holds what is stored (:class:`Fact`) and proposed
(:class:`FactProposal`); extractors propose (:mod:`~harombe_core.facts.extract` with no model,
:mod:`~harombe_core.facts.llm` with one); :mod:`~harombe_core.facts.consolidate` decides;
:mod:`~harombe_core.facts.ops` stores, on SQLite and PostgreSQL alike;
:mod:`~harombe_core.facts.memory` is the part a MemoryManager composes. See docs/user-memory.md.
"""

from __future__ import annotations

from harombe_core.facts.models import (
    FACT_KINDS,
    OUTCOMES,
    Fact,
    FactHit,
    FactProposal,
    FactSource,
    Profile,
    SessionState,
)

__all__ = [
    "FACT_KINDS",
    "OUTCOMES",
    "Fact",
    "FactHit",
    "FactProposal",
    "FactSource",
    "Profile",
    "SessionState",
]
