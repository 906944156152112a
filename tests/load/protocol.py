"""Capacity measured apart from browsers (issue 22, item 5): a protocol-level load client.

    python -m tests.load.protocol --lab TAP --sessions 16 --seconds 60 [--port P] [--json out.json]
                                  [--workers W] [--new-pages K] [--step-probes K] [--root-every S]
                                  [--liveness-every S] [--settle S] [--no-warmup] [--log FILE] [--pins K]
    python -m tests.load.protocol --lab TAP --followers 24 --seconds 60   # a teacher shares, 24 follow
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
6. ``--followers N`` (issue 48 item 4): the first user is a *teacher*: once its page is usable
   it switches the header's "Share live" on as a browser does, a ``PATCH-DOC`` with one
   ``ModelChanged`` event on the Bokeh ``Toggle``'s ``active`` (``{"kind": "ModelChanged",
   "model": {"id": ...}, "attr": "active", "new": true}``, the JSON of Bokeh's
   ``ModelChangedEvent.to_serializable``, which the server applies with
   ``Document.apply_json_patch`` and Panel hears as the widget's ``value``), reads the code from
   the link the page then shows (an HTML model's ``text`` with ``follow=<16 URL-safe chars>``)
   and presses ▶ Play (Reset + Play when the run ends, as the others).  Then N *followers*
   open ``/<lab>?follow=<code>`` and never press anything; a follower's page is usable once
   its lab follows (the follow card, css class ``follow-card``, is in the page: its ▶ Play stays
   disabled).  Without ``--sessions`` the teacher is the only user who plays.

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
Each user also keeps the texts of its lab's counter (the HTML model with css class
``sweep-counter``: "Epoch 0.46", "Sweep 12") with the time each new text arrived.

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
  plain HTTP client in a process of its own, at random intervals around those (loadtest's ``HttpProbe``: one request in flight per path, a
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

With ``--followers N`` the window starts once the teacher plays and every follower's page is
usable, and the report's ``followers`` adds:

* ``lag_ms``: for each counter text the teacher's mirror received in the window (up to
  ``LAG_GRACE_S`` before its end), the delay until each follower's mirror received the same
  text, or a later one of the same run (a follower that drew two of the teacher's ticks at once
  skips a text: it is then past it; "later" = the same words with a larger number, received
  after the teacher's); :func:`follower_lags`.  A text a follower never reached before it closed
  counts with its lower bound (close - arrival, more than ``LAG_GRACE_S``) and in ``unmatched``.
  Its p95 is the target ``follower_lag_p95_ms`` (<= 1,000 ms, issue 48);
* the teacher's and each follower's update rates over the window (``updates_per_second``:
  patches that changed data, as for the users; ``plot_updates_per_second``: those that changed
  the main plot's sources).  Issue 48's goal: every follower gets the teacher's rate.
"""

from __future__ import annotations

import argparse
import asyncio
import html
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
SHARE = "Share live"  # the header's Toggle (dashboard/share_control.py)
FOLLOW_CODE = re.compile(r"[?&]follow=([\w-]{16})")  # in the link the teacher's page shows
COUNTER_CLASS = "sweep-counter"  # the lab's counter (a LiveHTML: an HTML model's ``text``)
FOLLOW_CARD = "follow-card"  # a follower's sidebar (dashboard/labs/following.py)
LAG_GRACE_S = 5.0  # the teacher's counter texts of the window's last seconds are not timed
LAG_EPSILON_S = 0.05  # a follower's text may arrive this much before the teacher's (two sockets)
DATA_EVENTS = ("ColumnsStreamed", "ColumnsPatched", "ColumnDataChanged")
#: the sources a Step is timed to (name prefix; default: every line of loadtest's ``Lab.plot``).
#: TAP: the log-likelihood line, which the step's own Record draws; the solution counts on the
#: same figure come from an analysis job that may land seconds later, so a Step timed to them
#: measured the previous Step's job (a 15 ms "Step" on a busy server)
STEP_SOURCES = {"TAP": "tap-ll:ll"}
TARGETS = {"liveness_p95_ms": 100.0, "step_to_patch_median_ms": 1000.0, "new_page_max_s": 3.0,
           "rss_after_minus_baseline_mb": 50.0, "follower_lag_p95_ms": 1000.0}


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

    def with_class(self, css_class: str) -> list[str]:
        """Ids of the models whose ``css_classes`` have ``css_class``, the newest last."""
        return [i for i, m in self.models.items()
                if isinstance(m["attributes"].get("css_classes"), list) and css_class in m["attributes"]["css_classes"]]

    def text_matching(self, pattern: re.Pattern) -> re.Match | None:
        """The first match of ``pattern`` in a model's ``text`` (HTML unescaped), newest models first."""
        for entry in reversed(self.models.values()):
            text = entry["attributes"].get("text")
            if isinstance(text, str):
                found = pattern.search(html.unescape(text))
                if found:
                    return found
        return None


def plain_text(markup: str) -> str:
    """An HTML pane's ``text`` (escaped HTML) as the words it shows."""
    return " ".join(re.sub(r"<[^>]*>", " ", html.unescape(markup)).split())


_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def counter_key(text: str) -> tuple[str, float | None]:
    """A counter's text as (its words, its last number): "Epoch 0.46" -> ("Epoch #", 0.46)."""
    numbers = list(_NUMBER.finditer(text))
    if not numbers:
        return text, None
    last = numbers[-1]
    return text[:last.start()] + "#" + text[last.end():], float(last.group())


def follower_lags(teacher: list[tuple[float, str]], follower: list[tuple[float, str]], start: float, end: float,
                  closed: float, epsilon: float = LAG_EPSILON_S) -> dict:
    """The follower's delay (ms) behind each counter text the teacher received in
    ``[start, end]``: until the follower received the same text, or a later one of the same run
    (same words, larger number), at most ``epsilon`` s before the teacher (a follower's text is
    drawn after the teacher's; its patch comes on another socket).  ``teacher``, ``follower``:
    (arrival time, text) of each new text, in order.  A text the follower had not reached when
    it closed (``closed``) counts as ``closed - arrival`` (a lower bound) and as ``unmatched``.
    Returns ``{"ms": [...], "unmatched": k, "exact": j}`` (``exact``: matched by the same text)."""
    out: dict = {"ms": [], "unmatched": 0, "exact": 0}
    for at, text in teacher:
        if not start <= at <= end:
            continue
        words, number = counter_key(text)
        for got, seen in follower:
            if got < at - epsilon:
                continue
            if seen == text:
                out["exact"] += 1
            else:
                seen_words, seen_number = counter_key(seen)
                if number is None or seen_words != words or seen_number is None or seen_number < number:
                    continue
            out["ms"].append(round(1000 * max(0.0, got - at), 1))
            break
        else:
            out["ms"].append(round(1000 * max(0.0, closed - at), 1))
            out["unmatched"] += 1
    return out


class ProtocolError(RuntimeError):
    """The page, the token, the websocket or the server's answers were not as a browser expects."""


class User:
    """One simulated browser tab: one Bokeh session on the websocket (see the module's doc)."""

    def __init__(self, base_url: str, path: str, plot: str, follower: bool = False) -> None:
        """``plot``: the prefix of the names of the main plot's sources (``"tap-ll:ll"``);
        ``follower``: the page follows a shared run (usable once it follows, never plays)."""
        self.base_url, self.path, self.plot_prefix, self.follower = base_url, path, plot, follower
        self.counters: set[str] = set()  # the counter's model(s)
        self.counter_log: list[tuple[float, str]] = []  # (perf_counter, text) of each new counter text
        self.marks: dict[str, tuple[float, int, int]] = {}  # name -> (perf_counter, updates, plot_changes)
        self.closed_at: float | None = None
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
        self._counters_changed()
        self._reader = asyncio.create_task(self._read_forever())
        await self.send_event({"type": "event", "name": "document_ready", "values": {"type": "map"}})
        if self.follower:
            if not await self.wait_for(lambda: bool(self.mirror.with_class(FOLLOW_CARD)), self.page_timeout):
                raise ProtocolError(f"the page never followed the shared run (no {FOLLOW_CARD})")
        elif not await self.wait_for(lambda: self.enabled(PLAY), self.page_timeout):
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
            self._counters_changed()
        elif any(e.get("kind") == "ModelChanged" and e.get("attr") == "text" and isinstance(e.get("model"), dict)
                 and e["model"].get("id") in self.counters for e in events):
            self._counters_changed()
        self.patches += 1
        if changed:
            self.updates += 1
            if changed & self.plot_sources:
                self.plot_changes += 1
                self.plot_at = time.perf_counter()

    def _counters_changed(self) -> None:
        """Log the counter's text when it is new (the newest counter model: a page has one lab)."""
        self.counters = set(self.mirror.with_class(COUNTER_CLASS))
        text = self.counter_text()
        if text is not None and (not self.counter_log or self.counter_log[-1][1] != text):
            self.counter_log.append((time.perf_counter(), text))

    def counter_text(self) -> str | None:
        ids = self.mirror.with_class(COUNTER_CLASS)
        text = self.mirror.attribute(ids[-1], "text") if ids else None
        return plain_text(text) if isinstance(text, str) and text else None

    def mark(self, name: str) -> None:
        """Note the time and the counts now (the window's start and end)."""
        self.marks[name] = (time.perf_counter(), self.updates, self.plot_changes)

    def rates(self, start: str = "start", end: str = "end") -> dict[str, float | None]:
        """Updates (patches changing data) and plot updates per second between two marks."""
        if start not in self.marks or end not in self.marks or self.marks[end][0] <= self.marks[start][0]:
            return {"updates_per_second": None, "plot_updates_per_second": None}
        (t0, u0, p0), (t1, u1, p1) = self.marks[start], self.marks[end]
        return {"updates_per_second": round((u1 - u0) / (t1 - t0), 2),
                "plot_updates_per_second": round((p1 - p0) / (t1 - t0), 2)}

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
        self.closed_at = time.perf_counter()
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

    async def send_change(self, model_id: str, attr: str, new) -> None:
        """A widget's change as BokehJS sends it: one ``ModelChanged`` event (Bokeh's
        ``ModelChangedEvent.to_serializable``)."""
        from bokeh.protocol.messages.patch_doc import patch_doc

        message = patch_doc(patch_doc.create_header(), {},
                            {"events": [{"kind": "ModelChanged", "model": {"id": model_id}, "attr": attr,
                                         "new": new}]})
        await message.send(self._wrapper)

    async def share(self) -> str:
        """Switch "Share live" on (the Toggle's ``active``); returns the code of the link shown."""
        ids = self.mirror.find("Toggle", label=SHARE)
        if not ids:
            raise ProtocolError(f"no {SHARE!r} toggle in the page")
        await self.send_change(ids[-1], "active", True)
        if not await self.wait_for(lambda: self.mirror.text_matching(FOLLOW_CODE) is not None, BUTTON_TIMEOUT_S):
            raise ProtocolError(f"no follow link in the page {BUTTON_TIMEOUT_S:.0f} s after {SHARE}")
        return self.mirror.text_matching(FOLLOW_CODE).group(1)

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
        self.members: list[User] = []  # the users (marked at the window's start and end)
        self.times: dict[str, float] = {}  # perf_counter of the marks

    def mark(self, name: str) -> None:
        self.times[name] = time.perf_counter()
        for user in self.members:
            user.mark(name)

    def started(self) -> None:
        self.waiting -= 1
        if self.waiting <= 0:
            self.all_playing.set()


def _error_text(exc: BaseException) -> str:
    if isinstance(exc, asyncio.TimeoutError):
        return "TimeoutError: no usable page in time"
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text}"


async def _a_second_of(window: Window) -> None:
    """Wait a second, or less if the load window ends meanwhile."""
    try:
        await asyncio.wait_for(window.over.wait(), 1.0)
    except asyncio.TimeoutError:
        pass


def _played(user: User, start: float, first: int) -> dict:
    """What a user saw over the window since ``start``, when it had ``first`` updates."""
    played = time.perf_counter() - start
    return {"played_seconds": round(played, 1), "updates": user.updates - first,
            "updates_per_second": round((user.updates - first) / played, 2),
            "plot_updates": user.plot_changes, "patches": user.patches}


async def run_user(index: int, base_url: str, path: str, plot: str, window: Window,
                   handle: list | None = None, pins: int = 0, role: str = "player",
                   code: asyncio.Future | None = None) -> dict:
    """Open, press ▶ Play, pin ``pins`` runs, keep playing (Reset + Play when the run finishes)
    until the window is over, close.  (``handle``: the User is appended to it, for the warm-up.)
    ``pin_data_changes``: data changes of the pin layers' sources after the pins were drawn
    (issue 47: a pinned run is drawn once; a Reset draws the pins again).

    ``role`` "teacher": switches Share live on before ▶ Play and, once playing, sets the code
    as the result of ``code``; "follower": waits for ``code``, opens ``<path>?follow=<code>``
    and stays until the window is over, pressing nothing (see the module's doc, 6.).
    ``_user`` (the User, for the lags; the run takes it out of the report)."""
    user = User(base_url, path, plot, follower=role == "follower")
    window.members.append(user)
    if handle is not None:
        handle.append(user)
    rec: dict = {"user": index, "role": role, "served": False, "errors": [], "restarts": 0, "open": None,
                 "updates": 0, "plot_updates": 0, "patches": 0, "played_seconds": None, "updates_per_second": 0.0,
                 "pins": pins, "pin_data_changes": None, "_user": user}
    started = False
    try:
        if role == "follower":
            shared = await code
            user.path = path + ("&" if "?" in path else "?") + f"follow={shared}"
            rec["open"] = await user.open()
            start, first = time.perf_counter(), user.updates
            window.started()
            started = True
            while not window.over.is_set() and not user.closed:
                await _a_second_of(window)
            rec.update(_played(user, start, first))
            rec["served"] = rec["updates"] > 0
            return rec
        rec["open"] = await user.open()
        shared = await user.share() if role == "teacher" else None
        await user.play()
        if shared is not None:
            code.set_result(shared)
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
            await _a_second_of(window)
        rec.update(_played(user, start, first), pin_data_changes=user.pin_changes() - pinned)
        rec["served"] = rec["updates"] > 0
    except Exception as exc:
        rec["errors"].append(_error_text(exc))
    finally:
        if code is not None and role == "teacher" and not code.done():
            code.set_exception(ProtocolError("the teacher's page shared no run"))
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
    window.mark("start")
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
    window.mark("end")
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
              page_timeout: float = PAGE_TIMEOUT_S, pins: int = 0, followers: int = 0) -> dict:
    """Run it (see the module's doc); returns the report.  ``followers``: the first of the
    ``sessions`` users shares its run and this many pages follow it."""
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
        "pins": pins, "followers": followers,
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
        window = Window(sessions + followers)
        measuring = asyncio.create_task(_probes(server, path, plot, window, seconds, every, step_probes, new_pages))
        code = asyncio.get_running_loop().create_future() if followers else None
        users = await asyncio.gather(
            *(run_user(i, server.url, path, plot, window, pins=pins,
                       role="teacher" if followers and i == 0 else "player", code=code) for i in range(sessions)),
            *(run_user(sessions + k, server.url, path, plot, window, role="follower", code=code)
              for k in range(followers)))
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
        errors += [f"{'follower' if rec['role'] == 'follower' else 'user'} {rec['user']}: {e}" for e in rec["errors"]]
    members = [rec.pop("_user") for rec in users]
    for rec, user in zip(users, members):
        rec["window"] = user.rates()
    if followers:
        report["followers"] = follower_report(users, members, window.times)
    players = [r for r in users if r["role"] != "follower"]
    probe = measured["probe"]
    errors += [f"step probe: {e}" for e in probe["errors"]]
    for k, page in enumerate(measured["pages"]):
        errors += [f"new page {k + 1}: {e}" for e in page["errors"]]
    opens = [r["open"] for r in [probe, *measured["pages"]] if r["open"]]
    http = {name: {**_percentiles(p.ms), "failures": len(p.failures)} for name, p in measured["http"].items()}
    # (a worker process recycled between two samples takes its CPU time along: no rate then)
    busy = [row["cpu_percent"] for row in window_rows if row["cpu_percent"] is not None and row["cpu_percent"] >= 0]
    report.update({
        "sessions_served": sum(r["served"] for r in players),
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
        "user_open_seconds": _spread([r["open"]["usable"] for r in players if r["open"]]),
        "updates_per_second": _spread([r["updates_per_second"] for r in players if r["served"]]),
        "restarts": sum(r["restarts"] for r in players),
        # after each user's pins were drawn, while it played (0 unless a Reset drew them again)
        "pin_data_changes": sum(r["pin_data_changes"] or 0 for r in players),
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


def follower_report(users: list[dict], members: list[User], times: dict[str, float]) -> dict:
    """The followers' part of the report (see the module's doc): their lag behind the teacher's
    counter and their update rates next to the teacher's, over the window.  Also sets each
    follower's ``lag_ms``."""
    teacher = members[0]
    start, end = times.get("start"), times.get("end")
    lags: list[float] = []
    unmatched = exact = 0
    timed = [(at, text) for at, text in teacher.counter_log
             if start is not None and end is not None and start <= at <= end - LAG_GRACE_S]
    for rec, user in zip(users, members):
        if rec["role"] != "follower" or start is None or end is None or rec["open"] is None:
            continue
        got = follower_lags(teacher.counter_log, user.counter_log, start, end - LAG_GRACE_S,
                            user.closed_at or time.perf_counter())
        rec["lag_ms"] = {**_percentiles(got["ms"]), "max": max(got["ms"], default=None),
                         "unmatched": got["unmatched"], "exact": got["exact"]}
        lags += got["ms"]
        unmatched += got["unmatched"]
        exact += got["exact"]
    follows = [r for r in users if r["role"] == "follower"]
    return {
        "requested": len(follows), "served": sum(r["served"] for r in follows),
        "lag_ms": {**_percentiles(lags), "max": max(lags, default=None), "unmatched": unmatched, "exact": exact},
        "teacher_counter_texts": len(timed),
        "teacher_counter_sample": [text for _, text in timed[:3]],
        "teacher": users[0]["window"],
        "follower_updates_per_second": _spread([r["window"]["updates_per_second"] for r in follows]),
        "follower_plot_updates_per_second": _spread([r["window"]["plot_updates_per_second"] for r in follows]),
        "follower_open_seconds": _spread([r["open"]["usable"] for r in follows if r["open"]]),
    }


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
    if report.get("followers"):
        lag = report["followers"]["lag_ms"]["p95"]
        out["follower_lag_p95_ms"] = {"value": lag, "limit": TARGETS["follower_lag_p95_ms"],
                                      "ok": lag is not None and lag <= TARGETS["follower_lag_p95_ms"]}
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
    pins += f", {c['followers']} followers" if c.get("followers") else ""
    return (f"| {c['lab']} {c['sessions']} × {c['seconds']:g} s{pins} | {report['sessions_served']}/{c['sessions']} "
            f"| {_num(live['median'], 1)} / {_num(live['p95'], 1)}" + (f" ({fails} failed)" if fails else "") +
            f" | {_num(root['median'])} / {_num(root['p95'])} | {step_text} "
            f"| {_num(page.get('median'), 1)} / {_num(page.get('max'), 1)} ({page['n']}) "
            f"| {_num(rate and rate['min'], 2)}–{_num(rate and rate['max'], 2)} | {len(report['errors'])} "
            f"| {_num(rss['baseline'])} → {_num(rss['after'])}, {rss['after_minus_baseline']:+.0f} "
            f"| {_num(cpu and cpu['median'])} | {_num(report['client_cpu_percent'])} |")


FOLLOWER_HEADER = ("| run | followers served | `/liveness` ms p95 | follower lag ms median / p95 / max (unmatched) "
                   "| teacher updates/s (plot) | follower updates/s min–max (plot min–max) | errors "
                   "| server CPU % (median) | client CPU % |\n|---|---|---|---|---|---|---|---|---|")


def follower_row(report: dict) -> str:
    c, f = report["config"], report["followers"]
    lag, teacher = f["lag_ms"], f["teacher"]
    rate, plot = f["follower_updates_per_second"], f["follower_plot_updates_per_second"]
    cpu = report["server_cpu_percent_during_load"]
    return (f"| {c['lab']}, 1 teacher + {c['followers']} followers × {c['seconds']:g} s | {f['served']}/{f['requested']} "
            f"| {_num(report['liveness_ms']['p95'], 1)} | {_num(lag['median'])} / {_num(lag['p95'])} / "
            f"{_num(lag['max'])} ({lag['unmatched']}) "
            f"| {_num(teacher['updates_per_second'], 2)} ({_num(teacher['plot_updates_per_second'], 2)}) "
            f"| {_num(rate and rate['min'], 2)}–{_num(rate and rate['max'], 2)} "
            f"({_num(plot and plot['min'], 2)}–{_num(plot and plot['max'], 2)}) | {len(report['errors'])} "
            f"| {_num(cpu and cpu['median'])} | {_num(report['client_cpu_percent'])} |")


def table(reports: list[dict]) -> str:
    lines = [HEADER, *(table_row(r) for r in reports)]
    shares = [r for r in reports if r.get("followers")]
    if shares:
        lines += ["", FOLLOWER_HEADER, *(follower_row(r) for r in shares)]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.load.protocol", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lab", choices=list(PATHS), default="TAP", help="the lab the users play (default TAP)")
    parser.add_argument("--sessions", type=int, default=None,
                        help="simulated users at once who play (default 16; 1, the teacher, with --followers)")
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
    parser.add_argument("--followers", type=int, default=0,
                        help="the first user shares its run (Share live) and this many pages follow it "
                             "(default 0; see the module's doc, 6.)")
    parser.add_argument("--table", type=Path, nargs="+", default=None, metavar="REPORT",
                        help="print the Markdown table of these saved JSON reports and exit")
    args = parser.parse_args(argv)
    if args.table:
        print(table([json.loads(p.read_text()) for p in args.table]))
        return 0
    if args.sessions is None:
        args.sessions = 1 if args.followers else 16
    if (args.sessions < 1 or args.followers < 0 or args.seconds <= 0 or args.settle < 0 or args.step_probes < 1 or args.new_pages < 0
            or args.liveness_every <= 0 or args.root_every <= 0 or args.page_timeout <= 0 or (args.workers is not None and args.workers < 0)
            or not 0 <= args.pins <= 4):
        parser.error("--sessions, --step-probes >= 1; --seconds, --liveness-every, --root-every > 0; "
                     "--settle, --new-pages, --workers, --followers >= 0; --pins 0 to 4")
    report = asyncio.run(run(args.sessions, args.seconds, args.lab, args.port, args.path, args.workers,
                             args.warmup, args.settle, args.log, args.liveness_every, args.root_every,
                             args.step_probes, args.new_pages, page_timeout=args.page_timeout, pins=args.pins,
                             followers=args.followers))
    text = json.dumps(report, indent=1)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(text)
    print(json.dumps({k: v for k, v in report.items() if k not in ("server_series", "users")}, indent=1))
    print()
    print(table([report]))
    shared = report.get("followers")
    return 0 if (report["sessions_served"] == report["sessions_requested"] and not report["errors"]
                 and (not shared or shared["served"] == shared["requested"])) else 1


if __name__ == "__main__":
    sys.exit(main())
