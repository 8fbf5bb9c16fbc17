"""Zip archives that two readers read differently (tests of the model-file checks): an evil
archive hidden in front of, after or beside a benign one, so that Python's ``zipfile`` sees the
benign entries and torch's zip reader (miniz) the evil ones. Written byte by byte here: no zip
library writes such files."""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence

Entries = Sequence[tuple[str, bytes]]

_LOCAL = struct.Struct("<4s5H3L2H")
_CENTRAL = struct.Struct("<4s6H3L5H2L")
_END = struct.Struct("<4s4H2LH")
_END64 = struct.Struct("<4sQ2H2L4Q")
_LOCATOR = struct.Struct("<4sLQL")


def records(entries: Entries, base: int = 0) -> tuple[bytes, list[bytes]]:
    """Stored entries: their local headers and data, and their central directory records, whose
    offsets count from ``base`` (where the reader will think the first local header is)."""
    local, central = bytearray(), []
    for name, data in entries:
        raw, crc = name.encode(), zlib.crc32(data)
        offset = base + len(local)
        local += _LOCAL.pack(b"PK\x03\x04", 20, 0, 0, 0, 0x21, crc, len(data), len(data), len(raw), 0) + raw + data
        fields = (b"PK\x01\x02", 20, 20, 0, 0, 0, 0x21, crc, len(data), len(data), len(raw), 0, 0, 0, 0, 0, offset)
        central.append(_CENTRAL.pack(*fields) + raw)
    return bytes(local), central


def directory(central: list[bytes], size: int) -> bytes:
    """The central directory ``size`` bytes long (the last record's comment fills it up)."""
    pad = size - sum(map(len, central))
    last = bytearray(central[-1])
    struct.pack_into("<H", last, 32, pad)
    return b"".join(central[:-1]) + bytes(last) + b"c" * pad


def end(count: int, size: int, offset: int, comment: bytes = b"") -> bytes:
    return _END.pack(b"PK\x05\x06", 0, 0, count, count, size, offset, len(comment)) + comment


def end64(count: int, size: int, offset: int) -> bytes:
    return _END64.pack(b"PK\x06\x06", 44, 45, 45, 0, 0, count, count, size, offset)


def locator(offset: int) -> bytes:
    return _LOCATOR.pack(b"PK\x06\x07", 0, offset, 1)


def _even(evil: Entries, benign: Entries) -> tuple[list, list, int, int]:
    """Both lists of entries as long (empty padding files), and one directory size for both."""
    evil, benign = list(evil), list(benign)
    root = benign[0][0].split("/", 1)[0]
    while len(evil) < len(benign):
        evil.append((f"{root}/pad{len(evil)}", b""))
    while len(benign) < len(evil):
        benign.append((f"{root}/pad{len(benign)}", b""))
    size = max(sum(map(len, records(es)[1])) for es in (evil, benign))
    return evil, benign, len(evil), size


def prefixed(evil: Entries, benign: Entries) -> bytes:
    """The evil archive in front of the benign one. The end record (the benign archive's) puts the
    directory at offset X: Python's zipfile counts it from where the benign archive starts, torch
    from the start of the file, where the evil directory sits at X."""
    evil, benign, count, size = _even(evil, benign)
    (el, ec), (bl, bc) = records(evil), records(benign)
    x = max(len(el), len(bl))
    front = el + b"\0" * (x - len(el)) + directory(ec, size)
    return front + bl + b"\0" * (x - len(bl)) + directory(bc, size) + end(count, size, x)


def in_comment(evil: Entries, benign: Entries) -> bytes:
    """The evil directory after the end record, as its comment (the evil entries' data between the
    benign data and the benign directory): the end record points torch there; Python's zipfile
    reads the benign directory right before the end record and shifts every offset by the
    difference."""
    evil, benign, count, size = _even(evil, benign)
    bl_len = len(records(benign)[0])
    el, ec = records(evil, base=bl_len)
    at_end = bl_len + len(el) + size
    bl, bc = records(benign, base=size + _END.size)  # Python adds (end - size - offset) < 0
    return bl + el + directory(bc, size) + end(count, size, at_end + _END.size, comment=directory(ec, size))


def zip64_elsewhere(evil: Entries, benign: Entries) -> bytes:
    """Both archives one after the other, each with a zip64 end record; the zip64 locator points at
    the evil one, while Python's zipfile reads the zip64 record right before the locator."""
    evil, benign, count, size = _even(evil, benign)
    el, ec = records(evil)
    evil_end64 = len(el) + size
    start = evil_end64 + _END64.size
    bl, bc = records(benign, base=start)
    benign_cd = start + len(bl)
    body = el + directory(ec, size) + end64(count, size, len(el))
    body += bl + directory(bc, size) + end64(count, size, benign_cd)
    return body + locator(evil_end64) + _END.pack(b"PK\x05\x06", 0, 0, 0xFFFF, 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0)


def plain(entries: Entries) -> bytes:
    """An ordinary archive of ``entries`` (what a variant changes starts from it)."""
    local, central = records(entries)
    cd = b"".join(central)
    return local + cd + end(len(central), len(cd), len(local))


VARIANTS = {"prefix": prefixed, "comment": in_comment, "zip64_locator": zip64_elsewhere}
