"""A first snapshot's index written as one file (gitformat-index, version 2), not entry by entry.

A first snapshot knows every entry at once: its blob (the pack writer's id) and the stat data
taken before the file was read. Adding them one by one through libgit2 (`_native.index_add`:
a cffi entry filled field by field, a path copy, a map insert) cost ~20-50 us a file, 1-2.5 s of
a 50k-100k-file first save; the same entries packed here cost ~2 us. libgit2 then reads the file
(`Index.read(True)`: its checksum and every entry are checked) and writes the tree from it.

The entries are what `_native.index_add` would have stored, field for field (32-bit stat fields
as git keeps them, an mtime of zero for a file changed within `racy_ns`: read again next time).
Names are not judged here: libgit2 refuses to write a tree with a name it would not have added
(`.git`, `..`, NTFS/HFS aliases where configured), and the caller then adds the entries one by
one, leaving out what libgit2 refuses (snapshot._finish_first).
"""
from __future__ import annotations

import hashlib
import os
import struct
import tempfile
import time
from collections.abc import Iterable
from typing import Any

_HEAD = struct.Struct(">4sII")
_ENTRY = struct.Struct(">10I20sH")  # ctime s/ns, mtime s/ns, dev, ino, mode, uid, gid, size, id, flags
_M32 = 0xFFFFFFFF
_NS = 1_000_000_000


def _seconds(ns: int) -> int:
    """A file time as an index entry stores its seconds (32-bit signed, clamped), as raw bits."""
    return max(-(1 << 31), min((1 << 31) - 1, ns // _NS)) & _M32


def entry(path: bytes, raw_id: bytes, mode: int, st, racy_before: int) -> bytes:
    """One entry's bytes, padded (1-8 NULs) to a multiple of 8. `st` has st_mtime_ns,
    st_ctime_ns, st_dev, st_ino, st_uid, st_gid, st_size; `racy_before`: an entry whose file
    changed at or after this time (ns) gets a zero mtime."""
    m, c = st.st_mtime_ns, st.st_ctime_ns
    ms, mns = (_seconds(m), m % _NS) if max(m, c) < racy_before else (0, 0)
    head = _ENTRY.pack(_seconds(c), c % _NS, ms, mns, st.st_dev & _M32, st.st_ino & _M32, mode,
                       st.st_uid & _M32, st.st_gid & _M32, st.st_size & _M32, raw_id, min(len(path), 0xFFF))
    return head + path + b"\0" * (8 - (62 + len(path)) % 8)


def write(index_path: str, count: int, entries: Iterable[tuple[bytes, bytes, int, Any]], racy_ns: int) -> None:
    """Replace the index file with `count` entries ((raw path, raw id, git mode, stat), sorted by
    path, paths unique) atomically (a sibling file renamed over it). The entries are taken one at
    a time and written as they come: at 50k files, holding them all with their stat objects and
    the file's bytes was ~20 MiB of the peak of an import's restore."""
    racy_before = time.time_ns() - racy_ns
    d = os.path.dirname(index_path)
    fd, tmp = tempfile.mkstemp(prefix="index.tc-", dir=d)
    try:
        digest = hashlib.sha1()
        with os.fdopen(fd, "wb", buffering=1 << 16) as f:
            head = _HEAD.pack(b"DIRC", 2, count)
            f.write(head)
            digest.update(head)
            written, last = 0, None
            for p, i, m, st in entries:
                if last is not None and p <= last:
                    raise ValueError("index entries out of order or repeated")
                e = entry(p, i, m, st, racy_before)
                f.write(e)
                digest.update(e)
                written, last = written + 1, p
            if written != count:
                raise ValueError(f"{written} index entries for a header of {count}")
            f.write(digest.digest())
        try:
            mode = os.stat(index_path).st_mode & 0o7777
        except OSError:
            mode = 0o644  # what libgit2 creates under the usual umask
        os.chmod(tmp, mode)
        os.replace(tmp, index_path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
