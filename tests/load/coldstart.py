"""The first start of ``boltzlab serve``, measured (issue 22, item 2): a measurement, not a test.

    python -m tests.load.coldstart [--port P] [--json out.json]

Starts the real CLI twice with ``NUMBA_CACHE_DIR`` pointed at a new, empty folder: a *cold*
start (numba compiles every kernel) and then a *warm* one (the same folder, now filled).  For
each: seconds from launch to the first line on the terminal, to ``/liveness`` answering, to the
FVBM lab's ▶ Play being enabled in Chromium, to the first point of its log-PL plot after Play,
and to the server's "ready" line (every kernel loaded).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from tests.serving import ROOT, answers, free_port

CHROMIUM = "/usr/bin/chromium"
JS_POINTS = """() => {
  for (const doc of Bokeh.documents)
    for (const m of doc.all_models)
      if (m.name === 'logpl:BSLM/log_pl' && m.data && m.data.x && m.data.x.length) return m.data.x.length;
  return 0;
}"""


def one_start(cache: str, port: int, timeout: float = 900.0) -> dict:
    """Launch serve with ``NUMBA_CACHE_DIR=cache``; the seconds to each milestone."""
    env = {**os.environ, "NUMBA_CACHE_DIR": cache, "PYTHONUNBUFFERED": "1"}
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "boltzlab", "serve", "--port", str(port),
                             "--address", "127.0.0.1"], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    times: dict[str, float] = {}
    lines: list[str] = []

    def read() -> None:
        for line in proc.stdout:
            lines.append(line.rstrip())
            times.setdefault("first_output_s", time.perf_counter() - t0)
            if "boltzlab serve: ready" in line:
                times["all_kernels_ready_s"] = time.perf_counter() - t0

    threading.Thread(target=read, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{port}"
        while not answers(url + "/liveness"):
            if proc.poll() is not None or time.perf_counter() - t0 > timeout:
                raise RuntimeError("serve did not answer:\n" + "\n".join(lines[-20:]))
            time.sleep(0.1)
        times["liveness_s"] = time.perf_counter() - t0
        from playwright.sync_api import sync_playwright

        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
            page = browser.new_page(viewport={"width": 1440, "height": 900})
            page.goto(url + "/")
            times["page_s"] = time.perf_counter() - t0
            play = page.get_by_role("button", name="▶ Play")
            play.and_(page.locator(":enabled")).wait_for(timeout=timeout * 1000)
            times["play_enabled_s"] = time.perf_counter() - t0
            play.click()
            clicked = time.perf_counter()
            page.wait_for_function(JS_POINTS, timeout=timeout * 1000, polling=100)
            times["first_plot_s"] = time.perf_counter() - t0
            times["play_to_plot_s"] = time.perf_counter() - clicked
            browser.close()
        deadline = time.perf_counter() + timeout
        while "all_kernels_ready_s" not in times and time.perf_counter() < deadline and proc.poll() is None:
            time.sleep(0.2)
    finally:
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
    return {key: round(value, 1) for key, value in times.items()} | {
        "log": [line for line in lines if line.startswith("boltzlab")]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.load.coldstart", description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=None)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="boltzlab-numba-") as cache:
        report = {"cold": one_start(cache, args.port or free_port()),
                  "warm": one_start(cache, args.port or free_port()),
                  "load_average_1min": os.getloadavg()[0]}
    for kind in ("cold", "warm"):
        print(kind, {k: v for k, v in report[kind].items() if k != "log"})
    for line in report["cold"]["log"]:
        print("  ", line)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
