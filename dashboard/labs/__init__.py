"""The labs the app serves, in tab order.

Adding a fifth lab is one module (a subclass of :class:`boltzlab.dashboard.labs.base.Lab`) and one
line here; the app gives it a tab, its own path (``/<key>``), URL settings, presets,
checkpoints and presentation mode, and ``tests/dashboard/test_lab_contract.py`` checks it.
"""

from boltzlab.dashboard.labs.bound import BoundLab
from boltzlab.dashboard.labs.frankwolfe import FrankWolfeLab
from boltzlab.dashboard.labs.fvbm import FVBMLab
from boltzlab.dashboard.labs.tap import TAPLab

LABS = [FVBMLab, TAPLab, FrankWolfeLab, BoundLab]

__all__ = ["LABS"]
