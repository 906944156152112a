"""Data loading and validation: bundled, simulated and user CSV files."""

from unittest.mock import patch

import numpy as np
import pytest
from hypothesis import assume, given, settings, strategies as st

import boltzlab.engine.fvbm as fvbm_module

from boltzlab.engine.data import MAX_CSV_BYTES, check_mple_exists, load_fvbm_csv, senate, simulate_fvbm
from boltzlab.engine.fvbm import FVBM, FVBMTrainer


def test_senate_is_the_boltzmm_table():
    data = senate()
    assert data.X.shape == (147, 8)
    assert data.columns == ["Opp", "AG", "NXT", "PHON", "LDP", "JLN", "DHJP", "Cull"]
    assert set(np.unique(data.X)) == {-1.0, 1.0}
    assert senate(drop_govt=False).X.shape == (147, 9)
    check_mple_exists(data.X)


def test_codings_and_header(tmp_path):
    pm1 = tmp_path / "pm1.csv"
    pm1.write_text("a,b,c\n1,-1,1\n-1,-1,1\n1,1,-1\n")
    zero_one = tmp_path / "01.csv"
    zero_one.write_text("1,0,1\n0,0,1\n1,1,0\n")
    yes_no = tmp_path / "yn.csv"
    yes_no.write_text('"x","y","z"\n"Yes","No","yes"\nno,NO,Yes\nYes,yes,no\n')
    expected = np.array([[1, -1, 1], [-1, -1, 1], [1, 1, -1]], dtype=float)
    for path in (pm1, zero_one, yes_no):
        np.testing.assert_array_equal(load_fvbm_csv(path).X, expected)
    assert load_fvbm_csv(pm1).columns == ["a", "b", "c"]
    assert load_fvbm_csv(zero_one).columns == ["x1", "x2", "x3"]


def test_missing_rows_are_dropped_and_counted(tmp_path):
    path = tmp_path / "na.csv"
    path.write_text("a,b\n1,-1\nNA,1\n-1,\n1,1\n")
    data = load_fvbm_csv(path)
    assert data.X.shape == (2, 2) and data.dropped_rows == 2
    assert "dropped 2 of 4 rows" in data.notes[0]


def test_raw_senate_typo_is_named():
    from boltzlab.engine.data import ASSETS

    with pytest.raises(ValueError, match=r"Line 35, column 3 \('AG'\).*'Ye'"):
        load_fvbm_csv(ASSETS / "senate_raw.csv")


@pytest.mark.parametrize(
    "text, match",
    [
        ("", "empty"),
        ("a,b\n", "header row but no rows"),
        ("1\n-1\n1\n", "1 column"),
        ("1,-1\n1,-1,1\n", "Line 2 .* 3 values"),
        ("1,-1\n1,2\n", r"Line 2, column 2 .*'2'"),
        ("1,-1\n0,1\n", "coding"),
        ("1,NA\nNA,1\n", "no complete rows"),
    ],
)
def test_bad_files_get_clear_errors(tmp_path, text, match):
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(ValueError, match=match):
        load_fvbm_csv(path)


def test_oversized_and_binary_input():
    with pytest.raises(ValueError, match="at most 50 MB"):
        load_fvbm_csv(b"1,1\n" * (MAX_CSV_BYTES // 4 + 1))
    with pytest.raises(ValueError, match="UTF-8"):
        load_fvbm_csv(b"\xff\xfe\x00garbage")
    with pytest.raises(ValueError, match="does not exist"):
        load_fvbm_csv("/nonexistent/file.csv")


def test_simulated_data_is_reproducible():
    a, b = simulate_fvbm(5, 300, 7), simulate_fvbm(5, 300, 7)
    np.testing.assert_array_equal(a.X, b.X)
    np.testing.assert_array_equal(a.truth.M, b.truth.M)
    assert not np.array_equal(a.X, simulate_fvbm(5, 300, 8).X)
    with pytest.raises(ValueError, match="'d'"):
        simulate_fvbm(1, 100, 0)


def test_constant_column_has_no_mple():
    X = FVBM.random(3, 0, 0.1).sample(500, 1)
    X[:, 1] = 1.0
    with pytest.raises(ValueError, match="column 2 is constant"):
        check_mple_exists(X)


def test_perfectly_predicted_column_has_no_mple_and_bslm_diverges():
    """x3 = x1 * x2 exactly is not linearly separable, but x3 = x1 is: the coupling m_13
    grows without bound, and the LP finds it."""
    X = FVBM.random(4, 2, 0.1).sample(800, 3)
    X[:, 2] = X[:, 0]
    with pytest.raises(ValueError, match="columns 1, 3"):
        check_mple_exists(X)
    trainer = FVBMTrainer(X, tol=0, max_sweeps=400)
    trainer.run()
    assert abs(trainer.M[0, 2]) > 3.0  # still growing: no maximizer to converge to


def test_xor_column_is_not_separable():
    X = FVBM.random(2, 2, 0.1).sample(800, 3)
    X = np.column_stack([X, X[:, 0] * X[:, 1]])
    check_mple_exists(X)  # x3 = x1 x2 is no linear threshold of x1, x2: the MPLE exists


@settings(max_examples=40)
@given(st.integers(2, 5), st.integers(4, 40), st.integers(0, 10_000))
def test_existence_certificate_agrees_with_the_linear_program(d, n, seed):
    """The fast path (a positive null vector of A^T near the gradient weights) and the LP
    reach the same verdict; small n makes separable data common, so both verdicts occur."""
    X = np.where(np.random.default_rng(seed).random((n, d)) < 0.5, -1.0, 1.0)
    assume(all(len(np.unique(X[:, j])) == 2 for j in range(d)))

    def verdict():
        try:
            check_mple_exists(X)
            return True
        except ValueError:
            return False

    fast = verdict()
    with patch.object(fvbm_module, "_positive_null_vector", return_value=False):
        assert verdict() == fast
