"""A lab keeps Python's and Panel's conventions (issue 46 item 3): ``lab.show()`` is Panel's,
a second served session is refused, ``with`` closes, ``play()``/``pause()`` and the read-only
parameters, a setting refused from Python raises, the budget only where a server holds it,
the BLAS threads back in a notebook, and a notebook cell run again stops the labs it showed."""

from __future__ import annotations

import inspect
import socket
import types
import urllib.request

import panel as pn
import pytest
from bokeh.document import Document

from boltzlab.dashboard import budget
from boltzlab.dashboard.labs import FVBMLab, TAPLab
from boltzlab.dashboard.labs import in_python
from boltzlab.dashboard.labs.page import ANOTHER_SESSION
from boltzlab.engine import threads as engine_threads
from tests.waiting import wait_for, wait_until

SMALL = {"d": 6, "n": 500, "init": "random", "init_seed": 3}


class ServedDoc(Document):
    """A document as a served session's (one with a session context), without a server."""

    session_context = types.SimpleNamespace(id="test", request=types.SimpleNamespace(arguments={}, headers={}, cookies={}))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_show_is_panels_and_serves_the_lab():
    assert inspect.signature(TAPLab.show) == inspect.signature(pn.viewable.Viewer.show)
    port = free_port()
    with FVBMLab(**SMALL) as lab:
        server = lab.show(threaded=True, open=False, port=port, address="127.0.0.1")
        try:
            def page():
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=30) as response:
                        return response.status == 200 and b"bokeh" in response.read().lower()
                except OSError:
                    return False
            assert wait_for(page, timeout=120), "lab.show() served no page"
        finally:
            server.stop()
    assert lab.runner.closed


def test_a_second_served_session_is_refused_not_shared():
    with FVBMLab(**SMALL) as lab:
        page = lab.panel()
        first, second = ServedDoc(), ServedDoc()
        assert lab._rendered(first, None) is True
        assert lab._callback is not None  # the first session's tick
        assert lab._rendered(first, None) is True  # the same session again: fine
        assert lab._rendered(second, None) is False
        model = page.get_root(second)  # what the second tab gets: the refusal, not the lab
        assert "another browser tab" in str(getattr(model, "text", model.properties_with_values()))
        assert "pn.serve" in ANOTHER_SESSION and "lambda: TAPLab()" in ANOTHER_SESSION


def test_with_closes_and_play_pause_keep_the_read_only_parameters():
    seen = []
    with FVBMLab(algorithm="ga", mu=0.05, tol=1e-8, **SMALL) as lab:
        lab.param.watch(lambda event: seen.append(event.new), "steps")
        assert (lab.steps, lab.status, lab.playing) == (0, "ready", False)
        lab.run(steps=3)
        assert lab.steps == 3 and [lab.status] == list(lab.statuses.values()) and not lab.playing
        assert seen and seen[-1] == 3
        with pytest.raises(TypeError):
            lab.steps = 10  # read-only
        lab.play()
        assert lab.playing
        wait_until(lambda: lab.tick() or lab.steps > 3, timeout=120)
        lab.pause()
        assert wait_for(lambda: lab.tick() or not lab.playing, timeout=60)
        assert lab.steps == max(state.steps for state in lab.runner.states.values())
        assert "steps" not in lab.setting_names() and "playing" not in lab.setting_names()
    assert lab.runner.closed


def test_a_setting_refused_from_python_raises_and_keeps_the_old_run():
    with TAPLab(data="digits") as lab:
        built = lab._built
        budget.set_limits(step_seconds=1e-6)  # (the suite's conftest restores the limits)
        with pytest.raises(ValueError, match="per step"):
            lab.n_hidden = 500
        assert lab._built == built  # the old run, and it said why
        with pytest.raises(ValueError, match="n_hidden"):
            lab.n_hidden = 0  # out of range (param's own bounds)


def test_the_budget_holds_only_where_a_server_or_set_limits_asks(monkeypatch):
    monkeypatch.setattr(budget.LIMITS, "enforced", False)  # a notebook's process: nobody called set_limits
    monkeypatch.setattr(budget.LIMITS, "step_seconds", 1e-6)
    assert not budget.in_force()
    with TAPLab(data="digits", n_hidden=64) as lab:  # no budget in a notebook: the user's machine
        assert lab.n_hidden == 64
    from panel.io.state import set_curdoc

    with set_curdoc(ServedDoc()):  # a served session's lab: the server's budget
        assert budget.in_force()
        with pytest.raises(ValueError, match="per step"):
            TAPLab(data="digits", n_hidden=64).close()
    budget.set_limits()
    assert budget.in_force()
    with pytest.raises(ValueError, match="per step"):
        TAPLab(data="digits", n_hidden=64).close()


def test_a_paused_lab_gives_the_blas_its_threads_back_outside_a_server():
    threadpoolctl = pytest.importorskip("threadpoolctl")

    def counts():
        return sorted(i["num_threads"] for i in threadpoolctl.threadpool_info() if i["user_api"] == "blas")

    with FVBMLab(**SMALL) as lab:
        lab.run(steps=2)  # the engine limited every BLAS to one thread while it stepped
        before = sorted(engine_threads._BLAS_BEFORE.values())
        assert before, "no BLAS found"
        assert counts() == before  # paused, outside a server: the threads are back
        engine_threads.single_blas()
        lab.play()
        lab.pause()
        assert wait_for(lambda: lab.tick() or (not lab.playing and counts() == before), timeout=60)


def test_a_notebook_cell_run_again_closes_the_labs_it_showed(monkeypatch):
    cells = in_python._Cells()
    monkeypatch.setattr(in_python, "_CELLS", cells)
    monkeypatch.setattr(cells, "running", lambda: "cell-7")
    monkeypatch.setattr(cells, "hook", lambda: None)
    lab, other = FVBMLab(**SMALL), FVBMLab(**SMALL)
    try:
        lab._notebook_shown()
        cells._pre_run_cell(types.SimpleNamespace(cell_id="cell-8"))  # another cell runs: nothing
        assert not lab.runner.closed
        cells._pre_run_cell(types.SimpleNamespace(cell_id="cell-7"))  # the same cell again
        assert lab.runner.closed and not other.runner.closed
    finally:
        lab.close()
        other.close()


def test_a_widget_set_from_python_is_refused_on_the_page_not_raised():
    with TAPLab(data="digits") as lab:
        budget.set_limits(step_seconds=1e-6)
        lab.widgets["n_hidden"].value = 500  # a click's stand-in: the page says why, nothing raised
        assert lab.settings_msg.pane.visible
