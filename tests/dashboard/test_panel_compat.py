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
