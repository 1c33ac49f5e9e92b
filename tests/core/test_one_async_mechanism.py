"""One async mechanism: blocking work reaches a worker thread only through ``flows.off_loop``.

Sync and async twins are one flow driven by ``drive`` / ``adrive`` (``harombe_core.flows``);
work with no async form takes the flows' one thread hop, ``off_loop`` (``Call``/``Work`` on
the async path, and below the flows the store's SQLite hop, the drain of owed rows and the
embedders' CPU work). A second way to run work in a thread beside it (``asyncio.to_thread``,
``loop.run_in_executor``, a private ``ThreadPoolExecutor``) is what this test keeps out.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("harombe_core", "langchain_harombe", "llamaindex_harombe")
#: The one place allowed to hand work to threads: the flows (off_loop, and Parallel's pool).
MECHANISM = "harombe_core/flows.py"
#: Modules still being moved onto the flows; entries may only be removed.
NOT_YET: set[str] = set()
THREAD_HOPS = {"to_thread", "run_in_executor", "ThreadPoolExecutor"}


def _hops(path: Path) -> list[str]:
    """Each use of a thread-hop API in ``path``, as ``name:line``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    for node in ast.walk(tree):
        name = (
            node.attr
            if isinstance(node, ast.Attribute)
            else node.id
            if isinstance(node, ast.Name)
            else None
        )
        if name in THREAD_HOPS:
            found.append(f"{name}:{node.lineno}")
    return found


def test_only_the_flows_run_work_in_threads() -> None:
    offenders = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            relative = path.relative_to(ROOT).as_posix()
            if relative == MECHANISM or relative in NOT_YET:
                continue
            hops = _hops(path)
            if hops:
                offenders[relative] = hops
    assert offenders == {}, (
        "run blocking work through a flow (drive/adrive with Work or Call) or "
        f"harombe_core.flows.off_loop, not a thread of its own: {offenders}"
    )


def test_the_flows_have_one_thread_hop() -> None:
    hops = [h for h in _hops(ROOT / MECHANISM) if h.startswith("to_thread")]
    assert len(hops) == 1, hops
