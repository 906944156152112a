"""Reusable plot components for the labs."""

from dashboard.views.heatmap import Heatmap
from dashboard.views.live_curve import LiveCurve
from dashboard.views.status import StatusBadge

__all__ = ["Heatmap", "LiveCurve", "StatusBadge"]
