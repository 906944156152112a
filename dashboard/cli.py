"""The `boltzlab` command line: serve the app, fit models, reproduce papers, benchmark.

It lives in the dashboard package because `serve` starts the Panel app; the other commands
import only the engine (and matplotlib/Bokeh for report figures), lazily, so `boltzlab fit`
starts fast.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from pathlib import Path

from .budget import DEFAULT_ISOMAP_ROWS, DEFAULT_STEP_SECONDS
from .progress import TerminalProgress
from .serve_login import (  # noqa: F401 - check_basic_auth_file, LOGIN_ENV: part of the CLI's names
    LOGIN_ENV, _encrypt_oauth_tokens, _login_options, _login_pages_under, _serving_for_supervisor, _url_prefix,
    check_basic_auth_file)

EXIT_BAD_INPUT = 2
EXIT_NO_MPLE = 3
#: serve's --recycle-mb: a fresh server process takes over from an idle one that grew this much (MB)
RECYCLE_MB = 50.0


def _error(message: str, code: int = EXIT_BAD_INPUT) -> int:
    print(f"boltzlab: error: {message}", file=sys.stderr)
    return code


def _number(kind: type, minimum: float, inclusive: bool):
    """An argparse type: a finite ``kind`` (int or float) >= or > ``minimum``."""
    relation = ">=" if inclusive else ">"

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a {'whole number' if kind is int else 'number'}, got {text!r}") from None
        if not math.isfinite(value) or value < minimum or (value == minimum and not inclusive):
            raise argparse.ArgumentTypeError(f"must be a finite number {relation} {minimum:g}, got {text!r}")
        return value

    return parse


_positive_float = _number(float, 0, inclusive=False)
_nonnegative_float = _number(float, 0, inclusive=True)
_positive_int = _number(int, 1, inclusive=True)


# ------------------------------------------------------------------------ commands


def cmd_serve(args: argparse.Namespace) -> int:
    from .allow_list import allow_list_options

    try:
        auth = _login_options(args)
        auth.update(allow_list_options(args))
    except ValueError as exc:
        return _error(str(exc))
    key = auth.pop("oauth_encryption_key", None)
    if args.dask_scheduler is not None and args.num_procs != 1:
        # the forked processes would inherit a Dask client whose connection thread is gone
        return _error("--dask-scheduler needs --num-procs 1 (the cluster does the training; one server "
                      "process can drive many sessions).")
    if args.dask_scheduler is not None and args.workers is not None:
        return _error("--workers starts a local Dask cluster and --dask-scheduler uses an existing one: "
                      "give one of them.")
    if args.dask_scheduler is None and args.num_procs != 1 and args.workers != 0:
        return _error("--num-procs > 1 needs --workers 0 (by default the trainers run in worker processes "
                      "of a local Dask cluster; one server process can drive many sessions).")
    tls = [flag for flag, value in (("--dask-tls-ca-file", args.dask_tls_ca_file), ("--dask-tls-cert", args.dask_tls_cert),
                                    ("--dask-tls-key", args.dask_tls_key), ("--dask-insecure", args.dask_insecure))
           if value]
    if tls and args.dask_scheduler is None:
        return _error(f"{', '.join(tls)}: for an external cluster (--dask-scheduler); the local cluster "
                      "makes its own credentials.")
    if args.lessons is not None:  # a teacher's lessons, all checked now or the server never starts
        from .lessons import use_folder

        try:
            found = use_folder(args.lessons)
        except ValueError as exc:
            return _error(f"--lessons: {exc}")
        if not _serving_for_supervisor():
            print(f"boltzlab serve: {len(found)} lesson(s) of your own from {args.lessons}", file=sys.stderr)
    if args.prefix:
        auth["prefix"] = args.prefix
        _login_pages_under(args.prefix)
    if args.use_xheaders:
        auth["use_xheaders"] = True
    if key is not None:
        _encrypt_oauth_tokens(key)
    # the supervisor runs the server with the same command line: without one (arguments made
    # in Python), the server runs in this process
    recycle = args.recycle_mb > 0 and args.num_procs == 1 and getattr(args, "argv", None) is not None
    if not _serving_for_supervisor():
        # the options are good: say so before the imports of a few seconds (a start that talks)
        print(f"boltzlab serve: starting Boltzmann Lab {_version()}", file=sys.stderr, flush=True)
        if recycle:  # this process holds the port; the server runs in a child it can replace
            from .recycling import supervise

            secret = {"PANEL_COOKIE_SECRET": auth["cookie_secret"]} \
                if "cookie_secret" in auth and args.cookie_secret is None else {}  # a random one: shared
            return supervise(args.argv, args.port, args.address, env=secret)
    from .app import serve
    from .distributed import DaskUnavailable

    try:
        serve(
            port=args.port, address=args.address, num_procs=args.num_procs,
            allow_websocket_origin=args.allow_websocket_origin or None, show=args.show,
            max_training=args.max_training, dask_scheduler=args.dask_scheduler, workers=args.workers,
            max_step_seconds=args.max_step_seconds, max_isomap_rows=args.max_isomap_rows,
            dask_tls_ca_file=args.dask_tls_ca_file, dask_tls_cert=args.dask_tls_cert,
            dask_tls_key=args.dask_tls_key, dask_insecure=args.dask_insecure,
            recycle_mb=args.recycle_mb if recycle else None, **auth,
        )
    except DaskUnavailable as exc:
        return _error(str(exc))
    return 0


def cmd_warmup(args: argparse.Namespace) -> int:
    """Compile every kernel into numba's cache, in parallel processes (deploy scripts, images)."""
    import time

    from ..engine.warmup import GROUPS, cache_location, compile_kernels

    print(f"boltzlab warmup: compiling {len(GROUPS)} kernel groups into numba's cache ({cache_location()}); "
          "a first run takes a minute or two, a warm cache seconds", file=sys.stderr, flush=True)
    t0 = time.perf_counter()

    def done(group: str, seconds: float, k: int, n: int) -> None:
        print(f"boltzlab warmup: {k} of {n} done ({group}, {seconds:.1f} s)", file=sys.stderr, flush=True)

    compile_kernels(processes=args.processes, on_done=done)
    print(f"boltzlab warmup: all kernels ready in {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
    return 0


#: ``fit fvbm --se`` forms the q x q sandwich covariance, q = d + d(d-1)/2 (2,080 at d = 64).
MAX_SE_D = 64
#: ``fit fvbm``'s Newton polish stops at |gradient| / n <= this (engine.fvbm.newton_polish):
#: far below what moves a printed fourth decimal
NEWTON_GRADIENT = 1e-9
FVBM_LABELS = {"bslm": "BSLM", "ga": "GA", "bound": "bound MM + SQUAREM", "lbfgs": "L-BFGS"}


def cmd_fit_fvbm(args: argparse.Namespace) -> int:
    from ..engine.data import check_mple_exists, drop_columns, load_fvbm_csv
    from ..engine.fvbm import FVBMTrainer, log_pseudo_likelihood, newton_polish

    if args.mu is not None and args.algorithm in ("bound", "lbfgs"):
        return _error(f"--mu is the step of --algorithm ga and does not apply to --algorithm {args.algorithm}.")
    fixed_sweeps = args.tol == 0 and args.max_sweeps is not None
    max_sweeps = args.max_sweeps if args.max_sweeps is not None else 100_000
    try:
        data = load_fvbm_csv(args.data)
        if args.drop:
            data = drop_columns(data, args.drop)
    except ValueError as exc:
        return _error(str(exc))
    if args.se and data.d > MAX_SE_D:
        return _error(f"--se supports at most d = {MAX_SE_D} variables (its covariance matrix grows as d^4), "
                      f"but the data have d = {data.d}.")
    if data.dropped_rows:
        print(f"boltzlab: dropped {data.dropped_rows} of {data.dropped_rows + data.n} rows with missing "
              f"values; fitting the {data.n} complete rows.", file=sys.stderr)
    mple_exists = True
    try:
        check_mple_exists(data.X)
    except ValueError as exc:
        if args.se:
            return _error(f"{exc} Standard errors (--se) need an MPLE, so none can be given.", EXIT_NO_MPLE)
        if not fixed_sweeps:
            return _error(f"{exc} (To run a fixed number of sweeps anyway, give --tol 0 --max-sweeps N.)",
                          EXIT_NO_MPLE)
        mple_exists = False
        unit = "sweeps" if args.algorithm in ("bslm", "ga") else "iterations"
        print(f"boltzlab: warning: {exc} Running the {max_sweeps} requested {unit} anyway: the estimates "
              f"are not an MPLE and grow with the number of {unit}.", file=sys.stderr)
    common = dict(tol=args.tol, max_sweeps=max_sweeps, init=args.init, seed=args.seed)
    if args.algorithm in ("bslm", "ga"):
        mu = args.mu if args.mu is not None else 1.0
        trainer = FVBMTrainer(data.X, algorithm=args.algorithm, mu=mu, **common)
    else:
        from ..engine.fvbm_bound import BoundMPLETrainer, LBFGSMPLETrainer

        trainer = (BoundMPLETrainer(data.X, accelerate=True, **common) if args.algorithm == "bound"
                   else LBFGSMPLETrainer(data.X, **common))
    history = [rec["log_pl"] for rec in trainer.run()]
    b, M, log_pl = trainer.b, trainer.M, trainer.log_pl
    # the algorithm's own rule stops where the log-PL barely rises, up to 3e-3 from the MPLE;
    # Newton on the concave eq. 2.1 finishes there in a few steps (engine.fvbm.newton_polish)
    polish = {"method": "none", "steps": 0, "gradient": None}
    if args.polish == "newton" and mple_exists and not fixed_sweeps and trainer.status != "diverged":
        b, M, steps, gradient = newton_polish(data.X, trainer.b, trainer.M)
        log_pl = log_pseudo_likelihood(data.X, b, M)
        polish = {"method": "newton", "steps": steps, "gradient": gradient}
    result = {
        "b": b.tolist(),
        "M": M.tolist(),
        "log_pl": log_pl,
        "sweeps": trainer.sweep,
        "converged": trainer.status == "converged" or (polish["gradient"] or 1.0) <= NEWTON_GRADIENT,
        "status": trainer.status,
        "message": trainer.message,
        "monotone": trainer.first_decrease < 0,
        "history": history,
        "columns": data.columns,
        "n": data.n,
        "d": data.d,
        "dropped_rows": data.dropped_rows,
        "algorithm": args.algorithm,
        "mu": trainer.mu if args.algorithm in ("bslm", "ga") else None,
        "tol": args.tol,
        "max_sweeps": max_sweeps,
        "init": args.init,
        "seed": args.seed,
        "mple_exists": mple_exists,
        "polish": polish,
    }
    if trainer.status == "diverged":
        if args.json:
            print(json.dumps(_finite_json(result)))
        return _error(trainer.message, 4)
    tests = None
    if args.se:
        from ..engine.fvbm import wald_tests

        try:
            tests = wald_tests(data.X, b, M)
        except ValueError as exc:
            return _error(str(exc), EXIT_NO_MPLE)
        if not result["converged"]:
            print(f"boltzlab: warning: the fit stopped at --max-sweeps {max_sweeps} before converging, so the standard "
                  "errors are evaluated at an estimate that may not be the MPLE.", file=sys.stderr)
        for key, (vb, vM) in tests.items():
            result[key] = {"b": vb.tolist(), "M": [[None if j == k else float(vM[j, k]) for k in range(data.d)]
                                                  for j in range(data.d)]}
    if args.json:
        print(json.dumps(result))
        return 0
    print(f"FVBM fitted to {data.name}: n = {data.n}, d = {data.d}, {FVBM_LABELS[args.algorithm]}"
          + (f" (mu = {trainer.mu:g})" if args.algorithm == "ga" else ""))
    print(trainer.message)
    if polish["method"] == "newton":
        print(f"Newton polish (--polish newton): {polish['steps']} step(s) to |gradient| / n = "
              f"{polish['gradient']:.1e}, the MPLE to the precision printed below")
    elif mple_exists and not fixed_sweeps:
        print("No polish (--polish none): the estimates are where the stopping rule above held, which "
              "can differ from the MPLE in the third decimal")
    print(f"log-pseudo-likelihood (eq. 2.1): {log_pl:.6f}")
    width = max(len(c) for c in data.columns)
    print("b:")
    for name, value in zip(data.columns, b):
        print(f"  {name:>{width}} {value:+.4f}")
    print("M (upper triangle):")
    print(" " * (width + 2) + " ".join(f"{c:>8}" for c in data.columns))
    for j, name in enumerate(data.columns):
        cells = ["" if k <= j else f"{M[j, k]:+.4f}" for k in range(data.d)]
        print(f"  {name:>{width}} " + " ".join(f"{c:>8}" for c in cells))
    if tests is not None:
        print(_wald_table(data.columns, b, M, tests))
    return 0


def _wald_table(columns: list[str], b, M, tests: dict) -> str:
    """Estimates, sandwich standard errors, Wald z and two-sided p of every b_j and m_jk (j < k)."""
    rows = [(f"b[{name}]", b[j], *(tests[key][0][j] for key in ("se", "z", "p")))
            for j, name in enumerate(columns)]
    rows += [(f"m[{columns[j]},{columns[k]}]", M[j, k], *(tests[key][1][j, k] for key in ("se", "z", "p")))
             for j in range(len(columns)) for k in range(j + 1, len(columns))]
    width = max(len("parameter"), *(len(r[0]) for r in rows))
    lines = ["Wald tests (standard errors from the sandwich covariance H^-1 J H^-1; two-sided p from N(0, 1)):",
             f"  {'parameter':<{width}} {'estimate':>9} {'SE':>8} {'z':>8} {'p':>9}"]
    for name, estimate, se, z, p in rows:
        p_text = f"{p:.4f}" if p >= 1e-4 else f"{p:.1e}"
        lines.append(f"  {name:<{width}} {estimate:>+9.4f} {se:>8.4f} {z:>+8.2f} {p_text:>9}")
    return "\n".join(lines)


def _finite_json(result: dict) -> dict:
    def clean(v):
        if isinstance(v, float) and not math.isfinite(v):
            return None
        if isinstance(v, list):
            return [clean(x) for x in v]
        return v

    return {k: clean(v) for k, v in result.items()}


def cmd_reproduce_fvbm(args: argparse.Namespace) -> int:
    from ..engine.experiments import fvbm_simulation as experiment

    settings = experiment.Settings.quick() if args.quick else experiment.Settings()
    settings.variance = args.variance
    # the lines go to stderr, with a bar on a terminal (stdout keeps the table or the JSON)
    with TerminalProgress("reproduce fvbm") as log:
        log(f"Reproducing §5 of Nguyen & Wood (2016): d in {list(settings.dims)}, n = {settings.n}, "
            f"{settings.repetitions} runs each, tau = {settings.tol:g}, parameter variance {settings.variance:g}"
            + (" (quick)" if args.quick else ""))
        result = experiment.run(settings, progress=log)
    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    from .reports import write_fvbm_figure

    png, html = write_fvbm_figure(result, out / "fvbm_figure1")
    result["figure_png"], result["figure_html"] = str(png), str(html)
    if args.json:
        print(json.dumps(result if args.histories else {k: v for k, v in result.items() if k != "histories"}))
    else:
        print(experiment.format_table(result))
        print(f"Figure 1 (log-PL per sweep, log10 increase): {png} and {html}")
        for row in result["rows"]:
            if not row["mple_exists"]:
                print(f"d = {row['d']}: {row['mple_note']}")
    return 0


def _reproduce_with_figures(experiment, args: argparse.Namespace, overrides: dict, write_figures,
                            headline) -> int:
    """The shared body of `reproduce tap` and `reproduce frankwolfe`: validate the overrides,
    run with progress on stderr, write the figures (none when ``write_figures`` is None),
    print JSON or the headline and tables."""
    try:
        experiment.make_settings(args.quick, args.seed, **overrides)
    except ValueError as exc:
        return _error(str(exc))
    out = Path(args.output)
    with TerminalProgress(f"reproduce {args.family}") as log:
        result = experiment.run(args.quick, out, args.seed, progress=log,
                                **{k: v for k, v in overrides.items() if v is not None})
        if write_figures is not None:
            log("writing figures ...")
            result["figures"] = write_figures(result, out)
    if args.json:
        print(json.dumps(_json_safe(result)))
        return 0
    print(headline(result))
    print(experiment.format_table(result))
    print()
    for name, paths in result.get("figures", {}).items():
        print(f"{name}: {paths['png']} and {paths['html']}")
    return 0


def cmd_reproduce_tap(args: argparse.Namespace) -> int:
    from .reports import write_tap_figures
    from ..engine.experiments import tap_mnist as experiment

    overrides = {"hidden": args.hidden, "epochs": args.epochs, "n_test": args.n_test, "n_eval": args.n_eval,
                 "learning_rate": args.learning_rate, "ais_runs": args.ais_runs}

    def headline(result: dict) -> str:
        s = result["settings"]
        return (f"Tramel et al. (2018) §VII on binary MNIST: Nh in {s['hidden']}, {s['epochs']} epochs x "
                f"{s['updates_per_epoch']} updates, gamma = {s['learning_rate']:g}, M = K = {s['batch_size']}, "
                f"{s['n_eval']} evaluation digits, {s['n_test']} test digits" + (" (quick)" if s["quick"] else "")
                + f"; {result['seconds']:.0f} s")

    return _reproduce_with_figures(experiment, args, overrides, write_tap_figures, headline)


def cmd_reproduce_frankwolfe_digits(args: argparse.Namespace) -> int:
    """`reproduce frankwolfe --data digits`: exact log-likelihoods, a table (no figures)."""
    from ..engine.experiments import frankwolfe_digits as experiment

    overrides = {"hidden": args.hidden, "reg_grid": args.reg_grid, "bias_lr_grid": args.bias_lr_grid}
    return _reproduce_with_figures(
        experiment, args, overrides, None,
        lambda result: f"Ping, Liu & Ihler (2016) on the 8x8 digits, exact log-likelihoods"
                       f"{' (quick)' if args.quick else ''}; {result['seconds']:.0f} s")


def cmd_reproduce_frankwolfe(args: argparse.Namespace) -> int:
    from .reports import write_frankwolfe_figures
    from ..engine.experiments import frankwolfe_mnist as experiment

    if args.data == "digits":
        return cmd_reproduce_frankwolfe_digits(args)

    overrides = {"fw_max_hidden": args.max_hidden, "cd_hidden": args.cd_hidden, "cd_epochs": args.cd_epochs,
                 "cd_seeds": args.cd_seeds, "ais_runs": args.ais_runs, "n_train": args.n_train,
                 "n_test": args.n_test, "reg_grid": args.reg_grid, "bias_lr_grid": args.bias_lr_grid}
    if args.tiny:  # a smoke test of the whole pipeline in seconds (the CLI test uses it)
        overrides.update(fw_eval_every=3, reg_grid=(0.3,), bias_lr_grid=(0.05,), reg_select_hidden=3, fw_samples=50, bias_steps=3,
                         cd_batch_size=50, ais_schedule="live", n_valid=50, stop_window=2)
    return _reproduce_with_figures(
        experiment, args, overrides, write_frankwolfe_figures,
        lambda result: f"Ping, Liu & Ihler (2016) §4 on binary MNIST{' (quick)' if args.quick else ''}; "
                       f"{result['seconds']:.0f} s")


def cmd_reproduce_bound(args: argparse.Namespace) -> int:
    from ..engine.experiments import bound_tables as experiment

    try:
        with TerminalProgress("reproduce bound") as log:
            result = experiment.run(args.quick, problems=tuple(args.problems) if args.problems else None,
                                    max_seconds=args.max_seconds, progress=log)
    except ValueError as exc:
        return _error(str(exc))
    if args.json:
        print(json.dumps(_json_safe(result)))
        return 0
    print(f"Jebara & Choromanska (2012) Table 1{' (quick)' if args.quick else ''}: iterations and seconds to "
          f"within {result['settings']['eps']:g} of J* (absolute, summed J); {result['seconds']:.0f} s")
    print(experiment.format_table(result))
    return 0


def _json_safe(value):
    """Non-finite floats become null (JSON has no NaN)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


def cmd_bench_fvbm(args: argparse.Namespace) -> int:
    from ..engine.experiments import bench_fvbm

    with TerminalProgress(f"bench {args.family}", quiet_lines=True) as bar:  # a bar on a terminal, else silent
        result = bench_fvbm.run(min_seconds=args.seconds, threads=args.threads, progress=bar)
    if args.json:
        print(json.dumps(result))
        return 0
    print(f"BSLM sweeps at n = {result['n']}, d = {result['d']} (same data, same updates, same run):")
    print(f"  numba engine : {result['numba_sweeps_per_second']:8.1f} sweeps/s  ({result['numba_ms_per_sweep']:.2f} ms per sweep)")
    print(f"  plain NumPy  : {result['numpy_sweeps_per_second']:8.1f} sweeps/s  ({result['numpy_ms_per_sweep']:.2f} ms per sweep)")
    print(f"  ratio        : {result['ratio']:.1f}x")
    print(f"  numba on the {result['distinct_rows']} distinct rows with counts (the engine's default here): "
          f"{result['numba_distinct_rows_sweeps_per_second']:.0f} sweeps/s")
    print(f"  goal         : <= {result['goal_ms_per_sweep']:.0f} ms per sweep: {'met' if result['meets_goal'] else 'NOT met'}")
    for row in result["thread_rows"][1:]:
        print(f"  {row['threads']} threads    : {row['numba_sweeps_per_second']:8.1f} sweeps/s ({row['speedup']:.2f}x 1 thread), "
              f"batched {row['numba_batched_sweeps_per_second']:.1f} sweeps/s ({row['batched_speedup']:.2f}x), same run")
    return 0


def cmd_bench_rbm(args: argparse.Namespace) -> int:
    from ..engine.experiments import bench_rbm

    with TerminalProgress(f"bench {args.family}", quiet_lines=True) as bar:
        result = bench_rbm.run(hidden=tuple(args.hidden), repeats=args.repeats, ais_runs=args.ais_runs,
                               ais_schedule=args.ais_schedule, threads=args.threads, progress=bar)
    if args.json:
        print(json.dumps(result))
        return 0
    print("PCD-1 epoch on binarised MNIST (train split), batch 100, every column measured in the same run:")
    print(bench_rbm.format_table(result))
    for row in result["rows"]:
        if "ais_seconds" not in row:
            continue
        print(f"  Nh = {row['n_hidden']:>4}: AIS ({row['ais_runs']} runs, {row['ais_schedule']} schedule) {row['ais_seconds']:.1f} s "
              f"= {row['ais_seconds_per_run']:.3f} s per run, log Z = {row['ais_log_z']:.2f} ± {row['ais_spread']:.2f}")
    return 0


def cmd_bench_tap(args: argparse.Namespace) -> int:
    from ..engine.experiments import bench_tap

    threads = None if args.threads == 0 else args.threads
    with TerminalProgress(f"bench {args.family}", quiet_lines=True) as bar:
        result = bench_tap.run(hidden=tuple(args.hidden), K=args.chains, n_sweeps=args.sweeps,
                               repeats=args.repeats, threads=threads, progress=bar)
    if args.json:
        print(json.dumps(_json_safe(result)))
        return 0
    print(f"TAP sweeps (Algorithm 1, hidden + visible half-step) on MNIST-sized binary RBMs, same run, "
          f"threads: {'library default' if threads is None else ', '.join(str(r) for r in sorted({1, threads}))}:")
    for row in result["rows"]:
        print(f"  K = {row['K']}, Nv = {row['n_visible']}, Nh = {row['n_hidden']:>4}, threads {row['threads']}: "
              f"engine {row['engine_sweeps_per_s']:7.1f} sweeps/s, NumPy/BLAS {row['numpy_sweeps_per_s']:7.1f} sweeps/s, "
              f"ratio {row['ratio']:.2f}x; engine at {100 * row['fraction_of_matmul']:.0f}% of the products' "
              f"matmul rate ({row['engine_gflops']:.1f} of {row['matmul_gflops']:.1f} GFLOPS); "
              f"to tol 1e-8: {row['converge_seconds']:.2f} s, median {row['converge_sweeps_median']:.0f} sweeps")
        print(f"  {'':>24}float32: engine {row['engine_float32_sweeps_per_s']:7.1f} sweeps/s, NumPy/BLAS float32 "
              f"{row['numpy_float32_sweeps_per_s']:7.1f} sweeps/s; {row['float32_speedup']:.2f}x the float64 engine, "
              f"{row['float32_vs_numpy_float64']:.2f}x the float64 NumPy; at {100 * row['float32_fraction_of_sgemm']:.0f}% "
              f"of SGEMM ({row['engine_float32_gflops']:.1f} of {row['sgemm_gflops']:.1f} GFLOPS: BLAS's threads "
              f"{row['blas_sgemm_gflops']:.1f}, chain blocks {row['blocked_sgemm_gflops']:.1f}); "
              f"to tol 1e-8: {row['converge_float32_seconds']:.2f} s")
        if row["threads"] not in (None, 1):
            print(f"  {'':>24}{row['threads']} threads vs 1, same run: float32 {row['speedup_float32']:.2f}x, "
                  f"float64 {row['speedup_float64']:.2f}x, SGEMM floor {row['sgemm_speedup']:.2f}x")
    return 0


def cmd_bench_frankwolfe(args: argparse.Namespace) -> int:
    from ..engine.experiments import bench_frankwolfe

    with TerminalProgress(f"bench {args.family}", quiet_lines=True) as bar:  # the line too: on a terminal only
        bar(f"timing CD-{args.cd_k} epochs and Frank-Wolfe insertions at Nh = {', '.join(map(str, args.hidden))} "
            "on the bundled MNIST (Nv = 784) ...")
        result = bench_frankwolfe.run(hidden=tuple(args.hidden), insertions=args.insertions, repeats=args.repeats,
                                      cd_k=args.cd_k, samples=args.samples, reg=args.reg, bias_lr=args.bias_lr,
                                      cd_epochs=args.cd_epochs, threads=args.threads, progress=bar)
    if args.json:
        print(json.dumps(_json_safe(result)))
        return 0
    print(f"Seconds per Frank-Wolfe insertion (S = {args.samples} samples, eq. 9 by L-BFGS, eq. 10 to convergence; "
          f"'fixed10': S = 500 and 10 eq.-10 steps, the old schedule) against "
          f"seconds per CD-{args.cd_k} epoch (batch {result['rows'][0]['batch_size']}) at the same size, "
          f"binarised MNIST, same run ({result['total_seconds']:.0f} s):")
    print(bench_frankwolfe.format_table(result))
    worst = max(r["ratio_fw_run_to_cd_run"] for r in result["rows"])
    print(f"The paper (§4): FW costs at most about 2x CD for the same number of hidden units. "
          f"Here growing to n units costs at most {worst:.2f}x {result['cd_epochs']} CD epochs at n.")
    for row in result.get("thread_rows", []):
        print(f"  {row['threads']} threads, Nh = {row['n_hidden']}: CD epoch {row['cd_seconds_per_epoch']:.3f} s "
              f"({row['speedup_cd']:.2f}x 1 thread), FW insertion {row['fw_seconds_per_insertion']:.3f} s "
              f"({row['speedup_insertion']:.2f}x), same run")
    return 0


def cmd_bench_bound(args: argparse.Namespace) -> int:
    from ..engine.experiments import bench_bound

    with TerminalProgress(f"bench {args.family}", quiet_lines=True) as bar:
        result = bench_bound.run(n_bits=args.bits, repeats=args.repeats, progress=bar)
    if args.json:
        print(json.dumps(_json_safe(result)))
        return 0
    print("ComputeBound (Algorithm 1 of Jebara & Choromanska 2012) on a fully visible Boltzmann machine's "
          "Omega, numba engine vs plain NumPy, same run:")
    print(bench_bound.format_table(result))
    return 0


# ------------------------------------------------------------------------- parser


def _version() -> str:
    """The installed package's version (its metadata), for ``boltzlab --version``."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("boltzlab")
    except PackageNotFoundError:  # a checkout run without pip install
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="boltzlab",
        description="Boltzmann Lab: watch Boltzmann machines learn, live in the browser "
        "(serve), or headless from the command line (fit, reproduce, bench).",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    serve = sub.add_parser("serve", help="serve the browser app (default http://localhost:5006)",
                           description="Serve the Boltzmann Lab app with the Panel/Bokeh server.")
    serve.add_argument("--port", type=int, default=5006, help="port to listen on (default 5006)")
    serve.add_argument("--address", default=None, help="address to listen on (default: all interfaces' localhost)")
    serve.add_argument("--num-procs", type=int, default=1, help="number of worker processes (default 1)")
    serve.add_argument("--allow-websocket-origin", action="append", metavar="HOST[:PORT]",
                       help="a host allowed to open the websocket, e.g. lab.example.org (repeatable); "
                            "needed when the app is reached under another name than localhost")
    serve.add_argument("--show", action="store_true", help="open the app in a browser")
    serve.add_argument("--basic-auth", metavar="FILE", default=None,
                       help="require a login: FILE is a JSON object of user -> password; unauthenticated "
                            "requests are sent to /login and get no app and no data")
    serve.add_argument("--max-training", type=_positive_int, default=None, metavar="N",
                       help="at most N runs train at once per server process; a further Play gets a "
                            "'server busy' message (default: no cap)")
    serve.add_argument("--max-step-seconds", type=_positive_float, default=DEFAULT_STEP_SECONDS, metavar="S",
                       help="the work budget of every session: settings (from the controls, presets, links or "
                            "checkpoints) whose step is estimated to take more than S seconds on one core are "
                            f"refused with a message saying what would fit (default {DEFAULT_STEP_SECONDS:g}; "
                            "the labs' defaults and presets need at most ~0.8 s, a CD fork of 100 MNIST units "
                            "1.6 s)")
    serve.add_argument("--max-isomap-rows", type=_number(int, 2, inclusive=True), default=DEFAULT_ISOMAP_ROWS,
                       metavar="N", help="the TAP lab maps at most N solutions per snapshot in its Isomap views, "
                                         f"evenly spaced (default {DEFAULT_ISOMAP_ROWS})")
    serve.add_argument("--cookie-secret", default=None,
                       help="secret that signs the login cookie (or PANEL_COOKIE_SECRET in the environment; "
                            "default with a login: a random one per start)")
    serve.add_argument("--prefix", type=_url_prefix, default=None, metavar="PATH",
                       help="serve everything under this URL path, e.g. /lab for a reverse proxy's "
                            "https://host/lab/ (default: at /)")
    serve.add_argument("--use-xheaders", action="store_true",
                       help="behind a reverse proxy: take the client's address and scheme from the proxy's "
                            "X-Real-Ip/X-Forwarded-For and X-Scheme/X-Forwarded-Proto headers (only when "
                            "every request comes through that proxy)")
    serve.add_argument("--oauth-provider", metavar="NAME", default=None,
                       help="require a login through an OAuth provider, one of Panel's: auth0, azure, azurev2, "
                            "bitbucket, generic, github, gitlab, google, okta, password, auth_code, pam")
    serve.add_argument("--oauth-key", metavar="ID", default=None,
                       help="with --oauth-provider: this server's client id at the provider (or PANEL_OAUTH_KEY)")
    serve.add_argument("--oauth-secret", metavar="SECRET", default=None,
                       help="with --oauth-provider: this server's client secret at the provider (or "
                            "PANEL_OAUTH_SECRET in the environment, which keeps it out of the process list)")
    serve.add_argument("--oauth-extra-params", metavar="JSON", default=None,
                       help="with --oauth-provider: a JSON object of the provider's extra settings, e.g. "
                            "'{\"tenant\": \"my-org\"}' for azure")
    serve.add_argument("--oauth-redirect-uri", metavar="URL", default=None,
                       help="with --oauth-provider: the address the provider sends users back to, as "
                            "registered there (default: the request's scheme and host and the prefix, e.g. "
                            "https://lab.example.org/lab; see --use-xheaders)")
    serve.add_argument("--oauth-encryption-key", metavar="KEY", default=None,
                       help="with --oauth-provider: a Fernet key (or PANEL_OAUTH_ENCRYPTION) that encrypts the "
                            "provider's tokens in the users' cookies")
    serve.add_argument("--admin", action="store_true",
                       help="add Panel's admin page at /admin (every session, the server's logs); refused "
                            "without a login (--basic-auth or --oauth-provider)")
    from .allow_list import add_arguments as add_allow_list_arguments

    add_allow_list_arguments(serve)
    serve.add_argument("--dask-scheduler", metavar="ADDRESS", default=None,
                       help="where trainers run: as actors on the Dask cluster of this scheduler, e.g. "
                            "tls://10.0.0.5:8786, reached with the --dask-tls-* files or Dask's TLS "
                            "configuration (default: a local cluster closed to other processes, see --workers)")
    serve.add_argument("--dask-tls-ca-file", metavar="FILE", default=None,
                       help="with --dask-scheduler: the CA certificate (PEM) that signed the cluster's certificates")
    serve.add_argument("--dask-tls-cert", metavar="FILE", default=None,
                       help="with --dask-scheduler: this server's client certificate (PEM), signed by that CA")
    serve.add_argument("--dask-tls-key", metavar="FILE", default=None,
                       help="with --dask-scheduler: the private key (PEM) of --dask-tls-cert")
    serve.add_argument("--dask-insecure", action="store_true",
                       help="with --dask-scheduler: accept a plain tcp:// scheduler (anyone who can reach it can "
                            "run code in its workers; a warning is logged)")
    serve.add_argument("--workers", type=_number(int, 0, inclusive=True), default=None, metavar="N",
                       help="run the trainers and the analyses in N worker processes of a local Dask cluster "
                            "that serve starts and stops (default: one per CPU it may use, cgroup limits "
                            "included); 0: in threads of the server process (development, tests)")
    serve.add_argument("--recycle-mb", type=_number(float, 0, inclusive=True), default=RECYCLE_MB, metavar="MB",
                       help="when nobody has used the server for a few seconds and its memory is more than MB "
                            "above what it was at its start, a fresh server process takes over on the same port "
                            f"(default {RECYCLE_MB:g}; 0: never; only with --num-procs 1)")
    serve.add_argument("--lessons", metavar="DIR", default=None,
                       help="add the lesson files (*.yaml) in DIR to the built-in lessons (docs/teaching.md); a bad "
                            "file stops the start, naming its line")
    serve.set_defaults(func=cmd_serve)

    warmup = sub.add_parser(
        "warmup", help="compile every numerical kernel ahead of the first serve (deploy scripts, images)",
        description="Compile every numba kernel into numba's on-disk cache, in parallel processes, so that "
                    "the first `boltzlab serve` (and every worker) loads them in seconds.  Set NUMBA_CACHE_DIR "
                    "to the same folder for warmup and serve if the package's own folder is not writable.")
    warmup.add_argument("--processes", type=_positive_int, default=None, metavar="N",
                        help="compile in N processes (default: one per CPU it may use)")
    warmup.set_defaults(func=cmd_warmup)
    fit = sub.add_parser("fit", help="fit a model to a data file")
    fit_sub = fit.add_subparsers(dest="family", metavar="FAMILY", required=True)
    fvbm = fit_sub.add_parser(
        "fvbm", help="fully visible Boltzmann machine by maximum pseudo-likelihood (BSLM, GA, bound, L-BFGS)",
        description="Fit an FVBM (Nguyen & Wood 2016) to a CSV of binary observations: rows are "
        "observations, columns variables, values -1/1, 0/1 or Yes/No, a header row allowed. Rows with "
        "missing values are dropped (counted on stderr). Data for which the maximum pseudo-likelihood "
        "estimate does not exist are reported (exit 3) instead of iterated, unless --tol 0 --max-sweeps N "
        "asks for N sweeps (run with a warning on stderr).",
    )
    fvbm.add_argument("data", help="CSV file of binary observations")
    fvbm.add_argument("--algorithm", choices=["bslm", "ga", "bound", "lbfgs"], default="bslm",
                      help="bslm: block successive lower-bound maximization (eqs. 2.4, 2.7; default); "
                           "ga: coordinate gradient ascent with step --mu (eqs. 4.1, 4.2); "
                           "bound: the monotone quadratic-bound MM of Jebara & Choromanska with SQUAREM "
                           "(fastest to the MPLE; a sweep is one SQUAREM cycle); "
                           "lbfgs: L-BFGS on the log-PL, a reference without a monotonicity guarantee")
    fvbm.add_argument("--mu", type=_positive_float, default=None,
                      help="GA step (mu <= 1 is monotone; default 1); only for --algorithm ga")
    fvbm.add_argument("--tol", type=_nonnegative_float, default=1e-5,
                      help="stop when the log-PL increases by less than this (default 1e-5); "
                           "0 runs exactly --max-sweeps sweeps")
    fvbm.add_argument("--max-sweeps", type=_positive_int, default=None,
                      help="at most this many sweeps (iterations for bound and lbfgs; default 100000); with "
                           "--tol 0, data without an MPLE are fitted anyway for exactly this many, with a "
                           "warning on stderr")
    fvbm.add_argument("--se", action="store_true",
                      help="add standard errors from the sandwich covariance, Wald z and two-sided p-values "
                           "of every b_j and m_jk (with --json: keys se, z, p shaped like b and M)")
    fvbm.add_argument("--polish", choices=["newton", "none"], default="newton",
                      help="after the algorithm's stopping rule, finish at the MPLE with Newton steps on the "
                           "concave log-PL (default; a few steps): the rule alone (--tol) stops where the "
                           "log-PL barely rises, which can be 3e-3 from the MPLE; none: report the "
                           "algorithm's own last iterate")
    fvbm.add_argument("--drop", action="append", default=[], metavar="COLUMN",
                      help="leave out this column (repeatable); the lab's Senate data set is "
                           "assets/senate_knn1_imputed.csv with --drop Govt, as in the BoltzMM analysis")
    fvbm.add_argument("--init", choices=["zeros", "random"], default="zeros",
                      help="start at b = 0, M = 0 (default) or draw b, M ~ N(0, 0.5) as in §5")
    fvbm.add_argument("--seed", type=int, default=0, help="seed of --init random (default 0)")
    fvbm.add_argument("--json", action="store_true",
                      help="print one JSON object: b, M, log_pl, sweeps, converged, history, ...")
    fvbm.set_defaults(func=cmd_fit_fvbm)

    reproduce = sub.add_parser("reproduce", help="run a paper's experiment headless")
    rep_sub = reproduce.add_subparsers(dest="family", metavar="FAMILY", required=True)
    rep_fvbm = rep_sub.add_parser(
        "fvbm", help="§5 of Nguyen & Wood (2016): BSLM on simulated FVBMs, d = 5, 10, 15, 20",
        description="Simulate n = 16,000 draws from FVBMs with d = 5, 10, 15, 20 (parameters N(0, 0.5)), "
        "run BSLM 5 times from random starts to tau = 1e-5, and print per d the average MSE next to the "
        "paper's, sweeps, time and monotonicity; write the Figure-1 plot as PNG and HTML.",
    )
    rep_fvbm.add_argument("--quick", action="store_true", help="n = 4000, 2 runs, tau = 1e-3: well under a minute")
    rep_fvbm.add_argument("--variance", type=_positive_float, default=0.5,
                          help="variance of the true b0 and M0 (default 0.5, the paper's); smaller values "
                               "give weaker couplings, for which the MPLE exists at every d")
    rep_fvbm.add_argument("--json", action="store_true", help="print the results as one JSON object")
    rep_fvbm.add_argument("--histories", action="store_true", help="with --json, include every log-PL history")
    rep_fvbm.add_argument("--output", default="reproduce-output", help="folder for the figures (default reproduce-output)")
    rep_fvbm.set_defaults(func=cmd_reproduce_fvbm)
    rep_tap = rep_sub.add_parser(
        "tap", help="§VII of Tramel et al. (2018): TAP-trained RBMs on binary MNIST, Figs. 3, 4, 5, 8",
        description="Train binary RBMs with Nh = 25, 50, 100 by TAP (Algorithm 2) on the bundled binary MNIST "
        "(3,500 digits), print per epoch the normalized TAP log-likelihood and the number of TAP solutions, "
        "the denoising MCC of TAP, OPE and 1-NN on 1,000 held-out digits, the AIS log-likelihood of each model, "
        "and each qualitative claim of §VII with whether this run shows it; write Figs. 3, 4, 5 and 8 as PNG and "
        "HTML. The full run takes about half an hour on 2 cores; progress goes to stderr.",
    )
    rep_tap.add_argument("--quick", action="store_true",
                         help="Nh = 25 only, 10 epochs, 300 evaluation and 200 test digits, short AIS: under a minute (a smoke test)")
    rep_tap.add_argument("--json", action="store_true", help="print the results as one JSON object")
    rep_tap.add_argument("--output", default="reproduce-output",
                         help="folder for the figures and trained models (default reproduce-output)")
    rep_tap.add_argument("--seed", type=_number(int, 0, inclusive=True), default=0, help="seed of training, noise and AIS (default 0)")
    rep_tap.add_argument("--hidden", type=_positive_int, nargs="+", default=None,
                         help="override the numbers of hidden units (default 25 50 100; quick 25)")
    rep_tap.add_argument("--epochs", type=_positive_int, default=None, help="override the epochs (default 30; quick 10)")
    rep_tap.add_argument("--n-test", type=_positive_int, default=None,
                         help="override the held-out digits for denoising and AIS (default 1000; quick 200)")
    rep_tap.add_argument("--n-eval", type=_positive_int, default=None,
                         help="override the training digits for the per-epoch TAP evaluation (default 1000; quick 300)")
    rep_tap.add_argument("--learning-rate", type=_positive_float, default=None, help="override gamma (default 0.05)")
    rep_tap.add_argument("--ais-runs", type=_positive_int, default=None, help="override the AIS runs (default 100)")
    rep_tap.set_defaults(func=cmd_reproduce_tap)
    rep_fw = rep_sub.add_parser(
        "frankwolfe", help="§4 of Ping, Liu & Ihler (2016): Frank-Wolfe vs CD-10 on binary MNIST, Figs. 1 and 2",
        description="On the bundled binary MNIST, grow an RBM by Frank-Wolfe (lambda chosen on validation) to "
        "500 hidden units, train CD-10 from random starts (best of 3 seeds) and from the Frank-Wolfe model at "
        "50, 100, 200, 400 units, estimate every test log-likelihood by AIS, classify with logistic regression "
        "on E[h|v], time both, and print each claim of §4 with whether this run supports it; write Figs. 1 and 2 "
        "as PNG and HTML. About 20-30 minutes on 2 cores; progress goes to stderr.")
    rep_fw.add_argument("--quick", action="store_true",
                        help="FW to 100 units, CD at 50 and 100 for 10 epochs, 2 seeds, short AIS: under 2 minutes")
    rep_fw.add_argument("--json", action="store_true", help="print the results as one JSON object")
    rep_fw.add_argument("--output", default="reproduce-output",
                        help="folder for the figures and trained models (default reproduce-output)")
    rep_fw.add_argument("--seed", type=_number(int, 0, inclusive=True), default=0, help="seed of everything (default 0)")
    rep_fw.add_argument("--max-hidden", type=_positive_int, default=None, help="override T (default 500; quick 100)")
    rep_fw.add_argument("--cd-hidden", type=_positive_int, nargs="+", default=None,
                        help="override the CD sizes (default 50 100 200 400; quick 50 100)")
    rep_fw.add_argument("--cd-epochs", type=_positive_int, default=None, help="override the CD epochs (default 30; quick 10)")
    rep_fw.add_argument("--cd-seeds", type=_positive_int, default=None, help="override the random CD starts (default 3)")
    rep_fw.add_argument("--ais-runs", type=_positive_int, default=None, help="override the AIS runs (default 100)")
    rep_fw.add_argument("--n-train", type=_positive_int, default=None, help="use only this many training digits")
    rep_fw.add_argument("--n-test", type=_positive_int, default=None, help="use only this many test digits")
    rep_fw.add_argument("--data", choices=["mnist", "digits"], default="mnist",
                        help="mnist (default): the run above, AIS; digits: the 8x8 digits at 5, 10, 15, 20 units with "
                        "exact log-likelihoods -- FW sampled, FW with exact expectations and CD-10 (about 15 minutes)")
    rep_fw.add_argument("--hidden", type=_positive_int, nargs="+", default=None,
                        help="with --data digits: override the sizes (default 5 10 15 20; quick 5 10; at most 20)")
    rep_fw.add_argument("--reg-grid", type=_positive_float, nargs="+", default=None,
                        help="lambda grid, chosen on validation (default the paper's 1 0.5 0.1 0.05 0.01; quick 0.1 0.05)")
    rep_fw.add_argument("--bias-lr-grid", type=_positive_float, nargs="+", default=None,
                        help="eta grid of eq. 10, chosen with lambda (digits: the paper's 0.05 0.02 0.01 0.005; "
                        "mnist: 0.5, outside the grid: a converged eq. 10 ends at the same biases, 8x sooner)")
    rep_fw.add_argument("--tiny", action="store_true", help=argparse.SUPPRESS)
    rep_fw.set_defaults(func=cmd_reproduce_frankwolfe)
    rep_bd = rep_sub.add_parser(
        "bound", help="Table 1 of Jebara & Choromanska (2012): bound majorization vs L-BFGS, CG, SD, Newton",
        description="Race bound majorization (Algorithm 2) against L-BFGS, conjugate gradient, steepest descent and "
        "Newton from theta = 0 on wine, breast cancer, digits (multinomial logistic regression), a chain CRF and "
        "an exact FVBM likelihood; print iterations and seconds to within 1e-4 of the optimum, and the paper's "
        "claim per problem with whether this run supports it. Table 2 is not implemented yet.")
    rep_bd.add_argument("--quick", action="store_true", help="wine and breast cancer only, 5 s per method")
    rep_bd.add_argument("--problems", nargs="+", default=None,
                        help="any of wine breast_cancer digits chain fvbm (default all; quick: wine breast_cancer)")
    rep_bd.add_argument("--max-seconds", type=_positive_float, default=30.0,
                        help="compute budget per method and problem (default 30)")
    rep_bd.add_argument("--json", action="store_true", help="print the results as one JSON object")
    rep_bd.set_defaults(func=cmd_reproduce_bound)

    bench = sub.add_parser("bench", help="measure speed as ratios against a reference in the same run")
    bench_sub = bench.add_subparsers(dest="family", metavar="FAMILY", required=True)
    bench_fvbm = bench_sub.add_parser(
        "fvbm", help="BSLM sweeps per second at n = 16,000, d = 20: numba engine vs plain NumPy",
        description="Time BSLM sweeps at n = 16,000, d = 20 with the numba engine and with a plain-NumPy "
        "implementation of the same updates, in the same run, and print their ratio.",
    )
    bench_fvbm.add_argument("--json", action="store_true", help="print the results as one JSON object")
    bench_fvbm.add_argument("--seconds", type=_positive_float, default=3.0, help="time to spend on each (default 3)")
    bench_fvbm.add_argument("--threads", type=_positive_int, default=1,
                            help="also time the engine on N threads, beside 1, in the same run (default 1)")
    bench_fvbm.set_defaults(func=cmd_bench_fvbm)
    bench_rbm = bench_sub.add_parser(
        "rbm", help="seconds per PCD-1 epoch on binarised MNIST: engine vs scikit-learn, float32 and float64; AIS time",
        description="Time one PCD-1 epoch (batch 100) on the bundled binarised MNIST training split with this "
        "engine (float32 and float64) and with scikit-learn's BernoulliRBM fed float32 and float64 (same settings, "
        "same run), each engine time against the SGEMM/DGEMM floor of its products, and one AIS estimate of log Z.",
    )
    bench_rbm.add_argument("--hidden", type=_positive_int, nargs="+", default=[100, 500],
                           help="numbers of hidden units (default 100 500)")
    bench_rbm.add_argument("--repeats", type=_positive_int, default=3, help="best of this many epochs (default 3)")
    bench_rbm.add_argument("--ais-runs", type=_positive_int, default=100, help="AIS runs (default 100)")
    bench_rbm.add_argument("--ais-schedule", choices=["default", "live"], default="default",
                           help="default: 14,500 betas (Frank-Wolfe paper); live: the cheap schedule of the app")
    bench_rbm.add_argument("--threads", type=_positive_int, default=1,
                           help="also time everything on N threads, beside 1, in the same run (default 1)")
    bench_rbm.add_argument("--json", action="store_true", help="print the results as one JSON object")
    bench_rbm.set_defaults(func=cmd_bench_rbm)
    bench_tap = bench_sub.add_parser(
        "tap", help="TAP sweeps per second (K chains, Nv = 784), float32 and float64: engine vs plain NumPy/BLAS, same run",
        description="Time Algorithm 1 of the TAP paper (K chains at once) on briefly trained MNIST RBMs, "
                    "the numba engine against a plain NumPy/BLAS implementation in the same run, and "
                    "report the fraction of the machine's measured matrix-multiply rate the engine reaches.")
    bench_tap.add_argument("--hidden", type=_positive_int, nargs="+", default=[100, 500],
                           help="hidden-layer sizes (default 100 500)")
    bench_tap.add_argument("--chains", type=_positive_int, default=100, help="K, chains at once (default 100)")
    bench_tap.add_argument("--sweeps", type=_positive_int, default=40, help="sweeps per timing (default 40)")
    bench_tap.add_argument("--repeats", type=_positive_int, default=7, help="best of this many timings (default 7)")
    bench_tap.add_argument("--threads", type=int, default=1,
                           help="also measure on N threads, beside 1, in the same run: the engine's numba threads, "
                                "BLAS threads for NumPy and the GEMM floor (default 1; 0 keeps the libraries' defaults)")
    bench_tap.add_argument("--json", action="store_true", help="print the results as one JSON object")
    bench_tap.set_defaults(func=cmd_bench_tap)
    bench_fw = bench_sub.add_parser(
        "frankwolfe", help="seconds per Frank-Wolfe insertion vs seconds per CD-10 epoch at Nv = 784, same run",
        description="On the bundled binarised MNIST (Nv = 784), time CD-k epochs and Frank-Wolfe insertions "
                    "(Ping, Liu & Ihler 2016) into an RBM of the same size, in the same run; print their ratio "
                    "and the estimated cost of growing an RBM to n units against CD-EPOCHS CD epochs at n.")
    bench_fw.add_argument("--hidden", type=_positive_int, nargs="+", default=[100, 300, 500],
                          help="hidden-layer sizes (default 100 300 500)")
    bench_fw.add_argument("--insertions", type=_positive_int, default=3, help="timed insertions per size (default 3)")
    bench_fw.add_argument("--repeats", type=_positive_int, default=2, help="best of this many CD epochs (default 2)")
    bench_fw.add_argument("--cd-k", type=_positive_int, default=10, help="Gibbs steps of CD (default 10, the paper's)")
    bench_fw.add_argument("--samples", type=_positive_int, default=2000, help="S, model samples per insertion (default 2000)")
    bench_fw.add_argument("--reg", type=_positive_float, default=0.1, help="lambda (default 0.1)")
    bench_fw.add_argument("--bias-lr", type=_positive_float, default=0.5, help="eta of eq. 10 (default 0.5, the lab's)")
    bench_fw.add_argument("--cd-epochs", type=_positive_int, default=200,
                          help="length of the CD run the FW growth is compared with (default 200, the paper's)")
    bench_fw.add_argument("--threads", type=_positive_int, default=1,
                          help="also run everything on N threads after 1, in the same process (default 1)")
    bench_fw.add_argument("--json", action="store_true", help="print the results as one JSON object")
    bench_fw.set_defaults(func=cmd_bench_frankwolfe)
    bench_bd = bench_sub.add_parser(
        "bound", help="ComputeBound on |Omega| = 2^16, d = 136 (a d = 16 FVBM): numba vs plain NumPy, same run",
        description="Time Algorithm 1 (ComputeBound) over Omega = {-1,1}^BITS with the FVBM's BITS + BITS(BITS-1)/2 "
                    "features: the numba engine, a vectorised NumPy version and the row-by-row algorithm as "
                    "printed, in the same run, with their ratios and the largest difference of Sigma.")
    bench_bd.add_argument("--bits", type=_positive_int, default=16, help="spins of the FVBM (default 16: |Omega| = 65,536)")
    bench_bd.add_argument("--repeats", type=_positive_int, default=3, help="best of this many timings (default 3)")
    bench_bd.add_argument("--json", action="store_true", help="print the results as one JSON object")
    bench_bd.set_defaults(func=cmd_bench_bound)
    return parser


#: options whose value is a secret: a Fernet key or a random secret is URL-safe base64, and 1
#: in 64 begins with "-", which argparse takes for an option ("expected one argument")
SECRET_OPTIONS = ("--cookie-secret", "--oauth-key", "--oauth-secret", "--oauth-encryption-key")


def _secrets_joined(argv: list[str]) -> list[str]:
    """``argv`` with each secret option and its value as one ``--option=value`` word (never a
    value that is itself an option's name: a missing value is still an error)."""
    out: list[str] = []
    words = iter(argv)
    for word in words:
        if word in SECRET_OPTIONS:
            value = next(words, None)
            if value is None or re.fullmatch(r"--[a-z][a-z0-9-]*", value):
                out.append(word)
                word = value
                if word is None:
                    continue
            else:
                word = f"{word}={value}"
        out.append(word)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(words := _secrets_joined(sys.argv[1:] if argv is None else list(argv)))
    args.argv = words  # serve's supervisor runs the server with them
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
