"""An API key's public id is random, not a piece of the key: no listing, log line or database
row holds any of the key's characters, keys made before get a random id at the upgrade (SQLite
and PostgreSQL), and keep working; a key is revoked by its public id."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from harombe_core.manager import MemoryManager
from harombe_core.server.keys import (
    KEY_PREFIX,
    create_key,
    hash_key,
    list_keys,
    resolve_key,
    revoke_key,
)
from harombe_core.server.process import ServerProcess
from harombe_core.store import schema
from harombe_core.store.sql_body import Body, sql_runner

KEY_ID = re.compile(r"k[0-9a-f]{16}")
#: The shortest piece of a key's random part looked for (6 characters: 36 bits, so a chance
#: match anywhere in the outputs checked is below one in a million).
PIECE = 6


def _pieces(secret: str) -> list[str]:
    """Every 6-character piece of the key's random part (its prefixes among them)."""
    body = secret[len(KEY_PREFIX) :]
    return [body[i : i + PIECE] for i in range(len(body) - PIECE + 1)]


def _holds_any(text: str | bytes, secret: str) -> list[str]:
    data = text if isinstance(text, bytes) else text.encode()
    return [p for p in _pieces(secret) if p.encode() in data]


def _index(migrations: list[list[str]]) -> int:
    """The position of the migration giving keys random ids (whatever is appended after)."""
    return next(
        i for i, m in enumerate(migrations) if any("UPDATE api_keys SET id" in s for s in m)
    )


def _old_key(store: Any, user: str) -> str:
    """A key as harombe made them before: its id the key's first 8 characters."""
    secret, _ = create_key(store, user_id=user)
    runner = sql_runner(store)

    def body() -> Body[None]:
        yield runner.step(
            "UPDATE api_keys SET id = ? WHERE key_hash = ?",
            (secret[len(KEY_PREFIX) : len(KEY_PREFIX) + 8], hash_key(secret)),
        )

    runner.run(body, exactly_once=True)
    return secret


def _old_keys(
    monkeypatch: pytest.MonkeyPatch,
    module: Any,
    prefix: str,
    migrations: list[list[str]],
    url: str,
) -> list[str]:
    """Keys of ann and bob made, as before, in a database of the schema before the ids were
    made random (``module``'s ``{prefix}MIGRATIONS`` cut there)."""
    before = _index(migrations)
    with monkeypatch.context() as old:
        old.setattr(module, f"{prefix}MIGRATIONS", migrations[:before])
        old.setattr(module, f"{prefix}SCHEMA_VERSION", before)
        with MemoryManager(url, embedding=None) as mm:
            return [_old_key(mm.store, "ann"), _old_key(mm.store, "bob")]


def _check_upgraded(url: str, secrets: list[str]) -> None:
    with MemoryManager(url, embedding=None) as mm:
        keys = list_keys(mm.store)
        assert len(keys) == len(secrets)
        assert all(KEY_ID.fullmatch(k.id) for k in keys), [k.id for k in keys]
        assert len({k.id for k in keys}) == len(keys)
        for secret in secrets:
            assert not _holds_any(" ".join(k.id for k in keys), secret)
            assert not revoke_key(mm.store, secret[len(KEY_PREFIX) : len(KEY_PREFIX) + 8])
        scopes = [resolve_key(mm.store, s) for s in secrets]  # the keys still work
        assert [s.user_id for s in scopes if s] == ["ann", "bob"]
        assert {s.key_id for s in scopes if s} == {k.id for k in keys}
        first = scopes[0]
        assert first is not None
        assert first.key_id is not None
        assert revoke_key(mm.store, first.key_id)
        assert resolve_key(mm.store, secrets[0]) is None
        assert resolve_key(mm.store, secrets[1]) is not None


def test_sqlite_keys_made_before_get_a_random_id(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from harombe_core.store import sqlite as sqlite_module

    path = str(tmp_path / "old.db")
    secrets = _old_keys(monkeypatch, sqlite_module, "", schema.MIGRATIONS, path)
    _check_upgraded(path, secrets)
    assert not any(_holds_any(Path(path).read_bytes(), s) for s in secrets)


def test_postgres_keys_made_before_get_a_random_id(
    pg_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from harombe_core.store import postgres as pg_module

    url = pg_server.create_database("key_ids_upgrade")
    secrets = _old_keys(monkeypatch, pg_module, "PG_", schema.PG_MIGRATIONS, url)
    _check_upgraded(url, secrets)


def _harombe(*args: str) -> str:
    """Run ``harombe``; its stdout and stderr together."""
    done = subprocess.run(
        [sys.executable, "-m", "harombe_core.cli", *args],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout + done.stderr


def test_no_output_log_or_row_holds_a_piece_of_the_key(tmp_path: Path) -> None:
    db = str(tmp_path / "memory.db")
    made = subprocess.run(
        [sys.executable, "-m", "harombe_core.cli", "keys", "create", "--db", db, "--user", "ann"],
        capture_output=True,
        text=True,
        check=True,
    )
    secret = made.stdout.strip()
    assert secret.startswith(KEY_PREFIX)
    key_id = re.search(r"key (k[0-9a-f]{16}) for user ann", made.stderr)
    assert key_id is not None, made.stderr
    seen = [made.stderr, _harombe("keys", "list", "--db", db)]
    assert key_id.group(1) in seen[1]
    server = ServerProcess(db).start()
    try:
        import httpx

        with httpx.Client(base_url=server.url, timeout=30) as http:
            for key in (secret, secret[:-2] + "xx", "hk_" + secret[3:11]):
                http.get("/api/me", headers={"Authorization": f"Bearer {key}"})
        seen.append(server.errors())
    finally:
        server.stop()
    seen.append(_harombe("keys", "revoke", key_id.group(1), "--db", db))
    assert f"revoked key {key_id.group(1)}" in seen[-1]
    seen.append(_harombe("keys", "list", "--db", db))
    assert "revoked" in seen[-1]
    for text in seen:
        assert not _holds_any(text, secret), text
    assert not _holds_any(Path(db).read_bytes(), secret)
