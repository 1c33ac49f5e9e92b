"""Chinese, Japanese and Korean words inside a run of text are found by keyword, on every
backend, in the messages and in the facts, also in stores written before the index set their
characters apart (store/unspaced.py), and deleted text of theirs is found no more."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import psycopg
import pytest

from harombe_core.manager import MemoryManager
from harombe_core.models import Message
from harombe_core.store import ops
from harombe_core.store.pg_server import EmbeddedPostgres

JAPANESE = "東京で寿司を食べました。とても美味しかった"
CHINESE = "我昨天在北京买了一辆自行车"
KOREAN = "어제 서울에서 친구를 만났어요"
ENGLISH = "That sounds lovely, what else did you do?"
SUMMARY = "用户昨天在北京买了一辆自行车，然后去東京で寿司を食べました"


def _save(mm: MemoryManager) -> list[int]:
    ids = mm.save_messages(
        "s",
        [
            Message(role="user", content=JAPANESE),
            Message(role="assistant", content=ENGLISH),
            Message(role="user", content=CHINESE),
            Message(role="assistant", content="A bicycle is a good way to get around."),
            Message(role="user", content=KOREAN),
        ],
        user_id="u",
    )
    mm.flush()
    return ids


def _first(mm: MemoryManager, query: str) -> str | None:
    hits = mm.search(query, user_id="u", top_k=1, neighbor_weight=0.0)
    return hits[0].message.content if hits else None


def _fact(mm: MemoryManager, query: str) -> list[str]:
    return [h.fact.text for h in mm.search_facts("u", query, top_k=1)]


def test_words_inside_chinese_japanese_and_korean_text_are_found(manager: MemoryManager) -> None:
    _save(manager)
    assert _first(manager, "寿司") == JAPANESE
    assert _first(manager, "寿司はどこで食べた？") == JAPANESE  # a question, unspaced too
    assert _first(manager, "北京") == CHINESE
    assert _first(manager, "自行车") == CHINESE
    # Korean writes particles onto the noun: 서울에서 is "in Seoul".
    assert _first(manager, "서울") == KOREAN
    assert _first(manager, "친구") == KOREAN
    assert _first(manager, "bicycle") not in (JAPANESE, KOREAN)
    manager.store.run(ops.rebuild_keyword_index())  # `harombe reindex`: the same
    assert _first(manager, "寿司") == JAPANESE
    assert _first(manager, "서울") == KOREAN


def test_facts_are_found_by_a_word_inside_them(backend_url: str) -> None:
    with MemoryManager(backend_url, embedding=None, user_memory=True) as mm:
        mm.add_fact("u", "我最喜欢的水果是芒果")
        mm.add_fact("u", "週末は京都で寿司を食べたい", kind="preference")
        mm.add_fact("u", "서울에서 일해요")
        mm.add_fact("u", "likes green tea")
        assert _fact(mm, "芒果") == ["我最喜欢的水果是芒果"]
        assert _fact(mm, "寿司") == ["週末は京都で寿司を食べたい"]
        assert _fact(mm, "서울") == ["서울에서 일해요"]
        profile = mm.get_profile("u", query="芒果")  # the fact the question names first
        assert profile.facts[0].text == "我最喜欢的水果是芒果"
        fact = mm.search_facts("u", "芒果", top_k=1)[0].fact
        corrected = mm.correct_fact("u", fact.id, "我最喜欢的水果是西瓜")
        assert _fact(mm, "西瓜") == ["我最喜欢的水果是西瓜"]
        assert mm.search_facts("u", "芒果", top_k=3) == []
        mm.forget_fact("u", corrected.id)
        assert mm.search_facts("u", "西瓜", top_k=3) == []


def test_deleted_chinese_and_japanese_text_is_not_found(manager: MemoryManager) -> None:
    ids = _save(manager)
    # The Japanese turn goes: the English answer to it held it as the turn it answers.
    manager.replace_messages("s", [ids[0], ids[2]])
    manager.flush()
    for word in ("寿司", "東京", "北京", "自行车"):
        assert manager.search(word, user_id="u", top_k=5) == [], word
    assert _first(manager, "서울") == KOREAN
    manager.delete_session("s")
    assert manager.search("서울", top_k=5) == []
    manager.save_message("t", Message(role="user", content=CHINESE), user_id="v")
    manager.flush()
    assert manager.search("北京", user_id="v", top_k=1)
    manager.forget_user("v")  # erasure of a user
    manager.flush()
    assert manager.search("北京", top_k=5) == []


# stores written before the change -------------------------------------------------------------
@pytest.fixture
def old_sqlite(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A file as harombe wrote it at schema 16: each run of Han, kana or Hangul one token in
    the messages' and the facts' keyword indexes."""
    from harombe_core.facts import ops as fact_ops
    from harombe_core.store import sqlite as sqlite_module
    from harombe_core.store import sqlite_file

    path = tmp_path / "old.db"
    with monkeypatch.context() as old:
        old.setattr(sqlite_module, "MIGRATIONS", sqlite_module.MIGRATIONS[:16])
        old.setattr(sqlite_module, "SCHEMA_VERSION", 16)
        old.setattr(sqlite_file, "sql_spaced", lambda value: value)
        old.setattr(fact_ops, "spaced", lambda text: text)
        with MemoryManager(path, embedding=None, user_memory=True) as mm:
            _save(mm)
            mm.add_fact("u", "我最喜欢的水果是芒果")
            mm.store.run(ops.update_session("s", summary=SUMMARY))
    raw = sqlite3.connect(path)
    assert raw.execute("PRAGMA user_version").fetchone()[0] == 16
    held = raw.execute("SELECT content FROM messages_fts WHERE content LIKE '東京%'").fetchall()
    assert held == [(JAPANESE,)]  # one unspaced run: 寿司 was not a token
    raw.close()
    return path


def test_an_old_sqlite_file_is_reindexed_as_it_is_opened(old_sqlite: Path) -> None:
    with MemoryManager(old_sqlite, embedding=None, user_memory=True) as mm:
        assert _first(mm, "寿司") == JAPANESE
        assert _first(mm, "北京") == CHINESE
        assert _first(mm, "서울") == KOREAN
        assert _fact(mm, "芒果") == ["我最喜欢的水果是芒果"]
        assert [s.id for s, _ in mm.search_summaries("自行车", top_k=1)] == ["s"]
        assert _first(mm, "sounds lovely") == ENGLISH  # the others are as they were
    raw = sqlite3.connect(old_sqlite)
    english = raw.execute(
        "SELECT content, context FROM messages_fts WHERE content = ?", (ENGLISH,)
    ).fetchall()
    assert english
    assert "寿 司" in " ".join(english[0][1].split())  # its context (the Japanese turn) too
    raw.close()


def test_an_old_postgres_database_is_reindexed_as_it_is_opened(
    pg_server: EmbeddedPostgres, monkeypatch: pytest.MonkeyPatch
) -> None:
    from harombe_core.store import postgres as pg_module
    from harombe_core.store import schema

    url = pg_server.create_database("cjk_old")
    with monkeypatch.context() as old:  # schema 12 and the vector it computed then
        old.setattr(pg_module, "PG_MIGRATIONS", schema.PG_MIGRATIONS[:12])
        old.setattr(pg_module, "PG_SCHEMA_VERSION", 12)
        old.setattr(
            ops,
            "TSVECTOR_SQL",
            "setweight(to_tsvector('english', ?), 'A') || "
            "setweight(to_tsvector('english', ?), 'B')",
        )
        with MemoryManager(url, embedding=None, user_memory=True) as mm:
            _save(mm)
            mm.save_message("s", Message(role="user", content="Поездка в Москву"), user_id="u")
            mm.add_fact("u", "我最喜欢的水果是芒果")
            mm.store.run(ops.update_session("s", summary=SUMMARY))
            if _c_locale(url):  # (a "C" locale lowered only ASCII)
                assert mm.store.keyword_search("москву", limit=1) == []
    with psycopg.connect(url) as conn:
        vector = conn.execute("SELECT fts::text FROM messages WHERE content = %s", (CHINESE,))
        assert "'我昨天在北京买了一辆自行车'" in str(vector.fetchone())
    with MemoryManager(url, embedding=None, user_memory=True) as mm:
        assert _first(mm, "寿司") == JAPANESE
        assert _first(mm, "北京") == CHINESE
        assert _first(mm, "서울") == KOREAN
        assert _fact(mm, "芒果") == ["我最喜欢的水果是芒果"]
        assert [s.id for s, _ in mm.search_summaries("自行车", top_k=1)] == ["s"]
        assert _first(mm, "sounds lovely") == ENGLISH
        assert _first(mm, "Москву") == "Поездка в Москву"


def _c_locale(url: str) -> bool:
    with psycopg.connect(url) as conn:
        found = conn.execute(
            "SELECT datctype FROM pg_database WHERE datname = current_database()"
        ).fetchone()
    return bool(found) and found[0] in ("C", "POSIX")


# written by another program ----------------------------------------------------------------
def _harombe_functions() -> set[str]:
    """Every SQL function harombe defines on its SQLite connections (none other has them)."""
    source = Path(ops.__file__).parents[1]
    found = set()
    for module in source.rglob("*.py"):
        found.update(re.findall(r'create_function\(\s*"(\w+)"', module.read_text()))
    return found


def _every_table_written(raw: sqlite3.Connection) -> list[str]:
    """Delete every row of every table, insert them again and update each column to itself,
    in plain SQL, then undo it: whatever trigger that fires runs without harombe's functions."""
    rows = raw.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table'").fetchall()
    virtual = [name for name, sql in rows if sql.upper().startswith("CREATE VIRTUAL")]
    tables = [
        name
        for name, _ in rows
        if not name.startswith("sqlite_") and not any(name.startswith(v) for v in virtual)
    ]
    raw.execute("SAVEPOINT everything")
    for table in tables:
        info = raw.execute(f'PRAGMA table_xinfo("{table}")').fetchall()
        columns = ", ".join(f'"{c[1]}"' for c in info if c[6] == 0)
        raw.execute(f'CREATE TEMP TABLE copy AS SELECT {columns} FROM "{table}"')
        raw.execute(f'DELETE FROM "{table}"')
        raw.execute(f'INSERT INTO "{table}" ({columns}) SELECT {columns} FROM copy')
        assigned = ", ".join(f'"{c[1]}" = "{c[1]}"' for c in info if c[6] == 0)
        raw.execute(f'UPDATE "{table}" SET {assigned}')
        raw.execute("DROP TABLE copy")
    raw.execute("ROLLBACK TO everything")
    raw.execute("RELEASE everything")
    return tables


def test_a_sqlite_file_stays_writable_by_plain_sqlite3(tmp_path: Path) -> None:
    path = tmp_path / "shared.db"
    with MemoryManager(path, embedding=None, user_memory=True) as mm:
        _save(mm)
        mm.add_fact("u", "我最喜欢的水果是芒果")
        mm.add_fact("u", "likes green tea")
        mm.add_fact("u", "works on Saturdays")
    raw = sqlite3.connect(path, isolation_level=None)  # no function of harombe's
    raw.execute("UPDATE sessions SET summary = 'Talked about 寿司 in Tokyo' WHERE id = 's'")
    schema = " ".join(sql for (sql,) in raw.execute("SELECT sql FROM sqlite_master") if sql)
    for function in _harombe_functions():
        assert function not in schema, function
    tables = _every_table_written(raw)
    assert {"facts", "messages", "sessions", "api_keys"} <= set(tables)
    # A user's own rows, as a script or the sqlite3 shell writes them.
    raw.execute(
        "INSERT INTO facts (user_id, kind, text, valid_from, recorded_at, updated_at, origin) "
        "SELECT user_id, kind, '他喜欢打网球 tennis', valid_from, recorded_at, updated_at, origin "
        "FROM facts WHERE text = 'likes green tea'"
    )
    raw.execute("UPDATE facts SET text = 'likes black coffee' WHERE text = 'likes green tea'")
    raw.execute("DELETE FROM facts WHERE text = 'works on Saturdays'")
    raw.execute(
        "INSERT INTO messages (session_id, role, content, created_at, token_count) "
        "SELECT session_id, 'user', '我在上海喝咖啡 espresso', created_at, 5 FROM messages "
        "WHERE content = ?",
        (KOREAN,),
    )
    raw.close()
    with MemoryManager(path, embedding=None, user_memory=True) as mm:
        assert _first(mm, "寿司") == JAPANESE  # harombe's own rows, as before
        assert _first(mm, "서울") == KOREAN
        assert _fact(mm, "芒果") == ["我最喜欢的水果是芒果"]
        assert _fact(mm, "tennis") == ["他喜欢打网球 tennis"]  # the foreign rows
        assert _fact(mm, "coffee") == ["likes black coffee"]
        assert mm.search_facts("u", "tea", top_k=3) == []
        assert mm.search_facts("u", "Saturdays", top_k=3) == []
        assert _first(mm, "espresso") == "我在上海喝咖啡 espresso"
        assert _first(mm, "上海") == "我在上海喝咖啡 espresso"  # indexed as it caught up
        assert [s.id for s, _ in mm.search_summaries("Tokyo", top_k=1)] == ["s"]
        assert _fact(mm, "网球") == []  # indexed as the other program wrote it...
        mm.store.run(ops.rebuild_keyword_index())  # ...until `harombe reindex`
        assert _fact(mm, "网球") == ["他喜欢打网球 tennis"]
        assert [s.id for s, _ in mm.search_summaries("寿司", top_k=1)] == ["s"]
        assert _first(mm, "寿司") == JAPANESE


def test_a_session_is_found_by_a_word_inside_its_summary(manager: MemoryManager) -> None:
    _save(manager)
    manager.save_message("t", Message(role="user", content="hello"), user_id="u")
    manager.store.run(
        ops.update_session("s", summary=SUMMARY, summary_data={"topics": ["서울에서"]})
    )
    manager.store.run(ops.update_session("t", summary="Greetings only", summary_data={}))
    for word in ("北京", "自行车", "寿司", "서울", "寿司はどこ"):
        for user in (None, "u"):  # the keyword index, and the user's summaries read whole
            hits = manager.search_summaries(word, top_k=3, user_id=user)
            assert [s.id for s, _ in hits] == ["s"], (word, user)
    assert [s.id for s, _ in manager.search_summaries("greetings", top_k=3)] == ["t"]


def test_a_summary_in_another_alphabet_is_found_by_its_words(manager: MemoryManager) -> None:
    """A summary's words in Cyrillic, Greek or with accents are words of its keyword index
    (PostgreSQL's old word class, ``[:alnum:]`` of a "C" locale, blanked every non-ASCII
    character), and typographic punctuation around them does not join them to it."""
    for session, summary in (
        ("ru", "«Поездка» в горы летом"),
        ("el", "Ταξίδι στην Θάλασσα…"),
        ("fr", "Un café—vite à la gare, Élodie"),
    ):
        manager.save_message(session, Message(role="user", content="hello"))
        manager.store.run(ops.update_session(session, summary=summary))
    for word, session in (
        ("поездка", "ru"),
        ("Поездка", "ru"),
        ("летом", "ru"),
        ("θάλασσα", "el"),
        ("café", "fr"),
        ("vite", "fr"),
        ("Élodie", "fr"),
        ("élodie", "fr"),
    ):
        assert [s.id for s, _ in manager.search_summaries(word, top_k=3)] == [session], word


def test_capitalised_words_of_other_alphabets_are_found_by_keyword(manager: MemoryManager) -> None:
    """A capital outside ASCII is lowered in the index as the query is (PostgreSQL in a "C"
    locale lowers only ASCII, so "Москву" was never found there); SQLite is the control."""
    said = {
        "Поездка в Москву летом": ("Москву", "москву", "Поездка"),
        "Ταξίδι στην Αθήνα": ("Αθήνα", "αθήνα"),
        "Ärger mit Österreich": ("Ärger", "österreich"),
        "Était-ce à Paris": ("Était", "était"),
    }
    for text in said:
        manager.save_message("s", Message(role="user", content=text), user_id="u")
    manager.add_fact("u", "Живёт в Санкт-Петербурге")
    manager.flush()
    for text, queries in said.items():
        for query in queries:
            hits = manager.store.keyword_search(query, limit=1)
            assert [h.message.content for h in hits] == [text], query
    for query in ("Санкт", "петербурге"):
        assert _fact(manager, query) == ["Живёт в Санкт-Петербурге"], query
