"""Reusable plot components for the labs."""

from .heatmap import Heatmap
from .live_curve import LiveCurve
from .status import StatusBadge

__all__ = ["Heatmap", "LiveCurve", "StatusBadge"]
