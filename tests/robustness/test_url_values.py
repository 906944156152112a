"""Bad values in a lab's link (the query string), for every lab of the registry (issue 15).

A link's settings reach ``LabTools.apply_query`` as the server gives them (bytes, a list per
key).  Out of range numbers, NaN and infinities, words where numbers go, a repeated key with
different values, unknown keys, bytes that are not UTF-8 and ``<script>`` in a value or a key
are each ignored with the exact sentence, the lab's settings and run unchanged.  The message
box is an HTML pane: the text that reaches the browser is checked to be inert (the script
arrives as ``&lt;script&gt;`` text, the only tags are the box's own).
"""

from __future__ import annotations

import html
from html.parser import HTMLParser

import pytest

from boltzlab import engine
from boltzlab.dashboard.labs import LABS
from tests.waiting import tick

#: settings small enough for a quick step (URL text), as in tests/dashboard/test_lab_contract.py
SMALL = {
    "fvbm": {"d": "6", "n": "2000", "mode": "Race", "race_mus": "0.5, 2.5", "init": "random", "init_seed": "3"},
    "tap": {"data": "digits", "n_hidden": "6", "batch": "50", "K": "20", "seed": "3"},
    "frankwolfe": {"data": "digits", "max_hidden": "20"},
    "bound": {"problem": "fvbm", "race_seed": "2"},
}
#: per lab, a whole-number and a real-number setting of its controls, with their allowed ranges
NUMERIC = {
    "fvbm": (("d", "in [2, 30]"), ("mu", "in [0.01, 10.0]")),
    "tap": (("n_hidden", "in [1, 1000]"), ("gamma", "in [1e-05, 1.0]")),
    "frankwolfe": (("max_hidden", "in [2, 2000]"), ("reg", "in [0.0, 100.0]")),
    "bound": (("race_seed", "at least 0"), ("scale", "in [0.0, 2.0]")),
}
SCRIPT = "<script>alert(1)</script>"
ESCAPED = "&lt;script&gt;alert(1)&lt;/script&gt;"
IGNORED = "**Some settings in the link were ignored:** "
WALL_CLOCK = ("time", "second", "elapsed")

#: case -> (the link's {setting: value(s)} given the lab's int and float setting names,
#:          the sentence, given the same and their ranges)
CASES = {
    "int below its range": (lambda i, f: {i: "-5"}, lambda i, f, ri, rf: f"The '{i}' setting must be {ri}. Got '-5'."),
    "float above its range": (lambda i, f: {f: "1e9"}, lambda i, f, ri, rf: f"The '{f}' setting must be {rf}. Got '1e9'."),
    "NaN for an int": (lambda i, f: {i: "nan"}, lambda i, f, ri, rf: f"The '{i}' setting must be an int. Got 'nan'."),
    "NaN for a float": (lambda i, f: {f: "NaN"},
                        lambda i, f, ri, rf: f"The '{f}' setting must be a finite number. Got 'NaN'."),
    "inf": (lambda i, f: {f: "inf"}, lambda i, f, ri, rf: f"The '{f}' setting must be a finite number. Got 'inf'."),
    "-Infinity": (lambda i, f: {f: "-Infinity"},
                  lambda i, f, ri, rf: f"The '{f}' setting must be a finite number. Got '-Infinity'."),
    "inf for an int": (lambda i, f: {i: "inf"}, lambda i, f, ri, rf: f"The '{i}' setting must be an int. Got 'inf'."),
    "a word for an int": (lambda i, f: {i: "ten"}, lambda i, f, ri, rf: f"The '{i}' setting must be an int. Got 'ten'."),
    "a word for a float": (lambda i, f: {f: "ten"}, lambda i, f, ri, rf: f"The '{f}' setting must be a number. Got 'ten'."),
    "a fraction for an int": (lambda i, f: {i: "2.5"}, lambda i, f, ri, rf: f"The '{i}' setting must be an int. Got '2.5'."),
    "empty": (lambda i, f: {i: ""}, lambda i, f, ri, rf: f"The '{i}' setting must be an int. Got ''."),
    "not UTF-8 (%ff)": (lambda i, f: {i: b"\xff"},
                        lambda i, f, ri, rf: f"The '{i}' setting must be an int. Got '\ufffd'."),
    "a repeated key": (lambda i, f: {i: ["10", "12"]},
                       lambda i, f, ri, rf: f"The link gives the '{i}' setting 2 different values ('10', '12'); give it once."),
    "an unknown key": (lambda i, f: {"nonsense": "1"}, lambda i, f, ri, rf: "The lab has no setting 'nonsense'."),
    "a script in a number": (lambda i, f: {i: SCRIPT},
                             lambda i, f, ri, rf: f"The '{i}' setting must be an int. Got '{SCRIPT}'."),
    "a script as a key": (lambda i, f: {SCRIPT: "1"}, lambda i, f, ri, rf: f"The lab has no setting '{SCRIPT}'."),
}


@pytest.fixture(scope="module", autouse=True)
def _warm():
    engine.warm_up()


def make(cls):
    lab = cls()
    lab.panel()
    lab.apply_settings(lab.tools.decode(SMALL[cls.key], strict=True)[0])
    lab.runner.step_once()  # a run with a history, which a bad link must keep
    assert lab.runner.wait_idle(120)
    tick(lab)
    assert lab.jobs.wait(120)
    return lab


@pytest.fixture(scope="module", params=LABS, ids=[cls.key for cls in LABS])
def lab(request):
    """One lab per class for all the cases: each must leave it as it was."""
    lab = make(request.param)
    yield lab
    lab.close()


def url_args(key: str, link: dict) -> dict:
    """What the server gives ``apply_query`` (``pn.state.session_args``): a list of bytes per key."""
    def as_bytes(value):
        return value if isinstance(value, bytes) else value.encode()
    return {f"{key}.{name}": [as_bytes(v) for v in (value if isinstance(value, list) else [value])]
            for name, value in link.items()}


def run_of(lab) -> tuple:
    history = {name: [{k: v for k, v in row.items() if not any(w in k for w in WALL_CLOCK)} for row in rows]
               for name, rows in lab.runner.history.rows.items()}
    return list(lab.runner.trainers), history


class Tags(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags: list[tuple[str, list]] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, attrs))


def browser_html(lab) -> str:
    """The HTML the browser puts into the message box: Panel sends the pane's object escaped
    once more (the Bokeh model's ``text``) and the client unescapes it into innerHTML."""
    return html.unescape(lab.tools.message.pane.get_root().text)


def assert_inert(lab) -> str:
    inner = browser_html(lab)
    parser = Tags()
    parser.feed(inner)
    assert {tag for tag, _ in parser.tags} <= {"div", "b", "br"}, parser.tags
    assert all(name in ("class", "style") for _, attrs in parser.tags for name, _ in attrs), parser.tags
    assert "<script" not in inner.lower()
    return inner


def test_every_lab_has_its_numeric_settings_here():
    assert set(NUMERIC) == set(SMALL) == {cls.key for cls in LABS}
    for cls in LABS:
        lab = cls()
        try:
            controls = lab.controls()
            (i, _), (f, _) = NUMERIC[cls.key]
            assert isinstance(controls[i].value, int) and "Int" in type(controls[i]).__name__
            assert isinstance(controls[f].value, float) and "Float" in type(controls[f]).__name__
        finally:
            lab.close()


@pytest.mark.parametrize("case", list(CASES))
def test_a_bad_value_in_a_link_is_ignored_with_its_sentence(case, lab):
    (i, ri), (f, rf) = NUMERIC[lab.key]
    link, sentence = CASES[case]
    before, settings = run_of(lab), lab.tools.settings_text()
    lab.tools.apply_query(url_args(lab.key, link(i, f)))
    expected = sentence(i, f, ri, rf)
    assert lab.tools.message.level == "warn"
    assert lab.tools.message.text == IGNORED + expected
    assert lab.tools.settings_text() == settings
    assert run_of(lab) == before
    inner = assert_inert(lab)
    assert html.escape(expected) in inner  # shown as text, whatever it holds
    if SCRIPT in expected:
        assert ESCAPED in inner


def test_a_key_repeated_with_one_value_is_that_value():
    cls = next(c for c in LABS if c.key == "fvbm")
    lab = make(cls)
    try:
        lab.tools.apply_query({"fvbm.d": [b"5", b"5"]})
        assert lab.tools.message.level == "info" and lab.tools.message.text == "Settings loaded from the link."
        assert lab.widgets["d"].value == 5
    finally:
        lab.close()


#: labs with a free-text setting: a script there is text the lab refuses when it parses it
TEXT = {
    "fvbm": ("race_mus", f"The race step sizes must be numbers separated by commas. Got '{SCRIPT}'."),
    "bound": ("extra", f"The extra expansion points must be numbers separated by commas, e.g. '-2, 1.5'. "
                       f"Got '{SCRIPT}'."),
}


@pytest.mark.parametrize("key", list(TEXT))
def test_a_script_in_a_text_setting_is_shown_as_text_and_the_run_is_kept(key):
    cls = next(c for c in LABS if c.key == key)
    lab = make(cls)
    try:
        name, sentence = TEXT[key]
        before = run_of(lab)
        lab.tools.apply_query({f"{key}.{name}": [SCRIPT.encode()]})
        assert lab.tools.message.level == "warn" and lab.tools.message.text == IGNORED + sentence
        assert ESCAPED in assert_inert(lab)
        # Lab.apply_settings: a link whose values make no valid run keeps the run, and the
        # widget shows the link's text (a widget value, not markup) for the user to correct
        assert run_of(lab) == before
        assert lab.settings()[name].value == SCRIPT
    finally:
        lab.close()


def test_the_apps_own_link_arguments_take_bytes_that_are_not_utf8():
    """?page=%ff reaches the app as b'\\xff': replaced, never a crash of the page build."""
    from boltzlab.dashboard.app import _arg

    assert _arg({"page": [b"\xff"]}, "page") == "\ufffd"
    assert _arg({"page": [b"1", b"2"]}, "page") == "2" and _arg({}, "page") is None
