"""The first snapshot's blobs written the way `git add` writes them: zlib'd whole objects, no
delta search, straight into one pack file on disk (issue 14: first snapshot at git's speed,
bounded memory).

The mempack route (mempack.py) held every object in memory and then ran libgit2's packbuilder,
whose delta search costs most of the time; loose objects cost a file, a link and a 4 KB block
each. Here the caller's thread hashes each blob (the id is needed at once), compresses it (zlib
level 1, as fast as git's loose objects) and appends it to `objects/pack/tmp-tc-*.pack`, noting
its offset and CRC; a blob of LARGE (256 KiB) or more is compressed on a second thread (zlib
releases the GIL: that core works while the caller reads and scans the next files) and written
when done, the objects in any order. `finish()` writes the object count
and the trailer, then the version-2 `.idx` itself (sorted ids, CRCs, offsets: what libgit2's
indexer would compute by inflating and hashing everything again), and moves both in place; the
object database finds the new pack when it next misses an object (libgit2 and git rescan
`objects/pack` then). Memory: at most QUEUE_BYTES of large blobs waiting for the other thread
(one file above that), whatever the workspace holds. Pure Python: no native capability needed.
`compress` deltifies later.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import stat as stat_mod
import struct
import tempfile
import time
import zlib
from collections import deque
from typing import Any

import pygit2

from ..base.settings import current

try:  # ISA-L's level-1 deflate: ~7 us for a 1 KB source file where zlib's takes ~17 (its stream is
    # zlib's format, any inflater reads it; same size or smaller). Optional: zlib otherwise.
    from isal.isal_zlib import compress as _compress
except ImportError:  # pragma: no cover - a platform without its wheel
    _compress = zlib.compress

TREE, BLOB = 2, 3  # pack object types
_KIND = {TREE: b"tree", BLOB: b"blob"}
CHUNK = 1 << 20
QUEUE_BYTES = 8 << 20  # large blobs handed to the other thread and not yet written
LARGE = 256 << 10  # a blob at least this big is compressed on the other thread


def available() -> bool:
    return current().packwriter


class PackWriter:
    def __init__(self, repo: pygit2.Repository):
        self.repo = repo
        self.dir = os.path.join(repo.path, "objects", "pack")
        os.makedirs(self.dir, exist_ok=True)
        _remove_stale(self.dir)
        fd, pack_path = tempfile.mkstemp(prefix="tmp-tc-", suffix=".pack", dir=self.dir)
        self.path: str | None = pack_path  # temporary files still ours to remove (None once in place)
        self.idx_path: str | None = None
        self.f = os.fdopen(fd, "w+b")
        self.f.write(b"PACK" + struct.pack(">II", 2, 0))  # the count is patched in finish()
        self.offset = self.f.tell()
        self.count = 0
        self.seen: set[bytes] = set()
        # a store that already holds packs (an import, a deleted private index) may have most of
        # these blobs: they are not compressed and written a second time (an imported 50k-file
        # task restored into an empty workspace re-packed all of it). A fresh store has no pack:
        # no lookups there (each miss of the loose backend is a stat).
        self.known = repo.odb if any(f.startswith("pack-") and f.endswith(".pack") for f in os.listdir(self.dir)) \
            else None
        self.skipped = 0
        # (raw id, crc32, offset) of each object written, packed (_REC: 32 bytes, not a ~200-byte
        # tuple: 50k files held 10 MiB of them)
        self.entries = bytearray()
        # large blobs being compressed on the other thread: (raw id, size, future), oldest first
        self._pending: deque = deque()
        self._pending_bytes = 0
        self._pool: Any = None  # a one-thread ThreadPoolExecutor once a large blob comes
        self.finished = self.failed = False

    # ------------------------------------------------------------------ the caller's thread
    def add_blob(self, data: bytes) -> pygit2.Oid:
        """Hash `data`, write it as a zlib'd pack object (objects go in any order: the .idx
        says where each is), return its id. Only the caller's thread writes the file. A small
        blob is compressed here: handing each to a compressor thread cost more than deflating it
        (two GIL hand-offs and ~6 futex calls a file: 132k at 20k files, ~12 % more CPU than
        doing it inline, measured under perf); a large one is deflated on the other thread (zlib
        drops the GIL), at most QUEUE_BYTES of them at a time, and written when done."""
        return pygit2.Oid(raw=self.add(data, BLOB))

    def add(self, data: bytes, kind: int = BLOB) -> bytes:
        """`add_blob` for a blob or a tree (the snapshot's trees: indexfile.py builds them);
        returns the raw id."""
        h = hashlib.sha1(b"%s %d\0" % (_KIND[kind], len(data)))
        h.update(data)
        raw = h.digest()
        if raw in self.seen:
            return raw
        self.seen.add(raw)
        if self.known is not None and pygit2.Oid(raw=raw) in self.known:
            self.skipped += 1
            return raw
        if len(data) < LARGE:
            self._write(raw, len(data), _compress(data, 1), kind)
        else:
            if self._pool is None:
                from concurrent.futures import ThreadPoolExecutor
                self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tc-packwriter")
            self._pending.append((raw, len(data), self._pool.submit(zlib.compress, data, 1), kind))
            self._pending_bytes += len(data)
        while self._pending and (self._pending_bytes > QUEUE_BYTES or self._pending[0][2].done()):
            self._write_pending()
        self.count += 1
        return raw

    def add_tree(self, data: bytes) -> bytes:
        return self.add(data, TREE)

    def _write_pending(self) -> None:
        raw, size, fut, kind = self._pending.popleft()
        self._pending_bytes -= size
        try:
            body = fut.result()
        except Exception as e:  # the pack is dropped
            raise pygit2.GitError(f"first-snapshot pack: {e}") from e
        self._write(raw, size, body, kind)

    def _write(self, raw: bytes, size: int, body: bytes, kind: int = BLOB) -> None:
        head = object_header(kind, size)
        self.f.write(head)
        self.f.write(body)
        self.entries += _REC.pack(raw, zlib.crc32(body, zlib.crc32(head)), self.offset)
        self.offset += len(head) + len(body)

    def _drain(self) -> None:
        while self._pending:
            self._write_pending()

    # ------------------------------------------------------------------ the end
    def finish(self) -> int:
        """Trailer, index, in place. Returns the number of objects written. `finished` says it
        got there, `failed` that it was tried and did not (nothing of the pack is in place)."""
        try:
            n = self._finish()
            self.finished = True
            return n
        except BaseException:
            self.failed = True
            raise
        finally:
            self.close()

    def _finish(self) -> int:
        if self.finished or self.failed:
            raise ValueError("the pack was finished already")
        self._drain()
        self.seen = set()  # no more adds: the ids live on in `entries` (4-5 MiB at 50k files)
        if not self.count:
            return 0
        pack_path = self.path
        assert pack_path is not None  # set in __init__, cleared only below and in close()
        entries, self.entries = self.entries, bytearray()
        seal(self.f, pack_path, self.count, entries, sync=True)
        self.path = self.idx_path = None
        return self.count

    def close(self) -> None:
        self._pending.clear()
        self._pending_bytes = 0
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
        if not self.f.closed:
            self.f.close()
        discard(self.path)
        self.path = None


def object_header(kind: int, size: int) -> bytes:
    """A pack entry's header: the type and the inflated size, 7 bits a byte after the first 4."""
    head = bytearray([(kind << 4) | (size & 0x0F)])
    size >>= 4
    while size:
        head[-1] |= 0x80
        head.append(size & 0x7F)
        size >>= 7
    return bytes(head)


def seal(f, pack_path: str, count: int, entries: bytes | bytearray, sync: bool) -> str:
    """Make the pack written to `f` (the temporary `pack_path`, its header's count a placeholder)
    a pack git finds: the count, the trailing SHA-1, its version-2 `.idx` from `entries` (_REC
    records), both read-only as git leaves them, moved into place the pack first (readers find
    packs by their `.idx`). `sync`: fsync both before the renames. Returns the pack's path
    without its suffix. On failure nothing of it is in place but, at worst, a `.pack` without an
    `.idx` (invisible to git and libgit2); the caller removes `pack_path`."""
    f.seek(8)
    f.write(struct.pack(">I", count))
    f.flush()
    f.seek(0)
    h = hashlib.sha1()
    for chunk in iter(lambda: f.read(CHUNK), b""):
        h.update(chunk)
    pack_sum = h.digest()
    f.write(pack_sum)
    f.flush()
    if sync:
        os.fsync(f.fileno())
    f.close()
    directory = os.path.dirname(pack_path)
    name = os.path.join(directory, "pack-" + pack_sum.hex())
    idx_path = index_file(directory, entries, pack_sum, sync)
    try:
        os.chmod(pack_path, 0o444)  # as git leaves pack files
        os.replace(pack_path, name + ".pack")
        os.replace(idx_path, name + ".idx")
    finally:
        discard(idx_path)  # (gone once renamed)
    return name


def index_file(directory: str, entries, pack_sum: bytes, sync: bool) -> str:
    """A pack's v2 `.idx` (`entries`: its sorted 28-byte records) written to a temporary file in
    `directory`, read-only as git leaves it; the caller renames it into place after its `.pack`."""
    fd, idx_path = tempfile.mkstemp(prefix="tmp-tc-", suffix=".idx", dir=directory)
    try:
        with os.fdopen(fd, "wb") as g:
            g.write(_index_v2(entries, pack_sum))
            g.flush()
            if sync:
                os.fsync(g.fileno())
        os.chmod(idx_path, 0o444)
    except BaseException:
        discard(idx_path)
        raise
    return idx_path


def discard(*paths: str | None) -> None:
    """Remove temporary files that may or may not exist any more."""
    for p in paths:
        if p:
            try:
                os.unlink(p)
            except FileNotFoundError:
                pass


STALE = 600  # seconds: a live writer appends all the time, a killed one left its file behind


def _remove_stale(d: str) -> None:
    """Drop what a killed writer or merge left (`tmp-tc-*` files, `tmp-tc-roll-*` directories of
    hard links: repack.py): untouched for STALE seconds."""
    now = time.time()
    for name in os.listdir(d):
        if name.startswith("tmp-tc-"):
            p = os.path.join(d, name)
            try:
                st = os.lstat(p)
                if now - st.st_mtime > STALE:
                    if stat_mod.S_ISDIR(st.st_mode):
                        shutil.rmtree(p, ignore_errors=True)
                    else:
                        os.unlink(p)
            except OSError:
                pass


_REC = struct.Struct(">20sIQ")  # raw id, crc32, offset: a record starts with the id, so records sort by id


def _index_v2(entries: bytes | bytearray, pack_sum: bytes) -> bytes:
    """A pack index, version 2 (gitformat-pack): fan-out, sorted ids, CRC32s, offsets (above
    2 GiB in a 64-bit table), the pack's checksum, its own. `entries`: _REC records."""
    size = _REC.size
    rows = b"".join(sorted(entries[i:i + size] for i in range(0, len(entries), size)))
    fanout = [0] * 256
    crcs: list[int] = []
    small: list[int] = []
    large: list[int] = []
    for raw, crc, off in _REC.iter_unpack(rows):
        fanout[raw[0]] += 1
        crcs.append(crc & 0xFFFFFFFF)
        if off < 0x80000000:
            small.append(off)
        else:
            small.append(0x80000000 | len(large))
            large.append(off)
    total = 0
    for i in range(256):
        total += fanout[i]
        fanout[i] = total
    n = len(crcs)
    parts = [b"\377tOc", struct.pack(">I", 2), struct.pack(">256I", *fanout),
             b"".join(rows[i:i + 20] for i in range(0, len(rows), size)),
             struct.pack(f">{n}I", *crcs), struct.pack(f">{n}I", *small), struct.pack(f">{len(large)}Q", *large),
             pack_sum]
    body = b"".join(parts)
    return body + hashlib.sha1(body).digest()
