"""Pictures of a thread graph: PNG, SVG or PDF with matplotlib (imported only when one is drawn).

Mermaid text (:func:`harombe_core.chat_memory.to_mermaid`) needs a renderer; these files open
anywhere. The layout is a plain tree layout computed here (no graphviz needed): threads are laid
side by side in the order they started, each node under its parent, leaves spread evenly.
"""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any

import networkx as nx

from harombe_core.errors import InvalidInputError, MissingExtraError
from harombe_core.threads import node_of

__all__ = ["GRAPH_FORMATS", "MERMAID_SUFFIXES", "render_graph", "tree_layout"]

#: Picture formats :func:`render_graph` writes (matplotlib's own backends, no extra program).
GRAPH_FORMATS = ("png", "svg", "pdf")
#: File suffixes that mean Mermaid text rather than a picture.
MERMAID_SUFFIXES = ("mmd", "mermaid")
_COLOURS = {"user": "#a7c7e7", "assistant": "#cdb4f6"}


def tree_layout(graph: nx.DiGraph) -> dict[int, tuple[float, float]]:
    """Positions for a forest: ``y`` is minus the depth, ``x`` spreads leaves left to right."""
    positions: dict[int, tuple[float, float]] = {}
    next_x = 0.0

    def place(node_id: int, depth: int) -> float:
        nonlocal next_x
        children = sorted(graph.successors(node_id))
        if not children:
            x = next_x
            next_x += 1.0
        else:
            xs = [place(child, depth + 1) for child in children]
            x = sum(xs) / len(xs)
        positions[node_id] = (x, -float(depth))
        return x

    roots = sorted(n for n in graph.nodes if graph.in_degree(n) == 0)
    for root in roots:
        place(root, 0)
        next_x += 0.5  # a gap between threads
    return positions


def _label(graph: nx.DiGraph, node_id: int, max_chars: int) -> str:
    message = node_of(graph, node_id).message
    prefix = {"user": "H", "assistant": "A"}.get(message.role, "N")
    text = " ".join(message.content.split())
    if len(text) > max_chars:
        text = text[: max_chars - 1] + "…"
    return f"{prefix}{node_id}: {text}"


def render_graph(
    graph: nx.DiGraph,
    path: str | os.PathLike[str] | None = None,
    *,
    format: str | None = None,
    max_chars: int = 28,
    title: str | None = None,
) -> bytes:
    """Draw ``graph`` and return the image bytes; also write them to ``path`` if given.

    ``format`` is ``"png"``, ``"svg"`` or ``"pdf"`` (default: from ``path``'s suffix, else
    PNG). Raises MissingExtraError without matplotlib (``pip install 'harombe-memory[plot]'``),
    before anything is written.
    """
    fmt = (format or (Path(path).suffix.lstrip(".") if path is not None else "") or "png").lower()
    if fmt not in GRAPH_FORMATS:
        raise InvalidInputError(f"cannot draw {fmt!r}; use one of {', '.join(GRAPH_FORMATS)}.")
    try:
        import matplotlib

        matplotlib.use("Agg", force=False)
        from matplotlib.figure import Figure
    except ImportError as exc:
        raise MissingExtraError("drawing thread graphs", "plot", "matplotlib") from exc

    positions = tree_layout(graph)
    xs = [p[0] for p in positions.values()] or [0.0]
    ys = [p[1] for p in positions.values()] or [0.0]
    width = min(max(4.0, (max(xs) - min(xs) + 1) * 1.9), 60.0)
    height = min(max(3.0, (max(ys) - min(ys) + 1) * 0.9), 60.0)
    figure = Figure(figsize=(width, height))
    axes: Any = figure.subplots()
    axes.set_axis_off()
    for parent, child in graph.edges:
        (x0, y0), (x1, y1) = positions[parent], positions[child]
        axes.annotate(
            "",
            xy=(x1, y1 + 0.18),
            xytext=(x0, y0 - 0.18),
            arrowprops={"arrowstyle": "->", "color": "#555555", "lw": 0.8},
        )
    for node_id, (x, y) in positions.items():
        role = node_of(graph, node_id).message.role
        axes.text(
            x,
            y,
            _label(graph, node_id, max_chars),
            ha="center",
            va="center",
            fontsize=7,
            wrap=True,
            bbox={
                "boxstyle": "round,pad=0.3",
                "facecolor": _COLOURS.get(role, "#e0e0e0"),
                "edgecolor": "#333333",
                "linewidth": 0.6,
            },
        )
    axes.set_xlim(min(xs) - 0.8, max(xs) + 0.8)
    axes.set_ylim(min(ys) - 0.6, max(ys) + 0.6)
    if title:
        axes.set_title(title, fontsize=9)
    buffer = io.BytesIO()
    # No creation date in the file, so the same graph always gives the same bytes.
    metadata = {"svg": {"Date": None}, "pdf": {"CreationDate": None}}.get(fmt)
    figure.savefig(buffer, format=fmt, bbox_inches="tight", metadata=metadata)
    data = buffer.getvalue()
    if path is not None:
        target = Path(path).expanduser()
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    return data
