"""The one layout of a zip archive that torch's reader and Python's ``zipfile`` read alike.

torch reads ``.pt2`` and TorchScript archives with miniz (``PyTorchStreamReader``, AOTInductor's
package loader): it takes the central directory's offset from the end record as counted from the
start of the file, finds the zip64 end record where the zip64 locator says, reads as many entries
as the end record counts and looks names up ignoring ASCII case. Python's ``zipfile`` (alpyka's
scan, ``torch.export.load``'s legacy fallback) counts offsets from where the archive seems to
start (data in front of it shifts every offset), reads the zip64 end record right before the
locator, reads entries until the directory's size is used up and keeps the last of two equal
names. An archive on which these differ can show the scan a benign archive and torch another
one. :func:`read_layout` accepts only archives on which no such difference can arise:

- the end record is the last 22 bytes (no comment, nothing after it); one disk;
- with a zip64 locator, the zip64 end record sits right before it, where the locator points, and
  the 32-bit fields either agree with it or are the "see zip64" markers;
- the central directory ends where the (zip64) end record starts, at the offset the end record
  gives, and holds exactly the entries it counts;
- the first local header is at offset 0 and each entry (local header, data, data descriptor)
  ends where the next one or the central directory begins: no byte in front, between or after;
- each local header repeats its directory record's name, flags and method; stored or deflated,
  not encrypted; names printable, relative, without ``..`` or backslashes, distinct ignoring case.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass
from typing import Any

from portable import AlpykaError

_LOCAL = struct.Struct("<4s5H3L2H")  # sig, need, flags, method, time, date, crc, csize, usize, nlen, xlen
_CENTRAL = struct.Struct("<4s6H3L5H2L")  # sig, made, need, flags, method, time, date, crc, csize, usize,
# nlen, xlen, clen, disk, iattr, eattr, offset
_END = struct.Struct("<4s4H2LH")  # sig, disk, cd disk, entries here, entries, cd size, cd offset, clen
_END64 = struct.Struct("<4sQ2H2L4Q")  # sig, record size, made, need, disk, cd disk, entries here,
# entries, cd size, cd offset
_LOCATOR = struct.Struct("<4sLQL")  # sig, disk of the zip64 end record, its offset, disks
_MAX16, _MAX32 = 0xFFFF, 0xFFFFFFFF
_ENCRYPTED = 0x1 | 0x40 | 0x2000  # traditional, strong, masked directory
_DESCRIPTOR = 0x8
_UTF8 = 0x800


class ZipLayoutError(AlpykaError, ValueError):
    """An archive torch's zip reader and Python's ``zipfile`` could read differently (``damaged``:
    one that is truncated or corrupt rather than laid out otherwise)."""

    def __init__(self, what: str, damaged: bool = False) -> None:
        super().__init__(what)
        self.damaged = damaged


@dataclass(frozen=True)
class Entry:
    """One archive member as both readers see it."""

    name: str
    header: int  # offset of the local header
    flags: int
    method: int
    crc: int
    compressed: int
    size: int
    raw_name: bytes
    data: int = 0  # offset of the data (set once the local header is read)


def _fail(what: str, damaged: bool = False) -> ZipLayoutError:
    return ZipLayoutError(what, damaged)


def _end_records(buf: Any) -> tuple[int, int, int, int]:
    """(entries, directory size, directory offset, where the directory must end)."""
    size = len(buf)
    at = size - _END.size
    if at < 0 or bytes(buf[at : at + 4]) != b"PK\x05\x06":
        last = buf.rfind(b"PK\x05\x06", max(0, size - _END.size - _MAX16))
        if last < 0:
            raise _fail("no end-of-central-directory record: not a complete zip archive", damaged=True)
        raise _fail(
            f"{size - last - _END.size} bytes follow its end-of-central-directory record (an archive "
            "comment or appended data)"
        )
    _, disk, cd_disk, here, count, cd_size, cd_ofs, clen = _END.unpack_from(buf, at)
    if disk or cd_disk or here != count or clen:
        raise _fail("its end record names other disks or a comment past the end of the file")
    if at >= _LOCATOR.size and bytes(buf[at - _LOCATOR.size : at - _LOCATOR.size + 4]) == b"PK\x06\x07":
        return _zip64_end(buf, at - _LOCATOR.size, (count, cd_size, cd_ofs))
    if count == _MAX16 or _MAX32 in (cd_size, cd_ofs):
        raise _fail("its end record says 'see the zip64 record' but there is no zip64 locator")
    return count, cd_size, cd_ofs, at


def _zip64_end(buf: Any, locator_at: int, short: tuple[int, int, int]) -> tuple[int, int, int, int]:
    _, disk, where, disks = _LOCATOR.unpack_from(buf, locator_at)
    at = locator_at - _END64.size
    if disk or disks != 1 or where != at or at < 0:
        raise _fail(
            f"its zip64 locator points at offset {where}, not at the zip64 end record right before it "
            f"({at}): Python's zipfile and torch's reader would take different directories"
        )
    sig, record, _, _, disk, cd_disk, here, count, cd_size, cd_ofs = _END64.unpack_from(buf, at)
    if sig != b"PK\x06\x06" or record != _END64.size - 12 or disk or cd_disk or here != count:
        raise _fail("its zip64 end record is malformed (a signature, size or disk field)")
    markers = (_MAX16, _MAX32, _MAX32)
    if any(s not in (v, m) for s, v, m in zip(short, (count, cd_size, cd_ofs), markers, strict=True)):
        raise _fail("its end record and its zip64 end record disagree on the central directory")
    return count, cd_size, cd_ofs, at


def _zip64_values(extra: bytes, fields: list[int]) -> list[int]:
    """The directory record's sizes and offset with the zip64 extra field's values put in for the
    32-bit markers (in the order the format gives: size, compressed size, offset)."""
    found, pos = None, 0
    while pos < len(extra):
        if pos + 4 > len(extra):
            raise _fail("an entry's extra field is malformed")
        tag, length = struct.unpack_from("<2H", extra, pos)
        if pos + 4 + length > len(extra):
            raise _fail("an entry's extra field is malformed")
        if tag == 1:
            if found is not None:
                raise _fail("an entry has two zip64 extra fields")
            found = extra[pos + 4 : pos + 4 + length]
        pos += 4 + length
    wanted = [i for i, v in enumerate(fields) if v == _MAX32]
    if not wanted:
        return fields
    if found is None or len(found) < 8 * len(wanted):
        raise _fail("an entry's sizes say 'see zip64' but its zip64 extra field does not hold them")
    out = list(fields)
    for k, i in enumerate(wanted):
        out[i] = struct.unpack_from("<Q", found, 8 * k)[0]
    return out


def _name(raw: bytes, flags: int) -> str:
    try:
        name = raw.decode("utf-8" if flags & _UTF8 else "ascii")
    except UnicodeDecodeError:
        raise _fail(f"entry name {raw!r} is not {'UTF-8' if flags & _UTF8 else 'ASCII'}") from None
    parts = name.rstrip("/").split("/")
    if (
        not name
        or any(ord(c) < 0x20 or ord(c) == 0x7F for c in name)
        or "\\" in name
        or name.startswith("/")
        or ".." in parts
        or "" in parts
    ):
        raise _fail(f"entry name {name!r} is empty, absolute, has '..', a backslash or control characters")
    return name


def _directory(buf: Any, count: int, cd_size: int, cd_ofs: int) -> list[Entry]:
    entries: list[Entry] = []
    pos, stop = cd_ofs, cd_ofs + cd_size
    while pos < stop:
        if len(entries) == count or pos + _CENTRAL.size > stop:
            raise _fail(f"its central directory holds more than the {count} entries its end record counts")
        sig, _, _, flags, method, _, _, crc, csize, usize, nlen, xlen, clen, disk, _, _, offset = _CENTRAL.unpack_from(
            buf, pos
        )
        end = pos + _CENTRAL.size + nlen + xlen + clen
        if sig != b"PK\x01\x02" or end > stop:
            raise _fail("its central directory is malformed")
        raw = bytes(buf[pos + _CENTRAL.size : pos + _CENTRAL.size + nlen])
        extra = bytes(buf[pos + _CENTRAL.size + nlen : pos + _CENTRAL.size + nlen + xlen])
        usize, csize, offset = _zip64_values(extra, [usize, csize, offset])
        name = _name(raw, flags)
        if disk or flags & _ENCRYPTED or method not in (0, 8) or (method == 0 and csize != usize):
            raise _fail(f"entry {name!r} is encrypted, on another disk or compressed in a way torch does not read")
        entries.append(Entry(name, offset, flags, method, crc, csize, usize, raw))
        pos = end
    if len(entries) != count:
        raise _fail(f"its central directory holds {len(entries)} entries, its end record counts {count}")
    seen: dict[bytes, str] = {}
    for e in entries:
        key = e.raw_name.lower()  # ASCII case only, as torch's reader compares
        if key in seen:
            raise _fail(f"archive entries {seen[key]!r} and {e.name!r} name the same file for torch")
        seen[key] = e.name
    return entries


def _descriptor(buf: Any, e: Entry, at: int, length: int) -> None:
    """The data descriptor after ``e``'s data (``length`` bytes up to the next record) must repeat
    the directory's CRC and sizes."""
    forms = {12: (0, "<L2L"), 16: (4, "<L2L"), 20: (0, "<L2Q"), 24: (4, "<L2Q")}
    if length not in forms or (forms[length][0] and bytes(buf[at : at + 4]) != b"PK\x07\x08"):
        raise _fail(f"{length} bytes after entry {e.name!r}'s data are not its data descriptor")
    skip, fmt = forms[length]
    if struct.unpack_from(fmt, buf, at + skip) != (e.crc, e.compressed, e.size):
        raise _fail(f"entry {e.name!r}'s data descriptor disagrees with the central directory")


def _local_headers(buf: Any, entries: list[Entry], cd_ofs: int) -> list[Entry]:
    ordered = sorted(entries, key=lambda e: e.header)
    out, cursor = [], 0
    for i, e in enumerate(ordered):
        if e.header != cursor:
            where = "in front of its first entry" if i == 0 else f"before entry {e.name!r}"
            if e.header < cursor:
                raise _fail(f"entry {e.name!r} overlaps the entry before it")
            raise _fail(f"{e.header - cursor} bytes {where} belong to no entry (data in front of the archive?)")
        if e.header + _LOCAL.size > cd_ofs:
            raise _fail(f"entry {e.name!r}'s local header lies in or past the central directory")
        sig, _, flags, method, _, _, crc, csize, usize, nlen, xlen = _LOCAL.unpack_from(buf, e.header)
        raw = bytes(buf[e.header + _LOCAL.size : e.header + _LOCAL.size + nlen])
        if sig != b"PK\x03\x04" or raw != e.raw_name or flags != e.flags or method != e.method:
            raise _fail(f"entry {e.name!r}'s local header disagrees with the central directory")
        data = e.header + _LOCAL.size + nlen + xlen
        after = data + e.compressed
        nxt = ordered[i + 1].header if i + 1 < len(ordered) else cd_ofs
        if after > nxt:
            raise _fail(f"entry {e.name!r}'s data runs into the next record")
        if flags & _DESCRIPTOR:
            _descriptor(buf, e, after, nxt - after)
        elif after != nxt:
            raise _fail(f"{nxt - after} bytes after entry {e.name!r}'s data belong to no entry")
        elif crc != e.crc or any(v not in (d, _MAX32) for v, d in ((csize, e.compressed), (usize, e.size))):
            raise _fail(f"entry {e.name!r}'s local header disagrees with the central directory")
        out.append(Entry(e.name, e.header, e.flags, e.method, e.crc, e.compressed, e.size, e.raw_name, data))
        cursor = nxt
    return out


def read_layout(buf: Any) -> list[Entry]:
    """The entries of the archive in ``buf`` (bytes or an ``mmap``), in directory order; raises
    :class:`ZipLayoutError` for any archive laid out otherwise than the module doc says."""
    count, cd_size, cd_ofs, cd_end = _end_records(buf)
    if cd_ofs + cd_size != cd_end:
        raise _fail(
            f"its central directory is not where its end record says (offset {cd_ofs} + size {cd_size} "
            f"!= {cd_end}): data in front of the archive, or a second directory"
        )
    entries = _directory(buf, count, cd_size, cd_ofs)
    located = {e.header: e for e in _local_headers(buf, entries, cd_ofs)}
    return [located[e.header] for e in entries]


def read_entry(buf: Any, e: Entry, keep: bool = True) -> bytes:
    """``e``'s bytes, checked against its CRC and size (a deflated stream must end exactly at its
    compressed size); ``keep=False`` checks a stored entry without copying it and returns ``b""``."""
    with memoryview(buf)[e.data : e.data + e.compressed] as raw:
        if e.method == 8:
            d = zlib.decompressobj(-15)
            try:
                data = d.decompress(raw) + d.flush()
            except zlib.error as exc:
                raise _fail(f"entry {e.name!r} does not inflate ({exc})", damaged=True) from None
            if not d.eof or d.unused_data:
                raise _fail(f"entry {e.name!r}'s compressed stream does not end at its compressed size")
            view: Any = data
        else:
            view = raw
        if len(view) != e.size or zlib.crc32(view) != e.crc:
            raise _fail(f"archive member {e.name!r} is damaged (CRC or size mismatch)", damaged=True)
        return bytes(view) if keep else b""
