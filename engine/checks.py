"""The argument checks every engine module shares: one sentence per refusal, naming the
parameter, its owner and what was given ("The 'seed' parameter of RBMTrainer must be an int
>= 0. Got -1."), and the seeds derived for numba's generators."""

from __future__ import annotations

import math
from typing import Any

import numpy as np


def check_int(name: str, value: Any, owner: str, minimum: int) -> int:
    """``value`` as an int >= ``minimum`` (bools refused), else a ValueError."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"The '{name}' parameter of {owner} must be an int >= {minimum}. Got {value!r}.")
    return int(value)


def check_float(name: str, value: Any, owner: str, low: float, high: float = math.inf,
                low_open: bool = False, high_open: bool = True) -> float:
    """``value`` as a finite float in the interval from ``low`` to ``high`` (open or closed
    ends as asked), else a ValueError."""
    ok = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)
    if ok:
        value = float(value)
        ok = math.isfinite(value) and (value > low if low_open else value >= low)
        ok = ok and (value < high if high_open else value <= high)
    if not ok:
        lo = f"> {low:g}" if low_open else f">= {low:g}"
        hi = "" if high == math.inf else (f" and < {high:g}" if high_open else f" and <= {high:g}")
        raise ValueError(f"The '{name}' parameter of {owner} must be a float {lo}{hi}. Got {value!r}.")
    return value


def check_choice(name: str, value: Any, owner: str, allowed: tuple[str, ...]) -> str:
    """``value`` if it is one of ``allowed``, else a ValueError listing them."""
    if value not in allowed:
        raise ValueError(f"The '{name}' parameter of {owner} must be one of {', '.join(map(repr, allowed))}. Got {value!r}.")
    return value


def check_seed(owner: str, seed: Any) -> int:
    """A seed: an int >= 0."""
    return check_int("seed", seed, owner, minimum=0)


def derived_seed(*words: int) -> int:
    """A 31-bit seed for numba's generator derived from a tuple of ints (SeedSequence)."""
    return int(np.random.SeedSequence([int(w) for w in words]).generate_state(1, np.uint32)[0] >> 1)
