"""Holding a handler's changes together: one ``pn.io.hold`` and at most one walk of the
document's model graph (``held``; ``graph_frozen`` is :mod:`boltzlab.dashboard.panel_compat`'s; used by the lab
base and the labs)."""

from __future__ import annotations

import functools
from typing import Callable

import panel as pn

from ..panel_compat import graph_frozen  # noqa: F401 - the labs import it from here


def held(method: Callable) -> Callable:
    """Run a UI handler inside one ``pn.io.hold`` so all its changes go out together, with
    the document's model graph walked at most once (:func:`graph_frozen`).

    In a served session Panel writes a held batch to the browser at once, while changes
    made outside a hold are queued and written after it.  A handler that changed some
    models before entering a hold (e.g. emptied a heatmap) and refilled them inside one
    therefore left the browser with the stale, earlier state.
    """
    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        with pn.io.hold(), graph_frozen(pn.state.curdoc):
            return method(self, *args, **kwargs)
    return wrapper
