"""Boltzmann Lab's numerical engine: models, trainers and kernels. No UI imports, ever."""

from boltzlab.engine.warmup import warm_up

__all__ = ["warm_up"]
