"""Export sessions to files and import them back, losing nothing on the way.

Three formats:

``json``
    The unified chat-memory persistence format (``version``, ``metadata``, ``nodes`` with
    ``parent_id``, ``edges``), one session per document; a whole store is a bundle
    ``{"version", "metadata", "sessions": [...]}``. Every field of every message is kept, so it
    is the format for backups and for moving memory between machines.
``jsonl``
    The OpenAI chat fine-tuning format: one conversation per line, ``{"messages": [...]}`` with
    only the keys that format knows. What it has no place for (times, metadata, ids, threads,
    session fields) goes under a separate top-level ``"harombe"`` key, so a line is still valid
    fine-tuning data and importing it back restores everything.
``text``
    A readable transcript. Write-only.

The converters (:func:`session_to_dict`, :func:`session_from_dict`, :func:`session_to_openai`,
:func:`session_from_openai`, :func:`transcript`) are pure functions over
:class:`SessionRecord`, so anything holding messages in memory can reuse them; the store-facing
functions (:func:`export_store`, :func:`import_file`, ...) add file I/O and transactions.

An import is all or nothing. The file is validated completely before anything is written (a
file with one bad message anywhere changes nothing in the store), then written in one
transaction, so a failure or a killed process part-way leaves the store as it was and the same
import can be run again. Files are streamed a session at a time (:mod:`harombe_core.jsonstream`),
so a large export needs no more memory than its largest session.

The package's modules: ``records`` (:class:`SessionRecord` and the field checks every reader
shares), ``unified_json``, ``openai_jsonl`` and ``text`` (one per format), ``io`` (records to
and from text in any format), ``files`` (paths and atomic writes), ``transfer`` (the store
side: export, and all-or-nothing import) and ``hits`` (a search hit as the metadata of a
framework's document). Everything is importable from the package itself.
"""

from __future__ import annotations

from harombe_core.export.files import (
    iter_records,
    read_json,
    read_records,
    resolve_output_path,
    safe_filename,
    write_records,
    write_text,
)
from harombe_core.export.hits import hit_metadata
from harombe_core.export.io import dumps, loads
from harombe_core.export.openai_jsonl import session_from_openai, session_to_openai
from harombe_core.export.records import (
    EXPORT_FORMATS,
    EXTRAS_KEY,
    FORMAT_VERSION,
    ExportFormat,
    ImportResult,
    SessionRecord,
)
from harombe_core.export.text import describe_tool_call, transcript
from harombe_core.export.transfer import (
    aexport_store,
    aimport_file,
    export_store,
    export_to_directory,
    import_file,
    import_records,
    read_session,
)
from harombe_core.export.unified_json import (
    messages_from_dict,
    messages_to_dict,
    session_from_dict,
    session_to_dict,
)

__all__ = [
    "EXPORT_FORMATS",
    "EXTRAS_KEY",
    "FORMAT_VERSION",
    "ExportFormat",
    "ImportResult",
    "SessionRecord",
    "aexport_store",
    "aimport_file",
    "describe_tool_call",
    "dumps",
    "export_store",
    "export_to_directory",
    "hit_metadata",
    "import_file",
    "import_records",
    "iter_records",
    "loads",
    "messages_from_dict",
    "messages_to_dict",
    "read_json",
    "read_records",
    "read_session",
    "resolve_output_path",
    "safe_filename",
    "session_from_dict",
    "session_from_openai",
    "session_to_dict",
    "session_to_openai",
    "transcript",
    "write_records",
    "write_text",
]
