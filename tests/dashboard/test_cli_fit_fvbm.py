"""`boltzlab fit fvbm`: the four algorithms, --se (checked against a simulation), and the
rules for data without an MPLE."""

import json
import math
import subprocess
import sys

import numpy as np
import pytest

from boltzlab.engine.data import ASSETS, load_fvbm_csv
from boltzlab.engine.fvbm import (
    FVBM, _hessian, maximize_log_pl, mple, pack_theta, sandwich_covariance, states_to_spins, unpack_theta, wald_tests,
)

BOLTZLAB = [sys.executable, "-m", "boltzlab"]
SENATE = str(ASSETS / "senate_knn1_imputed.csv")
NO_MPLE = "a,b,c\n1,1,-1\n-1,-1,1\n1,1,1\n-1,-1,-1\n"  # columns 1 and 2 predict each other


def run(*args):
    return subprocess.run(BOLTZLAB + list(args), capture_output=True, text=True, timeout=600)


def one_line(stderr: str, prefix: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(prefix), stderr
    assert "Traceback" not in stderr
    return lines[0]


# ----------------------------------------------------------------- algorithms


@pytest.mark.parametrize("algorithm", ["bound", "lbfgs"])
def test_bound_and_lbfgs_reach_the_mple(algorithm):
    out = run("fit", "fvbm", SENATE, "--algorithm", algorithm, "--json")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["algorithm"] == algorithm and result["converged"] and result["mple_exists"]
    assert result["mu"] is None and result["sweeps"] == len(result["history"])
    truth = mple(load_fvbm_csv(SENATE).X, grad_tol=1e-12)
    # the default Newton polish finishes at the MPLE, whatever the algorithm's rule left
    assert result["polish"]["method"] == "newton" and result["polish"]["gradient"] <= 1e-9
    assert np.abs(np.array(result["b"]) - truth.b).max() < 1e-6
    assert np.abs(np.array(result["M"]) - truth.M).max() < 1e-6
    if algorithm == "bound":  # monotone by construction (MM, SQUAREM keeps only improvements)
        assert result["monotone"] and np.all(np.diff(result["history"]) >= 0)


@pytest.mark.parametrize("algorithm", ["bslm", "ga"])
def test_the_default_fit_is_the_mple_to_the_printed_precision(algorithm):
    """Issue 26: BSLM's rule |increase| < 1e-5 alone stopped 3.0e-3 from the MPLE
    (m[Govt,AG] -1.0268 against -1.0281); the default Newton polish gets within 1e-6."""
    truth = mple(load_fvbm_csv(SENATE).X, grad_tol=1e-12)
    polished = json.loads(run("fit", "fvbm", SENATE, "--algorithm", algorithm, "--json").stdout)
    raw = json.loads(run("fit", "fvbm", SENATE, "--algorithm", algorithm, "--polish", "none", "--json").stdout)
    error = max(np.abs(np.array(polished["M"]) - truth.M).max(), np.abs(np.array(polished["b"]) - truth.b).max())
    assert error < 1e-6 and polished["converged"] and polished["polish"]["steps"] >= 1
    assert raw["polish"] == {"method": "none", "steps": 0, "gradient": None}
    assert np.abs(np.array(raw["M"]) - truth.M).max() > 1e-4  # what the polish is for
    assert polished["log_pl"] >= raw["log_pl"] and polished["sweeps"] == raw["sweeps"]
    text = run("fit", "fvbm", SENATE, "--algorithm", algorithm).stdout
    assert "Newton polish (--polish newton)" in text
    cell = f"{truth.M[0, 2]:+.4f}"  # m[Govt,AG]: printed to four decimals, as the MPLE has it
    assert cell in text.splitlines()[[i for i, t in enumerate(text.splitlines()) if t.startswith("M (upper")][0] + 2]


def test_drop_govt_fits_the_labs_senate_data():
    from boltzlab.engine.data import senate

    out = run("fit", "fvbm", SENATE, "--drop", "Govt", "--json")
    result = json.loads(out.stdout)
    lab = senate()
    assert result["columns"] == lab.columns and result["d"] == 8
    truth = mple(lab.X, grad_tol=1e-12)
    assert np.abs(np.array(result["M"]) - truth.M).max() < 1e-6
    bad = run("fit", "fvbm", SENATE, "--drop", "Gov")
    assert bad.returncode == 2 and "No column named 'Gov' to drop" in one_line(bad.stderr, "boltzlab: error:")


# ------------------------------------------------------------------------ --se


def test_se_json_mirrors_b_and_M_and_matches_the_engine():
    out = run("fit", "fvbm", SENATE, "--algorithm", "bound", "--se", "--json")
    assert out.returncode == 0, out.stderr
    assert out.stderr == ""
    result = json.loads(out.stdout)
    d = result["d"]
    b, M = np.array(result["b"]), np.array(result["M"])
    tests = wald_tests(load_fvbm_csv(SENATE).X, b, M)
    for key in ("se", "z", "p"):
        assert set(result[key]) == {"b", "M"}
        vb = np.array(result[key]["b"], dtype=float)
        vM = np.array(result[key]["M"], dtype=float)  # null on the diagonal -> nan
        assert vb.shape == (d,) and vM.shape == (d, d)
        assert all(result[key]["M"][j][j] is None for j in range(d))
        off = ~np.eye(d, dtype=bool)
        assert np.all(np.isfinite(vM[off])) and np.array_equal(vM, vM.T, equal_nan=True)
        np.testing.assert_allclose(vb, tests[key][0], rtol=1e-10)
        np.testing.assert_allclose(vM[off], tests[key][1][off], rtol=1e-10)
    se_b, se_M = np.array(result["se"]["b"]), np.array(result["se"]["M"], dtype=float)
    z_b, z_M = np.array(result["z"]["b"]), np.array(result["z"]["M"], dtype=float)
    p_M = np.array(result["p"]["M"], dtype=float)
    assert np.all(se_b > 0) and np.all(se_M[~np.eye(d, dtype=bool)] > 0)
    np.testing.assert_allclose(z_b, b / se_b)
    iu = np.triu_indices(d, 1)
    np.testing.assert_allclose(z_M[iu], M[iu] / se_M[iu])
    np.testing.assert_allclose(p_M[iu], [math.erfc(abs(z) / math.sqrt(2)) for z in z_M[iu]])


def test_se_text_table_lists_every_parameter():
    out = run("fit", "fvbm", SENATE, "--algorithm", "lbfgs", "--se")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("Wald tests"))
    assert lines[start + 1].split() == ["parameter", "estimate", "SE", "z", "p"]
    rows = [line.split() for line in lines[start + 2:]]
    columns = load_fvbm_csv(SENATE).columns
    names = [f"b[{c}]" for c in columns] + [f"m[{a},{b}]" for i, a in enumerate(columns) for b in columns[i + 1:]]
    assert [r[0] for r in rows] == names  # 9 biases and 36 couplings, in packed order
    for _, estimate, se, z, p in rows:
        assert float(se) > 0 and float(z) == pytest.approx(float(estimate) / float(se), abs=0.01 + 1e-3 * abs(float(z)))
        assert 0 <= float(p) <= 1


def test_se_after_a_fit_stopped_early_warns():
    out = run("fit", "fvbm", SENATE, "--se", "--tol", "0", "--max-sweeps", "3", "--json")
    assert out.returncode == 0
    assert "may not be the MPLE" in one_line(out.stderr, "boltzlab: warning:")
    assert json.loads(out.stdout)["sweeps"] == 3


def _simulate_and_fit(truth: FVBM, n: int, replicates: int, seed: int):
    """MPLEs of ``replicates`` data sets of n exact draws from ``truth`` (multinomial counts of
    the 2^d states: exact sampling by enumeration), with the sandwich covariance and the
    Hessian at each estimate."""
    d = truth.d
    states = states_to_spins(np.arange(2**d), d)
    p = truth.probabilities()
    rng = np.random.default_rng(seed)
    estimates, covariances, hessians = [], [], []
    for _ in range(replicates):
        counts = rng.multinomial(n, p)
        seen = counts > 0
        rows, w = states[seen], counts[seen].astype(np.float64)
        theta = maximize_log_pl(rows, w)
        b, M = unpack_theta(theta, d)
        X = np.repeat(rows, counts[seen], axis=0)
        estimates.append(theta)
        covariances.append(sandwich_covariance(X, b, M))
        hessians.append(_hessian(rows, w, b, M))
        se = wald_tests(X, b, M)["se"]
        np.testing.assert_allclose(pack_theta(se[0], np.nan_to_num(se[1])), np.sqrt(np.diag(covariances[-1])))
    return np.array(estimates), np.array(covariances), np.array(hessians)


def _agrees(standard_errors: np.ndarray, empirical_sd: np.ndarray) -> bool:
    """Mean SE / empirical SD within 15 % for every parameter and within 7 % on average.

    With 400 replicates the empirical SD has a relative standard error of ~3.5 %, so a correct
    covariance passes by > 4 of those per parameter; the wrong ones below miss by 25 % or more.
    """
    ratio = standard_errors.mean(axis=0) / empirical_sd
    return bool(np.all(np.abs(ratio - 1) < 0.15) and abs(ratio.mean() - 1) < 0.07)


def test_sandwich_standard_errors_match_a_simulation():
    d = 4
    M = np.zeros((d, d))
    M[np.triu_indices(d, 1)] = [0.8, -0.6, 0.5, 0.7, -0.4, 0.6]  # couplings strong enough that PL != likelihood
    truth = FVBM(np.array([0.3, -0.2, 0.1, 0.0]), M + M.T)
    n, replicates = 500, 400
    estimates, covariances, hessians = _simulate_and_fit(truth, n, replicates, seed=20261124)
    assert np.all(np.isfinite(estimates))
    assert np.abs(estimates.mean(axis=0) - truth.theta()).max() < 0.05  # the MPLE is consistent
    empirical_sd = estimates.std(axis=0, ddof=1)
    se = np.sqrt(np.diagonal(covariances, axis1=1, axis2=2))
    ratio = se.mean(axis=0) / empirical_sd
    assert _agrees(se, empirical_sd), f"mean SE / empirical SD per parameter: {np.round(ratio, 3)}"

    # The same check rejects the usual mistakes, so it has the power to catch them.
    H_inv = np.linalg.inv(hessians)
    J = hessians @ covariances @ hessians  # the meat, recovered from H^-1 J H^-1
    wrong = {
        "no meat (-H^-1, the likelihood's information identity)": np.diagonal(-H_inv, axis1=1, axis2=2),
        "no bread (J^-1)": np.diagonal(np.linalg.inv(J), axis1=1, axis2=2),
        "a factor n too small (covariance of the mean score)": np.diagonal(covariances, axis1=1, axis2=2) / n,
        "a factor n too large": np.diagonal(covariances, axis1=1, axis2=2) * n,
    }
    for name, variances in wrong.items():
        assert not _agrees(np.sqrt(np.abs(variances)), empirical_sd), name


# ------------------------------------------------------------ no MPLE, bad input


def test_no_mple_exits_3_unless_fixed_sweeps_are_asked_for(tmp_path):
    path = tmp_path / "nomple.csv"
    path.write_text(NO_MPLE)
    for extra in ([], ["--tol", "0"], ["--max-sweeps", "5"]):
        out = run("fit", "fvbm", str(path), *extra)
        assert out.returncode == 3
        line = one_line(out.stderr, "boltzlab: error:")
        assert "MPLE does not exist" in line and "--tol 0 --max-sweeps N" in line
    out = run("fit", "fvbm", str(path), "--tol", "0", "--max-sweeps", "5", "--se")
    assert out.returncode == 3 and "--se" in one_line(out.stderr, "boltzlab: error:")
    for algorithm in ("bslm", "bound"):
        out = run("fit", "fvbm", str(path), "--tol", "0", "--max-sweeps", "5", "--algorithm", algorithm, "--json")
        assert out.returncode == 0, out.stderr
        line = one_line(out.stderr, "boltzlab: warning:")
        assert "MPLE does not exist" in line and "Running the 5 requested" in line
        result = json.loads(out.stdout)
        assert result["sweeps"] == 5 and result["status"] == "max_sweeps" and not result["mple_exists"]


def test_new_bad_input_exits_2_with_one_sentence(tmp_path):
    out = run("fit", "fvbm", SENATE, "--algorithm", "bound", "--mu", "0.5")
    assert out.returncode == 2
    assert "--mu" in one_line(out.stderr, "boltzlab: error:")
    out = run("fit", "fvbm", SENATE, "--algorithm", "newton")
    assert out.returncode == 2 and "invalid choice" in out.stderr and "Traceback" not in out.stderr
    wide = tmp_path / "wide.csv"
    rows = np.random.default_rng(0).choice([-1, 1], size=(30, 65))
    wide.write_text("\n".join(",".join(map(str, r)) for r in rows))
    out = run("fit", "fvbm", str(wide), "--se")
    assert out.returncode == 2
    assert "d = 65" in one_line(out.stderr, "boltzlab: error:")
