"""The bundled data sets, installed as the package ``boltzlab.engine.assets`` (see ``pyproject.toml``).

This folder is package data: ``boltzlab.engine.resources.assets_dir()`` finds it through
``importlib.resources`` in a wheel, a ``pip install .`` and an editable install alike.
``README.md`` here says where each file comes from and under which licence.
"""
