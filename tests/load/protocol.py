"""Capacity measured apart from browsers (issue 22, item 5): a protocol-level load client.

    python -m tests.load.protocol --lab TAP --sessions 16 --seconds 60 [--port P] [--json out.json]
                                  [--workers W] [--new-pages K] [--step-probes K] [--root-every S]
                                  [--liveness-every S] [--settle S] [--no-warmup] [--log FILE] [--pins K]
    python -m tests.load.protocol --table a.json b.json ...   # the Markdown table of saved reports

A simulated user is one Bokeh client session on the websocket, driven as a browser drives it
but without rendering anything, so that N users cost the machine little next to the server
they load (``tests/load/loadtest.py`` runs real Chromium pages, which on this 2-core machine
took most of the CPU themselves).  All users live on one asyncio loop in this process.

What a simulated user does (what a browser's Bokeh client does, minus the drawing)
---------------------------------------------------------------------------------
1. ``GET /<lab>`` (``/fvbm``, ``/tap``, ...; ``--path`` for another page): the server builds
   the session (``create_app``) and answers the page, which embeds the session's token.
2. Opens the websocket ``ws://host:port/<lab>/ws`` with the subprotocols ``["bokeh", token]``
   (as BokehJS and ``bokeh.client`` do), waits for the server's ``ACK``, sends ``PULL-DOC-REQ``
   and loads the ``PULL-DOC-REPLY`` into a *mirror* of the document, then sends the
   ``document_ready`` event BokehJS sends once a page is rendered (Panel's ``onload`` hooks).
3. Applies every ``PATCH-DOC`` the server pushes to the mirror (see :class:`Mirror`).
4. Presses buttons as a click does: a ``PATCH-DOC`` with one ``MessageSent`` event,
   ``{"kind": "MessageSent", "msg_type": "bokeh_event", "msg_data": {"type": "event",
   "name": "button_click", "values": {"type": "map", "entries": [["model", {"id": ...}]]}}}``,
   which the server hands to ``Document.callbacks.trigger_event`` and so to the Panel
   button's ``on_click`` (the same message ``bokeh.document.callbacks.send_event`` builds).
   The buttons are found in the mirror by label (``▶ Play``, ``❚❚ Pause``, ``Step``,
   ``↺ Reset``); "usable" and "playing" are read from their ``disabled``.
5. ``--pins K``: once playing, presses ``📌 Pin`` K times as a click on the split button's
   main part does (the same ``button_click`` event, sent to the Bokeh ``Dropdown`` that Panel's
   ``MenuButton`` is; Panel's ``MenuButton`` hears it as a click of its label, which the lab
   takes as "pin"), each once the main plot has new points since the last, and waits for
   each pin to be drawn (a pin layer's source of that slot, ``pin-<slot>``, got data).

The mirror, not a ``bokeh.document.Document``: loading a TAP page's 730 models into Bokeh's
Python classes took 2.5-4.5 s of this process's CPU per session (property defaults and
validation), i.e. more than the server's own page build; 32 of them would have competed with
the server for the 2 cores and stalled this client's loop, which times everything.  The mirror
keeps each model's JSON (type name and attributes) by id, registers the models a patch brings,
sets changed attributes and counts data changes (``ColumnsStreamed``, ``ColumnsPatched``,
``ColumnDataChanged``, or ``ModelChanged`` of ``data``) per data source; array payloads are
kept as received, never decoded.  What a browser does that this does not: fetch the static
JS/CSS (cached after the first page), lay out and paint, and send back what BokehJS
computes (ranges, sizes); so these numbers are the server's capacity, not a person's view.

What the run does
-----------------
Like ``loadtest``, whose code it uses (:class:`~tests.load.loadtest.Server`,
:class:`~tests.load.loadtest.HttpProbe`, ``_settle``): starts the real CLI on the loopback,
warms up with one user that opens the lab, plays until its first plot update and 3 s more and
leaves, waits until the server has discarded that session and RSS is stable (the
**baseline**), then opens N users at once;
each presses ▶ Play (and ↺ Reset + ▶ Play when its run finishes by itself, ``restarts``).
Once all play (and, with ``--pins K``, each has pinned K runs), the **load window** of
``--seconds`` starts, with:

* ``liveness_ms`` / ``root_ms``: ``GET /liveness`` every 0.5 s and ``GET /`` every 5 s by a
  plain HTTP client in threads (loadtest's ``HttpProbe``: one request in flight per path, a
  failure counted, not timed).  Each ``GET /`` builds a server session (the first lab);
* ``step_to_patch_ms``: a probe user opens the lab, plays until the main plot (loadtest's
  ``Lab.plot``; its sources are named ``"<plot>:<line>"``; TAP: its log-likelihood line
  ``tap-ll:ll``, see ``STEP_SOURCES``) got data, pauses, and presses
  Step ``--step-probes`` times (5), each once the plot was quiet for 1 s: from sending the
  click to receiving the first ``PATCH-DOC`` that changes the data of one of those sources
  (the round trip click -> server -> step in a worker -> refresh tick -> patch).  A Step
  without such a patch in 30 s is ``missed``;
* ``new_page_seconds``: the probe user's page and ``--new-pages`` (3) more spread over the
  window: from sending ``GET`` to a mirror whose ▶ Play is present and enabled (GET, websocket
  + ACK, document pulled, and waiting for Play), with those parts;
* the server's RSS and CPU (server process + its worker processes, from /proc) every 5 s,
  and this client's own CPU (``client_cpu_percent``: % of one core over the window).

The window lasts ``--seconds`` and at least until the probes are done (at most
``HOLD_LIMIT`` s more).  Then every user closes its websocket, the tool waits until Bokeh
discarded the sessions (server threads back to the idle count) and RSS is stable, at least
until the server's collection and trim after closed sessions were due (at most ``--settle``
s), and takes RSS **after**.  ``errors``: a user or probe that failed (page,
token, websocket, a button that never enabled), an ``ERROR`` message from the server, a
websocket the server closed, and ERROR lines / tracebacks in the server log (loadtest's
``Server.log_findings``).  ``targets``: the issue's targets (``/liveness`` p95 <= 100 ms,
Step -> patch median <= 1 s, a new page <= 3 s (the slowest), no errors, RSS after within
50 MB of the baseline), each with its value and whether it was met (they are set for 16 TAP
users; the tool reports them for every run).  Percentiles: nearest-rank p95, as loadtest.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import sys
import time
from pathlib import Path

from tests.load.loadtest import (ARTIFACTS, HOLD_LIMIT, LABS, HttpProbe, Server, _counts, _free_port,
                                 _percentiles, _sample_server, _settle, _spread)

#: the page each lab is served alone at (dashboard.app.routes)
PATHS = {"FVBM": "/fvbm", "TAP": "/tap", "Frank-Wolfe": "/frankwolfe", "Bound": "/bound"}
PAGE_TIMEOUT_S = 300.0  # one page (GET + websocket + pull + Play enabled) under full load
BUTTON_TIMEOUT_S = 60.0  # a pressed button's effect (Pause enabled after Play, ...)
STEP_TIMEOUT_S = 30.0  # a Step whose plot patch has not come by then is missed
QUIET_S = 1.0  # before a timed Step the plot has not changed for this long
MAX_MESSAGE_BYTES = 100 * 2**20
PLAY, PAUSE, STEP, RESET, PIN = "▶ Play", "❚❚ Pause", "Step", "↺ Reset", "📌 Pin"
DATA_EVENTS = ("ColumnsStreamed", "ColumnsPatched", "ColumnDataChanged")
#: the sources a Step is timed to (name prefix; default: every line of loadtest's ``Lab.plot``).
#: TAP: the log-likelihood line, which the step's own Record draws; the solution counts on the
#: same figure come from an analysis job that may land seconds later, so a Step timed to them
#: measured the previous Step's job (a 15 ms "Step" on a busy server)
STEP_SOURCES = {"TAP": "tap-ll:ll"}
TARGETS = {"liveness_p95_ms": 100.0, "step_to_patch_median_ms": 1000.0, "new_page_max_s": 3.0,
           "rss_after_minus_baseline_mb": 50.0}


class Mirror:
    """The client's copy of a Bokeh document as JSON: ``models[id] = {"name", "attributes"}``.

    ``load`` takes a ``PULL-DOC-REPLY``'s ``doc``; ``apply`` a ``PATCH-DOC``'s events and
    returns the ids of the data sources whose data they changed.  Models arrive as
    ``{"type": "object", "name": ..., "id": ..., "attributes": {...}}`` (in the document or
    inside a patch's new value) and are referred to as ``{"id": ...}`` afterwards."""

    def __init__(self) -> None:
        self.models: dict[str, dict] = {}  # in the order they came: the newest last
        self.data_changes: dict[str, int] = {}
        self.generation = 0  # how many models were registered (a patch that brings new ones adds)

    def load(self, doc: dict) -> None:
        self.models.clear()
        self._register(doc.get("roots"))

    def _register(self, value) -> None:
        stack = [value]
        while stack:
            v = stack.pop()
            if isinstance(v, dict):
                kind = v.get("type")
                if kind == "object" and "id" in v:
                    if v["id"] not in self.models:
                        self.generation += 1
                    entry = self.models.setdefault(v["id"], {"name": v.get("name"), "attributes": {}})
                    attributes = v.get("attributes") or {}
                    entry["attributes"].update(attributes)
                    stack.extend(attributes.values())
                elif kind not in ("ndarray", "bytes", "number", "typed_array"):  # payloads: no models inside
                    stack.extend(v.values())
            elif isinstance(v, list) and not (v and isinstance(v[0], (int, float))):  # numbers: data
                stack.extend(x for x in v if isinstance(x, (dict, list)))

    def apply(self, events: list[dict]) -> set[str]:
        changed: set[str] = set()
        for event in events:
            kind = event.get("kind")
            model_id = (event.get("model") or {}).get("id") if isinstance(event.get("model"), dict) else None
            if kind == "ModelChanged":
                self._register(event.get("new"))
                entry = self.models.get(model_id)
                if entry is not None:
                    entry["attributes"][event["attr"]] = event.get("new")
                if event.get("attr") == "data":
                    changed.add(model_id)
            elif kind in DATA_EVENTS:
                changed.add(model_id)
            elif kind == "RootAdded":
                self._register(event.get("model"))
        for model_id in changed:
            self.data_changes[model_id] = self.data_changes.get(model_id, 0) + 1
        return changed

    def find(self, name: str, **attributes) -> list[str]:
        """Ids of the models of type ``name`` (e.g. "Button": Bokeh's, or an extension's such as
        ``panel.models.widgets.Button``) with these attribute values, the newest last.  (Models a
        patch took out of the page stay in the mirror: e.g. the disabled ▶ Play of a lab's
        "preparing" placeholder, which the lab replaces with its own once the kernels are ready;
        so a caller wants the newest.)"""
        return [i for i, m in self.models.items()
                if isinstance(m["name"], str) and (m["name"] == name or m["name"].endswith("." + name)) and all(
                    m["attributes"].get(k) == v for k, v in attributes.items())]

    def attribute(self, model_id: str, attr: str, default=None):
        entry = self.models.get(model_id)
        return default if entry is None else entry["attributes"].get(attr, default)

    def sources_named(self, prefix: str, exact: bool = False) -> set[str]:
        return {i for i, m in self.models.items() if m["name"] == "ColumnDataSource"
                and isinstance(m["attributes"].get("name"), str) and
                (m["attributes"]["name"] == prefix if exact else m["attributes"]["name"].startswith(prefix))}

    def changes(self, ids: set[str]) -> int:
        """Data changes of the sources ``ids`` so far."""
        return sum(self.data_changes.get(i, 0) for i in ids)


class ProtocolError(RuntimeError):
    """The page, the token, the websocket or the server's answers were not as a browser expects."""


class User:
    """One simulated browser tab: one Bokeh session on the websocket (see the module's doc)."""

    def __init__(self, base_url: str, path: str, plot: str) -> None:
        """``plot``: the prefix of the names of the main plot's sources (``"tap-ll:ll"``)."""
        self.base_url, self.path, self.plot_prefix = base_url, path, plot
        self.mirror = Mirror()
        self.errors: list[str] = []
        self.patches = 0  # PATCH-DOC messages received
        self.updates = 0  # ... that changed a data source
        self.plot_changes = 0  # ... that changed a source of the main plot
        self.plot_at: float | None = None  # perf_counter of the last one
        self.plot_sources: set[str] = set()
        self.opened: dict[str, float] = {}
        self._socket = None
        self._wrapper = None
        self._reader: asyncio.Task | None = None
        self._waiters: list[asyncio.Future] = []
        self._closing = False
        self.closed = False

    # ---------------------------------------------------------------- connection
    page_timeout = PAGE_TIMEOUT_S  # (run's ``page_timeout``)

    async def open(self) -> dict[str, float]:
        """GET the page, connect, pull the document; returns the times (s) up to a usable page
        (▶ Play present and enabled): ``get``, ``websocket`` (connect + ACK), ``pull``, ``usable``."""
        return await asyncio.wait_for(self._open(), self.page_timeout)

    async def _open(self) -> dict[str, float]:
        from bokeh.client.websocket import WebSocketClientConnectionWrapper
        from bokeh.protocol import Protocol
        from bokeh.protocol.receiver import Receiver
        from tornado.httpclient import AsyncHTTPClient, HTTPRequest
        from tornado.websocket import websocket_connect

        start = time.perf_counter()
        client = AsyncHTTPClient(force_instance=True)  # no shared queue of 10 between the users
        try:
            # Tornado's 20 s connect timeout would fail a page the busy server accepts late: a
            # browser waits; so the whole page timeout, for connecting too
            response = await client.fetch(self.base_url + self.path, request_timeout=self.page_timeout,
                                          connect_timeout=self.page_timeout)
        finally:
            client.close()
        got = time.perf_counter()
        found = re.search(r'"token":\s*"([^"]+)"', response.body.decode("utf-8", "replace"))
        if found is None:
            raise ProtocolError(f"GET {self.path}: no session token in the page")
        route = self.path.split("?", 1)[0].rstrip("/")
        ws_url = self.base_url.replace("http://", "ws://", 1) + route + "/ws"
        request = HTTPRequest(ws_url, connect_timeout=self.page_timeout, request_timeout=self.page_timeout)
        self._socket = await websocket_connect(request, subprotocols=["bokeh", found.group(1)],
                                               max_message_size=MAX_MESSAGE_BYTES)
        self._wrapper = WebSocketClientConnectionWrapper(self._socket)
        self._protocol = Protocol()
        self._receiver = Receiver(self._protocol)
        ack = await self._read()
        if ack is None or ack.msgtype != "ACK":
            raise ProtocolError(f"websocket: {'closed' if ack is None else ack.msgtype} instead of ACK")
        connected = time.perf_counter()
        request = self._protocol.create("PULL-DOC-REQ")
        await request.send(self._wrapper)
        while True:  # patches sent before the reply describe an older state: the reply has them
            reply = await self._read()
            if reply is None:
                raise ProtocolError("websocket closed before the document came")
            if reply.msgtype == "ERROR":
                raise ProtocolError(f"PULL-DOC: {reply.content.get('text')}")
            if reply.msgtype == "PULL-DOC-REPLY" and reply.header.get("reqid") == request.header["msgid"]:
                break
        self.mirror.load(reply.content["doc"])
        pulled = time.perf_counter()
        self.plot_sources = self.mirror.sources_named(self.plot_prefix)
        self._reader = asyncio.create_task(self._read_forever())
        await self.send_event({"type": "event", "name": "document_ready", "values": {"type": "map"}})
        if not await self.wait_for(lambda: self.enabled(PLAY), self.page_timeout):
            raise ProtocolError(f"{PLAY} never enabled" if self.button(PLAY) else f"no {PLAY} button in the page")
        usable = time.perf_counter()
        self.opened = {"get": round(got - start, 3), "websocket": round(connected - got, 3),
                       "pull": round(pulled - connected, 3), "usable": round(usable - start, 3)}
        if not self.plot_sources:
            self.errors.append(f"no data source named {self.plot_prefix}... in the page")
        return self.opened

    async def _read(self):
        while True:
            fragment = await self._socket.read_message()
            if fragment is None:
                return None
            message = await self._receiver.consume(fragment)
            if message is not None:
                return message

    async def _read_forever(self) -> None:
        try:
            while True:
                message = await self._read()
                if message is None:
                    if not self._closing:
                        self.errors.append("the server closed the websocket")
                    break
                if message.msgtype == "PATCH-DOC":
                    self._patched(message.content.get("events", []))
                elif message.msgtype == "ERROR":
                    self.errors.append(f"server ERROR message: {message.content.get('text')}")
                self._wake()
        except Exception as exc:  # a malformed message: this user's error
            if not self._closing:
                self.errors.append(f"reading: {type(exc).__name__}: {exc}")
        finally:
            self.closed = True
            self._wake()

    def _patched(self, events: list[dict]) -> None:
        generation = self.mirror.generation
        changed = self.mirror.apply(events)
        if self.mirror.generation != generation:  # new models: maybe the lab's plot (after "preparing")
            self.plot_sources = self.mirror.sources_named(self.plot_prefix)
        self.patches += 1
        if changed:
            self.updates += 1
            if changed & self.plot_sources:
                self.plot_changes += 1
                self.plot_at = time.perf_counter()

    def _wake(self) -> None:
        waiters, self._waiters = self._waiters, []
        for future in waiters:
            if not future.done():
                future.set_result(None)

    async def wait_for(self, predicate, timeout: float) -> bool:
        """Wait (at most ``timeout`` s) until ``predicate()`` holds after some message."""
        deadline = time.monotonic() + timeout
        while not predicate():
            left = deadline - time.monotonic()
            if left <= 0 or self.closed:
                return predicate()
            future = asyncio.get_running_loop().create_future()
            self._waiters.append(future)
            try:
                await asyncio.wait_for(future, left)
            except asyncio.TimeoutError:
                pass
        return True

    async def close(self) -> None:
        self._closing = True
        if self._socket is not None:
            self._socket.close(1000, "closed")
        if self._reader is not None:
            try:
                await asyncio.wait_for(self._reader, 10)
            except (asyncio.TimeoutError, Exception):
                self._reader.cancel()

    # ---------------------------------------------------------------- the page's buttons
    def button(self, label: str, kind: str = "Button") -> str | None:
        """The newest button (``kind``: a Bokeh ``Button`` or ``Dropdown``) labelled ``label``
        (see :meth:`Mirror.find`)."""
        ids = self.mirror.find(kind, label=label)
        return ids[-1] if ids else None

    def enabled(self, label: str) -> bool:
        model = self.button(label)
        return model is not None and not self.mirror.attribute(model, "disabled", False)

    @property
    def playing(self) -> bool:
        """Only a playing lab has its ❚❚ Pause enabled."""
        return self.enabled(PAUSE)

    async def send_event(self, event: dict) -> None:
        from bokeh.protocol.messages.patch_doc import patch_doc

        message = patch_doc(patch_doc.create_header(), {},
                            {"events": [{"kind": "MessageSent", "msg_type": "bokeh_event", "msg_data": event}]})
        await message.send(self._wrapper)

    async def click(self, label: str, kind: str = "Button") -> float:
        """Press the button labelled ``label``; returns the perf_counter the click was sent at."""
        model = self.button(label, kind)
        if model is None:
            raise ProtocolError(f"no {label} button")
        at = time.perf_counter()
        await self.send_event({"type": "event", "name": "button_click",
                               "values": {"type": "map", "entries": [["model", {"id": model}]]}})
        return at

    async def play(self) -> None:
        await self.click(PLAY)
        if not await self.wait_for(lambda: self.playing, BUTTON_TIMEOUT_S):
            raise ProtocolError(f"{PAUSE} not enabled {BUTTON_TIMEOUT_S:.0f} s after {PLAY}")

    async def pin(self, count: int) -> None:
        """Press 📌 Pin ``count`` times (see the module's doc, 5.), each once the main plot has
        new points since the last, and wait until each pin is drawn."""
        for slot in range(count):
            before = self.plot_changes
            if not await self.wait_for(lambda: self.plot_changes > before, self.page_timeout):
                raise ProtocolError(f"no new points to pin (pin {slot + 1})")
            sources = self.mirror.sources_named(f"pin-{slot}", exact=True)
            if not sources:
                raise ProtocolError(f"no pin layer in the page (no source named pin-{slot})")
            drawn = self.mirror.changes(sources)
            await self.click(PIN, "Dropdown")
            if not await self.wait_for(lambda: self.mirror.changes(sources) > drawn, BUTTON_TIMEOUT_S):
                raise ProtocolError(f"pin {slot + 1} not drawn {BUTTON_TIMEOUT_S:.0f} s after {PIN}")

    def pin_changes(self) -> int:
        """Data changes of the pin layers' sources so far (a pinned run is drawn once)."""
        return self.mirror.changes(self.mirror.sources_named("pin-"))


# ---------------------------------------------------------------------- the simulated users


class Window:
    """Between the users and the probes: all play (or failed), the probes are done, the end."""

    def __init__(self, users: int) -> None:
        self.waiting = users
        self.all_playing = asyncio.Event()
        self.probes_done = asyncio.Event()
        self.over = asyncio.Event()

    def started(self) -> None:
        self.waiting -= 1
        if self.waiting <= 0:
            self.all_playing.set()


def _error_text(exc: BaseException) -> str:
    if isinstance(exc, asyncio.TimeoutError):
        return "TimeoutError: no usable page in time"
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text}"


async def run_user(index: int, base_url: str, path: str, plot: str, window: Window,
                   handle: list | None = None, pins: int = 0) -> dict:
    """Open, press ▶ Play, pin ``pins`` runs, keep playing (Reset + Play when the run finishes)
    until the window is over, close.  (``handle``: the User is appended to it, for the warm-up.)
    ``pin_data_changes``: data changes of the pin layers' sources after the pins were drawn
    (issue 47: a pinned run is drawn once; a Reset draws the pins again)."""
    user = User(base_url, path, plot)
    if handle is not None:
        handle.append(user)
    rec: dict = {"user": index, "served": False, "errors": [], "restarts": 0, "open": None,
                 "updates": 0, "plot_updates": 0, "patches": 0, "played_seconds": None, "updates_per_second": 0.0,
                 "pins": pins, "pin_data_changes": None}
    started = False
    try:
        rec["open"] = await user.open()
        await user.play()
        if pins:
            await user.pin(pins)
        pinned = user.pin_changes()
        start = time.perf_counter()
        first = user.updates
        window.started()
        started = True
        while not window.over.is_set():
            if not user.playing and not user.closed:  # the run finished by itself: again
                await user.click(RESET)
                if not await user.wait_for(lambda: user.enabled(PLAY), BUTTON_TIMEOUT_S):
                    raise ProtocolError(f"{PLAY} not enabled after {RESET}")
                await user.play()
                rec["restarts"] += 1
            if user.closed:
                break
            try:
                await asyncio.wait_for(window.over.wait(), 1.0)
            except asyncio.TimeoutError:
                pass
        played = time.perf_counter() - start
        rec.update({"played_seconds": round(played, 1), "updates": user.updates - first,
                    "pin_data_changes": user.pin_changes() - pinned,
                    "updates_per_second": round((user.updates - first) / played, 2),
                    "plot_updates": user.plot_changes, "patches": user.patches})
        rec["served"] = rec["updates"] > 0
    except Exception as exc:
        rec["errors"].append(_error_text(exc))
    finally:
        if not started:
            window.started()
        await user.close()
        rec["errors"] += user.errors
    return rec


async def new_page(base_url: str, path: str, plot: str) -> dict:
    """A new user's page: its times to usable; closed at once."""
    user = User(base_url, path, plot)
    rec: dict = {"open": None, "errors": []}
    try:
        rec["open"] = await user.open()
    except Exception as exc:
        rec["errors"].append(_error_text(exc))
    finally:
        await user.close()
        rec["errors"] += user.errors
    return rec


async def step_probe(base_url: str, path: str, plot: str, steps: int) -> dict:
    """The probe user: a new page (timed), play until the plot has data, pause, then
    ``steps`` timed Steps (send -> first patch changing the plot's data)."""
    user = User(base_url, path, plot)
    rec: dict = {"open": None, "step_ms": [], "missed": 0, "errors": []}
    try:
        rec["open"] = await user.open()
        await user.play()
        if not await user.wait_for(lambda: user.plot_changes > 0, user.page_timeout):
            raise ProtocolError("the main plot got no data while playing")
        if user.enabled(PAUSE):  # (a short run may have finished already)
            await user.click(PAUSE)
        if not await user.wait_for(lambda: user.enabled(PLAY) or not user.enabled(PAUSE), BUTTON_TIMEOUT_S):
            raise ProtocolError(f"{PLAY} not enabled after {PAUSE}")
        for _ in range(steps):
            deadline = time.monotonic() + 10.0  # the last tick of the run (or step) before has come
            while (time.monotonic() < deadline and
                   (user.plot_at is None or time.perf_counter() - user.plot_at < QUIET_S)):
                await asyncio.sleep(0.1)
            before = user.plot_changes
            sent = await user.click(STEP)
            if await user.wait_for(lambda: user.plot_changes > before, STEP_TIMEOUT_S):
                rec["step_ms"].append(round(1000 * (user.plot_at - sent), 1))
            else:
                rec["missed"] += 1
    except Exception as exc:
        rec["errors"].append(_error_text(exc))
    finally:
        await user.close()
        rec["errors"] += user.errors
    return rec


async def _probes(server: Server, path: str, plot: str, window: Window, seconds: float, every: dict[str, float],
                  steps: int, new_pages: int) -> dict:
    """Once all users play: the HTTP probes, the Step probe and the new pages (spread over the
    window); the window ends after ``seconds`` and the probes (at most ``HOLD_LIMIT`` s more)."""
    await window.all_playing.wait()
    began = time.monotonic()
    cpu0 = time.process_time()
    http = {name: HttpProbe(server.url, p, every[name], int((seconds + HOLD_LIMIT) / every[name]) + 1)
            for name, p in (("liveness", "/liveness"), ("root", "/"))}
    for probe in http.values():
        probe.start()

    async def pages() -> list[dict]:
        out = []
        for k in range(new_pages):
            at = began + (k + 1) * seconds / (new_pages + 1)
            await asyncio.sleep(max(0.0, at - time.monotonic()))
            out.append(await new_page(server.url, path, plot))
        return out

    try:
        probe, opened = await asyncio.wait_for(
            asyncio.gather(step_probe(server.url, path, plot, steps), pages()), seconds + HOLD_LIMIT)
    except asyncio.TimeoutError:
        probe = {"open": None, "step_ms": [], "missed": 0,
                 "errors": [f"the probes did not finish in {seconds + HOLD_LIMIT:.0f} s"]}
        opened = []
    window.probes_done.set()
    await asyncio.sleep(max(0.0, began + seconds - time.monotonic()))
    window.over.set()
    for p in http.values():
        p.stop()
    for p in http.values():
        await asyncio.to_thread(p.join)
    wall = time.monotonic() - began
    return {"probe": probe, "pages": opened, "http": http, "window_seconds": round(wall, 1), "began": began,
            "client_cpu_percent": round(100 * (time.process_time() - cpu0) / wall, 1)}


# ---------------------------------------------------------------------- the run


async def run(sessions: int = 16, seconds: float = 60.0, lab: str = "TAP", port: int | None = None,
              path: str | None = None, workers: int | None = None, warmup: bool = True, settle: float = 90.0,
              log_path: Path | None = None, liveness_every: float = 0.5, root_every: float = 5.0,
              step_probes: int = 5, new_pages: int = 3, sample_every: float = 5.0,
              page_timeout: float = PAGE_TIMEOUT_S, pins: int = 0) -> dict:
    """Run it (see the module's doc); returns the report."""
    if lab not in PATHS:
        raise ValueError(f"The 'lab' parameter must be one of {sorted(PATHS)}. Got {lab!r}.")
    import panel  # noqa: F401  (bokeh's protocol classes; imported before the clock starts)

    plot = STEP_SOURCES.get(lab, LABS[lab].plot + ":")
    User.page_timeout = page_timeout
    path = path or PATHS[lab]
    port = port or _free_port()
    server = Server(port, log_path or ARTIFACTS / "protocol-server.log",
                    None if workers is None else ["--workers", str(workers)])
    t0 = time.monotonic()
    report: dict = {"config": {
        "lab": lab, "sessions": sessions, "seconds": seconds, "path": path, "workers": workers, "warmup": warmup,
        "settle_limit": settle, "liveness_every": liveness_every, "root_every": root_every,
        "step_probes": step_probes, "new_pages": new_pages, "hold_limit": HOLD_LIMIT, "page_timeout": page_timeout,
        "pins": pins,
        "server_command": " ".join(server.command[1:]), "url": server.url, "cpus": os.cpu_count(),
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()]}, "sessions_requested": sessions}
    errors: list[str] = []
    series: list[dict] = []
    durations: dict = {}
    every = {"liveness": liveness_every, "root": root_every}

    def sample() -> dict:
        row = {"t": round(time.monotonic() - t0, 1), **server.sample()}
        series.append(row)
        return row

    try:
        durations["server_start"] = round(server.start(), 1)
        idle = sample()
        if warmup:
            t = time.monotonic()
            window = Window(1)
            warm_user: list[User] = []
            task = asyncio.create_task(run_user(-1, server.url, path, plot, window, warm_user))
            await window.all_playing.wait()
            if warm_user:  # plays until its first plot update (a first Play starts a worker's actor)
                played = warm_user[0].updates  # (a page may get data before Play: not training)
                await warm_user[0].wait_for(lambda: warm_user[0].updates > played, page_timeout)
            await asyncio.sleep(3.0)
            window.over.set()
            warm = await task
            errors += [f"warm-up: {e}" for e in warm["errors"]]
            if not warm["served"]:
                errors.append("warm-up: the session got no plot update")
            durations["warmup"] = round(time.monotonic() - t, 1)
            base = await _settle(server, idle["threads"], settle, series, t0)
            durations["baseline_settle"] = base["seconds"]
            report["baseline_settled"] = {"discarded": base["discarded"], "stable": base["stable"]}
        else:
            base = sample()
        stop = asyncio.Event()
        sampler = asyncio.create_task(_sample_server(server, series, sample_every, t0, stop))
        first = len(series)
        t = time.monotonic()
        window = Window(sessions)
        measuring = asyncio.create_task(_probes(server, path, plot, window, seconds, every, step_probes, new_pages))
        users = await asyncio.gather(*(run_user(i, server.url, path, plot, window, pins=pins)
                                       for i in range(sessions)))
        measured = await measuring
        durations["sessions"] = round(time.monotonic() - t, 1)
        stop.set()
        await sampler
        closed = sample()
        peak = max(row["rss_mb"] for row in series[first:])
        window_rows = series[first:]
        after = (await _settle(server, idle["threads"], settle, series, t0) if settle > 0 else
                 {**closed, "seconds": 0.0, "discarded": closed["threads"] <= idle["threads"], "stable": False})
        durations["settle"] = after["seconds"]
        log = server.log_findings()
        errors += log.pop("errors")
        report["server_log"] = {**log, "path": str(server.log_path)}
    finally:
        server.stop()
    durations["total"] = round(time.monotonic() - t0, 1)
    report["config"]["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]

    for rec in users:
        errors += [f"user {rec['user']}: {e}" for e in rec["errors"]]
    probe = measured["probe"]
    errors += [f"step probe: {e}" for e in probe["errors"]]
    for k, page in enumerate(measured["pages"]):
        errors += [f"new page {k + 1}: {e}" for e in page["errors"]]
    opens = [r["open"] for r in [probe, *measured["pages"]] if r["open"]]
    http = {name: {**_percentiles(p.ms), "failures": len(p.failures)} for name, p in measured["http"].items()}
    # (a worker process recycled between two samples takes its CPU time along: no rate then)
    busy = [row["cpu_percent"] for row in window_rows if row["cpu_percent"] is not None and row["cpu_percent"] >= 0]
    report.update({
        "sessions_served": sum(r["served"] for r in users),
        "errors": errors,
        "liveness_ms": http["liveness"],
        # when the slow ones were sent (s into the window): next to a new page's, a GET /'s?
        "liveness_over_target": [[round(at - measured["began"], 1), round(ms)] for at, ms in
                                 zip(measured["http"]["liveness"].at, measured["http"]["liveness"].ms)
                                 if ms > TARGETS["liveness_p95_ms"]],
        "root_sent_at_s": [round(at - measured["began"], 1) for at in measured["http"]["root"].at],
        "root_ms": http["root"],
        "http_failures": _counts(f"{name}: {f}" for name, p in measured["http"].items() for f in p.failures),
        "step_to_patch_ms": {**_percentiles(probe["step_ms"]), "missed": probe["missed"], "all": probe["step_ms"]},
        "new_page_seconds": {**(_spread([o["usable"] for o in opens]) or {}), "n": len(opens), "pages": opens},
        "user_open_seconds": _spread([r["open"]["usable"] for r in users if r["open"]]),
        "updates_per_second": _spread([r["updates_per_second"] for r in users if r["served"]]),
        "restarts": sum(r["restarts"] for r in users),
        # after each user's pins were drawn, while it played (0 unless a Reset drew them again)
        "pin_data_changes": sum(r["pin_data_changes"] or 0 for r in users),
        "rss_mb": {"idle": idle["rss_mb"], "baseline": base["rss_mb"], "peak": peak, "at_close": closed["rss_mb"],
                   "after": after["rss_mb"], "after_minus_baseline": round(after["rss_mb"] - base["rss_mb"], 1),
                   "server_baseline": base["server_rss_mb"],
                   "server_after_minus_baseline": round(after["server_rss_mb"] - base["server_rss_mb"], 1)},
        "threads": {"idle": idle["threads"], "baseline": base["threads"],
                    "peak": max(row["threads"] for row in series), "after": after["threads"]},
        "settled": {"discarded": after["discarded"], "stable": after["stable"]},
        "server_cpu_percent_during_load": _spread(busy),
        "client_cpu_percent": measured["client_cpu_percent"],
        "window_seconds": measured["window_seconds"],
        "durations_s": durations,
    })
    report["targets"] = targets(report)
    report["server_series"] = series
    report["users"] = users
    return report


def targets(report: dict) -> dict:
    """The issue's targets (set for 16 TAP users), each with its value and whether it is met."""
    live = report["liveness_ms"]["p95"]
    step = report["step_to_patch_ms"]["median"]
    page = report["new_page_seconds"].get("max") if report["new_page_seconds"] else None
    rss = report["rss_mb"]["after_minus_baseline"]
    out = {
        "liveness_p95_ms": {"value": live, "limit": TARGETS["liveness_p95_ms"],
                            "ok": live is not None and live <= TARGETS["liveness_p95_ms"]},
        "step_to_patch_median_ms": {"value": step, "limit": TARGETS["step_to_patch_median_ms"],
                                    "ok": step is not None and step <= TARGETS["step_to_patch_median_ms"]},
        "new_page_max_s": {"value": page, "limit": TARGETS["new_page_max_s"],
                           "ok": page is not None and page <= TARGETS["new_page_max_s"]},
        "errors": {"value": len(report["errors"]), "limit": 0, "ok": not report["errors"]},
        "rss_after_minus_baseline_mb": {"value": rss, "limit": TARGETS["rss_after_minus_baseline_mb"],
                                        "ok": rss <= TARGETS["rss_after_minus_baseline_mb"]},
    }
    return out


# ---------------------------------------------------------------------- the table

HEADER = ("| run | users served | `/liveness` ms median / p95 | `GET /` ms median / p95 | Step → patch ms "
          "median / p95 (n) | new page s median / max (n) | plot updates/s per user | errors | RSS baseline → "
          "after (MB), after − baseline | server CPU % (median) | client CPU % |\n"
          "|---|---|---|---|---|---|---|---|---|---|---|")


def _num(value, digits: int = 0) -> str:
    if value is None:
        return "–"
    return f"{value:,.{digits}f}"


def table_row(report: dict) -> str:
    c = report["config"]
    live, root, step = report["liveness_ms"], report["root_ms"], report["step_to_patch_ms"]
    page, rate, rss = report["new_page_seconds"], report["updates_per_second"], report["rss_mb"]
    cpu = report["server_cpu_percent_during_load"]
    step_text = f"{_num(step['median'])} / {_num(step['p95'])} ({step['n']}" + (
        f", {step['missed']} missed)" if step["missed"] else ")")
    fails = live["failures"] + root["failures"]
    pins = f", {c['pins']} pins each" if c.get("pins") else ""
    return (f"| {c['lab']} {c['sessions']} × {c['seconds']:g} s{pins} | {report['sessions_served']}/{c['sessions']} "
            f"| {_num(live['median'], 1)} / {_num(live['p95'], 1)}" + (f" ({fails} failed)" if fails else "") +
            f" | {_num(root['median'])} / {_num(root['p95'])} | {step_text} "
            f"| {_num(page.get('median'), 1)} / {_num(page.get('max'), 1)} ({page['n']}) "
            f"| {_num(rate and rate['min'], 2)}–{_num(rate and rate['max'], 2)} | {len(report['errors'])} "
            f"| {_num(rss['baseline'])} → {_num(rss['after'])}, {rss['after_minus_baseline']:+.0f} "
            f"| {_num(cpu and cpu['median'])} | {_num(report['client_cpu_percent'])} |")


def table(reports: list[dict]) -> str:
    return "\n".join([HEADER, *(table_row(r) for r in reports)])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.load.protocol", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lab", choices=list(PATHS), default="TAP", help="the lab the users play (default TAP)")
    parser.add_argument("--sessions", type=int, default=16, help="simulated users at once (default 16)")
    parser.add_argument("--seconds", type=float, default=60.0,
                        help="the load window, from when all users play (default 60)")
    parser.add_argument("--port", type=int, default=None, help="server port (default: a free one)")
    parser.add_argument("--path", default=None,
                        help="the page the users open (default the lab's own, e.g. /tap; '/?page=1' also works)")
    parser.add_argument("--workers", type=int, default=None,
                        help="passed on as 'boltzlab serve --workers N' (default: not passed)")
    parser.add_argument("--json", type=Path, default=None, help="also write the report to this file")
    parser.add_argument("--log", type=Path, default=None,
                        help="server log file (default test-artifacts/protocol-server.log)")
    parser.add_argument("--warmup", action=argparse.BooleanOptionalAction, default=True,
                        help="one user plays 3 s and leaves, and its session is discarded, before the baseline")
    parser.add_argument("--settle", type=float, default=90.0,
                        help="at most this many seconds for closed sessions to be discarded and RSS to settle")
    parser.add_argument("--liveness-every", type=float, default=0.5, help="seconds between GET /liveness (0.5)")
    parser.add_argument("--root-every", type=float, default=5.0,
                        help="seconds between GET / (default 5: each builds a server session)")
    parser.add_argument("--step-probes", type=int, default=5, help="timed Steps (default 5)")
    parser.add_argument("--new-pages", type=int, default=3,
                        help="new pages timed during the window besides the Step probe's (default 3)")
    parser.add_argument("--page-timeout", type=float, default=PAGE_TIMEOUT_S,
                        help=f"seconds a page may take to be usable (default {PAGE_TIMEOUT_S:.0f})")
    parser.add_argument("--pins", type=int, default=0,
                        help="each user pins this many runs (📌 Pin, as a click) once playing, before the "
                             "window (default 0; at most 4 are kept)")
    parser.add_argument("--table", type=Path, nargs="+", default=None, metavar="REPORT",
                        help="print the Markdown table of these saved JSON reports and exit")
    args = parser.parse_args(argv)
    if args.table:
        print(table([json.loads(p.read_text()) for p in args.table]))
        return 0
    if (args.sessions < 1 or args.seconds <= 0 or args.settle < 0 or args.step_probes < 1 or args.new_pages < 0
            or args.liveness_every <= 0 or args.root_every <= 0 or args.page_timeout <= 0 or (args.workers is not None and args.workers < 0)
            or not 0 <= args.pins <= 4):
        parser.error("--sessions, --step-probes >= 1; --seconds, --liveness-every, --root-every > 0; "
                     "--settle, --new-pages, --workers >= 0; --pins 0 to 4")
    report = asyncio.run(run(args.sessions, args.seconds, args.lab, args.port, args.path, args.workers,
                             args.warmup, args.settle, args.log, args.liveness_every, args.root_every,
                             args.step_probes, args.new_pages, page_timeout=args.page_timeout, pins=args.pins))
    text = json.dumps(report, indent=1)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(text)
    print(json.dumps({k: v for k, v in report.items() if k not in ("server_series", "users")}, indent=1))
    print()
    print(table([report]))
    return 0 if report["sessions_served"] == report["sessions_requested"] and not report["errors"] else 1


if __name__ == "__main__":
    sys.exit(main())
