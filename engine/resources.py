"""Where the bundled data live: the package ``boltzlab.engine.assets``, found through importlib.resources.

The files stay in the repository's ``assets/`` folder (with ``assets/README.md``, their origin
and licence); ``pyproject.toml`` maps that folder to the package ``boltzlab.engine.assets``, so a
wheel or ``pip install .`` puts them at ``site-packages/engine/assets/`` and an editable
install (``pip install -e .``) finds them in the checkout.  Only a checkout run without any
install (``PYTHONPATH=. python -m boltzlab``) falls back to its ``assets/`` folder.
"""

from __future__ import annotations

import importlib.resources
from pathlib import Path

PACKAGE = "boltzlab.engine.assets"


def assets_dir() -> Path:
    """The folder of the bundled data sets, as a file-system path.

    ``RuntimeError`` if the package is installed in a form that has no such folder (a zip).
    """
    try:
        root = importlib.resources.files(PACKAGE)
    except ModuleNotFoundError:
        checkout = Path(__file__).resolve().parent.parent / "assets"  # a checkout, not installed
        if (checkout / "__init__.py").is_file():
            return checkout
        raise
    if not isinstance(root, Path):
        raise RuntimeError(f"The bundled data ({PACKAGE}) are not a folder on disk but {root!r}: "
                           "install boltzlab unpacked (pip install does).")
    return root


def asset(name: str) -> Path:
    """The path of one bundled file, e.g. ``asset("senate_knn1_imputed.csv")``."""
    return assets_dir() / name
