"""The headless reproduction of Figures 1 and 2 of Ping, Liu & Ihler (2016): a tiny run."""

import json
import math

import pytest

from boltzlab.engine.experiments import frankwolfe_mnist

TINY = dict(fw_max_hidden=6, fw_eval_every=3, reg_grid=(0.3, 0.5), reg_select_hidden=3, fw_samples=50,
            bias_steps=3, bias_lr_grid=(0.05,), cd_hidden=(3, 6), cd_epochs=1, cd_seeds=2, cd_batch_size=50, ais_runs=3,
            ais_schedule="live", n_train=200, n_valid=50, n_test=100, stop_window=2)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    out = tmp_path_factory.mktemp("fw")
    lines = []
    result = frankwolfe_mnist.run(quick=False, output_dir=out, seed=0, progress=lines.append, **TINY)
    return result, lines, out


def _all_finite(values):
    return all(v is not None and math.isfinite(v) for v in values)


def test_tiny_run_reports_every_part(tiny):
    result, lines, out = tiny
    json.dumps(result, allow_nan=False)  # JSON-ready, every value evaluated
    for key in ("frankwolfe", "cd", "classification", "timing", "claims", "settings", "seconds"):
        assert key in result
    assert lines and "FW" in lines[0]

    fw = result["frankwolfe"]
    assert fw["hidden_units"] == sorted(fw["hidden_units"]) and {3, 6} <= set(fw["hidden_units"])
    for key in ("test_log_likelihood", "train_log_likelihood", "valid_log_likelihood", "log_z_spread", "seconds_to_grow"):
        assert len(fw[key]) == len(fw["hidden_units"]) and _all_finite(fw[key])
    assert all(v < 0 for v in fw["test_log_likelihood"])
    assert fw["reg"] in (0.3, 0.5) and [r["reg"] for r in fw["reg_selection"]] == [0.3, 0.5]
    assert len(fw["train_valid_gap"]) == len(fw["gap_hidden_units"]) == 6

    cd = result["cd"]
    assert cd["hidden_units"] == [3, 6]
    for key in ("fw_init_test_log_likelihood", "random_init_test_log_likelihood", "random_init_log_z_spread",
                "fw_init_log_z_spread", "random_init_seed_test_log_likelihood", "seconds_per_epoch"):
        assert len(cd[key]) == 2
    assert _all_finite(cd["fw_init_test_log_likelihood"] + cd["random_init_test_log_likelihood"])
    for i, seeds in enumerate(cd["random_init_seed_test_log_likelihood"]):
        assert len(seeds) == 2 and _all_finite(seeds)
        assert cd["random_init_test_log_likelihood"][i] in seeds  # the best by validation is one of them

    cls = result["classification"]
    assert cls["hidden_units"] == [3, 6]
    for key in ("frankwolfe", "cd_random_init", "cd_fw_init"):
        assert len(cls[key]) == 2 and all(0.0 <= e <= 1.0 for e in cls[key])
    assert 0.0 <= cls["pixels"] <= 1.0

    timing = result["timing"]
    for key in ("fw_seconds_to_grow", "cd_seconds_run", "ratio_fw_to_cd_run", "ratio_fw_to_cd_paper_epochs"):
        assert len(timing[key]) == 2 and _all_finite(timing[key])
    assert timing["fw_total_seconds"] > 0 and timing["cd_total_seconds"] > 0

    for claim in result["claims"]:
        assert set(claim) >= {"claim", "rule", "shown", "evidence"}
        assert isinstance(claim["evidence"], str) and claim["evidence"]
    # The verdicts (issue 27: `shown in (True, False, None)` accepted any).  Every claim but the
    # timing one is a function of seeded runs, the same on every run: the §4 rule does not fire
    # within 6 units (the gap grows 0.48 nats, the rule needs 1), so claims 1-2 are not testable;
    # FW ends 2.05 nats below CD (within 5); FW-init CD is 0.5 nats below random init.
    verdicts = {c["claim"].split(":")[0].split(" (")[0]: c["shown"] for c in result["claims"]}
    timing_claim = "The running time of the FW procedure is at most twice as CD for the same number of hidden units"
    timing_ok = all(r <= frankwolfe_mnist.TIME_RATIO_LIMIT for r in timing["ratio_fw_to_cd_paper_epochs"])
    assert verdicts == {
        "FW can correctly identify an appropriate hidden layer size": None,
        "The identified number of hidden units roughly corresponds to the maximum of the test log-likelihood of "
        "all the three algorithms": None,
        "FW identifies a hidden layer size with high test log-likelihood, close to CD's": True,
        "CD initialized by FW gives higher test likelihood than random initialization for the same number of "
        "hidden units; it consistently performs better than the best of the random initializations": False,
        # seconds vary with the load: against its rule, from the measured ratios
        timing_claim: timing_ok,
        "Classification with the hidden activations": True,
        "CD initialized by FW outperforms CD using the best of the random initializations in classification": False,
    }, [(c["claim"], c["shown"], c["evidence"]) for c in result["claims"]]
    assert fw["selected_hidden"] is None and fw["stop_rule_fired_at_iteration"] is None

    names = {m["name"] for m in result["models"]}
    assert {"fw_nh3", "fw_nh6", "cd_random_nh3", "cd_fwinit_nh6"} <= names
    assert all((out / f"{name}.npz").exists() for name in names)

    table = frankwolfe_mnist.format_table(result)
    assert "Frank-Wolfe path" in table and "Claims of §4" in table


def test_figures_are_written(tiny, tmp_path):
    from boltzlab.dashboard.reports import write_frankwolfe_figures

    result, _, _ = tiny
    written = write_frankwolfe_figures(json.loads(json.dumps(result)), tmp_path)
    assert set(written) == {"figure1", "figure2"}
    for paths in written.values():
        for kind in ("png", "html"):
            assert paths[kind].endswith(kind)
            with open(paths[kind], "rb") as fh:
                assert len(fh.read()) > 1000


def test_settings_reject_unknown_names_and_bad_values():
    s = frankwolfe_mnist.make_settings(quick=True, cd_hidden=[100, 50], fw_max_hidden=None)
    assert s.cd_hidden == (50, 100) and s.fw_max_hidden == 100 and s.quick
    assert frankwolfe_mnist.make_settings(seed=3).seed == 3
    with pytest.raises(ValueError, match="Unknown setting"):
        frankwolfe_mnist.make_settings(fw_max_hiden=3)
    with pytest.raises(ValueError):
        frankwolfe_mnist.make_settings(cd_hidden=(600,))  # above fw_max_hidden
    with pytest.raises(ValueError):
        frankwolfe_mnist.make_settings(cd_epochs=0)
    with pytest.raises(ValueError):
        frankwolfe_mnist.make_settings(ais_schedule="fast")
