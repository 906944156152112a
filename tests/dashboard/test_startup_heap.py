"""serve freezes the heap it starts with, so Panel's collections after closed sessions walk
only what the sessions made (``app.freeze_startup_heap``)."""

from __future__ import annotations

import json
import subprocess
import sys

SCRIPT = """
import gc, json
from boltzlab.dashboard.app import freeze_startup_heap
before = len(gc.get_objects())
frozen = freeze_startup_heap()
print(json.dumps({"before": before, "frozen": frozen, "tracked": len(gc.get_objects())}))
"""


def test_the_start_heap_is_frozen_and_the_collector_tracks_almost_nothing_after():
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300, check=True)
    counts = json.loads(out.stdout.strip().splitlines()[-1])
    assert counts["frozen"] >= counts["before"] > 10_000
    assert counts["tracked"] < counts["frozen"] / 100
