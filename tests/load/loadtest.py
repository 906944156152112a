"""Load and soak test of the served app (issue 7), on the loopback only.

    python -m tests.load.loadtest --sessions 8 --seconds 60 [--lab FVBM|TAP|Frank-Wolfe|Bound]
                                  [--port P] [--json out.json] [--sample-every S] [--speed LABEL]
                                  [--rounds R] [--no-warmup] [--settle SECONDS] [--workers W]
                                  [--no-measure] [--liveness-every S] [--root-every S]
                                  [--step-probes K]
    python -m tests.load.loadtest --sessions 1 --seconds 1800      # the soak run

What it does
------------
1. Starts ``python -m boltzlab serve --port P --address 127.0.0.1 [--workers W]`` (the
   real CLI; ``--workers`` only when given) and polls ``/liveness``.
2. Warm-up: one browser session opens the lab, trains it for a few seconds and closes; the
   tool then waits until the server has discarded that session (see "Settling" below).
   Only then is the **baseline** RSS taken.  Why after a warm-up: the first session imports
   the lab modules, builds the Bokeh/Panel model classes and templates, fills Panel's
   resource caches and touches the numba dispatchers on the training path.  Those are
   one-off costs every server pays once; a baseline taken before them would make them look
   like memory the sessions failed to give back.
3. Opens N browser contexts in one headless Chromium (N contexts = N independent Bokeh
   sessions, each with its own runners and trainers), all at once.  Each goes to the app,
   clicks the lab's tab, optionally picks a speed, presses "▶ Play" and trains for the
   given seconds.  When a run stops by itself (e.g. the FVBM converges after ~900 sweeps),
   the session presses "↺ Reset" and "▶ Play" again so training is continuous (counted as
   ``restarts``).  Then the context is closed.
   Measuring (issue 14; off with ``--no-measure``): once every session plays, two threads GET
   ``/liveness`` and ``/`` (see below), and a **probe** page opens: the "late page" and the
   Step probe.  The sessions keep training past their seconds until the probe is done (at
   most ``HOLD_LIMIT`` s more, counted in ``trained_seconds``), so every measure is taken
   under the full load; the HTTP threads stop when the first session stops training.
4. Settling: Bokeh discards a closed session only after it has been unused for
   ``unused_session_lifetime`` (15 s) and the check runs every ``check_unused_sessions``
   (17 s): Bokeh's defaults, which ``pn.serve`` keeps.  So a closed tab's runners are stopped
   15-32 s after it closes.  The tool polls the server every 2 s until its thread count is
   back to the idle count (each session runs one worker thread per runner, so this shows
   the sessions were destroyed) and RSS moved < 2 MB over 10 s, at least until the server's
   collection and heap trim after closed sessions were due (``dashboard.app.TRIM_DELAY``),
   or ``--settle`` seconds passed.  That RSS is **after**.  A Python process need not return freed memory to the OS
   (pymalloc arenas, malloc fragmentation), and nobody can call ``gc`` from outside, so
   "after" is reported as measured.

What it measures
----------------
* sessions served: the page loaded (▶ Play enabled) and at least one plot update arrived;
* errors: uncaught page errors (``pageerror``), failures of the driving code (e.g. a page
  that did not load), and ERROR lines / tracebacks in the server log other than the noise
  of closing tabs (see ``Server.log_findings``); console errors and failed requests are
  reported beside them, counted over the sessions (offline, a template's CDN fonts fail);
* plot updates per second per session: a hook on ``Bokeh.documents`` counts the websocket
  patches from the server that change at least one ColumnDataSource (stream, patch or new
  data); the events of one patch are applied synchronously, so a microtask folds them into
  one update.  The app pushes at most one patch per tick (docs/architecture.md): every 100 ms in the
  FVBM lab, 200 ms in the others, so 10/s (5/s) is the ceiling; the rate is counted from the
  ▶ Play click to the end of the training window;
* steps reached (sweeps, epochs, hidden units or race iterations, summed over restarts);
* server RSS (VmRSS of the server and any children, from /proc) at start, baseline, during
  (every ``--sample-every`` s), peak and after; its thread count; and its CPU use (% of one
  core: near 100 the one Python process, not the machine, is the limit);
* with ``--rounds R``, the whole open-train-close-settle cycle R times on one server: RSS
  after each round tells memory the allocator keeps and reuses (level) from a leak (climbing);
* per session, every ``--sample-every`` s: the browser's JS heap
  (``performance.memory.usedJSHeapSize``, precise with ``--enable-precise-memory-info``)
  and the rows held in all the page's ColumnDataSources.  With ``--sessions 1`` (soak
  mode) these are merged with the server RSS into one ``timeline`` so boundedness is
  visible: RSS, JS heap and points should level off, not grow with time.

* ``liveness_ms`` and ``root_ms`` {median, p95, n, failures}: a plain HTTP client
  (``http.client``, a new loopback connection per request, one thread per path) GETs
  ``/liveness`` every ``--liveness-every`` s (0.5) and ``/`` every ``--root-every`` s (5), at
  most one request in flight per path (the next as soon as a slow one answered), from the
  moment every session plays until the first one stops training.  Each time runs from sending
  the request to having read the whole body; a failure (no answer in 10 s, a refused
  connection or a status other than 200) is counted, not timed.  Why ``/`` less often:
  ``GET /`` is a real page load for the server: it builds a Bokeh session with the first lab,
  its runner thread and refresh tick (~0.6 s of the server's one busy core on an idle machine),
  which Bokeh discards only 15-32 s later, unconnected.  Every 0.5 s, that alone kept the
  server's core busy (2 sessions x 20 s: /liveness median 3.7 s, 50 threads, RSS +470 MB, and
  the sessions' websockets timed out).  Even every 5 s it adds load and 3-6 live sessions
  (threads, RSS) of its own;
* ``late_page_seconds``: with all N sessions training, the probe page's time from navigation
  (``page.goto``) until it is usable by the criterion of ``page_load_seconds`` (the lab's tab
  opened, its ▶ Play enabled, the update hook installed); the largest over rounds;
* ``step_to_plot_ms`` {median, p95, n, missed}: in the probe page (under the same load) the lab
  plays until its main plot (``Lab.plot``) got data, is paused, and once the plot is quiet its
  Step button is clicked ``--step-probes`` times (5).  Each time is measured in the page with
  ``performance.now()``: from the ``click`` event on the Step button (a capturing listener on
  ``window``, before Bokeh's own handler sends it) to the first change the server's patch makes
  to the data of a ColumnDataSource of that plot (``doc.on_change``: stream, patch or new
  data), i.e. the round trip click -> server -> step -> refresh tick -> patch applied in the
  page, without the repaint.  A step whose patch did not come in ``STEP_TIMEOUT_S`` is
  ``missed`` (e.g. a run that had already finished).  A dedicated page, not the N sessions:
  pausing those would change their updates/s and steps.
  Percentiles: p95 is the nearest-rank one (an observed value; with n < 20 the largest).

Everything is bounded: N sessions, the given seconds, the settle limit, the hold limit, the
HTTP request count and a page-load timeout; the server binds 127.0.0.1, every request goes to
it, and it is stopped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import math
import os
import re
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM = "/usr/bin/chromium"
# the browser tests' flags (tests/browser/conftest.py), plus exact JS heap numbers
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run", "--enable-precise-memory-info"]
VIEWPORT = {"width": 1500, "height": 1700}
PAGE_TIMEOUT_MS = 300_000  # 8 pages, each building all 4 labs, on 2 shared cores take minutes
HOLD_LIMIT = 600.0  # at most this many seconds past --seconds the sessions train on for the probe
FIRST_UPDATE_LIMIT = 300.0  # seconds from ▶ Play to the first plot update before the session is an error
STEP_TIMEOUT_S = 30.0  # a Step whose plot patch has not come by then is missed
HTTP_TIMEOUT_S = 10.0  # one measured GET


@dataclass(frozen=True)
class Lab:
    tab: str
    steps_js: str  # a JS expression: the steps of the current run (a number) or null
    plot: str  # the main plot's name: its ColumnDataSources are named "<plot>:<line>"


def _counter(prefix: str) -> str:
    """Steps from a counter pane whose text starts with ``prefix`` ("Sweep 12")."""
    return f"""(() => {{
  for (const doc of Bokeh.documents)
    for (const m of doc.all_models)
      if (typeof m.text === 'string' && m.text.startsWith({json.dumps(prefix)}))
        return parseFloat(m.text.slice({len(prefix)}));
  return null;
}})()"""


LABS = {
    "FVBM": Lab("FVBM", _counter("Sweep "), "logpl"),
    "TAP": Lab("TAP", _counter("Epoch "), "tap-ll"),
    "Frank-Wolfe": Lab("Frank-Wolfe", _counter("Hidden units: "), "fw-ll"),
    # the race has no counter: the longest by-iteration line is the steps of the race
    "Bound": Lab("Bound", """(() => {
  let n = null;
  for (const doc of Bokeh.documents)
    for (const m of doc.all_models)
      if (typeof m.name === 'string' && m.name.startsWith('race-by-iteration:') && m.data && m.data.x)
        n = Math.max(n ?? 0, m.data.x.length);
  return n;
})()""", "race-by-iteration"),
}

# Count server patches that change a ColumnDataSource, one per websocket message.  Also note
# when the data of the main plot's sources (named "<plot>:...") last changed, and, for the Step
# probe, the time of a click on a "Step" button and of the first such change after it.
JS_HOOK = """(plot) => {
  if (window.__loadtest) return true;
  if (!(window.Bokeh && Bokeh.documents && Bokeh.documents.length)) return false;
  const s = window.__loadtest = {updates: 0, events: 0, pending: false,
                                 plot_changes: 0, plot_at: null, armed: false, clicked: null, patched: null};
  const prefix = plot + ':';
  window.addEventListener('click', (ev) => {  // capturing: before the button's own handler
    if (s.armed && s.clicked === null &&
        ev.composedPath().some(el => el.tagName === 'BUTTON' && el.textContent.trim() === 'Step'))
      s.clicked = performance.now();
  }, true);
  const onChange = (ev) => {
    const m = ev.model;
    if (!(m && typeof m.get_length === 'function')) return;  // not a data source
    if (typeof m.name === 'string' && m.name.startsWith(prefix) && (ev.attr === undefined || ev.attr === 'data')) {
      const now = performance.now();
      s.plot_changes++;
      s.plot_at = now;
      if (s.armed && s.clicked !== null && s.patched === null) s.patched = now;
    }
    if (ev.sync) return;  // a change made in the page, going to the server
    s.events++;
    if (!s.pending) {
      s.pending = true;
      queueMicrotask(() => { s.pending = false; s.updates++; });
    }
  };
  for (const doc of Bokeh.documents) doc.on_change(onChange, false);
  return true;
}"""
# Cheap state of the page (Bokeh models, not the DOM: role queries over Panel's many shadow
# roots cost the busy renderer far more): plot updates so far, and whether the lab plays
# (only the playing lab has its "❚❚ Pause" enabled).
JS_STATE = """() => {
  let playing = false;
  for (const doc of Bokeh.documents)
    for (const m of doc.all_models)
      if (m.label === '❚❚ Pause' && !m.disabled) playing = true;
  return {updates: window.__loadtest ? window.__loadtest.updates : 0, playing};
}"""
# A sample for the time series: also rows held in all ColumnDataSources and the JS heap.
JS_SAMPLE = """() => {
  let points = 0, sources = 0;
  for (const doc of Bokeh.documents)
    for (const m of doc.all_models)
      if (typeof m.get_length === 'function') { points += m.get_length() ?? 0; sources++; }
  const heap = performance.memory ? performance.memory.usedJSHeapSize : null;
  return {updates: window.__loadtest ? window.__loadtest.updates : 0, points, sources, heap};
}"""
# The Step probe: arm (forget the last click and patch), then wait for both.
JS_ARM = """() => { const s = window.__loadtest; s.armed = true; s.clicked = null; s.patched = null; }"""
JS_STEP_MS = """() => {
  const s = window.__loadtest;
  return s.clicked !== null && s.patched !== null ? {ms: s.patched - s.clicked} : null;
}"""
# ms since the main plot's data last changed (null: never)
JS_PLOT_AGE = """() => {
  const s = window.__loadtest;
  return s.plot_at === null ? null : performance.now() - s.plot_at;
}"""


# ------------------------------------------------------------------ server and /proc


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _children(pid: int) -> list[int]:
    """Every descendant of ``pid`` (from /proc/*/stat)."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        parents.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def serving_pid(pid: int, children: list[int] | None = None) -> int:
    """The process that serves for ``boltzlab serve``'s process ``pid``: its newest child that
    is a ``boltzlab serve`` too (the supervisor's server, replaced when it is recycled:
    boltzlab.dashboard.recycling), or ``pid`` itself (``--recycle-mb 0``, ``--num-procs`` > 1)."""
    newest, started = pid, -1
    for child in _children(pid) if children is None else children:
        try:
            stat = Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()
            command = Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if int(stat[1]) == pid and b"boltzlab" in command and b"serve" in command and int(stat[19]) > started:
            newest, started = child, int(stat[19])  # ppid (field 4), starttime (field 22)
    return newest


def _status(pid: int) -> dict[str, float]:
    """VmRSS (kB), Threads and CPU seconds (user + system) of one process; zeros if it is gone."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
        stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return {"rss_kb": 0, "threads": 0, "cpu_s": 0.0}
    rss = re.search(r"^VmRSS:\s+(\d+) kB", text, re.M)
    threads = re.search(r"^Threads:\s+(\d+)", text, re.M)
    return {"rss_kb": int(rss.group(1)) if rss else 0, "threads": int(threads.group(1)) if threads else 0,
            "cpu_s": (int(stat[11]) + int(stat[12])) / CLOCK_TICKS}  # utime, stime (fields 14, 15)


class Server:
    """The app served by the real CLI on 127.0.0.1, in a subprocess."""

    def __init__(self, port: int, log_path: Path, extra_args: list[str] | None = None) -> None:
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.command = [sys.executable, "-m", "boltzlab", "serve", "--port", str(port),
                        "--address", "127.0.0.1", *(extra_args or [])]
        self.log_path = log_path
        self.proc: subprocess.Popen | None = None
        self._log = None
        self._last_cpu = (0.0, time.monotonic())

    def start(self, timeout: float = 300.0) -> float:
        """Start and poll /liveness; returns the seconds it took (the first run compiles)."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "w")
        env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
        start = time.monotonic()
        self._last_cpu = (0.0, start)
        self.proc = subprocess.Popen(self.command, cwd=ROOT, stdout=self._log, stderr=subprocess.STDOUT,
                                     env=env)
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the server exited early (code {self.proc.returncode}); see {self.log_path}")
            try:
                with urllib.request.urlopen(f"{self.url}/liveness", timeout=2) as response:
                    if response.status == 200:
                        return time.monotonic() - start
            except OSError:
                pass
            if time.monotonic() - start > timeout:
                raise RuntimeError(f"the server did not answer /liveness in {timeout:.0f} s; see {self.log_path}")
            time.sleep(0.5)

    def sample(self) -> dict[str, float]:
        """RSS (MB) of the server and its children, the server's thread count, and the CPU the
        server used since the last sample, in % of one core (100 = one core busy)."""
        assert self.proc is not None
        top = _status(self.proc.pid)
        descendants = _children(self.proc.pid)
        server = serving_pid(self.proc.pid, descendants)
        children = {c: _status(c) for c in descendants}
        main = children.get(server, top)
        rss_kb = top["rss_kb"] + sum(c["rss_kb"] for c in children.values())
        cpu_s, now = top["cpu_s"] + sum(c["cpu_s"] for c in children.values()), time.monotonic()
        last_cpu, last_time = self._last_cpu
        cpu = None  # CPU time comes in 10 ms ticks: no rate over less than a second
        if now - last_time >= 1.0:
            # (none either across a recycled server: its CPU time left with it)
            cpu = round(100 * (cpu_s - last_cpu) / (now - last_time), 1) if cpu_s >= last_cpu else None
            self._last_cpu = (cpu_s, now)
        return {"rss_mb": round(rss_kb / 1024, 1), "server_rss_mb": round(main["rss_kb"] / 1024, 1),
                "threads": main["threads"], "cpu_percent": cpu, "server_pid": server}

    def log_findings(self) -> dict:
        """What the server log says: errors, and the noise of tabs closed mid-stream.

        Closing N tabs while they train makes the server log two kinds of expected noise:
        a write to a closed socket (a traceback ending in ``WebSocketClosedError`` /
        ``StreamClosedError``, with Bokeh's WARNING "Failed sending message as connection was
        closed"), and a message the page sent just before closing that is handled after
        Bokeh detached the connection (ERROR "error handling message" with a traceback at
        ``assert self._session is not None``).  These are counted, not reported as errors;
        every other ERROR / CRITICAL line or traceback is an error.
        """
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        lines = text.splitlines()
        errors, closed, warnings = [], 0, 0
        i = 0
        while i < len(lines):
            line = lines[i]
            if line.startswith("WARNING"):
                warnings += 1
            if not (line.startswith("Traceback") or re.search(r"\b(ERROR|CRITICAL)\b", line)):
                i += 1
                continue
            # an incident: this line up to the exception line of the traceback that follows
            tb = next((k for k in range(i, min(i + 6, len(lines))) if lines[k].startswith("Traceback")), None)
            end = i
            if tb is not None:
                end = tb + 1  # the exception: the first line after the indented frames
                while end < len(lines) and (lines[end].startswith(" ") or not lines[end].strip()):
                    end += 1
                end = min(end, len(lines) - 1)
            block = "\n".join(lines[i:end + 1])
            if re.search(r"WebSocketClosedError|StreamClosedError", lines[end]) or (
                    lines[end].startswith("AssertionError") and "assert self._session is not None" in block):
                closed += 1
            else:
                errors.append(f"server: {line.strip()}" + (f" ({lines[end].strip()})" if end != i else ""))
            i = end + 1
        return {"errors": errors, "closed_connection_incidents": closed, "warning_lines": warnings}

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        if self._log is not None:
            self._log.close()


class HttpProbe:
    """GET ``path`` of a loopback server every ``every`` s, at most ``limit`` times, timing
    each request (a new connection each: a plain client, no proxy, no redirects), in a process
    of its own (``tests/load/httpprobe.py``).

    Its own process: in a thread of the load client, the timings included waiting for the
    client's GIL.  Its requests are spaced at random around ``every`` (see the module
    ``tests/load/httpprobe.py``: a fixed clock was phase-locked to the client's page opens).
    ``ms``, ``at`` (when each was sent, ``time.monotonic()``, the system's clock) and
    ``failures`` are filled by :meth:`join`."""

    def __init__(self, url: str, path: str, every: float, limit: int) -> None:
        parts = urllib.parse.urlsplit(url)
        if parts.hostname not in ("127.0.0.1", "localhost", "::1"):
            raise ValueError(f"The HTTP probe goes to the loopback only. Got {url!r}.")
        self.host, self.port, self.path = parts.hostname, parts.port, path
        self.every, self.limit = every, limit
        self.ms: list[float] = []
        self.at: list[float] = []  # when each timed request was sent (time.monotonic())
        self.failures: list[str] = []
        self._process: subprocess.Popen | None = None

    def start(self) -> None:
        self._process = subprocess.Popen(
            [sys.executable, "-m", "tests.load.httpprobe", self.host, str(self.port), self.path, str(self.every),
             str(self.limit), str(HTTP_TIMEOUT_S)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=Path(__file__).resolve().parents[2])

    def stop(self) -> None:
        """Ask the process to stop; it ends within one request (HTTP_TIMEOUT_S)."""
        if self._process is not None and self._process.stdin is not None:
            self._process.stdin.close()
            self._process.stdin = None  # (communicate would flush it)

    def join(self) -> None:
        """Wait for the process's report (and stop it if it was not asked to)."""
        if self._process is None:
            return
        self.stop()
        try:
            out, _ = self._process.communicate(timeout=HTTP_TIMEOUT_S + 10)
            report = json.loads(out.strip().splitlines()[-1])
        except (subprocess.TimeoutExpired, ValueError, IndexError) as exc:
            self._process.kill()
            self.failures.append(f"the probe of {self.path} did not report: {type(exc).__name__}")
            return
        self.ms, self.at, self.failures = report["ms"], report["at"], report["failures"]


# ------------------------------------------------------------------ browser sessions


class Load:
    """What the N sessions of a round tell the measuring task, and back: every session plays
    (or failed to), the probe is done (the sessions may stop), one session stopped training."""

    def __init__(self, sessions: int, hold: bool) -> None:
        self.waiting = sessions
        self.training = asyncio.Event()
        self.measured = asyncio.Event()
        self.over = asyncio.Event()
        if not hold:
            self.measured.set()

    def started(self) -> None:
        """Called once by each session: it plays, or it failed before."""
        self.waiting -= 1
        if self.waiting <= 0:
            self.training.set()


async def _open_lab(page, url: str, lab: Lab) -> None:
    from playwright.async_api import expect

    await page.goto(url, timeout=PAGE_TIMEOUT_MS)
    await page.locator(".bk-tab").filter(has_text=re.compile(rf"^\s*{re.escape(lab.tab)}\s*$")).first.click(
        timeout=PAGE_TIMEOUT_MS)
    play = page.get_by_role("button", name="▶ Play", exact=True)
    await expect(play).to_have_count(1, timeout=PAGE_TIMEOUT_MS)  # only the visible lab's buttons count
    await expect(play).to_be_enabled(timeout=PAGE_TIMEOUT_MS)
    await page.wait_for_function(JS_HOOK, arg=lab.plot, timeout=PAGE_TIMEOUT_MS)  # installs the update counter


async def _press_play(page) -> None:
    from playwright.async_api import expect

    await page.get_by_role("button", name="▶ Play", exact=True).click()
    await expect(page.get_by_role("button", name="❚❚ Pause", exact=True)).to_be_enabled(timeout=60_000)


async def _select_speed(page, speed: str) -> None:
    box = page.get_by_role("combobox").filter(has=page.get_by_role("option", name=speed, exact=True))
    await box.first.select_option(label=speed)


async def _steps(page, lab: Lab) -> float | None:
    return await page.evaluate(lab.steps_js)


async def run_session(index: int, browser, url: str, lab: Lab, seconds: float, sample_every: float,
                      speed: str | None, t0: float, load: Load | None = None) -> dict:
    """One browser session: open the lab, play for ``seconds`` (and, with a ``load``, on until
    its probe is done, at most ``HOLD_LIMIT`` s more), sample, close."""
    from playwright.async_api import expect

    rec: dict = {"session": index, "loaded": False, "served": False, "errors": [], "console_errors": [],
                 "failed_requests": [], "restarts": 0,
                 "load_seconds": None, "trained_seconds": None, "updates": 0, "updates_per_second": 0.0,
                 "steps": None, "series": []}
    recording = True

    def error(text: str, kind: str = "errors") -> None:
        if recording:
            rec[kind].append(text)

    context = await browser.new_context(viewport=VIEWPORT)
    page = await context.new_page()
    page.on("pageerror", lambda exc: error(f"pageerror: {exc}"))
    page.on("console", lambda msg: msg.type == "error" and error(msg.text, "console_errors"))
    page.on("requestfailed", lambda req: error(f"{req.url} ({req.failure})", "failed_requests"))
    steps_done = 0.0  # steps of the runs finished before a restart
    started = False

    def start_load() -> None:
        nonlocal started
        if load is not None and not started:
            started = True
            load.started()

    try:
        opened = time.monotonic()
        await _open_lab(page, url, lab)
        rec["loaded"] = True
        rec["load_seconds"] = round(time.monotonic() - opened, 2)
        if speed:
            await _select_speed(page, speed)
        await _press_play(page)
        start_load()
        first = await page.evaluate(JS_STATE)
        # the clock starts at the first plot update, not at the click: on a busy machine the
        # first steps can take longer than a short session (the warm-up plays 3 s)
        waited = time.monotonic()
        while (await page.evaluate(JS_STATE))["updates"] <= first["updates"]:
            if time.monotonic() - waited > FIRST_UPDATE_LIMIT:
                raise TimeoutError(f"no plot update {FIRST_UPDATE_LIMIT:.0f} s after ▶ Play")
            await asyncio.sleep(0.25)
        start = time.monotonic()
        next_sample = start
        while True:
            now = time.monotonic()
            if now - start >= seconds and (load is None or load.measured.is_set()
                                           or now - start >= seconds + HOLD_LIMIT):
                break
            if now >= next_sample:
                sample = await page.evaluate(JS_SAMPLE)
                steps = await _steps(page, lab)
                rec["series"].append({
                    "t": round(now - t0, 1), "updates": sample["updates"] - first["updates"],
                    "points": sample["points"], "sources": sample["sources"],
                    "js_heap_mb": None if sample["heap"] is None else round(sample["heap"] / 2**20, 1),
                    "steps": None if steps is None else steps_done + steps})
                next_sample += sample_every
            if not (await page.evaluate(JS_STATE))["playing"]:  # the run stopped by itself: restart it
                steps_done += (await _steps(page, lab)) or 0.0
                await page.get_by_role("button", name="↺ Reset", exact=True).click()
                await expect(page.get_by_role("button", name="▶ Play", exact=True)).to_be_enabled(timeout=60_000)
                await _press_play(page)
                rec["restarts"] += 1
            left = start + seconds - time.monotonic()
            await asyncio.sleep(min(1.0, left) if left > 0 else 0.5)  # <= 0: held for the probe
        if load is not None:
            load.over.set()
        end = await page.evaluate(JS_SAMPLE)
        trained = time.monotonic() - start
        steps = await _steps(page, lab)
        rec["trained_seconds"] = round(trained, 1)
        rec["updates"] = end["updates"] - first["updates"]
        rec["updates_per_second"] = round(rec["updates"] / trained, 2)
        rec["steps"] = None if steps is None else steps_done + steps
        rec["points"] = end["points"]
        rec["js_heap_mb"] = None if end["heap"] is None else round(end["heap"] / 2**20, 1)
        rec["served"] = rec["updates"] > 0
    except Exception as exc:  # report it as this session's error and go on with the others
        error(f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
    finally:
        recording = False  # closing a page may log websocket noise: not the app's error
        start_load()
        if load is not None:
            load.over.set()
        await context.close()
    return rec


async def _plot_quiet(page, quiet_ms: float = 1000.0, limit: float = 10.0) -> bool:
    """Wait (at most ``limit`` s) until the main plot's data has not changed for ``quiet_ms``."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        age = await page.evaluate(JS_PLOT_AGE)
        if age is not None and age >= quiet_ms:
            return True
        await asyncio.sleep(0.2)
    return False


async def run_probe(browser, url: str, lab: Lab, steps: int) -> dict:
    """The probe page, opened while the N sessions train: the late page's load time, then
    ``steps`` Step clicks on the paused lab, each timed in the page to its first plot patch."""
    from playwright.async_api import TimeoutError as PlaywrightTimeout
    from playwright.async_api import expect

    rec: dict = {"late_page_seconds": None, "step_ms": [], "missed": 0, "errors": [],
                 "console_errors": [], "failed_requests": []}
    recording = True

    def error(text: str, kind: str = "errors") -> None:
        if recording:
            rec[kind].append(text)

    context = await browser.new_context(viewport=VIEWPORT)
    page = await context.new_page()
    page.on("pageerror", lambda exc: error(f"pageerror: {exc}"))
    page.on("console", lambda msg: msg.type == "error" and error(msg.text, "console_errors"))
    page.on("requestfailed", lambda req: error(f"{req.url} ({req.failure})", "failed_requests"))
    try:
        opened = time.monotonic()
        await _open_lab(page, url, lab)
        rec["late_page_seconds"] = round(time.monotonic() - opened, 2)
        # a run that has data, then paused: Step continues it (as a person would use it)
        await _press_play(page)
        await page.wait_for_function("() => window.__loadtest.plot_changes > 0", timeout=PAGE_TIMEOUT_MS)
        pause = page.get_by_role("button", name="❚❚ Pause", exact=True)
        if await pause.is_enabled():  # (a short run, e.g. a race, may have finished already)
            await pause.click()
        await expect(page.get_by_role("button", name="▶ Play", exact=True)).to_be_enabled(timeout=60_000)
        step = page.get_by_role("button", name="Step", exact=True)
        for _ in range(steps):
            await _plot_quiet(page)  # the last tick of the run (or step) before has come
            await page.evaluate(JS_ARM)
            await step.click()
            try:
                done = await page.wait_for_function(JS_STEP_MS, timeout=1000 * STEP_TIMEOUT_S)
            except PlaywrightTimeout:  # no patch came
                rec["missed"] += 1
                continue
            rec["step_ms"].append(round((await done.json_value())["ms"], 1))
    except Exception as exc:
        error(f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
    finally:
        recording = False
        await context.close()
    return rec


async def _measure(browser, server: Server, lab: Lab, load: Load, seconds: float,
                   every: dict[str, float], steps: int) -> dict:
    """Once every session plays: GET /liveness and / in threads, and the probe page; the
    sessions are released when the probe is done; the threads stop when a session stops."""
    try:
        await load.training.wait()  # bounded: each session either plays or fails
        probes = {name: HttpProbe(server.url, path, every[name], int((seconds + HOLD_LIMIT) / every[name]) + 1)
                  for name, path in (("liveness", "/liveness"), ("root", "/"))}
        for probe in probes.values():
            probe.start()
        try:
            rec = await asyncio.wait_for(run_probe(browser, server.url, lab, steps), HOLD_LIMIT)
        except asyncio.TimeoutError:
            rec = {"late_page_seconds": None, "step_ms": [], "missed": 0, "console_errors": [],
                   "failed_requests": [], "errors": [f"the probe did not finish in {HOLD_LIMIT:.0f} s"]}
        load.measured.set()
        await load.over.wait()  # bounded: the sessions hold at most HOLD_LIMIT s
        for probe in probes.values():
            probe.stop()
        for probe in probes.values():
            await asyncio.to_thread(probe.join)
        return {**rec, "http": {name: probe for name, probe in probes.items()}}
    finally:
        load.measured.set()


async def _warm_up(browser, url: str, lab: Lab, seconds: float = 3.0) -> list[str]:
    """Open the lab once, train briefly, close; returns its errors."""
    rec = await run_session(-1, browser, url, lab, seconds, seconds, None, time.monotonic())
    return rec["errors"] if rec["served"] else rec["errors"] + ["the warm-up session got no plot update"]


async def _settle(server: Server, threads_idle: int, timeout: float, series: list, t0: float,
                  every: float = 2.0, window: float = 10.0, tolerance_mb: float = 2.0,
                  at_least: float | None = None) -> dict:
    """Poll until the sessions are discarded (threads back to idle) and RSS is stable, and at
    least ``at_least`` seconds (default: until the server's collection and heap trim after
    closed sessions are due, ``dashboard.app.TRIM_DELAY``, and one window more)."""
    if at_least is None:
        from boltzlab.dashboard.app import TRIM_DELAY

        at_least = TRIM_DELAY + window
    start = time.monotonic()
    mine: list[dict] = []
    while True:
        now = time.monotonic()
        sample = {"t": round(now - t0, 1), **server.sample()}
        series.append(sample)
        mine.append({**sample, "since": now - start})
        recent = [s["rss_mb"] for s in mine if s["since"] >= now - start - window]
        discarded = sample["threads"] <= threads_idle
        stable = now - start >= max(window, at_least) and max(recent) - min(recent) <= tolerance_mb
        if (discarded and stable) or now - start >= timeout:
            return {**sample, "seconds": round(now - start, 1), "discarded": discarded, "stable": stable}
        await asyncio.sleep(every)


async def _sample_server(server: Server, series: list, every: float, t0: float, stop: asyncio.Event) -> None:
    while not stop.is_set():
        series.append({"t": round(time.monotonic() - t0, 1), **server.sample()})
        try:
            await asyncio.wait_for(stop.wait(), every)
        except asyncio.TimeoutError:
            pass


def _counts(items) -> dict[str, int]:
    out: dict[str, int] = {}
    for item in items:
        out[item] = out.get(item, 0) + 1
    return out


def _percentiles(values: list[float]) -> dict:
    """Median and nearest-rank 95th percentile (an observed value) of ``values``, and their count."""
    values = sorted(v for v in values if v is not None)
    if not values:
        return {"median": None, "p95": None, "n": 0}
    return {"median": round(statistics.median(values), 1),
            "p95": round(values[max(0, math.ceil(0.95 * len(values)) - 1)], 1), "n": len(values)}


def _measure_report(measures: list[dict], measure: bool) -> dict:
    """The issue-14 keys, over all rounds (None when not measured)."""
    if not measure:
        return {"liveness_ms": None, "root_ms": None, "step_to_plot_ms": None, "late_page_seconds": None,
                "http_failures": None}
    http = {}
    for name in ("liveness", "root"):
        probes = [m["http"][name] for m in measures]
        http[name] = {**_percentiles([ms for p in probes for ms in p.ms]),
                      "failures": sum(len(p.failures) for p in probes)}
    late = [m["late_page_seconds"] for m in measures if m["late_page_seconds"] is not None]
    return {"liveness_ms": http["liveness"], "root_ms": http["root"],
            "step_to_plot_ms": {**_percentiles([ms for m in measures for ms in m["step_ms"]]),
                                "missed": sum(m["missed"] for m in measures)},
            "late_page_seconds": max(late) if late else None,
            # the distinct failures of the HTTP probes, counted (empty when all answered)
            "http_failures": _counts(f"{name}: {f}" for m in measures for name, p in m["http"].items()
                                     for f in p.failures)}


def _spread(values: list[float]) -> dict | None:
    values = [v for v in values if v is not None]
    if not values:
        return None
    return {"min": round(min(values), 2), "median": round(statistics.median(values), 2),
            "max": round(max(values), 2)}


def _slope_per_minute(points: list[tuple[float, float]]) -> float | None:
    """Least-squares slope (per minute) of (t seconds, value) pairs."""
    points = [(t, v) for t, v in points if v is not None]
    if len(points) < 3:
        return None
    ts, vs = zip(*points)
    mt, mv = statistics.fmean(ts), statistics.fmean(vs)
    var = sum((t - mt) ** 2 for t in ts)
    return None if var == 0 else round(60 * sum((t - mt) * (v - mv) for t, v in zip(ts, vs)) / var, 3)


def _soak_summary(timeline: list[dict]) -> dict:
    """Is each series bounded?  Its maximum over the second half of the run against the first
    half (bounded: not higher by more than noise), and its least-squares slope over the second
    half (bounded: ~0; a run restarted by Reset makes ``points`` a sawtooth, so compare maxima)."""
    if not timeline:
        return {}
    half = len(timeline) // 2
    out = {}
    for key in ("rss_mb", "js_heap_mb", "points"):
        values = [row.get(key) for row in timeline]
        if all(v is None for v in values):
            continue
        first = [v for v in values[:half] if v is not None]
        second = [v for v in values[half:] if v is not None]
        out[key] = {"first": first[0] if first else second[0], "last": second[-1], "max": max(first + second),
                    "first_half_max": max(first) if first else None, "second_half_max": max(second),
                    "second_half_slope_per_min": _slope_per_minute([(r["t"], r.get(key)) for r in timeline[half:]])}
    return out


async def run(sessions: int = 8, seconds: float = 60.0, lab: str = "FVBM", port: int | None = None,
              sample_every: float = 5.0, speed: str | None = None, warmup: bool = True,
              settle: float = 90.0, log_path: Path | None = None, rounds: int = 1, workers: int | None = None,
              measure: bool = True, liveness_every: float = 0.5, root_every: float = 5.0,
              step_probes: int = 5) -> dict:
    """Run the load (or, with one long session, soak) test; returns the report.

    ``rounds`` > 1 repeats "open N sessions, train, close, settle" on the same server: if RSS
    after each round stays level, memory not returned to the OS is being reused (allocator
    retention); if it climbs round after round, sessions leak.  ``workers``: passed to
    ``boltzlab serve --workers`` (only when not None).  ``measure``: the HTTP latencies, the
    late page and the Step probe of each round (see the module's doc).
    """
    from playwright.async_api import async_playwright

    if lab not in LABS:
        raise ValueError(f"The 'lab' parameter must be one of {sorted(LABS)}. Got {lab!r}.")
    if not os.path.exists(CHROMIUM):
        raise FileNotFoundError(f"{CHROMIUM} is not installed (the README's test command installs it)")
    spec = LABS[lab]
    port = port or _free_port()
    server = Server(port, log_path or ARTIFACTS / "loadtest-server.log",
                    None if workers is None else ["--workers", str(workers)])
    t0 = time.monotonic()
    report: dict = {
        "config": {"lab": lab, "sessions": sessions, "seconds": seconds, "rounds": rounds,
                   "sample_every": sample_every, "speed": speed or "lab default", "warmup": warmup,
                   "settle_limit": settle, "workers": workers, "measure": measure,
                   "liveness_every": liveness_every, "root_every": root_every,
                   "step_probes": step_probes, "hold_limit": HOLD_LIMIT,
                   "server_command": " ".join(server.command[1:]), "url": server.url,
                   "cpus": os.cpu_count(), "load_average_at_start": [round(x, 2) for x in os.getloadavg()]},
        "sessions_requested": sessions * rounds,
    }
    errors: list[str] = []
    series: list[dict] = []  # server samples: t, rss_mb, threads, cpu_percent
    durations: dict = {}
    records: list[dict] = []
    round_reports: list[dict] = []
    every = {"liveness": liveness_every, "root": root_every}
    measures: list[dict] = []  # per round: the probe's record and the HTTP probes

    def sample() -> dict:
        row = {"t": round(time.monotonic() - t0, 1), **server.sample()}
        series.append(row)
        return row

    try:
        durations["server_start"] = round(server.start(), 1)
        idle = sample()
        async with async_playwright() as pw:
            browser = await pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
            report["config"]["chromium"] = browser.version
            if warmup:
                t = time.monotonic()
                errors += [f"warm-up: {e}" for e in await _warm_up(browser, server.url, spec)]
                durations["warmup"] = round(time.monotonic() - t, 1)
                base = await _settle(server, idle["threads"], settle, series, t0)
                durations["baseline_settle"] = base["seconds"]
                report["baseline_settled"] = {"discarded": base["discarded"], "stable": base["stable"]}
            else:
                base = sample()
            for r in range(rounds):
                stop = asyncio.Event()
                sampler = asyncio.create_task(_sample_server(server, series, sample_every, t0, stop))
                t = time.monotonic()
                first = len(series)
                load = Load(sessions, hold=measure)
                measuring = (asyncio.create_task(_measure(browser, server, spec, load, seconds, every,
                                                          step_probes)) if measure else None)
                batch = await asyncio.gather(*(run_session(r * sessions + i, browser, server.url, spec, seconds,
                                                           sample_every, speed, t0, load) for i in range(sessions)))
                records += batch
                if measuring is not None:
                    measures.append(await measuring)
                took = round(time.monotonic() - t, 1)
                stop.set()
                await sampler
                closed = sample()
                peak = max(row["rss_mb"] for row in series[first:])
                if settle > 0:
                    after = await _settle(server, idle["threads"], settle, series, t0)
                else:
                    after = {**closed, "seconds": 0.0, "discarded": closed["threads"] <= idle["threads"],
                             "stable": False}
                round_reports.append({
                    "round": r + 1, "sessions_served": sum(rec["served"] for rec in batch), "sessions_seconds": took,
                    "rss_peak_mb": peak, "rss_at_close_mb": closed["rss_mb"], "rss_after_mb": after["rss_mb"],
                    "server_rss_after_mb": after["server_rss_mb"],
                    "threads_after": after["threads"], "settle_seconds": after["seconds"],
                    "discarded": after["discarded"], "stable": after["stable"],
                    "late_page_seconds": measures[-1]["late_page_seconds"] if measuring is not None else None})
            await browser.close()
        log = server.log_findings()
        errors += log.pop("errors")
        report["server_log"] = {**log, "path": str(server.log_path)}
    finally:
        server.stop()
    durations["sessions"] = [rr["sessions_seconds"] for rr in round_reports]
    durations["settle"] = [rr["settle_seconds"] for rr in round_reports]
    durations["total"] = round(time.monotonic() - t0, 1)
    report["config"]["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]

    for rec in records:
        errors += [f"session {rec['session']}: {e}" for e in rec["errors"]]
    for i, m in enumerate(measures):
        errors += [f"probe {i + 1}: {e}" for e in m["errors"]]
    # console errors and failed requests: reported (counted over sessions), not errors of the
    # app's code: e.g. a template asking an unreachable CDN for a font logs both
    report["console_errors"] = _counts(e for r in records + measures for e in r["console_errors"])
    report["failed_requests"] = _counts(e for r in records + measures for e in r["failed_requests"])
    last = round_reports[-1]
    peak = max(rr["rss_peak_mb"] for rr in round_reports)
    busy = [row["cpu_percent"] for row in series if row["threads"] > idle["threads"] and row["cpu_percent"] is not None]
    report.update({
        "sessions_served": sum(r["served"] for r in records),
        "errors": errors,
        "updates_per_second": _spread([r["updates_per_second"] for r in records]),
        "steps": _spread([r["steps"] for r in records]),
        "restarts": sum(r["restarts"] for r in records),
        "page_load_seconds": _spread([r["load_seconds"] for r in records]),
        **_measure_report(measures, measure),
        "rss_mb": {"idle": idle["rss_mb"], "baseline": base["rss_mb"], "peak": peak,
                   "at_close": last["rss_at_close_mb"], "after": last["rss_after_mb"],
                   "peak_minus_baseline": round(peak - base["rss_mb"], 1),
                   "after_minus_baseline": round(last["rss_after_mb"] - base["rss_mb"], 1),
                   # the server process alone (the rest: its worker processes)
                   "server_baseline": base["server_rss_mb"],
                   "server_after_minus_baseline": round(last["server_rss_after_mb"] - base["server_rss_mb"], 1)},
        "threads": {"idle": idle["threads"], "baseline": base["threads"],
                    "peak": max(row["threads"] for row in series), "after": last["threads_after"]},
        "server_cpu_percent_while_sessions_live": _spread(busy),
        "durations_s": durations,
    })
    if rounds > 1:
        report["rounds"] = round_reports
    if sessions == 1 and rounds == 1:  # soak mode: one timeline of server RSS, JS heap and points held
        rss = [(row["t"], row["rss_mb"]) for row in series]
        timeline = []
        for row in records[0]["series"]:
            nearest = min(rss, key=lambda p: abs(p[0] - row["t"]))
            timeline.append({"t": row["t"], "rss_mb": nearest[1], "js_heap_mb": row["js_heap_mb"],
                             "points": row["points"], "updates": row["updates"], "steps": row["steps"]})
        report["timeline"] = timeline
        report["soak"] = _soak_summary(timeline)
    report["server_series"] = series
    report["sessions"] = records
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.load.loadtest", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, default=8, help="concurrent browser sessions (default 8)")
    parser.add_argument("--seconds", type=float, default=60.0, help="training time per session (default 60)")
    parser.add_argument("--lab", choices=list(LABS), default="FVBM", help="the lab to train (default FVBM)")
    parser.add_argument("--port", type=int, default=None, help="server port (default: a free one)")
    parser.add_argument("--json", type=Path, default=None, help="also write the report to this file")
    parser.add_argument("--sample-every", type=float, default=5.0,
                        help="seconds between RSS / JS heap / points samples (default 5)")
    parser.add_argument("--speed", default=None,
                        help="a speed option to pick, e.g. 'as fast as possible' (default: the lab's own)")
    parser.add_argument("--warmup", action=argparse.BooleanOptionalAction, default=True,
                        help="load the lab once and wait for its session to be discarded before the baseline")
    parser.add_argument("--settle", type=float, default=90.0,
                        help="at most this many seconds to wait for closed sessions to be discarded and RSS "
                             "to settle (0: measure 'after' at once; default 90 = Bokeh's worst case 32 s + margin)")
    parser.add_argument("--rounds", type=int, default=1,
                        help="repeat open-train-close-settle this many times on the same server (default 1): "
                             "RSS after each round tells reuse from a leak")
    parser.add_argument("--log", type=Path, default=None,
                        help="server log file (default test-artifacts/loadtest-server.log)")
    parser.add_argument("--workers", type=int, default=None,
                        help="passed on as 'boltzlab serve --workers N' (default: not passed: the server's default)")
    parser.add_argument("--measure", action=argparse.BooleanOptionalAction, default=True,
                        help="time GET /liveness and /, a late page's load and Step -> plot patch while the "
                             "sessions train (default on)")
    parser.add_argument("--liveness-every", type=float, default=0.5,
                        help="seconds between the measured GETs of /liveness (default 0.5)")
    parser.add_argument("--root-every", type=float, default=5.0,
                        help="seconds between the measured GETs of / (default 5: each builds a server session)")
    parser.add_argument("--step-probes", type=int, default=5,
                        help="Step clicks timed in the probe page per round (default 5)")
    args = parser.parse_args(argv)
    if args.sessions < 1 or args.rounds < 1 or args.seconds <= 0 or args.sample_every <= 0 or args.settle < 0:
        parser.error("--sessions and --rounds must be >= 1, --seconds and --sample-every > 0, --settle >= 0")
    if ((args.workers is not None and args.workers < 0) or args.step_probes < 1
            or args.liveness_every <= 0 or args.root_every <= 0):
        parser.error("--workers must be >= 0, --step-probes >= 1, --liveness-every and --root-every > 0")
    report = asyncio.run(run(args.sessions, args.seconds, args.lab, args.port, args.sample_every, args.speed,
                             args.warmup, args.settle, args.log, args.rounds, args.workers, args.measure,
                             args.liveness_every, args.root_every, args.step_probes))
    text = json.dumps(report, indent=1)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(text)
    summary = {k: v for k, v in report.items() if k not in ("server_series", "sessions", "timeline")}
    print(json.dumps(summary, indent=1))
    ok = report["sessions_served"] == report["sessions_requested"] and not report["errors"]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
