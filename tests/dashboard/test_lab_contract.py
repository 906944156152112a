"""Every lab of the registry keeps the Lab contract (dashboard.labs.base), headless.

One parametrised test per promise, run for every lab in ``LABS``: a fifth lab gets them by
being registered.  Small settings per lab keep it fast.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from boltzlab import engine
from boltzlab.dashboard.labs import LABS
from boltzlab.dashboard.labs.base import Lab
from boltzlab.dashboard.labtools import Checkpoint, write_checkpoint
from tests.waiting import tick

#: settings small enough for a few steps in well under a second each (URL text)
SMALL = {
    "fvbm": {"d": "6", "n": "2000", "mode": "Race", "race_mus": "0.5, 2.5", "init": "random", "init_seed": "3"},
    "tap": {"data": "digits", "n_hidden": "6", "batch": "50", "K": "20", "seed": "3"},
    "frankwolfe": {"data": "digits", "max_hidden": "20"},
    "bound": {"problem": "fvbm", "race_seed": "2"},
}
WALL_CLOCK = ("time", "second", "elapsed")


@pytest.fixture(scope="module", autouse=True)
def _warm():
    engine.warm_up()


@pytest.fixture
def make_lab(make_lab):
    """The shared ``make_lab`` (tests/conftest.py), by default with the lab's SMALL settings."""
    def make(cls, small: bool = True) -> Lab:
        lab = make_lab(cls)
        if small:
            lab.apply_settings(lab.tools.decode(SMALL[cls.key], strict=True)[0])
        return lab

    return make


def steps(lab: Lab, k: int) -> None:
    """k single steps, then one tick (and the analyses it started) as the UI would."""
    for _ in range(k):
        lab.runner.step_once()
    assert lab.runner.wait_idle(120)
    tick(lab)
    assert lab.jobs.wait(120)


def comparable(lab: Lab) -> dict[str, list[dict]]:
    """Every run's history rows without wall-clock entries."""
    return {name: [{k: v for k, v in row.items() if not any(w in k for w in WALL_CLOCK)} for row in rows]
            for name, rows in lab.runner.history.rows.items()}


LAB_IDS = [cls.key for cls in LABS]


def test_the_registry_has_every_lab_once():
    keys = [cls.key for cls in LABS]
    assert len(set(keys)) == len(keys) == 4 and all(keys)
    assert len({cls.title for cls in LABS}) == len(LABS)
    assert set(SMALL) == set(keys), "give every registered lab small settings here"


@pytest.mark.parametrize("cls", LABS, ids=LAB_IDS)
def test_a_lab_declares_its_parts(cls, make_lab):
    assert issubclass(cls, Lab)
    summary = cls.summary.strip()
    assert summary.endswith(".") and not re.search(r"[.!?]\s+[A-Z]", summary), "one sentence"
    assert cls.intro and cls.equations and cls.watch and cls.presets
    assert cls.param["speed"].default in cls.speeds
    lab = make_lab(cls, small=False)
    settings = lab.settings()
    assert "speed" in settings and set(lab.controls()) <= set(settings)
    for preset in cls.presets:
        assert set(preset.settings) <= set(settings), preset.title
    assert lab.main_view() is not None and lab.runner.trainers  # (waits for the runner's thread to build them)
    tick(lab)
    assert lab.run_status.text == "Ready: press ▶ Play"


@pytest.mark.parametrize("cls", LABS, ids=LAB_IDS)
def test_every_preset_applies(cls, make_lab):
    lab = make_lab(cls, small=False)
    for preset in cls.presets:
        lab.tools.preset.value = preset.title
        assert lab.tools.message.level == "info", (preset.title, lab.tools.message.text)
        assert preset.title in lab.tools.message.text and preset.note  # says what to watch
        for name, value in preset.settings.items():
            assert lab.settings()[name].value == value, (preset.title, name)
        assert lab.runner.trainers and not lab.settings_msg.pane.visible


@pytest.mark.parametrize("cls", LABS, ids=LAB_IDS)
def test_a_loaded_checkpoint_continues_exactly(cls, make_lab):
    lab = make_lab(cls)
    steps(lab, 3)
    content = write_checkpoint(lab.tools.checkpoint())
    steps(lab, 2)
    uninterrupted = comparable(lab)

    other = make_lab(cls, small=False)  # the default settings: the checkpoint's come with it
    assert other.tools.load_bytes(content, filename="saved.npz"), other.tools.message.text
    assert other.tools.message.level == "ok" and "saved.npz" in other.tools.message.text
    assert other.tools.settings_text() == lab.tools.settings_text()
    assert list(other.runner.trainers) == list(lab.runner.trainers)
    steps(other, 2)
    assert comparable(other) == uninterrupted


@pytest.mark.parametrize("cls", LABS, ids=LAB_IDS)
def test_a_link_reproduces_the_settings_and_the_run(cls, make_lab):
    lab = make_lab(cls)
    query = lab.tools.query()
    assert all(key.startswith(f"{cls.key}.") for key in query)
    other = make_lab(cls, small=False)
    other.tools.apply_query({key: [value.encode()] for key, value in query.items()})
    assert other.tools.message.level == "info", other.tools.message.text
    assert other.tools.settings_text() == lab.tools.settings_text()
    steps(lab, 2)
    steps(other, 2)
    assert comparable(other) == comparable(lab)


@pytest.mark.parametrize("cls", LABS, ids=LAB_IDS)
def test_bad_links_and_checkpoints_change_nothing(cls, make_lab):
    lab = make_lab(cls)
    steps(lab, 2)
    before, settings = comparable(lab), lab.tools.settings_text()
    lab.tools.apply_query({f"{cls.key}.speed": [b"warp 9"], f"{cls.key}.nonsense": [b"1"]})
    assert lab.tools.message.level == "warn"
    assert "'speed'" in lab.tools.message.text and "'nonsense'" in lab.tools.message.text
    assert not lab.tools.load_bytes(b"garbage", filename="junk.npz")
    assert lab.tools.message.level == "error" and "junk.npz" in lab.tools.message.text
    other = next(c for c in LABS if c is not cls)
    foreign = write_checkpoint(Checkpoint(other.key, {}, {"x": {"a": np.zeros(2)}}))
    assert not lab.tools.load_bytes(foreign)
    assert f"{other.key!r} lab" in lab.tools.message.text
    assert comparable(lab) == before and lab.tools.settings_text() == settings


@pytest.mark.parametrize("cls", LABS, ids=LAB_IDS)
def test_next_step_returns_at_once_and_says_what_changed_on_a_later_tick(cls, make_lab):
    lab = make_lab(cls)
    lab.tools.set_presenting(True)
    assert lab.tools.next_step.visible
    lab.next_step()
    assert lab.tools.changed.object == "Computing this step…"
    assert lab.runner.wait_idle(120)
    tick(lab)
    text = lab.tools.changed.object
    assert text and text != "Computing this step…" and "Nothing changed" not in text
    assert sum(s.steps for s in lab.runner.states.values()) >= 1


def test_every_lab_has_its_own_page_and_labs_are_built_when_opened():
    from boltzlab.dashboard.app import create_app, routes

    pages = routes()
    assert set(pages) == {"/", *(f"/{cls.key}" for cls in LABS)}
    for cls in LABS:
        app = pages[f"/{cls.key}"]()
        assert list(app.labs) == [cls.title] and len(app.tabs) == 1
        app.labs[cls.title].close()
    app = create_app()
    assert list(app.labs) == [LABS[0].title]  # the first tab only, until another is opened
    app.tabs.active = 1
    assert list(app.labs) == [LABS[0].title, LABS[1].title]
    for lab in app.labs.values():
        lab.close()
