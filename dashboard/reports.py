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


# ------------------------------------------------------------------ TAP (§VII of Tramel et al.)

TAP_TITLE = "Tramel et al. (2018)"


def _tap_epochs(result: dict) -> dict[int, list[dict]]:
    by_model: dict[int, list[dict]] = {}
    for row in result["epochs"]:
        by_model.setdefault(row["n_hidden"], []).append(row)
    return dict(sorted(by_model.items()))


def _save_bokeh(layout, path: Path, title: str) -> None:
    from bokeh.io import save
    from bokeh.resources import INLINE

    save(layout, filename=str(path), resources=INLINE, title=title)


def _bokeh_figure(title: str, x_label: str, y_label: str, **kw):
    from bokeh.models import HoverTool
    from bokeh.plotting import figure

    p = figure(title=title, width=kw.pop("width", 640), height=kw.pop("height", 400), x_axis_label=x_label,
               y_axis_label=y_label, tools="pan,wheel_zoom,box_zoom,reset,save", **kw)
    p.add_tools(HoverTool(tooltips=[("x", "$x{0.00}"), ("y", "$y{0.0000}")]))
    return p


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def write_tap_figure3(result: dict, stem: Path) -> tuple[Path, Path]:
    """Fig. 3: the normalized (per-unit) TAP log-likelihood per epoch, one line per Nh."""
    plt = _pyplot()
    by_model = _tap_epochs(result)
    n_eval = result["settings"]["n_eval"]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for k, (h, rows) in enumerate(by_model.items()):
        xs = [r["epoch"] for r in rows]
        ys = [np.nan if r["tap_log_likelihood"] is None else r["tap_log_likelihood"] for r in rows]
        ax.plot(xs, ys, "-", marker=MARKERS[k % 7], ms=3, color=COLORS[k % 7], label=f"Nh = {h}")
    ax.set_xlabel("epoch")
    ax.set_ylabel("normalized TAP log-likelihood (per unit)")
    ax.set_title(f"Binary MNIST: TAP log-likelihood of {n_eval} training digits ({TAP_TITLE}, Fig. 3)", fontsize=9)
    ax.legend(loc="lower right")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    png = Path(f"{stem}.png")
    fig.savefig(png, dpi=110)
    plt.close(fig)

    p = _bokeh_figure(f"Normalized TAP log-likelihood of {n_eval} training digits (Fig. 3)", "epoch",
                      "TAP log-likelihood per unit")
    for k, (h, rows) in enumerate(by_model.items()):
        xs = [r["epoch"] for r in rows]
        ys = [np.nan if r["tap_log_likelihood"] is None else r["tap_log_likelihood"] for r in rows]
        p.line(xs, ys, color=COLORS[k % 7], line_width=2, legend_label=f"Nh = {h}")
        p.scatter(xs, ys, color=COLORS[k % 7], size=4)
    p.legend.location = "bottom_right"
    html = Path(f"{stem}.html")
    _save_bokeh(p, html, f"TAP log-likelihood per epoch ({TAP_TITLE}, Fig. 3)")
    return png, html


def write_tap_figure5(result: dict, stem: Path, n_hidden: int | None = None) -> tuple[Path, Path]:
    """Fig. 5 (top row): the TAP free energy of every distinct solution per epoch (dots),
    the Helmholtz estimate (their mean, line) and the number of solutions (right axis),
    for the largest model (or ``n_hidden``)."""
    plt = _pyplot()
    by_model = _tap_epochs(result)
    h = max(by_model) if n_hidden is None else n_hidden
    rows = by_model[h]
    F = result["free_energies"][str(h)]
    xs = [r["epoch"] for r in rows]
    dot_x = np.concatenate([np.full(len(f), e, dtype=float) for e, f in zip(xs, F)]) if F else np.zeros(0)
    dot_y = np.concatenate([np.asarray(f, dtype=float) for f in F]) if F else np.zeros(0)
    helm = [np.nan if r["helmholtz_free_energy"] is None else r["helmholtz_free_energy"] for r in rows]
    counts = [r["n_solutions"] for r in rows]
    n_eval = result["settings"]["n_eval"]

    fig, ax = plt.subplots(figsize=(8, 4.5))
    ax.plot(xs, helm, "-", color="#d62728", lw=1.5, label="Helmholtz estimate (mean)", zorder=2)
    ax.scatter(dot_x, dot_y, s=9, color="#1f77b4", alpha=0.4, label="TAP free energy of a solution", zorder=3)
    ax.set_xlabel("epoch")
    ax.set_ylabel("TAP free energy")
    right = ax.twinx()
    right.plot(xs, counts, "-", color="#2ca02c", lw=1.5, label="number of solutions")
    right.set_ylabel("number of distinct TAP solutions", color="#2ca02c")
    right.set_ylim(0, max(counts + [1]) * 1.1)
    from matplotlib.ticker import MaxNLocator

    right.yaxis.set_major_locator(MaxNLocator(integer=True))
    lines = ax.get_legend_handles_labels()
    more = right.get_legend_handles_labels()
    ax.legend(lines[0] + more[0], lines[1] + more[1], loc="best", fontsize=8)
    ax.set_title(f"Binary MNIST, Nh = {h}: TAP solutions from {n_eval} training digits ({TAP_TITLE}, Fig. 5a)",
                 fontsize=9)
    fig.tight_layout()
    png = Path(f"{stem}.png")
    fig.savefig(png, dpi=110)
    plt.close(fig)

    from bokeh.models import LinearAxis, Range1d

    p = _bokeh_figure(f"Nh = {h}: free energies of the TAP solutions per epoch (Fig. 5a)", "epoch", "TAP free energy")
    p.line(xs, helm, color="#d62728", line_width=2, legend_label="Helmholtz estimate")
    p.scatter(dot_x, dot_y, size=5, color="#1f77b4", alpha=0.4, legend_label="solution")
    p.extra_y_ranges = {"count": Range1d(0, max(counts + [1]) * 1.1)}
    p.add_layout(LinearAxis(y_range_name="count", axis_label="number of solutions"), "right")
    p.line(xs, counts, color="#2ca02c", line_width=2, y_range_name="count", legend_label="number of solutions")
    p.legend.location = "top_left"
    html = Path(f"{stem}.html")
    _save_bokeh(p, html, f"TAP free energies per epoch ({TAP_TITLE}, Fig. 5)")
    return png, html


def write_tap_figure8(result: dict, stem: Path) -> tuple[Path, Path]:
    """Fig. 8: denoising MCC against the flip probability p: TAP per Nh, OPE (dashed), 1-NN."""
    plt = _pyplot()
    curves = sorted(((int(k), v) for k, v in result["denoising_by_model"].items()))
    n_test = result["settings"]["n_test"]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for k, (h, c) in enumerate(curves):
        ax.plot(c["p"], c["mcc_tap"], "-", marker=MARKERS[k % 7], ms=4, color=COLORS[k % 7], label=f"TAP, Nh = {h}")
    if curves:
        c = curves[0][1]
        ax.plot(c["p"], c["mcc_ope"], "--", color="black", label="OPE")
        ax.plot(c["p"], c["mcc_1nn"], "-", color="black", label="1-NN")
    ax.set_xlabel("flip probability p")
    ax.set_ylabel("MCC")
    ax.set_title(f"Binary symmetric channel, {n_test} held-out digits ({TAP_TITLE}, Fig. 8)", fontsize=9)
    ax.legend(loc="lower left", fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    png = Path(f"{stem}.png")
    fig.savefig(png, dpi=110)
    plt.close(fig)

    p = _bokeh_figure(f"Denoising MCC on {n_test} held-out digits (Fig. 8)", "flip probability p", "MCC")
    for k, (h, c) in enumerate(curves):
        p.line(c["p"], c["mcc_tap"], color=COLORS[k % 7], line_width=2, legend_label=f"TAP, Nh = {h}")
        p.scatter(c["p"], c["mcc_tap"], color=COLORS[k % 7], size=5)
    if curves:
        c = curves[0][1]
        p.line(c["p"], c["mcc_ope"], color="black", line_dash="dashed", line_width=2, legend_label="OPE")
        p.line(c["p"], c["mcc_1nn"], color="black", line_width=2, legend_label="1-NN")
    p.legend.location = "bottom_left"
    html = Path(f"{stem}.html")
    _save_bokeh(p, html, f"Denoising MCC ({TAP_TITLE}, Fig. 8)")
    return png, html


def write_tap_figure4(result: dict, stem: Path, n_hidden: int | None = None) -> tuple[Path, Path] | None:
    """Fig. 4: the receptive fields (columns of W) of the largest model, ranked by spread
    (l_0.1 quasi-norm, most localized first) and by mean activation over the training
    digits (most active first).  Reads the model saved by the experiment; None if absent."""
    from ..engine.images import tile_images
    from ..engine.tap_analysis import rank_receptive_fields

    saved = {int(m["n_hidden"]): m.get("npz") for m in result["models"] if m.get("npz")}
    if not saved:
        return None
    h = max(saved) if n_hidden is None else n_hidden
    with np.load(saved[h], allow_pickle=False) as z:
        W, hidden_means = z["W"], z["hidden_means"]
    by_spread, _ = rank_receptive_fields(W, by="spread")
    by_activation, _ = rank_receptive_fields(W, hidden_means, by="activation")
    grids = [("ranked by spread (l_0.1 norm), most localized first", tile_images(W[:, by_spread])),
             ("ranked by mean activation, most active first", tile_images(W[:, by_activation]))]

    plt = _pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(11, 5.4), layout="constrained")
    cmap = plt.get_cmap("viridis").copy()
    cmap.set_bad("white")
    for ax, (title, grid) in zip(axes, grids):
        im = ax.imshow(np.ma.masked_invalid(grid), cmap=cmap, vmin=-1, vmax=1, interpolation="nearest")
        ax.set_title(title, fontsize=9)
        ax.axis("off")
    fig.colorbar(im, ax=axes, shrink=0.7, label="weight / max |weight| of its field")
    fig.suptitle(f"Binary MNIST, Nh = {h}: receptive fields, read row by row ({TAP_TITLE}, Fig. 4)", fontsize=10)
    png = Path(f"{stem}.png")
    fig.savefig(png, dpi=110)
    plt.close(fig)

    from bokeh.layouts import row
    from bokeh.models import LinearColorMapper
    from bokeh.palettes import Viridis256
    from bokeh.plotting import figure

    panels = []
    for title, grid in grids:
        gh, gw = grid.shape
        p = figure(title=title, width=440, height=int(440 * gh / gw) + 30, x_range=(0, gw), y_range=(gh, 0),
                   tools="pan,wheel_zoom,reset,save", match_aspect=True)
        mapper = LinearColorMapper(palette=Viridis256, low=-1, high=1, nan_color=(0, 0, 0, 0))
        p.image(image=[grid], x=0, y=0, dw=gw, dh=gh, color_mapper=mapper)
        p.axis.visible = False
        p.grid.visible = False
        panels.append(p)
    html = Path(f"{stem}.html")
    _save_bokeh(row(panels), html, f"Receptive fields, Nh = {h} ({TAP_TITLE}, Fig. 4)")
    return png, html


def write_tap_figures(result: dict, out_dir: Path) -> dict[str, dict[str, str]]:
    """Figs. 3, 4, 5 and 8 as PNG and HTML in ``out_dir``: {"figure3": {"png", "html"}, ...}."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = {}
    jobs = [("figure3", write_tap_figure3), ("figure5", write_tap_figure5), ("figure8", write_tap_figure8),
            ("figure4", write_tap_figure4)]
    for name, write in jobs:
        if name == "figure8" and not result["denoising_by_model"]:
            continue
        paths = write(result, out_dir / f"tap_{name}")
        if paths is not None:
            written[name] = {"png": str(paths[0]), "html": str(paths[1])}
    return written


# ------------------------------------------------------- Frank-Wolfe (Ping, Liu & Ihler 2016, §4)

FW_TITLE = "Ping, Liu & Ihler (2016)"
FW_COLORS = {"fw": "#1f77b4", "rand": "#d62728", "init": "#2ca02c", "selected": "#2ca02c", "pixels": "#555555"}


def _floats(values) -> np.ndarray:
    """A list that may hold None (JSON null) as a float array with NaN."""
    return np.array([np.nan if v is None else float(v) for v in values], dtype=float)


def _fw_subtitle(result: dict) -> str:
    s, fw, cd, d = result["settings"], result["frankwolfe"], result["cd"], result.get("data", {})
    return (f"{d.get('n_train', '?')} training digits; FW lambda = {fw['reg']:g}; CD-{cd['k']} {cd['epochs']} epochs, "
            f"best of {cd['seeds'] * len(cd['learning_rates'])} random inits by validation\n"
            f"AIS {s['ais_runs']} runs x {s.get('ais_betas', '?')} betas (bars: 3 s.e. of the AIS runs)")


def write_frankwolfe_figure1(result: dict, stem: Path) -> tuple[Path, Path]:
    """Fig. 1: average test log-likelihood against the number of hidden units: the FW path,
    CD from random initialisations (best by validation; every seed as a faint dot) and CD
    initialised by FW, with the size selected by the §4 rule; below, the train-validation
    gap per FW iteration that the rule watches."""
    fw, cd = result["frankwolfe"], result["cd"]
    xs_fw, ys_fw, sp_fw = np.asarray(fw["hidden_units"], float), _floats(fw["test_log_likelihood"]), _floats(fw["log_z_spread"])
    xs_cd = np.asarray(cd["hidden_units"], float)
    y_rand, sp_rand = _floats(cd["random_init_test_log_likelihood"]), _floats(cd["random_init_log_z_spread"])
    y_init, sp_init = _floats(cd["fw_init_test_log_likelihood"]), _floats(cd["fw_init_log_z_spread"])
    seed_x = np.concatenate([np.full(len(v), x) for x, v in zip(xs_cd, cd["random_init_seed_test_log_likelihood"])]) \
        if len(xs_cd) else np.zeros(0)
    seed_y = np.concatenate([_floats(v) for v in cd["random_init_seed_test_log_likelihood"]]) if len(xs_cd) else np.zeros(0)
    sel = fw.get("selected_hidden")
    gap_x, gap_y = np.asarray(fw.get("gap_hidden_units", []), float), _floats(fw.get("train_valid_gap", []))
    title = f"Binary MNIST: average test log-likelihood vs hidden units ({FW_TITLE}, Fig. 1a)"
    no_sel = (f"§4 stopping rule (gap +{fw['stop_increase']:g} nats over {fw['stop_window']} iterations) "
              f"did not fire by {fw['final_hidden']} units")

    plt = _pyplot()
    fig, (ax, gax) = plt.subplots(2, 1, figsize=(8, 7), sharex=True, gridspec_kw={"height_ratios": [3, 1]})
    ax.errorbar(xs_fw, ys_fw, yerr=sp_fw, fmt="-o", ms=3, lw=1.5, capsize=2, color=FW_COLORS["fw"], label="FW")
    ax.scatter(seed_x, seed_y, s=18, facecolors="none", edgecolors=FW_COLORS["rand"], alpha=0.6, zorder=3,
               label="CD (rand. init.), each seed")
    ax.errorbar(xs_cd, y_rand, yerr=sp_rand, fmt="-s", ms=6, lw=1.5, capsize=3, color=FW_COLORS["rand"],
                label="CD (rand. init.), best by validation")
    ax.errorbar(xs_cd, y_init, yerr=sp_init, fmt="-^", ms=7, lw=1.5, capsize=3, color=FW_COLORS["init"],
                label="CD (FW init.)")
    if sel is not None:
        for a in (ax, gax):
            a.axvline(sel, color=FW_COLORS["selected"], ls="--", lw=1.2)
        ax.plot([], [], "--", color=FW_COLORS["selected"], label=f"selected by the §4 rule: {sel} units")
    else:
        ax.text(0.98, 0.03, no_sel, transform=ax.transAxes, ha="right", va="bottom", fontsize=8, color="#444444")
    ax.set_ylabel("avg. test log-likelihood (nats per digit)")
    ax.set_title(title + "\n" + _fw_subtitle(result), fontsize=9)
    handles, labels = ax.get_legend_handles_labels()
    order = sorted(range(len(labels)), key=lambda i: (not labels[i].startswith("FW"), "each seed" in labels[i]))
    ax.legend([handles[i] for i in order], [labels[i] for i in order], loc="best", fontsize=8)
    ax.grid(alpha=0.3)
    gax.plot(gap_x, gap_y, "-", color=FW_COLORS["fw"], lw=1.2)
    gax.set_ylabel("FW train - valid\nLL gap (nats)", fontsize=8)
    gax.set_xlabel("number of hidden units")
    gax.grid(alpha=0.3)
    fig.tight_layout()
    png = Path(f"{stem}.png")
    fig.savefig(png, dpi=110)
    plt.close(fig)

    from bokeh.layouts import column
    from bokeh.models import Span, Whisker, ColumnDataSource

    p = _bokeh_figure(title, "number of hidden units", "avg. test log-likelihood (nats per digit)", width=760, height=460)
    for xs, ys, sp, color, label, marker in ((xs_fw, ys_fw, sp_fw, FW_COLORS["fw"], "FW", "circle"),
                                             (xs_cd, y_rand, sp_rand, FW_COLORS["rand"], "CD (rand. init.), best", "square"),
                                             (xs_cd, y_init, sp_init, FW_COLORS["init"], "CD (FW init.)", "triangle")):
        src = ColumnDataSource({"x": xs, "y": ys, "lo": ys - sp, "hi": ys + sp})
        p.line("x", "y", source=src, color=color, line_width=2, legend_label=label)
        p.scatter("x", "y", source=src, color=color, size=7 if marker != "circle" else 4, marker=marker,
                  legend_label=label)
        p.add_layout(Whisker(source=src, base="x", lower="lo", upper="hi", line_color=color))
    p.scatter(seed_x, seed_y, size=6, line_color=FW_COLORS["rand"], fill_color=None, legend_label="CD (rand. init.), each seed")
    if sel is not None:
        p.add_layout(Span(location=sel, dimension="height", line_color=FW_COLORS["selected"], line_dash="dashed",
                          line_width=2))
        p.title.text = title + f" -- selected by the §4 rule: {sel} units"
    else:
        p.title.text = title + " -- " + no_sel
    p.legend.location = "bottom_right"
    g = _bokeh_figure("FW: train - validation gap of mean log-likelihoods (the §4 stopping rule's quantity)",
                      "number of hidden units", "gap (nats)", width=760, height=220, x_range=p.x_range)
    g.line(gap_x, gap_y, color=FW_COLORS["fw"], line_width=2)
    if sel is not None:
        g.add_layout(Span(location=sel, dimension="height", line_color=FW_COLORS["selected"], line_dash="dashed"))
    html = Path(f"{stem}.html")
    _save_bokeh(column(p, g), html, f"Test log-likelihood vs hidden units ({FW_TITLE}, Fig. 1)")
    return png, html


def write_frankwolfe_figure2(result: dict, stem: Path) -> tuple[Path, Path]:
    """Fig. 2: test error of logistic regression on E[h|v] against the number of hidden units
    for FW, CD (random init.) and CD (FW init.); raw pixels as a horizontal line.  Bars: one
    binomial standard error."""
    cls = result["classification"]
    xs = np.asarray(cls["hidden_units"], float)
    n_test = max(int(cls.get("n_test") or 1), 1)
    series = [("FW", _floats(cls["frankwolfe"]) * 100, FW_COLORS["fw"], "o"),
              ("CD (rand. init.)", _floats(cls["cd_random_init"]) * 100, FW_COLORS["rand"], "s"),
              ("CD (FW init.)", _floats(cls["cd_fw_init"]) * 100, FW_COLORS["init"], "^")]
    pixels = 100 * (np.nan if cls.get("pixels") is None else float(cls["pixels"]))
    title = f"Binary MNIST: classification error with the hidden representations ({FW_TITLE}, Fig. 2a)"
    sub = (f"logistic regression on E[h|v]: {cls.get('n_train', '?')} training, {n_test} test digits "
           f"(bars: 1 binomial s.e.)")

    def se(y):
        p = np.clip(y / 100.0, 0.0, 1.0)
        return 100 * np.sqrt(p * (1 - p) / n_test)

    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    for k, (label, ys, color, marker) in enumerate(series):
        ax.errorbar(xs + (k - 1) * 0.008 * (xs.max() - xs.min() if len(xs) > 1 else 1), ys, yerr=se(ys), fmt="-" + marker,
                    ms=6, capsize=3, color=color, label=label)
    if np.isfinite(pixels):
        ax.axhline(pixels, color=FW_COLORS["pixels"], ls="--", lw=1.2, label=f"raw pixels ({pixels:.1f}%)")
    sel = cls.get("frankwolfe_selected")
    if sel and sel.get("error") is not None:
        ax.scatter([sel["hidden_units"]], [100 * sel["error"]], marker="*", s=120, color=FW_COLORS["fw"], zorder=4,
                   label=f"FW at the selected size ({sel['hidden_units']})")
    ax.set_xlabel("number of hidden units")
    ax.set_ylabel("test error (%)")
    ax.set_title(title + "\n" + sub, fontsize=9)
    handles, labels = ax.get_legend_handles_labels()
    rank = lambda label: (0 if label == "FW" else 1 if label.startswith("CD (rand") else 2 if label.startswith("CD (FW")
                          else 3 if label.startswith("FW at") else 4)  # noqa: E731
    order = sorted(range(len(labels)), key=lambda i: rank(labels[i]))
    ax.legend([handles[i] for i in order], [labels[i] for i in order], loc="upper right", fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    png = Path(f"{stem}.png")
    fig.savefig(png, dpi=110)
    plt.close(fig)

    from bokeh.models import ColumnDataSource, Span, Whisker

    p = _bokeh_figure(title, "number of hidden units", "test error (%)", width=720, height=440)
    for label, ys, color, marker in series:
        e = se(ys)
        src = ColumnDataSource({"x": xs, "y": ys, "lo": ys - e, "hi": ys + e})
        p.line("x", "y", source=src, color=color, line_width=2, legend_label=label)
        p.scatter("x", "y", source=src, color=color, size=7, marker={"o": "circle", "s": "square", "^": "triangle"}[marker],
                  legend_label=label)
        p.add_layout(Whisker(source=src, base="x", lower="lo", upper="hi", line_color=color))
    if np.isfinite(pixels):
        p.add_layout(Span(location=pixels, dimension="width", line_color=FW_COLORS["pixels"], line_dash="dashed",
                          line_width=2))
        p.line([], [], color=FW_COLORS["pixels"], line_dash="dashed", legend_label=f"raw pixels ({pixels:.1f}%)")
    p.legend.location = "top_right"
    html = Path(f"{stem}.html")
    _save_bokeh(p, html, f"Classification error vs hidden units ({FW_TITLE}, Fig. 2)")
    return png, html


def write_frankwolfe_figures(result: dict, out_dir: Path) -> dict[str, dict[str, str]]:
    """Figs. 1 and 2 of Ping, Liu & Ihler (2016) as PNG and HTML in ``out_dir``:
    {"figure1": {"png", "html"}, "figure2": {"png", "html"}}."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = {}
    for name, write in (("figure1", write_frankwolfe_figure1), ("figure2", write_frankwolfe_figure2)):
        png, html = write(result, out_dir / f"frankwolfe_{name}")
        written[name] = {"png": str(png), "html": str(html)}
    return written
