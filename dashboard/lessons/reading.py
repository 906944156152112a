"""Reading a lesson file: YAML (a safe subset: no tags, no anchors needed), every value checked
against its lab class before anything is used, each error as ``FILE:LINE: reason``.

The format (docs/teaching.md, "Lesson files")::

    title: BSLM climbs every sweep          # required, one line
    lab: fvbm                               # fvbm, tap, frankwolfe or bound (or the lab's title)
    about: One line shown when it is chosen  # optional
    steps:                                  # 1 to 40 steps, in order
      - preset: "BSLM on the paper's simulation (d = 10, n = 16,000)"   # a preset's title
        settings: {mu: 2.5, algorithm: ga}  # settings, as in a link (after the preset's)
        tab: Who won                        # a tab of the lab's stage, by its label
        play: 30                            # one action: play N | next: true | pin: LABEL or true
                                            #   | sweep: {setting: mu, values: [0.5, 1, 2]}
        narration: What the class reads.    # required: plain text, **bold**, line breaks
        question: What will happen next?    # optional

Nothing in a file is code or HTML: the narration is shown escaped
(:func:`boltzlab.dashboard.views.text.text_html`).
"""

from __future__ import annotations

import inspect
import types
from pathlib import Path
from typing import Any

import yaml

from ..labtools import setting_text
from .model import ACTIONS, Lesson, LessonStep

MAX_FILE_BYTES = 64 * 1024
MAX_STEPS = 40
MAX_PLAY = 5_000  # steps of one play action
MAX_TITLE = 120
MAX_NARRATION = 800
MAX_QUESTION = 300
MAX_LABEL = 40
LESSON_KEYS = ("title", "lab", "about", "steps")
STEP_KEYS = ("narration", "question", "preset", "settings", "tab", *ACTIONS)
SUFFIXES = (".yaml", ".yml")

#: each lab's stage tabs, by their labels (``Lab.stage``; tests/dashboard/test_lessons.py checks
#: them against every lab's page): a step's ``tab`` is checked here, when the file is read
TABS = {
    "fvbm": ("Log-PL · log-likelihood", "Who won", "Couplings M"),
    "tap": ("Figs. 3 · 5", "Histograms", "Isomap", "Fields (Fig. 4)", "Denoising", "Samples"),
    "frankwolfe": ("Log-likelihood · eq. 9", "Receptive fields", "CD fork (§4)", "Samples"),
    "bound": ("Race · this step's bound", "Per second", "Table 1 live", "Tightness (Theorem 1)",
              "Gap along the line"),
}


class LessonError(ValueError):
    """A lesson file that cannot be used: ``str()`` is ``FILE:LINE: reason``."""

    def __init__(self, path: Any, line: int, reason: str) -> None:
        super().__init__(f"{path}:{line}: {reason}")
        self.path, self.line, self.reason = str(path), line, reason


def load(path: str | Path) -> Lesson:
    """The lesson in the file ``path``, every step checked against its lab: the lab exists,
    each preset and stage tab is the lab's, each setting is one of the lab's and its value
    allowed (the lab's own checks, the sentences a link gets), each action and count is
    known.  ``ValueError`` (:class:`LessonError`) naming the file, the line and the reason."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise LessonError(path, 1, f"cannot be read ({exc.strerror or exc})") from None
    if len(data) > MAX_FILE_BYTES:
        raise LessonError(path, 1, f"is {len(data):,} bytes; a lesson file may have at most {MAX_FILE_BYTES:,}")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise LessonError(path, data[:exc.start].count(b"\n") + 1, "is not UTF-8 text") from None
    name = path.stem
    for suffix in SUFFIXES:
        if path.name.endswith(suffix):
            name = path.name[:-len(suffix)]
    return _Reader(path, text).lesson(name)


def load_dir(folder: str | Path, taken: list[Lesson] = ()) -> list[Lesson]:
    """Every lesson file (``*.yaml``, ``*.yml``) in ``folder`` (not its subfolders), in the order
    of their names; all or none: ``ValueError`` naming each bad file, its line and the reason
    (one per line), also for a folder with no lesson file and for a name that one of
    ``taken`` (the built-in lessons) or another file has already."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ValueError(f"{folder}: not a folder (--lessons takes a folder of lesson files, *.yaml)")
    files = sorted(p for p in folder.iterdir() if p.is_file() and p.name.endswith(SUFFIXES))
    if not files:
        raise ValueError(f"{folder}: no lesson files in it (*.yaml or *.yml)")
    lessons, errors = [], []
    names = {lesson.name: lesson.path or "built in" for lesson in taken}
    for file in files:
        try:
            lesson = load(file)
        except ValueError as exc:
            errors.append(str(exc))
            continue
        if lesson.name in names:
            errors.append(str(LessonError(file, 1, f"a lesson named {lesson.name!r} exists already "
                                                   f"({names[lesson.name]}): rename the file")))
            continue
        names[lesson.name] = str(file)
        lessons.append(lesson)
    if errors:
        raise ValueError("\n".join(errors))
    return lessons


def lab_classes() -> dict[str, type]:
    """The lab classes by key (imported when first needed: the labs import the lessons' model)."""
    from ..labs import LABS

    return {cls.key: cls for cls in LABS}


class _Defaults:
    """A lab class standing in for a lab of its default settings, so that the lab's own checks
    (``parse_settings``, ``check_settings``, ``setting_bounds``) run without building one."""

    def __init__(self, cls: type) -> None:
        self._cls = cls

    def __getattr__(self, name: str) -> Any:
        attr = inspect.getattr_static(self._cls, name)
        if inspect.isfunction(attr):
            return types.MethodType(attr, self)
        return getattr(self._cls, name)  # a setting: its default; a classmethod: bound to the class


def sweepable(cls: type) -> list[str]:
    """The settings a sweep may vary (``Lab.sweepable``, from the class)."""
    import param

    return [name for name in cls.setting_names() if name != "speed" and name not in cls.view_settings
            and name not in cls.data_settings and isinstance(cls.param[name], param.Number)]


class _Reader:
    """One file's YAML nodes (they know their lines) read into a :class:`Lesson`."""

    def __init__(self, path: Path, text: str) -> None:
        self.path = path
        self.text = text
        self.loader = yaml.SafeLoader("")

    def fail(self, node: Any, reason: str) -> LessonError:
        line = node.start_mark.line + 1 if node is not None else 1
        return LessonError(self.path, line, reason)

    def value(self, node: Any) -> Any:
        return self.loader.construct_object(node, deep=True)

    def mapping(self, node: Any, what: str, allowed: tuple[str, ...]) -> dict[str, tuple[Any, Any]]:
        """``{key: (key node, value node)}`` of a mapping whose keys are all ``allowed``."""
        if not isinstance(node, yaml.MappingNode):
            raise self.fail(node, f"{what} must be a mapping of {', '.join(allowed)}")
        out: dict[str, tuple[Any, Any]] = {}
        for key_node, value_node in node.value:
            key = self.value(key_node) if isinstance(key_node, yaml.ScalarNode) else None
            if not isinstance(key, str):
                raise self.fail(key_node, f"{what}: a key must be a name")
            if key not in allowed:
                raise self.fail(key_node, f"{what}: unknown key {key!r}; the keys are {', '.join(allowed)}")
            if key in out:
                raise self.fail(key_node, f"{what}: {key!r} is given twice")
            out[key] = (key_node, value_node)
        return out

    def text_of(self, node: Any, what: str, limit: int) -> str:
        value = self.value(node) if isinstance(node, yaml.ScalarNode) else None
        if not isinstance(value, str) or not value.strip():
            raise self.fail(node, f"{what} must be text")
        value = value.strip()
        if len(value) > limit:
            raise self.fail(node, f"{what} has {len(value)} characters; at most {limit}")
        return value

    # ------------------------------------------------------------------ the lesson
    def lesson(self, name: str) -> Lesson:
        try:
            root = yaml.compose(self.text, Loader=yaml.SafeLoader)
        except yaml.MarkedYAMLError as exc:
            mark = exc.problem_mark or exc.context_mark
            line = mark.line + 1 if mark is not None else 1
            raise LessonError(self.path, line, f"not valid YAML: {exc.problem or exc.context}") from None
        except yaml.YAMLError as exc:
            raise LessonError(self.path, 1, f"not valid YAML: {exc}") from None
        if root is None:
            raise LessonError(self.path, 1, "is empty; a lesson has a title, a lab and steps")
        try:
            keys = self.mapping(root, "a lesson", LESSON_KEYS)
            for key in ("title", "lab", "steps"):
                if key not in keys:
                    raise self.fail(root, f"a lesson needs {key!r} (it has {', '.join(keys) or 'nothing'})")
            title = self.text_of(keys["title"][1], "the title", MAX_TITLE)
            about = self.text_of(keys["about"][1], "'about'", MAX_NARRATION) if "about" in keys else ""
            cls = self.lab(keys["lab"][1])
            steps_node = keys["steps"][1]
            if not isinstance(steps_node, yaml.SequenceNode) or not steps_node.value:
                raise self.fail(steps_node, "'steps' must be a list of steps (each begins with '- ')")
            if len(steps_node.value) > MAX_STEPS:
                raise self.fail(steps_node.value[MAX_STEPS], f"a lesson has at most {MAX_STEPS} steps; this one "
                                                              f"has {len(steps_node.value)}")
            steps = tuple(self.step(node, cls, i + 1) for i, node in enumerate(steps_node.value))
        except yaml.YAMLError as exc:  # a value YAML cannot construct (e.g. a bad timestamp)
            mark = getattr(exc, "problem_mark", None)
            raise LessonError(self.path, mark.line + 1 if mark is not None else 1,
                              f"not valid YAML: {getattr(exc, 'problem', None) or exc}") from None
        return Lesson(name=name, title=title, lab=cls.key, steps=steps, about=about, path=str(self.path))

    def lab(self, node: Any) -> type:
        classes = lab_classes()
        text = self.value(node) if isinstance(node, yaml.ScalarNode) else None
        by_name = {**{cls.title.lower(): cls for cls in classes.values()}, **{k.lower(): c for k, c in classes.items()}}
        cls = by_name.get(text.strip().lower()) if isinstance(text, str) else None
        if cls is None:
            raise self.fail(node, f"no lab {text!r}; the labs are {', '.join(classes)}")
        return cls

    # ------------------------------------------------------------------ a step
    def step(self, node: Any, cls: type, number: int) -> LessonStep:
        what = f"step {number}"
        keys = self.mapping(node, what, STEP_KEYS)
        if "narration" not in keys:
            raise self.fail(node, f"{what} needs a 'narration' (what the class reads)")
        narration = self.text_of(keys["narration"][1], f"{what}: the narration", MAX_NARRATION)
        question = self.text_of(keys["question"][1], f"{what}: the question", MAX_QUESTION) if "question" in keys else ""
        actions = [k for k in ACTIONS if k in keys]
        if len(actions) > 1:
            raise self.fail(keys[actions[1]][0], f"{what} has {len(actions)} actions ({', '.join(actions)}); "
                                                 "give one per step")
        lab = _Defaults(cls)
        preset = None
        base: dict[str, str] = {}  # the preset's settings as text
        if "preset" in keys:
            preset_node = keys["preset"][1]
            title = self.value(preset_node) if isinstance(preset_node, yaml.ScalarNode) else None
            found = next((p for p in cls.presets if p.title == title), None)
            if found is None:
                raise self.fail(preset_node, f"{what}: the {cls.title} lab has no preset {title!r}; its presets: "
                                             f"{'; '.join(p.title for p in cls.presets)}")
            preset = found.title
            base = {k: setting_text(v) for k, v in found.settings.items()}
        settings = self.settings(keys["settings"][1], lab, base, what) if "settings" in keys else {}
        tab = None
        if "tab" in keys:
            tab_node = keys["tab"][1]
            tab = self.value(tab_node) if isinstance(tab_node, yaml.ScalarNode) else None
            tabs = TABS.get(cls.key, ())
            if tab not in tabs:
                raise self.fail(tab_node, f"{what}: the {cls.title} lab has no tab {tab!r}; its tabs: {'; '.join(tabs)}")
        action = actions[0] if actions else None
        fields: dict[str, Any] = {}
        if action is not None:
            action_node = keys[action][1]
            fields = getattr(self, f"action_{action}")(action_node, lab, cls, what)
        return LessonStep(narration=narration, question=question, preset=preset, settings=settings, tab=tab,
                          action=action, line=node.start_mark.line + 1, **fields)

    def settings(self, node: Any, lab: _Defaults, base: dict[str, str], what: str) -> dict[str, Any]:
        """The step's settings as values, by the lab's own checks (with the preset's, for the
        ranges that depend on other settings); the first bad one's line."""
        if not isinstance(node, yaml.MappingNode) or not node.value:
            raise self.fail(node, f"{what}: 'settings' must be a mapping of setting: value")
        texts: dict[str, str] = {}
        lines: dict[str, Any] = {}
        for key_node, value_node in node.value:
            key = self.value(key_node) if isinstance(key_node, yaml.ScalarNode) else None
            if not isinstance(key, str):
                raise self.fail(key_node, f"{what}: a setting must be named")
            if key in texts:
                raise self.fail(key_node, f"{what}: the setting {key!r} is given twice")
            value = self.value(value_node) if isinstance(value_node, yaml.ScalarNode) else None
            if value is None or not isinstance(value, (str, int, float, bool)):
                raise self.fail(value_node, f"{what}: the setting {key!r} needs one value (a number, a word or "
                                            "true/false)")
            texts[key] = value if isinstance(value, str) else setting_text(value)
            lines[key] = value_node
        values, errors = lab.parse_settings({**base, **texts})
        bad = [key for key in texts if key not in values]
        if bad or errors:
            first = bad[0] if bad else next(iter(texts))
            raise self.fail(lines[first], f"{what}: {' '.join(errors)}")
        return {key: values[key] for key in texts}

    def action_play(self, node: Any, lab: _Defaults, cls: type, what: str) -> dict[str, Any]:
        steps = self.value(node) if isinstance(node, yaml.ScalarNode) else None
        if isinstance(steps, bool) or not isinstance(steps, int) or not 1 <= steps <= MAX_PLAY:
            raise self.fail(node, f"{what}: 'play' takes a number of steps from 1 to {MAX_PLAY}; got {steps!r}")
        return {"steps": steps}

    def action_next(self, node: Any, lab: _Defaults, cls: type, what: str) -> dict[str, Any]:
        if not isinstance(node, yaml.ScalarNode) or self.value(node) is not True:
            raise self.fail(node, f"{what}: 'next' is 'next: true' (one step, and what it changed is said)")
        return {"steps": 1}

    def action_pin(self, node: Any, lab: _Defaults, cls: type, what: str) -> dict[str, Any]:
        label = self.value(node) if isinstance(node, yaml.ScalarNode) else None
        if label is True:
            return {"pin": None}
        if not isinstance(label, str) or not label.strip() or len(label.strip()) > MAX_LABEL:
            raise self.fail(node, f"{what}: 'pin' takes a label of 1 to {MAX_LABEL} characters, or true "
                                  f"(the next 'pin N'); got {label!r}")
        return {"pin": label.strip()}

    def action_sweep(self, node: Any, lab: _Defaults, cls: type, what: str) -> dict[str, Any]:
        from ..sweeps import MAX_VALUES, MIN_VALUES

        keys = self.mapping(node, f"{what}: 'sweep'", ("setting", "values"))
        if "setting" not in keys or "values" not in keys:
            raise self.fail(node, f"{what}: 'sweep' needs a setting and its values, e.g. "
                                  "{setting: mu, values: [0.5, 1, 2]}")
        setting_node, values_node = keys["setting"][1], keys["values"][1]
        setting = self.value(setting_node) if isinstance(setting_node, yaml.ScalarNode) else None
        allowed = sweepable(cls)
        if setting not in allowed:
            raise self.fail(setting_node, f"{what}: the {cls.title} lab cannot sweep {setting!r}; a sweep varies "
                                          f"one of {', '.join(allowed)}")
        if not isinstance(values_node, yaml.SequenceNode) or not MIN_VALUES <= len(values_node.value) <= MAX_VALUES:
            raise self.fail(values_node, f"{what}: a sweep takes a list of {MIN_VALUES} to {MAX_VALUES} values, "
                                         "e.g. [0.5, 1, 2]")
        values = []
        for item in values_node.value:
            raw = self.value(item) if isinstance(item, yaml.ScalarNode) else None
            if isinstance(raw, bool) or not isinstance(raw, (int, float, str)):
                raise self.fail(item, f"{what}: a swept value must be a number; got {raw!r}")
            parsed, errors = lab.parse_settings({setting: raw if isinstance(raw, str) else setting_text(raw)})
            if errors or setting not in parsed:
                raise self.fail(item, f"{what}: {' '.join(errors)}")
            values.append(parsed[setting])
        if len(set(values)) != len(values):
            raise self.fail(values_node, f"{what}: the swept values must differ; got {values!r}")
        return {"sweep": (setting, tuple(values))}
