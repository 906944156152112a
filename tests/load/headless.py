"""The engine's rate with no server and no browser: the load test's reference.

``python -m tests.load.headless --lab TAP --seconds 60`` builds the lab with its default
settings (as a new session would), takes the trainers its runner would drive, and steps them
in this thread for the given time, as fast as possible.  It prints steps per second and the
lab's own progress (epochs for TAP, sweeps for FVBM, ...) per minute, to hold against the
``steps`` a load-test session reached.  Dask's worker processes limit BLAS to one thread;
``OPENBLAS_NUM_THREADS=1`` gives the comparable figure.
"""

from __future__ import annotations

import argparse
import json
import time

#: the Record scalar that says how far a lab's run got (as the load test reads it)
PROGRESS = {"FVBM": "sweep", "TAP": "epoch", "Frank-Wolfe": "n_hidden", "Bound": "iteration"}


def measure(title: str, seconds: float) -> dict:
    from boltzlab import engine
    from boltzlab.dashboard.labs import LABS

    engine.warm_up()
    lab = {cls.title: cls for cls in LABS}[title]()
    try:
        trainers = dict(lab.runner.trainers)
        steps, progress = 0, {}
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            active = {n: t for n, t in trainers.items() if not getattr(t, "done", False)}
            if not active:
                break
            for name, trainer in active.items():
                record = trainer.step()
                progress[name] = record.scalars.get(PROGRESS[title], progress.get(name))
            steps += 1
        elapsed = time.perf_counter() - t0
    finally:
        lab.close()
    return {"lab": title, "seconds": round(elapsed, 1), "rounds": steps,
            "rounds_per_second": round(steps / elapsed, 2),
            "progress": progress, "progress_key": PROGRESS[title],
            "progress_per_minute": {n: round(60 * float(p) / elapsed, 2) for n, p in progress.items()
                                    if p is not None}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.load.headless", description=__doc__.splitlines()[0])
    parser.add_argument("--lab", choices=list(PROGRESS), default="TAP")
    parser.add_argument("--seconds", type=float, default=60.0)
    args = parser.parse_args(argv)
    print(json.dumps(measure(args.lab, args.seconds), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
