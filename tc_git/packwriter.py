"""The first snapshot's blobs written the way `git add` writes them: zlib'd whole objects, no
delta search, straight into one pack file on disk (issue 14: first snapshot at git's speed,
bounded memory).

The mempack route (mempack.py) held every object in memory and then ran libgit2's packbuilder,
whose delta search costs most of the time; loose objects cost a file, a link and a 4 KB block
each. Here each blob is compressed once (zlib level 1, as fast as git's loose objects) and
appended to `objects/pack/tmp-tc-*.pack`; `finish()` writes the object count and the trailer
and hands the file, in 1 MiB chunks, to libgit2's indexer (_native.write_pack), which writes the
.idx and moves the pack in place. Memory stays at one file's buffer whatever the workspace
holds; `compress` deltifies later. `available()` is False where the ctypes indexer is not.
"""
from __future__ import annotations

import hashlib
import os
import struct
import tempfile
import zlib

import pygit2

from . import _native

BLOB = 3
CHUNK = 1 << 20


def available() -> bool:
    return (os.environ.get("TC_PACKWRITER", "on").lower() not in ("0", "off", "false", "no")
            and _native.has(_native.INDEXER))


class PackWriter:
    def __init__(self, repo: pygit2.Repository):
        self.repo = repo
        d = os.path.join(repo.path, "objects", "pack")
        os.makedirs(d, exist_ok=True)
        fd, self.path = tempfile.mkstemp(prefix="tmp-tc-", suffix=".pack", dir=d)
        self.f = os.fdopen(fd, "w+b")
        self.f.write(b"PACK" + struct.pack(">II", 2, 0))  # the count is patched in finish()
        self.count = 0
        self.seen: set[bytes] = set()

    def add_blob(self, data: bytes) -> pygit2.Oid:
        oid = pygit2.hash(data)
        if oid.raw in self.seen:
            return oid
        self.seen.add(oid.raw)
        size = len(data)
        head = bytearray([(BLOB << 4) | (size & 0x0F)])
        size >>= 4
        while size:
            head[-1] |= 0x80
            head.append(size & 0x7F)
            size >>= 7
        self.f.write(head)
        self.f.write(zlib.compress(data, 1))
        self.count += 1
        return oid

    def finish(self) -> int:
        """Trailer, index, in place. Returns the number of objects written."""
        try:
            if not self.count:
                return 0
            self.f.seek(8)
            self.f.write(struct.pack(">I", self.count))
            self.f.flush()
            self.f.seek(0)
            h = hashlib.sha1()
            for chunk in iter(lambda: self.f.read(CHUNK), b""):
                h.update(chunk)
            self.f.write(h.digest())
            self.f.flush()
            self.f.seek(0)

            try:
                return _native.write_pack(self.repo, iter(lambda: self.f.read(CHUNK), b""))
            except _native.GitCallError as e:
                raise pygit2.GitError(f"first-snapshot pack: {e}") from None
        finally:
            self.close()

    def close(self) -> None:
        if not self.f.closed:
            self.f.close()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
