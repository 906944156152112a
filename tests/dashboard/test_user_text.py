"""User text stays text (issue 46 item 1): file names, CSV headers and values, URL values and
checkpoint contents that carry HTML reach the page escaped in every upload lab (TAP,
Frank-Wolfe, FVBM): no text pane of the lab's page renders a raw ``<img`` or ``<script``,
and the data panel shows the (escaped) file name.  The browser's side, that no script runs
and the text reads as typed, is tests/browser/test_browser_user_text.py."""

from __future__ import annotations

import html

import numpy as np
import panel as pn
import pytest

from boltzlab.dashboard.labs import FrankWolfeLab, FVBMLab, TAPLab
from boltzlab.dashboard.labtools import Checkpoint, write_checkpoint
from tests.dashboard.test_image_upload_labs import SMALL, WIDTH, csv_bytes, npz_bytes, pictures

IMG = "<img src=x onerror=alert(1)>"
SCRIPT = "<script>alert(1)</script>"
#: a file name: no "/" (a name is its last path component, as a browser sends it)
FILE = f"{IMG}<script>alert(1)"
RAW = ("<img", "<script")


def rendered(pane) -> str:
    """The HTML a text pane has the browser render (Panel escapes it once more for the model)."""
    return html.unescape(pane._transform_object(pane.object)["object"])


def text_panes(lab) -> list:
    """Every pane of the lab's page that renders text as HTML (Markdown, HTML, Alert, LiveHTML,
    status badges, the presentation caption), hidden ones too: they may show later."""
    page = lab.panel()
    panes = page.select(lambda o: isinstance(o, (pn.pane.HTML, pn.pane.Markdown)))
    assert lab.data_info in panes and lab.tools.message.pane in panes and lab.tools.changed in panes
    return panes


def assert_no_raw_html(lab, when: str) -> None:
    for pane in text_panes(lab):
        text = rendered(pane)
        assert not any(raw in text for raw in RAW), f"{when}: {pane.name!r} renders {text[:300]!r}"


def csv_with_header(X: np.ndarray, first: str) -> bytes:
    """Images as CSV rows under a header row whose first cell is ``first``."""
    lines = csv_bytes(X).decode().splitlines()
    lines[0] = ",".join([first, *lines[0].split(",")[1:]])
    return ("\n".join(lines) + "\n").encode()


def load_hostile_checkpoints(lab) -> None:
    """Checkpoints whose file name, settings (a value, a name) and data name carry HTML: each
    refused, its reason said (escaped); the data name, quoted when the data differ."""
    saved = lab.tools.checkpoint()
    hostile = [
        {**saved.settings, "seed": IMG},  # a value the setting does not allow, quoted
        {**saved.settings, SCRIPT: "1"},  # a setting the lab has not, named
    ]
    for settings in hostile:
        content = write_checkpoint(Checkpoint(lab.key, settings, saved.states, saved.history, saved.data))
        assert not lab.tools.load_bytes(content, filename=f"{FILE}.npz")
        assert FILE in lab.tools.message.text and (IMG in lab.tools.message.text or SCRIPT in lab.tools.message.text)
        assert_no_raw_html(lab, "a checkpoint with HTML in its settings")
    other_data = ("0" * 64, f"{FILE}.npz")
    content = write_checkpoint(Checkpoint(lab.key, saved.settings, saved.states, saved.history, other_data))
    assert not lab.tools.load_bytes(content, filename=f"{IMG}.npz")
    assert f"other data ({FILE}.npz" in lab.tools.message.text
    assert html.escape(f"{FILE}.npz") in rendered(lab.tools.message.pane)
    assert_no_raw_html(lab, "a checkpoint with HTML in its data name")


@pytest.mark.parametrize("cls", [TAPLab, FrankWolfeLab], ids=["tap", "frankwolfe"])
@pytest.mark.parametrize("kind", ["npz", "csv"])
def test_image_labs_show_file_names_headers_links_and_checkpoints_as_text(cls, kind, make_lab):
    lab = make_lab(cls, data="digits")
    name = f"{FILE}.{kind}"
    # a bad file first: its name is quoted in the refusal
    lab.use_upload(npz_bytes(X=np.full((30, 4, 4), 7.0)), name)
    assert lab.jobs.wait(120)
    assert lab.uploads.message.level == "error" and name in lab.uploads.message.text
    assert_no_raw_html(lab, "a refused upload")

    if kind == "npz":
        lab.use_upload(npz_bytes(images=pictures()), name)
        settings = dict(SMALL[cls])
    else:
        lab.use_upload(csv_with_header(pictures(), IMG), name)
        settings = dict(SMALL[cls], image_width=WIDTH)
    assert lab.jobs.wait(120)
    lab.apply_settings({"data": "upload", **settings})
    assert lab.data_identity()[1] == name
    assert_no_raw_html(lab, "an upload")
    info = rendered(lab.data_info)
    assert f"<b>{html.escape(name)}</b> (your upload, SHA-256" in info  # shown, bold, as typed

    key = lab.key
    lab.tools.apply_query({f"{key}.data": IMG, f"{key}.seed": SCRIPT, f"{key}.{IMG}": "1"})
    assert "Some settings in the link were ignored" in lab.tools.message.text and IMG in lab.tools.message.text
    assert_no_raw_html(lab, "a link with HTML in its values")

    load_hostile_checkpoints(lab)
    assert f"<b>{html.escape(name)}</b>" in rendered(lab.data_info)  # the upload's run stays


def test_fvbm_shows_file_names_headers_values_links_and_checkpoints_as_text(make_lab):
    lab = make_lab(FVBMLab)
    lab.widgets["source"].value = "upload"
    name = f"{FILE}.csv"
    # a bad value, quoted with its column's name in the refusal
    lab.use_upload(f"a,{IMG}\n1,-1\n-1,{SCRIPT}\n".encode(), name)
    assert lab.jobs.wait(120)
    assert lab.data_msg.level == "error" and IMG in lab.data_msg.text and SCRIPT in lab.data_msg.text
    assert_no_raw_html(lab, "a refused CSV")

    rng = np.random.default_rng(0)
    X = rng.choice([-1, 1], size=(200, 3))
    header = f"{IMG},{SCRIPT},q"
    lab.use_upload((header + "\n" + "\n".join(",".join(map(str, row)) for row in X) + "\n").encode(), name)
    assert lab.jobs.wait(120)
    assert lab.data.data.name == name and lab.heat_est.labels == [IMG, SCRIPT, "q"]  # Bokeh draws them as text
    assert_no_raw_html(lab, "a CSV upload")
    info = rendered(lab.data_info)
    assert f"<b>{html.escape(name)}</b>: n = 200 rows, d = 3 variables" in info

    lab.tools.apply_query({"fvbm.race_mus": IMG, "fvbm.mode": "Race", "fvbm.d": SCRIPT, f"fvbm.{IMG}": "1"})
    assert IMG in lab.tools.message.text or IMG in lab.settings_msg.text
    assert_no_raw_html(lab, "a link with HTML in its values")
    lab.apply_settings({"mode": "Single run", "race_mus": "0.5, 2.5"})

    saved = lab.tools.checkpoint()
    for settings in ({**saved.settings, "init_seed": IMG}, {**saved.settings, SCRIPT: "1"}):
        content = write_checkpoint(Checkpoint(lab.key, settings, saved.states, saved.history, saved.data))
        assert not lab.tools.load_bytes(content, filename=f"{FILE}.npz")
        assert_no_raw_html(lab, "a checkpoint with HTML in its settings")
    assert f"<b>{html.escape(name)}</b>" in rendered(lab.data_info)


def test_presentation_captions_escape_run_names():
    """The "what changed" caption interpolates run names: escaped, in the generic sentence
    and in a lab's own (FVBM's)."""
    from boltzlab.dashboard.labs.base import _generic_change

    text = _generic_change(IMG, {"loss": 1.0}, {"loss": 0.5})
    assert "<img" not in text and f"<b>{html.escape(IMG)}</b>" in text
    lab = FVBMLab()
    try:
        text = lab.describe_change(SCRIPT, {"log_pl": -1.0}, {"log_pl": -0.5, "sweep": 1}, {}, {})
    finally:
        lab.close()
    assert "<script" not in text and html.escape(SCRIPT) in text


def test_the_text_helpers_show_text_as_typed():
    from boltzlab.dashboard.views import StatusBadge
    from boltzlab.dashboard.views.text import escape, markdown_text, text_html

    hostile = f'{IMG} & {SCRIPT} "q" **b** [l](javascript:alert(1)) `c` _u_ &amp;'
    assert escape(hostile) == html.escape(hostile, quote=True)
    assert text_html("**Could not use** a<b>.csv  \nStill") == "<b>Could not use</b> a&lt;b&gt;.csv<br>Still"
    for pane in (pn.pane.Markdown(markdown_text(hostile)), pn.pane.Alert(markdown_text(hostile))):
        out = rendered(pane)
        assert not any(raw in out for raw in RAW) and "<a" not in out and "<em" not in out
        assert html.unescape(out.replace("<p>", "").replace("</p>", "")).strip() == hostile  # as typed
    badge = StatusBadge()
    badge.set("error", f"**Could not load {SCRIPT}.npz:** {IMG}", details=IMG)
    assert not any(raw in rendered(badge.pane) for raw in RAW)
    badge = StatusBadge(one_line=True)
    badge.set("warn", f'{IMG}"><img src=y onerror=alert(2)>')
    assert not any(raw in rendered(badge.pane) for raw in RAW)
