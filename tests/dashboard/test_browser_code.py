"""Widgets' browser code as plain Bokeh callbacks (``views.browser_code.in_browser``), not
Panel links: Panel's link registry makes every layout change in any session walk the
page's whole model tree while it holds anything."""

from __future__ import annotations

import panel as pn
from bokeh.document import Document
from bokeh.models import CustomJS
from panel.links import Callback

from boltzlab.dashboard.app import PRESENT_JS, presentation_toggle
from boltzlab.dashboard.labs import LABS
from boltzlab.dashboard.labtools import COPY_LINK_JS
from boltzlab.dashboard.views.browser_code import in_browser


def test_each_model_of_the_widget_carries_the_code_and_panel_registers_no_link():
    button = in_browser(pn.widgets.Button(label="Copy"), "button.label = label", "click",
                        button=None, label="Copy")
    text = in_browser(pn.widgets.TextAreaInput(), "use(cb_obj.value)", "value")
    models = [button.get_root(Document()) for _ in range(2)] + [text.get_root(Document())]
    assert models[0] is not models[1]
    for model in models[:2]:
        (callback,) = model.js_event_callbacks["button_click"]
        assert isinstance(callback, CustomJS) and callback.code == "button.label = label"
        assert callback.args == {"button": None, "label": "Copy"}
    (callback,) = models[2].js_property_callbacks["change:value"]
    assert callback.code == "use(cb_obj.value)"
    assert button not in Callback.registry and text not in Callback.registry


def test_the_widget_itself_stands_for_its_model():
    button = pn.widgets.Button(label="Copy")
    in_browser(button, "button.label = label", "click", button=button, label="Copy")
    model = button.get_root(Document())
    (callback,) = model.js_event_callbacks["button_click"]
    assert callback.args["button"] is model


def test_the_apps_browser_code_is_on_the_models_and_in_no_link():
    """The presentation switch sets the page's CSS variables; a lab's "Copy link" and its
    script's clipboard copy: each on its Bokeh model, none in Panel's registry."""
    toggle = presentation_toggle({})
    (callback,) = toggle.get_root(Document()).js_property_callbacks["change:active"]
    assert callback.code == PRESENT_JS
    lab = LABS[0]()
    try:
        tools = lab.tools
        (copy,) = tools.copy_link.get_root(Document()).js_event_callbacks["button_click"]
        assert copy.code == COPY_LINK_JS and copy.args["label"] == "Copy link"
        (clip,) = tools.script.get_root(Document()).js_property_callbacks["change:value"]
        assert "navigator.clipboard.writeText(cb_obj.value)" in clip.code
        assert not any(w in Callback.registry for w in (toggle, tools.copy_link, tools.script))
    finally:
        lab.close()
