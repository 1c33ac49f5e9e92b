"""Read a large JSON or JSONL file one value at a time, so memory follows the largest value.

An export of a whole store is one JSON document whose ``"sessions"`` list can run to hundreds
of megabytes; ``json.load`` would hold all of it, several times over as Python objects, before
the first session could be checked. :func:`json_parts` walks the document's outer object (or
array) itself and hands each element of one chosen list to the caller as soon as it is parsed.
Each value is parsed by the standard library's own decoder (``JSONDecoder.raw_decode``), so
what is accepted, and how numbers and strings come out, is exactly what ``json.loads`` gives.

:func:`jsonl_values` reads JSON Lines a line at a time, splitting on ``"\\n"`` only (U+2028 and
friends may sit unescaped inside a JSON string), and :func:`sniff` tells the two apart without
reading more than the first line.

Errors are :class:`~harombe_core.errors.ImportFormatError` naming the line and column (or the
byte that is not UTF-8), as ``json.loads`` would.
"""

from __future__ import annotations

import codecs
import json
import re
from collections.abc import Iterator
from typing import IO, Any, Literal, NamedTuple

from harombe_core.errors import ImportFormatError

__all__ = ["JsonPart", "json_document", "json_parts", "jsonl_values", "sniff"]

_CHUNK = 1 << 20
_BOM = codecs.BOM_UTF8
_WHITESPACE = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()
#: How close to the end of what has been read a value, or a decoding error, must be to mean
#: "read more": a value cut short ends (or fails) at the cut, give or take a partial number,
#: literal or escape.
_CUT_MARGIN = 32
#: Why a value that parses as JSON text still cannot be read: nested deeper than Python's
#: stack allows, or an integer longer than Python will convert.
_TOO_DEEP = "nested too deeply to read; harombe stores at most json_depth levels"


class JsonPart(NamedTuple):
    """One piece of a document: the value of a top-level ``key`` (``position`` None), or the
    element at ``position`` of the streamed list under ``key`` or of a top-level list (``key``
    None). A document that is neither an object nor a list, or an empty list, comes whole
    with both None."""

    key: str | None
    position: int | None
    value: Any


class _Buffer:
    """Decoded text of a binary file, read a chunk at a time, with a read position."""

    def __init__(self, handle: IO[bytes]) -> None:
        self._handle = handle
        self._decoder = codecs.getincrementaldecoder("utf-8")()
        self._bytes = 0
        self._started = False
        self.text = ""
        self.pos = 0
        self.eof = False
        self._line = 1  # line number of text[0]
        self._column = 0  # 0-based column of text[0]

    def more(self, at_least: int = 0) -> bool:
        """Read another chunk (at least ``at_least`` bytes); False at the end of the file."""
        if self.eof:
            return False
        data = self._handle.read(max(_CHUNK, at_least))
        try:
            text = self._decoder.decode(data, final=not data)
        except UnicodeDecodeError as exc:
            raise ImportFormatError(
                f"not UTF-8 text (byte {self._bytes + exc.start}); it is not a harombe export."
            ) from None
        self._bytes += len(data)
        if not data:
            self.eof = True
        if not self._started and (text or self.eof):
            self._started = True
            text = text.removeprefix("\ufeff")
        self._forget_read()
        self.text += text
        return bool(data)

    def _forget_read(self) -> None:
        """Drop the text before the read position, keeping count of lines and columns."""
        if not self.pos:
            return
        done = self.text[: self.pos]
        newlines = done.count("\n")
        if newlines:
            self._line += newlines
            self._column = self.pos - done.rfind("\n") - 1
        else:
            self._column += self.pos
        self.text = self.text[self.pos :]
        self.pos = 0

    def peek(self) -> str | None:
        """The next character that is not JSON whitespace (not consumed), None at the end."""
        while True:
            self.pos = _WHITESPACE.match(self.text, self.pos).end()  # type: ignore[union-attr]
            if self.pos < len(self.text):
                return self.text[self.pos]
            if not self.more():
                return None

    def value(self) -> Any:
        """Parse the JSON value at the read position, reading more of the file as needed."""
        while True:
            try:
                value, end = _DECODER.raw_decode(self.text, self.pos)
            except RecursionError:
                raise self.error(_TOO_DEEP, self.pos) from None
            except json.JSONDecodeError as exc:
                cut = exc.msg.startswith("Unterminated string") or (
                    exc.pos >= len(self.text) - _CUT_MARGIN
                )
                if self.eof or not cut:
                    raise self.error(exc.msg, exc.pos) from None
            except ValueError as exc:  # an integer too long to convert
                raise self.error(str(exc).split(";")[0], self.pos) from None
            else:
                # A number that ends near the end of the text read may go on in the next chunk
                # ("1" of "1.5e3"); anything else that ends there is whole, but cheap to reread.
                if self.eof or end < len(self.text) - _CUT_MARGIN:
                    self.pos = end
                    return value
            self.more(len(self.text) - self.pos)  # doubles what is held: linear overall

    def error(self, problem: str, pos: int) -> ImportFormatError:
        line = self._line + self.text.count("\n", 0, pos)
        start = self.text.rfind("\n", 0, pos)
        column = pos - start if start >= 0 else self._column + pos + 1
        return ImportFormatError(f"not valid JSON ({problem} at line {line}, column {column}).")

    def expect(self, char: str, problem: str) -> None:
        if self.peek() != char:
            raise self.error(problem, self.pos)
        self.pos += 1


def _array(buffer: _Buffer, key: str | None) -> Iterator[JsonPart]:
    buffer.expect("[", "Expecting '['")
    if buffer.peek() == "]":
        buffer.pos += 1
        yield JsonPart(key, None, [])  # so the list is seen even though it has no element
        return
    index = 0
    while True:
        buffer.peek()
        yield JsonPart(key, index, buffer.value())
        index += 1
        if buffer.peek() == "]":
            buffer.pos += 1
            return
        buffer.expect(",", "Expecting ',' delimiter")


def _object(buffer: _Buffer, stream: str) -> Iterator[JsonPart]:
    buffer.expect("{", "Expecting '{'")
    if buffer.peek() == "}":
        buffer.pos += 1
        return
    streamed = False
    while True:
        if buffer.peek() != '"':
            raise buffer.error("Expecting property name enclosed in double quotes", buffer.pos)
        key = buffer.value()
        buffer.expect(":", "Expecting ':' delimiter")
        if key == stream and buffer.peek() == "[":
            if streamed:
                raise buffer.error(f'"{stream}" appears twice', buffer.pos)
            streamed = True
            yield from _array(buffer, key)
        else:
            buffer.peek()
            yield JsonPart(key, None, buffer.value())
        if buffer.peek() == "}":
            buffer.pos += 1
            return
        buffer.expect(",", "Expecting ',' delimiter")


def json_parts(handle: IO[bytes], stream: str) -> Iterator[JsonPart]:
    """The parts of the JSON document in ``handle``, the elements of list ``stream`` one by one.

    A top-level object gives each key's value whole, except a non-empty list under the key
    ``stream``, whose elements come one at a time; a top-level non-empty list gives its
    elements one at a time; any other value comes whole. Nothing but whitespace may follow the
    document.
    """
    buffer = _Buffer(handle)
    first = buffer.peek()
    if first == "{":
        yield from _object(buffer, stream)
    elif first == "[":
        yield from _array(buffer, None)
    elif first is not None:
        yield JsonPart(None, None, buffer.value())
    else:
        raise buffer.error("Expecting value", buffer.pos)
    if buffer.peek() is not None:
        raise buffer.error("Extra data", buffer.pos)


def json_document(handle: IO[bytes]) -> Any:
    """The one JSON value in ``handle``, whole (for small files); nothing may follow it."""
    buffer = _Buffer(handle)
    if buffer.peek() is None:
        raise buffer.error("Expecting value", buffer.pos)
    value = buffer.value()
    if buffer.peek() is not None:
        raise buffer.error("Extra data", buffer.pos)
    return value


def jsonl_values(handle: IO[bytes]) -> Iterator[tuple[int, Any]]:
    """(line number, value) for each non-blank line of a JSON Lines file."""
    for number, raw in enumerate(handle, start=1):
        if number == 1:
            raw = raw.removeprefix(_BOM)
        try:
            line = raw.decode("utf-8").strip(" \t\r\n")
        except UnicodeDecodeError as exc:
            raise ImportFormatError(
                f"line {number}: not UTF-8 text (byte {exc.start} of the line); it is not a "
                "harombe export."
            ) from None
        if not line:
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ImportFormatError(
                f"line {number}: not valid JSON ({exc.msg} at column {exc.colno})."
            ) from None
        except RecursionError:
            raise ImportFormatError(f"line {number}: not valid JSON ({_TOO_DEEP}).") from None
        except ValueError as exc:  # an integer too long to convert
            raise ImportFormatError(
                f"line {number}: not valid JSON ({str(exc).split(';')[0]})."
            ) from None
        yield number, value


def sniff(handle: IO[bytes]) -> Literal["empty", "json", "jsonl"]:
    """Whether ``handle`` (a seekable binary file, at its start) holds only whitespace, one JSON
    document, or JSON Lines; it is left at its start.

    JSON Lines is a first non-blank line that is a whole JSON object, with more after it; a
    document spread over lines, or alone on its line, is JSON. Only that line is ever held whole.
    """
    offset = 0  # bytes before the current chunk
    line_start = 0  # where the first non-blank line starts
    first = last = b""
    first_line_done = more = False
    chunk = handle.read(_CHUNK)
    if chunk.startswith(_BOM):
        chunk, offset, line_start = chunk[len(_BOM) :], len(_BOM), len(_BOM)
    while chunk and not more:
        pos = 0
        while not first_line_done and pos < len(chunk):
            newline = chunk.find(b"\n", pos)
            end = len(chunk) if newline < 0 else newline
            text = chunk[pos:end].strip()
            if text:
                first, last = first or text[:1], text[-1:]
            if newline < 0:
                pos = len(chunk)
            elif first:
                first_line_done, pos = True, newline + 1
            else:
                line_start, pos = offset + newline + 1, newline + 1
        more = first_line_done and bool(chunk[pos:].strip())
        offset += len(chunk)
        chunk = handle.read(_CHUNK)
    handle.seek(0)
    if not first:
        return "empty"
    if first != b"{" or last != b"}" or not more:
        return "json"
    handle.seek(line_start)  # it looks like JSON Lines; it is if the first line parses alone
    line = handle.readline()
    handle.seek(0)
    try:
        json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return "json"
    return "jsonl"
