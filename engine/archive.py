"""One reader for every ``.npz`` a user can upload (checkpoints, image sets, anything later).

Why not ``numpy.load``: an ``.npz`` is a zip archive, and ``numpy.load`` decompresses a
member as soon as it is asked for, whatever its size.  A 2 MB upload can hold one deflated
2 GB array of zeros (a decompression bomb); at a 50 MB upload limit the same trick asks for
about 50 GB, and the out-of-memory killer ends the server with every session on it.
:func:`read_npz` looks first and decompresses last:

1. the zip directory: how many members (bounded in the raw bytes before ``zipfile`` parses
   the directory), their names (each an ``.npy``, none twice, each allowed by the caller's
   :class:`ArchiveSpec`) and how they are compressed;
2. every member's ``.npy`` header (a few hundred bytes): no object arrays (they are
   pickles), no structured dtypes, only the dtype kinds and number of dimensions the caller
   allows, a data size (exact Python ints: no overflow) under the member's cap, the size
   the zip lists equal to the size the header implies, and the sizes of all the members
   read under the total cap (by default 4x the compressed upload limit);
3. only then the data, in chunks, into buffers sized from the headers.  No member is read
   past what its header promised (a stream that goes on fails zipfile's CRC check at that
   point), so the total decompressed stays under the cap whatever the compressed streams
   hold; a member that ends early is refused as truncated.

Every refusal is a ``ValueError`` whose message is one sentence a user can act on
(:class:`NotAnArchive`, a subclass, when the bytes are no zip archive at all).  Pickles are
never loaded (``allow_pickle=False``).  Fortran-ordered members are read as ``numpy.load``
reads them; big-endian ones are byte-swapped to native order in place.
"""

from __future__ import annotations

import io
import re
import zipfile
import zlib
from dataclasses import dataclass

import numpy as np
from numpy.lib import format as npy_format

MB = 2**20
UPLOAD_LIMIT = 50 * MB  # the compressed size the app accepts for an upload
CHUNK = MB  # bytes decompressed per read
_CENTRAL_ENTRY = b"PK\x01\x02"  # signature of each zip directory entry
_KIND_NAMES = {"b": "bool", "i": "int", "u": "int", "f": "float"}


class NotAnArchive(ValueError):
    """The bytes are not a readable zip archive at all (``reason`` says what zipfile found)."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"The file is not a readable .npz archive ({reason}).")
        self.reason = reason


@dataclass(frozen=True)
class Member:
    """What the members whose name (without ``.npy``) fully matches ``pattern`` may hold:
    dtype ``kinds`` (numpy's ``dtype.kind`` letters, e.g. ``"biuf"`` numbers, ``"U"``
    text), at most ``max_ndim`` dimensions and ``max_bytes`` of data (None: only the
    archive's total cap)."""

    pattern: str
    kinds: str = "biuf"
    max_ndim: int = 2
    max_bytes: int | None = None


@dataclass(frozen=True)
class ArchiveSpec:
    """What an archive may hold.

    ``unknown``: ``"refuse"`` a member that matches no :class:`Member`, or ``"skip"`` it
    (its header is still checked; its data is never decompressed).  ``required``: names
    that must be present, else ``ValueError(missing)``.  ``what`` names the file in
    messages ("a Boltzmann Lab checkpoint").
    """

    members: tuple[Member, ...]
    max_members: int = 64
    max_total_bytes: int = 4 * UPLOAD_LIMIT
    unknown: str = "refuse"
    required: tuple[str, ...] = ()
    missing: str = "The .npz file lacks the arrays it needs."
    what: str = "this kind of file"

    def member(self, name: str) -> Member | None:
        return next((m for m in self.members if re.fullmatch(m.pattern, name)), None)


@dataclass(frozen=True)
class _Header:
    info: zipfile.ZipInfo
    name: str
    shape: tuple[int, ...]
    fortran: bool
    dtype: np.dtype
    offset: int  # bytes of the .npy header: the data starts here
    nbytes: int


def read_npz(content: bytes, spec: ArchiveSpec) -> dict[str, np.ndarray]:
    """The arrays of ``content`` (an ``.npz``) that ``spec`` allows, by name without ``.npy``.

    Checks everything the module docstring lists before decompressing any data; raises
    ``ValueError`` (:class:`NotAnArchive` for bytes that are no zip) with one sentence.
    """
    # zipfile builds an object per directory entry before we can count them (a 50 MB
    # directory of tiny entries would cost ~0.5 GB), so count their signatures first: every
    # entry zipfile parses starts with one, and data holding a few more only errs on the safe side
    if content.count(_CENTRAL_ENTRY) > spec.max_members:
        raise ValueError(f"The .npz file holds more than {spec.max_members} arrays; "
                         f"at most {spec.max_members} are allowed.")
    try:
        archive = zipfile.ZipFile(io.BytesIO(content))
    except Exception as exc:  # noqa: BLE001 - BadZipFile, OSError, EOFError, ...: not a zip
        raise NotAnArchive(str(exc) or type(exc).__name__) from None
    with archive:
        headers = [_read_header(archive, info) for info in _checked_names(archive.infolist())]
        names = {h.name for h in headers}
        if any(name not in names for name in spec.required):
            raise ValueError(spec.missing)
        wanted, total = [], 0
        for h in headers:
            member = spec.member(h.name)
            if member is None:
                if spec.unknown == "skip":
                    continue
                raise ValueError(f"The .npz file holds an array {_quote(h.name)} that {spec.what} never has.")
            _check_against(h, member, spec)
            wanted.append(h)
            total += h.nbytes
        if total > spec.max_total_bytes:
            raise ValueError(f"The arrays of the .npz file add up to {_size(total)} uncompressed; "
                             f"at most {_size(spec.max_total_bytes)} are allowed.")
        return {h.name: _read_data(archive, h) for h in wanted}


def _checked_names(infos: list[zipfile.ZipInfo]) -> list[zipfile.ZipInfo]:
    seen = set()
    for info in infos:
        name = info.filename
        if not name.endswith(".npy"):
            raise ValueError(f"The .npz file holds {_quote(name)}, which is not an .npy array; "
                             "save the arrays with numpy.savez.")
        if name in seen:
            raise ValueError(f"The .npz file holds the array {_quote(name[:-4])} twice; "
                             "save each array once (numpy.savez does).")
        seen.add(name)
        if info.flag_bits & 0x1 or info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
            raise ValueError(f"The array {_quote(name[:-4])} is encrypted or compressed with a method other "
                             "than deflate; save the file with numpy.savez or numpy.savez_compressed.")
    return infos


def _read_header(archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> _Header:
    """The member's .npy header, checked for what no caller may accept."""
    name = info.filename[:-4]
    readers = {(1, 0): npy_format.read_array_header_1_0, (2, 0): npy_format.read_array_header_2_0}
    try:
        with archive.open(info) as f:
            version = npy_format.read_magic(f)
            read = readers.get(version)
            if read is not None:
                shape, fortran, dtype = read(f)
                offset = f.tell()
    except _DAMAGED as exc:
        raise _damaged(name, exc) from None
    except Exception:  # noqa: BLE001 - no magic, a header numpy cannot parse, ...
        raise ValueError(f"The array {_quote(name)} has no readable .npy header; save the file again "
                         "with numpy.savez.") from None
    if read is None:
        raise ValueError(f"The array {_quote(name)} uses .npy format version {version[0]}.{version[1]}; "
                         "only versions 1.0 and 2.0 are read.")
    if dtype.hasobject:
        raise ValueError(f"The array {_quote(name)} has dtype object (pickled object arrays, which are never "
                         "loaded, could run code); save plain numeric arrays.")
    if dtype.names is not None or dtype.subdtype is not None:
        raise ValueError(f"The array {_quote(name)} has a structured dtype; save each field as a plain array "
                         "of its own.")
    if any(d < 0 for d in shape):
        raise ValueError(f"The array {_quote(name)} declares a negative dimension; save the file again "
                         "with numpy.savez.")
    nbytes = dtype.itemsize
    for d in shape:
        nbytes *= d  # Python ints: an absurd shape gives a huge number, never a wrapped one
    return _Header(info, name, shape, fortran, dtype, offset, nbytes)


def _check_against(h: _Header, member: Member, spec: ArchiveSpec) -> None:
    """What the caller allows this member, and whether the zip agrees with its header."""
    if h.dtype.kind not in member.kinds:
        raise ValueError(f"The array {_quote(h.name)} must be {_describe(member.kinds)}. Got dtype {h.dtype}.")
    if len(h.shape) > member.max_ndim:
        raise ValueError(f"The array {_quote(h.name)} has {len(h.shape)} dimensions; "
                         f"at most {member.max_ndim} are allowed.")
    cap = min(member.max_bytes or spec.max_total_bytes, spec.max_total_bytes)
    if h.nbytes > cap:
        raise ValueError(f"The array {_quote(h.name)} is {_size(h.nbytes)} uncompressed; "
                         f"at most {_size(cap)} are allowed.")
    declared, implied = h.info.file_size, h.offset + h.nbytes
    if declared < implied:
        raise ValueError(f"The array {_quote(h.name)} is truncated: the archive holds {declared} of the "
                         f"{implied} bytes its .npy header describes; save the file again.")
    if declared > implied:
        raise ValueError(f"The array {_quote(h.name)} holds {declared - implied} bytes more than its .npy "
                         "header describes; save the file again.")


def _read_data(archive: zipfile.ZipFile, h: _Header) -> np.ndarray:
    """Read the bytes the header promised, in chunks, into a buffer of that size.

    zipfile stops a member at the size the directory lists (checked equal to the
    header's) and then checks the CRC, so a stream that goes on is refused there as
    damaged; one that ends early is refused as truncated."""
    raw = bytearray(h.nbytes)
    view = memoryview(raw)
    pos = 0
    try:
        with archive.open(h.info) as f:
            f.read(h.offset)
            while pos < h.nbytes:
                chunk = f.read(min(CHUNK, h.nbytes - pos))
                if not chunk:
                    break
                view[pos:pos + len(chunk)] = chunk
                pos += len(chunk)
    except _DAMAGED as exc:
        raise _damaged(h.name, exc) from None
    view.release()
    if pos < h.nbytes:
        raise ValueError(f"The array {_quote(h.name)} is truncated: its data ends after {pos} of "
                         f"{h.nbytes} bytes; save the file again.")
    if h.fortran:  # as numpy.load: the data is the transpose's, in C order
        array = np.ndarray(h.shape[::-1], h.dtype, buffer=raw).T
    else:
        array = np.ndarray(h.shape, h.dtype, buffer=raw)
    if not h.dtype.isnative:
        array = array.byteswap(inplace=True).view(h.dtype.newbyteorder("="))
    return array


# ------------------------------------------------------------------ messages
#: what a damaged member stream raises: a bad CRC, a corrupt deflate stream, a cut file
_DAMAGED = (zipfile.BadZipFile, zlib.error, EOFError, OSError)


def _damaged(name: str, exc: Exception) -> ValueError:
    reason = str(exc)[:120] or type(exc).__name__
    return ValueError(f"The array {_quote(name)} is damaged ({reason}); save the file again.")


def _quote(name: str) -> str:
    """A member name for a message: quoted, and cut if long (names come from the file)."""
    return repr(name if len(name) <= 60 else name[:57] + "...")


def _size(nbytes: int) -> str:
    if nbytes >= 2**50:  # absurd declared shapes: no float overflow, no 10,000-digit numbers
        return "more than 1,000,000,000 MB"
    if nbytes >= MB:
        return f"{nbytes / MB:.0f} MB"
    if nbytes >= 1024:
        return f"{nbytes / 1024:.0f} kB"
    return f"{nbytes} bytes"


def _describe(kinds: str) -> str:
    numeric = [_KIND_NAMES[k] for k in kinds if k in _KIND_NAMES]
    numeric = list(dict.fromkeys(numeric))
    parts = []
    if numeric:
        listed = numeric[0] if len(numeric) == 1 else ", ".join(numeric[:-1]) + " or " + numeric[-1]
        parts.append(f"numeric ({listed})")
    if "U" in kinds:
        parts.append("text")
    return " or ".join(parts) or f"of dtype kind {kinds!r}"
