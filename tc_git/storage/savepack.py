"""A save's new objects (blobs and trees) written as one small pack instead of loose files.

A loose object costs libgit2 ~0.5-0.8 ms of CPU (strace: a refresh of the pack list on every
write, getdents64 x3 and several openat, then a temporary file, link and unlink): a 100-file
save at 10k files wrote ~180 of them. Here each object is hashed and zlib'd (level 1, as loose
objects are; no delta search: `compress` deltifies later) and appended to
`objects/pack/tmp-tc-*.pack`; `finish()` writes the count, the trailer and the version-2 `.idx`
(packwriter's), and moves the `.pack` then the `.idx` into place. A save of at most LOOSE_MAX
objects writes them loose as before (a pack per one-file save would only make more packs).

Crash safety, stock `git fsck` the judge: nothing names an object before `finish()` returns; a
killed save leaves a `tmp-tc-*` file (removed after packwriter.STALE seconds) or a `.pack`
without its `.idx` (invisible to git and libgit2, which find packs by their `.idx`; settled by a
later roll-up once stale: `repack._settle_orphan`). Durability: a save's pack is fsync'd only
with TC_RESTORE_FSYNC=all (as the restore's files and journal, and then libgit2's loose objects
and refs: store.fsync_gitdir), so a power loss may take the last saves but nothing older; a roll-up's pack always is
(with the directory), before the packs it replaces are unlinked.

Packs stay few: repack.auto, run at the end of the save under the store's lock, rolls the
small packs into larger ones with deltas (git's geometric repack; repack.py says how, and why a
crash at any point leaves every object in a pack git can find).

The store's kept handle reopens when `objects/pack` changes (store.py: a repack or an import by
anyone): a pack this process added under the store lock is recorded (`handles.own_pack_change`)
so that the next call keeps its handle and its parsed index. A roll-up removes packs: it is not
recorded, and handles reopen once.
"""
from __future__ import annotations

import hashlib
import os
import struct
import tempfile
import zlib
from typing import BinaryIO

import pygit2

from ..base.fsutil import fsync_setting
from ..base.settings import current
from . import handles, repack
from .packwriter import _REC, _compress, discard, object_header, seal

BLOB, TREE = 3, 2
LOOSE_MAX = 4  # a save of this many objects or fewer writes them loose
_KINDS = {1: b"commit", 2: b"tree", 3: b"blob", 4: b"tag"}


def available() -> bool:
    return current().savepack


class SavePack:
    """Objects of one save. `add_blob`/`add_tree` return the id at once; nothing is visible to
    the object database until `finish()`. Use under the store's lock."""

    def __init__(self, repo: pygit2.Repository, loose_max: int = LOOSE_MAX):
        self.repo = repo
        self.dir = os.path.join(repo.path, "objects", "pack")
        self.loose_max = loose_max
        self.small: list[tuple[int, bytes, bytes]] = []  # (kind, raw id, data) until a pack is needed
        self.f: BinaryIO | None = None
        self.before: tuple | None = None  # objects/pack's stamp before this pack touched it
        self.path: str | None = None  # the temporary pack, still ours to remove
        self.offset = 12
        self.count = 0
        self.seen: set[bytes] = set()
        self.entries = bytearray()  # _REC records

    def add_blob(self, data: bytes, raw: bytes | None = None) -> pygit2.Oid:
        return self.add(BLOB, data, raw)

    def add_tree(self, data: bytes) -> pygit2.Oid:
        return self.add(TREE, data)

    def add(self, kind: int, data: bytes, raw: bytes | None = None) -> pygit2.Oid:
        """`raw`: the object's id when the caller hashed it already."""
        if raw is None:
            h = hashlib.sha1(b"%s %d\0" % (_KINDS[kind], len(data)))
            h.update(data)
            raw = h.digest()
        if raw not in self.seen:
            self.seen.add(raw)
            self.count += 1
            if self.f is None and self.count <= self.loose_max:
                self.small.append((kind, raw, bytes(data)))
            else:
                if self.f is None:
                    self._open()
                self._write(kind, raw, data)
        return pygit2.Oid(raw=raw)

    def _open(self) -> None:
        os.makedirs(self.dir, exist_ok=True)
        self.before = _stamp(self.dir)  # (the temporary file changes the directory's stamp too)
        fd, self.path = tempfile.mkstemp(prefix="tmp-tc-", suffix=".pack", dir=self.dir)
        f = self.f = os.fdopen(fd, "w+b")
        f.write(b"PACK" + struct.pack(">II", 2, 0))  # the count is patched in finish()
        for kind, raw, data in self.small:
            self._write(kind, raw, data)
        self.small = []

    def _write(self, kind: int, raw: bytes, data: bytes) -> None:
        head = object_header(kind, len(data))
        body = _compress(data, 1)  # (ISA-L's deflate where installed: packwriter.py)
        assert self.f is not None
        self.f.write(head)
        self.f.write(body)
        self.entries += _REC.pack(raw, zlib.crc32(body, zlib.crc32(head)), self.offset)
        self.offset += len(head) + len(body)

    def finish(self) -> int:
        """Make the objects visible (a pack in place, or loose objects). Returns their number."""
        try:
            if self.f is None:
                odb = self.repo.odb
                for kind, _raw, data in self.small:
                    odb.write(kind, data)
                self.small = []
                return self.count
            assert self.path is not None
            # synced as the restore's files and journal are (TC_RESTORE_FSYNC=all): by default not,
            # as libgit2's loose objects are not; a power loss may then lose the save (not older ones)
            seal(self.f, self.path, self.count, self.entries, sync=fsync_setting() == "all")
            self.path = None
            after = _stamp(self.dir)
            if self.before is not None and after is not None:
                handles.own_pack_change(self.repo.path, self.before, after)
            repack.auto(self.repo)
            return self.count
        finally:
            self.close()

    def close(self) -> None:
        """Drop what was not finished (the objects were never visible)."""
        self.small = []
        self.seen = set()
        self.entries = bytearray()
        if self.f is not None and not self.f.closed:
            self.f.close()
        discard(self.path)
        self.path = None


def _stamp(d: str) -> tuple | None:
    try:
        st = os.stat(d)
    except OSError:
        return None
    return (st.st_ino, st.st_mtime_ns)
