import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
# The repository root first: with tests/ on sys.path (pytest's rootdir conftest),
# `import engine` could otherwise resolve to the namespace package tests/engine.
# HERE makes the helpers next to these tests (fakes.py) importable.
for path in (HERE, ROOT):
    if path in sys.path:
        sys.path.remove(path)
    sys.path.insert(0, path)
