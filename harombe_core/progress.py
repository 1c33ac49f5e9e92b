"""Progress of long operations: a bar for people, a callback for programs.

Every ``progress`` argument of the library takes one of:

* ``True``: a tqdm bar on stderr (a widget in a notebook);
* ``False``: nothing;
* ``None`` (where it is the default): a bar only when someone is watching (stderr is a
  terminal) and the work is long enough to wait for, so scripts, servers and tests stay quiet;
* a callable ``progress(done, total)``: called as the work advances, for an application's own
  display or log.

Work may advance on more than one thread (the background embedder and the caller both embed
during ``flush()``), so updates are serialised here.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from harombe_core.errors import InvalidInputError

__all__ = ["Progress", "check_progress", "progress_reporter", "silent"]

#: What a ``progress`` argument may be (see the module docstring).
Progress = bool | Callable[[int, int], None] | None


def check_progress(progress: Any) -> Progress:
    """``progress`` itself if it is one of the accepted kinds, else InvalidInputError."""
    if progress is None or isinstance(progress, bool) or callable(progress):
        return progress
    raise InvalidInputError(
        f"progress must be True, False, None or a callable progress(done, total), got "
        f"{progress!r:.80}."
    )


def _watched() -> bool:
    isatty = getattr(sys.stderr, "isatty", None)
    return bool(isatty and isatty())


def silent(progress: Progress) -> bool:
    """True when ``progress`` will show nothing whatever the total (so it need not be
    counted)."""
    return progress is False or (progress is None and not _watched())


@contextmanager
def progress_reporter(
    progress: Progress, total: int, *, desc: str, unit: str = "msg", auto_from: int = 0
) -> Iterator[Callable[[int], None]]:
    """A function ``advance(n)`` that reports ``n`` more units done, for the ``with`` block.

    ``auto_from``: with ``progress=None``, the bar is shown only when ``total`` reaches it
    (and stderr is a terminal).
    """
    progress = check_progress(progress)
    lock = threading.Lock()
    if callable(progress) and not isinstance(progress, bool):
        report = progress
        done = 0

        def advance(n: int) -> None:
            nonlocal done
            with lock:
                done += n
                report(min(done, total), total)

        yield advance
        return
    # Nothing to do is nothing to show: no empty bar, even with progress=True.
    show = total > 0 and (
        progress is True or (progress is None and total >= auto_from and _watched())
    )
    if not show:
        yield lambda n: None
        return
    from tqdm.auto import tqdm

    with tqdm(total=total, desc=desc, unit=unit, file=sys.stderr) as bar:

        def advance_bar(n: int) -> None:
            with lock:
                bar.update(min(n, max(total - bar.n, 0)))

        yield advance_bar
