"""`boltzlab bench rbm` / `bench tap` report both dtypes in one run (issue 18), the NumPy TAP
reference the benchmark races runs in both dtypes, and the TAP lab trains in float32.
Only relations between measured numbers are checked, never their size (no timed tests)."""

import numpy as np
import pytest

from boltzlab.engine import tap as T


def test_bench_rbm_reports_both_dtypes_beside_scikit_learn_and_the_gemm_floors():
    from boltzlab.engine.experiments import bench_rbm

    (row,) = bench_rbm.run(hidden=(20,), repeats=1, ais_runs=2, ais_schedule="live")["rows"]
    for key in ("engine_float32_seconds", "engine_float64_seconds", "sklearn_float32_seconds",
                "sklearn_float64_seconds", "sgemm_floor_seconds", "dgemm_floor_seconds", "sgemm_gflops", "dgemm_gflops",
                "float32_floor_fraction", "float64_floor_fraction"):
        assert np.isfinite(row[key]) and row[key] > 0, key
    flops = 35 * bench_rbm.product_flops(784, 20, 100, 20)
    assert row["product_gflop_per_epoch"] == pytest.approx(flops / 1e9)
    assert row["sgemm_gflops"] == pytest.approx(flops / row["sgemm_floor_seconds"] / 1e9)
    assert row["float32_floor_fraction"] == pytest.approx(row["sgemm_floor_seconds"] / row["engine_float32_seconds"])
    assert row["float64_floor_fraction"] == pytest.approx(row["dgemm_floor_seconds"] / row["engine_float64_seconds"])
    assert row["speedup_vs_sklearn_float32"] == pytest.approx(row["sklearn_float32_seconds"] / row["engine_float32_seconds"])
    # the keys from before keep their float64-vs-float64 meaning
    assert row["engine_seconds_per_epoch"] == row["engine_float64_seconds"]
    assert row["ratio"] == pytest.approx(row["sklearn_float64_seconds"] / row["engine_float64_seconds"])
    assert bench_rbm.format_table({"rows": [row]}).splitlines()[1].split()[0] == "20"


def test_bench_tap_reports_float32_rates_against_sgemm():
    from boltzlab.engine.experiments import bench_tap

    (row,) = bench_tap.run(hidden=(6,), K=5, n_sweeps=3, repeats=1, threads=1)["rows"]
    for key in ("engine_float32_sweeps_per_s", "numpy_float32_sweeps_per_s", "sgemm_gflops", "dgemm_gflops",
                "float32_fraction_of_sgemm", "float32_vs_numpy_float64", "float32_speedup"):
        assert np.isfinite(row[key]) and row[key] > 0, key
    assert row["float32_vs_numpy_float64"] == pytest.approx(row["engine_float32_sweeps_per_s"] / row["numpy_sweeps_per_s"])
    assert row["float64_fraction_of_dgemm"] == row["fraction_of_matmul"]
    assert row["max_abs_difference_float32"] < 1e-4  # float32 rounding, not another computation


def test_numpy_reference_sweeps_run_in_both_dtypes_and_match_the_engine():
    from boltzlab.engine.experiments.bench_tap import numpy_tap_sweeps

    rng = np.random.default_rng(4)
    W, b_vis, b_hid = rng.normal(0, 0.5, (30, 12)), rng.normal(0, 0.5, 30), rng.normal(0, 0.5, 12)
    init = (np.random.default_rng(1).random((9, 30)) < 0.4).astype(float)
    for dtype, tol in (("float32", 2e-5), ("float64", 1e-12)):
        av, cv, ah, ch, _ = numpy_tap_sweeps(W, b_vis, b_hid, init.astype(dtype), 7)
        assert av.dtype == ah.dtype == np.dtype(dtype)
        res = T.tap_fixed_points(W, b_vis, b_hid, init, tol=0.0, max_iter=7, dtype=dtype)
        for got, want in zip((res.a_vis, res.c_vis, res.a_hid, res.c_hid), (av, cv, ah, ch)):
            np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


def test_the_tap_lab_trains_in_float32_by_default():
    from boltzlab.dashboard.labs import tap_setup

    trainer = tap_setup.trainer_factory("mnist", n_hidden=5, batch_size=20, n_chains=20)()["TAP"]
    trainer = getattr(trainer, "trainer", trainer)
    assert trainer.dtype == "float32" and trainer.state_dict()["W"].dtype == np.float32
