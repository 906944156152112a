"""Table 2 of Jebara & Choromanska (2012) through engine.experiments.bound_tables.run."""

import math

from boltzlab.engine.experiments import bound_tables
from boltzlab.engine.latent import TABLE2_METHODS


def test_run_has_finite_table2_rows_and_deterministic_claims(monkeypatch):
    # Iteration caps only, no wall-clock budget (issue 27): quick mode caps every run at a few
    # seconds of its own time, so on a busy machine a run stopped on the clock, was excluded from
    # the claim and the verdict changed with the load.  The quick Table-2 settings, without
    # their time cap, through the full mode (which takes max_seconds as given).
    monkeypatch.setattr(bound_tables, "TABLE2_FULL", dict(bound_tables.TABLE2_QUICK, max_seconds=math.inf))
    result = bound_tables.run(quick=False, problems=("wine",), max_seconds=math.inf, max_iter=3000)
    rows = result["table2"]
    assert rows, result["table2_note"]
    assert {r["problem"] for r in rows} == {"wine"}
    assert {r["method"] for r in rows} == set(TABLE2_METHODS)
    for r in rows:
        for key in ("test_loglik", "train_objective", "seconds", "test_accuracy"):
            assert math.isfinite(r[key]), (r["method"], key)
        assert r["test_loglik"] <= 0.0
        assert r["status"] != "time cap", r
        if r["method"] in ("Bound majorization", "EM"):
            assert r["monotone"]
    cell = {(r["m"], r["method"]): r for r in rows}
    assert cell[1, "Bound majorization"]["status"] == "converged"
    assert cell[2, "Bound majorization"]["status"] == "max_iter"  # 500 steps do not converge it at m = 2

    # Table 2's claim on this seeded run, by its rule: m = 2 is excluded (the bound did not
    # converge); at m = 1 the bound ties the best other method (within 1e-4 of 1e-2), so it is
    # never worse but never strictly better: NOT shown.
    (claim,) = [c for c in result["table2_claims"] if "Table 2" in c["claim"]]
    assert claim["shown"] is False, claim["evidence"]
    assert "m=2: excluded (bound not converged: max_iter)" in claim["evidence"]
    others = [cell[1, name]["test_loglik"] for name in TABLE2_METHODS if name != "Bound majorization"]
    assert abs(cell[1, "Bound majorization"]["test_loglik"] - max(others)) < 1e-3

    # Table 1's claim is about seconds, which vary with the load: its verdict against its rule,
    # recomputed from the rows (a baseline that never reaches eps counts as slower).
    (t1,) = result["claims"]
    assert "Table 1" in t1["claim"] and t1["problem"] == "wine"
    seconds = {bound_tables._method_key(r["method"]): r["seconds"] for r in result["table1"]}
    assert all(s is not None for s in seconds.values()), seconds  # no time cap: every method reaches eps
    expected = all(seconds["Bound majorization"] < seconds[name] for name in bound_tables.BASELINES)
    assert t1["shown"] is expected, (t1["evidence"], seconds)
    assert result["table1"]  # Table 1 still runs
    assert "Table 2" in bound_tables.format_table(result)
