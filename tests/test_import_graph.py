"""The house has no import cycles: every import in engine/ and dashboard/ (at module level or
inside a function, read with ``ast``, nothing run), as module -> module arrows, has no loop.
And engine/ never imports Panel, Bokeh, param or the dashboard; and nothing, tests included,
imports them under any name but ``boltzlab.engine`` / ``boltzlab.dashboard`` (one copy of
every module's state)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("engine", "dashboard")


def modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(["boltzlab", *parts])] = path
    return found


def imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The project modules ``name`` imports (``from pkg import sub`` -> pkg.sub when that is one)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[:len(anchor) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in known:  # boltzlab.engine.kernels.fvbm.x -> ...kernels.fvbm
                target = target.rpartition(".")[0]
            if target and target != name:
                out.add(target)
    return out


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def test_the_finder_sees_a_cycle_when_there_is_one():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_engine_and_dashboard_have_no_import_cycle():
    found = modules()
    graph = {name: imports(name, path, set(found)) for name, path in found.items()}
    assert sum(len(v) for v in graph.values()) > 100  # the arrows were read
    assert cycles(graph) == []


def test_the_engine_never_imports_the_ui():
    for name, path in modules().items():
        if not name.startswith("boltzlab.engine"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            for imported in names:
                assert imported.split(".")[0] not in ("panel", "bokeh", "param", "holoviews"), (name, imported)
                assert not imported.startswith("boltzlab.dashboard"), (name, imported)


def test_nothing_imports_the_old_top_level_names():
    """``engine`` and ``dashboard`` are folders of the repository, not import packages."""
    for path in sorted(p for top in (*PACKAGES, "tests", "boltzlab") for p in (ROOT / top).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            for imported in names:
                assert imported.split(".")[0] not in PACKAGES, (str(path.relative_to(ROOT)), imported)


def test_running_the_kernels_never_imports_the_old_top_level_names():
    """numba's on-disk cache pickles the module a kernel was compiled in: an entry made under
    the old name ``engine.kernels.x`` and reused (its source file unchanged) imports ``engine``
    again, a second copy of the engine beside ``boltzlab.engine``.  From the repository root,
    where ``engine`` would be importable, loading every kernel group must not do that."""
    import subprocess
    import sys

    code = ("import sys; from boltzlab.engine.warmup import warm_up; warm_up(); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('engine', 'dashboard')))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=1800)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]"
