"""The YAML configuration: schema, clear errors, ``~`` expansion, and auto-prune on open."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from harombe_core import ConfigError, MemoryConfig, MemoryManager, Message
from harombe_core.config import DEFAULT_DB_PATH, load_config
from harombe_core.store import ops
from harombe_core.store.sqlite import SQLiteStore
from harombe_core.tokens import ApproximateTokenCounter

NO_VECTORS = {"vector_store": {"enabled": False}}

SEED_YAML = """\
memory:
  enabled: true
  storage_path: "~/.harombe/memory.db"
  max_history_tokens: 2048
  auto_prune_days: 30
  strategy: simple
vector_store:
  enabled: false
  provider: chroma
  collection: my_messages
rag:
  top_k: 7
  min_similarity: 0.25
"""


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("HAROMBE_DB", raising=False)
    return tmp_path


def test_seed_yaml_file(home: Path) -> None:
    path = home / "harombe.yaml"
    path.write_text(SEED_YAML, encoding="utf-8")
    config = load_config(path)
    assert config.memory.storage_path == str(home / ".harombe" / "memory.db")
    assert config.memory.max_history_tokens == 2048
    assert config.memory.auto_prune_days == 30
    assert config.vector_store.collection == "my_messages"
    assert config.rag.top_k == 7
    assert config.rag.min_similarity == 0.25
    with MemoryManager.from_config(path) as mm:
        assert mm.max_history_tokens == 2048
        assert mm.semantic_enabled is False
        assert mm.store.location == str(home / ".harombe" / "memory.db")
        mm.save_message("s", Message(role="user", content="x"))
    assert (home / ".harombe" / "memory.db").exists()


def test_config_path_itself_may_use_tilde(home: Path) -> None:
    (home / "c.yaml").write_text(SEED_YAML, encoding="utf-8")
    assert load_config("~/c.yaml").rag.top_k == 7


def test_defaults_and_tilde_in_the_default_path(home: Path) -> None:
    config = load_config({})
    assert isinstance(config, MemoryConfig)
    assert config.memory.max_history_tokens == 4096
    assert config.memory.strategy == "simple"
    assert config.memory.auto_prune_days is None
    expected = str(Path(DEFAULT_DB_PATH.replace("~", str(home), 1)))
    assert config.memory.storage_path == expected


def test_harombe_db_environment_variable(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HAROMBE_DB", "~/elsewhere.db")
    assert load_config({}).memory.storage_path == str(home / "elsewhere.db")


def test_from_config_dict_and_object(tmp_path: Path) -> None:
    db = str(tmp_path / "m.db")
    data = {"memory": {"storage_path": db, "max_history_tokens": 64,
                       "token_counter": "approximate"}, **NO_VECTORS}
    with MemoryManager.from_config(data) as mm:
        assert mm.max_history_tokens == 64
        assert isinstance(mm.token_counter, ApproximateTokenCounter)
        assert mm.config.memory.storage_path == db
    with MemoryManager.from_config(load_config(data)) as mm:
        assert mm.store.location == db


def test_auto_prune_on_open(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    store = SQLiteStore(db)
    old = datetime.now(UTC) - timedelta(days=45)
    store.run(ops.create_session("stale", created_at=old))
    store.run(ops.create_session("lively", created_at=old))
    store.close()
    with MemoryManager(db, embedding=None) as mm:
        mm.save_message("lively", Message(role="user", content="still here"))
        mm.save_message("new", Message(role="user", content="brand new"))
    config = {"memory": {"storage_path": str(db), "auto_prune_days": 30}, **NO_VECTORS}
    with MemoryManager.from_config(config) as mm:
        assert sorted(s.id for s in mm.list_sessions(limit=None)) == ["lively", "new"]
    # without auto_prune_days nothing is pruned on open
    store = SQLiteStore(db)
    store.run(ops.create_session("stale again", created_at=old))
    store.close()
    with MemoryManager.from_config({"memory": {"storage_path": str(db)}, **NO_VECTORS}) as mm:
        assert mm.session_exists("stale again")


@pytest.mark.parametrize(
    ("data", "where"),
    [
        ({"memory": {"max_history_token": 5}}, "memory.max_history_token"),  # typo
        ({"memroy": {}}, "memroy"),
        ({"memory": {"max_history_tokens": -5}}, "memory.max_history_tokens"),
        ({"memory": {"max_history_tokens": "lots"}}, "memory.max_history_tokens"),
        ({"memory": {"auto_prune_days": 0}}, "memory.auto_prune_days"),
        ({"memory": {"strategy": "magic"}}, "memory.strategy"),
        ({"memory": {"token_counter": "gpt"}}, "memory.token_counter"),
        ({"vector_store": {"provider": "faiss"}}, "vector_store.provider"),
        ({"vector_store": {"port": 70000}}, "vector_store.port"),
        ({"rag": {"top_k": 0}}, "rag.top_k"),
        ({"rag": {"min_similarity": 2}}, "rag.min_similarity"),
        ({"memory": "yes"}, "memory"),
    ],
)
def test_invalid_config_names_the_key(data: dict[str, object], where: str) -> None:
    with pytest.raises(ConfigError, match="does not match the schema") as caught:
        load_config(data)
    assert where in str(caught.value)
    with pytest.raises(ConfigError):
        MemoryManager.from_config(data)


@pytest.mark.parametrize(
    ("data", "fix"),
    [
        # Keys written at the top level, as MemoryManager(...) takes them: the block they go in.
        (
            {"storage_path": "x.db"},
            "storage_path: unknown key; it belongs in a block: write it as memory.storage_path",
        ),
        ({"embedding": None}, "write it as vector_store.embedding_model"),
        ({"max_history_token": 5}, "did you mean 'memory.max_history_tokens'?"),
        # A typo inside a block, or a key in the wrong block.
        ({"memory": {"max_history_token": 5}}, "did you mean 'max_history_tokens'?"),
        ({"memroy": {}}, "did you mean 'memory'?"),
        ({"rag": {"storage_path": "x.db"}}, "it belongs in another block: memory.storage_path"),
        ({"rag": {"zzz": 1}}, "known keys here: enabled, "),
    ],
)
def test_an_unknown_key_says_where_it_belongs(data: dict[str, object], fix: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(data)
    assert fix in str(caught.value)
    assert "Extra inputs are not permitted" not in str(caught.value)


def test_unreadable_or_malformed_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_config(tmp_path / "missing.yaml")
    broken = tmp_path / "broken.yaml"
    broken.write_text("memory: [unclosed", encoding="utf-8")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(broken)
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(ConfigError, match="not UTF-8"):
        load_config(binary)
    scalar = tmp_path / "scalar.yaml"
    scalar.write_text("just a string\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="must be a mapping"):
        load_config(scalar)
    with pytest.raises(ConfigError, match="YAML path or a mapping"):
        load_config(42)  # type: ignore[arg-type]
    empty = tmp_path / "empty.yaml"
    empty.write_text("", encoding="utf-8")
    assert load_config(empty).memory.max_history_tokens == 4096
