"""JavaScript a widget runs in the browser, as a plain Bokeh callback on its model."""

from __future__ import annotations

from typing import Any

import panel as pn

from ..panel_compat import on_each_model


def in_browser(widget: pn.widgets.Widget, code: str, on: str, **args: Any) -> pn.widgets.Widget:
    """Run ``code`` in the browser whenever ``widget``'s Bokeh model changes its property
    ``on`` (``cb_obj`` is the model), or, with ``on="click"``, when the button is clicked.
    ``args`` are the code's other names; ``widget`` itself stands for its model.  Returns
    ``widget``.

    Panel's ``jscallback`` and ``js_on_click`` do the same through its links, which it keeps
    in a registry for the whole process; while that registry holds anything, *every* change
    of a layout's children in *any* session makes Panel walk that page's whole model tree to
    look for links (``Callback._process_callbacks``): a fifth of putting a built lab on its
    page (cProfile of ``serve``, TAP), and again whenever a stage's tab opens.  A callback on
    each model Panel makes for the widget does the same without the registry.
    """
    from bokeh.models import CustomJS

    def attach(model) -> None:
        callback = CustomJS(code=code, args={k: model if v is widget else v for k, v in args.items()})
        if on == "click":
            model.js_on_event("button_click", callback)
        else:
            model.js_on_change(on, callback)

    on_each_model(widget, attach)  # each model the widget gets, in any page, carries it
    return widget
