"""A lab's settings are its ``param`` parameters (issue 24): every lab of the registry is
built from keyword settings, refuses a bad one with the sentence a bad link value gets, and
builds its trainers once per change of its settings."""

from __future__ import annotations

import pytest

from boltzlab import engine
from boltzlab.dashboard.labs import LABS
from boltzlab.dashboard.labtools import setting_text

#: small settings per lab, as Python values (the URL tests' SMALL, typed)
KEYWORDS = {
    "fvbm": {"d": 6, "n": 2000, "mode": "Race", "race_mus": "0.5, 2.5", "init": "random", "init_seed": 3},
    "tap": {"data": "digits", "n_hidden": 6, "batch": 50, "K": 20, "seed": 3},
    "frankwolfe": {"data": "digits", "max_hidden": 20},
    "bound": {"problem": "fvbm", "race_seed": 2},
}
#: per lab, values each setting refuses (one out of range, one of the wrong kind)
BAD = {
    "fvbm": {"d": 1, "mu": float("nan"), "tol": 0.5, "mode": "Sprint"},
    "tap": {"n_hidden": 0, "gamma": 2.0, "data": "cifar", "batch": 2.5},
    "frankwolfe": {"max_hidden": 1, "reg": -1.0, "away": "maybe", "evaluate": "guess"},
    "bound": {"race_seed": -1, "scale": 9.0, "taylor": 2, "s_tilde": 3.5},
}
LAB_IDS = [cls.key for cls in LABS]


@pytest.fixture(scope="module", autouse=True)
def _warm():
    engine.warm_up()


def test_every_lab_has_keywords_here():
    assert set(KEYWORDS) == set(BAD) == set(LAB_IDS)


@pytest.mark.parametrize("cls", LABS, ids=LAB_IDS)
def test_a_lab_is_built_from_keyword_settings(cls, make_lab):
    settings = KEYWORDS[cls.key]
    lab = make_lab(cls, **settings)
    for name, value in settings.items():
        assert getattr(lab, name) == value
        assert lab.widgets[name].value == value  # the widget is made from the parameter
        assert lab.tools.settings_text()[name] == setting_text(value)
    # the same settings as a link give the same lab
    other = make_lab(cls)
    other.tools.apply_query({f"{cls.key}.{k}": [setting_text(v).encode()] for k, v in settings.items()})
    assert other.tools.message.level == "info", other.tools.message.text
    assert other.tools.settings_text() == lab.tools.settings_text()
    assert list(other.runner.trainers) == list(lab.runner.trainers)


@pytest.mark.parametrize("cls", LABS, ids=LAB_IDS)
def test_a_bad_keyword_gets_the_sentence_of_a_bad_link_value(cls, make_lab):
    lab = make_lab(cls)
    for name, value in BAD[cls.key].items():
        _, errors = lab.tools.decode({name: setting_text(value)}, strict=False)
        assert len(errors) == 1, (name, value)
        with pytest.raises(ValueError) as info:
            cls(**{name: value})
        assert str(info.value) == errors[0]
        with pytest.raises(ValueError) as info:
            lab.apply_settings({name: value})
        assert str(info.value) == errors[0]
        assert getattr(lab, name) != value


def test_the_sentence_names_the_setting_its_range_and_the_value():
    from boltzlab.dashboard.labs.tap import TAPLab

    with pytest.raises(ValueError, match=r"^The 'n_hidden' setting must be in \[1, 1000\]. Got '0'.$"):
        TAPLab(n_hidden=0)
    with pytest.raises(ValueError, match=r"^The 'data' setting must be one of \['mnist', 'digits', 'upload'\]. Got 'cifar'.$"):
        TAPLab(data="cifar")


def test_a_data_set_brings_its_defaults_unless_given():
    from boltzlab.dashboard.labs.tap import DEFAULTS, TAPLab

    lab = TAPLab(data="digits")
    try:
        assert (lab.n_hidden, lab.gamma, lab.batch) == tuple(DEFAULTS["digits"][k] for k in ("n_hidden", "gamma", "batch"))
    finally:
        lab.close()
    lab = TAPLab(data="digits", n_hidden=6)
    try:
        assert lab.n_hidden == 6 and lab.batch == DEFAULTS["digits"]["batch"]
    finally:
        lab.close()


def test_a_trainer_is_built_once_per_change(make_lab, monkeypatch):
    from boltzlab.dashboard.labs.tap import TAPLab
    from boltzlab.engine import tap

    built = []

    class Counted(tap.TAPTrainer):
        def __init__(self, *args, **kwargs):
            built.append(kwargs.get("n_chains"))
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(tap, "TAPTrainer", Counted)
    lab = make_lab(TAPLab, **KEYWORDS["tap"])
    built_now = lambda: (lab.runner.wait_built(120), built)[1]  # noqa: E731 - the runner's thread builds
    assert len(built_now()) == 1  # the first run
    lab.widgets["K"].value = 30  # a widget
    assert built_now()[1:] == [30]
    lab.apply_settings({"K": 25, "seed": 4, "n_hidden": 7})  # a link, a preset, a checkpoint: one batch
    assert built[2:] == [25]
    lab.widgets["data"].value = "mnist"  # a data set and the defaults it brings: one rebuild
    assert len(built_now()) == 4 and lab.n_hidden == 100
    lab.apply_settings({"K": 25})  # nothing changed: nothing built
    assert len(built) == 4
    with pytest.raises(ValueError):
        lab.apply_settings({"n_hidden": 5000})  # refused before anything is built
    assert len(built) == 4


def test_every_fvbm_trainer_is_built_once_per_change(make_lab, monkeypatch):
    from boltzlab.dashboard.labs.fvbm import FVBMLab
    from boltzlab.engine import fvbm

    built = []

    class Counted(fvbm.FVBMTrainer):
        def __init__(self, *args, **kwargs):
            built.append(kwargs.get("algorithm"))
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(fvbm, "FVBMTrainer", Counted)
    lab = make_lab(FVBMLab, d=6, n=2000)
    built_now = lambda: (lab.runner.wait_built(120), built)[1]  # noqa: E731 - the runner's thread builds
    assert built_now() == ["bslm"]
    lab.widgets["algorithm"].value = "ga"
    assert built_now() == ["bslm", "ga"]
