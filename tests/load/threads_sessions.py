"""TAP lab sessions headless, for issue 25's fair share: n local Runners (the ``--workers 0``
path: trainers in this process, each playing run on its share of the idle cores) play the
lab's MNIST defaults from their first batch until each has trained the same ``batches``;
prints each session's time for them and its epochs a minute over them.

    NUMBA_NUM_THREADS=1 python -m tests.load.threads_sessions 1 600
    NUMBA_NUM_THREADS=2 python -m tests.load.threads_sessions 1 600
    NUMBA_NUM_THREADS=2 python -m tests.load.threads_sessions 2 600

Why the same batches and not a fixed window: Algorithm 1 needs more sweeps the further the
model has trained (on these defaults ~650 sweeps per call over the first 900 calls, ~2,900
a few hundred batches later), so a faster run reaches dearer batches sooner and a fixed
window undercounts its speed.  A seed trains the same model on any thread count (1 and 2
threads gave the same bits for the first ~750 calls of Algorithm 1 and agree to rounding
after: blocks of chains, see engine/kernels/tap.py), so both time the same work.
Compare the counts in one sitting and say the machine's load (``uptime``) with them.
"""

import sys
import time

from boltzlab.dashboard import runner as R
from boltzlab.dashboard.labs.tap_setup import trainer_factory
from boltzlab.engine import threads

POLL_SECONDS = 0.05


def main(n: int, batches: int) -> list[float]:
    factories = [trainer_factory("mnist", n_hidden=100, seed=s) for s in range(n)]
    warm = R.Runner(factories[0])  # compile / load the kernels before timing
    warm.step_once()
    warm.wait_idle(600)
    warm.close()
    runners = [R.Runner(f) for f in factories]
    t0 = time.perf_counter()
    for r in runners:
        r.play()
    took: dict[int, float] = {}
    while len(took) < n:
        time.sleep(POLL_SECONDS)
        for i, r in enumerate(runners):
            if i not in took and r.trainers["TAP"].iteration >= batches:
                took[i] = time.perf_counter() - t0
                r.pause()
    per_epoch = runners[0].trainers["TAP"].batches_per_epoch
    for r in runners:
        r.close()
    rates = [batches / per_epoch * 60 / took[i] for i in range(n)]
    print(f"available threads {threads.available()}, {n} session(s), the first {batches} batches: "
          f"{', '.join(f'{took[i]:.1f} s' for i in range(n))}; "
          f"{', '.join(f'{x:.2f}' for x in rates)} epochs a minute per session")
    return rates


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 1, int(sys.argv[2]) if len(sys.argv) > 2 else 600)
