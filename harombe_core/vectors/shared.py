"""One semantic memory per database per process, shared by every manager and adapter on it.

A program often opens one database several times: a LangChain history and a retriever, the
LlamaIndex chat store and memory block, a manager per request. Each with its own semantic
memory would run its own indexer thread over the same pending rows (embedding each twice) and
its own Chroma client on one folder, which only one client may hold (see
:mod:`harombe_core.vectors.chroma_folder`). So the first opener of a database creates the
embedder, the index and the worker, later openers share them, and a count of openers decides
when they close.

Keyed on the store's ``location`` (its resolved path or its URL); a private ``:memory:`` store
is never shared. A later opener must ask for the same embedding model and the same index, or it
gets a typed error: one database has one index.

Close order: each opener gives its share back; the last one stops the worker and closes the
index (giving the folder back), and only then is the store closed. A store that an opener
closes while others still use the semantic memory built on it stays open until the last
opener is done. Closing does not embed what is still pending: it is committed, and the next
worker (in this process or another) embeds it; call ``flush()`` first to have it searchable
before closing.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from harombe_core.errors import EmbeddingModelMismatchError, InvalidInputError
from harombe_core.store.base import MessageStore

if TYPE_CHECKING:
    from harombe_core.config import MemoryConfig
    from harombe_core.vectors.indexer import SemanticMemory

__all__ = ["acquire_semantic", "release_semantic"]


@dataclass(slots=True)
class _Entry:
    semantic: SemanticMemory
    embedding: Any
    target: Any
    holders: int = 1
    stores: list[MessageStore] = field(default_factory=list)


_lock = threading.Lock()
_entries: dict[str, _Entry] = {}
_pid = os.getpid()


def _key(store: MessageStore) -> str | None:
    return None if store.location == ":memory:" else store.location


def _target(vector_store: Any, config: MemoryConfig | None) -> Any:
    """What index a request names: the object itself, or the name and its settings."""
    if not isinstance(vector_store, str):
        return vector_store
    section = config.vector_store if config is not None else None
    if section is None:
        return (vector_store, "persistent", None, None, None, None)
    return (vector_store, section.mode, section.path, section.host, section.port,
            section.collection)


def _forget_parent_entries() -> None:
    """In a forked child the parent's workers and index clients do not exist: start afresh."""
    global _pid
    if os.getpid() != _pid:
        _entries.clear()
        _pid = os.getpid()


def _check_same(entry: _Entry, store: MessageStore, embedding: Any, target: Any) -> None:
    semantic = entry.semantic
    if target != entry.target and not (
        not isinstance(target, tuple) and target is semantic.index
    ):
        raise InvalidInputError(
            f"{store.location} is already open in this process with another vector index "
            f"({entry.target!r}); every manager and adapter on one database shares one. Pass "
            "the same vector_store (and config) to each."
        )
    if embedding is entry.embedding or embedding is semantic.embedder:
        return
    if isinstance(embedding, str) and embedding == entry.embedding:
        return
    from harombe_core.vectors.choice import resolve_embedder_spec

    embedder = resolve_embedder_spec(embedding)
    if (embedder.name, embedder.dimension) != (semantic.embedder.name,
                                               semantic.embedder.dimension):
        raise EmbeddingModelMismatchError(
            f"{store.location} is already open in this process with the embedding model "
            f"{semantic.embedder.name!r}, and {embedder.name!r} was asked for; every manager "
            "and adapter on one database shares one model. Open it with the same embedding, "
            "or switch the model for all with MemoryManager.reindex(embedding=...)."
        )


def acquire_semantic(
    store: MessageStore,
    *,
    embedding: Any,
    vector_store: Any,
    config: MemoryConfig | None = None,
    allow_model_change: bool = False,
) -> SemanticMemory:
    """The semantic memory of ``store``'s database in this process, opened if needed.

    Give it back with :func:`release_semantic`. ``allow_model_change`` (for reindexing) skips
    the model checks: the caller is about to switch the model.
    """
    from harombe_core.vectors.indexer import open_semantic_memory

    target = _target(vector_store, config)
    key = _key(store)
    with _lock:
        _forget_parent_entries()
        entry = _entries.get(key) if key is not None else None
        if entry is not None:
            _check_same(entry, store, entry.embedding if allow_model_change else embedding,
                        target)
            entry.holders += 1
            return entry.semantic
        semantic = open_semantic_memory(
            store,
            embedding=embedding,
            vector_store=vector_store,
            config=config,
            allow_model_change=allow_model_change,
        )
        if key is not None:
            _entries[key] = _Entry(semantic, embedding, target)
        return semantic


def release_semantic(semantic: SemanticMemory, store: MessageStore) -> bool:
    """Give back one share; the last closes it. True when the caller may close ``store`` now.

    False means the shared semantic memory still works on ``store``: it is closed with the
    last share instead.
    """
    with _lock:
        _forget_parent_entries()
        key = _key(store)
        entry = _entries.get(key) if key is not None else None
        if entry is None or entry.semantic is not semantic:
            semantic.close()  # never shared (a private store)
            return True
        entry.holders -= 1
        if entry.holders > 0:
            if store is semantic.store:
                entry.stores.append(store)
                return False
            return True
        del _entries[key]  # type: ignore[arg-type]
        try:
            semantic.close()
        finally:
            for held in entry.stores:
                held.close()
        return True
