"""Erasing deleted vectors from an index that keeps them in its files, as it closes.

An embedded Chroma folder keeps deleted vectors, with their user and session ids, in its log
(``embeddings_queue``), its free pages and its HNSW segments (see
:mod:`harombe_core.store.erasure` for the debt each deletion records). When the index's owner
closes it and such a debt is recorded, :func:`close_erasing` puts every row back on the tail,
empties the index and has its close vacuum the files.

Nothing is lost: the vectors stay in SQLite, and the next owner's worker files them again in
the background (no model runs); until it has, searches read them exactly from SQLite (scoped
searches always do). Refilling here instead would make this close cost as much as indexing
every vector (Chroma takes about 1.4 ms each: ``benchmarks/bench_erasure.py``). A process
killed before this leaves the debt recorded for the next owner's close.
"""

from __future__ import annotations

import logging

from harombe_core.errors import EmbeddingModelMismatchError, VectorIndexError
from harombe_core.store.erasure import ERASED_VECTORS, owed, settle
from harombe_core.vectors.base import VectorIndex
from harombe_core.vectors.stored import StoredVectors

__all__ = ["close_erasing"]

log = logging.getLogger("harombe_core.vectors.indexer")


def close_erasing(index: VectorIndex, stored: StoredVectors | None) -> None:
    """Close ``index``; first, if a deletion is owed and the index keeps files that hold
    deleted vectors (it has ``erase_deleted``), empty it and have the close erase them."""
    erase = getattr(index, "erase_deleted", None)
    token = None
    if erase is not None and stored is not None:
        token = stored.store.snapshot(lambda c: owed(c, ERASED_VECTORS))
        if token is not None:
            try:
                stored.unindex_all()  # every row to the tail first: a crash re-files
                index.clear()
                erase()
            except (VectorIndexError, EmbeddingModelMismatchError) as exc:
                log.warning("could not erase deleted vectors from %s: %s", index.name, exc)
                token = None
    index.close()
    if token is not None and stored is not None:
        paid = token
        stored.store.transaction(lambda c: settle(c, ERASED_VECTORS, paid), adds_messages=False)
