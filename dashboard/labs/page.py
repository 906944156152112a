"""A lab's page (:class:`Page`): the Column that starts its lab's tick wherever it is rendered,
and refuses a second served session; :func:`fill` makes a view's plots share the stage."""

from __future__ import annotations

import asyncio
from typing import Any

import panel as pn

from ..panel_compat import RenderHooked


#: a lab's page asked for by a second served session (``pn.serve(lab)``: one object for every tab)
ANOTHER_SESSION = ("This lab is open in another browser tab: a lab is one session's, and closes with it. "
                   "Serve a function that makes one per session: "
                   "`pn.serve({\"/tap\": lambda: TAPLab()})`, or `panel serve` a script that ends "
                   "with `TAPLab().servable()`.")


class Page(RenderHooked):
    """A lab's page: a Column that starts its lab's tick wherever it is rendered.

    Panel builds a component's Bokeh model when it is rendered: in a served session,
    in a notebook cell (``lab`` as the last expression, ``pn.Column(lab)``), by
    ``lab.show()``.  Each time, the page calls ``on_render(doc, comm)`` first
    (:meth:`Lab._rendered`), so a lab trains live wherever it is shown, not only in the app
    ``create_app`` builds; the lab starts one tick, whoever asks first.  ``on_render``
    returning False (a second served session) renders :data:`ANOTHER_SESSION` instead.
    """

    refusal = ANOTHER_SESSION


def loop_running() -> bool:
    """True when called on a running asyncio loop (a Jupyter kernel runs cells on one)."""
    try:
        return asyncio.get_running_loop().is_running()
    except RuntimeError:
        return False


def fill(view: Any) -> Any:
    """Make ``view``'s plots share the stage's height: every Bokeh pane, its figure and every
    layout that holds one stretch both ways; widgets and text keep their natural size (a
    flex column gives the plots what they leave)."""
    from bokeh.models import Plot

    if isinstance(view, pn.pane.Bokeh):
        if isinstance(view.object, Plot):
            keep = view.object.sizing_mode in ("scale_width", "scale_both")  # heatmaps keep their aspect
            view.object.sizing_mode = "scale_both" if keep else "stretch_both"
            view.object.min_height = 120
        view.sizing_mode = "stretch_both"
        return view
    objects = getattr(view, "objects", None)
    if objects is not None and isinstance(view, pn.layout.ListLike):
        if any(_holds_plot(o) for o in objects):
            for o in objects:
                fill(o)
            view.sizing_mode = "stretch_both"
            view.max_width = None
    return view


def _holds_plot(view: Any) -> bool:
    if isinstance(view, pn.pane.Bokeh):
        return True
    return isinstance(view, pn.layout.ListLike) and any(_holds_plot(o) for o in view.objects)
