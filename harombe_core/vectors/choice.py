"""Which vector index a store gets: the name a caller gives (``vector_store``), checked early.

``"database"`` (the default) keeps the vectors inside the database itself: SQLite's
``message_vectors`` searched exactly (:mod:`harombe_core.vectors.indexer`), pgvector on
PostgreSQL. ``"chroma"`` adds a ChromaDB index (embedded folder, in memory, or a server), which
an encrypted database refuses: its key cannot cover Chroma's files. ``"pgvector"`` names
PostgreSQL's explicitly. An object implementing
:class:`~harombe_core.vectors.base.VectorIndex` is used as given.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from harombe_core.errors import InvalidInputError, MissingExtraError, UnencryptedIndexError
from harombe_core.store.base import MessageStore
from harombe_core.vectors.base import VectorIndex

if TYPE_CHECKING:
    from harombe_core.config import MemoryConfig
    from harombe_core.embeddings.base import Embedder
    from harombe_core.vectors.worker import IndexOpener

__all__ = [
    "DEFAULT_VECTOR_STORE",
    "VECTOR_STORES",
    "check_semantic_parts",
    "refuse_unencrypted_index",
    "resolve_embedder_spec",
    "resolve_index",
]

#: The vector store a manager uses unless told otherwise: the vectors inside the database
#: itself (SQLite's ``message_vectors`` searched exactly, or pgvector on PostgreSQL).
DEFAULT_VECTOR_STORE = "database"
#: Every vector store that can be named (an object implementing VectorIndex also works).
VECTOR_STORES = ("database", "chroma", "pgvector")


def _on_postgres(place: Any) -> bool:
    return isinstance(place, str) and place.startswith(("postgresql://", "postgres://"))


def refuse_unencrypted_index(where: str, mode: str) -> None:
    """An encrypted database may not put its vectors in Chroma's folder or server: there they
    would be readable without the key (vectors, user and session ids, times)."""
    if mode == "memory":
        return  # kept in this process's memory only, never written
    raise UnencryptedIndexError(
        f"{where} is encrypted, but vector_store='chroma' ({mode}) would keep every message's "
        "vector, user id and session id outside it, readable without the key. Use the default "
        "vector_store='database' (the vectors are stored inside the encrypted file), or "
        "vector_store=None to turn semantic search off. See docs/encryption.md."
    )


def resolve_index(
    vector_store: Any, store: MessageStore, config: MemoryConfig | None
) -> VectorIndex | IndexOpener | None:
    """A vector index from a name or an object implementing the protocol; None for the
    in-database index of a SQLite store (its stored vectors, searched exactly).

    An embedded Chroma folder comes back as an opener (a function), because only one process
    may hold it: :class:`SemanticMemory` opens it when it is free. Raises
    UnencryptedIndexError for Chroma on disk or on a server beside an encrypted database.
    """
    if isinstance(vector_store, VectorIndex):
        return vector_store
    if vector_store not in VECTOR_STORES:
        raise InvalidInputError(
            "vector_store must be 'database' (the default), 'chroma', 'pgvector', None or a "
            f"VectorIndex object, got {vector_store!r}."
        )
    section = config.vector_store if config is not None else None
    mode = section.mode if section is not None else "persistent"
    on_postgres = _on_postgres(store.location)
    if vector_store == "database" and not on_postgres:
        return None
    if vector_store != "chroma" or (mode == "persistent" and on_postgres):
        # A PostgreSQL store keeps its vectors in the same database (pgvector), so they
        # persist with the messages and a scoped search is one SQL query.
        from harombe_core.vectors.pgvector import PgVectorIndex

        return PgVectorIndex(store)  # type: ignore[arg-type]
    if getattr(store, "encrypted", False):
        refuse_unencrypted_index(store.location, mode)
    from harombe_core.vectors.chroma import DEFAULT_COLLECTION, ChromaVectorIndex

    collection = section.collection if section is not None else DEFAULT_COLLECTION
    if mode == "http":
        assert section is not None
        return ChromaVectorIndex(
            mode="http", host=section.host, port=section.port, collection=collection
        )
    if mode == "memory" or store.location == ":memory:" or "://" in store.location:
        return ChromaVectorIndex(mode="memory", collection=collection)
    path = section.path if section is not None and section.path else f"{store.location}.chroma"
    return lambda: ChromaVectorIndex(mode="persistent", path=path, collection=collection)


def check_semantic_parts(
    embedding: Any,
    vector_store: Any,
    location: Any,
    config: MemoryConfig | None,
    encryption_key: str | None = None,
) -> None:
    """Raise now (MissingExtraError, InvalidInputError) what opening semantic memory for
    ``location`` would raise for want of a package or for a bad spec, before a store exists.

    The embedder is resolved (and kept: local models are shared per process, see
    :mod:`harombe_core.embeddings`), and ChromaDB must be importable wherever it would be used.
    With an encryption key (``encryption_key`` or ``HAROMBE_DB_KEY``) for a file, Chroma on
    disk or on a server is refused (UnencryptedIndexError).
    """
    resolve_embedder_spec(embedding)
    if vector_store != "chroma":
        return
    section = config.vector_store if config is not None else None
    place = getattr(location, "location", location)  # a store object, or where one will be
    mode = section.mode if section is not None else "persistent"
    if _on_postgres(place) and mode == "persistent":
        return  # pgvector in the same database
    from harombe_core.store.encryption import resolve_key

    in_memory = place in (":memory:", "")  # never encrypted, and its Chroma is in memory too
    if not hasattr(location, "location") and not in_memory and resolve_key(encryption_key):
        refuse_unencrypted_index(str(place), mode)  # a file to be opened with a key
    import importlib.util

    if importlib.util.find_spec("chromadb") is None:
        raise MissingExtraError("the ChromaDB vector index", "chroma", "chromadb")


def resolve_embedder_spec(embedding: Any) -> Embedder:
    """An embedder from a spec string (``"default"``, a model name or path) or an object."""
    if hasattr(embedding, "embed") and hasattr(embedding, "dimension"):
        return embedding
    from harombe_core.embeddings import resolve_embedder

    return resolve_embedder(embedding)
