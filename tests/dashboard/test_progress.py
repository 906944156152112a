"""Progress on long commands (issue 26 item 5): a tqdm bar on a terminal, the lines alone
elsewhere, and the experiments report how far they are."""

from __future__ import annotations

import contextlib
import functools
import io
import json
import re

import pytest

from boltzlab.dashboard.progress import TerminalProgress
from boltzlab.engine.experiments import fvbm_simulation
from boltzlab.engine.progress import Reporter


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


class Recorder(list):
    """A progress sink that also counts units, as the CLI's bar does."""

    def __init__(self) -> None:
        super().__init__()
        self.steps: list[tuple[int, int]] = []

    def __call__(self, line: str) -> None:
        self.append(line)

    def advance(self, done: int, total: int) -> None:
        self.steps.append((done, total))


def test_a_terminal_gets_a_bar_and_the_lines_above_it():
    stream = Terminal()
    with TerminalProgress("reproduce fvbm", stream) as progress:
        progress("d=5 run 1/2: 12 sweeps")
        progress.advance(1, 4)
        progress.advance(4, 4)
    text = stream.getvalue()
    assert "d=5 run 1/2: 12 sweeps" in text
    assert "reproduce fvbm" in text and "4/4" in text and "100%" in text


def test_a_log_gets_the_lines_and_no_bar():
    stream = io.StringIO()
    with TerminalProgress("reproduce fvbm", stream) as progress:
        progress("d=5 run 1/2: 12 sweeps")
        progress.advance(1, 4)
    assert stream.getvalue() == "d=5 run 1/2: 12 sweeps\n"
    quiet = io.StringIO()
    with TerminalProgress("bench", quiet, quiet_lines=True) as progress:
        progress("a line")
    assert quiet.getvalue() == ""


def test_a_reporter_counts_units_and_ignores_a_sink_without_advance():
    lines: list[str] = []
    say = Reporter(lines.append)
    say.expect(3)
    say("one")
    say.unit()
    assert lines == ["one"] and (say.done, say.total) == (1, 3)
    sink = Recorder()
    say = Reporter(sink)
    say.expect(2)
    say.unit()
    say.unit()
    say.unit()  # more than expected: the total grows with it, never below done
    assert sink.steps == [(0, 2), (1, 2), (2, 2), (3, 3)]


def test_the_fvbm_reproduction_reports_each_run():
    settings = fvbm_simulation.Settings(dims=(3, 4), n=200, repetitions=2, tol=1e-3, max_sweeps=50)
    sink = Recorder()
    fvbm_simulation.run(settings, progress=sink)
    assert sink.steps == [(1, 4), (2, 4), (3, 4), (4, 4)]
    assert len(sink) == 4 and sink[0].startswith("d=3 run 1/2")


# ------------------------------------------------------------------ bench

# each family's quickest run from the command line (the smallest sizes its flags allow);
# `bench fvbm` has no size flags, so its test shrinks the engine's data (see below)
QUICK_BENCH = {
    "fvbm": ["--seconds", "0.01"],
    "rbm": ["--hidden", "2", "--repeats", "1", "--ais-runs", "2", "--ais-schedule", "live"],
    "tap": ["--hidden", "2", "--chains", "2", "--sweeps", "1", "--repeats", "2"],
    "frankwolfe": ["--hidden", "2", "--insertions", "1", "--repeats", "1", "--samples", "20", "--cd-k", "1"],
    "bound": ["--bits", "4", "--repeats", "2"],
}


def keys(value):
    """The JSON's keys, nested (lists by their items'), not its numbers."""
    if isinstance(value, dict):
        return {k: keys(v) for k, v in value.items()}
    if isinstance(value, list):
        return [keys(v) for v in value]
    return None


def bar_counts(text: str) -> list[tuple[int, int]]:
    """(done, total) of every state the tqdm bar was drawn in."""
    return [(int(done), int(total)) for done, total in re.findall(r"(\d+)/(\d+) \[", text)]


@pytest.mark.parametrize("family", sorted(QUICK_BENCH))
def test_bench_draws_a_bar_on_a_terminal_and_is_silent_in_a_log(family, capsys, monkeypatch):
    from boltzlab.dashboard import cli
    from boltzlab.engine.experiments import bench_fvbm

    # n = 400, d = 4 instead of 16,000 x 20 (a NumPy sweep of those takes seconds on a busy machine)
    monkeypatch.setattr(bench_fvbm, "run", functools.partial(bench_fvbm.run, n=400, d=4))

    argv = ["bench", family, "--json", *QUICK_BENCH[family]]
    terminal = Terminal()
    with contextlib.redirect_stderr(terminal):
        assert cli.main(argv) == 0
    on_terminal = capsys.readouterr()
    steps = bar_counts(terminal.getvalue())
    total = steps[-1][1]
    assert f"bench {family}" in terminal.getvalue() and "100%" in terminal.getvalue()
    assert steps[0] == (0, total) and steps[-1] == (total, total) and total >= 3  # known up front, reached
    assert all(t == total for _, t in steps) and [d for d, _ in steps] == sorted(d for d, _ in steps)
    assert on_terminal.err == ""  # the bar went to the terminal only

    assert cli.main(argv) == 0  # stderr is pytest's capture: not a terminal
    in_a_log = capsys.readouterr()
    assert in_a_log.err == ""
    assert keys(json.loads(in_a_log.out)) == keys(json.loads(on_terminal.out))  # stdout: the JSON alone, either way


def test_every_bench_advances_one_unit_at_a_time_to_a_total_known_up_front():
    """With ``threads`` = 2 the totals count both thread counts (frankwolfe: both passes)."""
    from boltzlab.engine.experiments import bench_bound, bench_frankwolfe, bench_fvbm, bench_rbm, bench_tap

    runs = {
        "fvbm": lambda sink: bench_fvbm.run(n=400, d=4, min_seconds=0.01, threads=2, progress=sink),
        "rbm": lambda sink: bench_rbm.run(hidden=(2,), repeats=1, ais_runs=2, ais_schedule="live", threads=2,
                                          progress=sink),
        "tap": lambda sink: bench_tap.run(hidden=(2,), K=2, n_sweeps=1, repeats=1, threads=2, progress=sink),
        "frankwolfe": lambda sink: bench_frankwolfe.run(hidden=(2,), insertions=1, repeats=1, cd_k=1, samples=20,
                                                        bias_steps=2, burn_in=1, threads=2, progress=sink),
        "bound": lambda sink: bench_bound.run(n_bits=4, repeats=2, numpy_rows=8, progress=sink),
    }
    totals = {"fvbm": 1 + 2 * 2 * 2 + 2, "rbm": 2 * (1 + 1 * 2 * 2 + 2 * 2 * 2) + 1,
              "tap": 2 + 1 * 2 * 8 + 2 * 2, "frankwolfe": 2 * (1 + 1 + 3 * (1 + 1)), "bound": 3 * 2}
    for family, run in runs.items():
        sink = Recorder()
        run(sink)
        total = totals[family]
        assert sink.steps == [(done, total) for done in range(total + 1)], family
