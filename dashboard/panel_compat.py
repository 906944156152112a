"""The one door to Panel's and Bokeh's internals (issue 49 item 1): every use of a name they
do not document as public lives here, with why it is needed and what it was measured against;
``tests/dashboard/test_panel_compat.py`` checks that each name still exists with the expected
shape, so an upgrade that moves one fails there, by name, not somewhere in a lab.

Today (Panel 1.9.4, Bokeh 3.9.2; ``constraints.txt``):

* :func:`reconnect_with_binary_arrays` — Bokeh's ``ServerSession._handle_pull`` (and its
  ``_needs_document_lock`` decorator).  A page whose websocket dropped reconnects to its
  session (``pn.config.reconnect``, issue 48) and pulls the document again; BokehJS 3.9.2
  then replaces its document from the JSON *without* the reply's binary buffers
  (``ClientConnection._repull_session_doc`` calls ``replace_with_json(doc_json)``), so any
  document with a NumPy column (every lab's plots) failed with "buffer for id=… not found"
  and the page stayed disconnected (seen in Chromium: tests/browser/test_browser_reconnect.py).
  Fixed upstream in bokeh/bokeh#15348 (issue #15347), not released in 3.9.2.  Our
  ``_handle_pull`` answers every pull after a session's first with the arrays inlined as
  base64 (``Document.to_json(deferred=False)``), which the client decodes without buffers;
  the first pull, the page load's, keeps the binary buffers.
* :func:`fresh_receiver_on_reconnect` — BokehJS's ``ClientConnection._receiver``.  A
  connection keeps one protocol ``Receiver`` (it assembles a message from its header,
  metadata, content and buffer frames) for its whole life, across reconnects.  A drop in the
  middle of a message (likely while a lab plays: a patch with arrays is five frames or more)
  left it expecting the rest of that message, so the new socket's ACK was read as its tail:
  "First message was not an ACK", closed, and every later attempt out of step the same way
  until the page gave up (the reconnect test failed so in CI, under load).  On every
  ``connection_lost`` event (sent before each reconnect attempt) the page now starts a fresh
  ``Receiver``.  Not reported upstream that we could find.
* :func:`sent_off_the_loop` — Panel's ``panel.io.document._WRITE_BLOCK`` (its queue of
  documents being written), Bokeh's ``ServerSession._subscribed_connections``,
  ``doc.callbacks._held_events`` and ``ServerConnection._socket``: a built lab's page message
  serialized off the event loop and written as Panel's ``hold`` writes (its docstring).
* :func:`launching` — Panel's ``state._launching`` (a set since Panel 1.5.5: a list before),
  which tells Panel's extensions that a document is still being built.
* :func:`claim_loop_thread` — Panel's ``state._thread_id_``: the thread allowed to change a
  document directly (PageApplication fills a document on a builder thread for the loop).
* :func:`servers` — Panel's ``state._servers`` (the servers ``pn.serve`` started), and
  :func:`stop_accepting` Bokeh's ``Server._http`` (its Tornado HTTPServer).
* :func:`placed_models` / :func:`cleanup` — a Panel layout's ``_models`` (ref -> (model,
  parent)) and ``Viewable._cleanup``: rendering a lab's models off the loop into its slot.
* :func:`graph_frozen` — Bokeh's ``DocumentModelManager._freeze_count``, ``invalidate`` and
  ``recompute``: one walk of the model graph per batch of changes (its docstring).
* :func:`notebook_held` — Panel's ``state._hold``, what ``panel.io.notebook.block_comm``
  sets: a notebook lab's tick pushes its changes once.
* :class:`TextOnlyHTML` — Panel's ``HTML._update`` (overridden) and ``_transform_object``: a
  pane whose change of text updates only its model's text (``views.text.LiveHTML``).
* :func:`from_a_widget` — the name of Panel's ``link_widget`` (``panel/param.py``), the
  function through which a widget made by ``from_param`` sets its parameter: a lab tells a
  widget's change (shown on the page) from a script's (raised) by it.
* :class:`RenderedOnce` — Panel's ``Markdown._transform_object`` (overridden): a Markdown
  pane's HTML rendered once per process (``views.text.StaticMarkdown``).
* :func:`session_document` — Bokeh's ``BokehSessionContext._document``.
* :func:`design_resources` and :class:`Fast` — a Panel design's ``_resources`` (its CSS, JS
  and font files by kind): the app's Fast design drops the web font.
* :func:`refresh_callback` — ``PeriodicCallback``'s ``background`` keyword (what Panel's own
  FileSelector and busy-counter clean-up use): a lab's tick that is not counted as "busy" work.
* :func:`explicit_values` — Bokeh's ``HasProps._property_values`` (the values set in code;
  a theme's are not among them): presentation mode scales the sizes the code set.
* :func:`extension_loaded` — Panel's ``panel_extension._loaded``: a lab shown in a notebook
  runs ``pn.extension()`` itself when the notebook has not.
* :class:`RenderHooked` — Panel's ``Viewable._get_model`` (overridden): a layout that calls
  ``on_render(doc, comm)`` before it is rendered (a lab's page, ``labs.page.Page``).
* :func:`on_each_model` — Panel's ``Widget._get_model`` (wrapped): a callback on each Bokeh
  model Panel makes for a widget (``views.browser_code.in_browser``).
"""

from __future__ import annotations

import contextlib
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, ClassVar, Iterator, Mapping

import panel as pn

log = logging.getLogger("boltzlab.dashboard.app")

#: run by BokehJS on a document's ``connection_lost`` event (``cb_data`` is the event, whose
#: ``connection`` is a WeakRef to the ClientConnection): a new Receiver of the same class
FRESH_RECEIVER_JS = """
const connection = cb_data.connection?.deref?.()
if (connection != null && connection._receiver != null)
  connection._receiver = new connection._receiver.constructor()
"""

_PATCHED = False


def reconnect_with_binary_arrays() -> None:
    """Make a reconnecting page able to pull its document again (see the module's docstring);
    once per process, before serving."""
    global _PATCHED
    if _PATCHED:
        return
    from bokeh.protocol.messages.pull_doc_reply import PullDoc, pull_doc_reply
    from bokeh.server.session import ServerSession, _needs_document_lock

    first_pull = ServerSession._handle_pull

    @_needs_document_lock
    def _handle_pull(self: Any, message: Any, connection: Any) -> Any:
        if not getattr(self, "_boltzlab_pulled", False):  # the page's first pull: as Bokeh does
            self._boltzlab_pulled = True
            return first_pull.__wrapped__(self, message, connection)
        header = pull_doc_reply.create_header(request_id=message.header["msgid"])
        return pull_doc_reply(header, {}, PullDoc(doc=self.document.to_json(deferred=False)))

    ServerSession._handle_pull = _handle_pull
    _PATCHED = True


def fresh_receiver_on_reconnect(doc: Any) -> None:
    """Have the page of ``doc`` start each reconnect with a fresh protocol receiver (see the
    module's docstring); once per served document."""
    from bokeh.models import CustomJS

    doc.js_on_event("connection_lost", CustomJS(code=FRESH_RECEIVER_JS))


# ---------------------------------------------------------------------- building and writing pages
@contextlib.contextmanager
def launching(doc: Any) -> Iterator[None]:
    """Inside, Panel counts ``doc`` as still launching (its extensions may load late), as its
    own handler does while it runs an app's code."""
    from panel.io.state import state

    state._launching.add(doc)
    try:
        yield
    finally:
        state._launching.discard(doc)


def claim_loop_thread(doc: Any, thread_id: int) -> None:
    """Let the thread ``thread_id`` (the event loop's) change ``doc`` directly, as if it had
    filled it (Panel notes the thread that did; :class:`dashboard.app.PageApplication` fills
    documents on a builder thread)."""
    from panel.io.state import state

    state._thread_id_[doc] = thread_id


def servers() -> list[Any]:
    """The Bokeh servers ``pn.serve`` started in this process."""
    from panel.io.state import state

    return [server for server, *_ in list(state._servers.values())]


def from_a_widget() -> bool:
    """Whether the caller runs inside Panel's link from a widget to its parameter."""
    import sys

    frame = sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        if code.co_name == "link_widget" and code.co_filename.replace("\\", "/").endswith("panel/param.py"):
            return True
        frame = frame.f_back
    return False


def design_resources(design: type, *, without: str) -> dict[str, Any]:
    """A Panel design class's resources by kind, without the kind ``without`` (e.g. "font")."""
    return {kind: value for kind, value in design._resources.items() if kind != without}


def explicit_values(model: Any) -> Mapping[str, Any]:
    """The properties of a Bokeh ``model`` set in code (not its defaults, not a theme's)."""
    return model._property_values


def extension_loaded() -> bool:
    """Whether ``pn.extension()`` has run in this notebook kernel."""
    from panel.config import panel_extension

    return bool(panel_extension._loaded)


def session_document(session_context: Any) -> Any:
    """The document of a Bokeh session context (at ``on_session_created``, before the
    session exists)."""
    return session_context._document


def stop_accepting(server: Any) -> None:
    """Stop ``server`` (a Bokeh Server) accepting connections; its sessions go on."""
    server._http.stop()


def placed_models(layout: Any, roots: Mapping[str, Any]) -> list[tuple[Any, Any]]:
    """``(root, parent)`` for each model ``layout`` has under one of ``roots`` (by ref id)."""
    return [(roots[ref], parent) for ref, (parent, _) in list(layout._models.items()) if ref in roots]


def cleanup(viewable: Any, root: Any) -> None:
    """Forget the models ``viewable`` made under ``root`` (Panel's own clean-up)."""
    viewable._cleanup(root)


#: Serializes the message that puts a built lab on its page, off the event loop
#: (:func:`sent_off_the_loop`).  Its own thread: on the app's builder it would wait behind the
#: next page's lab build.
SENDER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="boltzlab-send")

#: how long a page's message waits for Panel's earlier writes to that page to go out (s)
EARLIER_WRITES_SECONDS = 10.0


async def sent_off_the_loop(doc: Any, change: Callable[[], None]) -> None:
    """``change()`` on the event loop with the session's document ``doc`` held (and as Panel's
    current document: after an await Bokeh no longer says which it is), then the PATCH-DOC
    message its changes make serialized on :data:`SENDER` and sent: a coroutine for a session
    callback (Bokeh holds the document's lock across its awaits, so no other callback of this
    session changes the document meanwhile; the other sessions run).

    Putting a built lab on its page was 0.21-0.44 s of a quiet server's loop (`/tmp`
    instrumented ``serve``, TAP, 8 page opens), half of it Bokeh serializing the page's
    ~700 new models into that one message: a stall every other session's tick and
    ``/liveness`` waited through, and the clusters of slow probes at page opens in the load
    tests.  The serializer only reads this document's models (nothing changes them while the
    lock is held) and marks which the browser now knows.  As Panel's own ``hold`` does, the
    changes are written straight to the session's connections; the rest of what they made
    (e.g. the lab's tick added as a session callback) is dispatched on the loop.  Without a
    session or a connection (a notebook, a test), ``change()`` is simply called.
    """
    import asyncio

    from bokeh.document.events import DocumentPatchedEvent
    from panel.io.document import _WRITE_BLOCK
    from panel.io.model import monkeypatch_events
    from panel.io.state import set_curdoc

    session = getattr(getattr(doc, "session_context", None), "session", None)
    connections = list(getattr(session, "_subscribed_connections", ()))
    ours = bool(connections) and doc.callbacks.hold_value is None  # else Bokeh sends them
    if ours:
        doc.hold("combine")
    try:
        with set_curdoc(doc):
            change()
    except BaseException:
        if ours:
            doc.unhold()  # what it changed before it failed goes out as Bokeh sends it
        raise
    if not ours:
        return
    events, doc.callbacks._held_events = list(doc.callbacks._held_events), []
    doc.unhold()  # nothing left to dispatch: the events are ours
    monkeypatch_events(events)
    patches = [e for e in events if isinstance(e, DocumentPatchedEvent)]
    for event in events:
        if not isinstance(event, DocumentPatchedEvent):
            doc.callbacks.trigger_on_change(event)
    if not patches:
        return
    try:
        messages = await asyncio.wrap_future(SENDER.submit(
            lambda: [(c, c.protocol.create("PATCH-DOC", patches)) for c in connections]))
    except Exception as exc:  # noqa: BLE001 - Bokeh sends them from the loop instead
        log.warning("A page's changes are sent from the event loop: %s", exc, exc_info=exc)
        for event in patches:
            doc.callbacks.trigger_on_change(event)
        return
    # Panel queues a write while another message is being written: those went before ours
    give_up = time.monotonic() + EARLIER_WRITES_SECONDS
    while doc in _WRITE_BLOCK and time.monotonic() < give_up:
        await asyncio.sleep(0.01)
    for connection, message in messages:
        await connection._socket.send_message(message)  # Bokeh's: its write lock, a closed socket logged


# ---------------------------------------------------------------------- changing documents
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


@contextlib.contextmanager
def notebook_held() -> Iterator[bool]:
    """Inside, a notebook's comm pushes are held back (what ``panel.io.notebook.block_comm``
    does); yields whether they were held already (then the caller must not push)."""
    from panel.io.state import state

    before, state._hold = state._hold, True
    try:
        yield bool(before)
    finally:
        state._hold = before


# ---------------------------------------------------------------------- panes and widgets
class TextOnlyHTML(pn.pane.HTML):
    """An HTML pane whose change of ``object`` updates only its model's text (Panel
    recomputes every property of the model, its stylesheets included: see
    :class:`boltzlab.dashboard.views.text.LiveHTML` for the measurement)."""

    def _update(self, ref: str, model: Any) -> None:
        model.update(text=self._transform_object(self.object)["object"])


class RenderedOnce(pn.pane.Markdown):
    """A Markdown pane whose text's HTML is rendered once per process, cached by the text
    and every setting that changes the HTML (see ``views.text.StaticMarkdown``)."""

    _html: ClassVar[dict[tuple, dict[str, Any]]] = {}

    def _transform_object(self, obj: Any) -> dict[str, Any]:
        if not isinstance(obj, str):
            return super()._transform_object(obj)
        key = (obj, self.dedent, self.renderer, tuple(self.extensions), self.hard_line_break,
               tuple(self.plugins), self.disable_anchors, repr(sorted(self.renderer_options.items())))
        rendered = self._html.get(key)
        if rendered is None:
            rendered = self._html[key] = super()._transform_object(obj)
        return dict(rendered)


class RenderHooked(pn.Column):
    """A Column that calls ``on_render(doc, comm)`` each time Panel renders it (in a served
    session, a notebook cell, ``show()``); ``on_render`` returning False renders ``refusal``
    (a Markdown text) instead.  :meth:`render_models` builds its models without the call."""

    refusal: str = ""

    def __init__(self, *objects: Any, **params: Any) -> None:
        super().__init__(*objects, **params)
        self.on_render: Callable[[Any, Any], Any] | None = None

    def _get_model(self, doc: Any, root: Any = None, parent: Any = None, comm: Any = None) -> Any:
        if self.on_render is not None and self.on_render(doc, comm) is False:
            return pn.pane.Alert(self.refusal, alert_type="danger")._get_model(doc, root, parent, comm)
        return super()._get_model(doc, root, parent, comm)

    def render_models(self, doc: Any, root: Any, parent: Any) -> Any:
        """Build the models for ``root`` of ``doc`` now, without ``on_render``, and register
        them as Panel does (``self._models``): a layout that then gets this one under ``root``
        takes these models instead of building them (on another thread: the caller starts
        what ``on_render`` would)."""
        return super()._get_model(doc, root, parent, None)


def on_each_model(widget: Any, attach: Callable[[Any], None]) -> None:
    """Call ``attach(model)`` on each Bokeh model Panel makes for ``widget``, in any page."""
    make = widget._get_model

    def get_model(doc, root=None, parent=None, comm=None):
        model = make(doc, root, parent, comm)
        attach(model)
        return model

    widget._get_model = get_model


class Fast(pn.theme.Fast):
    """Panel's Fast design without its web font: Fast imports Open Sans from
    fonts.googleapis.com on every page (twice), a request to a third party from every
    visitor and an error offline.  The template names system fonts instead.  (The class
    keeps the name Fast: Panel looks its bundled files up under the lower-cased name.)"""

    _resources = design_resources(pn.theme.Fast, without="font")


def refresh_callback(callback: Callable[[], None], period_ms: int) -> Any:
    """Start ``callback`` every ``period_ms`` in the current session (or on the running
    asyncio loop of a notebook), as ``pn.state.add_periodic_callback`` does, but as a
    *background* callback that does not log each run.

    Panel counts each run of a plain periodic callback as "busy" work for its busy
    indicator, which this app does not show: two updates of the global ``pn.state.busy``
    and their watchers around every tick.  With 16 TAP sessions that bookkeeping took 40 %
    as much of the server's event loop as the ticks themselves (py-spy on
    ``python -m tests.load.protocol --lab TAP --sessions 16``), and the log lines one more
    per tick.  (``background`` is the constructor keyword Panel's own FileSelector and
    busy-counter clean-up use.)
    """
    from panel.io.callbacks import PeriodicCallback

    periodic = PeriodicCallback(callback=callback, period=period_ms, log=False, background=True)
    periodic.start()
    return periodic
