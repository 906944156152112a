"""Static report figures for `boltzlab reproduce`: PNG (matplotlib) and HTML (Bokeh)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

MARKERS = ["o", "s", "^", "D", "v", "P", "X"]
COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#17becf"]


def _increase_log10(curve: list[float]) -> tuple[np.ndarray, np.ndarray]:
    inc = np.diff(np.asarray(curve))
    sweeps = np.arange(1, len(curve))
    keep = inc > 0
    return sweeps[keep], np.log10(inc[keep])


def write_fvbm_figure(result: dict, stem: Path) -> tuple[Path, Path]:
    """Figure 1 of Nguyen & Wood: log-PL per sweep (left axis, solid) and log10 of its
    increase (right axis, dashed), one panel per d, one marker per repetition."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    histories = result["histories"]
    dims = list(histories)
    fig, axes = plt.subplots(2, (len(dims) + 1) // 2, figsize=(12, 8), squeeze=False)
    for ax, d in zip(axes.ravel(), dims):
        right = ax.twinx()
        for r, curve in enumerate(histories[d]):
            sweeps = np.arange(len(curve))
            every = list(np.unique(np.geomspace(1, max(1, len(curve) - 1), 12).astype(int)))  # even on symlog
            ax.plot(sweeps, curve, "-", color=COLORS[r % 7], marker=MARKERS[r % 7], markevery=every, ms=4,
                    label=f"run {r + 1}")
            xs, ys = _increase_log10(curve)
            right.plot(xs, ys, "--", color=COLORS[r % 7], lw=0.8, alpha=0.8)
        ax.set_xscale("symlog", linthresh=10)
        ax.set_title(f"d = {d}, n = {result['settings']['n']}")
        ax.set_xlabel("sweep (symlog scale)")
        ax.set_ylabel("log-pseudo-likelihood (eq. 2.1), solid")
        right.set_ylabel("log10 increase per sweep, dashed")
        ax.legend(loc="lower right", fontsize=8)
    for ax in axes.ravel()[len(dims):]:
        ax.set_visible(False)
    fig.suptitle("BSLM log-pseudo-likelihood sequences (Nguyen & Wood 2016, Figure 1)")
    fig.tight_layout()
    png = Path(f"{stem}.png")
    fig.savefig(png, dpi=110)
    plt.close(fig)

    html = Path(f"{stem}.html")
    _write_html(result, html)
    return png, html


def _write_html(result: dict, path: Path) -> None:
    from bokeh.io import save
    from bokeh.layouts import gridplot
    from bokeh.models import HoverTool, LinearAxis, Range1d
    from bokeh.plotting import figure
    from bokeh.resources import INLINE

    panels = []
    for d, curves in result["histories"].items():
        p = figure(title=f"d = {d}: log-PL per sweep (solid), log10 increase (dashed, right axis)",
                   width=560, height=360, x_axis_label="sweep", y_axis_label="log-pseudo-likelihood (eq. 2.1)",
                   tools="pan,wheel_zoom,box_zoom,reset,save")
        lows, highs = [], []
        for r, curve in enumerate(curves):
            xs, ys = _increase_log10(curve)
            if len(ys):
                lows.append(ys.min())
                highs.append(ys.max())
        p.extra_y_ranges = {"inc": Range1d(min(lows, default=-6) - 0.5, max(highs, default=0) + 0.5)}
        p.add_layout(LinearAxis(y_range_name="inc", axis_label="log10 increase"), "right")
        for r, curve in enumerate(curves):
            color = COLORS[r % 7]
            p.line(np.arange(len(curve)), curve, color=color, legend_label=f"run {r + 1}", line_width=2)
            xs, ys = _increase_log10(curve)
            p.line(xs, ys, color=color, line_dash="dashed", y_range_name="inc")
        p.add_tools(HoverTool(tooltips=[("sweep", "$x{0}"), ("value", "$y{0.000}")]))
        p.legend.location = "bottom_right"
        panels.append(p)
    save(gridplot(panels, ncols=2), filename=str(path), resources=INLINE,
         title="BSLM log-pseudo-likelihood sequences (Nguyen & Wood 2016, Figure 1)")
