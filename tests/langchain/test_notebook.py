"""The LangChain quickstart notebook: committed with its outputs, written for the current API
(``create_agent`` with ``HarombeSaver``), and it runs top to bottom (fake chat models, bundled
embeddings)."""

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


def test_the_notebook_is_committed_with_outputs_and_current_apis() -> None:
    """A reader on the repository page sees results, and starts from create_agent."""
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    # Every cell but the first (imports and a helper) shows what it did.
    assert all(cell.outputs for cell in code[1:]), "a code cell is committed without its output"
    assert not any(o.get("output_type") == "error" for cell in code for o in cell.outputs)
    source = "\n".join(cell.source for cell in notebook.cells)
    for needed in ("create_agent", "HarombeSaver", "HarombeMemoryMiddleware", "HarombeStore"):
        assert needed in source
    assert "RunnableWithMessageHistory" not in source
    assert "pip install -e '.[onnx,langchain]'" in notebook.cells[0].source
