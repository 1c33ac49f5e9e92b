"""An empty encryption key is refused everywhere, never read as "no encryption".

``os.environ.get("KEY", "")`` or an unset secret gives ``""``; taking that as "no key" would
write the user's messages in plain text while they believe them encrypted.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from harombe_core import MemoryManager
from harombe_core.config import load_config
from harombe_core.errors import ConfigError, EncryptionKeyError, HarombeError
from harombe_core.manager import open_store


def test_the_manager_and_open_store_refuse_an_empty_key(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    with pytest.raises(EncryptionKeyError, match="empty") as caught:
        MemoryManager(str(db), embedding=None, encryption_key="")
    assert "encryption_key=None" in str(caught.value)  # says how to fix it
    with pytest.raises(EncryptionKeyError):
        open_store(str(db), encryption_key="")
    with pytest.raises(EncryptionKeyError):  # wherever the store lives
        MemoryManager(":memory:", embedding=None, encryption_key="")
    assert not db.exists()  # nothing was written


def test_an_empty_key_in_the_environment_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "env.db"
    monkeypatch.setenv("HAROMBE_DB_KEY", "")
    with pytest.raises(EncryptionKeyError, match="HAROMBE_DB_KEY") as caught:
        MemoryManager(str(db), embedding=None)
    assert "unset HAROMBE_DB_KEY" in caught.value.cli_message()
    assert not db.exists()


def test_the_config_refuses_an_empty_key(tmp_path: Path) -> None:
    config = {"memory": {"storage_path": str(tmp_path / "c.db"), "encryption_key": ""}}
    with pytest.raises(ConfigError, match="encryption_key"):
        load_config(config)
    with pytest.raises(ConfigError):
        MemoryManager.from_config(config)
    assert not (tmp_path / "c.db").exists()


def test_the_command_refuses_an_empty_key_in_one_line(tmp_path: Path) -> None:
    db = tmp_path / "cli.db"
    with MemoryManager(str(db), embedding=None) as mm:
        mm.save_message("s", {"role": "user", "content": "hello"})
    env = {**os.environ, "HAROMBE_DB_KEY": ""}
    done = subprocess.run(
        [sys.executable, "-m", "harombe_core.cli", "sessions", "--db", str(db)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1, done.stderr
    assert "HAROMBE_DB_KEY" in done.stderr + done.stdout
    assert "Traceback" not in done.stderr


def test_the_adapters_refuse_an_empty_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("langchain_core")
    pytest.importorskip("llama_index.core")
    from langchain_harombe import HarombeChatMessageHistory
    from llamaindex_harombe import HarombeChatStore

    db = tmp_path / "a.db"
    with pytest.raises(EncryptionKeyError):
        HarombeChatMessageHistory(
            "s", storage_path=str(db), manager_options={"embedding": None, "encryption_key": ""}
        )
    monkeypatch.setenv("HAROMBE_DB_KEY", "")
    with pytest.raises(HarombeError):
        HarombeChatStore(str(db), embedding=None)
    assert not db.exists()
