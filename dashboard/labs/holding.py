"""Holding a handler's changes together: one ``pn.io.hold`` and at most one walk of the
document's model graph (``held``, ``graph_frozen``; used by the lab base and the labs)."""

from __future__ import annotations

import contextlib
import functools
from typing import Any, Callable, Iterator

import panel as pn


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


@contextlib.contextmanager
def graph_frozen(doc: Any) -> Iterator[None]:
    """Bokeh walks every model of ``doc`` each time a change adds or removes a reference
    (``DocumentModelManager.invalidate``); inside this block those walks are put off, and
    done once at its end only if a change asked for one.

    Bokeh's own ``doc.models.freeze()`` (Panel's ``hold(freeze=True)``) walks at its end
    whatever happened: ~250 models of a TAP page, 50-100 ms on a loaded server, each time
    the lab moved its epoch slider and each time FVBM redrew its matrices (about 3 times a
    second while playing), for changes that were only data and text (py-spy, 16 TAP users).
    Inside an outer freeze (or another such block) it leaves the walk to that one.
    """
    models = getattr(doc, "models", None)
    if models is None or models._freeze_count > 0 or "invalidate" in vars(models):
        yield
        return
    asked: list[bool] = []
    models.invalidate = lambda: asked.append(True)  # Model.trigger's call, while we wait
    try:
        yield
    finally:
        del models.invalidate
        if asked:
            models.recompute()
