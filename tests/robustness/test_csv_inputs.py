"""Bad and awkward CSV files, given to `boltzlab fit fvbm FILE` and uploaded to the FVBM lab
(issue 15).

Every file is built here in ``tmp_path``: empty, header only, one column, ragged rows,
non-UTF-8 bytes, UTF-16 (NUL bytes), a 200 kB field, a directory, 60 MB (over the 50 MB
limit).  Each is
refused with the exact sentence: by the command line on stderr with exit code 2 (bad input)
and no traceback, and by the lab in its data message, the session unchanged (same data, same
trainers, same history).  A UTF-8 BOM, CRLF and a lone CR (Excel's exports) in an otherwise
valid file are accepted and give exactly the plain file's data and fit.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import subprocess
import sys

import numpy as np
import pytest

from boltzlab import engine
from boltzlab.dashboard import cli
from boltzlab.dashboard.labs.fvbm import FVBMLab
from boltzlab.engine.data import MAX_CSV_BYTES, load_fvbm_csv
from tests.waiting import tick

MB = 2**20
# every ±1 pattern of three votes (so the MPLE exists), p and q agreeing more often
ROWS = [row for row in itertools.product([-1, 1], repeat=3)
        for _ in range(2 + 4 * (row[0] == row[1]) + (row[1] == row[2]))]
GOOD = "p,q,r\n" + "".join(",".join(map(str, row)) + "\n" for row in ROWS)

#: bytes -> the exact sentence the reader refuses them with
BAD = {
    "empty": (b"", "The data file is empty: it has no rows of data."),
    "blank lines": (b"\n\r\n  \n", "The data file is empty: it has no rows of data."),
    "header only": (b"p,q,r\r\n", "The data file has a header row but no rows of data."),
    "one column": (b"p\n1\n-1\n1\n", "The data file has 1 column; an FVBM needs at least 2 variables (columns)."),
    "ragged short": (b"p,q,r\n1,-1,1\n-1,1\n", "Line 3 of the data file has 2 values; the first row has 3."),
    "ragged one": (b"p,q,r\n1,-1,1\n-1\n", "Line 3 of the data file has 1 value; the first row has 3."),
    "ragged long": (b"p,q\n1,-1\n-1,1,1\n", "Line 3 of the data file has 3 values; the first row has 2."),
    "latin-1": ("caf\u00e9,q\n1,-1\n".encode("latin-1"), "The data file is not UTF-8 text (byte 3)."),
    "utf-16 with BOM": (GOOD.encode("utf-16"), "The data file is not UTF-8 text (byte 0)."),
    "utf-16 without BOM": (GOOD.encode("utf-16-le"),
                           "The data file holds NUL bytes, so it is not CSV text: save it as CSV (UTF-8)."),
    "xlsx": (b"PK\x03\x04\x14\x00\x06\x00\x08\x00\x00\x00!\x00\xb3\x9c", "The data file is not UTF-8 text (byte 14)."),
    "a 200 kB field": (b"p,q\n" + b"1" * 200_000 + b",1\n",
                       "The data file is not readable as CSV (field larger than field limit (131072))."),
}
#: Excel's exports of GOOD: must give exactly GOOD's data
ACCEPTED = {
    "utf-8 BOM": b"\xef\xbb\xbf" + GOOD.encode(),
    "CRLF": GOOD.replace("\n", "\r\n").encode(),
    "BOM and CRLF": b"\xef\xbb\xbf" + GOOD.replace("\n", "\r\n").encode(),
    "lone CR (Excel for Mac)": GOOD.replace("\n", "\r").encode(),
    "BOM, CRLF and semicolons": b"\xef\xbb\xbf" + GOOD.replace(",", ";").replace("\n", "\r\n").encode(),
}
TOO_BIG = "The data file is 60.0 MB; at most 50 MB are allowed."


def fit(path) -> tuple[int, str, str]:
    """``boltzlab fit fvbm PATH --json`` in this process: exit code, stdout, stderr."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(["fit", "fvbm", str(path), "--json"])
    return code, out.getvalue(), err.getvalue()


def refused_by_cli(path) -> str:
    code, out, err = fit(path)
    assert code == cli.EXIT_BAD_INPUT == 2 and out == "", (code, err)
    assert err.endswith("\n") and err.count("\n") == 1, err  # one line
    assert err.startswith("boltzlab: error: ")
    return err[len("boltzlab: error: "):-1]


def sixty_mb(tmp_path):
    """A 60 MB CSV of valid rows (written in pieces, so never all in memory here)."""
    path = tmp_path / "big.csv"
    rows = (60 * MB - 6) // 7
    with path.open("wb") as f:
        f.write(b"p,q,r\n")
        for start in range(0, rows, MB):
            f.write(b"1,-1,1\n" * min(MB, rows - start))
    assert 60 * MB - 7 < path.stat().st_size <= 60 * MB and path.stat().st_size > MAX_CSV_BYTES
    return path


# ------------------------------------------------------------------- command line
@pytest.mark.parametrize("case", list(BAD))
def test_the_command_line_refuses_a_bad_file_with_a_sentence_and_exit_code_2(case, tmp_path):
    content, sentence = BAD[case]
    path = tmp_path / "data.csv"
    path.write_bytes(content)
    assert refused_by_cli(path) == sentence


def test_the_command_line_refuses_a_directory(tmp_path):
    folder = tmp_path / "votes.csv"
    folder.mkdir()
    assert refused_by_cli(folder) == f"The data file {str(folder)!r} does not exist or is not a file."


def test_the_command_line_refuses_a_60_mb_file_before_reading_it(tmp_path):
    assert refused_by_cli(sixty_mb(tmp_path)) == TOO_BIG


def test_the_installed_command_says_the_same_and_exits_2(tmp_path):
    """The real process (no traceback, the exit code the shell sees)."""
    path = tmp_path / "ragged.csv"
    path.write_bytes(BAD["ragged short"][0])
    out = subprocess.run([sys.executable, "-m", "boltzlab", "fit", "fvbm", str(path)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr == "boltzlab: error: Line 3 of the data file has 2 values; the first row has 3.\n"


@pytest.mark.parametrize("case", list(ACCEPTED))
def test_excel_exports_are_read_exactly_like_the_plain_file(case, tmp_path):
    plain, export = tmp_path / "plain.csv", tmp_path / "export.csv"
    plain.write_text(GOOD, encoding="utf-8", newline="")
    export.write_bytes(ACCEPTED[case])
    expected = load_fvbm_csv(plain)
    data = load_fvbm_csv(export)
    assert data.columns == ["p", "q", "r"]  # no BOM in the first name, no \r in the last
    assert np.array_equal(data.X, expected.X) and data.X.shape == (len(ROWS), 3)
    code, out, err = fit(export)
    assert code == 0 and err == "", err
    result, reference = json.loads(out), json.loads(fit(plain)[1])
    assert result["columns"] == ["p", "q", "r"] and result["n"] == len(ROWS)
    assert result["b"] == reference["b"] and result["M"] == reference["M"]


# ------------------------------------------------------------------- the lab's upload
@pytest.fixture(scope="module", autouse=True)
def _warm():
    engine.warm_up()


@pytest.fixture
def lab():
    lab = FVBMLab()
    lab.panel()
    lab.runner.step_once()  # a run with a history, which a bad upload must keep
    assert lab.runner.wait_idle(120)
    tick(lab)
    yield lab
    lab.close()


def session(lab) -> tuple:
    """What a bad upload must not change: the data, the upload, the trainers and their history."""
    history = {name: [{k: v for k, v in row.items() if "time" not in k and "second" not in k} for row in rows]
               for name, rows in lab.runner.history.rows.items()}
    return lab.data, lab._uploaded, list(lab.runner.trainers), history


def upload(lab, name: str, content: bytes) -> None:
    """What the page's "Upload" does: pick the source, then the file (read as a job).

    Through ``use_upload``, which the file widget calls: the widget's watcher skips an empty
    value (``if event.new``), so an empty file picked in the page is not read at all."""
    lab.widgets["source"].value = "upload"
    lab.use_upload(content, name)
    assert lab.jobs.wait(120)


def assert_refused(lab, before, sentence: str) -> None:
    assert session(lab) == before
    assert lab.data_msg.pane.visible and lab.data_msg.level == "error"
    assert lab.data_msg.text == (f"**Could not use this data:** {sentence}  \n"
                                 "Still using: simulated d=10, n=16000, seed=1.")


@pytest.mark.parametrize("case", list(BAD))
def test_the_lab_refuses_a_bad_upload_and_keeps_the_session(case, lab):
    content, sentence = BAD[case]
    before = session(lab)
    upload(lab, "data.csv", content)
    assert_refused(lab, before, sentence)


def test_the_lab_refuses_a_60_mb_upload_and_keeps_the_session(lab, tmp_path):
    content = sixty_mb(tmp_path).read_bytes()
    before = session(lab)
    upload(lab, "big.csv", content)
    assert_refused(lab, before, TOO_BIG)


@pytest.mark.parametrize("case", ["utf-8 BOM", "BOM and CRLF", "lone CR (Excel for Mac)"])
def test_the_lab_accepts_excel_exports(case, lab):
    upload(lab, "export.csv", ACCEPTED[case])
    assert not lab.data_msg.pane.visible
    assert lab.data.data.columns == ["p", "q", "r"] and lab.data.data.name == "export.csv"
    assert np.array_equal(lab.data.data.X, load_fvbm_csv(GOOD.encode()).X)
    assert lab.heat_est.labels == ["p", "q", "r"]
