"""The quickstart notebook runs top to bottom with mock models (its cells assert what they show)."""

from __future__ import annotations

import os
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from pytest_socket import enable_socket

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "notebooks" / "llamaindex_quickstart.ipynb"


@pytest.fixture
def kernel_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    # The kernel talks to this process over local sockets; nothing leaves the machine.
    enable_socket()
    monkeypatch.setenv("PYTHONPATH", str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    monkeypatch.setenv("HAROMBE_NOTEBOOK_DIR", str(tmp_path))
    return tmp_path


def test_quickstart_notebook_executes(kernel_env: Path) -> None:
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    client = NotebookClient(
        notebook, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(ROOT)}}
    )
    client.execute()
    outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.outputs]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    printed = "".join(o.get("text", "") for o in outputs if o.get("output_type") == "stream")
    assert "3rd of May" in printed  # the recalled context is shown
    assert "It will be sunny and 24 degrees in Lisbon." in printed
    assert (kernel_env / "quickstart.db").exists()


def test_the_notebook_is_committed_with_outputs_and_says_what_to_install() -> None:
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    shown = [cell for cell in code if cell.outputs]
    assert len(shown) >= len(code) - 2, "the cells that show something are committed with it"
    assert not any(o.get("output_type") == "error" for cell in code for o in cell.outputs)
    assert "pip install -e '.[onnx,llamaindex]'" in notebook.cells[0].source
