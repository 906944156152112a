"""Boltzmann Lab's numerical engine: models, trainers and kernels. No UI imports, ever."""

import os as _os

# numba's OpenMP threads (the parallel kernels' pool, boltzlab.engine.threads) sleep as soon
# as they wait instead of spinning: on this 2-core machine with the second core busy, a fork
# of two threads took 12 ms (median) with GNU OpenMP's default spinning and 17 us passive.
# Set before any kernel runs (libgomp reads it when numba first loads it); a user's own
# OMP_WAIT_POLICY wins.
_os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from boltzlab.engine.warmup import warm_up

__all__ = ["warm_up"]
