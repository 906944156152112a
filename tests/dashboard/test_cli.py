"""The `boltzlab` command line, run as a user runs it (a subprocess)."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from boltzlab.engine.data import ASSETS
from boltzlab.engine.fvbm import FVBMTrainer

BOLTZLAB = [sys.executable, "-m", "boltzlab"]


def run(*args, cwd=None):
    return subprocess.run(BOLTZLAB + list(args), capture_output=True, text=True, cwd=cwd, timeout=600)


def test_help_explains_every_command():
    out = run("--help")
    assert out.returncode == 0
    for command in ("serve", "fit", "reproduce", "bench"):
        assert command in out.stdout
    serve = run("serve", "--help").stdout
    for flag in ("--port", "--address", "--num-procs", "--allow-websocket-origin", "--show"):
        assert flag in serve


def test_fit_fvbm_json_on_bundled_senate():
    # --polish none: the BSLM trainer's own iterate (the default Newton polish: test_cli_fit_fvbm.py)
    out = run("fit", "fvbm", str(ASSETS / "senate_knn1_imputed.csv"), "--polish", "none", "--json")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    for key in ("b", "M", "log_pl", "sweeps", "converged", "history"):
        assert key in result
    assert result["converged"] and result["sweeps"] == len(result["history"])
    M = np.array(result["M"])
    assert M.shape == (9, 9) and np.allclose(M, M.T) and np.all(np.diag(M) == 0)
    assert np.all(np.diff(result["history"]) >= 0)
    assert result["history"][-1] == result["log_pl"]
    # the same fit through the API
    from boltzlab.engine.data import load_fvbm_csv

    trainer = FVBMTrainer(load_fvbm_csv(ASSETS / "senate_knn1_imputed.csv").X)
    trainer.run()
    assert trainer.log_pl == pytest.approx(result["log_pl"], rel=1e-12)


def test_fit_options_tol_zero_runs_exactly_max_sweeps():
    out = run("fit", "fvbm", str(ASSETS / "senate_knn1_imputed.csv"), "--json", "--tol", "0",
              "--max-sweeps", "7", "--algorithm", "ga", "--mu", "0.5", "--init", "random", "--seed", "3")
    result = json.loads(out.stdout)
    assert result["sweeps"] == 7 and not result["converged"] and len(result["history"]) == 7


def test_missing_rows_are_counted_on_stderr():
    out = run("fit", "fvbm", str(ASSETS / "senate_pm1_with_na.csv"), "--json")
    assert out.returncode == 0
    assert "dropped 46 of 147 rows" in out.stderr
    assert json.loads(out.stdout)["n"] == 101


@pytest.mark.parametrize(
    "content, code, message",
    [
        ("a,b\n1,-1\n1,7\n", 2, "Line 3, column 2"),
        ("a\n1\n-1\n", 2, "1 column"),
        ("", 2, "empty"),
        ("a,b\n1,1\n-1,1\n1,1\n", 3, "column 2 is constant"),
        ("a,b,c\n1,1,-1\n-1,-1,1\n1,1,1\n-1,-1,-1\n", 3, "MPLE does not exist"),
    ],
)
def test_bad_input_files_give_nonzero_exit_and_one_line(tmp_path, content, code, message):
    path = tmp_path / "bad.csv"
    path.write_text(content)
    out = run("fit", "fvbm", str(path))
    assert out.returncode == code
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("boltzlab: error:") and message in lines[0]
    assert "Traceback" not in out.stderr


def test_missing_file_and_bad_flags():
    out = run("fit", "fvbm", "/no/such.csv")
    assert out.returncode == 2 and "does not exist" in out.stderr
    out = run("fit", "fvbm", str(ASSETS / "senate_knn1_imputed.csv"), "--mu", "-1")
    assert out.returncode == 2 and "--mu" in out.stderr


def test_reproduce_quick_json_and_figures(tmp_path):
    out = run("reproduce", "fvbm", "--quick", "--json", "--output", str(tmp_path))
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert [row["d"] for row in result["rows"]] == [5, 10, 15, 20]
    assert all(row["all_monotone"] for row in result["rows"])
    assert Path(result["figure_png"]).stat().st_size > 10_000
    assert "<html" in Path(result["figure_html"]).read_text().lower()


def test_bench_rbm_json_times_both_engines_in_one_run():
    out = run("bench", "rbm", "--json", "--hidden", "20", "--repeats", "1", "--ais-runs", "4", "--ais-schedule", "live")
    assert out.returncode == 0, out.stderr
    (row,) = json.loads(out.stdout)["rows"]
    assert row["n_hidden"] == 20 and row["n_train"] == 3500 and row["batch_size"] == 100
    assert row["ratio"] == pytest.approx(row["sklearn_seconds_per_epoch"] / row["engine_seconds_per_epoch"])
    assert row["ais_betas"] == 1001 and row["ais_seconds_per_run"] == pytest.approx(row["ais_seconds"] / 4)
    assert np.isfinite(row["ais_log_z"]) and row["ais_spread"] >= 0


def test_bench_tap_json_times_engine_and_numpy_in_one_run():
    out = run("bench", "tap", "--json", "--hidden", "30", "--chains", "8", "--sweeps", "5", "--repeats", "1")
    assert out.returncode == 0, out.stderr
    (row,) = json.loads(out.stdout)["rows"]
    assert (row["n_visible"], row["n_hidden"], row["K"], row["threads"]) == (784, 30, 8, 1)
    assert row["ratio"] == pytest.approx(row["engine_sweeps_per_s"] / row["numpy_sweeps_per_s"])
    assert row["max_abs_difference"] < 1e-9  # both implementations compute the same sweeps
    assert 0 < row["fraction_of_matmul"] and row["converge_sweeps_median"] >= 1


def test_bench_frankwolfe_json_times_insertions_and_cd_epochs_in_one_run():
    out = run("bench", "frankwolfe", "--json", "--hidden", "8", "12", "--insertions", "1", "--repeats", "1",
              "--samples", "50", "--cd-k", "1")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert [r["n_hidden"] for r in result["rows"]] == [8, 12]
    for row in result["rows"]:
        assert row["n_visible"] == 784 and row["cd_k"] == 1 and row["samples"] == 50
        assert row["ratio_insertion_to_epoch"] == pytest.approx(
            row["fw_seconds_per_insertion"] / row["cd_seconds_per_epoch"])
        assert row["ratio_fw_run_to_cd_run"] > 0


def test_bench_json_reports_a_ratio():
    out = run("bench", "fvbm", "--json", "--seconds", "0.5")
    result = json.loads(out.stdout)
    assert result["n"] == 16000 and result["d"] == 20
    assert result["ratio"] == pytest.approx(result["numba_sweeps_per_second"] / result["numpy_sweeps_per_second"])


def test_reproduce_tap_tiny_json_and_figures(tmp_path):
    out = run("reproduce", "tap", "--quick", "--json", "--output", str(tmp_path), "--hidden", "6",
              "--epochs", "2", "--n-test", "15", "--n-eval", "40", "--ais-runs", "3")
    assert out.returncode == 0, out.stderr
    assert "epoch   2/2" in out.stderr  # progress lines on stderr
    result = json.loads(out.stdout)
    for key in ("epochs", "denoising", "denoising_by_model", "ais", "claims", "settings", "figures"):
        assert key in result
    assert [row["epoch"] for row in result["epochs"]] == [1, 2]
    assert result["settings"]["hidden"] == [6] and result["settings"]["n_test"] == 15
    curve = result["denoising"]
    assert len(curve["p"]) == len(curve["mcc_tap"]) == len(curve["mcc_ope"]) == len(curve["mcc_1nn"]) == 7
    assert all(isinstance(c["shown"], bool) for c in result["claims"])
    assert set(result["figures"]) == {"figure3", "figure4", "figure5", "figure8"}
    for paths in result["figures"].values():
        assert Path(paths["png"]).stat().st_size > 5_000
        assert "<html" in Path(paths["html"]).read_text().lower()


def test_reproduce_tap_text_table_and_bad_override(tmp_path):
    out = run("reproduce", "tap", "--quick", "--output", str(tmp_path), "--hidden", "5", "--epochs", "1",
              "--n-test", "10", "--n-eval", "20", "--ais-runs", "2")
    assert out.returncode == 0, out.stderr
    assert "Denoising MCC, Nh = 5" in out.stdout and "Claims of §VII" in out.stdout
    out = run("reproduce", "tap", "--epochs", "0")
    assert out.returncode == 2 and "--epochs" in out.stderr


def test_reproduce_frankwolfe_tiny_json_and_figures(tmp_path):
    out = run("reproduce", "frankwolfe", "--tiny", "--json", "--output", str(tmp_path), "--max-hidden", "6",
              "--cd-hidden", "3", "6", "--cd-epochs", "1", "--cd-seeds", "2", "--ais-runs", "3",
              "--n-train", "200", "--n-test", "100")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    fw, cd = result["frankwolfe"], result["cd"]
    assert len(fw["hidden_units"]) == len(fw["test_log_likelihood"]) >= 2
    assert cd["hidden_units"] == [3, 6]
    assert len(cd["fw_init_test_log_likelihood"]) == len(cd["random_init_test_log_likelihood"]) == 2
    assert {c["claim"] for c in result["claims"]} and all("shown" in c for c in result["claims"])
    for paths in result["figures"].values():
        assert (tmp_path / paths["png"].split("/")[-1]).exists()


def test_reproduce_frankwolfe_digits_json_keys_and_exact_numbers():
    """`--data digits`: the issue's JSON keys, lists over hidden_units, exact (finite) numbers,
    and the sampled FW within the goal of FW with exact expectations (5 units, lambda 0.05)."""
    out = run("reproduce", "frankwolfe", "--data", "digits", "--quick", "--json", "--hidden", "3", "5",
              "--reg-grid", "0.05")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["hidden_units"] == [3, 5]
    for key in ("fw_test_log_likelihood", "fw_exact_test_log_likelihood", "cd_test_log_likelihood"):
        assert len(result[key]) == 2 and all(-30 < v < -15 for v in result[key]), (key, result[key])
    assert result["fw_reg"] == [0.05, 0.05] and result["goal_met"] == all(
        d >= -0.5 for d in result["fw_minus_exact"])
    out = run("reproduce", "frankwolfe", "--data", "digits", "--hidden", "21")
    assert out.returncode != 0 and "from 1 to 20" in out.stderr


def test_reproduce_frankwolfe_rejects_a_bad_override():
    out = run("reproduce", "frankwolfe", "--max-hidden", "0")
    assert out.returncode == 2 and "--max-hidden" in out.stderr


def test_bench_bound_json_times_numba_and_numpy_in_one_run():
    out = run("bench", "bound", "--json", "--bits", "8", "--repeats", "1")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["omega"] == 256 and result["d"] == 8 + 28
    assert result["ratio_vectorised"] == pytest.approx(result["numpy_vectorised_seconds"] / result["numba_seconds"])
    assert result["max_abs_diff_sigma_vectorised"] < 1e-8


def test_reproduce_bound_quick_json_has_table1_and_claims():
    out = run("reproduce", "bound", "--quick", "--json", "--problems", "wine")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    methods = {row["method"] for row in result["table1"]}
    assert len(methods) == 5 and all(row["problem"] == "wine" for row in result["table1"])
    bound = [r for r in result["table1"] if r["method"].lower().startswith("bound")][0]
    assert bound["monotone"] and bound["iterations"] is not None
    (claim,) = result["claims"]
    assert claim["problem"] == "wine" and claim["shown"] in (True, False) and claim["evidence"]
    assert result["table2"] and all("claim" in c and "shown" in c for c in result["table2_claims"])


def test_reproduce_bound_rejects_an_unknown_problem():
    out = run("reproduce", "bound", "--problems", "iris")
    assert out.returncode == 2 and "iris" in out.stderr
