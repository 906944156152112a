"""The load test (issue 7) and its smoke variant; both run ``tests/load/loadtest.py``.

* ``test_load`` (marker ``load``, not in the default run: ``pytest -m load``): N concurrent
  browser sessions train a lab for S seconds, twice on the same server
  (``BOLTZLAB_LOAD_SESSIONS``, default 8; ``BOLTZLAB_LOAD_SECONDS``, default 60;
  ``BOLTZLAB_LOAD_LAB``, default FVBM; ``BOLTZLAB_LOAD_ROUNDS``, default 2).  It takes about
  2 x (S + page loads + up to 32 s for Bokeh to discard the closed sessions) plus a warm-up:
  ~8 minutes on a quiet 2-core machine, much longer on a busy one.  The report is written to
  test-artifacts/load-report.json.
* ``test_load_smoke`` (marker ``browser``, in the default run): 2 sessions x 10 s on the
  FVBM lab, no warm-up and no settling wait: the tool works and the app serves them.
* ``test_protocol_smoke`` (marker ``slow``, in the default run; no browser): the same for the
  protocol-level client ``tests/load/protocol.py`` (issue 22, item 5): 2 simulated users x 10 s
  on the TAP lab, one new page and 3 timed Steps: they were served, patches arrived and were
  applied, no errors.

Both check that the measures of issue 14 are there and well formed (``liveness_ms``,
``root_ms``, ``step_to_plot_ms``, ``late_page_seconds``), never their values: the suite must
pass on a busy machine.

The tool runs in a subprocess: it has its own server, browser and asyncio loop, apart from
pytest-playwright's (sync) browser fixtures.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.load.loadtest import ARTIFACTS, CHROMIUM, HOLD_LIMIT

ROOT = Path(__file__).resolve().parents[2]

# The memory bound.  CPython does not give the memory of destroyed sessions back to the OS
# (pymalloc arenas, malloc fragmentation): RSS stays near the round's peak even when every
# session was freed.  Measured on 2 cores: 8 sessions x 60 s left RSS at baseline + 239 MB
# (= their peak), yet in-process a gc census after 3 rounds of 2 sessions found no lab or
# runner object alive and RSS grew 182 MB in round 1, then +0.4 and +1.4 MB: the memory is
# reused.  So "after <= baseline + a fixed 150 MB" would fail a leak-free server, and after one
# round a leak looks the same as retention.  The test therefore runs two rounds and bounds RSS
# after the second by what the first round needed plus ROUND_SLACK_MB:
#     after <= baseline + (round-1 peak - baseline) + ROUND_SLACK_MB.
# If sessions leak, round 2 cannot reuse round 1's memory and adds its footprint again (~30 MB
# per session measured, ~240 MB for 8), well over the slack; the slack covers round-to-round
# noise (+4 to +25 MB measured with 2 sessions, e.g. a session rebuilt when its page loaded late).
# With one round (BOLTZLAB_LOAD_ROUNDS=1) the bound is the 150 MB or 25 % of the
# baseline, whichever is larger; expect allocator retention to exceed it at 8 sessions.
ROUND_SLACK_MB = 100.0
ONE_ROUND_SLACK_MB = 150.0
ONE_ROUND_SLACK_FRACTION = 0.25


def _need_chromium() -> None:
    if not os.path.exists(CHROMIUM):
        # a failure, never a skip (issue 27): the README's test command installs Chromium, so
        # a missing browser is a broken install, and a skip would hide it
        pytest.fail(f"{CHROMIUM} is not installed (the README's test command installs it)")


def run_loadtest(name: str, *args: str, timeout: float) -> dict:
    """Run the tool; return its report (also kept in test-artifacts/<name>.json)."""
    _need_chromium()
    ARTIFACTS.mkdir(exist_ok=True)
    report_path = ARTIFACTS / f"{name}.json"
    report_path.unlink(missing_ok=True)
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.run(
        [sys.executable, "-m", "tests.load.loadtest", *args, "--json", str(report_path),
         "--log", str(ARTIFACTS / f"{name}-server.log")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    assert report_path.exists(), f"the load test wrote no report (exit {proc.returncode}):\n{proc.stderr[-4000:]}"
    return json.loads(report_path.read_text())


def _summary(report: dict) -> str:
    """The report without its time series, for assertion messages."""
    return json.dumps({k: v for k, v in report.items() if k not in ("server_series", "sessions", "timeline")},
                      indent=1)


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0


def assert_measures(report: dict, info: str) -> None:
    """The issue-14 keys exist and are well formed: times are numbers >= 0 taken at least once
    (p95, the nearest-rank one, is never below the median), failures a count."""
    for key in ("liveness_ms", "root_ms", "step_to_plot_ms"):
        m = report.get(key)
        assert isinstance(m, dict), f"{key}: {m!r}\n{info}"
        assert isinstance(m["n"], int) and m["n"] >= 1, f"{key}: {m}\n{info}"
        assert _is_number(m["median"]) and _is_number(m["p95"]) and m["p95"] >= m["median"], f"{key}: {m}\n{info}"
    for key in ("liveness_ms", "root_ms"):
        failures = report[key]["failures"]
        assert isinstance(failures, int) and failures >= 0, f"{key}: {report[key]}\n{info}"
    late = report.get("late_page_seconds")
    assert _is_number(late), f"late_page_seconds: {late!r}\n{info}"


@pytest.mark.load
def test_load():
    sessions = int(os.environ.get("BOLTZLAB_LOAD_SESSIONS", "8"))
    seconds = float(os.environ.get("BOLTZLAB_LOAD_SECONDS", "60"))
    lab = os.environ.get("BOLTZLAB_LOAD_LAB", "FVBM")
    rounds = int(os.environ.get("BOLTZLAB_LOAD_ROUNDS", "2"))
    report = run_loadtest("load-report", "--sessions", str(sessions), "--seconds", str(seconds), "--lab", lab,
                          "--rounds", str(rounds), timeout=rounds * (seconds + 900 + HOLD_LIMIT) + 600)
    info = _summary(report)
    assert report["sessions_served"] == sessions * rounds, info
    assert report["errors"] == [], info
    assert_measures(report, info)
    rates = [s["updates_per_second"] for s in report["sessions"]]
    assert min(rates) >= 1.0, f"plot updates per second per session: {rates}\n{info}"
    # every session was destroyed: its runners' worker threads are gone
    assert report["threads"]["after"] <= report["threads"]["idle"], info
    rss = report["rss_mb"]
    if rounds >= 2:
        slack = report["rounds"][0]["rss_peak_mb"] - rss["baseline"] + ROUND_SLACK_MB
    else:
        slack = max(ONE_ROUND_SLACK_MB, ONE_ROUND_SLACK_FRACTION * rss["baseline"])
    assert rss["after"] <= rss["baseline"] + slack, (
        f"RSS after close {rss['after']} MB > baseline {rss['baseline']} MB + {slack:.0f} MB\n{info}")


@pytest.mark.browser
def test_load_smoke():
    report = run_loadtest("load-smoke", "--sessions", "2", "--seconds", "10", "--lab", "FVBM",
                          "--no-warmup", "--settle", "0", timeout=600)  # (the probe page and its steps)
    info = _summary(report)
    assert report["sessions_served"] == 2, info
    assert report["errors"] == [], info
    assert all(s["updates"] > 0 for s in report["sessions"]), info
    assert_measures(report, info)
    # tabs closed while streaming: nothing at ERROR level (dashboard/logs.py), real errors
    # would be in report["errors"]
    assert report["server_log"]["closed_connection_incidents"] == 0, info


def run_protocol(name: str, *args: str, timeout: float) -> dict:
    """Run ``tests/load/protocol.py``; return its report (also kept in test-artifacts/<name>.json)."""
    ARTIFACTS.mkdir(exist_ok=True)
    report_path = ARTIFACTS / f"{name}.json"
    report_path.unlink(missing_ok=True)
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.run(
        [sys.executable, "-m", "tests.load.protocol", *args, "--json", str(report_path),
         "--log", str(ARTIFACTS / f"{name}-server.log")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    assert report_path.exists(), f"the protocol client wrote no report (exit {proc.returncode}):\n{proc.stderr[-4000:]}"
    return json.loads(report_path.read_text())


@pytest.mark.slow
def test_protocol_smoke():
    report = run_protocol("protocol-smoke", "--sessions", "2", "--seconds", "10", "--lab", "TAP",
                          "--no-warmup", "--settle", "0", "--new-pages", "1", "--step-probes", "3",
                          timeout=1200)  # generous: a busy machine, a first start's kernels
    info = json.dumps({k: v for k, v in report.items() if k not in ("server_series", "users")}, indent=1)
    assert report["errors"] == [], info
    assert report["sessions_served"] == 2, info
    for user in report["users"]:  # each pulled its page, pressed Play and applied data patches
        assert user["open"] is not None and user["updates"] > 0 and user["patches"] >= user["updates"], info
    step = report["step_to_patch_ms"]
    assert step["n"] >= 1 and step["n"] + step["missed"] == 3, info
    assert report["new_page_seconds"]["n"] == 2, info  # the Step probe's page and one more
    assert report["liveness_ms"]["n"] >= 1 and report["root_ms"]["n"] >= 1, info
    assert report["server_log"]["closed_connection_incidents"] == 0, info


def test_follower_lags_take_the_same_or_a_later_counter_text():
    """``--followers``' lag (no server): each teacher text in the window is matched to the
    follower's first arrival of the same text, or a later one of the same run, not before the
    teacher's; a text never reached counts up to the follower's close, as unmatched."""
    from tests.load.protocol import counter_key, follower_lags, plain_text

    assert counter_key("Epoch 0.46") == ("Epoch #", 0.46) and counter_key("Sweep 12") == ("Sweep #", 12.0)
    assert plain_text("&lt;b&gt;Epoch&lt;/b&gt; 0.46") == "Epoch 0.46"
    teacher = [(0.5, "Epoch 0.00"), (1.0, "Epoch 0.10"), (2.0, "Epoch 0.20"), (3.0, "Epoch 0.30"),
               (4.0, "Epoch 0.00"), (5.0, "Epoch 0.10"), (9.0, "Epoch 0.40")]
    follower = [(0.2, "Epoch 0.10"),  # a previous run's text, before the teacher's: not a match
                (1.3, "Epoch 0.10"), (3.4, "Epoch 0.30"),  # skipped 0.20: 0.30 is past it
                (4.1, "Epoch 0.00"), (5.2, "Epoch 0.10")]
    got = follower_lags(teacher, follower, start=0.9, end=8.0, closed=10.0)
    assert got["ms"] == [300.0, 1400.0, 400.0, 100.0, 200.0]
    assert got["exact"] == 4 and got["unmatched"] == 0
    late = follower_lags(teacher, follower, start=8.5, end=9.5, closed=10.0)
    assert late == {"ms": [1000.0], "unmatched": 1, "exact": 0}
