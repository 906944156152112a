"""TAP lab sessions headless, for issue 25's fair share: n local Runners (the ``--workers 0``
path: trainers in this process, each playing run on its share of the idle cores) play the
lab's MNIST defaults for a while; prints each session's epochs a minute.

    NUMBA_NUM_THREADS=1 python -m tests.load.threads_sessions 1 45
    NUMBA_NUM_THREADS=2 python -m tests.load.threads_sessions 2 45

Compare the counts in one sitting and say the machine's load (``uptime``) with them.
"""

import sys
import time

from boltzlab.dashboard import runner as R
from boltzlab.dashboard.labs.tap_setup import trainer_factory
from boltzlab.engine import threads


def main(n: int, seconds: float) -> list[float]:
    factories = [trainer_factory("mnist", n_hidden=100, seed=s) for s in range(n)]
    warm = R.Runner(factories[0])  # compile / load the kernels before timing
    warm.step_once()
    warm.wait_idle(600)
    warm.close()
    runners = [R.Runner(f) for f in factories]
    for r in runners:
        r.play()
    time.sleep(5)  # past the first calls
    before = [r.trainers["TAP"].iteration for r in runners]
    t0 = time.time()
    time.sleep(seconds)
    elapsed = time.time() - t0
    after = [r.trainers["TAP"].iteration for r in runners]
    per_epoch = runners[0].trainers["TAP"].batches_per_epoch
    for r in runners:
        r.close()
    rates = [(b - a) / per_epoch * 60 / elapsed for a, b in zip(before, after)]
    print(f"available threads {threads.available()}, {n} session(s), {elapsed:.0f} s: "
          f"{', '.join(f'{x:.2f}' for x in rates)} epochs a minute per session")
    return rates


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 1, float(sys.argv[2]) if len(sys.argv) > 2 else 45.0)
