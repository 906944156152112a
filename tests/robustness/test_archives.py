"""Hostile and malformed .npz uploads against the one archive reader (engine.archive), through
the image-set loader a user reaches and the reader itself (issue 15).

Every bad archive is built here, never committed: decompression bombs (a ~2 MB file whose
member deflates to 2 GiB of zeros, streamed through zipfile in chunks so the test stays
small in memory), object and structured dtypes, a Fortran-order header, huge and
overflowing declared shapes, truncated members, duplicated names, too many members, and
bytes that are no zip.  Each case asserts the exact sentence and how little was
decompressed; one test measures the peak RSS of reading the bombs in a fresh process.
The builders are imported by test_checkpoints.py too.
"""

from __future__ import annotations

import functools
import io
import json
import math
import struct
import subprocess
import sys
import warnings
import zipfile
from pathlib import Path

import numpy as np
import pytest
from numpy.lib import format as npy_format

from boltzlab.engine import archive
from boltzlab.engine.archive import ArchiveSpec, Member, NotAnArchive, read_npz
from boltzlab.engine.images import load_binary_images

ROOT = Path(__file__).resolve().parents[2]
MB = 2**20
BOMB_BYTES = 2**31  # 2 GiB of zeros: deflated, about 2 MB
CHUNK = 4 * MB


# ---------------------------------------------------------------------- builders
def npy(array: np.ndarray) -> bytes:
    """What numpy.save writes for ``array``."""
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=True)
    return buffer.getvalue()


def npy_header(shape: tuple, descr: str = "<f8", fortran: bool = False) -> bytes:
    """A valid .npy (1.0) header declaring ``shape``, whatever data follows it."""
    buffer = io.BytesIO()
    npy_format.write_array_header_1_0(buffer, {"descr": descr, "fortran_order": fortran, "shape": shape})
    return buffer.getvalue()


def raw_npy_header(text: str, version: tuple[int, int] = (1, 0)) -> bytes:
    """A .npy header holding any ``text`` (e.g. what numpy's own writer refuses to write)."""
    body = text.encode("latin1")
    pad = -(10 + len(body) + 1) % 64
    body += b" " * pad + b"\n"
    size = struct.pack("<H", len(body)) if version == (1, 0) else struct.pack("<I", len(body))
    return npy_format.magic(*version) + size + body


def zip_of(members: list[tuple[str, bytes]], compression: int = zipfile.ZIP_DEFLATED) -> bytes:
    """A zip of (name, bytes) members, in order; names may repeat."""
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zipfile warns on a duplicated name: we want one
        with zipfile.ZipFile(buffer, "w", compression) as zf:
            for name, data in members:
                zf.writestr(name, data)
    return buffer.getvalue()


def npz(**arrays: np.ndarray) -> bytes:
    return zip_of([(f"{name}.npy", npy(value)) for name, value in arrays.items()])


def bomb(name: str = "X", header: bytes | None = None, zeros: int = BOMB_BYTES,
         before: tuple[tuple[str, bytes], ...] = ()) -> bytes:
    """A zip whose member ``name``.npy is ``header`` (by default: float64, 2 GiB) and then
    ``zeros`` zero bytes, deflated and streamed in 4 MB chunks; ``before``: members first."""
    header = npy_header((zeros // 8,)) if header is None else header
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as zf:
        for member, data in before:
            zf.writestr(member, data)
        with zf.open(f"{name}.npy", "w", force_zip64=True) as f:
            f.write(header)
            block = bytes(CHUNK)
            for _ in range(zeros // CHUNK):
                f.write(block)
            f.write(bytes(zeros % CHUNK))
    return buffer.getvalue()


@functools.lru_cache(maxsize=None)
def image_bomb() -> bytes:
    """The issue's bomb: one array 'X' of 2 GiB of zeros, honestly declared."""
    return bomb()


@functools.lru_cache(maxsize=None)
def lying_header_bomb() -> bytes:
    """2 GiB of zeros behind a header that declares 16 floats."""
    return bomb(header=npy_header((16,)))


@functools.lru_cache(maxsize=None)
def lying_bomb() -> bytes:
    """The same, and the zip directory also lists the 256 bytes the header implies."""
    return set_listed_size(lying_header_bomb(), "X.npy", 128 + 16 * 8)


@functools.lru_cache(maxsize=None)
def checkpoint_bomb() -> bytes:
    """A TAP checkpoint whose 'W' is 2 GiB of zeros (16384 x 16384 float64)."""
    before = (("boltzlab_checkpoint.npy", npy(np.asarray(1))), ("lab.npy", npy(np.asarray("tap"))),
              ("settings.npy", npy(np.asarray("{}"))), ("runs.npy", npy(np.asarray(["TAP"]))))
    return bomb("state/0/W", header=npy_header((2**14, 2**14)), before=before)


def set_listed_size(content: bytes, name: str, size: int) -> bytes:
    """Patch the uncompressed size the zip's central directory lists for ``name`` (in the
    zip64 extra field when the entry has one)."""
    data = bytearray(content)
    end = data.rfind(b"PK\x05\x06")
    cd_size, cd_offset = struct.unpack_from("<LL", data, end + 12)
    pos = cd_offset
    while pos < cd_offset + cd_size:
        listed = struct.unpack_from("<L", data, pos + 24)[0]
        name_len, extra_len, comment_len = struct.unpack_from("<HHH", data, pos + 28)
        if data[pos + 46:pos + 46 + name_len].decode() == name:
            if listed != 0xFFFFFFFF:
                struct.pack_into("<L", data, pos + 24, size)
                return bytes(data)
            extra = pos + 46 + name_len
            while extra < pos + 46 + name_len + extra_len:
                tag, length = struct.unpack_from("<HH", data, extra)
                if tag == 1:  # zip64: the uncompressed size comes first
                    struct.pack_into("<Q", data, extra + 4, size)
                    return bytes(data)
                extra += 4 + length
        pos += 46 + name_len + extra_len + comment_len
    raise AssertionError(f"{name} is not in the zip directory")


@pytest.fixture
def decompressed(monkeypatch):
    """The number of bytes zipfile's member streams handed out (the reader reads nothing else)."""
    count = [0]
    read = zipfile.ZipExtFile.read

    def counting(self, n=-1):
        data = read(self, n)
        count[0] += len(data)
        return data

    monkeypatch.setattr(zipfile.ZipExtFile, "read", counting)
    return count


def refused(content: bytes) -> str:
    """The sentence the image-set loader answers ``content`` (as an uploaded .npz) with."""
    with pytest.raises(ValueError) as info:
        load_binary_images(content)
    return str(info.value)


# ---------------------------------------------------------------------- bombs
def test_the_bomb_is_small_and_declares_2_gib():
    content = image_bomb()
    assert len(content) < 3 * MB
    with zipfile.ZipFile(io.BytesIO(content)) as zf:
        assert zf.getinfo("X.npy").file_size == 128 + BOMB_BYTES


def test_a_bomb_is_refused_from_its_header(decompressed):
    assert refused(image_bomb()) == "The array 'X' is 2048 MB uncompressed; at most 200 MB are allowed."
    assert decompressed[0] < 1024  # the magic and the header only


def test_a_bomb_behind_a_small_header_is_refused_from_the_zip_directory(decompressed):
    assert refused(lying_header_bomb()) == (
        f"The array 'X' holds {BOMB_BYTES - 128} bytes more than its .npy header describes; save the file again.")
    assert decompressed[0] < 1024


def test_a_bomb_whose_header_and_directory_both_lie_stops_at_the_promised_size(decompressed):
    assert refused(lying_bomb()) == "The array 'X' is damaged (Bad CRC-32 for file 'X.npy'); save the file again."
    assert decompressed[0] < 1024  # 256 bytes promised, 256 read: zipfile stops there


def test_the_arrays_together_may_not_pass_the_total_cap(decompressed):
    spec = ArchiveSpec((Member(r"part\d"),), max_total_bytes=2 * MB)
    content = npz(part1=np.zeros(MB // 8 + 1000), part2=np.zeros(MB // 8))
    with pytest.raises(ValueError) as info:
        read_npz(content, spec)
    assert str(info.value) == "The arrays of the .npz file add up to 2 MB uncompressed; at most 2 MB are allowed."
    assert decompressed[0] < 1024  # refused from the headers, before any data
    assert set(read_npz(npz(part1=np.zeros(10), part2=np.zeros(10)), spec)) == {"part1", "part2"}


def test_reading_the_bombs_keeps_the_peak_rss_under_200_mb(tmp_path):
    """In a fresh process: its peak RSS (ru_maxrss) after the refused reads, minus its RSS
    before them.  Linux carries the peak RSS of the process that starts a program across
    exec (here pytest's), so the reads run in a child the fresh process forks."""
    files = {"image": image_bomb(), "lying_header": lying_header_bomb(), "lying": lying_bomb(),
             "checkpoint": checkpoint_bomb()}
    for key, content in files.items():
        (tmp_path / f"{key}.npz").write_bytes(content)
    script = f"""
import json, os, resource, sys
from pathlib import Path
from boltzlab.engine.images import load_binary_images
from boltzlab.dashboard.labtools import read_checkpoint

def rss_kb():  # the resident set now, in kB (ru_maxrss is the peak so far, in kB)
    return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024

pid = os.fork()
if pid:
    sys.exit(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
files = {{p.stem: p.read_bytes() for p in Path({str(tmp_path)!r}).glob("*.npz")}}
out = {{"rss_before": rss_kb(), "max_before": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, "messages": {{}}}}
for key, content in sorted(files.items()):
    try:
        if key == "checkpoint":
            read_checkpoint(content, lab="tap")
        else:
            load_binary_images(content)
    except ValueError as exc:
        out["messages"][key] = str(exc)
out["max_after"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps(out), flush=True)
os._exit(0)
"""
    result = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout.strip().splitlines()[-1])
    print("peak RSS (kB):", out)  # shown with pytest -s
    assert out["messages"] == {
        "checkpoint": "The array 'state/0/W' is 2048 MB uncompressed; at most 128 MB are allowed.",
        "image": "The array 'X' is 2048 MB uncompressed; at most 200 MB are allowed.",
        "lying": "The array 'X' is damaged (Bad CRC-32 for file 'X.npy'); save the file again.",
        "lying_header": f"The array 'X' holds {BOMB_BYTES - 128} bytes more than its .npy header describes; "
                        "save the file again.",
    }
    assert out["max_before"] - out["rss_before"] < 50 * 1024  # a baseline of this process's own
    assert out["max_after"] - out["rss_before"] < 200 * 1024


# ---------------------------------------------------------------------- dtypes and headers
def test_object_arrays_are_refused_without_unpickling(decompressed):
    class Loud:
        def __reduce__(self):  # would run on unpickling
            return (print, ("unpickled!",))

    evil = np.empty(2, dtype=object)
    evil[:] = Loud()
    assert refused(npz(X=evil)) == ("The array 'X' has dtype object (pickled object arrays, which are never loaded, "
                                    "could run code); save plain numeric arrays.")
    assert decompressed[0] < 1024


def test_structured_dtypes_are_refused():
    table = np.zeros(4, dtype=[("pixel", "<f8"), ("label", "<i8")])
    assert refused(npz(X=table)) == ("The array 'X' has a structured dtype; save each field as a plain array "
                                     "of its own.")
    subarray = raw_npy_header("{'descr': [('', '<f8', (2,))], 'fortran_order': False, 'shape': (3,), }")
    assert refused(zip_of([("X.npy", subarray + bytes(48))])) == (
        "The array 'X' has a structured dtype; save each field as a plain array of its own.")


def test_dtypes_outside_what_the_member_may_be_are_refused():
    assert refused(npz(X=np.zeros((3, 4), dtype=complex))) == (
        "The array 'X' must be numeric (bool, int or float). Got dtype complex128.")
    assert refused(npz(X=np.array([["0", "1"], ["1", "0"]]))) == (
        "The array 'X' must be numeric (bool, int or float). Got dtype <U1.")
    assert refused(npz(X=np.zeros((2, 2, 2, 2)))) == "The array 'X' has 4 dimensions; at most 3 are allowed."


def test_fortran_order_is_read_as_numpy_reads_it():
    X = np.asfortranarray((np.arange(12).reshape(3, 4) % 2).astype(np.uint8))
    content = npz(X=X)
    with zipfile.ZipFile(io.BytesIO(content)) as zf:
        assert b"'fortran_order': True" in zf.read("X.npy")[:128]  # data in column order
    np.testing.assert_array_equal(load_binary_images(content).X_train, X)
    big_endian = np.arange(6, dtype=">f8").reshape(2, 3)
    back = read_npz(npz(a=big_endian), ArchiveSpec((Member("a"),)))["a"]
    assert back.dtype == np.float64 and back.dtype.isnative
    np.testing.assert_array_equal(back, big_endian)


def test_a_fortran_order_that_is_no_bool_is_an_unreadable_header():
    header = raw_npy_header("{'descr': '<f8', 'fortran_order': 1, 'shape': (2, 2), }")
    assert refused(zip_of([("X.npy", header + bytes(32))])) == (
        "The array 'X' has no readable .npy header; save the file again with numpy.savez.")


def test_a_header_of_an_unknown_version_is_refused():
    header = raw_npy_header("{'descr': '<f8', 'fortran_order': False, 'shape': (2, 2), }", version=(3, 0))
    assert refused(zip_of([("X.npy", header + bytes(32))])) == (
        "The array 'X' uses .npy format version 3.0; only versions 1.0 and 2.0 are read.")


@pytest.mark.parametrize("shape", [(2**40, 2**40), (2**33, 2**31), (10**400,)],
                         ids=["huge", "int64-overflow", "400-digits"])
def test_huge_declared_shapes_are_refused_without_overflow(shape, decompressed):
    if shape == (2**33, 2**31):  # what a C int64 product of the shape makes of it
        assert np.prod(np.array(shape, dtype=np.int64)) == 0
    header = raw_npy_header(f"{{'descr': '<f8', 'fortran_order': False, 'shape': {shape}, }}")
    assert refused(zip_of([("X.npy", header + bytes(64))])) == (
        "The array 'X' is more than 1,000,000,000 MB uncompressed; at most 200 MB are allowed.")
    assert decompressed[0] < 1024


def test_negative_dimensions_are_refused():
    header = raw_npy_header("{'descr': '<f8', 'fortran_order': False, 'shape': (-1, 4), }")
    assert refused(zip_of([("X.npy", header)])) == (
        "The array 'X' declares a negative dimension; save the file again with numpy.savez.")


# ---------------------------------------------------------------------- truncated members
def test_a_member_shorter_than_its_header_is_truncated():
    data = npy(np.zeros((4, 4)))
    assert refused(zip_of([("X.npy", data[:-40])])) == (
        f"The array 'X' is truncated: the archive holds {len(data) - 40} of the {len(data)} bytes its .npy "
        "header describes; save the file again.")


def test_a_member_whose_stream_ends_before_the_listed_size_is_truncated():
    data = npy(np.zeros((4, 4)))
    short = zip_of([("X.npy", data[:-40])], compression=zipfile.ZIP_STORED)
    lying = set_listed_size(short, "X.npy", len(data))  # the directory promises it all
    assert refused(lying) == "The array 'X' is truncated: its data ends after 88 of 128 bytes; save the file again."


def test_a_member_whose_data_was_altered_fails_its_crc():
    data = npy(np.zeros((100, 100)))
    content = bytearray(zip_of([("X.npy", data)], compression=zipfile.ZIP_STORED))
    content[content.find(data) + len(data) - 1] = 1  # past the header's read: found as the stream ends
    assert refused(bytes(content)) == "The array 'X' is damaged (Bad CRC-32 for file 'X.npy'); save the file again."


def test_a_cut_file_is_not_an_archive():
    content = npz(X=np.eye(4))
    assert refused(content[: len(content) // 2]) == (
        "The image file is not a readable .npz archive (File is not a zip file).")


# ---------------------------------------------------------------------- names and counts
def test_duplicated_names_are_refused():
    content = zip_of([("X.npy", npy(np.eye(3))), ("X.npy", npy(np.zeros((3, 3))))])
    assert refused(content) == "The .npz file holds the array 'X' twice; save each array once (numpy.savez does)."


def test_too_many_members_are_refused_before_zipfile_lists_them(monkeypatch):
    content = zip_of([(f"a{i}.npy", npy(np.zeros(1))) for i in range(65)] + [("X.npy", npy(np.eye(3)))])

    def no_listing(*args, **kwargs):
        raise AssertionError("zipfile parsed the directory")

    monkeypatch.setattr(archive.zipfile, "ZipFile", no_listing)
    assert refused(content) == "The .npz file holds more than 64 arrays; at most 64 are allowed."


def test_members_that_are_no_npy_are_refused():
    content = zip_of([("X.npy", npy(np.eye(3))), ("notes.txt", b"hello")])
    assert refused(content) == "The .npz file holds 'notes.txt', which is not an .npy array; save the arrays with numpy.savez."


def test_other_compression_methods_are_refused():
    content = zip_of([("X.npy", npy(np.eye(3)))], compression=zipfile.ZIP_BZIP2)
    assert refused(content) == ("The array 'X' is encrypted or compressed with a method other than deflate; "
                                "save the file with numpy.savez or numpy.savez_compressed.")


def test_bytes_that_are_no_zip_are_not_an_archive():
    with pytest.raises(NotAnArchive) as info:
        read_npz(b"PK but not a zip", ArchiveSpec((Member("X"),)))
    assert str(info.value) == "The file is not a readable .npz archive (File is not a zip file)."
    assert isinstance(info.value, ValueError)


def test_unknown_members_are_refused_or_skipped_unread(decompressed):
    refuse = ArchiveSpec((Member("X"),), what="a test set")
    content = npz(X=np.eye(2), evil=np.zeros(MB))
    with pytest.raises(ValueError) as info:
        read_npz(content, refuse)
    assert str(info.value) == "The .npz file holds an array 'evil' that a test set never has."
    decompressed[0] = 0
    arrays = read_npz(content, ArchiveSpec((Member("X"),), unknown="skip"))
    assert list(arrays) == ["X"] and decompressed[0] < 64 * 1024  # the 8 MB 'evil' never decompressed
    np.testing.assert_array_equal(arrays["X"], np.eye(2))


def test_required_members_give_the_callers_sentence():
    spec = ArchiveSpec((Member("X"), Member("y")), required=("X",), missing="No X here.")
    with pytest.raises(ValueError, match=r"^No X here\.$"):
        read_npz(npz(y=np.zeros(2)), spec)


def test_a_good_image_set_still_loads_with_its_labels():
    X = np.random.default_rng(0).integers(0, 2, size=(6, 2, 3)).astype(bool)
    data = load_binary_images(npz(images=X, y=np.arange(6), other=np.zeros(3)))
    assert data.X_train.shape == (6, 6) and data.image_shape == (2, 3)
    np.testing.assert_array_equal(data.y_train, np.arange(6))
    assert math.isclose(float(data.X_train.mean()), float(X.mean()))
