"""Every error harombe raises on purpose, under one base class.

Each message says what was wrong and how to fix it, so a user never has to read our source to
recover. The tree::

    HarombeError
    ├── InvalidInputError (also ValueError)        bad argument to a public method
    │   ├── InvalidMessageError                    role, content, NUL bytes, metadata, times
    │   │   └── MessageTooLargeError               a message field over its size limit
    │   ├── InputTooLargeError                     any stored field over its size limit
    │   │   └── MessageTooLargeError               (also an InvalidMessageError)
    │   └── InvalidBudgetError                     negative or non-integer token budget
    ├── ConfigError (also ValueError)              YAML/dict configuration that does not validate
    ├── SessionNotFoundError (also KeyError)       a read of a session that does not exist
    ├── SessionOwnershipError                      a session used on behalf of a user not its owner
    ├── MissingExtraError (also ImportError)       an optional dependency is not installed
    ├── StoreError                                 the database could not do what was asked
    │   ├── StoreNotFoundError                     no store where one must already be; none made
    │   ├── NotAHarombeDatabaseError               file is not ours (or is corrupt); left untouched
    │   ├── SchemaTooNewError                      file written by a newer harombe
    │   ├── StoreBusyError                         still locked after every retry
    │   ├── StoreReadOnlyError                     the file or its folder cannot be written
    │   ├── StorageFullError                       the disk (or a size limit) is full
    │   ├── StoreUnavailableError                  the database server stayed unreachable
    │   ├── EncryptionKeyError                     wrong or missing key for an encrypted file
    │   └── VectorIndexError                       the derived vector index failed; messages safe
    │       └── VectorIndexBusyError               another process holds the vector index folder
    ├── EmbeddingError                             the embedder failed or returned bad vectors
    │   └── EmbeddingModelMismatchError            index built by another model (`harombe reindex`)
    ├── SummarizationError                         a summariser failed (messages are never lost)
    ├── ImportFormatError (also ValueError)        a JSON/JSONL file that is not a harombe export
    └── ExportPathError (also ValueError)          export path outside its folder, or unwritable
"""

from __future__ import annotations

__all__ = [
    "ConfigError",
    "EmbeddingError",
    "EmbeddingModelMismatchError",
    "EncryptionKeyError",
    "ExportPathError",
    "HarombeError",
    "ImportFormatError",
    "InputTooLargeError",
    "InvalidBudgetError",
    "InvalidInputError",
    "InvalidMessageError",
    "MessageTooLargeError",
    "MissingExtraError",
    "NotAHarombeDatabaseError",
    "SchemaTooNewError",
    "SessionNotFoundError",
    "SessionOwnershipError",
    "StorageFullError",
    "StoreBusyError",
    "StoreError",
    "StoreNotFoundError",
    "StoreReadOnlyError",
    "StoreUnavailableError",
    "SummarizationError",
    "VectorIndexBusyError",
    "VectorIndexError",
]


class HarombeError(Exception):
    """Base of every error raised deliberately by harombe."""


class InvalidInputError(HarombeError, ValueError):
    """An argument to a public method is of the wrong type or out of range."""


class InvalidMessageError(InvalidInputError):
    """A message cannot be stored as given (role, content, size, metadata)."""


class InputTooLargeError(InvalidInputError):
    """A value is larger than its field may store (see :mod:`harombe_core.limits`)."""


class MessageTooLargeError(InvalidMessageError, InputTooLargeError):
    """A message field (content, name, tool calls, metadata) is over its size limit."""


class InvalidBudgetError(InvalidInputError):
    """A token budget is negative or not an integer."""


class ConfigError(HarombeError, ValueError):
    """A configuration file or mapping does not match the schema."""


class SessionNotFoundError(HarombeError, KeyError):
    """A session id that is not in the store was asked for."""

    def __str__(self) -> str:  # KeyError would otherwise quote the message
        return str(self.args[0]) if self.args else "session not found"


class SessionOwnershipError(HarombeError):
    """A session was used on behalf of someone who does not own it; nothing was read or written.

    A session belongs to the user it was created for, and no other user may read or write it,
    so two users can never share one by accident (a guessed id, a fixed default, a thread id
    reused across users). A session created without a user has no owner and cannot be used on
    behalf of one either: it may hold anybody's messages. Adapters (which act for one user, or
    for nobody) also refuse a user's session to a caller that names no user.
    """

    def __init__(self, session_id: str, user_id: str | None) -> None:
        if user_id is None:
            what = (
                f"session {session_id!r} belongs to a user, and this call names none: an "
                "adapter without a user_id only reaches sessions that have no owner. Pass the "
                "user_id of the user it is acting for"
            )
        else:
            what = (
                f"session {session_id!r} is not owned by user {user_id!r}: a session belongs to "
                "the user it was created for, and no other user may read or write it. Give this "
                "user a session of their own (a new session id; conversation_history_factory "
                "and MemoryManager.conversation_session_id build one per user and conversation)"
            )
        super().__init__(
            f"{what}, or, if the session really should move to this user, transfer it first "
            "with MemoryManager.update_session(session_id, user_id=...)."
        )
        self.session_id = session_id
        self.user_id = user_id

    def __reduce__(self) -> tuple[type[SessionOwnershipError], tuple[str, str | None]]:
        return (type(self), (self.session_id, self.user_id))  # survives pickling (processes)


class MissingExtraError(HarombeError, ImportError):
    """An optional dependency is needed; the message names the extra to install."""

    def __init__(self, feature: str, extra: str, module: str, *, install: str = "") -> None:
        command = install or f"pip install 'harombe-memory[{extra}]'"
        super().__init__(
            f"{feature} needs the '{module}' package, which is not installed. "
            f"Install it with: {command}"
        )
        self.extra = extra
        self.module = module


class StoreError(HarombeError):
    """The store could not complete an operation; nothing was half-written."""


class StoreNotFoundError(StoreError):
    """A store that must already exist (the source of a migration, a store to inspect) is not
    there; nothing was created in its place."""


class NotAHarombeDatabaseError(StoreError):
    """The file is not a harombe database or is corrupt; it was not modified."""


class SchemaTooNewError(StoreError):
    """The database was written by a newer harombe than this one."""


class StoreBusyError(StoreError):
    """The database stayed locked by other writers after every retry."""


class StoreReadOnlyError(StoreError):
    """The database file (or its directory) is read-only."""


class StorageFullError(StoreError):
    """The disk or a file-size limit is full; the write was rolled back."""


class StoreUnavailableError(StoreError):
    """The database server could not be reached during every retry; nothing was half-written."""


class EncryptionKeyError(StoreError):
    """An encrypted database was opened without its key or with a wrong one; it is unchanged."""


class VectorIndexError(StoreError):
    """The vector index (a derived copy of the stored vectors) could not do what was asked.

    Nothing stored is lost: messages and their vectors stay in the database, and the index can
    be rebuilt from them with ``harombe reindex``.
    """


class VectorIndexBusyError(VectorIndexError):
    """Another process holds the vector index folder, so this one cannot rebuild it."""


class EmbeddingError(HarombeError):
    """The embedding model failed or returned vectors of the wrong shape."""


class EmbeddingModelMismatchError(EmbeddingError):
    """The vector index was built with another model or dimension."""


class SummarizationError(HarombeError):
    """A summariser failed; the messages it was given are still stored."""


class ImportFormatError(HarombeError, ValueError):
    """An import file is not in a format harombe writes."""


class ExportPathError(HarombeError, ValueError):
    """An export file would land outside the folder it was confined to, or cannot be written."""
