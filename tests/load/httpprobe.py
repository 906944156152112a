"""The HTTP probe's own process (:class:`tests.load.loadtest.HttpProbe`): GET a loopback
path every ``every`` s on average (each interval drawn in [0.5, 1.5] x ``every``), at most
``limit`` times, timing each request, until its standard input closes; then one JSON line on
standard output: ``{"ms": [...], "at": [...], "failures": [...]}`` (``at``: when each timed
request was sent, ``time.monotonic()``, the system's clock, comparable with the client's).

Standard library only: it starts in a fraction of a second and shares no GIL with the load
client.  Why the random intervals: on a fixed 0.5 s clock started with the window, the probe
sent a request at the very instant the client opened each new page (every 15 s), and so
timed the page's stall of the server's loop every time (p95 114-164 ms with 24 followers of
a TAP run), where probes at any other phase, in the same window, read p95 4-5 ms.
"""

from __future__ import annotations

import http.client
import json
import random
import sys
import threading
import time


def get(host: str, port: int, path: str, timeout: float) -> float:
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        start = time.perf_counter()
        conn.request("GET", path)
        response = conn.getresponse()
        response.read()
        took = 1000 * (time.perf_counter() - start)
    finally:
        conn.close()
    if response.status != 200:
        raise http.client.HTTPException(f"HTTP {response.status}")
    return took


def main(argv: list[str]) -> int:
    host, port, path, every, limit, timeout = argv[0], int(argv[1]), argv[2], float(argv[3]), int(argv[4]), float(argv[5])
    stop = threading.Event()

    def watch() -> None:  # the client closes our standard input: stop
        sys.stdin.read()
        stop.set()

    threading.Thread(target=watch, daemon=True).start()
    ms: list[float] = []
    at: list[float] = []
    failures: list[str] = []
    next_at = time.monotonic()
    while not stop.is_set() and len(ms) + len(failures) < limit:
        try:
            sent = time.monotonic()
            ms.append(get(host, port, path, timeout))
            at.append(sent)
        except (OSError, http.client.HTTPException) as exc:
            failures.append(f"{type(exc).__name__}: {exc}")
        # one in flight, no catch-up burst; each interval drawn in [0.5, 1.5] x every, so the
        # probe is not phase-locked to what the load client does on a fixed clock (a page opened
        # every 15 s met a request sent at the same instant, every time)
        next_at = max(next_at + every * random.uniform(0.5, 1.5), time.monotonic())
        stop.wait(next_at - time.monotonic())
    sys.stdout.write(json.dumps({"ms": ms, "at": at, "failures": failures}) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
