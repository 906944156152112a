"""The ranges of lab settings the docs state (issue 46 item 5 (b)): every sentence "The 'x'
setting must be in [a, b]" in docs/*.md holds for the lab that has the setting ``x``: a and b
are accepted, the nearest values outside are refused with that very sentence, and the
setting's widget offers exactly [a, b].  The docs are the reference, read here, not the code's
bounds."""

from __future__ import annotations

import math
import re
from pathlib import Path

import param
import pytest

from boltzlab.dashboard.labs import LABS
from boltzlab.dashboard.labtools import setting_text

DOCS = Path(__file__).resolve().parents[2] / "docs"
SENTENCE = re.compile(r"The '(\w+)' setting must be in \[([-0-9.e]+), ([-0-9.e]+)\]")
#: small settings per lab (tests/dashboard/test_lab_settings.py's KEYWORDS)
SMALL = {
    "fvbm": {"d": 6, "n": 2000},
    "tap": {"data": "digits", "n_hidden": 6, "batch": 50, "K": 20},
    "frankwolfe": {"data": "digits", "max_hidden": 20},
    "bound": {"problem": "fvbm", "race_seed": 2},
}


def documented() -> list[tuple[str, str, str]]:
    found = set()
    for path in sorted(DOCS.glob("*.md")):
        text = " ".join(path.read_text(encoding="utf-8").split())  # sentences wrap over lines
        found.update(SENTENCE.findall(text))
    return sorted(found)


DOCUMENTED = documented()


def test_the_docs_state_ranges():
    names = {name for name, _, _ in DOCUMENTED}
    assert {"n_hidden", "K", "mu"} <= names, DOCUMENTED  # docs/python.md, architecture.md, teaching.md


def outside(low: float, high: float, integer: bool) -> tuple[float, float]:
    if integer:
        return low - 1, high + 1
    return math.nextafter(low, -math.inf), math.nextafter(high, math.inf)


@pytest.mark.parametrize("name, low_text, high_text", DOCUMENTED, ids=[d[0] for d in DOCUMENTED])
def test_a_documented_range_is_the_labs(name, low_text, high_text, make_lab):
    labs = [cls for cls in LABS if name in cls.param]
    assert labs, f"the docs state a range for {name!r}, which no lab has"
    for cls in labs:
        lab = make_lab(cls, **SMALL[cls.key])
        integer = isinstance(cls.param[name], param.Integer)
        low, high = (int(low_text), int(high_text)) if integer else (float(low_text), float(high_text))
        for value in (low, high):
            assert lab.check_settings({name: value}) == {name: value}, (cls.key, name, value)
            values, errors = lab.parse_settings({name: setting_text(value)})
            assert errors == [] and values == {name: value}, (cls.key, name, value, errors)
        for value in outside(low, high, integer):
            sentence = f"The '{name}' setting must be in [{low_text}, {high_text}]. Got '{setting_text(value)}'."
            with pytest.raises(ValueError) as info:
                lab.check_settings({name: value})
            assert str(info.value) == sentence
            _, errors = lab.parse_settings({name: repr(value)})  # a link's text, every digit kept
            assert len(errors) == 1 and errors[0].startswith(sentence.split(" Got ")[0]), errors
        widget = lab.widgets[name]
        assert (widget.start, widget.end) == (low, high), (cls.key, name)
