"""How fast an oversized field is refused, beside what storing it would cost.

For each bounded field (a message's ``tool_calls``, ``metadata`` and ``content``, a session's
``metadata`` and ``system_prompt``, a LangGraph store value) a value of ``--mb`` megabytes is
passed to the public call that stores it, on a SQLite file with semantic memory off. With the
default limits it is refused (``InputTooLargeError``): the time to refuse is what is measured.
With ``--accept`` the same call is timed again with the limits raised above the value
(``set_limits``), which is what the call cost before fields were bounded, and the ratio is
printed. Run ``python benchmarks/bench_limits.py --help``.
"""

# ruff: noqa: E402  (imports follow the sys.path guard below)
from __future__ import annotations

import os
import sys

# Run as a script, this folder is sys.path[0]; a sibling benchmark named like a stdlib module
# (threading.py) must not shadow the standard library.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]

import argparse
import dataclasses
import platform
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harombe_core import InputTooLargeError, Limits, MemoryManager, set_limits


def cases(blob: str) -> dict[str, Callable[[MemoryManager], Any]]:
    """The public call that stores each bounded field, given a value of that size."""
    from langchain_harombe.store import HarombeStore

    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": blob}}
    return {
        "message tool_calls": lambda mm: mm.save_message(
            "s", {"role": "assistant", "content": "", "tool_calls": [call]}
        ),
        "message metadata": lambda mm: mm.save_message(
            "s", {"role": "user", "content": "x", "metadata": {"blob": blob}}
        ),
        "message content": lambda mm: mm.save_message("s", {"role": "user", "content": blob}),
        "session metadata": lambda mm: mm.create_session(metadata={"blob": blob}),
        "session system_prompt": lambda mm: mm.create_session(system_prompt=blob),
        "LangGraph store value": lambda mm: HarombeStore(mm).put(("ns",), "k", {"blob": blob}),
    }


def timed(fn: Callable[[], Any], repeat: int) -> tuple[float, str]:
    """Median seconds of ``repeat`` calls, and what the call did."""
    times: list[float] = []
    outcome = "stored"
    for _ in range(repeat):
        start = time.perf_counter()
        try:
            fn()
            outcome = "stored"
        except InputTooLargeError:
            outcome = "refused"
        times.append(time.perf_counter() - start)
    return statistics.median(times), outcome


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=float, default=50.0, help="Size of each value, in MB.")
    parser.add_argument("--repeat", type=int, default=5, help="Refusals timed per field.")
    parser.add_argument(
        "--accept",
        action="store_true",
        help="Also time storing the value with the limits raised (slow: tokenising 50 MB of "
        "tool calls takes tens of seconds).",
    )
    args = parser.parse_args()
    blob = "x" * int(args.mb * 1_000_000)
    print(f"python {platform.python_version()}, {platform.machine()}, value {args.mb:g} MB")
    print(f"{'field':<24} {'refused in':>12} {'stored in':>12} {'ratio':>10}")
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "limits.db"
        with MemoryManager(path, embedding=None) as mm:
            for name, call in cases(blob).items():
                refused, outcome = timed(lambda call=call: call(mm), args.repeat)
                assert outcome == "refused", f"{name} was not refused"
                stored_text, ratio = "-", "-"
                if args.accept:
                    huge = len(blob) * 2
                    sizes = {f.name: huge for f in dataclasses.fields(Limits)}
                    previous = set_limits(**{k: v for k, v in sizes.items() if k != "json_depth"})
                    try:
                        stored, outcome = timed(lambda call=call: call(mm), 1)
                    finally:
                        set_limits(**dataclasses.asdict(previous))
                    assert outcome == "stored"
                    stored_text = f"{stored:.3f} s"
                    ratio = f"{stored / refused:,.0f}x"
                print(f"{name:<24} {refused * 1e6:>9.1f} us {stored_text:>12} {ratio:>10}")


if __name__ == "__main__":
    main()
