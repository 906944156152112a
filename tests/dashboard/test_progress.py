"""Progress on long commands (issue 26 item 5): a tqdm bar on a terminal, the lines alone
elsewhere, and the experiments report how far they are."""

from __future__ import annotations

import io

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
