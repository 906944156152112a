"""The headless experiments behind `boltzlab reproduce` and `boltzlab bench`."""

import numpy as np

from engine.experiments import bench_fvbm, fvbm_simulation
from engine.fvbm import FVBM, FVBMTrainer


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
