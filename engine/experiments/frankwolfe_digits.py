"""Frank-Wolfe against CD-10 on the 8x8 digits, with **exact** log-likelihoods (no AIS).

`boltzlab reproduce frankwolfe --data digits`: the small-data check of Ping, Liu & Ihler
(2016) §4 that the MNIST run (:mod:`boltzlab.engine.experiments.frankwolfe_mnist`) cannot make,
because every model here has at most 20 hidden units and its log Z is enumerated.

On :func:`boltzlab.engine.images.digits` (1,259 training, 179 validation, 359 test digits of 64
pixels), at each size n in ``hidden``:

1. **FW, sampled** (:class:`boltzlab.engine.frankwolfe.FrankWolfeTrainer`, Algorithm 1 as the
   MNIST run uses it): S persistent chains, eq. 10 until the visible means match the data's
   (``bias_tol``, at most ``bias_steps`` updates).  One run per (lambda, eta) of the paper's
   grids grows to max(hidden) units; at each n the pair with the highest validation
   log-likelihood at n is reported.
2. **FW, exact** (``exact_expectations=True``, enumerating the 2^n hidden states): eq. 10
   solved exactly (its limit, found by L-BFGS), eq. 9 on S independent exact samples.  This
   is what the sampled algorithm should reach; eta only sets how eq. 10 gets to its limit,
   so only lambda is searched.  Goal: the sampled FW within ``goal_nats`` of it at every n.
3. **CD-10** from random starts (the paper's learning-rate grid, ``cd_seeds`` seeds),
   ``cd_epochs`` epochs, exact validation log-likelihood every ``cd_eval_every`` epochs; at
   each n the best (learning rate, seed, epoch) by validation is reported.

Every number is a mean test log-likelihood per digit in nats with the exact log Z.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, fields, replace
from typing import Any, Callable

import numpy as np
from ..progress import Reporter

PAPER_REG_GRID = (1.0, 0.5, 0.1, 0.05, 0.01)  # lambda (§4)
PAPER_LR_GRID = (0.05, 0.02, 0.01, 0.005)  # eta of FW and the learning rate of CD (§4)


@dataclass
class DigitsSettings:
    hidden: tuple[int, ...] = (5, 10, 15, 20)
    reg_grid: tuple[float, ...] = PAPER_REG_GRID
    bias_lr_grid: tuple[float, ...] = PAPER_LR_GRID
    samples: int = 2000  # S
    bias_steps: int = 1000  # cap of eq. 10's loop
    bias_tol: float = 0.01
    cd_k: int = 10
    cd_learning_rates: tuple[float, ...] = PAPER_LR_GRID
    cd_epochs: int = 200
    cd_eval_every: int = 5
    cd_batch_size: int = 20
    cd_momentum: float = 0.5
    cd_seeds: int = 2
    goal_nats: float = 0.5
    seed: int = 0
    quick: bool = False

    @classmethod
    def quick_settings(cls, **overrides: Any) -> "DigitsSettings":
        base = cls(hidden=(5, 10), reg_grid=(0.1, 0.05), bias_lr_grid=(0.05,), cd_learning_rates=(0.05,),
                   cd_epochs=40, cd_seeds=1, quick=True)
        return replace(base, **overrides)


def make_settings(quick: bool = False, seed: int = 0, **overrides: Any) -> DigitsSettings:
    """The full or quick settings with ``overrides`` (field names of :class:`DigitsSettings`; None ignored)."""
    names = {f.name for f in fields(DigitsSettings)}
    unknown = sorted(set(overrides) - names)
    if unknown:
        raise ValueError(f"Unknown setting(s) {unknown} for the digits experiment; allowed: {sorted(names)}.")
    overrides = {k: v for k, v in overrides.items() if v is not None}
    for name in ("hidden", "reg_grid", "bias_lr_grid", "cd_learning_rates"):
        if name in overrides:
            value = overrides[name]
            overrides[name] = tuple((value,) if isinstance(value, (int, float)) else value)
    s = DigitsSettings.quick_settings(seed=seed) if quick else DigitsSettings(seed=seed)
    s = replace(s, **overrides)
    owner = "the digits experiment"
    if not s.hidden or any(isinstance(h, bool) or not isinstance(h, (int, np.integer)) or not 1 <= h <= 20
                           for h in s.hidden):
        raise ValueError(f"The 'hidden' setting of {owner} must list ints from 1 to 20 (exact log Z). Got {s.hidden!r}.")
    for name in ("reg_grid", "bias_lr_grid", "cd_learning_rates"):
        values = getattr(s, name)
        if not values or any(not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0) for v in values):
            raise ValueError(f"The '{name}' setting of {owner} must list floats > 0. Got {values!r}.")
    for name in ("samples", "bias_steps", "cd_k", "cd_epochs", "cd_eval_every", "cd_batch_size", "cd_seeds"):
        value = getattr(s, name)
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"The '{name}' setting of {owner} must be an int >= 1. Got {value!r}.")
    return replace(s, hidden=tuple(sorted(set(int(h) for h in s.hidden))))


def _exact_log_likelihoods(W, b_vis, b_hid, splits: dict[str, np.ndarray]) -> dict[str, float]:
    """Mean log p(v) of every split with the exact log Z (enumerated once for all splits)."""
    from ..rbm import RBM, log_partition_exact

    rbm = RBM(np.asarray(W, np.float64), np.asarray(b_vis, np.float64), np.asarray(b_hid, np.float64))
    log_z = log_partition_exact(rbm.W, rbm.b_vis, rbm.b_hid)
    return {name: float(-np.mean(rbm.free_energy(X)) - log_z) for name, X in splits.items()}


def _grow_fw(X_train, splits, s: DigitsSettings, reg: float, bias_lr: float, exact: bool) -> dict:
    """One FW path to max(hidden) units; exact log-likelihoods at every size of ``hidden``."""
    from ..frankwolfe import FrankWolfeTrainer

    trainer = FrankWolfeTrainer(X_train, max_hidden=max(s.hidden), samples=s.samples, reg=reg, bias_lr=bias_lr,
                                bias_steps=s.bias_steps, bias_tol=s.bias_tol, evaluate="none", seed=s.seed,
                                exact_expectations=exact)
    out: dict[str, Any] = {"reg": reg, "bias_lr": bias_lr, "exact": exact, "sizes": {}}
    seconds, updates, capped = 0.0, [], 0
    while not trainer.done:
        rec = trainer.step().scalars
        seconds += rec["wall_time"]
        updates.append(rec["bias_updates"])
        capped += not rec["bias_converged"]
        n = rec["n_hidden"]
        if n in s.hidden:
            out["sizes"][n] = _exact_log_likelihoods(*trainer.params, splits) | {"seconds": seconds}
    out.update(seconds=seconds, mean_bias_updates=float(np.mean(updates)), bias_capped=capped,
               status=trainer.status)
    return out


def _cd_runs(X_train, splits, s: DigitsSettings, n: int, say) -> dict:
    """CD-k from random starts over learning rates and seeds; the best (lr, seed, epoch) by validation."""
    from ..rbm import RBMTrainer

    best: dict[str, Any] | None = None
    for lr in s.cd_learning_rates:
        for r in range(s.cd_seeds):
            trainer = RBMTrainer(X_train, n, method="cd", k=s.cd_k, batch_size=s.cd_batch_size, learning_rate=lr,
                                 momentum=s.cd_momentum, step_unit="epoch", evaluate="none", max_epochs=s.cd_epochs,
                                 seed=s.seed + r)
            for epoch in range(1, s.cd_epochs + 1):
                trainer.step()
                if epoch % s.cd_eval_every and epoch != s.cd_epochs:
                    continue
                rbm = trainer.rbm
                ll = _exact_log_likelihoods(rbm.W, rbm.b_vis, rbm.b_hid, splits)
                if best is None or ll["valid"] > best["valid"]:
                    best = ll | {"learning_rate": lr, "seed": s.seed + r, "epoch": epoch}
                if trainer.done:
                    break
    say(f"  CD-{s.cd_k} {n:>2} units: test {best['test']:.3f} (valid {best['valid']:.3f}; lr {best['learning_rate']:g}, "
        f"seed {best['seed']}, epoch {best['epoch']})")
    return best


def run(quick: bool = False, output_dir=None, seed: int = 0, progress: Callable[[str], None] | None = None,
        **overrides: Any) -> dict:
    """Run the comparison; a JSON-ready dict (see the module docstring).

    Keys: ``experiment``, ``settings``, ``data``, ``hidden_units`` and, lists over it,
    ``fw_test_log_likelihood``, ``fw_exact_test_log_likelihood``, ``cd_test_log_likelihood``
    (and ``*_valid_log_likelihood``, ``fw_reg``, ``fw_bias_lr``, ``fw_exact_reg``,
    ``cd_learning_rate``, ``cd_epoch``, ``fw_seconds``); ``fw_runs`` / ``fw_exact_runs`` (every
    path), ``fw_minus_exact`` and ``goal_met`` (sampled within ``goal_nats`` of exact at every
    size), ``seconds``.  ``output_dir`` is accepted for the CLI's sake and unused.
    """
    from ..images import digits

    say = Reporter(progress)
    s = make_settings(quick, seed, **overrides)
    t0 = time.perf_counter()
    data = digits(np.float64)
    splits = {"train": data.X_train, "valid": data.X_valid, "test": data.X_test}
    say(f"Frank-Wolfe vs CD-{s.cd_k} on the 8x8 digits ({len(data.X_train)} / {len(data.X_valid)} / "
        f"{len(data.X_test)}), exact log-likelihoods at {list(s.hidden)} hidden units" + (" (quick)" if s.quick else ""))
    fw_runs, exact_runs = [], []
    say.expect(len(s.reg_grid) * (len(s.bias_lr_grid) + 1) + len(s.hidden))  # FW paths, then CD per size
    for reg in s.reg_grid:
        for lr in s.bias_lr_grid:
            fw = _grow_fw(data.X_train, splits, s, reg, lr, exact=False)
            fw_runs.append(fw)
            say(f"  FW sampled lambda {reg:g} eta {lr:g}: " + ", ".join(
                f"{n}: {v['test']:.3f}" for n, v in fw["sizes"].items())
                + f" (mean eq.-10 updates {fw['mean_bias_updates']:.0f}, capped {fw['bias_capped']}, {fw['seconds']:.1f} s)")
            say.unit()
        ex = _grow_fw(data.X_train, splits, s, reg, s.bias_lr_grid[0], exact=True)
        exact_runs.append(ex)
        say(f"  FW exact   lambda {reg:g}: " + ", ".join(f"{n}: {v['test']:.3f}" for n, v in ex["sizes"].items())
            + f" ({ex['seconds']:.1f} s)")
        say.unit()
    result: dict[str, Any] = {"experiment": "frankwolfe_digits", "settings": asdict(s),
                              "data": {k: int(len(v)) for k, v in splits.items()}, "hidden_units": list(s.hidden)}
    keys = ("fw_test_log_likelihood", "fw_valid_log_likelihood", "fw_reg", "fw_bias_lr", "fw_seconds",
            "fw_exact_test_log_likelihood", "fw_exact_valid_log_likelihood", "fw_exact_reg",
            "cd_test_log_likelihood", "cd_valid_log_likelihood", "cd_learning_rate", "cd_epoch")
    result |= {k: [] for k in keys}

    def best_at(runs, n):
        ok = [r for r in runs if n in r["sizes"] and math.isfinite(r["sizes"][n]["valid"])]
        return max(ok, key=lambda r: r["sizes"][n]["valid"]) if ok else None

    for n in s.hidden:
        fw, ex = best_at(fw_runs, n), best_at(exact_runs, n)
        cd = _cd_runs(data.X_train, splits, s, n, say)
        result["fw_test_log_likelihood"].append(fw["sizes"][n]["test"] if fw else math.nan)
        result["fw_valid_log_likelihood"].append(fw["sizes"][n]["valid"] if fw else math.nan)
        result["fw_reg"].append(fw["reg"] if fw else math.nan)
        result["fw_bias_lr"].append(fw["bias_lr"] if fw else math.nan)
        result["fw_seconds"].append(fw["sizes"][n]["seconds"] if fw else math.nan)
        result["fw_exact_test_log_likelihood"].append(ex["sizes"][n]["test"] if ex else math.nan)
        result["fw_exact_valid_log_likelihood"].append(ex["sizes"][n]["valid"] if ex else math.nan)
        result["fw_exact_reg"].append(ex["reg"] if ex else math.nan)
        result["cd_test_log_likelihood"].append(cd["test"])
        result["cd_valid_log_likelihood"].append(cd["valid"])
        result["cd_learning_rate"].append(cd["learning_rate"])
        result["cd_epoch"].append(cd["epoch"])
        say.unit()
    diff = [a - b for a, b in zip(result["fw_test_log_likelihood"], result["fw_exact_test_log_likelihood"])]
    result["fw_minus_exact"] = diff
    result["goal_met"] = bool(all(math.isfinite(d) and d >= -s.goal_nats for d in diff))
    result["fw_runs"] = [_plain(r) for r in fw_runs]
    result["fw_exact_runs"] = [_plain(r) for r in exact_runs]
    result["seconds"] = time.perf_counter() - t0
    return result


def _plain(run: dict) -> dict:
    return {k: v for k, v in run.items() if k != "sizes"} | {
        "sizes": {str(n): v for n, v in run["sizes"].items()}}


def format_table(result: dict) -> str:
    """The per-size table and the goal's verdict, as text."""
    rows = [("hidden units", [str(n) for n in result["hidden_units"]]),
            ("FW sampled, test (lambda, eta)", [f"{v:.3f} ({r:g}, {e:g})" for v, r, e in zip(
                result["fw_test_log_likelihood"], result["fw_reg"], result["fw_bias_lr"])]),
            ("FW exact expectations, test (lambda)", [f"{v:.3f} ({r:g})" for v, r in zip(
                result["fw_exact_test_log_likelihood"], result["fw_exact_reg"])]),
            ("CD-10, test (lr, epoch)", [f"{v:.3f} ({r:g}, {e})" for v, r, e in zip(
                result["cd_test_log_likelihood"], result["cd_learning_rate"], result["cd_epoch"])]),
            ("FW sampled - exact", [f"{d:+.3f}" for d in result["fw_minus_exact"]])]
    width = max(len(name) for name, _ in rows)
    lines = [f"{name:<{width}} | " + " | ".join(cells) for name, cells in rows]
    goal = result["settings"]["goal_nats"]
    lines.append(f"Goal (sampled FW within {goal:g} nats of exact-expectation FW at every size): "
                 + ("met" if result["goal_met"] else "NOT met"))
    return "\n".join(lines)
