"""A normal install works, not only an editable checkout (issue 17): build the wheel, install
it into a fresh virtual environment outside the checkout, and from a directory outside the
checkout run ``boltzlab --version``, ``boltzlab fit fvbm`` on the bundled Senate data and
``boltzlab serve`` until ``/liveness`` answers.

Offline and without downloading the dependencies again: the wheel is built with this
environment's setuptools (``pip wheel --no-build-isolation``; the ``test`` extra has it), the
venv sees the packages of the environment running the suite and gets the wheel alone
(``--no-deps --no-index``).  Not by ``--system-site-packages``, which reaches the *base*
interpreter's packages: run from a venv (``python3 -m venv venv && . venv/bin/activate``, then the
README's command) the suite's packages are in that venv, not in the base, and the inner venv
found no numba (issue 27).  Instead a ``.pth`` file in the inner venv adds the running
interpreter's site-packages directories (:func:`running_site_packages`) with
``site.addsitedir``, after the venv's own site-packages, so the wheel installed there is found
first, whether the suite runs on the system interpreter or in a venv.  So that it is the wheel that runs and not the checkout (which this
environment also has, as an editable install), the commands run outside the checkout without
``PYTHONPATH``, and the test checks that ``boltzlab.engine``, ``boltzlab.dashboard`` and the
bundled data are imported from the venv, and that ``boltzlab`` is the wheel's only top-level name.  The venv compiles the numba kernels afresh (their cache lives next
to the installed sources): a minute or more, more on a busy machine.

Also: ``constraints.txt`` pins every requirement of ``pyproject.toml`` within its range.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import site
import subprocess
import sys
import sysconfig
import tomllib
import urllib.request
import zipfile
from pathlib import Path

import pytest

from tests.serving import free_port
from tests.waiting import wait_for

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("engine", "dashboard")
DATA = ("senate_knn1_imputed.csv", "senate_pm1_with_na.csv", "senate_raw.csv",
        "mnist_binary.npz", "digits_binary.npz", "README.md")
# the installed tests: a build, a venv and a fresh numba compile take a minute or more
slow = pytest.mark.slow
# what a checkout has that a build must not see: VCS, caches, build output, test output
NOT_SOURCES = shutil.ignore_patterns(".git", ".hypothesis", ".pytest_cache", ".benchmarks", "__pycache__",
                                     "*.egg-info", "build", "dist", "test-artifacts", "reproduce-output",
                                     "*.nbi", "*.nbc", "*.pyc")


def project() -> dict:
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["project"]


def version() -> str:
    return project()["version"]


def run(command: list, cwd: Path, env: dict, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run([str(c) for c in command], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def check(out: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert out.returncode == 0, f"{out.args} exited {out.returncode}:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    return out


def running_site_packages() -> list[str]:
    """The site-packages directories of the interpreter running the suite: a venv's own (and
    its base's, if it was made with --system-site-packages), or the system interpreter's."""
    dirs = [*site.getsitepackages(), sysconfig.get_path("purelib"), sysconfig.get_path("platlib")]
    return [d for d in dict.fromkeys(dirs) if os.path.isdir(d)]


def make_venv(venv: Path, cwd: Path, env: dict) -> Path:
    """A venv at ``venv`` that sees the running environment's packages after its own; its python."""
    check(run([sys.executable, "-m", "venv", "--without-pip", venv], cwd=cwd, env=env))
    python = venv / "bin" / "python"
    own = check(run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], cwd=cwd, env=env))
    # site.addsitedir also runs those directories' own .pth files, as --system-site-packages would
    lines = [f"import site; site.addsitedir({d!r})" for d in running_site_packages()]
    (Path(own.stdout.strip()) / "_boltzlab_running_environment.pth").write_text("\n".join(lines) + "\n")
    return python


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(venv's python, venv's boltzlab, a work directory, the environment to run them in, the
    wheel) for the project built as a wheel and installed into a fresh venv outside the checkout."""
    base = tmp_path_factory.mktemp("install")
    assert not base.resolve().is_relative_to(ROOT), f"{base} is inside the checkout"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env["PYTHONNOUSERSITE"] = "1"
    # build from a copy of the sources: an in-tree build would write build/ into the checkout
    source = base / "source"
    shutil.copytree(ROOT, source, ignore=NOT_SOURCES)
    dist = base / "dist"
    check(run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
               "--wheel-dir", dist, source], cwd=base, env=env))
    (wheel,) = dist.glob("boltzlab-*.whl")
    venv = base / "venv"
    python = make_venv(venv, base, env)
    # pip comes from the running environment's site-packages and installs into the venv
    check(run([python, "-m", "pip", "install", "--no-deps", "--no-index", "--ignore-installed", wheel],
              cwd=base, env=env))
    work = base / "work"
    work.mkdir()
    return python, venv / "bin" / "boltzlab", work, env, wheel


@slow
def test_the_wheel_holds_every_package_and_the_bundled_data(installed):
    wheel = installed[4]
    names = set(zipfile.ZipFile(wheel).namelist())
    checkout = sorted(f"boltzlab/{init.parent.relative_to(ROOT)}" for top in PACKAGES
                      for init in (ROOT / top).rglob("__init__.py") if "__pycache__" not in init.parts)
    missing = [package for package in checkout if f"{package}/__init__.py" not in names]
    assert not missing, f"packages missing from the wheel (add them to pyproject's packages): {missing}"
    assert [f for f in DATA if f"boltzlab/engine/assets/{f}" not in names] == []
    lessons = sorted(p.name for p in (ROOT / "dashboard" / "lessons").glob("*.yaml"))  # the built-in lessons
    assert lessons and [f for f in lessons if f"boltzlab/dashboard/lessons/{f}" not in names] == []
    # one top-level import package (issue 24): nothing of another distribution's to overwrite
    assert {n.split("/")[0] for n in names if ".dist-info" not in n.split("/")[0]} == {"boltzlab"}
    assert not [n for n in names if n.endswith(".png")]  # the README's screenshots stay out


@slow
def test_the_venv_imports_the_wheel_not_the_checkout(installed):
    python, _, work, env, _ = installed
    out = check(run([python, "-c", """if True:
        import importlib.util, json, sys
        from boltzlab.engine.resources import assets_dir
        print(json.dumps({"prefix": sys.prefix,
                          "engine": importlib.util.find_spec("boltzlab.engine").origin,
                          "dashboard": importlib.util.find_spec("boltzlab.dashboard").origin,
                          "assets": str(assets_dir())}))"""], cwd=work, env=env))
    where = json.loads(out.stdout)
    venv = Path(where.pop("prefix")).resolve()
    for name, path in where.items():
        assert Path(path).resolve().is_relative_to(venv), f"{name} comes from {path}, not from the venv {venv}"
    assert (Path(where["assets"]) / "senate_knn1_imputed.csv").is_file()


@slow
def test_version(installed):
    _, boltzlab, work, env, _ = installed
    assert check(run([boltzlab, "--version"], cwd=work, env=env)).stdout.strip() == f"boltzlab {version()}"


@slow
def test_fit_fvbm_on_the_bundled_senate_data(installed):
    python, boltzlab, work, env, _ = installed
    senate = check(run([python, "-c", "from boltzlab.engine.resources import asset; print(asset('senate_knn1_imputed.csv'))"],
                       cwd=work, env=env)).stdout.strip()
    result = json.loads(check(run([boltzlab, "fit", "fvbm", senate, "--json"], cwd=work, env=env)).stdout)
    assert math.isfinite(result["log_pl"]) and len(result["M"]) == 9


@slow
def test_serve_answers_liveness(installed):
    _, boltzlab, work, env, _ = installed
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    log = work / "serve.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([str(boltzlab), "serve", "--port", str(port), "--address", "127.0.0.1", "--workers", "0"],
                                cwd=work, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
    try:
        def answers(path: str) -> bool:
            if proc.poll() is not None:
                return True  # exited: stop waiting (checked below)
            try:
                with urllib.request.urlopen(base + path, timeout=30) as response:
                    return response.status == 200
            except OSError:
                return False

        # the first start compiles every numba kernel of the fresh install: wait on it, generously
        wait_for(lambda: answers("/liveness"), timeout=1200, interval=1.0)
        tail = log.read_text(errors="replace")[-3000:]
        assert proc.poll() is None, f"boltzlab serve exited with {proc.returncode}:\n{tail}"
        assert answers("/liveness"), f"no answer from {base}/liveness:\n{tail}"
        with urllib.request.urlopen(base + "/fvbm", timeout=300) as response:  # a session builds a lab
            assert response.status == 200 and "Boltzmann Lab" in response.read().decode()
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=60)


def test_constraints_pin_every_requirement_within_its_range():
    """constraints.txt (the README's test command installs with it) pins each dependency and
    test dependency of pyproject.toml, at a version its range allows."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, _, pinned = line.partition("==")
            assert pinned, f"not an exact pin: {line!r}"
            pins[canonicalize_name(name)] = pinned
    meta = project()
    for text in [*meta["dependencies"], *meta["optional-dependencies"]["test"]]:
        requirement = Requirement(text)
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{requirement.name} is not pinned in constraints.txt"
        assert requirement.specifier.contains(pins[name], prereleases=True), \
            f"constraints.txt pins {requirement.name}=={pins[name]}, outside {text!r}"
    for ui in ("panel", "bokeh", "numba"):  # bounded at the next major version (issue 17)
        (text,) = [t for t in meta["dependencies"] if canonicalize_name(Requirement(t).name) == ui]
        assert any(s.operator == "<" for s in Requirement(text).specifier), f"{text!r} has no upper bound"
