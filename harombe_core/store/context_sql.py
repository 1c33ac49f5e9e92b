"""The SQL of the context strategies' O(window) reads, for both dialects.

The reads themselves are operations of :mod:`harombe_core.store.ops` (``important_before``,
``is_threaded``, ``thread_path``) that ``store.run`` / ``await store.arun`` runs, so the
context flows yield them like every other store operation (on the async path, one
worker-thread hop each).

The hybrid strategy needs a session's important messages and the threaded one the path from
the newest message up its ``parent_id`` links. Read from the whole session, both cost
O(history); these statements read only what the window can use, through partial indexes
(``messages_important``, ``messages_threaded``) that hold just the rows they look for.

"Important" is decided exactly as :func:`harombe_core.strategies.is_important` decides it:
``metadata["important"]`` is JSON ``true`` (importance 1.0), else a numeric, non-boolean
``metadata["importance"]``. The expression is evaluated from the stored metadata, so it needs
no extra column, no change to how messages are written and no backfill.

The reads themselves are store operations (:func:`~harombe_core.store.ops.important_before`,
:func:`~harombe_core.store.ops.is_threaded`, :func:`~harombe_core.store.ops.thread_path`).
"""

from __future__ import annotations

__all__ = [
    "IMPORTANCE",
    "IMPORTANT_WHERE",
    "context_indexes",
    "important_before_sql",
    "is_threaded_sql",
    "thread_path_sql",
]

#: Per dialect: the importance of message ``m`` (NULL when it has none).
IMPORTANCE = {
    "sqlite": (
        "(CASE WHEN json_type(metadata, '$.important') = 'true' THEN 1.0 "
        "WHEN json_type(metadata, '$.importance') IN ('integer', 'real') "
        "THEN json_extract(metadata, '$.importance') END)"
    ),
    "postgres": (
        "(CASE WHEN (metadata::jsonb -> 'important') = 'true'::jsonb THEN 1.0 "
        "WHEN jsonb_typeof(metadata::jsonb -> 'importance') = 'number' "
        "THEN (metadata::jsonb ->> 'importance')::float8 END)"
    ),
}
#: Per dialect: the predicate of the ``messages_important`` partial index. A query repeats it
#: word for word, which is what lets SQLite's planner use the index.
IMPORTANT_WHERE = {dialect: f"{expr} IS NOT NULL" for dialect, expr in IMPORTANCE.items()}


def context_indexes(dialect: str) -> list[str]:
    """The migration that adds the two partial indexes (schema step of ``dialect``); it may
    meet them already there (a schema history rewound by hand), so it does not insist."""
    return [
        f"CREATE INDEX IF NOT EXISTS messages_important ON messages (session_id, id) "
        f"WHERE {IMPORTANT_WHERE[dialect]}",
        "CREATE INDEX IF NOT EXISTS messages_threaded ON messages (session_id, id) "
        "WHERE parent_id IS NOT NULL",
    ]


def important_before_sql(dialect: str, columns: str, mark: str, *, bounded: bool) -> str:
    """Newest first, a page of important messages of a session that still fit a budget.

    Parameters in order: session id, (``bounded``: the id to stay below), threshold, tokens
    left, page size. A message too big for the tokens left is never read.
    """
    where = f"m.session_id = {mark}"
    if bounded:
        where += f" AND m.id < {mark}"
    importance = IMPORTANCE[dialect].replace("metadata", "m.metadata")
    return (
        f"SELECT {columns} FROM messages m WHERE {where} "
        f"AND {IMPORTANT_WHERE[dialect].replace('metadata', 'm.metadata')} "
        f"AND {importance} >= {mark} AND COALESCE(m.token_count, 0) <= {mark} "
        f"ORDER BY m.id DESC LIMIT {mark}"
    )


def is_threaded_sql(mark: str) -> str:
    """Whether any message of a session has a parent (one seek on ``messages_threaded``)."""
    return (
        "SELECT EXISTS (SELECT 1 FROM messages WHERE session_id = "
        f"{mark} AND parent_id IS NOT NULL)"
    )


def thread_path_sql(columns: str, mark: str) -> str:
    """The thread of a session's newest message, newest first, up to one row past a budget.

    Parameters in order: session id (for the newest message), session id (the path stays in
    the session), the token budget, the longest path walked. Each step is one primary-key seek,
    and the walk stops at the first message that no longer fits (the window's look-ahead), so
    the cost follows the window, not the thread's length.
    """
    return (
        "WITH RECURSIVE path (id, parent_id, spent, depth) AS ("
        "SELECT id, parent_id, COALESCE(token_count, 0), 1 FROM messages "
        f"WHERE id = (SELECT MAX(id) FROM messages WHERE session_id = {mark}) "
        "UNION ALL "
        "SELECT n.id, n.parent_id, p.spent + COALESCE(n.token_count, 0), p.depth + 1 "
        "FROM path p JOIN messages n ON n.id = p.parent_id "
        f"WHERE n.session_id = {mark} AND p.spent <= {mark} AND p.depth < {mark}) "
        f"SELECT {columns} FROM path JOIN messages m ON m.id = path.id ORDER BY path.depth"
    )
