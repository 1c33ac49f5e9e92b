"""The schema of both SQL backends, as forward migrations, side by side.

SQLite: each migration is a list of statements run in one transaction with the bump of
``PRAGMA user_version``. PostgreSQL: each runs in one transaction with its row in
``harombe_schema``, under an advisory lock. The two keep the same tables and columns, so a
migration between backends is lossless; what differs is the keyword index (FTS5 beside the
messages on SQLite, a ``tsvector`` column on PostgreSQL) and the column types.
"""

from __future__ import annotations

from harombe_core.store.context_sql import context_indexes
from harombe_core.store.unspaced import PG_FOLDED, PG_REWRITTEN, PG_UNSPACED

__all__ = [
    "MIGRATIONS",
    "NS_ORDER",
    "PG_MESSAGE_VECTOR",
    "PG_MIGRATIONS",
    "PG_NOT_WORD",
    "PG_SCHEMA_VERSION",
    "SCHEMA_VERSION",
    "TSVECTOR_SQL",
    "TS_CONFIG",
    "VECTORS_TABLE_DDL",
]

# The first migration's tables, written once for both backends: the texts differ only in the
# column types of ``_TYPES``, in the columns one backend alone has and in how PostgreSQL orders
# sessions updated in the same second. The SQLite texts are exactly those that existing files
# hold in sqlite_master (PostgreSQL keeps no statement text).
_TYPES: dict[str, dict[str, str]] = {
    "sqlite": {
        "time": "INTEGER",
        "message_key": "INTEGER PRIMARY KEY AUTOINCREMENT",
        "message_ref": "INTEGER",
        "flag": "INTEGER NOT NULL DEFAULT 0",
        "unembedded": "embedded = 0",
        "session_order": "",
        "session_columns": "",
        "message_columns": "",
    },
    "postgres": {
        "time": "BIGINT",
        "message_key": "BIGSERIAL PRIMARY KEY",
        "message_ref": "BIGINT",
        "flag": "BOOLEAN NOT NULL DEFAULT FALSE",
        "unembedded": "NOT embedded",
        "session_order": ", seq DESC",
        # Orders sessions updated in the same second by when they were updated.
        "session_columns": ",\n            seq BIGSERIAL",
        # The turn a message answers, and the keyword vector of both (TSVECTOR_SQL).
        "message_columns": ",\n            context TEXT NOT NULL DEFAULT '',"
        "\n            fts TSVECTOR NOT NULL",
    },
}

_META_TABLE = """CREATE TABLE harombe_meta (
            key TEXT PRIMARY KEY,
            value TEXT NOT NULL
        )"""

_SESSIONS_TABLE = """CREATE TABLE sessions (
            id TEXT PRIMARY KEY,
            user_id TEXT,
            system_prompt TEXT,
            system_prompt_tokens INTEGER NOT NULL DEFAULT 0,
            metadata TEXT NOT NULL DEFAULT '{{}}',
            created_at {time} NOT NULL,
            updated_at {time} NOT NULL,
            message_count INTEGER NOT NULL DEFAULT 0,
            summary TEXT,
            summary_json TEXT,
            summary_until_id {message_ref}{session_columns}
        )"""

_MESSAGES_TABLE = """CREATE TABLE messages (
            id {message_key},
            session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
            role TEXT NOT NULL CHECK (role IN ('user', 'assistant', 'system', 'tool')),
            content TEXT NOT NULL,
            name TEXT,
            tool_calls TEXT,
            tool_call_id TEXT,
            metadata TEXT NOT NULL DEFAULT '{{}}',
            created_at {time} NOT NULL,
            token_count INTEGER NOT NULL,
            parent_id {message_ref} REFERENCES messages(id) ON DELETE SET NULL,
            summary_json TEXT,
            embedded {flag}{message_columns}
        )"""


_FACT_TYPES: dict[str, dict[str, str]] = {
    "sqlite": {
        "key": "INTEGER PRIMARY KEY AUTOINCREMENT",
        "ref": "INTEGER",
        "blob": "BLOB",
        "time": "INTEGER",
        "flag": "INTEGER NOT NULL DEFAULT 0",
        "fts": "",
    },
    "postgres": {
        "key": "BIGSERIAL PRIMARY KEY",
        "ref": "BIGINT",
        "blob": "BYTEA",
        "time": "BIGINT",
        "flag": "BOOLEAN NOT NULL DEFAULT FALSE",
        "fts": ",\n            fts TSVECTOR GENERATED ALWAYS AS "
        "(to_tsvector('english', text)) STORED",
    },
}

_FACTS_TABLE = """CREATE TABLE facts (
            id {key},
            user_id TEXT NOT NULL,
            kind TEXT NOT NULL CHECK (kind IN ('fact', 'preference', 'task', 'decision')),
            text TEXT NOT NULL,
            subject TEXT,
            status TEXT CHECK (status IN ('open', 'done')),
            valid_from {time} NOT NULL,
            valid_to {time},
            recorded_at {time} NOT NULL,
            updated_at {time} NOT NULL,
            origin TEXT NOT NULL DEFAULT 'extracted' CHECK (origin IN ('extracted', 'user')),
            supersedes {ref} REFERENCES facts(id) ON DELETE SET NULL,
            vector {blob},
            vector_model TEXT{fts}
        )"""

_FACT_SOURCES_TABLE = """CREATE TABLE fact_sources (
            fact_id {ref} NOT NULL REFERENCES facts(id) ON DELETE CASCADE,
            session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
            message_id {ref} REFERENCES messages(id) ON DELETE CASCADE
        )"""

_SESSION_STATE_TABLE = """CREATE TABLE session_state (
            session_id TEXT PRIMARY KEY REFERENCES sessions(id) ON DELETE CASCADE,
            outcome TEXT CHECK (outcome IN ('resolved', 'ongoing', 'abandoned')),
            important {flag},
            facts_until_id {ref}
        )"""


def _fact_tables(dialect: str) -> list[str]:
    """User memory (harombe_core/facts): each user's facts with their history, the messages
    each came from, and per session its outcome, importance and how far facts were extracted.
    An extracted fact goes with the last message it came from (a trigger), so deleting a
    user's sessions leaves nothing of what they said; facts the user added stay until
    forgotten."""
    types = _FACT_TYPES[dialect]
    return [
        _FACTS_TABLE.format(**types),
        "CREATE INDEX facts_user ON facts(user_id, valid_to, id)",
        "CREATE INDEX facts_supersedes ON facts(supersedes) WHERE supersedes IS NOT NULL",
        _FACT_SOURCES_TABLE.format(**types),
        "CREATE INDEX fact_sources_fact ON fact_sources(fact_id)",
        "CREATE INDEX fact_sources_session ON fact_sources(session_id)",
        "CREATE INDEX fact_sources_message ON fact_sources(message_id) "
        "WHERE message_id IS NOT NULL",
        _SESSION_STATE_TABLE.format(**types),
    ]


def _core_tables(dialect: str) -> list[str]:
    """The sessions and messages with their indexes: the start of migration 1 on ``dialect``."""
    types = _TYPES[dialect]
    order = types["session_order"]
    return [
        _META_TABLE,
        _SESSIONS_TABLE.format(**types),
        f"CREATE INDEX sessions_updated ON sessions(updated_at DESC{order})",
        f"CREATE INDEX sessions_user_updated ON sessions(user_id, updated_at DESC{order})",
        _MESSAGES_TABLE.format(**types),
        "CREATE INDEX messages_session ON messages(session_id, id)",
        "CREATE INDEX messages_parent ON messages(parent_id) WHERE parent_id IS NOT NULL",
        f"CREATE INDEX messages_unembedded ON messages(id) WHERE {types['unembedded']}",
    ]


def _summary_text(row: str) -> str:
    """SQLite: what the summaries' keyword index holds for session ``row``: the summary and
    its topics (``summary_json``'s list, when it is valid JSON)."""
    return (
        f"{row}.summary || ' ' || COALESCE((SELECT group_concat(value, ' ') FROM json_each("
        f"CASE WHEN json_valid({row}.summary_json) THEN {row}.summary_json END, '$.topics')), '')"
    )


def _without_rowid(table: str, columns: str) -> list[str]:
    """Statements that rebuild SQLite table ``table`` as ``columns`` WITHOUT ROWID, keeping its
    rows (the name of the table, and so every statement naming it, is unchanged)."""
    return [
        f"CREATE TABLE {table}_rebuilt ({columns}) WITHOUT ROWID",
        f"INSERT INTO {table}_rebuilt SELECT * FROM {table}",
        f"DROP TABLE {table}",
        f"ALTER TABLE {table}_rebuilt RENAME TO {table}",
    ]


#: SQLite: record in a trigger the erasure the derived indexes owe (store/erasure.py's keys;
#: as the trigger of migration 6 does).
_MARK_ERASED = """
            INSERT OR REPLACE INTO harombe_meta (key, value)
                VALUES ('erased_keywords_pending', lower(hex(randomblob(16))));
            INSERT OR REPLACE INTO harombe_meta (key, value)
                VALUES ('erased_vectors_pending', lower(hex(randomblob(16))));
        """

#: Every (table, column) naming a session, each led by an index on that column.
_SESSION_REFERENCES = (
    ("messages", "session_id"),
    ("fact_sources", "session_id"),
    ("session_state", "session_id"),
    ("checkpoint_threads", "thread_id"),
    ("checkpoint_mirror_due", "thread_id"),
    ("checkpoints", "thread_id"),
    ("checkpoint_blobs", "thread_id"),
    ("checkpoint_writes", "thread_id"),
    ("checkpoint_message_blobs", "thread_id"),
)


def _orphans_trigger() -> str:
    """SQLite: a new session takes nothing a deleted one of the same id left behind.

    A session deleted with foreign keys off (the ``sqlite3`` shell's default, a migration
    script) leaves its messages, checkpoints and fact sources behind, and whoever created that
    id next (another user included) read them as theirs. A session is new only when no row
    names it, so its insert deletes such rows, and records the erasure their keyword entries
    and vectors owe. One index probe per table per new session; an upsert of an existing
    session is an update and does not fire it."""
    found = " OR ".join(
        f"EXISTS (SELECT 1 FROM {table} WHERE {column} = new.id)"
        for table, column in _SESSION_REFERENCES
    )
    deletes = " ".join(
        f"DELETE FROM {table} WHERE {column} = new.id;" for table, column in _SESSION_REFERENCES
    )
    return (
        f"CREATE TRIGGER sessions_orphans AFTER INSERT ON sessions WHEN {found} "
        f"BEGIN {_MARK_ERASED} {deletes} END"
    )


def _orphans_swept() -> list[str]:
    """SQLite: delete, once, every row naming a session that does not exist (left by deletes
    with foreign keys off), recording the erasure owed if there was any. One scan per table."""
    gone = [(t, f"{c} NOT IN (SELECT id FROM sessions)") for t, c in _SESSION_REFERENCES]
    found = " OR ".join(f"EXISTS (SELECT 1 FROM {t} WHERE {w})" for t, w in gone)
    marks = [
        "INSERT OR REPLACE INTO harombe_meta (key, value) SELECT "
        f"'{key}', lower(hex(randomblob(16))) WHERE {found}"
        for key in ("erased_keywords_pending", "erased_vectors_pending")
    ]
    return [*marks, *(f"DELETE FROM {t} WHERE {w}" for t, w in gone)]


#: A LangGraph store namespace's sort key, per dialect: its dotted name with each "." (between
#: labels) made U+0001 U+0001 and each U+0001 inside a label made U+0001 U+0002, so the keys
#: compare as the label tuples do in Python (SQLite's BINARY and PostgreSQL's "C" compare code
#: points): the separator sorts below every character a label can hold (no label holds NUL),
#: so ("a",) < ("a", "b") < ("ab",). Built-in functions only, so the index on it (migrations
#: 18 and 14) is kept by every program that writes the file, plain sqlite3 included; the
#: queries that walk that index spell the key exactly so (store/items.py list_namespaces).
NS_ORDER = {
    "sqlite": "replace(replace(namespace, char(1), char(1, 2)), '.', char(1, 1))",
    "postgres": "replace(replace(namespace, chr(1), chr(1) || chr(2)), '.', chr(1) || chr(1))",
}


# Each migration is a list of statements run in one transaction with the version bump.
MIGRATIONS: list[list[str]] = [
    [
        *_core_tables("sqlite"),
        """CREATE VIRTUAL TABLE messages_fts USING fts5(
            content, context, tokenize = 'porter unicode61 remove_diacritics 2'
        )""",
        """CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages BEGIN
            DELETE FROM messages_fts WHERE rowid = old.id;
        END""",
    ],
    # 2: each message's embedding as a float32 blob, so small scopes are searched exactly here
    # and the vector index can be rebuilt without re-embedding.
    [
        """CREATE TABLE message_vectors (
            message_id INTEGER PRIMARY KEY REFERENCES messages(id) ON DELETE CASCADE,
            vector BLOB NOT NULL
        )""",
    ],
    # 3: long-term key-value memory (the LangGraph store of the LangChain adapter): JSON values
    # under a dotted namespace, optional expiry, and one embedding per indexed text field.
    [
        """CREATE TABLE store_items (
            namespace TEXT NOT NULL,
            key TEXT NOT NULL,
            value TEXT NOT NULL,
            created_at INTEGER NOT NULL,
            updated_at INTEGER NOT NULL,
            expires_at INTEGER,
            ttl_minutes REAL,
            PRIMARY KEY (namespace, key)
        )""",
        "CREATE INDEX store_items_expiry ON store_items(expires_at) WHERE expires_at IS NOT NULL",
        """CREATE TABLE store_vectors (
            namespace TEXT NOT NULL,
            key TEXT NOT NULL,
            path TEXT NOT NULL,
            vector BLOB NOT NULL,
            PRIMARY KEY (namespace, key, path),
            FOREIGN KEY (namespace, key) REFERENCES store_items(namespace, key) ON DELETE CASCADE
        )""",
    ],
    # 4: LangGraph checkpoints (the checkpointer of the LangChain adapter), kept per thread; a
    # thread is the session of the same id, so deleting or pruning the session removes them.
    # Channel values are blobs per version; a list of messages is stored as references to one
    # blob per message (checkpoint_message_blobs), so a step writes only its new messages.
    # checkpoint_threads holds what every process must agree on about a thread's blobs.
    [
        """CREATE TABLE checkpoints (
            thread_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
            checkpoint_ns TEXT NOT NULL,
            checkpoint_id TEXT NOT NULL,
            parent_checkpoint_id TEXT,
            run_id TEXT,
            type TEXT NOT NULL,
            checkpoint BLOB NOT NULL,
            metadata TEXT NOT NULL,
            PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id)
        )""",
        """CREATE TABLE checkpoint_blobs (
            thread_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
            checkpoint_ns TEXT NOT NULL,
            channel TEXT NOT NULL,
            version TEXT NOT NULL,
            type TEXT NOT NULL,
            blob BLOB,
            PRIMARY KEY (thread_id, checkpoint_ns, channel, version)
        )""",
        """CREATE TABLE checkpoint_writes (
            thread_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
            checkpoint_ns TEXT NOT NULL,
            checkpoint_id TEXT NOT NULL,
            task_id TEXT NOT NULL,
            idx INTEGER NOT NULL,
            task_path TEXT NOT NULL,
            channel TEXT NOT NULL,
            type TEXT NOT NULL,
            blob BLOB NOT NULL,
            PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id, task_id, idx)
        )""",
        """CREATE TABLE checkpoint_message_blobs (
            thread_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
            hash BLOB NOT NULL,
            type TEXT NOT NULL,
            blob BLOB NOT NULL,
            PRIMARY KEY (thread_id, hash)
        )""",
        """CREATE TABLE checkpoint_threads (
            thread_id TEXT PRIMARY KEY REFERENCES sessions(id) ON DELETE CASCADE,
            blob_epoch TEXT NOT NULL
        ) WITHOUT ROWID""",
    ],
    # 5: partial indexes for the context strategies' O(window) reads (store/context_sql.py):
    # a session's important messages and whether it has any parent link.
    context_indexes("sqlite"),
    # 6: a deleted session records the erasure its derived indexes owe (the keys of
    # store/erasure.py), whichever code deleted it (the LangGraph checkpointer deletes threads
    # in its own SQL). Not on messages: a row trigger would cost every bulk delete.
    [
        """CREATE TRIGGER sessions_erased AFTER DELETE ON sessions BEGIN
            INSERT OR REPLACE INTO harombe_meta (key, value)
                VALUES ('erased_keywords_pending', lower(hex(randomblob(16))));
            INSERT OR REPLACE INTO harombe_meta (key, value)
                VALUES ('erased_vectors_pending', lower(hex(randomblob(16))));
        END""",
    ],
    # 7: user memory (harombe_core/facts): facts, their sources, session outcome/importance,
    # and the facts' keyword index, kept by triggers in the same transaction as each fact.
    [
        *_fact_tables("sqlite"),
        """CREATE VIRTUAL TABLE facts_fts USING fts5(
            text, tokenize = 'porter unicode61 remove_diacritics 2'
        )""",
        """CREATE TRIGGER facts_fts_insert AFTER INSERT ON facts BEGIN
            INSERT INTO facts_fts (rowid, text) VALUES (new.id, new.text);
        END""",
        """CREATE TRIGGER facts_fts_update AFTER UPDATE OF text ON facts BEGIN
            UPDATE facts_fts SET text = new.text WHERE rowid = new.id;
        END""",
        """CREATE TRIGGER facts_fts_delete AFTER DELETE ON facts BEGIN
            DELETE FROM facts_fts WHERE rowid = old.id;
        END""",
        """CREATE TRIGGER fact_sources_orphan AFTER DELETE ON fact_sources
        WHEN NOT EXISTS (SELECT 1 FROM fact_sources WHERE fact_id = old.fact_id) BEGIN
            DELETE FROM facts WHERE id = old.fact_id AND origin = 'extracted';
        END""",
    ],
    # 8: API keys of `harombe serve` (harombe_core/server/keys.py): only a key's SHA-256 is
    # kept; a user key reaches that user's memory, an admin key (user_id NULL) all of it.
    [
        """CREATE TABLE api_keys (
            id TEXT PRIMARY KEY,
            key_hash TEXT NOT NULL UNIQUE,
            user_id TEXT,
            admin INTEGER NOT NULL DEFAULT 0,
            label TEXT,
            created_at INTEGER NOT NULL,
            revoked_at INTEGER,
            CHECK ((admin = 1) = (user_id IS NULL))
        )""",
    ],
    # 9: the LangGraph checkpointer's threads whose session is not yet written to hold their
    # newest checkpoint's messages (langchain_harombe/checkpoint_mirror.py): marked in the put's
    # transaction, cleared by the background job's, so a killed process's owed sessions are
    # found (and written) at the next open.
    [
        """CREATE TABLE checkpoint_mirror_due (
            thread_id TEXT PRIMARY KEY REFERENCES sessions(id) ON DELETE CASCADE
        ) WITHOUT ROWID""",
    ],
    # 10: the keyword index of session summaries (summary and topics), so a search of every
    # user's summaries reads the sessions that match, not the store (ops.summaries_matching).
    # Kept by triggers in the transaction that writes a summary, whichever code writes it.
    [
        """CREATE VIRTUAL TABLE sessions_fts USING fts5(
            summary, tokenize = 'porter unicode61 remove_diacritics 2'
        )""",
        f"""CREATE TRIGGER sessions_fts_insert AFTER INSERT ON sessions
        WHEN new.summary <> '' BEGIN
            INSERT INTO sessions_fts (rowid, summary) VALUES (new.rowid, {_summary_text("new")});
        END""",
        f"""CREATE TRIGGER sessions_fts_update AFTER UPDATE OF summary, summary_json ON sessions
        BEGIN
            DELETE FROM sessions_fts WHERE rowid = old.rowid;
            INSERT INTO sessions_fts (rowid, summary)
                SELECT new.rowid, {_summary_text("new")} WHERE new.summary <> '';
        END""",
        """CREATE TRIGGER sessions_fts_delete AFTER DELETE ON sessions BEGIN
            DELETE FROM sessions_fts WHERE rowid = old.rowid;
        END""",
        f"INSERT INTO sessions_fts (rowid, summary) SELECT rowid, {_summary_text('sessions')} "
        "FROM sessions WHERE summary <> ''",
    ],
    # 11: the checkpoint tables of migration 4 rebuilt WITHOUT ROWID: each was a rowid table
    # plus the index of its primary key, so every row a checkpointer's put or put_writes wrote
    # touched two b-trees; keyed by their primary key alone, a put's commit writes about half
    # the pages. (Same columns, keys and cascades; the rows are copied as they are.)
    _without_rowid(
        "checkpoints",
        """thread_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
            checkpoint_ns TEXT NOT NULL,
            checkpoint_id TEXT NOT NULL,
            parent_checkpoint_id TEXT,
            run_id TEXT,
            type TEXT NOT NULL,
            checkpoint BLOB NOT NULL,
            metadata TEXT NOT NULL,
            PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id)""",
    )
    + _without_rowid(
        "checkpoint_blobs",
        """thread_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
            checkpoint_ns TEXT NOT NULL,
            channel TEXT NOT NULL,
            version TEXT NOT NULL,
            type TEXT NOT NULL,
            blob BLOB,
            PRIMARY KEY (thread_id, checkpoint_ns, channel, version)""",
    )
    + _without_rowid(
        "checkpoint_writes",
        """thread_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
            checkpoint_ns TEXT NOT NULL,
            checkpoint_id TEXT NOT NULL,
            task_id TEXT NOT NULL,
            idx INTEGER NOT NULL,
            task_path TEXT NOT NULL,
            channel TEXT NOT NULL,
            type TEXT NOT NULL,
            blob BLOB NOT NULL,
            PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id, task_id, idx)""",
    )
    + _without_rowid(
        "checkpoint_message_blobs",
        """thread_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
            hash BLOB NOT NULL,
            type TEXT NOT NULL,
            blob BLOB NOT NULL,
            PRIMARY KEY (thread_id, hash)""",
    ),
    # 12: a new session deletes what a session of its id deleted with foreign keys off left;
    # what such deletes already left is deleted once here.
    [_orphans_trigger(), *_orphans_swept()],
    # 13: a replaced (or cleared) summary leaves its words in sessions_fts's older segments, as
    # a deleted row does: record the keyword erasure owed (store/erasure.py), whichever code
    # writes the summary, so the file's last close, erase_deleted() or the background eraser
    # merges them away. Only a summary that was indexed (non-empty) and changed owes it.
    [
        """CREATE TRIGGER sessions_summary_erased AFTER UPDATE OF summary, summary_json
        ON sessions WHEN old.summary <> '' AND (new.summary IS NOT old.summary
            OR new.summary_json IS NOT old.summary_json) BEGIN
            INSERT OR REPLACE INTO harombe_meta (key, value)
                VALUES ('erased_keywords_pending', lower(hex(randomblob(16))));
        END""",
    ],
    # 14: text removed outside the messages also owes the file's erasure (the WAL's old page
    # images hold it until truncated): a deleted LangGraph checkpoint (delete_for_runs, prune,
    # a deleted thread), a deleted, expired or overwritten LangGraph store item. Recorded by
    # triggers, whichever code removes them, as migration 13 does for summaries; the keyword
    # key only, since no message vector changes (a Chroma folder is not rebuilt for them). An
    # upsert, not INSERT OR REPLACE: the conflict clause of the statement firing a trigger
    # (a store item's own upsert) overrides a trigger's OR REPLACE, which then fails.
    [
        *(
            f"""CREATE TRIGGER {name} AFTER {event} {when} BEGIN
            INSERT INTO harombe_meta (key, value)
                VALUES ('erased_keywords_pending', lower(hex(randomblob(16))))
                ON CONFLICT (key) DO UPDATE SET value = excluded.value;
        END"""
            for name, event, when in (
                ("checkpoints_erased", "DELETE ON checkpoints", ""),
                ("store_items_erased", "DELETE ON store_items", ""),
                (
                    "store_items_replaced",
                    "UPDATE OF value ON store_items",
                    "WHEN new.value IS NOT old.value",
                ),
            )
        ),
    ],
    # 15: the embedding model that made each LangGraph store item vector (its Embedder's
    # name), so a search by another model leaves them out instead of ranking a query against
    # vectors of another space. Vectors written before have none: model unknown, stale.
    ["ALTER TABLE store_vectors ADD COLUMN model TEXT"],
    # 16: an API key's public id (listed, revoked by, logged) was the key's first 8
    # characters, 48 of its bits in every listing: each key gets a random id unrelated to it
    # (server/keys.py new_key_id), the same form as a new key's.
    ["UPDATE api_keys SET id = 'k' || lower(hex(randomblob(8)))"],
    # 17: Chinese, Japanese and Korean words inside a run of text are found
    # (store/unspaced.py): the rows indexed before, as one token per run, are indexed again
    # with each of those characters set apart (``harombe_spaced``, a function harombe's
    # connections define; the migration runs in harombe): the facts and the messages (or turns
    # they answer) and the session summaries that hold such characters, only them. Nothing
    # left in the schema calls it: the triggers stay those of migrations 7 and 10, and
    # harombe's own writes of a fact or a summary set the spaced text (facts/ops.py
    # _insert_fact, ops.update_session), so plain sqlite3 can still write every table.
    [
        "UPDATE facts_fts SET text = harombe_spaced(text) WHERE harombe_spaced(text) <> text",
        "UPDATE sessions_fts SET summary = harombe_spaced(summary) "
        "WHERE harombe_spaced(summary) <> summary",
        "UPDATE messages_fts SET content = harombe_spaced(content), "
        "context = harombe_spaced(context) "
        "WHERE harombe_spaced(content) <> content OR harombe_spaced(context) <> context",
    ],
    # 18: LangGraph's list_namespaces pages the store's namespaces in tuple order; no index
    # held that order, so every call sorted every namespace. An index on the sort key
    # (NS_ORDER), with the name and the expiry beside it so a page is read from the index
    # alone. An index on an expression, not a generated column: SQLite keeps it on every write
    # from any program, and the file stays readable by a SQLite without generated columns.
    [
        f"CREATE INDEX store_items_ns_order ON store_items "
        f"({NS_ORDER['sqlite']}, namespace, expires_at)"
    ],
]
SCHEMA_VERSION = len(MIGRATIONS)


#: PostgreSQL: what separates the words of the summaries' keyword index (PG migration 13):
#: ASCII punctuation, spaces and controls, and the punctuation blocks of Latin-1, General
#: Punctuation, CJK and the fullwidth forms. Every other character is part of a word. (The
#: class was ``[^[:alnum:]_]``, whose [:alnum:] is ASCII only in a "C" locale: a summary in
#: Russian, Greek, Chinese... had no word left.) A regular expression in ASCII escapes, so the
#: schema's SQL is the same bytes whatever the database's encoding.
PG_NOT_WORD = (
    "[\\x01-\\x2f\\x3a-\\x40\\x5b-\\x5e\\x60\\x7b-\\x7f\\u00a0-\\u00bf\\u00d7\\u00f7"
    "\\u2000-\\u206f\\u3000-\\u303f\\uff01-\\uff0f\\uff1a-\\uff20\\uff3b-\\uff40\\uff5b-\\uff65]+"
)
#: A text holding any character outside ASCII (PG migration 13 re-indexes those summaries).
PG_NOT_ASCII = "[^\\x01-\\x7f]"


def _summary_fts_function(not_word: str, *, spaced: bool) -> str:
    """The trigger function that sets a session's ``summary_fts`` from its summary and topics:
    runs of characters outside ``not_word``, passed through ``harombe_spaced`` when ``spaced``
    (PG migration 10 wrote it without, migration 13 with)."""
    start, end = ("harombe_spaced(", ")") if spaced else ("", "")
    return (
        "CREATE OR REPLACE FUNCTION harombe_summary_fts() RETURNS trigger LANGUAGE plpgsql AS $$"
        f"""
        DECLARE
            topics TEXT;
        BEGIN
            BEGIN
                SELECT string_agg(t, ' ') INTO topics
                FROM jsonb_array_elements_text(NEW.summary_json::jsonb -> 'topics') AS t;
            EXCEPTION WHEN others THEN
                topics := NULL;  -- no topics, or not a list of them
            END;
            NEW.summary_fts := CASE WHEN COALESCE(NEW.summary, '') = '' THEN NULL
                ELSE to_tsvector('simple', {start}regexp_replace(
                    NEW.summary || ' ' || COALESCE(topics, ''), '{not_word}', ' ', 'g'){end})
                END;
            RETURN NEW;
        END $$"""
    )


#: The text search configuration of the PostgreSQL keyword index.
TS_CONFIG = "english"

#: A message's keyword vector on PostgreSQL: the message (weight A) and the turn it answers
#: (weight B), from two ``?`` parameters.
_PG_VECTOR = (
    f"setweight(to_tsvector('{TS_CONFIG}', harombe_spaced({{content}})), 'A') || "
    f"setweight(to_tsvector('{TS_CONFIG}', harombe_spaced({{context}})), 'B')"
)
TSVECTOR_SQL = _PG_VECTOR.format(content="?", context="?")
#: The same over a message row's own columns (what ``harombe check`` compares ``fts`` with).
PG_MESSAGE_VECTOR = _PG_VECTOR.format(content="content", context="context")

#: The pgvector table: one vector per message, gone with its message. The column is untyped so
#: vectors of any model fit; each dimension gets its own partial HNSW index (vectors/pgvector.py).
VECTORS_TABLE_DDL = (
    "CREATE TABLE IF NOT EXISTS message_vectors ("
    "message_id BIGINT PRIMARY KEY REFERENCES messages(id) ON DELETE CASCADE, "
    "dimension INTEGER NOT NULL, "
    "embedding vector NOT NULL)"
)

# Each migration runs in one transaction together with its row in harombe_schema.
PG_MIGRATIONS: list[list[str]] = [
    [
        *_core_tables("postgres"),
        "CREATE INDEX messages_fts ON messages USING GIN (fts)",
        """CREATE TABLE harombe_writes (
            key UUID PRIMARY KEY,
            result TEXT NOT NULL,
            at TIMESTAMPTZ NOT NULL DEFAULT now()
        )""",
    ],
    # 2: vectors beside the messages (pgvector). Skipped, with a notice, where the extension
    # cannot be created; the pgvector index creates the table itself once it can.
    [
        """DO $$
        BEGIN
            BEGIN
                CREATE EXTENSION IF NOT EXISTS vector;
            EXCEPTION WHEN OTHERS THEN
                RAISE NOTICE USING MESSAGE = 'pgvector is not available: ' || SQLERRM;
                RETURN;
            END;
            EXECUTE $ddl$"""
        + VECTORS_TABLE_DDL
        + """$ddl$;
        END $$""",
    ],
    # 3: long-term key-value memory (the LangGraph store of the LangChain adapter), as SQLite
    # migration 3: JSON text values under a dotted namespace, optional expiry, one float32
    # embedding per indexed text field. Names sort by code point ("C"), as in SQLite.
    [
        """CREATE TABLE store_items (
            namespace TEXT COLLATE "C" NOT NULL,
            key TEXT COLLATE "C" NOT NULL,
            value TEXT NOT NULL,
            created_at BIGINT NOT NULL,
            updated_at BIGINT NOT NULL,
            expires_at BIGINT,
            ttl_minutes DOUBLE PRECISION,
            PRIMARY KEY (namespace, key)
        )""",
        "CREATE INDEX store_items_expiry ON store_items (expires_at) WHERE expires_at IS NOT NULL",
        """CREATE TABLE store_vectors (
            namespace TEXT COLLATE "C" NOT NULL,
            key TEXT COLLATE "C" NOT NULL,
            path TEXT NOT NULL,
            vector BYTEA NOT NULL,
            PRIMARY KEY (namespace, key, path),
            FOREIGN KEY (namespace, key) REFERENCES store_items (namespace, key) ON DELETE CASCADE
        )""",
    ],
    # 4: each exactly-once key says until when a retry may still look it up, so expired keys
    # are deleted as writes go on (PostgresStore._keyed). Keys written without one (by an
    # older harombe) keep the day that its prune_write_log() allowed them.
    [
        "ALTER TABLE harombe_writes ADD COLUMN forget_after TIMESTAMPTZ NOT NULL "
        "DEFAULT now() + interval '1 day'",
        "CREATE INDEX harombe_writes_forget ON harombe_writes (forget_after)",
    ],
    # 5: LangGraph checkpoints (the checkpointer of the LangChain adapter), as SQLite
    # migration 4: per thread (the session of the same id), channel blobs per version and one
    # blob per message.
    [
        """CREATE TABLE checkpoints (
            thread_id TEXT COLLATE "C" NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
            checkpoint_ns TEXT COLLATE "C" NOT NULL,
            checkpoint_id TEXT COLLATE "C" NOT NULL,
            parent_checkpoint_id TEXT COLLATE "C",
            run_id TEXT COLLATE "C",
            type TEXT NOT NULL,
            checkpoint BYTEA NOT NULL,
            metadata TEXT NOT NULL,
            PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id)
        )""",
        """CREATE TABLE checkpoint_blobs (
            thread_id TEXT COLLATE "C" NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
            checkpoint_ns TEXT COLLATE "C" NOT NULL,
            channel TEXT COLLATE "C" NOT NULL,
            version TEXT COLLATE "C" NOT NULL,
            type TEXT NOT NULL,
            blob BYTEA,
            PRIMARY KEY (thread_id, checkpoint_ns, channel, version)
        )""",
        """CREATE TABLE checkpoint_writes (
            thread_id TEXT COLLATE "C" NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
            checkpoint_ns TEXT COLLATE "C" NOT NULL,
            checkpoint_id TEXT COLLATE "C" NOT NULL,
            task_id TEXT COLLATE "C" NOT NULL,
            idx INTEGER NOT NULL,
            task_path TEXT COLLATE "C" NOT NULL,
            channel TEXT NOT NULL,
            type TEXT NOT NULL,
            blob BYTEA NOT NULL,
            PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id, task_id, idx)
        )""",
        """CREATE TABLE checkpoint_message_blobs (
            thread_id TEXT COLLATE "C" NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
            hash BYTEA NOT NULL,
            type TEXT NOT NULL,
            blob BYTEA NOT NULL,
            PRIMARY KEY (thread_id, hash)
        )""",
        """CREATE TABLE checkpoint_threads (
            thread_id TEXT COLLATE "C" PRIMARY KEY REFERENCES sessions (id) ON DELETE CASCADE,
            blob_epoch TEXT NOT NULL
        )""",
    ],
    # 6: partial indexes for the context strategies' O(window) reads (store/context_sql.py),
    # as SQLite migration 5.
    context_indexes("postgres"),
    # 7: user memory, as SQLite migration 7 (the keyword vector is a generated column).
    [
        *_fact_tables("postgres"),
        "CREATE INDEX facts_fts ON facts USING GIN (fts)",
        """CREATE FUNCTION harombe_fact_orphan() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF NOT EXISTS (SELECT 1 FROM fact_sources WHERE fact_id = OLD.fact_id) THEN
                DELETE FROM facts WHERE id = OLD.fact_id AND origin = 'extracted';
            END IF;
            RETURN NULL;
        END $$""",
        "CREATE TRIGGER fact_sources_orphan AFTER DELETE ON fact_sources "
        "FOR EACH ROW EXECUTE FUNCTION harombe_fact_orphan()",
    ],
    # 8: API keys of `harombe serve`, as SQLite migration 8.
    [
        """CREATE TABLE api_keys (
            id TEXT COLLATE "C" PRIMARY KEY,
            key_hash TEXT COLLATE "C" NOT NULL UNIQUE,
            user_id TEXT COLLATE "C",
            admin INTEGER NOT NULL DEFAULT 0,
            label TEXT,
            created_at BIGINT NOT NULL,
            revoked_at BIGINT,
            CHECK ((admin = 1) = (user_id IS NULL))
        )""",
    ],
    # 9: the checkpointer's threads whose session is owed, as SQLite migration 9.
    [
        """CREATE TABLE checkpoint_mirror_due (
            thread_id TEXT COLLATE "C" PRIMARY KEY REFERENCES sessions (id) ON DELETE CASCADE
        )""",
    ],
    # 10: the keyword index of session summaries, as SQLite migration 10: a tsvector of the
    # summary and its topics (the 'simple' configuration over runs of word characters: every
    # word, as the summary search scores them), set by a trigger from whatever writes them.
    # It may meet its objects already there (a schema history rewound by hand), so it does not
    # insist.
    [
        "ALTER TABLE sessions ADD COLUMN IF NOT EXISTS summary_fts TSVECTOR",
        _summary_fts_function("[^[:alnum:]_]+", spaced=False),
        "DROP TRIGGER IF EXISTS sessions_summary_fts ON sessions",
        "CREATE TRIGGER sessions_summary_fts BEFORE INSERT OR UPDATE OF summary, summary_json "
        "ON sessions FOR EACH ROW EXECUTE FUNCTION harombe_summary_fts()",
        "UPDATE sessions SET summary = summary WHERE summary <> ''",
        "CREATE INDEX IF NOT EXISTS sessions_summary_fts ON sessions USING GIN (summary_fts)",
    ],
    # 11: the embedding model of each store item vector, as SQLite migration 14.
    ["ALTER TABLE store_vectors ADD COLUMN IF NOT EXISTS model TEXT"],
    # 12: a random public id for every API key, as SQLite migration 16.
    ["UPDATE api_keys SET id = 'k' || substr(md5(gen_random_uuid()::text), 1, 16)"],
    # 13: Chinese, Japanese and Korean words inside a run of text are found, as SQLite
    # migration 17: ``harombe_spaced`` sets each of their characters apart (store/unspaced.py;
    # the parser made one token of a whole run), the messages' keyword vectors that hold such
    # characters are computed again through it, the facts' generated vector is replaced by
    # one computed through it (which recomputes every fact's), and the summaries' trigger
    # function spaces the text it indexes.
    [
        # (It lowers the letters a "C" locale leaves as they are, too: PG_FOLDED.)
        "CREATE OR REPLACE FUNCTION harombe_spaced(t TEXT) RETURNS TEXT LANGUAGE sql "
        "IMMUTABLE STRICT PARALLEL SAFE AS $$ SELECT regexp_replace("
        f"{PG_FOLDED.format(text='t')}, '({PG_UNSPACED})', ' \\1 ', 'g') $$",
        f"UPDATE messages SET fts = {_PG_VECTOR.format(content='content', context='context')} "
        f"WHERE content ~ '{PG_REWRITTEN}' OR context ~ '{PG_REWRITTEN}'",
        "ALTER TABLE facts DROP COLUMN fts",
        "ALTER TABLE facts ADD COLUMN fts TSVECTOR GENERATED ALWAYS AS "
        f"(to_tsvector('{TS_CONFIG}', harombe_spaced(text))) STORED",
        "CREATE INDEX facts_fts ON facts USING GIN (fts)",
        # The summaries' vector too (migration 10's function, the text spaced and those
        # characters kept as word characters, which a "C" locale's [:alnum:] does not hold),
        # recomputed for the summaries holding such characters.
        _summary_fts_function(PG_NOT_WORD, spaced=True),
        f"UPDATE sessions SET summary = summary WHERE summary ~ '{PG_NOT_ASCII}' "
        f"OR summary_json ~ '{PG_NOT_ASCII}'",
    ],
    # 14: the index that pages the store's namespaces in tuple order, as SQLite migration 18
    # (the name is "C", so its sort key is too). It may meet the index already there (a schema
    # history rewound by hand), so it does not insist.
    [
        "CREATE INDEX IF NOT EXISTS store_items_ns_order ON store_items "
        f"(({NS_ORDER['postgres']}), namespace, expires_at)"
    ],
]
PG_SCHEMA_VERSION = len(PG_MIGRATIONS)
