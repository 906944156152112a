"""The per-session work budget (dashboard.budget): every lab's defaults and presets fit it;
a combination over it is refused with one sentence whatever its source (a widget, a link,
a checkpoint) and the session's run stays; ``boltzlab serve`` flags set it.

No wall-clock time is asserted: the estimates are formulas of the settings, and the tests
check those formulas and the paths the refusal takes.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from boltzlab import engine
from boltzlab.dashboard import budget
from boltzlab.dashboard.labs import LABS
from boltzlab.dashboard.labs.base import Lab
from boltzlab.dashboard.labs import tap_setup
from boltzlab.dashboard.labs.tap import TAPLab
from boltzlab.dashboard.labs.tap_setup import check_work as tap_check
from boltzlab.dashboard.labs.tap_setup import isomap_rows
from boltzlab.dashboard.labtools import Checkpoint, write_checkpoint
from boltzlab.engine.stepping import Record
from tests.waiting import tick

LAB_IDS = [cls.key for cls in LABS]
SMALL_TAP = {"data": "digits", "n_hidden": 6, "batch": 50, "K": 20, "seed": 3}
TOO_BIG = {"n_hidden": 1000, "K": 2000}  # the link: minutes per step on MNIST
SENTENCE = re.compile(r"This asks for ~[\d.,e-]+ s per step \((?P<what>.+)\); at most (?P<limit>[\d.e-]+) s are "
                      r"allowed on this server: (?P<advice>.+)\.")


@pytest.fixture(scope="module", autouse=True)
def _warm():
    engine.warm_up()


@pytest.fixture(autouse=True)
def default_limits():
    """Every test starts and ends with the default limits."""
    budget.set_limits(budget.DEFAULT_STEP_SECONDS, budget.DEFAULT_ISOMAP_ROWS)
    yield budget.LIMITS
    budget.set_limits(budget.DEFAULT_STEP_SECONDS, budget.DEFAULT_ISOMAP_ROWS)


def refusal_of_tap(data="mnist", batch=100, prior="bernoulli", **settings) -> str:
    with pytest.raises(budget.TooMuchWork) as info:
        tap_check(data, n_hidden=settings["n_hidden"], n_chains=settings["K"], batch_size=batch, prior_hid=prior)
    return str(info.value)


def run_of(lab: Lab) -> tuple:
    """What identifies the session's run: its trainers and its history."""
    return (dict(lab.runner.trainers), {n: list(rows) for n, rows in lab.runner.history.rows.items()})


# ---------------------------------------------------------------------- what fits
@pytest.mark.parametrize("cls", LABS, ids=LAB_IDS)
def test_defaults_and_every_preset_fit_the_budget(cls, make_lab):
    lab = make_lab(cls)
    lab.check_work()
    for preset in cls.presets:
        lab.tools.apply_preset(preset)
        assert lab.tools.message.level == "info", (preset.title, lab.tools.message.text)
        lab.check_work()


def test_the_frank_wolfe_defaults_fork_within_the_budget(make_lab):
    from boltzlab.dashboard.labs.frankwolfe import FrankWolfeLab
    from boltzlab.dashboard.labs.tap_setup import load_images

    lab = make_lab(FrankWolfeLab)
    for preset in [None, *FrankWolfeLab.presets]:
        if preset is not None:
            lab.tools.apply_preset(preset)
        rows, n_visible = load_images(lab.widgets["data"].value).X_train.shape
        fork = budget.cd_epoch(n_visible=n_visible, n_hidden=lab.widgets["max_hidden"].value, rows=rows)
        assert fork <= budget.LIMITS.step_seconds, (preset and preset.title, fork)


# ---------------------------------------------------------------------- the cost models
def test_the_tap_estimate_is_linear_in_the_hidden_units_and_affine_in_the_chains():
    def tap(**kw):
        args = dict(n_visible=784, n_hidden=100, chains=100, batch=100, batches=4, eval_rows=100, exact=False)
        return budget.tap_step(**{**args, **kw})

    assert tap(n_hidden=300) == pytest.approx(3 * tap(n_hidden=100))
    # K enters Algorithm 1 of every mini-batch (and the evaluation, eval_rows): affine in K
    steps = [tap(chains=k, eval_rows=k) for k in (100, 200, 300, 400)]
    assert np.allclose(np.diff(steps), steps[1] - steps[0]) and steps[1] > steps[0] > 0
    # each mini-batch costs the same; the evaluation once per step
    per_batch = tap(batches=5) - tap(batches=4)
    assert tap(batches=8) == pytest.approx(tap(batches=4) + 4 * per_batch)
    # the exact answer (the smaller layer <= 20 units) only adds
    assert tap(n_hidden=16, exact=True) > tap(n_hidden=16)
    # doubling both K and Nh: about 4x (the mini-batch's data term is linear in Nh only)
    assert 3.5 < tap(n_hidden=200, chains=200, eval_rows=200) / tap() <= 4


def test_the_tap_lab_steps_fewer_larger_mini_batches():
    from boltzlab.dashboard.labs.tap_setup import default_batches_per_step

    assert default_batches_per_step(3500, 100) == 4  # 35 per epoch, 8 steps per epoch
    assert default_batches_per_step(3500, 1) == 438
    assert default_batches_per_step(3500, 5000) == 1
    with pytest.raises(budget.TooMuchWork, match="raise the mini-batch M to ≥"):
        tap_check("mnist", n_hidden=100, n_chains=100, batch_size=1)  # 438 mini-batches per step


def test_the_fvbm_estimate_grows_with_the_rows_the_variables_and_the_race():
    sweep = budget.fvbm_step(rows=1000, d=10, sweeps=1)
    assert budget.fvbm_step(rows=3000, d=10, sweeps=1) == pytest.approx(3 * sweep)  # n d^2
    assert budget.fvbm_step(rows=1000, d=20, sweeps=1) == pytest.approx(4 * sweep)
    assert budget.fvbm_step(rows=1000, d=10, sweeps=3) == pytest.approx(3 * sweep)
    # the bound's curvature is rows d^3: at large d it dominates and grows 8x per doubling
    big, bigger = (budget.fvbm_step(rows=10**5, d=d, bounds=1) for d in (30, 60))
    assert 7 < bigger / big < 8.5
    # SQUAREM majorizes twice per step
    bound = budget.fvbm_step(rows=1000, d=20, bounds=1)
    assert budget.fvbm_step(rows=1000, d=20, squarems=1) == pytest.approx(2 * bound)
    assert budget.fvbm_step(rows=1000, d=10, sweeps=1, exact=True) > sweep


def test_the_frank_wolfe_and_cd_estimates_grow_with_their_sizes():
    def fw(**kw):
        args = dict(n_visible=784, rows=3500, samples=500, max_hidden=100, evaluate="none")
        return budget.frankwolfe_step(**{**args, **kw})

    # without evaluation: sampling (S Nv T) plus the inner problem ((S + n) Nv): affine in T
    assert np.allclose(np.diff([fw(max_hidden=t) for t in (100, 200, 300)]), fw(max_hidden=200) - fw(max_hidden=100))
    assert fw(max_hidden=200) < 2 * fw(max_hidden=100)
    assert fw(evaluate="ais") > fw(evaluate="none")
    # exact log Z enumerates 2^T states of 784 pixels: cheap at 10 units, dear at 20
    assert fw(max_hidden=10, evaluate="exact") < fw(max_hidden=10, evaluate="ais")
    enumeration = [fw(max_hidden=t, evaluate="exact") - fw(max_hidden=t) for t in (10, 20)]
    assert enumeration[1] == pytest.approx(2**10 * 2 * enumeration[0])  # 2^T T 784
    cd = budget.cd_epoch(n_visible=784, n_hidden=100, rows=3500)
    assert budget.cd_epoch(n_visible=784, n_hidden=100, rows=3500, trainers=1) == pytest.approx(cd / 2)
    assert budget.cd_epoch(n_visible=784, n_hidden=200, rows=3500) == pytest.approx(2 * cd)


def test_the_bound_problems_match_the_race_objectives():
    from boltzlab.dashboard.labs import bound_setup

    for problem, (dim, n, _) in budget.BOUND_PROBLEMS.items():
        size = bound_setup.race_size(problem, 0.1, 0)
        assert (size["dim"], size["n_examples"]) == (dim, n), problem
    assert max(budget.BOUND_PROBLEMS, key=budget.bound_step) == "digits"


def test_the_suggested_values_are_the_largest_that_fit():
    text = refusal_of_tap(**TOO_BIG)
    match = SENTENCE.fullmatch(text)
    assert match, text
    assert match["what"] == "Nh = 1,000 hidden units × K = 2,000 chains, 4 mini-batches of M = 100 per step"
    assert match["limit"] == "2"
    chains = int(re.search(r"lower the chains K to ≤ ([\d,]+)", text)[1].replace(",", ""))
    hidden = int(re.search(r"lower the hidden units Nh to ≤ ([\d,]+)", text)[1].replace(",", ""))
    tap_check("mnist", n_hidden=1000, n_chains=chains, batch_size=100)  # fits
    tap_check("mnist", n_hidden=hidden, n_chains=2000, batch_size=100)
    with pytest.raises(budget.TooMuchWork):
        tap_check("mnist", n_hidden=1000, n_chains=chains + 1, batch_size=100)
    with pytest.raises(budget.TooMuchWork):
        tap_check("mnist", n_hidden=hidden + 1, n_chains=2000, batch_size=100)


# ---------------------------------------------------------------------- refused from every source
def test_a_widget_change_over_the_budget_is_refused_and_the_run_stays(make_lab):
    lab = make_lab(TAPLab)
    before = run_of(lab)
    lab.widgets["K"].value = 2000  # with MNIST's default Nh = 100: ~20x the default step
    sentence = refusal_of_tap(n_hidden=100, K=2000)
    assert lab.settings_msg.pane.visible and lab.settings_msg.level == "error"
    assert lab.settings_msg.text == f"**Invalid setting:** {sentence}"
    assert run_of(lab) == before
    lab.widgets["K"].value = 100  # back within the budget: a new run, the message gone
    assert not lab.settings_msg.pane.visible and run_of(lab)[0] != before[0]


def test_a_link_over_the_budget_is_refused_with_the_sentence(make_lab):
    lab = make_lab(TAPLab, SMALL_TAP)
    lab.runner.step_once()
    assert lab.runner.wait_idle(120)
    before, settings = run_of(lab), lab.tools.settings_text()
    sentence = refusal_of_tap(data="digits", batch=50, **TOO_BIG)
    # strict (as links and checkpoints apply settings): ValueError with that sentence
    with pytest.raises(ValueError, match=re.escape(sentence)):
        lab.apply_settings(TOO_BIG)
    assert run_of(lab) == before
    lab.apply_settings({"n_hidden": SMALL_TAP["n_hidden"], "K": SMALL_TAP["K"]})
    before = run_of(lab)
    # the URL of a link
    lab.tools.apply_query({"tap.n_hidden": [b"1000"], "tap.K": [b"2000"]})
    assert lab.tools.message.level == "warn"
    assert lab.tools.message.text == f"**Some settings in the link were ignored:** {sentence}"
    assert run_of(lab)[0] == before[0] and lab.runner.history.rows == before[1]
    assert lab.settings_msg.text == f"**Invalid setting:** {sentence}"
    assert settings != lab.tools.settings_text()  # the widgets show the link's values (Lab.apply_settings)


def test_a_checkpoint_over_the_budget_is_refused_and_the_session_unchanged(make_lab):
    lab = make_lab(TAPLab, SMALL_TAP)
    lab.runner.step_once()
    assert lab.runner.wait_idle(120)
    saved = lab.tools.checkpoint()
    # a well-formed checkpoint of a run with those settings (built, never stepped)
    trainer = tap_setup.trainer_factory("digits", n_hidden=1000, n_chains=2000, batch_size=50, seed=3)()["TAP"]
    big = Checkpoint(saved.lab, {**saved.settings, "n_hidden": "1000", "K": "2000"}, {"TAP": trainer.state_dict()})
    before, settings = run_of(lab), lab.tools.settings_text()
    assert not lab.tools.load_bytes(write_checkpoint(big), filename="big.npz")
    sentence = refusal_of_tap(data="digits", batch=50, **TOO_BIG)
    assert lab.tools.message.level == "error"
    assert lab.tools.message.text == (f"**Could not load big.npz:** {sentence}  \n"
                                      "The current run is unchanged.")
    assert lab.tools.settings_text() == settings
    trainers, history = run_of(lab)
    assert history == before[1] and list(trainers) == list(before[0])


def test_a_preset_is_checked_too(make_lab, default_limits):
    lab = make_lab(TAPLab)
    budget.set_limits(step_seconds=1e-6)
    before = run_of(lab)
    lab.tools.apply_preset(TAPLab.presets[0])
    assert lab.tools.message.level == "error"
    assert lab.tools.message.text.startswith("**The preset could not be applied:** This asks for ~")
    assert "at most 1e-06 s are allowed on this server" in lab.tools.message.text
    assert run_of(lab) == before


@pytest.mark.parametrize("cls", LABS, ids=LAB_IDS)
def test_every_lab_refuses_through_its_bad_setting_path(cls, make_lab):
    lab = make_lab(cls)
    budget.set_limits(step_seconds=1e-9)  # nothing fits
    before = run_of(lab)
    assert not lab.rebuild()
    assert lab.settings_msg.level == "error" and SENTENCE.fullmatch(lab.settings_msg.text.split("** ", 1)[1])
    assert run_of(lab) == before
    with pytest.raises(budget.TooMuchWork):
        lab.rebuild(strict=True)


def test_an_fvbm_upload_over_the_budget_is_refused_on_its_distinct_rows(make_lab):
    from boltzlab.dashboard.labs.fvbm import FVBMLab

    lab = make_lab(FVBMLab)
    X = np.where(np.random.default_rng(1).random((4000, 12)) < 0.5, -1, 1)
    distinct = len(np.unique(X, axis=0))
    budget.set_limits(step_seconds=1e-5)  # the default data's 263 distinct rows fit, these do not
    before, data = run_of(lab), lab.data
    lab.widgets["source"].value = "upload"
    lab.upload.filename = "wide.csv"
    lab.upload.value = ("".join(f"v{j}," for j in range(11)) + "v11\n"
                        + "\n".join(",".join(map(str, row)) for row in X)).encode()
    assert lab.jobs.wait(60)  # the upload is read (and its rows counted) as a job
    text = lab.settings_msg.text.removeprefix("**Invalid setting:** ")
    assert lab.settings_msg.level == "error" and SENTENCE.fullmatch(text), text
    assert f"(d = 12 variables, n = 4,000 rows ({distinct:,} distinct), one run)" in text
    assert text.endswith("at most 1e-05 s are allowed on this server: use a smaller data set.")
    assert run_of(lab) == before and lab.data is data


def test_simulated_fvbm_data_are_checked_once_made(make_lab):
    from boltzlab.dashboard.labs.fvbm import FVBMLab

    lab = make_lab(FVBMLab)
    budget.set_limits(step_seconds=1e-9)
    before, data = run_of(lab), lab.data
    lab.widgets["n"].value = 20_000  # larger than the default: simulated as a job, then checked
    assert lab.settings_msg.level == "info" and lab.jobs.running()
    assert lab.jobs.wait(120)
    text = lab.settings_msg.text.removeprefix("**Invalid setting:** ")
    assert lab.settings_msg.level == "error" and SENTENCE.fullmatch(text), text
    assert "d = 10 variables, n = 20,000 rows (" in text
    assert run_of(lab) == before and lab.data is data


def test_the_cd_fork_is_checked_when_it_is_made(make_lab):
    from boltzlab.dashboard.labs.frankwolfe import FrankWolfeLab

    lab = make_lab(FrankWolfeLab, {"data": "digits", "max_hidden": 20})
    for _ in range(3):
        lab.runner.step_once()
    assert lab.runner.wait_idle(120)
    tick(lab)
    budget.set_limits(step_seconds=1e-9)
    lab.fork.clicks += 1
    assert lab.cd_runner is None and lab.cd_status.level == "error"
    text = lab.cd_status.text.removeprefix("**Cannot start CD:** ")
    assert SENTENCE.fullmatch(text) and "(two CD-10 epochs of 3 hidden units on 1,259 digits)" in text
    budget.set_limits(step_seconds=budget.DEFAULT_STEP_SECONDS)
    lab.fork.clicks += 1
    assert lab.cd_runner is not None and lab.cd_status.level != "error"


# ---------------------------------------------------------------------- analyses
def test_the_isomap_rows_are_capped_evenly():
    budget.set_limits(isomap_rows=10)
    assert list(isomap_rows(7)) == list(range(7))
    rows = isomap_rows(2000)
    assert len(rows) == 10 and rows[0] == 0 and rows[-1] == 1999 and np.all(np.diff(rows) > 0)


def test_the_tap_isomap_jobs_get_at_most_the_cap(make_lab, monkeypatch):
    lab = make_lab(TAPLab, SMALL_TAP)
    budget.set_limits(isomap_rows=10)
    rng = np.random.default_rng(0)
    n, nv, nh = 50, lab.images.X_train.shape[1], SMALL_TAP["n_hidden"]
    record = Record({"epoch": 1.0, "n_solutions": n},
                    {"solution_free_energies": np.arange(n, dtype=float), "solutions_vis": rng.random((n, nv)),
                     "solutions_hid": rng.random((n, nh))})
    submitted = {}
    monkeypatch.setattr(lab.jobs, "submit", lambda key, fn, *args, **kw: submitted.setdefault(key, (args, kw)))
    lab.draw_records([("TAP", record)])
    lab.on_tick()
    (solutions,), kw = submitted["isomap"]
    assert [len(s) for s in solutions] == [10]
    shown = kw["then"].args[0]
    assert list(shown[0][1]) == list(isomap_rows(n))  # the free energies of the rows mapped
    (_, vis), _ = submitted["isomap-data"]
    assert vis.shape == (10, nv)


# ---------------------------------------------------------------------- the operator's flags
def test_serve_flags_reach_the_budget(monkeypatch):
    from boltzlab.dashboard import app, cli

    parser = cli.build_parser()
    args = parser.parse_args(["serve", "--port", "0", "--workers", "0", "--max-step-seconds", "0.5",
                              "--max-isomap-rows", "100"])
    assert (args.max_step_seconds, args.max_isomap_rows) == (0.5, 100)
    defaults = parser.parse_args(["serve"])
    assert (defaults.max_step_seconds, defaults.max_isomap_rows) == (2.0, 500)
    serve_help = next(a for a in parser._subparsers._group_actions[0].choices.items() if a[0] == "serve")[1]
    text = " ".join(serve_help.format_help().split())
    assert "--max-step-seconds S" in text and "(default 2;" in text and "--max-isomap-rows N" in text
    for bad in ("0", "-1", "nan", "soon"):
        with pytest.raises(SystemExit):
            parser.parse_args(["serve", "--max-step-seconds", bad])

    # cmd_serve passes them to app.serve, which sets the limits before serving
    served = {}
    monkeypatch.setattr(app.pn, "serve", lambda *a, **kw: served.update(kw))
    from boltzlab.dashboard import startup

    monkeypatch.setattr(startup.STARTUP, "start", lambda *a, **kw: None)  # no kernel start in this process
    assert cli.cmd_serve(args) == 0 and served
    assert budget.LIMITS.step_seconds == 0.5 and budget.LIMITS.isomap_rows == 100
    # ... and the labs refuse by that limit: the default TAP step now is over it
    with pytest.raises(budget.TooMuchWork, match="at most 0.5 s are allowed"):
        tap_check("mnist", n_hidden=1000, n_chains=100, batch_size=100)
    for bad in (0, -1.0, float("nan"), True):
        with pytest.raises(ValueError):
            budget.set_limits(step_seconds=bad)
