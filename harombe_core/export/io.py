"""Records to and from text in any format, streamed a session at a time from a file handle
(:mod:`harombe_core.jsonstream`), so a large export needs no more memory than its largest
session.
"""

from __future__ import annotations

import io
import itertools
import json
from collections.abc import Iterable, Iterator, Sequence
from typing import IO, Any

from harombe_core.errors import (
    ImportFormatError,
    InvalidInputError,
)
from harombe_core.export.openai_jsonl import (
    facts_line,
    line_facts,
    session_from_openai,
    session_to_openai,
)
from harombe_core.export.records import EXPORT_FORMATS, SessionRecord, check_version, place_facts
from harombe_core.export.text import facts_transcript, transcript
from harombe_core.export.unified_json import (
    bundle_to_dict,
    records_from_json,
    session_from_dict,
    session_to_dict,
)
from harombe_core.jsonstream import JsonPart, json_parts, jsonl_values, sniff

__all__ = ["check_format", "dumps", "loads", "read_handle"]


def dumps(
    records: Sequence[SessionRecord],
    fmt: str = "json",
    *,
    bundle: bool | None = None,
    facts: Sequence[Any] = (),
) -> str:
    """Records as the text of an export file in ``fmt`` (``json``, ``jsonl`` or ``text``).

    JSON of a single record is one session document unless ``bundle=True``; several records are
    always a bundle. ``facts`` (user memory, ``Fact.to_dict()`` records) are carried by every
    format: under a bundle's (or a lone session document's) ``"facts"``, under the
    ``"harombe"`` key of a JSONL line of their user, and as a section of the text.
    """
    fmt = check_format(fmt)
    if fmt == "jsonl":
        placed, left = place_facts([(r.session_id, r.user_id) for r in records], facts)
        lines = [session_to_openai(r, f) for r, f in zip(records, placed, strict=True)]
        if left:
            lines.append(facts_line(left))
        return "".join(
            json.dumps(line, ensure_ascii=False, allow_nan=False) + "\n" for line in lines
        )
    if fmt == "text":
        return "\n".join([*(transcript(r) for r in records), *facts_transcript(facts)])
    if bundle is None:
        bundle = len(records) != 1
    if bundle:
        data = bundle_to_dict(records, facts)
    else:
        data = session_to_dict(records[0])
        if facts:
            data["facts"] = [dict(f) for f in facts]
    return json.dumps(data, ensure_ascii=False, allow_nan=False, indent=2) + "\n"


def loads(text: str, fmt: str | None = None) -> list[SessionRecord]:
    """Parse and validate the text of an export (format sniffed unless ``fmt`` is given)."""
    try:
        raw = text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ImportFormatError(
            f"the text is not valid Unicode ({exc.reason} at character {exc.start})."
        ) from None
    return list(read_handle(io.BytesIO(raw), fmt))


def read_handle(
    handle: IO[bytes], fmt: str | None, extras: dict[str, Any] | None = None
) -> Iterator[SessionRecord]:
    """Validated records from an export file, one at a time (see :func:`iter_records`).

    ``extras`` (when given) receives, once every record has been read, what a store's export
    carries besides its sessions: ``"facts"``, the user-memory facts (a list, maybe empty)."""
    if fmt is not None and check_format(fmt) == "text":
        raise ImportFormatError("text transcripts cannot be imported; export as json or jsonl.")
    kind = sniff(handle)
    if kind == "empty":
        return  # what an export of an empty store writes in JSONL
    if (fmt or kind) == "jsonl":
        facts: list[Any] = []
        for number, data in jsonl_values(handle):
            carried, alone = line_facts(data, f"line {number}")
            facts += carried
            if not alone:
                yield session_from_openai(data, where=f"line {number}")
        if extras is not None:
            extras["facts"] = facts
        return
    parts = json_parts(handle, "sessions")
    try:
        first = next(parts, None)
    except ImportFormatError as exc:
        if fmt is None and str(exc).startswith("not valid JSON"):
            raise ImportFormatError(
                f"not a JSON or JSONL file ({str(exc).partition('(')[2].rstrip('.')}; harombe "
                "imports the json and jsonl files that `harombe export` writes."
            ) from None
        raise
    yield from _records_from_parts(
        parts if first is None else itertools.chain([first], parts), extras
    )


def _records_from_parts(
    parts: Iterable[JsonPart], extras: dict[str, Any] | None = None
) -> Iterator[SessionRecord]:
    """Records from the parts of a JSON document; a bundle's sessions one at a time."""
    top: dict[str, Any] = {}
    whole: list[Any] = []  # an empty list, or a document that is not an object or a list
    listed = streamed = checked = False
    for key, index, value in parts:
        if index is None:
            if key is None:
                whole.append(value)
            else:
                top[key] = value
            continue
        if key is None:  # a list of session documents
            listed = True
        else:  # a bundle: its version first (if it came before the sessions)
            streamed = True
            if not checked and "version" in top:
                check_version(top, "file")
                checked = True
        yield session_from_dict(value, where=f"sessions[{index}]")
    if streamed and not checked:
        check_version(top, "file")
    carried, alone = line_facts(top, "file")  # a one-line JSONL export reads as JSON
    if whole:
        yield from records_from_json(whole[0])
    elif not (listed or streamed or alone):
        yield from records_from_json(top)
    if extras is not None:
        facts = top.get("facts") or carried
        if not isinstance(facts, list):
            raise ImportFormatError('"facts" must be a list of fact records.')
        extras["facts"] = facts


def check_format(fmt: str) -> str:
    if fmt not in EXPORT_FORMATS:
        raise InvalidInputError(
            f"unknown export format {fmt!r}; use one of {', '.join(EXPORT_FORMATS)}."
        )
    return fmt
