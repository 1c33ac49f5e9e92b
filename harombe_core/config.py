"""The YAML configuration schema (``memory:``, ``vector_store:``, ``rag:``), validated by pydantic.

A typo in a key is an error rather than a silently ignored setting: every block forbids unknown
keys, and the message names the key and the block.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from harombe_core.errors import ConfigError

__all__ = [
    "DEFAULT_DB_PATH",
    "MemoryConfig",
    "MemorySection",
    "RagSection",
    "VectorStoreSection",
    "default_db_path",
    "load_config",
]

DEFAULT_DB_PATH = "~/.harombe/memory.db"


def default_db_path() -> str:
    """``HAROMBE_DB`` if set, else the seed's ``~/.harombe/memory.db``."""
    return os.environ.get("HAROMBE_DB") or DEFAULT_DB_PATH


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class MemorySection(_Section):
    """``memory:``: where messages live and how much of them a model sees."""

    enabled: bool = True
    # validate_default: the default (``HAROMBE_DB`` or ``~/.harombe``) gets ``~`` expanded too.
    storage_path: str = Field(default_factory=default_db_path, validate_default=True)
    max_history_tokens: int = Field(default=4096, ge=0)
    auto_prune_days: int | None = Field(default=None, ge=1)
    strategy: Literal["simple", "summarization", "hybrid", "threaded"] = "simple"
    token_counter: Literal["exact", "approximate"] = "exact"
    #: Messages folded into a session's summary per step (a get_context call does one step).
    summary_chunk: int = Field(default=500, ge=1)
    #: Extract facts, preferences and tasks into each owner's user memory in the background
    #: as messages arrive (end_session always extracts). See docs/user-memory.md.
    user_memory: bool = False
    #: Seconds after the last of a burst of deletions that the background worker erases the
    #: deleted text from the files while the store stays open (a server); None: only at
    #: close or on ``erase_deleted()``. See docs/deletion.md.
    erase_after_seconds: float | None = Field(default=2.0, ge=0, le=86_400)
    #: SQLCipher key for a SQLite file (extra ``encryption``); else ``HAROMBE_DB_KEY`` is used.
    encryption_key: str | None = Field(default=None, repr=False)

    @field_validator("encryption_key")
    @classmethod
    def _real_key(cls, value: str | None) -> str | None:
        # An empty key (an unset secret substituted into the file) would otherwise mean a
        # silently unencrypted database.
        if value == "":
            raise ValueError(
                "is empty: give the real key, or remove encryption_key (and unset "
                "HAROMBE_DB_KEY) for an unencrypted database"
            )
        return value

    @field_validator("storage_path")
    @classmethod
    def _expand(cls, value: str) -> str:
        if value == ":memory:" or "://" in value:
            return value
        return str(Path(value).expanduser())


class VectorStoreSection(_Section):
    """``vector_store:``: the derived semantic index (rebuildable from the messages)."""

    enabled: bool = True
    #: ``database``: the vectors inside the database (SQLite searched exactly, pgvector on
    #: PostgreSQL); ``chroma``: a ChromaDB index (``mode``, ``path``, ``host``, ``port`` and
    #: ``collection`` apply to it); ``pgvector``: PostgreSQL's, named explicitly.
    provider: Literal["database", "chroma", "pgvector"] = "database"
    mode: Literal["persistent", "memory", "http"] = "persistent"
    path: str | None = None
    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=1, le=65535)
    collection: str = "harombe_messages"
    embedding_model: str = "default"
    batch_size: int = Field(default=32, ge=1, le=4096)
    #: Embed each message with the turn it answers. Off by default: it halves ingestion
    #: throughput (longer texts) and recalled no better under cross-validation on LoCoMo
    #: (docs/ranking.md); the neighbour evidence of search already links a turn to its context.
    embed_context: bool = False

    @field_validator("path")
    @classmethod
    def _expand(cls, value: str | None) -> str | None:
        return None if value is None else str(Path(value).expanduser())

    def chosen(self, vector_store: Any) -> Any:
        """The index to use when ``vector_store`` was asked for: this block's provider when
        it is left at its default (``"database"``), else what was asked."""
        return self.provider if vector_store == "database" else vector_store

    @model_validator(mode="after")
    def _chroma_when_configured(self) -> VectorStoreSection:
        """A block that configures Chroma (a server, an in-memory or a placed collection)
        without naming a provider means Chroma, as it did before the in-database default
        (``mode: persistent`` alone, the default, does not)."""
        chroma_keys = {"path", "host", "port", "collection"}
        configured = self.mode != "persistent" or bool(chroma_keys & self.model_fields_set)
        if "provider" not in self.model_fields_set and configured:
            object.__setattr__(self, "provider", "chroma")
            self.model_fields_set.add("provider")
        return self


class RagSection(_Section):
    """``rag:``: defaults for retrieval and the context it adds to a prompt."""

    enabled: bool = True
    top_k: int = Field(default=5, ge=1, le=1000)
    min_similarity: float | None = Field(default=None, ge=-1.0, le=1.0)
    temporal_decay: float = Field(default=0.0, ge=0.0)
    vector_weight: float = Field(default=1.0, ge=0.0)
    keyword_weight: float = Field(default=1.0, ge=0.0)
    mmr_lambda: float | None = Field(default=None, ge=0.0, le=1.0)
    max_context_tokens: int = Field(default=2048, ge=0)
    # Context evidence (see harombe_core.retrieval.RetrievalSettings); the defaults are the
    # weights chosen by cross-validation on held-out conversations.
    neighbor_weight: float = Field(default=0.4, ge=0.0)
    session_weight: float = Field(default=0.7, ge=0.0)
    speaker_weight: float = Field(default=0.2, ge=0.0)
    time_weight: float = Field(default=0.8, ge=0.0)
    time_slack_days: float = Field(default=7.0, ge=0.0)
    length_weight: float = Field(default=0.4, ge=0.0)
    length_tokens: int = Field(default=80, ge=1)
    statement_weight: float = Field(default=0.2, ge=0.0)
    person_weight: float = Field(default=0.2, ge=0.0)
    name_free_weight: float = Field(default=1.0, ge=0.0)
    names_as_keywords: bool = False
    # Pseudo-relevance feedback on the vector side (RetrievalSettings): off, as it added
    # nothing under cross-validation once the length prior was on.
    feedback_weight: float = Field(default=0.0, ge=0.0)
    feedback_docs: int = Field(default=3, ge=1, le=100)
    # Facts as extra keys of the messages they came from (RetrievalSettings.fact_weight): off,
    # as it helps facts an LLM extracted (docs/ranking.md); 0.4 was chosen for those.
    fact_weight: float = Field(default=0.0, ge=0.0)


class MemoryConfig(_Section):
    """The whole file. Every block is optional; defaults match ``MemoryManager()``."""

    memory: MemorySection = Field(default_factory=MemorySection)
    vector_store: VectorStoreSection = Field(default_factory=VectorStoreSection)
    rag: RagSection = Field(default_factory=RagSection)


#: The keys of each block, to say where a misplaced or misspelt key belongs.
_SECTIONS: dict[str, type[_Section]] = {
    "memory": MemorySection,
    "vector_store": VectorStoreSection,
    "rag": RagSection,
}
#: ``MemoryManager(...)`` argument names that a YAML file spells differently.
_ARGUMENT_KEYS = {
    "embedding": "vector_store.embedding_model",
    "vector_store": "vector_store.provider",
}


def _unknown_key_hint(loc: tuple[int | str, ...]) -> str:
    """How to fix an unknown key: the block it belongs in (a key written at the top level, as
    ``MemoryManager(...)`` takes it), or the nearest spelling in its own block."""
    import difflib

    key = str(loc[-1])
    homes = [f"{name}.{key}" for name, model in _SECTIONS.items() if key in model.model_fields]
    if len(loc) == 1 and key in _ARGUMENT_KEYS:
        homes = homes or [_ARGUMENT_KEYS[key]]
    if homes and len(loc) == 1:
        return f"; it belongs in a block: write it as {' or '.join(homes)}"
    if len(loc) == 1:
        known = list(_SECTIONS)
        spelt = {f: f"{n}.{f}" for n, model in _SECTIONS.items() for f in model.model_fields}
        close = difflib.get_close_matches(key, [*known, *spelt], n=1)
        if close:
            return f"; did you mean {spelt.get(close[0], close[0])!r}?"
    else:
        known = list(_SECTIONS[str(loc[0])].model_fields) if str(loc[0]) in _SECTIONS else []
    close = difflib.get_close_matches(key, known, n=1)
    if close:
        return f"; did you mean {close[0]!r}?"
    if homes:
        return f"; it belongs in another block: {' or '.join(homes)}"
    if known:
        return f"; known keys here: {', '.join(sorted(known))}"
    return ""


def _format(exc: ValidationError) -> str:
    lines = []
    for error in exc.errors():
        where = ".".join(str(p) for p in error["loc"]) or "(top level)"
        hint = _unknown_key_hint(error["loc"]) if error["type"] == "extra_forbidden" else ""
        message = "unknown key" if hint else error["msg"]
        lines.append(f"  {where}: {message}{hint}")
    return "\n".join(lines)


def load_config(source: str | os.PathLike[str] | Mapping[str, Any] | MemoryConfig) -> MemoryConfig:
    """Read and validate a YAML file path or an already-parsed mapping."""
    if isinstance(source, MemoryConfig):
        return source
    if isinstance(source, Mapping):
        data: Any = dict(source)
        origin = "configuration"
    elif isinstance(source, (str, os.PathLike)):
        path = Path(source).expanduser()
        origin = str(path)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from exc
        except UnicodeDecodeError as exc:
            raise ConfigError(f"{path} is not UTF-8 text: {exc}") from exc
        import yaml

        try:
            data = yaml.safe_load(text) or {}
        except yaml.YAMLError as exc:
            raise ConfigError(f"{path} is not valid YAML: {exc}") from exc
        except RecursionError:
            raise ConfigError(f"{path} is nested too deeply to be a configuration.") from None
    else:
        raise ConfigError(f"config must be a YAML path or a mapping, got {type(source).__name__}.")
    if not isinstance(data, Mapping):
        raise ConfigError(
            f"{origin} must be a mapping with memory:, vector_store: and rag: blocks, got "
            f"{type(data).__name__}."
        )
    try:
        return MemoryConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(f"{origin} does not match the schema:\n{_format(exc)}") from exc
