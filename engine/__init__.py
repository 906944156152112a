"""Boltzmann Lab's numerical engine: models, trainers and kernels. No UI imports, ever."""

import os as _os

# numba's OpenMP threads (the parallel kernels' pool, boltzlab.engine.threads) sleep as soon
# as they wait instead of spinning: on this 2-core machine with the second core busy, a fork
# of two threads took 12 ms (median) with GNU OpenMP's default spinning and 17 us passive.
# But a sleeping thread is slow to wake where an idle core halts (a virtual machine's vCPU
# here: a fork of two threads took 44-55 us passive, 1.2 us spinning), so a thread spins
# ~50 us (GOMP_SPINCOUNT 1000, about what one wake-up costs) before it sleeps: the passes of
# a mini-batch fork back to back and find it awake (float32 PCD-1 epoch at Nh = 100 on two
# threads: 0.95-1.07x one thread passive, 1.38x with the short spin).  Set before any kernel
# runs (libgomp reads them when numba first loads it); a user's own settings win.
_os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
_os.environ.setdefault("GOMP_SPINCOUNT", "1000")

from .warmup import warm_up

__all__ = ["warm_up"]
