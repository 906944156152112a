"""A served session's lab is built off the event loop (``app.build_off_the_loop``), and so are
its page's Bokeh models (``app.render_models``)."""

from __future__ import annotations

import threading

import panel as pn
import pytest
from bokeh.document import Document
from bokeh.io.doc import patch_curdoc
from panel.io.state import set_curdoc

from boltzlab.dashboard.app import build_off_the_loop, render_models
from boltzlab.dashboard.labs import LABS
from tests.waiting import in_own_thread, wait_for


class _Session:
    """Stands in for a session's context: Panel's current document needs one."""

    class request:  # what Panel reads of it (the page's query arguments)
        arguments: dict = {}


def test_the_build_runs_on_another_thread_against_a_scratch_document():
    """While the loop runs a session's callback Bokeh patches the current document for the
    whole process; a lab built meanwhile on the builder thread must not see (and hold or
    freeze) that session's document."""
    session_doc = Document()
    context = _Session()
    session_doc._session_context = lambda: context
    with patch_curdoc(session_doc):
        assert pn.state.curdoc is session_doc  # what the thread would see without its own
        thread, doc = build_off_the_loop(lambda: (threading.get_ident(), pn.state.curdoc)).result(timeout=60)
    assert thread != threading.get_ident()
    assert doc is not None and doc is not session_doc and doc.session_context is None


def test_a_failed_build_is_the_futures_exception():
    def fails():
        raise ValueError("no such data set")

    error = build_off_the_loop(fails).exception(timeout=60)
    assert isinstance(error, ValueError) and str(error) == "no such data set"


def _session_page() -> tuple[Document, pn.Column]:
    """A session's document as ``create_app`` makes it: the template, its tabs, a lab's slot."""
    from boltzlab.dashboard.app import Fast, Template

    doc = Document()
    with set_curdoc(doc):
        slot = pn.Column(sizing_mode="stretch_width")
        template = Template(title="t", main=[pn.Tabs(slot, pn.Column("about", name="About"))],
                            main_layout=None, theme_toggle=False, busy_indicator=None, font_url="",
                            design=Fast)
        template.server_doc(doc)
    return doc, slot


@pytest.mark.parametrize("key", [cls.key for cls in LABS])
def test_a_labs_page_is_rendered_off_the_loop_without_touching_the_document(key):
    """``render_models`` builds the page's Bokeh models on the builder thread; the
    document is not changed, held or frozen from there; putting the page in its slot on the
    loop then takes those models (nothing built twice) and the page is whole in the document."""
    cls = next(c for c in LABS if c.key == key)
    doc, slot = _session_page()
    builder_calls: list[str] = []
    main = threading.get_ident()

    def watch(obj: object, name: str) -> None:
        original = getattr(obj, name)

        def wrapper(*args, **kwargs):
            if threading.get_ident() != main:
                builder_calls.append(name)
            return original(*args, **kwargs)
        setattr(obj, name, wrapper)

    for name in ("hold", "unhold", "add_root", "remove_root", "add_next_tick_callback",
                 "add_periodic_callback", "add_timeout_callback"):
        watch(doc, name)
    watch(doc.callbacks, "trigger_on_change")
    watch(doc.models, "freeze")
    watch(doc.models, "recompute")

    with set_curdoc(doc):
        lab = cls()
        try:
            page = lab.panel()
            before = set(doc.models)
            assert build_off_the_loop(lambda: render_models(page, slot, doc)).result(timeout=120)
            assert set(doc.models) == before
            (ref, (model, _)), = page._models.items()
            assert doc.get_model_by_id(ref) in doc.roots
            with pn.io.hold():
                slot.objects = [page]
            assert page._models[ref][0] is model  # the models built on the thread, not new ones
            assert doc.get_model_by_id(model.id) is model
            assert all(doc.get_model_by_id(m.id) is m for m in model.references())
        finally:
            lab.close()
    assert builder_calls == []


def test_a_slot_not_in_the_document_is_left_to_the_loop():
    """A slot rendered nowhere in the document (or no document): nothing built."""
    from boltzlab.dashboard.labs.base import Page

    page = Page(pn.pane.Markdown("x"))
    doc, _ = _session_page()
    assert not render_models(page, pn.Column(), doc) and not render_models(page, pn.Column(), None)
    assert page._models == {}


def test_a_render_that_fails_leaves_nothing_half_built():
    """The loop then builds the whole page as before."""
    from boltzlab.dashboard.labs.base import Page

    class Broken(pn.pane.Markdown):
        priority = 0  # never Panel's choice for a string elsewhere

        def _get_model(self, *args, **kwargs):
            raise RuntimeError("no model for you")

    doc, slot = _session_page()
    page = Page(pn.pane.Markdown("x"), pn.Column(pn.pane.Markdown("y"), Broken("z")))
    assert not render_models(page, slot, doc)
    for part in (page, page.objects[0], page.objects[1], page.objects[1].objects[0]):
        assert part._models == {}


def test_a_served_lab_is_built_only_once_the_browser_has_the_page(monkeypatch):
    """A GET that never opens a websocket (a health check, a crawler, the load test's GET /
    probe) builds no lab; once the browser has the document (Panel's onload) the lab is
    built, rendered and put on the page."""
    from boltzlab.dashboard import app
    from boltzlab.dashboard.labs import base

    polls, loads, builds, opened = [], [], [], []
    monkeypatch.setattr(base, "refresh_callback", lambda poll, period: polls.append(poll) or _Stopped())
    monkeypatch.setattr(pn.state, "onload", lambda callback: loads.append(callback))
    monkeypatch.setattr(pn.state, "on_session_destroyed", lambda callback: None)

    def build(make):
        builds.append(make)
        return build_off_the_loop(make)

    monkeypatch.setattr(app, "build_off_the_loop", build)
    doc = Document()
    context = _Session()
    doc._session_context = lambda: context
    with set_curdoc(doc):
        note = app.preparing(LABS[0], lambda: "the lab", opened.append)
        (poll,), (load,) = polls, loads
        for _ in range(5):
            assert poll() is None
        assert builds == [] and opened == [] and "Opening the lab" in str(note.objects[1].objects[1].object)
        load()
        assert wait_for(lambda: _finish(poll()) or opened == ["the lab"], timeout=60)
        assert poll() is None and opened == ["the lab"]  # a poll queued behind the opening one
    assert len(builds) == 1


def _finish(result) -> None:
    """Run what a poll returned (a coroutine that opens the lab) as Panel would await it;
    here no session has a connection, so it finishes without waiting."""
    if result is None:
        return
    with pytest.raises(StopIteration):
        result.send(None)


class _Socket:
    """A session's websocket: what is sent on it, and which thread made each message."""

    def __init__(self) -> None:
        self.sent: list = []

    async def send_message(self, message) -> None:
        self.sent.append(message)


class _Protocol:
    def __init__(self) -> None:
        from bokeh.protocol import Protocol

        self._protocol, self.threads = Protocol(), []

    def create(self, msgtype, *args, **kwargs):
        self.threads.append(threading.current_thread().name)
        return self._protocol.create(msgtype, *args, **kwargs)


class _Connection:
    def __init__(self) -> None:
        self.protocol, self._socket = _Protocol(), _Socket()


def _connected_page():
    """A document as a served session has it once the browser is connected: a root whose
    models the browser knows, one connection, and Bokeh's changes dispatched to a recorder."""
    from bokeh.models import Column, Div

    connection = _Connection()

    class Context(_Session):
        class session:
            _subscribed_connections = {connection}

    doc, context = Document(), Context()
    doc._session_context = lambda: context
    root = Column(children=[Div(text="preparing")])
    doc.add_root(root)
    doc.models.flush_synced()  # the browser has pulled the document
    dispatched: list = []
    doc.callbacks.on_change(dispatched.append)
    return doc, root, connection, dispatched


def _run(coroutine):
    import asyncio

    return in_own_thread(lambda: asyncio.run(coroutine))


def test_a_lab_goes_on_its_page_in_one_message_serialized_off_the_loop():
    """``sent_off_the_loop``: the change is made on the loop's thread, the PATCH-DOC message
    that carries it is made on the sender thread (the new models in it, now known to the
    browser), sent on the session's connection, and nothing of it goes through Bokeh's own
    dispatch; a session callback the change added is still dispatched."""
    from bokeh.models import Div

    from boltzlab.dashboard import app

    doc, root, connection, dispatched = _connected_page()
    changed_on: list[str] = []
    loop_thread: list[str] = []
    new = Div(text="the lab")

    def change() -> None:
        changed_on.append(threading.current_thread().name)
        root.children = [new]
        root.css_classes = ["lab"]
        doc.add_next_tick_callback(lambda: None)  # as a lab's start adds its tick

    async def opened():
        loop_thread.append(threading.current_thread().name)
        await app.sent_off_the_loop(doc, change)

    _run(opened())
    assert changed_on == loop_thread
    (message,) = connection._socket.sent
    assert connection.protocol.threads == ["boltzlab-send_0"]
    assert message.msgtype == "PATCH-DOC"
    events = message.content["events"]
    assert {e["attr"] for e in events} == {"children", "css_classes"}
    assert new.id in str(message.content) and "the lab" in str(message.content)
    assert new in doc.models.synced_references and doc.get_model_by_id(new.id) is new
    assert [type(e).__name__ for e in dispatched] == ["SessionCallbackAdded"]
    assert doc.callbacks.hold_value is None and doc.callbacks._held_events == []


def test_without_a_connection_the_change_is_simply_made():
    from bokeh.models import Div

    from boltzlab.dashboard import app

    doc, root, connection, dispatched = _connected_page()
    type(doc.session_context).session._subscribed_connections = set()

    async def opened():
        await app.sent_off_the_loop(doc, lambda: setattr(root, "children", [Div(text="x")]))

    _run(opened())
    assert connection._socket.sent == [] and connection.protocol.threads == []
    assert [type(e).__name__ for e in dispatched] == ["ModelChangedEvent"]


class _Stopped:
    def stop(self) -> None:
        pass


def test_a_change_that_fails_leaves_what_it_changed_to_bokeh():
    from bokeh.models import Div

    from boltzlab.dashboard import app

    doc, root, connection, dispatched = _connected_page()

    def change() -> None:
        root.children = [Div(text="half")]
        raise RuntimeError("no lab after all")

    with pytest.raises(RuntimeError, match="no lab after all"):
        _run(app.sent_off_the_loop(doc, change))
    assert connection._socket.sent == [] and doc.callbacks.hold_value is None
    assert [type(e).__name__ for e in dispatched] == ["ModelChangedEvent"]


def test_a_message_that_cannot_be_made_off_the_loop_is_left_to_bokeh(caplog):
    from bokeh.models import Div

    from boltzlab.dashboard import app

    doc, root, connection, dispatched = _connected_page()

    def refuse(*args, **kwargs):
        raise ValueError("cannot serialize")

    connection.protocol.create = refuse
    _run(app.sent_off_the_loop(doc, lambda: setattr(root, "children", [Div(text="x")])))
    assert connection._socket.sent == []
    assert [type(e).__name__ for e in dispatched] == ["ModelChangedEvent"]
    assert "sent from the event loop: cannot serialize" in caplog.text
