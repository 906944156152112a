"""A lab's page (:class:`Page`): the Column that starts its lab's tick wherever it is rendered,
and refuses a second served session; :func:`fill` makes a view's plots share the stage."""

from __future__ import annotations

import asyncio
from typing import Any, Callable

import panel as pn


class Page(pn.Column):
    """A lab's page: a Column that starts its lab's tick wherever it is rendered.

    Panel builds a component's Bokeh model when it is rendered: in a served session,
    in a notebook cell (``lab`` as the last expression, ``pn.Column(lab)``), by
    ``pn.serve(lab)`` or ``lab.show()``.  Each time, the page calls ``on_render(doc,
    comm)`` first (:meth:`Lab._rendered`), so a lab trains live wherever it is shown, not
    only in the app ``create_app`` builds; the lab starts one tick, whoever asks first.
    """

    def __init__(self, *objects: Any, **params: Any) -> None:
        super().__init__(*objects, **params)
        self.on_render: Callable[[Any, Any], None] | None = None

    def _get_model(self, doc: Any, root: Any = None, parent: Any = None, comm: Any = None) -> Any:
        if self.on_render is not None and self.on_render(doc, comm) is False:
            return pn.pane.Alert(ANOTHER_SESSION, alert_type="danger")._get_model(doc, root, parent, comm)
        return super()._get_model(doc, root, parent, comm)

    def render_models(self, doc: Any, root: Any, parent: Any) -> Any:
        """Build the page's Bokeh models for ``root`` of ``doc`` now, without ``on_render``,
        and register them as Panel does (``self._models``): a layout that then gets this page
        under ``root`` takes these models instead of building them.  For
        :func:`dashboard.app.render_models`, which calls it on another thread; the caller
        starts the tick."""
        return super()._get_model(doc, root, parent, None)


#: a lab's page asked for by a second served session (``pn.serve(lab)``: one object for every tab)
ANOTHER_SESSION = ("This lab is open in another browser tab: a lab is one session's, and closes with it. "
                   "Serve a function that makes one per session: "
                   "`pn.serve({\"/tap\": lambda: TAPLab()})`, or `panel serve` a script that ends "
                   "with `TAPLab().servable()`.")


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
