"""The labs the app serves, in tab order.

Adding a fifth lab is one module (a subclass of :class:`boltzlab.dashboard.labs.base.Lab`) and one
line here; the app gives it a tab, its own path (``/<key>``), URL settings, presets,
checkpoints and presentation mode, and ``tests/dashboard/test_lab_contract.py`` checks it.
"""

from .bound import BoundLab
from .frankwolfe import FrankWolfeLab
from .fvbm import FVBMLab
from .tap import TAPLab

LABS = [FVBMLab, TAPLab, FrankWolfeLab, BoundLab]

__all__ = ["LABS"]
