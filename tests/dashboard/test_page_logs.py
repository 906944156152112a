"""Logs that tell the truth (issue 22, item 3): a routine visit logs nothing at WARNING or above.

Opening a lab's page, pressing ▶ Play, ❚❚ Pause and Step and closing the tab are what every
visitor does; an administrator reading the server's log must not take them for problems.
Before, each page open logged about seven Panel warnings ("sizing_mode='stretch_width' on
Tabs is being overridden to 'stretch_both' by a child's sizing").

The app is served in this process, as ``boltzlab serve --workers 0`` serves it (``applications()``,
the closed-tab filter of ``dashboard/logs.py``), and each lab's page is opened by the
protocol-level client of the load tests (``tests/load/protocol.py``: the ``GET`` that builds the
session on the server, the websocket, the document pulled, ``document_ready``, then the
buttons' clicks as a browser sends them).  Every record at WARNING or above from any logger
fails the test, with its logger's name and message.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
import logging
import urllib.request
import uuid

import panel as pn
import pytest

from boltzlab.dashboard.labs import LABS
from tests.load.protocol import PAUSE, PLAY, STEP, User
from tests.serving import answers, free_port
from tests.waiting import wait_for

pytestmark = pytest.mark.slow

#: the data sources of each lab's main plot (their names start with this; see tests/load)
PLOTS = {"fvbm": "logpl", "tap": "tap-ll", "frankwolfe": "fw-ll", "bound": "race-by-iteration"}
PATIENCE = 300.0  # seconds a wait may take on a busy machine (a limit, never a measurement)


class Records(logging.Handler):
    """Keeps every record at WARNING or above."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def lines(self) -> list[str]:
        return [f"{r.levelname} {r.name}: {r.getMessage()}" for r in self.records]


@pytest.fixture
def logged():
    """A :class:`Records` on the root logger and on every logger that does not hand its records
    on to it (Panel's and, depending on the import order, Bokeh's have handlers of their own)."""
    handler = Records()
    loggers = [logging.getLogger()] + [
        logger for logger in list(logging.Logger.manager.loggerDict.values())
        if isinstance(logger, logging.Logger) and not logger.propagate]
    for logger in loggers:
        logger.addHandler(handler)
    yield handler
    for logger in loggers:
        logger.removeHandler(handler)


@pytest.fixture(scope="module")
def served():
    """The app served in this process on a free port (its base URL, its Bokeh server); a closed
    tab's session is discarded within a second (Bokeh's default waits 15 s)."""
    from boltzlab.dashboard.app import TITLE, applications
    from boltzlab.dashboard.logs import quiet_closed_connections

    quiet_closed_connections()  # as serve() does
    port, server_id = free_port(), uuid.uuid4().hex
    thread = pn.serve(applications(), port=port, address="127.0.0.1", show=False, threaded=True, liveness=True,
                      title=TITLE, server_id=server_id, check_unused_sessions_milliseconds=200,
                      unused_session_lifetime_milliseconds=200)
    base = f"http://127.0.0.1:{port}"
    assert wait_for(lambda: answers(base + "/liveness") and server_id in pn.state._servers, timeout=PATIENCE)
    server = pn.state._servers[server_id][0]
    yield base, server
    server.stop()
    thread.stop()


async def visit(base: str, key: str) -> list[str]:
    """One visitor's routine: open the lab's page, ▶ Play until its main plot has data, ❚❚ Pause,
    Step until the plot changes again, close the tab; the protocol errors the client saw."""
    user = User(base, f"/{key}", PLOTS[key])
    user.page_timeout = PATIENCE
    try:
        await user.open()
        await user.play()
        assert await user.wait_for(lambda: user.plot_changes > 0, PATIENCE), "no plot data after ▶ Play"
        await user.click(PAUSE)
        assert await user.wait_for(lambda: not user.playing and user.enabled(PLAY), PATIENCE), "not paused"
        seen = user.plot_changes
        await user.click(STEP)
        assert await user.wait_for(lambda: user.plot_changes > seen, PATIENCE), "no plot change after Step"
    finally:
        await user.close()
    return user.errors


@pytest.mark.parametrize("key", [cls.key for cls in LABS])
def test_opening_playing_stepping_and_closing_a_lab_logs_no_warning(key, served, logged):
    base, server = served
    assert key in PLOTS, f"give the {key!r} lab's main plot in PLOTS"
    assert wait_for(lambda: not server.get_sessions(), timeout=PATIENCE)  # no earlier visitor left
    # the visitor's own event loop, on a thread of its own: an earlier test (Playwright's sync
    # API, in the browser tier) may leave one running on this thread, where asyncio.run refuses
    with ThreadPoolExecutor(1) as pool:
        errors = pool.submit(asyncio.run, visit(base, key)).result()
    assert errors == []
    # the tab closed: its session is discarded, its lab closed (session_closed)
    assert wait_for(lambda: not server.get_sessions(), timeout=PATIENCE)
    assert not logged.records, "\n".join(logged.lines())


def test_every_page_builds_without_a_warning(served, logged):
    """The page of every lab (``/<key>``) and the app's (``/``, the first lab and the About page),
    built on the server as a ``GET`` does, before any websocket."""
    base, server = served
    for path in ["/", *(f"/{cls.key}" for cls in LABS)]:
        with urllib.request.urlopen(base + path, timeout=PATIENCE) as response:
            assert response.status == 200 and b'"token"' in response.read(), path
    assert wait_for(lambda: not server.get_sessions(), timeout=PATIENCE)  # never connected: discarded
    assert not logged.records, "\n".join(logged.lines())
