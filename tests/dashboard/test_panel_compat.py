"""The one door to Panel's and Bokeh's internals (``dashboard/panel_compat.py``): every
internal name it relies on still exists with the shape it expects (an upgrade that moves one
fails here, by name), and each patch does what it says."""

from __future__ import annotations

import inspect
import re

import numpy as np
from bokeh.document import Document
from bokeh.models import ColumnDataSource

from boltzlab.dashboard import panel_compat


def test_the_names_the_reconnect_patch_relies_on_exist():
    from bokeh.protocol.messages.pull_doc_reply import PullDoc, pull_doc_reply
    from bokeh.server import session

    assert callable(session._needs_document_lock)
    handle = session.ServerSession._handle_pull
    assert inspect.iscoroutinefunction(handle)  # wrapped by _needs_document_lock
    assert list(inspect.signature(handle.__wrapped__).parameters) == ["self", "message", "connection"]
    assert callable(pull_doc_reply.create_header) and "doc" in PullDoc.__annotations__
    assert "deferred" in inspect.signature(Document.to_json).parameters


class _Connection:
    def __init__(self) -> None:
        from bokeh.protocol import Protocol

        self.protocol = Protocol()


class _Message:
    header = {"msgid": "1"}


def test_a_second_pull_inlines_the_arrays_a_first_keeps_as_buffers():
    """A reconnecting page's pull (the second of a session) carries no binary buffers: BokehJS
    3.9.2 drops them when it replaces its document (bokeh/bokeh#15347)."""
    import asyncio
    import concurrent.futures

    from bokeh.server.session import ServerSession

    panel_compat.reconnect_with_binary_arrays()
    doc = Document()
    doc.add_root(ColumnDataSource({"x": np.arange(100.0)}))

    async def pulls():
        session = ServerSession("s", doc, io_loop=None)
        first = await ServerSession._handle_pull(session, _Message(), _Connection())
        second = await ServerSession._handle_pull(session, _Message(), _Connection())
        return first, second

    # in a thread of its own: the suite's earlier tests may leave this thread's loop running
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        first, second = pool.submit(lambda: asyncio.run(pulls())).result()
    assert first.buffers  # the page load: binary, as Bokeh sends it
    assert not second.buffers  # a reconnect: the arrays inline
    again = Document.from_json(second.content["doc"])  # what a client without buffers reads
    np.testing.assert_array_equal(again.roots[0].data["x"], np.arange(100.0))


def test_the_names_the_fresh_receiver_relies_on_exist():
    """BokehJS keeps its protocol receiver in ``ClientConnection._receiver`` (a Receiver made
    with no arguments) and sends ``connection_lost`` with a WeakRef to the connection before
    every reconnect attempt: the JS of ``fresh_receiver_on_reconnect`` relies on all three."""
    from pathlib import Path

    import bokeh
    from bokeh.events import _CONCRETE_EVENT_CLASSES

    bundle = (Path(bokeh.__file__).parent / "server/static/js/bokeh.min.js").read_text(encoding="utf-8")
    assert re.search(r"this\._receiver=new [\w$.]+\.Receiver[,;]", bundle)
    assert re.search(r"new [\w$.]+\.ConnectionLost\(new WeakRef\(this\)", bundle)
    assert re.search(r"_schedule_reconnect\(e\)\{.{0,400}send_event\(", bundle)
    assert "connection_lost" in _CONCRETE_EVENT_CLASSES
    doc = Document()
    panel_compat.fresh_receiver_on_reconnect(doc)
    (callback,) = doc.callbacks.js_event_callbacks["connection_lost"]
    assert "connection._receiver = new connection._receiver.constructor()" in callback.code


def test_the_names_behind_the_page_helpers_exist():
    """Every other internal name ``panel_compat`` relies on, with the shape it expects."""
    import bokeh.server.contexts as contexts
    import panel.io.document as panel_document
    from bokeh.core.has_props import HasProps
    from bokeh.document.models import DocumentModelManager
    from bokeh.models import Div
    from bokeh.server.connection import ServerConnection
    from bokeh.server.server import BaseServer
    from bokeh.server.session import ServerSession
    from bokeh.server.views.ws import WSHandler
    from panel.config import panel_extension
    from panel.io.state import state
    import panel as pn

    assert isinstance(state._launching, set)  # a list before Panel 1.5.5
    assert isinstance(state._thread_id_, (dict,)) or hasattr(state._thread_id_, "__setitem__")
    assert isinstance(state._servers, dict)
    assert hasattr(state, "_hold")
    assert hasattr(panel_document, "_WRITE_BLOCK") and "__contains__" in dir(panel_document._WRITE_BLOCK)
    assert "_subscribed_connections" in inspect.getsource(ServerSession.__init__)
    assert "self._socket = socket" in inspect.getsource(ServerConnection.__init__)
    assert "send_message" in vars(WSHandler)
    assert "self._http = http_server" in inspect.getsource(BaseServer.__init__)
    assert "_document" in inspect.getsource(contexts.BokehSessionContext.__init__)
    doc = Document()
    assert hasattr(doc.callbacks, "_held_events") and doc.models._freeze_count == 0
    assert callable(DocumentModelManager.invalidate) and callable(DocumentModelManager.recompute)
    assert "_property_values" in vars(Div(text="x")) or hasattr(Div(text="x"), "_property_values")
    assert issubclass(Div, HasProps)
    assert isinstance(panel_extension._loaded, bool)
    for cls, name in [(pn.pane.HTML, "_update"), (pn.pane.Markdown, "_transform_object"),
                      (pn.Column, "_get_model"), (pn.widgets.Button, "_get_model"),
                      (pn.Column, "_models"), (pn.Column, "_cleanup")]:
        assert hasattr(cls, name) or name in vars(cls()), (cls, name)


def test_render_hooked_calls_on_render_and_can_refuse():
    calls = []
    layout = panel_compat.RenderHooked(panel_compat.TextOnlyHTML("<b>x</b>"))
    layout.refusal = "no, thank you"
    layout.on_render = lambda doc, comm: calls.append(doc) or len(calls) == 1
    first = layout.get_root(Document())
    assert first.__class__.__name__ == "Column" and len(calls) == 1
    second = layout.get_root(Document())  # refused: the refusal's text instead
    assert "no, thank you" in second.text


def test_text_only_html_updates_the_text_alone():
    pane = panel_compat.TextOnlyHTML("<b>one</b>")
    model = pane.get_root(Document())
    stylesheets = list(model.stylesheets)
    pane.object = "<i>two</i>"
    assert "two" in model.text and list(model.stylesheets) == stylesheets


def test_from_a_widget_sees_panels_link_and_nothing_else():
    import panel as pn
    import panel.param
    import param

    assert "def link_widget(" in inspect.getsource(panel.param)

    class Thing(param.Parameterized):
        x = param.Integer(default=0)

    thing, seen = Thing(), []
    thing.param.watch(lambda event: seen.append(panel_compat.from_a_widget()), "x")
    widget = pn.widgets.IntInput.from_param(thing.param.x)
    widget.value = 3  # a widget's change (as a click's)
    thing.x = 4  # a script's
    assert seen == [True, False]


def test_a_designs_resources_are_a_dict_by_kind():
    import panel as pn

    assert isinstance(pn.theme.Fast._resources, dict) and "font" in pn.theme.Fast._resources
    assert "font" not in panel_compat.design_resources(pn.theme.Fast, without="font")


def test_a_background_periodic_callback_exists():
    import inspect as _inspect

    from panel.io.callbacks import PeriodicCallback

    assert "params.pop('background'" in _inspect.getsource(PeriodicCallback.__init__)
    assert PeriodicCallback(callback=lambda: None, period=1000, background=True)._background is True
    assert "font" not in panel_compat.Fast._resources and panel_compat.Fast.__name__ == "Fast"
    assert callable(panel_compat.refresh_callback) and _inspect.signature(panel_compat.refresh_callback)
