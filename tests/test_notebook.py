"""docs/notebooks/quickstart.ipynb runs top to bottom in a Jupyter kernel (issue 24 item 3).

nbclient starts a real ipykernel (the one `pip install -e ".[test]"` installs), so the labs are
shown as cell outputs the way JupyterLab shows them, and the notebook's Play cell checks that
a lab's page moves while it trains (the tick of a lab rendered in a notebook).  Any cell that
raises fails the test.  The kernel imports this checkout's boltzlab (PYTHONPATH is the
repository root) and writes the notebook's figures into a temporary directory.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# nbclient (and with it nbformat) is in the test extra (pyproject's [project.optional-dependencies]
# test): a missing one is a broken test environment, so this module fails to import instead of
# skipping silently
import nbclient
import nbformat

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "docs" / "notebooks" / "quickstart.ipynb"
#: seconds one cell may take (a limit for a busy 2-core machine, not a measurement)
CELL_TIMEOUT = 600


@pytest.mark.slow
def test_the_quickstart_notebook_runs_top_to_bottom(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(notebook, timeout=CELL_TIMEOUT, kernel_name="python3",
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute()  # raises CellExecutionError, naming the cell, on any error
    errors = [out for cell in notebook.cells for out in cell.get("outputs", []) if out.get("output_type") == "error"]
    assert errors == []
    assert (tmp_path / "bound-race.html").stat().st_size > 0
    assert (tmp_path / "bound-race.png").stat().st_size > 0
    # every lab was shown as a Panel page (not as a repr: the extension was loaded)
    shown = [cell for cell in notebook.cells if cell.cell_type == "code"
             and any("application/vnd.holoviews_exec.v0+json" in out.get("data", {})
                     for out in cell.get("outputs", []))]
    assert len(shown) >= 4
