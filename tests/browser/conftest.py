"""Serve the app in a subprocess and drive it with Debian's Chromium (see docs/architecture.md)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from playwright.sync_api import expect

from tests.serving import start_server, stop_server
from tests.waiting import ACTION_TIMEOUT_MS

ROOT = Path(__file__).resolve().parents[2]

# CI shares 2 cores with whatever else runs: a lab is built when its tab is first opened, and
# under load that (or a step) can take longer than Playwright's 5 s default.  Wait on the
# condition, generously, never on the clock.
expect.set_options(timeout=60_000)
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args):
    if not os.path.exists(CHROMIUM):
        # a failure, never a skip (issue 27): the README's test command installs Chromium, so
        # a missing browser is a broken install, and a skip would hide it
        pytest.fail(f"{CHROMIUM} is not installed (the README's test command installs it)")
    return {**browser_type_launch_args, "executable_path": CHROMIUM, "args": CHROMIUM_ARGS}


@pytest.fixture
def context(context):
    """pytest-playwright's context, with :data:`ACTION_TIMEOUT_MS` for its pages."""
    context.set_default_timeout(ACTION_TIMEOUT_MS)
    context.set_default_navigation_timeout(ACTION_TIMEOUT_MS)
    return context


@pytest.fixture(scope="session")
def browser_context_args(browser_context_args):
    return {**browser_context_args, "viewport": {"width": 1500, "height": 1700}}


@pytest.fixture(scope="session")
def app_url():
    """The app served on 127.0.0.1 with /liveness; polled until it answers (its log in
    test-artifacts/server.log)."""
    # the first run compiles the numba kernels
    proc, url = start_server(timeout=300, log=ARTIFACTS / "server.log")
    yield url
    stop_server(proc)


@pytest.fixture
def shot(page):
    """``shot("name")`` saves a screenshot to test-artifacts/name.png."""
    def save(name: str) -> Path:
        path = ARTIFACTS / f"{name}.png"
        page.screenshot(path=str(path))
        return path
    return save
