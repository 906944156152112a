"""Boltzmann Lab behind a JupyterHub: the ``jupyter-server-proxy`` entry point.

With ``jupyter-server-proxy`` installed next to ``boltzlab`` in a user's Jupyter server,
``<the user's server>/boltzlab/`` starts ``boltzlab serve`` on the first visit and proxies to
it, behind the hub's login (only the user who owns the Jupyter server gets through), and
JupyterLab's launcher shows a *Boltzmann Lab* tile.  pyproject.toml declares it::

    [project.entry-points.jupyter_serverproxy_servers]
    boltzlab = "boltzlab.dashboard.jupyter:setup_boltzlab"

The proxy keeps the whole path (``absolute_url``), so the app is served under the same path
(``--prefix {base_url}boltzlab``), and its websocket is opened from the hub's address, which
is not known here (``--allow-websocket-origin *``: the proxy has already checked the login).
See docs/serving.md, "Behind JupyterHub".
"""

from __future__ import annotations

import sys
from typing import Any

#: the path under the user's Jupyter server (the entry point's name)
NAME = "boltzlab"
#: seconds jupyter-server-proxy waits for the first answer: ``serve`` listens before its
#: kernels compile (dashboard/startup.py), but a cold Python on a busy node is slow to import
TIMEOUT = 120


def setup_boltzlab() -> dict[str, Any]:
    """The server-process settings jupyter-server-proxy reads (its "Server Process options").

    ``{port}`` and ``{base_url}`` (the user's server path, e.g. ``/user/ada/``, ending in a
    slash) are filled in by the proxy.  The server listens on 127.0.0.1 only: it is reached
    through the proxy.
    """
    return {
        "command": [sys.executable, "-m", "boltzlab", "serve",
                    "--address", "127.0.0.1", "--port", "{port}",
                    "--prefix", "{base_url}" + NAME,
                    "--allow-websocket-origin", "*"],
        "absolute_url": True,
        "timeout": TIMEOUT,
        "new_browser_tab": True,  # the app is a full page (it sizes itself to the window)
        "launcher_entry": {"enabled": True, "title": "Boltzmann Lab"},
    }
