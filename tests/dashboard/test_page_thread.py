"""A page's document is filled off the server's event loop (issue 22, item 5).

Bokeh fills a new session's document on the loop at the page's ``GET``: for this app, its
template and Bokeh models, 0.1-0.2 s in which every other session's tick and ``/liveness``
waited.  ``serve`` gives Panel :class:`~boltzlab.dashboard.app.PageApplication`\\ s, which do that
work on the builder thread.  These tests serve such an application in this process and hold
its page's construction on an event: the server must answer meanwhile.
"""

from __future__ import annotations

import threading
import urllib.request
import uuid
from concurrent.futures import ThreadPoolExecutor

import panel as pn
import pytest

from tests.serving import answers, free_port
from tests.waiting import wait_for

PATIENCE = 120.0  # seconds a wait may take on a busy machine (a limit, never a measurement)


def serve_pages(make):
    """``make`` served at ``/`` as ``serve`` serves the app's pages; (base URL, server, its thread)."""
    from boltzlab.dashboard.app import PageApplication, PageHandler

    port, server_id = free_port(), uuid.uuid4().hex
    thread = pn.serve({"/": PageApplication(PageHandler(make))}, port=port, address="127.0.0.1", show=False,
                      threaded=True, liveness=True, title="pages", server_id=server_id)
    base = f"http://127.0.0.1:{port}"
    assert wait_for(lambda: answers(base + "/liveness") and server_id in pn.state._servers, timeout=PATIENCE)
    return base, pn.state._servers[server_id][0], thread


def get(url: str) -> tuple[int, str]:
    with urllib.request.urlopen(url, timeout=PATIENCE) as response:
        return response.status, response.read().decode()


def test_the_server_answers_while_a_page_is_built_and_the_page_then_belongs_to_the_loop():
    from panel.io.state import state

    release, building = threading.Event(), threading.Event()
    seen: dict[str, str] = {}

    def make():
        seen["thread"] = threading.current_thread().name
        building.set()
        release.wait(PATIENCE)  # the page is being built until the test says
        return pn.Column(pn.pane.Markdown("the page"), name="page")

    base, server, thread = serve_pages(make)
    try:
        with ThreadPoolExecutor(1) as pool:
            page = pool.submit(get, base + "/")
            assert building.wait(PATIENCE)
            # built on the loop, this would wait for the page (until PATIENCE had passed)
            assert wait_for(lambda: answers(base + "/liveness"), timeout=PATIENCE / 2)
            assert not page.done()
            release.set()
            status, html = page.result(timeout=PATIENCE)
        assert status == 200 and "<html" in html.lower()
        assert seen["thread"].startswith("boltzlab-build")
        (session,) = server.get_sessions("/")
        doc = session.document
        assert any("the page" in str(getattr(m, "text", "")) for m in doc.models)
        # Panel lets the loop's thread change the document directly, as if it had filled it
        assert state._thread_id_[doc] == thread.ident
    finally:
        release.set()
        server.stop()
        thread.stop()


def test_a_page_that_cannot_be_built_says_so_and_the_log_says_why(caplog):
    def make():
        raise RuntimeError("no page today")

    base, server, thread = serve_pages(make)
    try:
        with caplog.at_level("ERROR", logger="boltzlab.dashboard.app"):
            status, _ = get(base + "/")
        assert status == 200
        (session,) = server.get_sessions("/")
        texts = [str(getattr(m, "text", "")) for m in session.document.models]
        assert any("This page could not be built: no page today" in t for t in texts)
        assert any("Could not build a page" in r.getMessage() and r.exc_info for r in caplog.records)
        assert answers(base + "/liveness")
    finally:
        server.stop()
        thread.stop()


@pytest.mark.parametrize("path", ["/", "/tap"])
def test_the_apps_pages_are_served_by_page_applications(path):
    from boltzlab.dashboard.app import PageApplication, applications, routes

    apps = applications()
    assert set(apps) == set(routes())
    assert isinstance(apps[path], PageApplication)
