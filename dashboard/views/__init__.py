"""Reusable plot components for the labs."""

from boltzlab.dashboard.views.heatmap import Heatmap
from boltzlab.dashboard.views.live_curve import LiveCurve
from boltzlab.dashboard.views.status import StatusBadge

__all__ = ["Heatmap", "LiveCurve", "StatusBadge"]
