"""Every error harombe raises on purpose, under one base class.

Each message says what was wrong and how to fix it, so a user never has to read our source to
recover. The tree::

    HarombeError
    ├── InvalidInputError (also ValueError)        bad argument to a public method
    │   ├── InvalidMessageError                    role, content, NUL bytes, metadata, times
    │   │   └── MessageTooLargeError               a message field over its size limit
    │   ├── InputTooLargeError                     any stored field over its size limit
    │   │   └── MessageTooLargeError               (also an InvalidMessageError)
    │   ├── InvalidBudgetError                     negative or non-integer token budget
    │   ├── UnencryptedIndexError                  an encryption key with an index kept
    │   │                                          outside the database (Chroma)
    │   ├── UnknownArgumentError (also TypeError)  a misspelt keyword argument
    │   └── ThreadRuleError                        a thread graph breaks a threading rule
    ├── ConfigError (also ValueError)              YAML/dict configuration that does not validate
    ├── SessionNotFoundError (also KeyError)       a session that must exist does not (export,
    │                                              the CLI); other reads of an unknown session
    │                                              return nothing
    ├── SessionOwnershipError                      a session used on behalf of a user not its owner
    ├── MissingExtraError (also ImportError)       an optional dependency is not installed
    ├── StoreError                                 the database could not do what was asked
    │   ├── StoreNotFoundError                     no store where one must already be; none made
    │   ├── NotAHarombeDatabaseError               file is not ours (or is corrupt); left untouched
    │   ├── CorruptRowError                        a stored row harombe cannot have written (bad
    │   │                                          JSON, wrong type); names its table, id, column
    │   ├── SchemaTooNewError                      file written by a newer harombe
    │   ├── StoreBusyError                         still locked after every retry
    │   ├── StoreReadOnlyError                     the file or its folder cannot be written
    │   ├── StorageFullError                       the disk (or a size limit) is full
    │   ├── StoreUnavailableError                  the database server stayed unreachable
    │   ├── EncryptionKeyError                     wrong or missing key for an encrypted file
    │   ├── MigrationError                         a migration's destination differs from its
    │   │                                          source (or already holds other data)
    │   ├── UnsafeCheckpointError                  a stored checkpoint row names a type that is
    │   │                                          not allowed to be revived (or is a pickle)
    │   └── VectorIndexError                       the derived vector index failed; messages safe
    │       └── VectorIndexBusyError               another process holds the vector index folder
    ├── EmbeddingError                             the embedder failed or returned bad vectors
    │   └── EmbeddingModelMismatchError            index built by another model (`harombe reindex`)
    ├── SummarizationError                         a summariser failed (messages are never lost)
    ├── FactExtractionError                        a fact extractor's model failed or answered
    │                                              malformed JSON (nothing was written)
    ├── FactNotFoundError (also KeyError)          no such fact for this user (correct, forget)
    ├── ImportFormatError (also ValueError)        a JSON/JSONL file that is not a harombe export
    └── ExportPathError (also ValueError)          export path outside its folder, or unwritable

The advice in a message is written for whoever meets the error. Most of it is the same for a
Python caller and for a user of the ``harombe`` command ("restore it from a backup"); where it
is not ("pass storage_path=..." against "pass --db PATH"), the error carries a :class:`Fix`
with both, so the CLI shows :meth:`HarombeError.cli_message` and Python shows ``str(error)``.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "ConfigError",
    "CorruptRowError",
    "EmbeddingError",
    "EmbeddingModelMismatchError",
    "EncryptionKeyError",
    "ExportPathError",
    "FactExtractionError",
    "FactNotFoundError",
    "HarombeError",
    "ImportFormatError",
    "InputTooLargeError",
    "InvalidBudgetError",
    "InvalidInputError",
    "InvalidMessageError",
    "MessageTooLargeError",
    "MigrationError",
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
    "ThreadRuleError",
    "UnencryptedIndexError",
    "UnknownArgumentError",
    "UnsafeCheckpointError",
    "VectorIndexBusyError",
    "VectorIndexError",
]


@dataclass(frozen=True, slots=True)
class Fix:
    """How to recover from an error, said for each place the error can surface.

    ``api`` is for Python callers ("Pass a new path with storage_path=..."); ``cli`` says the
    same with the ``harombe`` command's commands and flags ("Pass a new path with --db PATH").
    """

    api: str
    cli: str


class HarombeError(Exception):
    """Base of every error raised deliberately by harombe.

    ``problem`` says what was wrong; ``fix`` (optional) how to recover, for Python and for the
    CLI. ``str(error)`` is the problem followed by the Python advice.
    """

    def __init__(self, *args: object, fix: Fix | None = None) -> None:
        super().__init__(*args)
        self.fix = fix

    @property
    def problem(self) -> str:
        """What was wrong (with any advice that holds everywhere), without the ``fix``."""
        return str(self.args[0]) if len(self.args) == 1 else super().__str__()

    def __str__(self) -> str:
        return self._with(None if self.fix is None else self.fix.api)

    def cli_message(self) -> str:
        """The message for a user of the ``harombe`` command: its advice names commands and
        flags, not Python arguments."""
        return self._with(None if self.fix is None else self.fix.cli)

    def _with(self, advice: str | None) -> str:
        problem = self.problem
        if not advice:
            return problem
        return f"{problem} {advice}" if problem else advice


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


class UnknownArgumentError(InvalidInputError, TypeError):
    """A keyword argument no parameter has (usually a misspelling): the message names the
    nearest spelling. Also a TypeError, which is what Python itself raises for it, so code
    that caught that still does."""


class ThreadRuleError(InvalidInputError):
    """A thread graph breaks a threading rule (the message says which and where)."""


class UnencryptedIndexError(InvalidInputError):
    """An encrypted database was asked to keep its vectors in an index the key cannot cover
    (Chroma's folder or server): refused, so nothing of it is written in the clear."""


class ConfigError(HarombeError, ValueError):
    """A configuration file or mapping does not match the schema."""


class SessionNotFoundError(HarombeError, KeyError):
    """A session that must exist (one to export, or named to a ``harombe`` command) does not.

    MemoryManager's own methods never raise it: an unknown session reads as empty and is
    created by the first write, as a LangChain or LlamaIndex chat history is.
    """

    def __str__(self) -> str:  # KeyError would otherwise quote the message
        return HarombeError.__str__(self) if self.args else "session not found"

    @classmethod
    def of(cls, session_id: str, location: str) -> SessionNotFoundError:
        """The error for ``session_id`` missing from the store at ``location``."""
        return cls(
            f"no session {session_id!r} in {location}.",
            fix=Fix(
                api="MemoryManager.list_sessions() lists the sessions there.",
                cli=f"`harombe sessions --db {shlex.quote(location)}` lists the sessions there.",
            ),
        )


class SessionOwnershipError(HarombeError):
    """A session was used on behalf of someone who does not own it; nothing was read or written.

    A session belongs to the user it was created for, and no other user may read or write it,
    so two users can never share one by accident (a guessed id, a fixed default, a thread id
    reused across users). A session created without a user has no owner and cannot be used on
    behalf of one either: it may hold anybody's messages. Adapters (which act for one user, or
    for nobody) also refuse a user's session to a caller that names no user.
    """

    def __init__(self, session_id: str, user_id: str | None) -> None:
        move = (
            ", or, if the session really should move to this user, transfer it first with "
            "MemoryManager.update_session(session_id, user_id=...)."
        )
        if user_id is None:
            problem = (
                f"session {session_id!r} belongs to a user, and this call names none: an "
                "adapter without a user_id only reaches sessions that have no owner."
            )
            fix = Fix(
                api="Pass the user_id of the user it is acting for (user_id=... to the "
                "component; for a LangGraph graph, config={'configurable': {'thread_id': ..., "
                "'user_id': ...}}, which get_state and update_state need too)" + move,
                cli="Pass --user with the user it belongs to.",
            )
        else:
            problem = (
                f"session {session_id!r} is not owned by user {user_id!r}: a session belongs to "
                "the user it was created for, and no other user may read or write it."
            )
            fix = Fix(
                api="Give this user a session of their own (a new session id; "
                "conversation_history_factory and MemoryManager.conversation_session_id build "
                "one per user and conversation)" + move,
                cli=f"Use a session of user {user_id!r} (`harombe sessions --user "
                f"{shlex.quote(user_id)}` lists them), or leave out --user to act as the "
                "database's owner.",
            )
        super().__init__(problem, fix=fix)
        self.session_id = session_id
        self.user_id = user_id

    def __reduce__(self) -> tuple[type[SessionOwnershipError], tuple[str, str | None]]:
        return (type(self), (self.session_id, self.user_id))  # survives pickling (processes)


class MissingExtraError(HarombeError, ImportError):
    """An optional dependency is needed; the message names the extra to install.

    ``install`` replaces the advice for a package no extra of harombe brings (a LangChain
    integration: ``install="pip install langchain-openai"``).
    """

    def __init__(self, feature: str, extra: str, module: str, *, install: str = "") -> None:
        command = install or install_command(extra)
        super().__init__(
            f"{feature} needs the '{module}' package, which is not installed. "
            f"Install it with: {command}"
        )
        self.extra = extra
        self.module = module


def install_command(extra: str) -> str:
    """The pip command that adds ``extra`` where this harombe is: ``pip install -e '.[x]'`` in a
    clone of the repository (the path instead of ``.`` from another folder), else
    ``pip install 'harombe-memory[x]'``. A newcomer who cloned the repository and ran
    ``pip install -e`` gets a command that works there, not one that fetches a second copy."""
    root = _clone_root()
    if root is None:
        return f"pip install 'harombe-memory[{extra}]'"
    try:
        here = Path.cwd().resolve() == root
    except OSError:
        here = False
    where = "." if here else str(root)
    return f"pip install -e '{where}[{extra}]'"


def _clone_root() -> Path | None:
    """The repository folder harombe runs from, or None when it is installed as a package."""
    root = Path(__file__).resolve().parent.parent
    try:
        project = (root / "pyproject.toml").read_text(encoding="utf-8")
    except OSError:
        return None
    return root if 'name = "harombe-memory"' in project else None


@contextmanager
def requires_extra(feature: str, extra: str, module: str) -> Iterator[None]:
    """Imports of an optional dependency: an :class:`ImportError` in the block becomes the
    :class:`MissingExtraError` that tells the user which extra brings ``module``.

    ``with requires_extra("ONNX embeddings", "onnx", "onnxruntime"): import onnxruntime``
    """
    try:
        yield
    except MissingExtraError:
        raise  # already says which extra is missing
    except ImportError as exc:
        raise MissingExtraError(feature, extra, module) from exc


@contextmanager
def requires_packages(feature: str, extra: str, packages: tuple[str, ...]) -> Iterator[None]:
    """Imports of a whole module built on an extra: an import that fails because one of
    ``packages`` (top-level names, ``"langchain_core"``) is not installed becomes the
    :class:`MissingExtraError` naming it and the extra that brings it.

    Narrower than :func:`requires_extra`, because such a module imports many names: any other
    :class:`ImportError` (the package is there, at a version without a name we use) is left
    as it is, since its own message is the truth and "not installed" would not be.
    """
    try:
        yield
    except ModuleNotFoundError as exc:
        missing = (exc.name or "").partition(".")[0]
        if missing not in packages:
            raise
        raise MissingExtraError(feature, extra, missing) from exc


class StoreError(HarombeError):
    """The store could not complete an operation; nothing was half-written."""


class StoreNotFoundError(StoreError):
    """A store that must already exist (the source of a migration, a store to inspect) is not
    there; nothing was created in its place."""


class NotAHarombeDatabaseError(StoreError):
    """The file is not a harombe database or is corrupt; it was not modified."""


class CorruptRowError(StoreError):
    """A row of the database holds a value harombe never writes (JSON that does not parse, a
    text where a number belongs, an unknown role): the database was edited outside harombe.

    Raised by the read that met the row, naming it (``table``, ``row_id``, ``column``) so it
    can be repaired or deleted; the rest of the database is untouched and other reads still work.
    """

    def __init__(
        self, message: str, *, table: str = "", row_id: object = None, column: str = ""
    ) -> None:
        super().__init__(message)
        self.table = table
        self.row_id = row_id
        self.column = column


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


class MigrationError(StoreError):
    """The destination does not match the source (or holds a different session of the same id)."""


class UnsafeCheckpointError(StoreError):
    """A stored checkpoint row would revive a type nobody allowed (or is a pickle).

    Reviving a row calls the constructor it names, so a row someone crafted could run any code
    on read. Only the types LangGraph itself writes and those the application allow-lists are
    revived; the message names the type and how to allow it, and nothing was constructed.
    ``type_name`` is ``"module.Name"`` (or the row's serialisation tag for a pickle).
    """

    def __init__(self, message: str, *, type_name: str = "", fix: Fix | None = None) -> None:
        super().__init__(message, fix=fix)
        self.type_name = type_name


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


class FactExtractionError(HarombeError):
    """A fact extractor's model failed, or answered something that is not the JSON asked for;
    nothing of that batch was written, and the batch is tried again later."""


class FactNotFoundError(HarombeError, KeyError):
    """No fact with this id belongs to this user (it was forgotten, or is another user's)."""

    def __str__(self) -> str:  # KeyError would otherwise quote the message
        return HarombeError.__str__(self) if self.args else "fact not found"


class ImportFormatError(HarombeError, ValueError):
    """An import file is not in a format harombe writes."""


class ExportPathError(HarombeError, ValueError):
    """An export file would land outside the folder it was confined to, or cannot be written."""
