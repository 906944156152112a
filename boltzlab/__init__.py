"""Boltzmann Lab: watch Boltzmann machines learn, live in the browser, in Jupyter or headless.

One import package with two halves, kept in the repository's ``engine/`` and ``dashboard/``
folders and mapped here by setuptools' ``package-dir``:

- :mod:`boltzlab.engine`: models, trainers and numba kernels; never imports a UI library.
- :mod:`boltzlab.dashboard`: the Panel labs, the server and the ``boltzlab`` command line.

``python -m boltzlab`` runs the command line.
"""

import os
from importlib.metadata import PackageNotFoundError, version

# In a source tree (this folder beside engine/ and dashboard/, as in the repository) the two
# halves are found there too, so a checkout on sys.path imports them as boltzlab.engine and
# boltzlab.dashboard, the same files an editable install maps: never a second copy.
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if os.path.isfile(os.path.join(_ROOT, "engine", "__init__.py")):
    __path__.append(_ROOT)

try:
    __version__ = version("boltzlab")
except PackageNotFoundError:  # a source tree that was never installed
    __version__ = "0+unknown"

__all__ = ["__version__"]
