"""Share / preset / checkpoint / export / present (dashboard.labtools), on the FVBM lab."""

from __future__ import annotations

import io

import numpy as np
import param
import pytest

from boltzlab import engine
from boltzlab.dashboard.labs.fvbm import FVBMLab
from boltzlab.dashboard.labtools import (Checkpoint, history_csv, parse_setting, read_checkpoint, setting_text,
                                         write_checkpoint)
from boltzlab.dashboard.runner import History
from boltzlab.engine.stepping import Record
from tests.waiting import tick


@pytest.fixture(scope="module", autouse=True)
def _warm():
    engine.warm_up()


@pytest.fixture
def make_lab():
    labs = []

    def make():
        lab = FVBMLab()
        labs.append(lab)
        return lab

    yield make
    for lab in labs:
        lab.runner.close()


def steps(lab, k):
    for _ in range(k):
        lab.runner.step_once()
    assert lab.runner.wait_idle(30)
    tick(lab)


def comparable(rows):
    """History rows without wall-clock entries (they differ between runs by nature)."""
    return [{k: v for k, v in row.items() if not any(w in k for w in ("time", "second", "elapsed"))} for row in rows]


# ---------------------------------------------------------------- text <-> setting values
def _setting(parameter):
    """``parameter`` named ``x`` (as a lab's class declares its settings)."""
    class Owner(param.Parameterized):
        x = parameter
    return Owner.param["x"]


@pytest.mark.parametrize("parameter, value", [
    (param.Integer(3, bounds=(0, 10)), 7),
    (param.Number(1.5, bounds=(0.01, 10.0)), 0.25),
    (param.Selector(default=1e-2, objects={"1e-2": 1e-2, "1e-5": 1e-5}), 1e-5),
    (param.Selector(default="zeros", objects={"Zeros": "zeros", "Random": "random"}), "random"),
    (param.String("0.5, 2"), "1, 2, 3"),
    (param.Boolean(False), True),
])
def test_text_round_trip(parameter, value):
    assert parse_setting(_setting(parameter), setting_text(value)) == value


@pytest.mark.parametrize("parameter, text, message", [
    (param.Integer(3, bounds=(0, 10)), "11", r"in \[0, 10\]"),
    (param.Integer(3, bounds=(0, 10)), "three", "must be an int"),
    (param.Number(1.0), "nan", "finite"),
    (param.Selector(default="a", objects=["a", "b"]), "c", r"one of \['a', 'b'\]"),
    (param.String(""), "x" * 201, "at most 200"),
    (param.Boolean(False), "maybe", "0 or 1"),
])
def test_parse_refuses_bad_text_with_a_clear_message(parameter, text, message):
    with pytest.raises(ValueError, match=message):
        parse_setting(_setting(parameter), text)


# ---------------------------------------------------------------- checkpoint files
def _history():
    history = History()
    history.add("a", Record({"sweep": 1, "loss": 0.5}, {"W": np.eye(2)}))
    history.add("a", Record({"sweep": 2, "loss": 0.25, "extra": 3.0}))
    history.add("b c/d", Record({"sweep": 1, "loss": np.nan}))
    return history


def test_checkpoint_round_trip_keeps_states_history_and_missing_columns():
    ckpt = Checkpoint("fvbm", {"d": "10"}, {"a": {"w": np.arange(3.0), "k": 4},
                                           "b c/d": {"status": np.asarray("running")}}, _history())
    back = read_checkpoint(write_checkpoint(ckpt), lab="fvbm")
    assert back.settings == {"d": "10"}
    np.testing.assert_array_equal(back.states["a"]["w"], np.arange(3.0))
    assert back.states["a"]["k"] == 4 and str(back.states["b c/d"]["status"]) == "running"
    assert back.history.rows["a"] == [{"sweep": 1.0, "loss": 0.5}, {"sweep": 2.0, "loss": 0.25, "extra": 3.0}]
    assert np.isnan(back.history.rows["b c/d"][0]["loss"])
    assert back.history.counts == {"a": 2, "b c/d": 1}
    np.testing.assert_array_equal(back.history.arrays["a"]["W"], np.eye(2))


def _npz(**arrays):
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


@pytest.mark.parametrize("content, message", [
    (b"not a zip file at all", "not a .npz checkpoint"),
    (_npz(x=np.zeros(3)), "not a Boltzmann Lab checkpoint"),
    (_npz(boltzlab_checkpoint=np.asarray(1), lab=np.asarray("tap"), settings=np.asarray("{}"),
          runs=np.asarray(["a"])), "saved in the 'tap' lab"),
    (_npz(boltzlab_checkpoint=np.asarray(99), lab=np.asarray("fvbm")), "format version 99"),
    (_npz(boltzlab_checkpoint=np.asarray(1), lab=np.asarray("fvbm"), settings=np.asarray("{}"),
          runs=np.asarray(["a"]), x=np.array([{"evil": 1}], dtype=object)), "pickled"),
    (_npz(boltzlab_checkpoint=np.asarray(1), lab=np.asarray("fvbm"), settings=np.asarray("{"),
          runs=np.asarray(["a"])), "settings are unreadable"),
    (_npz(boltzlab_checkpoint=np.asarray(1), lab=np.asarray("fvbm"), settings=np.asarray("{}"),
          runs=np.asarray(["a"])), "no state for run 'a'"),
])
def test_read_checkpoint_refuses_bad_files(content, message):
    with pytest.raises(ValueError, match=message):
        read_checkpoint(content, lab="fvbm")


def test_read_checkpoint_refuses_files_over_the_size_limit():
    content = write_checkpoint(Checkpoint("fvbm", {}, {"a": {"w": np.zeros(1000)}}, History()))
    with pytest.raises(ValueError, match="checkpoints of at most"):
        read_checkpoint(content, lab="fvbm", limit=len(content) - 1)


def test_history_csv_has_one_row_per_record_and_every_column():
    lines = history_csv(_history()).strip().splitlines()
    assert lines[0] == "run,pin,extra,loss,sweep"
    assert lines[1] == "a,,,0.5,1" and lines[2] == "a,,3.0,0.25,2"
    assert lines[3] == "b c/d,,,nan,1"


def test_history_is_bounded_and_keeps_the_newest_rows():
    history = History(limit=100)
    for i in range(1000):
        history.add("a", Record({"sweep": i}))
    rows = history.rows["a"]
    assert len(rows) <= 100 and rows[-1]["sweep"] == 999 and rows[0]["sweep"] == 0
    assert history.counts["a"] == 1000
    sweeps = [r["sweep"] for r in rows]
    assert sweeps == sorted(sweeps)


# ---------------------------------------------------------------- the FVBM lab end to end
# (checkpoint and link round trips, presets, bad files: tests/dashboard/test_lab_contract.py)
def test_checkpoint_that_does_not_fit_the_trainers_is_rolled_back(make_lab):
    lab = make_lab()
    steps(lab, 2)
    ckpt = lab.tools.checkpoint()
    ckpt.states["BSLM"] = {k: (np.zeros(3) if np.ndim(v) == 2 else v) for k, v in ckpt.states["BSLM"].items()}
    other = make_lab()
    other.tools.apply_preset(other.presets[1])
    steps(other, 3)
    race = list(other.runner.trainers)
    assert not other.tools.load_bytes(write_checkpoint(ckpt))
    assert other.tools.message.level == "error"
    assert other.widgets["mode"].value == "Race" and list(other.runner.trainers) == race
    assert other.runner.states[race[0]].steps == 3
    assert other.logpl.n_points(f"{race[0]}/log_pl") == 3


def test_url_settings_apply_and_bad_ones_are_named(make_lab):
    lab = make_lab()
    lab.tools.apply_query({"fvbm.d": [b"6"], "fvbm.init_seed": [b"4"], "fvbm.init": [b"random"],
                           "fvbm.tol": [b"nonsense"], "tap.x": [b"1"]})
    assert lab.widgets["d"].value == 6 and lab.widgets["init_seed"].value == 4 and lab.widgets["init"].value == "random"
    assert lab.data.data.truth.M.shape == (6, 6)
    assert lab.tools.message.level == "warn" and "'tol'" in lab.tools.message.text
    query = lab.tools.query()
    assert query["fvbm.d"] == "6" and query["fvbm.tol"] == "1e-05"
    # the query text of a lab reproduces its settings in a fresh lab
    other = make_lab()
    other.tools.apply_query({k: [v.encode()] for k, v in query.items()})
    assert other.tools.settings_text() == lab.tools.settings_text()
    steps(lab, 2)
    steps(other, 2)
    assert comparable(other.runner.history.rows["BSLM"]) == comparable(lab.runner.history.rows["BSLM"])


def test_next_step_says_what_changed_and_outlines_the_coupling(make_lab):
    lab = make_lab()
    lab.tools.set_presenting(True)
    assert lab.tools.next_step.visible
    text = explain(lab)
    assert "sweep 1" in text and "log-PL" in text
    text = explain(lab)
    assert "sweep 2" in text and "moved most" in text and "▲" in text
    assert len(lab.heat_est.marks.data["row"]) == 2
    lab._reset()
    assert len(lab.heat_est.marks.data["row"]) == 0  # Reset clears the outline


def explain(lab) -> str:
    """Presentation mode's Next step: it returns at once; the next tick after the step has
    come back says what changed."""
    lab.next_step()
    assert lab.tools.changed.object == "Computing this step…"
    assert lab.runner.wait_idle(60)
    tick(lab)
    return lab.tools.changed.object


def test_exports_csv_and_html(make_lab):
    lab = make_lab()
    lab.panel()
    steps(lab, 3)
    csv_text = lab.tools._csv_file().getvalue().decode()
    assert csv_text.splitlines()[0].startswith("run,") and len(csv_text.splitlines()) == 4
    html = lab.tools._html_file().getvalue().decode()
    assert "<html" in html.lower() and "Log-pseudo-likelihood per sweep" in html


def test_a_checkpoint_of_uploaded_data_needs_the_upload_first(make_lab):
    import itertools

    rows = [r for r in itertools.product([-1, 1], repeat=3) for _ in range(2 + 3 * (r[0] == r[1]))]
    csv_bytes = ("p,q,r\n" + "\n".join(",".join(map(str, r)) for r in rows) + "\n").encode()
    lab = make_lab()
    lab.widgets["source"].value = "upload"
    lab.use_upload(csv_bytes, "votes.csv")
    assert lab.jobs.wait(60)
    assert lab.data.columns == ["p", "q", "r"]
    steps(lab, 2)
    content = write_checkpoint(lab.tools.checkpoint())
    fresh = make_lab()
    assert not fresh.tools.load_bytes(content)
    assert "upload the file first" in fresh.tools.message.text
    assert fresh.widgets["source"].value == "simulated" and fresh.widgets["d"].value == 10  # nothing changed
    fresh.widgets["source"].value = "upload"
    fresh.use_upload(csv_bytes, "votes.csv")
    assert fresh.jobs.wait(60)
    assert fresh.tools.load_bytes(content)
    assert fresh.runner.states["BSLM"].steps == 2


def test_presentation_mode_scales_plot_fonts_and_restores_them(make_lab):
    lab = make_lab()
    lab.panel()
    axis = lab.logpl.figure.yaxis[0]
    before = axis.axis_label_text_font_size
    title = lab.logpl.figure.title.text_font_size
    lab.tools.set_presenting(True)
    assert axis.axis_label_text_font_size != before and lab.tools._card.collapsed
    assert lab.logpl.figure.title.text_font_size == title  # titles already fill the width
    lab.tools.set_presenting(False)
    assert axis.axis_label_text_font_size == before and not lab.tools._card.collapsed  # as it was
    assert not lab.tools.next_step.visible
