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
        # the seeded samples (8 of 8 and 14 of 16 distinct rows) have a finite MPLE, so its
        # sampling MSE is reported (issue 27: this was an `if` that might never run)
        assert row["mple_exists"], row["mple_note"]
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
    # the curves against a reference computed here (issue 27: they were only checked to lie in [-1, 1])
    reference = reference_denoising(tmp_path / "tap_model_nh9.npz", n_test=15, seed=0,
                                    damping=result["settings"]["denoise_damping"])
    for key in ("mcc_tap", "mcc_ope", "mcc_1nn"):
        np.testing.assert_allclose(result["denoising"][key], reference[key], rtol=0, atol=1e-12, err_msg=key)
    assert result["denoising"]["mcc_tap"][0] == 1.0  # p = 0: the observation is the signal
    for key in ("mcc_ope", "mcc_1nn"):  # the model's own curve is the TAP one only
        assert result["denoising_by_model"]["6"][key] == result["denoising"][key]
    assert [a["n_hidden"] for a in result["ais"]] == [6, 9]
    for a in result["ais"]:
        assert np.isfinite(a["log_z"]) and a["log_z_spread"] >= 0 and a["n_betas"] == 1001
        assert a["test_log_likelihood"] < 0
    for claim in result["claims"]:
        assert set(claim) >= {"claim", "shown", "evidence", "rule"}
    # the verdicts of this seeded run (the same on every run: training, noise and AIS are seeded);
    # the tiny run cannot show the training claims (2 epochs, one TAP solution), and its TAP is
    # within 0.01 of the OPE, below it at p = 0.2 and 0.3
    verdicts = {c["claim"].split(" (")[0]: c["shown"] for c in result["claims"]}
    assert verdicts == {
        "The number of TAP solutions starts near 1 and grows with training": False,
        "The free energies of the TAP solutions form bands: two modes": False,
        "TAP denoising beats the optimal pointwise estimator": False,
        "TAP beats 1-NN at low noise": True,
        "At p = 0 TAP denoising recovers the true signal": True,
        "1-NN beats the OPE for p > 0.2": True,
        "No explosion of TAP solutions: fewer than 10% of the initialisations": True,
        "The TAP free energy rises early in training, then gradually declines": False,
        "The normalized TAP log-likelihood rises quickly, then its increase tapers off": False,
    }, [(c["claim"], c["shown"], c["evidence"]) for c in result["claims"]]
    for model in result["models"]:
        with np.load(model["npz"], allow_pickle=False) as z:
            assert z["W"].shape == (784, model["n_hidden"])
    assert any("epoch" in line for line in lines)
    table = tap_mnist.format_table(result)
    assert "Denoising MCC, Nh = 9" in table and "Claims" in table


def reference_denoising(model_npz, n_test, seed, damping):
    """Figure 8's three MCC curves for the first ``n_test`` bundled MNIST test digits, by
    scikit-learn's MCC, a NumPy channel, pointwise estimator and nearest neighbour; the TAP
    estimates from the saved model (the denoiser itself has references in test_tap_denoiser.py)."""
    from scipy.special import expit, logit
    from sklearn.metrics import matthews_corrcoef

    from boltzlab.engine import tap_analysis
    from boltzlab.engine.images import mnist
    from boltzlab.engine.experiments import tap_mnist

    data = mnist(np.float64)
    X_train, X_clean = data.X_train, data.X_test[:n_test]
    with np.load(model_npz) as z:
        denoise = tap_analysis.tap_denoiser(z["W"], z["b_vis"], z["b_hid"], damping=damping)

    def mcc(estimate):
        return matthews_corrcoef(X_clean.ravel().astype(bool), estimate.ravel() >= 0.5)

    prior = logit(np.clip(X_train.mean(axis=0), 1e-6, 1 - 1e-6))
    out = {"mcc_tap": [], "mcc_ope": [], "mcc_1nn": []}
    for p in tap_mnist.PS:
        flips = np.random.default_rng(seed).random(X_clean.shape) < p
        Y = np.where(flips, 1.0 - X_clean, X_clean)
        log_odds = 50.0 if p == 0 else min(50.0, np.log((1 - p) / p))
        out["mcc_ope"].append(mcc(expit(prior + (2 * Y - 1) * log_odds)))
        hamming = np.array([(X_train != y).sum(axis=1) for y in Y])
        out["mcc_1nn"].append(mcc(X_train[hamming.argmin(axis=1)]))
        out["mcc_tap"].append(mcc(denoise(Y.copy(), p)))
    return out


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
