"""The first snapshot's blobs written the way `git add` writes them: zlib'd whole objects, no
delta search, straight into one pack file on disk (issue 14: first snapshot at git's speed,
bounded memory).

The mempack route (mempack.py) held every object in memory and then ran libgit2's packbuilder,
whose delta search costs most of the time; loose objects cost a file, a link and a 4 KB block
each. Here the caller's thread hashes each blob (the id is needed at once) and a second thread
compresses it (zlib level 1, as fast as git's loose objects; zlib releases the GIL, so the
compression runs on the other core while the caller reads and scans the next files) and appends
it to `objects/pack/tmp-tc-*.pack`, noting its offset and CRC. `finish()` writes the object count
and the trailer, then the version-2 `.idx` itself (sorted ids, CRCs, offsets: what libgit2's
indexer would compute by inflating and hashing everything again), and moves both in place; the
object database finds the new pack when it next misses an object (libgit2 and git rescan
`objects/pack` then). Memory: at most QUEUE_BYTES of blobs waiting for the compressor (one file
above that), whatever the workspace holds. Pure Python: no native capability needed.
`compress` deltifies later.
"""
from __future__ import annotations

import hashlib
import os
import struct
import tempfile
import threading
import time
import zlib
from collections import deque

import pygit2

BLOB = 3
CHUNK = 1 << 20
QUEUE_BYTES = 8 << 20  # blobs hashed but not yet compressed (enough to keep the other core busy)


def available() -> bool:
    return os.environ.get("TC_PACKWRITER", "on").lower() not in ("0", "off", "false", "no")


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
        self.count = 0
        self.seen: set[bytes] = set()
        # (raw id, crc32, offset) of each object written, packed (_REC: 32 bytes, not a ~200-byte
        # tuple: 50k files held 10 MiB of them); appended by the compressor
        self.entries = bytearray()
        self._queue: deque = deque()
        self._queued = 0
        self._cond = threading.Condition()
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ the caller's thread
    def add_blob(self, data: bytes) -> pygit2.Oid:
        h = hashlib.sha1(b"blob %d\0" % len(data))
        h.update(data)
        raw = h.digest()
        if raw in self.seen:
            return pygit2.Oid(raw=raw)
        self.seen.add(raw)
        with self._cond:
            if self._error is not None:
                raise pygit2.GitError(f"first-snapshot pack: {self._error}")
            while self._queued > QUEUE_BYTES and self._queue:  # bounded memory: wait for the compressor
                self._cond.wait()
            self._queue.append((raw, data))
            self._queued += len(data)
            self._cond.notify_all()
        if self._thread is None:
            self._thread = threading.Thread(target=self._compressor, name="tc-packwriter", daemon=True)
            self._thread.start()
        self.count += 1
        return pygit2.Oid(raw=raw)

    # ------------------------------------------------------------------ the compressor thread
    def _compressor(self) -> None:
        offset = self.f.tell()
        while True:
            with self._cond:
                while not self._queue:
                    self._cond.wait()
                item = self._queue.popleft()
            if item is None:
                return
            raw, data = item
            try:
                if self._error is None:
                    size = len(data)
                    head = bytearray([(BLOB << 4) | (size & 0x0F)])
                    size >>= 4
                    while size:
                        head[-1] |= 0x80
                        head.append(size & 0x7F)
                        size >>= 7
                    body = zlib.compress(data, 1)
                    self.f.write(head)
                    self.f.write(body)
                    self.entries += _REC.pack(raw, zlib.crc32(body, zlib.crc32(head)), offset)
                    offset += len(head) + len(body)
            except BaseException as e:  # reported to the caller; the pack is dropped
                self._error = e
            finally:
                with self._cond:
                    self._queued -= len(data)
                    self._cond.notify_all()

    def _drain(self) -> None:
        if self._thread is None:
            return
        with self._cond:
            self._queue.append(None)
            self._cond.notify_all()
        self._thread.join()
        self._thread = None
        if self._error is not None:
            raise pygit2.GitError(f"first-snapshot pack: {self._error}")

    # ------------------------------------------------------------------ the end
    def finish(self) -> int:
        """Trailer, index, in place. Returns the number of objects written."""
        try:
            self._drain()
            self.seen = set()  # no more adds: the ids live on in `entries` (4-5 MiB at 50k files)
            if not self.count:
                return 0
            self.f.seek(8)
            self.f.write(struct.pack(">I", self.count))
            self.f.flush()
            self.f.seek(0)
            h = hashlib.sha1()
            for chunk in iter(lambda: self.f.read(CHUNK), b""):
                h.update(chunk)
            pack_sum = h.digest()
            self.f.write(pack_sum)
            self.f.flush()
            os.fsync(self.f.fileno())
            self.f.close()
            name = os.path.join(self.dir, "pack-" + pack_sum.hex())
            pack_path = self.path
            assert pack_path is not None  # set in __init__, cleared only below and in close()
            fd, idx_path = tempfile.mkstemp(prefix="tmp-tc-", suffix=".idx", dir=self.dir)
            self.idx_path = idx_path
            with os.fdopen(fd, "wb") as f:
                f.write(_index_v2(self.entries, pack_sum))
                f.flush()
                os.fsync(f.fileno())
            self.entries = bytearray()
            for p in (pack_path, idx_path):
                os.chmod(p, 0o444)  # as git leaves pack files
            os.replace(pack_path, name + ".pack")  # the pack first: a reader looks for the .idx
            os.replace(idx_path, name + ".idx")
            self.path = self.idx_path = None
            return self.count
        finally:
            self.close()

    def close(self) -> None:
        try:
            self._drain()
        except pygit2.GitError:
            pass
        if not self.f.closed:
            self.f.close()
        for p in (self.path, self.idx_path):
            if p:
                try:
                    os.unlink(p)
                except FileNotFoundError:
                    pass
        self.path = self.idx_path = None


STALE = 600  # seconds: a live writer appends all the time, a killed one left its file behind


def _remove_stale(d: str) -> None:
    """Drop what a killed first snapshot left (`tmp-tc-*`): untouched for STALE seconds."""
    now = time.time()
    for name in os.listdir(d):
        if name.startswith("tmp-tc-"):
            p = os.path.join(d, name)
            try:
                if now - os.lstat(p).st_mtime > STALE:
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
