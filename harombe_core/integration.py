"""What a framework integration builds on: the public toolkit of the adapters.

Applications use ``harombe_core`` (its ``__all__``). The LangChain and LlamaIndex adapters,
and any third-party integration written the same way, need a little more: the checks every
public entry point applies, the SQL runner for tables an integration keeps beside the memory
(LangGraph's checkpoints), the key/value items a ``BaseStore`` is built on, the ownership
rules of sessions, the type policy that keeps checkpoints from reviving code, and the
threader that links a conversation's turns. Those are named here, and an integration imports
them from here, never from the module that implements them: that module may move or split
without breaking anyone (``tests/test_adapter_imports.py`` holds the adapters to it).

The public surface for integrations is therefore ``harombe_core`` and these documented
submodules, each exactly its ``__all__``: ``harombe_core.errors`` (the error tree),
``harombe_core.models``, ``harombe_core.tokens``, ``harombe_core.validate``,
``harombe_core.embeddings``, ``harombe_core.testing``, ``harombe_core.cli_app`` (commands an
adapter adds to ``harombe``) and this module. See ``docs/integrations.md``.

Names load on first use, so importing this module costs nothing.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from harombe_core.lazy import lazy_attributes

if TYPE_CHECKING:
    from harombe_core.checkpoint_safety import AllowList, TypePolicy, check_row, refused_tag
    from harombe_core.embeddings.base import NativeAsyncEmbedder, validate_vectors
    from harombe_core.errors import Fix, install_command, requires_extra, requires_packages
    from harombe_core.export.hits import hit_metadata
    from harombe_core.facts.models import (
        FactProposal,
        check_fact_text,
        check_kind,
        check_subject,
        check_user,
    )
    from harombe_core.facts.ops import forget_current, users_with_facts
    from harombe_core.flows import Call, Flow, Work, adrive, drive
    from harombe_core.folding import SESSIONS, SummaryFolder
    from harombe_core.owners import check_owner, check_search_scope
    from harombe_core.retrieval import context_message
    from harombe_core.store import items, pending
    from harombe_core.store.base import ClosesOnExit
    from harombe_core.store.items import check_key, check_namespace
    from harombe_core.store.rows import corrupt_row, to_micros
    from harombe_core.store.runner import Body, Dialect, Op, StepResult
    from harombe_core.store.sql_body import SqlRunner, sql_runner
    from harombe_core.threader import Threader, shared_threader
    from harombe_core.threads import resolve_selector
    from harombe_core.validate import plural

_LAZY: dict[str, str] = {
    # errors: how a message says what to do, and which extra a missing feature needs
    "Fix": "harombe_core.errors",
    "install_command": "harombe_core.errors",
    "requires_extra": "harombe_core.errors",
    "requires_packages": "harombe_core.errors",
    # the SQL runner for an integration's own tables (one body of steps, both dialects), and
    # the store operations it can join to a transaction
    "Body": "harombe_core.store.runner",
    "Dialect": "harombe_core.store.runner",
    "Op": "harombe_core.store.runner",
    "StepResult": "harombe_core.store.runner",
    "SqlRunner": "harombe_core.store.sql_body",
    "sql_runner": "harombe_core.store.sql_body",
    "ClosesOnExit": "harombe_core.store.base",
    "to_micros": "harombe_core.store.rows",
    # the typed error for a stored value no serializer wrote, naming its row
    "corrupt_row": "harombe_core.store.rows",
    # key/value items with vectors (LangGraph's BaseStore is built on them)
    "check_key": "harombe_core.store.items",
    "check_namespace": "harombe_core.store.items",
    # sessions: who may read them, and what a search may reach
    "check_owner": "harombe_core.owners",
    "check_search_scope": "harombe_core.owners",
    # checkpoints: the types a stored checkpoint may revive
    "AllowList": "harombe_core.checkpoint_safety",
    "TypePolicy": "harombe_core.checkpoint_safety",
    "check_row": "harombe_core.checkpoint_safety",
    "refused_tag": "harombe_core.checkpoint_safety",
    # flows: an operation written once, driven in place or on the event loop
    "Call": "harombe_core.flows",
    "Flow": "harombe_core.flows",
    "Work": "harombe_core.flows",
    "adrive": "harombe_core.flows",
    "drive": "harombe_core.flows",
    # the process's background worker, and the work a store owes after a crash
    "SummaryFolder": "harombe_core.folding",
    "SESSIONS": "harombe_core.folding",  # the priority of a thread's session on the worker
    # user memory as a framework's namespace shows it (LangGraph's store: the facts namespace)
    "FactProposal": "harombe_core.facts.models",
    "check_fact_text": "harombe_core.facts.models",
    "check_kind": "harombe_core.facts.models",
    "check_subject": "harombe_core.facts.models",
    "check_user": "harombe_core.facts.models",
    "forget_current": "harombe_core.facts.ops",
    "users_with_facts": "harombe_core.facts.ops",
    # embedders a framework supplies
    "NativeAsyncEmbedder": "harombe_core.embeddings.base",
    "validate_vectors": "harombe_core.embeddings.base",
    # threads and recall as an adapter shows them
    "Threader": "harombe_core.threader",
    "shared_threader": "harombe_core.threader",
    "resolve_selector": "harombe_core.threads",
    "context_message": "harombe_core.retrieval",
    "hit_metadata": "harombe_core.export.hits",
    # small helpers an adapter's package and messages use
    "lazy_attributes": "harombe_core.lazy",
    "plural": "harombe_core.validate",
}
#: Modules offered as namespaces (``items.put(...)``), imported on first use.
_MODULES: dict[str, str] = {
    "items": "harombe_core.store.items",
    "pending": "harombe_core.store.pending",
}

__all__ = [
    "SESSIONS",
    "AllowList",
    "Body",
    "Call",
    "ClosesOnExit",
    "Dialect",
    "FactProposal",
    "Fix",
    "Flow",
    "NativeAsyncEmbedder",
    "Op",
    "SqlRunner",
    "StepResult",
    "SummaryFolder",
    "Threader",
    "TypePolicy",
    "Work",
    "adrive",
    "check_fact_text",
    "check_key",
    "check_kind",
    "check_namespace",
    "check_owner",
    "check_row",
    "check_search_scope",
    "check_subject",
    "check_user",
    "context_message",
    "corrupt_row",
    "drive",
    "forget_current",
    "hit_metadata",
    "install_command",
    "items",
    "lazy_attributes",
    "pending",
    "plural",
    "refused_tag",
    "requires_extra",
    "requires_packages",
    "resolve_selector",
    "shared_threader",
    "sql_runner",
    "to_micros",
    "users_with_facts",
    "validate_vectors",
]

_lazy_getattr, __dir__ = lazy_attributes(__name__, _LAZY, __all__)


def __getattr__(name: str) -> Any:
    module = _MODULES.get(name)
    if module is not None:
        value = importlib.import_module(module)
        globals()[name] = value
        return value
    return _lazy_getattr(name)
