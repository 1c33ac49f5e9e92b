"""Where export files go and how they are read: safe file names, paths confined to their
folder, atomic writes (a crash leaves the old file or the new one, never half of one).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, Any

from harombe_core.errors import (
    ExportPathError,
    ImportFormatError,
)
from harombe_core.export.io import dumps, read_handle
from harombe_core.export.records import SessionRecord
from harombe_core.jsonstream import json_document

__all__ = [
    "iter_records",
    "read_json",
    "read_records",
    "resolve_output_path",
    "safe_filename",
    "write_records",
    "write_text",
]


def safe_filename(name: str, suffix: str = "") -> str:
    """A file name made from ``name`` that cannot leave its folder or hide (no ``/``, ``..``).

    Characters other than letters, digits, ``.``, ``_`` and ``-`` become ``_``; if anything had
    to change, a short hash of the original keeps two different names from colliding.
    """
    cleaned = re.sub(r"[^A-Za-z0-9._-]", "_", name).lstrip(".")[:100] or "session"
    if cleaned != name:
        cleaned += "-" + hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return cleaned + suffix


def resolve_output_path(
    out: str | os.PathLike[str], directory: str | os.PathLike[str] | None = None
) -> Path:
    """Where an export named ``out`` goes; inside ``directory`` when one is given.

    Raises :class:`ExportPathError` if the path (after ``..`` and symlinks are resolved) would
    leave ``directory``, names a folder, or its folder does not exist.
    """
    target = Path(out).expanduser()
    if directory is not None:
        base = Path(directory).expanduser().resolve()
        if not base.is_dir():
            raise ExportPathError(f"export folder {base} does not exist; create it first.")
        target = (base / target).resolve()
        if not target.is_relative_to(base) or target == base:
            raise ExportPathError(
                f"refusing to write {out!s}: it resolves to {target}, outside the export folder "
                f"{base}. Give a plain file name inside that folder."
            )
    if target.is_dir():
        raise ExportPathError(f"{target} is a folder; give a file name to write the export to.")
    if not target.parent.is_dir():
        raise ExportPathError(
            f"folder {target.parent} does not exist; create it or choose another path."
        )
    return target


def write_text(path: Path, text: str) -> Path:
    """Write ``text`` to ``path`` atomically: a reader sees the old file or the new, never half.

    The temporary file is renamed over ``path``, which replaces a symlink there rather than
    writing through it.
    """
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
                handle.write(text)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError as exc:
        raise ExportPathError(
            f"cannot write {path}: {exc.strerror or exc}. Choose another path."
        ) from exc
    return path


def write_records(
    records: Sequence[SessionRecord],
    out: str | os.PathLike[str],
    fmt: str = "json",
    *,
    directory: str | os.PathLike[str] | None = None,
    bundle: bool | None = None,
) -> Path:
    """Write records to a file (atomically; confined to ``directory`` when one is given)."""
    return write_text(resolve_output_path(out, directory), dumps(records, fmt, bundle=bundle))


def iter_records(
    path: str | os.PathLike[str], fmt: str | None = None, extras: dict[str, Any] | None = None
) -> Iterator[SessionRecord]:
    """Read and validate an export file a session at a time, without touching any store.

    The file is streamed: memory follows its largest session, not its size. ``extras``
    receives the bundle's user-memory facts once all is read (:func:`read_handle`). Raises
    :class:`ImportFormatError` naming the file and the line or node at fault.
    """
    with _export_file(path) as (file, handle):
        if not handle.seekable():
            raise ImportFormatError(
                f"{file} is not a regular file (a pipe?); an import reads its file twice (to "
                "check it, then to write it), so save the export to a file and import that."
            )
        yield from read_handle(handle, fmt, extras)


@contextlib.contextmanager
def _export_file(path: str | os.PathLike[str]) -> Iterator[tuple[Path, IO[bytes]]]:
    """The file at ``path`` opened for reading; every failure, opening it or reading it, is an
    ImportFormatError that names the file (and where in it)."""
    file = Path(path).expanduser()
    try:
        handle = file.open("rb")
    except FileNotFoundError:
        raise ImportFormatError(f"no file at {file}; check the path.") from None
    except IsADirectoryError:
        raise ImportFormatError(f"{file} is a folder; give the export file itself.") from None
    except OSError as exc:
        raise ImportFormatError(f"cannot read {file}: {exc.strerror or exc}.") from exc
    with handle:
        try:
            yield file, handle
        except ImportFormatError as exc:  # say which file, then where in it
            raise ImportFormatError(f"{file.name}: {exc}") from exc
        except OSError as exc:
            raise ImportFormatError(f"cannot read {file}: {exc.strerror or exc}.") from exc


def read_json(path: str | os.PathLike[str]) -> Any:
    """The JSON document in the file at ``path``, whole (a ChatMemory file, not a store's
    export); every failure is an ImportFormatError naming the file."""
    with _export_file(path) as (_, handle):
        return json_document(handle)


def read_records(path: str | os.PathLike[str], fmt: str | None = None) -> list[SessionRecord]:
    """Read and validate a whole export file without touching any store (see
    :func:`iter_records`, which holds one session at a time)."""
    return list(iter_records(path, fmt))
