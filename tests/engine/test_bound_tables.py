"""Table 2 of Jebara & Choromanska (2012) through engine.experiments.bound_tables.run."""

import math

from boltzlab.engine.experiments import bound_tables
from boltzlab.engine.latent import TABLE2_METHODS


def test_quick_run_has_finite_table2_rows_and_claims():
    result = bound_tables.run(quick=True, problems=("wine",), max_seconds=1.0)
    rows = result["table2"]
    assert rows, result["table2_note"]
    assert {r["problem"] for r in rows} == {"wine"}
    assert {r["method"] for r in rows} == set(TABLE2_METHODS)
    for r in rows:
        for key in ("test_loglik", "train_objective", "seconds", "test_accuracy"):
            assert math.isfinite(r[key]), (r["method"], key)
        assert r["test_loglik"] <= 0.0
        if r["method"] in ("Bound majorization", "EM"):
            assert r["monotone"]
    claims = [c for c in result["table2_claims"] if "Table 2" in c["claim"]]
    assert all("Table 1" in c["claim"] for c in result["claims"])
    assert claims and all(c["shown"] in (True, False, None) and c["rule"] and c["evidence"] for c in claims)
    assert result["table1"]  # Table 1 still runs
    assert "Table 2" in bound_tables.format_table(result)
