"""Data sets: simulated, bundled and user files, and all their input validation.

Everything a user supplies passes through here and fails with a ValueError that names the
row and column at fault; nothing is ever unpickled.
"""

from __future__ import annotations

import csv
import io
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

# the MPLE's existence check lives beside the model it is about; named here too (its old home)
from .fvbm import FVBM, check_data, check_mple_exists  # noqa: F401
from .resources import assets_dir

ASSETS = assets_dir()  # the bundled data (package data: engine.resources)
MAX_CSV_BYTES = 50 * 1024 * 1024
MAX_COLUMNS = 200

MISSING_TOKENS = {"", "na", "n/a", "nan", "null", "none", "?"}
CODINGS = {  # token -> value in {-1, +1}; a file must use one coding throughout
    "pm1": {"-1": -1.0, "1": 1.0, "+1": 1.0, "-1.0": -1.0, "1.0": 1.0},
    "01": {"0": -1.0, "1": 1.0, "0.0": -1.0, "1.0": 1.0},
    "yesno": {"yes": 1.0, "no": -1.0, "y": 1.0, "n": -1.0},
}


@dataclass
class FVBMData:
    """Binary observations for an FVBM: X is (n, d) float64 with entries in {-1, +1}."""

    X: np.ndarray
    columns: list[str]
    name: str
    dropped_rows: int = 0
    truth: FVBM | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def n(self) -> int:
        return int(self.X.shape[0])

    @property
    def d(self) -> int:
        return int(self.X.shape[1])


# ----------------------------------------------------------------------- simulated


def simulate_fvbm(d: int, n: int, seed: int, variance: float = 0.5) -> FVBMData:
    """§5 of Nguyen & Wood: M0, b0 ~ N(0, variance) and n draws from that FVBM.

    The truth comes from ``seed`` and the sample from ``seed + 1``; sampling is exact for
    d <= 20 (Gibbs beyond).
    """
    if isinstance(d, bool) or not isinstance(d, (int, np.integer)) or not 2 <= d <= MAX_COLUMNS:
        raise ValueError(f"The 'd' parameter of simulate_fvbm must be an int in [2, {MAX_COLUMNS}]. Got {d!r}.")
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or not 1 <= n <= 10_000_000:
        raise ValueError(f"The 'n' parameter of simulate_fvbm must be an int in [1, 10000000]. Got {n!r}.")
    truth = FVBM.random(int(d), seed, variance)
    X = truth.sample(int(n), seed + 1)
    return FVBMData(X, [f"x{j + 1}" for j in range(d)], f"simulated d={d}, n={n}, seed={seed}", truth=truth)


# ------------------------------------------------------------------------- bundled


def senate(drop_govt: bool = True) -> FVBMData:
    """Australian Senate divisions, 45th Parliament (2016): 147 votes of 9 parties.

    The k-NN-imputed version from the R package BoltzMM (see assets/README.md); with
    ``drop_govt`` the Government column is dropped, as in the BoltzMM analysis (147 x 8).
    """
    data = load_fvbm_csv(ASSETS / "senate_knn1_imputed.csv", name="Australian Senate 2016")
    return drop_columns(data, ["Govt"]) if drop_govt else data


def drop_columns(data: FVBMData, names: list[str]) -> FVBMData:
    """``data`` without the named columns (``boltzlab fit fvbm --drop``; the lab's Senate set).

    Raises ValueError for a name that is not a column, or when fewer than two would be left.
    """
    unknown = [n for n in names if n not in data.columns]
    if unknown:
        raise ValueError(f"No column named {unknown[0]!r} to drop; the columns are {', '.join(data.columns)}.")
    keep = [j for j, c in enumerate(data.columns) if c not in names]
    if len(keep) < 2:
        raise ValueError(f"Dropping {', '.join(names)} leaves {len(keep)} column(s); an FVBM needs at least 2.")
    return FVBMData(data.X[:, keep].copy(), [data.columns[j] for j in keep],
                    f"{data.name} ({', '.join(names)} dropped)", dropped_rows=data.dropped_rows)


# ---------------------------------------------------------------------- user files


def load_fvbm_csv(source: str | os.PathLike | bytes, name: str | None = None) -> FVBMData:
    """Read binary observations from CSV: rows are observations, one column per variable.

    Values may be coded -1/1, 0/1 or Yes/No (case-insensitive), one coding per file; a
    header row is allowed.  Rows with a missing value (empty, NA, NaN, ?) are dropped and
    counted in ``dropped_rows``.  Raises ValueError naming the row and column of the first
    problem: a wrong value, a ragged row, fewer than two columns, no data, > 50 MB.
    """
    if isinstance(source, (bytes, bytearray)):
        raw = bytes(source)
        label = name or "upload"
    else:
        path = Path(source)
        if not path.is_file():
            raise ValueError(f"The data file {str(path)!r} does not exist or is not a file.")
        size = path.stat().st_size
        if size > MAX_CSV_BYTES:
            raise ValueError(f"The data file is {size / 2**20:.1f} MB; at most {MAX_CSV_BYTES // 2**20} MB are allowed.")
        raw = path.read_bytes()
        label = name or path.name
    if len(raw) > MAX_CSV_BYTES:
        raise ValueError(f"The data file is {len(raw) / 2**20:.1f} MB; at most {MAX_CSV_BYTES // 2**20} MB are allowed.")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ValueError(f"The data file is not UTF-8 text (byte {exc.start}).") from exc
    if "\x00" in text:  # UTF-16 without a BOM, or a binary file: csv would raise
        raise ValueError("The data file holds NUL bytes, so it is not CSV text: save it as CSV (UTF-8).")
    try:
        dialect = csv.Sniffer().sniff(text[:4096], delimiters=",;\t ")
    except csv.Error:
        dialect = csv.excel
    # newline=None: \r\n and a lone \r (Excel for Mac's "CSV (Macintosh)") end lines too
    try:
        rows = [[cell.strip().strip('"').strip() for cell in row]
                for row in csv.reader(io.StringIO(text, newline=None), dialect)]
    except csv.Error as exc:
        raise ValueError(f"The data file is not readable as CSV ({exc}).") from None
    numbered = [(line, row) for line, row in enumerate(rows, start=1) if any(cell for cell in row)]
    if not numbered:
        raise ValueError("The data file is empty: it has no rows of data.")

    vocabulary = set(MISSING_TOKENS).union(*CODINGS.values())
    first_line, first = numbered[0]
    has_header = any(cell.lower() not in vocabulary for cell in first)
    if has_header:
        columns = first
        numbered = numbered[1:]
        if not numbered:
            raise ValueError("The data file has a header row but no rows of data.")
    else:
        columns = [f"x{j + 1}" for j in range(len(first))]
    d = len(columns)
    if d < 2:
        raise ValueError(f"The data file has {d} column; an FVBM needs at least 2 variables (columns).")
    if d > MAX_COLUMNS:
        raise ValueError(f"The data file has {d} columns; at most {MAX_COLUMNS} are allowed.")

    coding = None
    values = []
    dropped = 0
    for line, row in numbered:
        if len(row) != d:
            raise ValueError(f"Line {line} of the data file has {len(row)} value{'s' * (len(row) != 1)}; "
                             f"the first row has {d}.")
        tokens = [cell.lower() for cell in row]
        if any(tok in MISSING_TOKENS for tok in tokens):
            dropped += 1
            continue
        out = np.empty(d)
        for j, tok in enumerate(tokens):
            if coding is None or tok not in CODINGS[coding]:
                matches = [c for c in CODINGS if tok in CODINGS[c]]
                if not matches:
                    raise ValueError(
                        f"Line {line}, column {j + 1} ({columns[j]!r}) of the data file holds {row[j]!r}; "
                        "allowed are -1/1, 0/1 or Yes/No (one coding per file) and NA for missing."
                    )
                if coding is None:
                    coding = _pick_coding(matches, tokens)
                elif coding not in matches:
                    raise ValueError(
                        f"Line {line}, column {j + 1} ({columns[j]!r}) holds {row[j]!r}, but earlier rows use "
                        f"the {_CODING_NAMES[coding]} coding; use one coding per file."
                    )
            out[j] = CODINGS[coding][tok]
        values.append(out)
    if not values:
        raise ValueError(f"The data file has no complete rows: all {dropped} rows have a missing value.")
    X = check_data(np.array(values), "load_fvbm_csv")
    data = FVBMData(X, columns, label, dropped_rows=dropped)
    if dropped:
        data.notes.append(f"dropped {dropped} of {dropped + len(values)} rows with missing values")
    return data


_CODING_NAMES = {"pm1": "-1/1", "01": "0/1", "yesno": "Yes/No"}


def _pick_coding(matches: list[str], tokens: list[str]) -> str:
    """The coding for a row whose first token fits several ('1' is in -1/1 and 0/1)."""
    if len(matches) == 1:
        return matches[0]
    for coding in ("pm1", "01", "yesno"):
        if coding in matches and all(t in CODINGS[coding] for t in tokens):
            if any(t in ("-1", "-1.0") for t in tokens) or any(t in ("0", "0.0") for t in tokens):
                return coding
    # a row of only 1s: decide on the next distinguishing token; -1/1 is as good as any
    return matches[0]


# -------------------------------------------------------------- MPLE existence
