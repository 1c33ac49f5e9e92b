"""The streaming JSON reader gives what ``json.loads`` gives, whatever the chunk boundaries,
and an export is read a session at a time."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harombe_core import export as ex
from harombe_core import jsonstream
from harombe_core.errors import ImportFormatError
from harombe_core.jsonstream import json_parts, jsonl_values, sniff

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4)
    ),
    max_leaves=20,
)
documents = st.one_of(
    values,
    st.fixed_dictionaries(
        {"version": st.just("1.0"), "sessions": st.lists(values, max_size=5)},
        optional={"metadata": values, "tail": values},
    ),
)


def _rebuild(raw: bytes) -> Any:
    """The document put back together from its parts."""
    top: dict[str, Any] = {}
    listed: list[Any] = []
    whole: list[Any] = []
    for key, position, value in json_parts(io.BytesIO(raw), "sessions"):
        if key is None:
            (whole if position is None else listed).append(value)
        elif position is None:
            top[key] = value
        else:
            top.setdefault(key, []).append(value)
    return whole[0] if whole else listed if listed else top


@settings(max_examples=200, deadline=None)
@given(
    document=documents,
    chunk=st.integers(min_value=1, max_value=64),
    indent=st.sampled_from([None, 1]),
    ascii_only=st.booleans(),
)
def test_parts_rebuild_exactly_what_json_loads_reads(
    document: Any, chunk: int, indent: int | None, ascii_only: bool
) -> None:
    raw = json.dumps(document, indent=indent, ensure_ascii=ascii_only).encode()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(jsonstream, "_CHUNK", chunk)
        assert _rebuild(raw) == json.loads(raw)


@settings(max_examples=200, deadline=None)
@given(
    text=st.text(alphabet='{}[]",:0123456789.eE+-truefalsn \n\\u', max_size=40),
    chunk=st.integers(min_value=1, max_value=16),
)
def test_invalid_json_is_refused_as_json_loads_refuses_it(text: str, chunk: int) -> None:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(jsonstream, "_CHUNK", chunk)
        try:
            expected = json.loads(text)
        except json.JSONDecodeError:
            with pytest.raises(ImportFormatError, match="not valid JSON"):
                _rebuild(text.encode())
        else:
            assert _rebuild(text.encode()) == expected


@pytest.mark.parametrize(
    ("raw", "where"),
    [
        (b'{"a": [1, 2,]}', "line 1, column 13"),
        (b'{\n  "a": 1,\n  "b": tru\n}', "line 3, column 8"),
        (b'{"a": 1} extra', "line 1, column 10"),
    ],
)
def test_errors_name_line_and_column_like_json(
    raw: bytes, where: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(jsonstream, "_CHUNK", 3)
    with pytest.raises(ImportFormatError, match=where):
        list(json_parts(io.BytesIO(raw), "sessions"))


def test_bad_utf8_names_the_byte() -> None:
    with pytest.raises(ImportFormatError, match=r"not UTF-8 text \(byte 7\)"):
        list(json_parts(io.BytesIO(b'{"a": "\xff"}'), "sessions"))
    with pytest.raises(ImportFormatError, match="line 2: not UTF-8"):
        list(jsonl_values(io.BytesIO(b'{"a": 1}\n{"b": "\xff"}\n')))


@pytest.mark.parametrize(
    ("raw", "kind"),
    [
        (b"", "empty"),
        (b" \n\t\n", "empty"),
        (b'{"messages": []}', "json"),
        (b'{"messages": []}\n{"messages": []}\n', "jsonl"),
        (b'\xef\xbb\xbf\n\n{"messages": []}\n{"messages": []}', "jsonl"),
        (b'{\n  "version": "1.0"\n}\n', "json"),
        (b'{"a": {"b": 1}\n, "c": 2}', "json"),  # a first line that only looks whole
        (b"[1, 2]\n[3]", "json"),
        (b"not json", "json"),
    ],
)
def test_sniff(raw: bytes, kind: str) -> None:
    handle = io.BytesIO(raw)
    assert sniff(handle) == kind
    assert handle.tell() == 0


def test_an_export_is_read_a_session_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first sessions of a bundle arrive before the rest of the file has been read: a bad
    session near the end is only seen when reading gets there."""
    monkeypatch.setattr(jsonstream, "_CHUNK", 1 << 16)
    good = {"version": "1.0", "nodes": [{"role": "user", "content": "fine " * 100}]}
    bad = {"version": "1.0", "nodes": [{"role": "robot", "content": "x"}]}
    bundle = {"version": "1.0", "metadata": {}, "sessions": [good] * 3000 + [bad]}
    path = tmp_path / "big.json"
    path.write_text(json.dumps(bundle, indent=2), encoding="utf-8")
    assert path.stat().st_size > 4 * jsonstream._CHUNK
    records = ex.iter_records(path)
    first = next(records)
    assert first.messages[0].content.startswith("fine")
    with pytest.raises(ImportFormatError, match=r"big.json: sessions\[3000\].*unknown role"):
        for _ in records:
            pass


def test_version_after_the_sessions_is_still_checked(tmp_path: Path) -> None:
    session = {"version": "1.0", "nodes": [{"role": "user", "content": "hi"}]}
    path = tmp_path / "late.json"
    path.write_text(json.dumps({"sessions": [session], "version": "1.0"}), encoding="utf-8")
    assert [r.messages[0].content for r in ex.iter_records(path)] == ["hi"]
    path.write_text(json.dumps({"sessions": [session], "version": "9.0"}), encoding="utf-8")
    with pytest.raises(ImportFormatError, match=r"version '9\.0' is not supported"):
        list(ex.iter_records(path))
    path.write_text(json.dumps({"version": "1.0", "sessions": []}), encoding="utf-8")
    assert list(ex.iter_records(path)) == []
