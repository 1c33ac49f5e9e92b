"""The LangChain quickstart notebook runs top to bottom (fake chat models, bundled embeddings)."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "langchain_quickstart.ipynb"


@pytest.mark.timeout(300)
def test_quickstart_notebook_executes(tmp_path: Path) -> None:
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    client = NotebookClient(
        notebook,
        timeout=240,
        kernel_name="python3",
        resources={"metadata": {"path": str(tmp_path)}},
    )
    client.execute()
    outputs = "".join(
        out.get("text", "")
        for cell in notebook.cells
        if cell.cell_type == "code"
        for out in cell.get("outputs", [])
    )
    assert "You are Ann, and you love sailing." in outputs
    assert "tokens <= 100" in outputs
    assert "Lisbon" in outputs
    assert "tool result the model saw: Ann is allergic to peanuts" in outputs
