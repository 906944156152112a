"""Labs live outside the served app (issue 24 item 3): the tick starts wherever a lab's page
is rendered (a notebook's comm, a served session), never twice; the scripted API
(``run``, ``records``, ``records_frame``, ``latest``, ``save_figure``); and the
jupyter-server-proxy entry point.

No browser: a notebook is what Panel does in a kernel (the page rendered with a comm on a
running asyncio loop, changes pushed over the comm); a served session is a real Panel
server in a thread, asked for the page over HTTP.
"""

from __future__ import annotations

import asyncio
import re
import time
import tomllib
import uuid
from pathlib import Path

import numpy as np
import panel as pn
import pytest
import requests
from bokeh.document import Document
from panel.io.model import add_to_doc
from pyviz_comms import Comm

from boltzlab import engine
from boltzlab.dashboard.jupyter import setup_boltzlab
from boltzlab.dashboard.labs import BoundLab, FVBMLab
from boltzlab.dashboard.labs.base import Lab
from tests.waiting import in_own_thread

ROOT = Path(__file__).resolve().parents[2]
FVBM_SMALL = {"d": 6, "n": 500, "init": "random", "init_seed": 3}
PATIENCE = 120.0  # seconds a wait may take on a busy machine (a limit, never a measurement)


@pytest.fixture(scope="module", autouse=True)
def _warm():
    engine.warm_up()


def show_in_notebook(lab: Lab, comm: Comm) -> None:
    """What a cell's output does in the kernel (``Viewable._repr_mimebundle_``): the page's
    model in a new document, held, so that its changes wait for a push over ``comm``."""
    doc = Document()
    add_to_doc(lab.panel().get_root(doc, comm=comm), doc, hold=True)


class FakeComm(Comm):
    """A notebook comm that is open and keeps what it is sent (Panel's push sends the
    header, metadata and content of each Bokeh patch as three messages)."""

    def __init__(self) -> None:
        super().__init__()
        self._comm = True  # open: panel.io.notebook.push sends at once
        self.sent: list = []

    def send(self, data=None, metadata=None, buffers=None) -> None:
        self.sent.append(data)


@pytest.fixture
def ticks(monkeypatch):
    """The periodic callbacks started for a lab's tick, as they are started."""
    from boltzlab.dashboard.labs import base

    started: list = []
    add = base.refresh_callback

    def counting(callback, *args, **kwargs):
        cb = add(callback, *args, **kwargs)
        if getattr(callback, "__func__", None) is Lab.tick:
            started.append(cb)
        return cb

    monkeypatch.setattr(base, "refresh_callback", counting)
    return started


def test_a_lab_rendered_in_a_notebook_trains_live_with_play(make_lab, ticks):
    lab = make_lab(FVBMLab, FVBM_SMALL)
    comm = FakeComm()

    async def notebook() -> str:
        show_in_notebook(lab, comm)  # a cell's output, rendered on the kernel's running loop
        assert len(ticks) == 1 and ticks[0].running
        show_in_notebook(lab, FakeComm())  # shown again: still one tick
        assert len(ticks) == 1
        before = len(comm.sent)
        lab.play_button.clicks += 1  # ▶ Play, as the browser's click arrives through the comm
        deadline = time.monotonic() + PATIENCE
        while lab.counter_pane.object in ("", "Sweep 0") or lab.runner.states["BSLM"].steps < 3:
            assert time.monotonic() < deadline, "Play never advanced the notebook's lab"
            await asyncio.sleep(0.1)
        await asyncio.sleep(3 * lab.period_ms / 1000)  # a tick after the Records came in
        lab.pause_button.clicks += 1
        assert len(comm.sent) > before, "the tick pushed nothing to the notebook"
        return lab.counter_pane.object

    shown = in_own_thread(lambda: asyncio.run(notebook()))  # Playwright may hold this thread's loop
    assert re.fullmatch(r"Sweep \d+", shown) and shown != "Sweep 0"  # the page's own counter moved
    assert lab.records["BSLM"]["sweep"].size >= 3


def test_a_page_rendered_without_an_event_loop_starts_nothing(make_lab, ticks):
    lab = make_lab(FVBMLab, FVBM_SMALL)
    def render() -> None:  # a thread without a loop (the main one may hold Playwright's)
        show_in_notebook(lab, FakeComm())  # no running loop: no tick to start
        lab.panel().get_root(Document())  # e.g. a page saved to a file

    in_own_thread(render)
    assert ticks == [] and lab._callback is None


def test_a_started_lab_is_not_started_again_when_rendered(make_lab, ticks):
    """create_app starts its labs itself (lab.start()) before the session renders them."""
    lab = make_lab(FVBMLab, FVBM_SMALL)

    async def served_then_rendered() -> None:
        lab.start()
        show_in_notebook(lab, FakeComm())

    in_own_thread(lambda: asyncio.run(served_then_rendered()))
    assert len(ticks) == 1


def test_a_lab_served_by_panel_ticks_in_its_session(ticks):
    made: list[Lab] = []

    def app():
        lab = FVBMLab()
        made.append(lab)
        return lab

    server_id = uuid.uuid4().hex
    thread = pn.serve({"/": app}, port=0, address="127.0.0.1", threaded=True, show=False,
                      server_id=server_id, websocket_origin="*")
    try:
        deadline = time.monotonic() + PATIENCE
        while server_id not in pn.state._servers:
            assert time.monotonic() < deadline, "the server never started"
            time.sleep(0.05)
        port = pn.state._servers[server_id][0].port
        page = requests.get(f"http://127.0.0.1:{port}/", timeout=PATIENCE)
        assert page.ok and len(made) == 1
        assert len(ticks) == 1  # one tick, the session's own periodic callback
        assert ticks[0]._doc is not None and ticks[0]._doc.session_context is not None
    finally:
        for lab in made:
            lab.close()
        pn.state._servers[server_id][0].stop()
        thread.stop()


# ---------------------------------------------------------------------- scripted API
def test_run_steps_synchronously_and_draws(make_lab, tmp_path):
    lab = make_lab(FVBMLab, FVBM_SMALL)
    assert lab.runs == ["BSLM"] and lab.latest() is None
    lab.run(steps=4)
    records = lab.records
    assert list(records) == ["BSLM"]
    assert records["BSLM"]["sweep"].tolist() == [1, 2, 3, 4]
    assert np.all(np.diff(records["BSLM"]["log_pl"]) >= 0)  # BSLM is monotone (the lab's claim)
    assert lab.counter() == "Sweep 4" and lab.counter_pane.object == "Sweep 4"  # drawn, no tick needed
    lab.run(2)
    frame = lab.records_frame()
    assert list(frame.columns[:3]) == ["run", "pin", "sweep"] and len(frame) == 6
    assert set(frame["pin"]) == {""}  # live rows; pinned runs' rows carry their label
    assert frame["log_pl"].tolist() == lab.records["BSLM"]["log_pl"].tolist()
    latest = lab.latest("BSLM")
    assert latest["sweep"] == 6 and latest.arrays  # the newest weights come with it
    path = lab.save_figure(tmp_path / "fvbm.html")
    assert path.read_text(encoding="utf-8").lstrip().lower().startswith("<!doctype html>")
    assert lab.statuses == {"BSLM": "running"}


def test_a_race_steps_every_run(make_lab):
    lab = make_lab(BoundLab, {"problem": "fvbm", "race_seed": 2})
    lab.run(3)
    frame = lab.records_frame()
    assert set(frame["run"]) == set(lab.runs) and len(lab.runs) > 1
    assert all(n <= 3 for n in frame.groupby("run").size())
    with pytest.raises(ValueError, match="must name one of the runs"):
        lab.latest()


@pytest.mark.parametrize("steps", [0, -1, 1.5, True, "3"])
def test_run_refuses_a_bad_step_count(make_lab, steps):
    lab = make_lab(FVBMLab, FVBM_SMALL)
    with pytest.raises(ValueError, match=r"The 'steps' parameter of FVBMLab.run must be an int >= 1"):
        lab.run(steps)


def test_save_figure_says_what_it_can_write(make_lab, tmp_path):
    lab = make_lab(FVBMLab, FVBM_SMALL)
    with pytest.raises(ValueError, match=r"must end in \.html"):
        lab.save_figure(tmp_path / "fvbm.png")


# ---------------------------------------------------------------------- jupyter-server-proxy
def test_the_server_proxy_entry_point_is_declared():
    """pyproject.toml declares it (resolved by importlib.metadata once the package is
    (re)installed: test_the_installed_entry_point_resolves)."""
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    target = meta["project"]["entry-points"]["jupyter_serverproxy_servers"]["boltzlab"]
    module, _, name = target.partition(":")
    assert module == "boltzlab.dashboard.jupyter" and name == "setup_boltzlab"


def test_the_installed_entry_point_resolves():
    from importlib.metadata import entry_points

    found = [e for e in entry_points(group="jupyter_serverproxy_servers") if e.name == "boltzlab"]
    if not found:
        pytest.skip("the installed boltzlab predates the entry point: pip install -e . registers it")
    assert found[0].load() is setup_boltzlab


def test_the_server_proxy_settings_are_well_formed():
    settings = setup_boltzlab()
    command = settings["command"]
    assert all(isinstance(part, str) for part in command)
    assert command[1:4] == ["-m", "boltzlab", "serve"]
    options = dict(zip(command[4::2], command[5::2]))
    assert options == {"--address": "127.0.0.1", "--port": "{port}", "--prefix": "{base_url}boltzlab",
                       "--allow-websocket-origin": "*"}
    assert settings["absolute_url"] is True  # the app sees the whole path: it is served under it
    assert isinstance(settings["timeout"], int) and settings["timeout"] >= 30
    assert settings["launcher_entry"]["title"] == "Boltzmann Lab"
    # the command is one `boltzlab serve` takes, with the proxy's values filled in
    from boltzlab.dashboard.cli import build_parser

    filled = [part.format(port=8123, base_url="/user/ada/") for part in command[3:]]
    args = build_parser().parse_args(filled)
    assert args.port == 8123 and args.prefix == "/user/ada/boltzlab" and args.allow_websocket_origin == ["*"]
