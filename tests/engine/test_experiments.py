"""The headless experiments behind `boltzlab reproduce` and `boltzlab bench`."""

import json

import numpy as np

from boltzlab.engine.experiments import bench_fvbm, fvbm_simulation
from boltzlab.engine.fvbm import FVBM, FVBMTrainer


def test_bench_numpy_reference_is_the_same_algorithm():
    """The bench compares like with like: the NumPy sweep gives the engine's iterates."""
    X = FVBM.random(6, 3).sample(500, 4)
    trainer = FVBMTrainer(X, tol=0, max_sweeps=3)
    XT = np.ascontiguousarray(X.T)
    b, M = np.zeros(6), np.zeros((6, 6))
    T = np.tanh(b[:, None] + M @ XT)
    for _ in range(3):
        trainer.step()
        bench_fvbm.numpy_sweep(XT, b, M, T)
    np.testing.assert_allclose(trainer.M, M, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(trainer.b, b, rtol=1e-10, atol=1e-12)


def test_simulation_reports_every_dimension():
    settings = fvbm_simulation.Settings(dims=(3, 4), n=500, repetitions=2, tol=1e-4, max_sweeps=500)
    result = fvbm_simulation.run(settings)
    assert [row["d"] for row in result["rows"]] == [3, 4]
    for row in result["rows"]:
        assert row["all_monotone"]
        assert row["average_mse"] > 0
        if row["mple_exists"]:
            assert row["expected_sampling_mse"] > 0
    assert len(result["histories"]["3"]) == 2
    table = fvbm_simulation.format_table(result)
    assert "avg MSE" in table and "\n  3 " in table


def test_tap_mnist_tiny_run_reports_every_part(tmp_path):
    from boltzlab.engine.experiments import tap_mnist

    lines = []
    result = tap_mnist.run(quick=True, output_dir=tmp_path, seed=0, progress=lines.append,
                           hidden=(6, 9), epochs=2, n_eval=40, n_test=15, ais_runs=3)
    json.dumps(result, allow_nan=False)  # JSON-ready, no NaN
    for key in ("epochs", "denoising", "denoising_by_model", "ais", "claims", "settings", "free_energies", "models"):
        assert key in result
    assert [(r["n_hidden"], r["epoch"]) for r in result["epochs"]] == [(6, 1), (6, 2), (9, 1), (9, 2)]
    for row in result["epochs"]:
        assert row["n_solutions"] >= 1 and np.isfinite(row["tap_log_likelihood"])
        assert row["tap_log_likelihood"] < 0
    assert [len(f) for f in result["free_energies"]["9"]] == [r["n_solutions"] for r in result["epochs"][2:]]
    assert result["denoising_model"] == 9 and set(result["denoising_by_model"]) == {"6", "9"}
    for curve in [result["denoising"], *result["denoising_by_model"].values()]:
        assert curve["p"] == list(tap_mnist.PS)
        assert len(curve["mcc_tap"]) == len(curve["mcc_ope"]) == len(curve["mcc_1nn"]) == len(curve["p"])
        assert all(-1 <= v <= 1 for key in ("mcc_tap", "mcc_ope", "mcc_1nn") for v in curve[key])
    assert [a["n_hidden"] for a in result["ais"]] == [6, 9]
    for a in result["ais"]:
        assert np.isfinite(a["log_z"]) and a["log_z_spread"] >= 0 and a["n_betas"] == 1001
        assert a["test_log_likelihood"] < 0
    assert len(result["claims"]) >= 4
    for claim in result["claims"]:
        assert set(claim) >= {"claim", "shown", "evidence", "rule"} and isinstance(claim["shown"], bool)
    assert any("OPE" in c["claim"] for c in result["claims"]) and any("1-NN" in c["claim"] for c in result["claims"])
    for model in result["models"]:
        with np.load(model["npz"], allow_pickle=False) as z:
            assert z["W"].shape == (784, model["n_hidden"])
    assert any("epoch" in line for line in lines)
    table = tap_mnist.format_table(result)
    assert "Denoising MCC, Nh = 9" in table and "Claims" in table


def test_tap_bands_rule_separates_two_modes_from_one():
    from boltzlab.engine.experiments import tap_mnist

    rng = np.random.default_rng(0)
    two = np.concatenate([rng.normal(-200, 1, 40), rng.normal(-190, 1, 30)])
    one = rng.normal(-200, 3, 70)
    assert tap_mnist._bands_test(two)["bimodal"]
    assert not tap_mnist._bands_test(one)["bimodal"]
    assert not tap_mnist._bands_test(two[:5])["testable"]


def test_tap_settings_overrides_are_validated():
    import pytest

    from boltzlab.engine.experiments import tap_mnist

    s = tap_mnist.make_settings(quick=True, hidden=[7], epochs=3)
    assert s.hidden == (7,) and s.epochs == 3 and s.ais_schedule == "live"
    assert tap_mnist.make_settings().hidden == (25, 50, 100)
    with pytest.raises(ValueError, match="epochs"):
        tap_mnist.make_settings(epochs=0)
    with pytest.raises(ValueError, match="Unknown"):
        tap_mnist.make_settings(n_hiden=3)


def test_tap_mnist_redoes_a_stalled_batch_with_more_damping(monkeypatch):
    from boltzlab.engine import tap
    from boltzlab.engine.experiments import tap_mnist

    original = tap.TAPTrainer._train_batch
    stalled = []

    def stall_once(self):
        if self.iteration == 40 and not stalled:  # in epoch 2: the batch is not applied
            stalled.append(self.damping)
            self.status, self.message = "stalled", "No TAP chain converged (simulated)."
            return 0
        return original(self)

    monkeypatch.setattr(tap.TAPTrainer, "_train_batch", stall_once)
    lines = []
    result = tap_mnist.run(quick=True, progress=lines.append, hidden=(5,), epochs=2, n_eval=20, n_test=10,
                           ais_runs=2)
    assert stalled == [0.3]
    (model,) = result["models"]
    assert model["status"] == "max_epochs" and model["epochs"] == 2 and model["damping"] == 0.65
    assert [c["to"] for c in model["damping_changes"]] == [0.65]
    assert [row["epoch"] for row in result["epochs"]] == [1, 2]  # the partial epoch is not reported
    assert any("Raising the damping" in line for line in lines)
    assert "damping raised 0.3 -> 0.65" in tap_mnist.format_table(result)
