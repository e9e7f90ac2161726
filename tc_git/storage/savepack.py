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
later consolidation once stale: `_settle_orphan`). Durability: a save's pack is fsync'd only
with TC_RESTORE_FSYNC=all (as the restore's files and journal, and then libgit2's loose objects
and refs: store.fsync_gitdir), so a power loss may take the last saves but nothing older; a consolidation's pack always
is (with the directory), before the packs it replaces are unlinked.

Packs stay few: once more than MAX_SMALL packs below SMALL_BYTES hold only whole objects (what
this module and packwriter write), `consolidate` copies their objects, compressed as they are,
into one new pack, puts it in place, and only then removes the old ones, `.idx` first (as git's
repack does): at every moment each object is in a pack git can find. A pack is merged only when
it holds exactly what its `.idx` says, each entry inflated and hashed to the id the index gives
(CRCs, both checksums, no byte unaccounted for); anything else (deltas, damage, a planted pack
whose index lies, a FIFO under a pack's name) is left as it is, so a bad copy never replaces a
good one (`tests/test_pack_hostile.py`). Readers that had an old pack open keep their mapping;
libgit2 and git look in the next pack or rescan the directory when one vanished under them.

The store's kept handle reopens when `objects/pack` changes (store.py: a repack or an import by
anyone): a pack this process added under the store lock is recorded (`handles.own_pack_change`)
so that the next call keeps its handle and its parsed index. A consolidation removes packs: it is
not recorded, and handles reopen once.
"""
from __future__ import annotations

import hashlib
import os
import stat as stat_mod
import struct
import tempfile
import time
import zlib
from typing import BinaryIO

import pygit2

from ..base.fsutil import fsync_setting
from . import _native, handles
from .packwriter import _REC, STALE, _compress, _remove_stale, discard, index_file, object_header, seal

BLOB, TREE = 3, 2
LOOSE_MAX = 4  # a save of this many objects or fewer writes them loose
MAX_SMALL = int(os.environ.get("TC_SAVEPACK_MAX", "32"))  # small packs allowed before consolidation
SMALL_BYTES = 8 << 20  # a pack at least this big is never merged again
_KINDS = {1: b"commit", 2: b"tree", 3: b"blob", 4: b"tag"}
_COMPANIONS = (".keep", ".bitmap", ".rev", ".mtimes", ".promisor")  # a pack with one is left alone


def available() -> bool:
    return os.environ.get("TC_SAVEPACK", "on").lower() not in ("0", "off", "false", "no")


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
            consolidate(self.repo)
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


# --------------------------------------------------------------------------- consolidation
# What consolidate merges must be exactly what it removes: a pack someone planted or damaged
# (a bad CRC, a truncated file, an .idx that names ids its entries do not hash to, deltas) is
# left as it is, never copied under ids it does not hold. Every entry is inflated and hashed.
INFLATE_BUDGET = 256 << 20  # bytes a pack's objects may inflate to: above it, left alone
_IN_CHUNK = 1 << 16
_OUT_CHUNK = 1 << 20
_RD_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)


def _read_regular(path: str, limit: int) -> bytes | None:
    """The bytes of a regular file of at most `limit` bytes; None otherwise (a link, a FIFO, a
    directory planted under a pack's name: never followed, never waited on)."""
    try:
        fd = os.open(path, _RD_FLAGS)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat_mod.S_ISREG(st.st_mode) or st.st_size > limit:
            return None
        chunks, n = [], 0
        while n <= limit:
            b = os.read(fd, 1 << 20)
            if not b:
                break
            chunks.append(b)
            n += len(b)
        return b"".join(chunks) if n <= limit else None
    except OSError:
        return None
    finally:
        os.close(fd)


def _read_idx(path: str) -> tuple[list[tuple[bytes, int, int]], bytes] | None:
    """(raw id, crc32, offset) of a version-2 pack index, and the pack checksum it names; None
    if it is not one we can read or its own checksum is wrong (a large-offset pack is never
    small)."""
    data = _read_regular(path, 8 + 1024 + 28 * SMALL_BYTES // 8 + 40)
    if data is None or len(data) < 8 + 1024 + 40 or data[:8] != b"\377tOc\0\0\0\2":
        return None
    if hashlib.sha1(memoryview(data)[:-20]).digest() != data[-20:]:
        return None
    n = struct.unpack_from(">I", data, 8 + 255 * 4)[0]
    ids = 8 + 1024
    crcs = ids + 20 * n
    offs = crcs + 4 * n
    if len(data) != offs + 4 * n + 40:
        return None
    out = []
    for i in range(n):
        off = struct.unpack_from(">I", data, offs + 4 * i)[0]
        if off & 0x80000000:
            return None
        out.append((data[ids + 20 * i: ids + 20 * i + 20], struct.unpack_from(">I", data, crcs + 4 * i)[0], off))
    return out, data[-40:-20]


def _entry_header(buf, pos: int, end: int) -> tuple[int, int, int] | None:
    """(type, inflated size, header length) of the pack entry at `pos`."""
    if pos >= end:
        return None
    c = buf[pos]
    kind, size, shift, i = (c >> 4) & 7, c & 15, 4, pos + 1
    while c & 0x80:
        if i >= end or shift > 56:
            return None
        c = buf[i]
        size |= (c & 0x7F) << shift
        shift += 7
        i += 1
    return kind, size, i - pos


def _inflate(buf, pos: int, end: int, size: int, h) -> int | None:
    """Inflate the zlib stream at buf[pos:end] into `h` (a hash), in bounded pieces; the offset
    where the stream ends, or None if it is damaged, unfinished or not exactly `size` bytes."""
    d = zlib.decompressobj()
    n = 0
    try:
        while not d.eof:
            if pos >= end:
                return None
            data = buf[pos:min(pos + _IN_CHUNK, end)]
            pos += len(data)
            while True:
                out = d.decompress(data, _OUT_CHUNK)
                n += len(out)
                if n > size:
                    return None
                h.update(out)
                data = d.unconsumed_tail
                if d.eof or (not data and not out):
                    break
    except zlib.error:
        return None
    return pos - len(d.unused_data) if n == size else None


def _whole_object(buf, off: int, end: int, budget: list[int]) -> tuple[bytes, int] | None:
    """The id of the whole object whose entry starts at `off` (hashed from its inflated bytes),
    and where its entry ends (`end`: the most it may take); None for a delta or damage."""
    head = _entry_header(buf, off, end)
    if head is None or not 1 <= head[0] <= 4:
        return None
    kind, size, hlen = head
    budget[0] -= size
    if budget[0] < 0:
        return None
    h = hashlib.sha1(b"%s %d\0" % (_KINDS[kind], size))
    stop = _inflate(buf, off + hlen, end, size, h)
    return None if stop is None else (h.digest(), stop)


def _scan(data) -> tuple[list[tuple[bytes, int, int]], bytes] | None:
    """Parse a pack (its whole bytes) without its index: (raw id, crc32, offset) of every entry
    and the pack's checksum, when the checksum holds, the header counts exactly the entries up
    to the trailer and every entry is a whole object (ids from the inflated bytes); else None."""
    if len(data) < 32 or data[:4] != b"PACK" or struct.unpack_from(">I", data, 4)[0] not in (2, 3):
        return None
    if hashlib.sha1(memoryview(data)[:-20]).digest() != data[-20:]:
        return None
    end, pos, recs, budget = len(data) - 20, 12, [], [INFLATE_BUDGET]
    for _ in range(struct.unpack_from(">I", data, 8)[0]):
        got = _whole_object(data, pos, end, budget)
        if got is None:
            return None
        raw, stop = got
        recs.append((raw, zlib.crc32(data[pos:stop]), pos))
        pos = stop
    return (recs, data[-20:]) if pos == end else None


def _whole_objects(pack_path: str, recs, pack_sum: bytes) -> list[tuple[bytes, int, bytes]] | None:
    """Each object's raw entry (header + zlib stream) with its id and CRC, when the pack holds
    exactly what its `.idx` says (`recs`, `pack_sum`: the same ids, CRCs and offsets, every one
    a whole object whose inflated bytes hash to its id); None otherwise (deltas, damage, a
    lying index: left alone)."""
    data = _read_regular(pack_path, SMALL_BYTES)
    if data is None:
        return None
    got = _scan(data)
    if got is None or got[1] != pack_sum or sorted(got[0], key=lambda r: r[2]) != sorted(recs, key=lambda r: r[2]):
        return None
    ends = [r[2] for r in got[0][1:]] + [len(data) - 20]
    return [(raw, crc, data[off:stop]) for (raw, crc, off), stop in zip(got[0], ends)]


def consolidate(repo: pygit2.Repository, max_small: int | None = None) -> int:
    """Merge the store's small whole-object packs into one once there are more than
    `max_small` (MAX_SMALL) of them. Returns the number of packs merged (0: nothing to do).
    Under the store's lock. Any failure leaves the packs as they were."""
    limit = MAX_SMALL if max_small is None else max_small
    d = os.path.join(repo.path, "objects", "pack")
    try:
        names = set(os.listdir(d))
    except OSError:
        return 0
    small = []
    for n in names:
        if not (n.startswith("pack-") and n.endswith(".pack")):
            continue
        stem = n[:-5]
        if stem + ".idx" not in names:
            _settle_orphan(repo, os.path.join(d, n))
            continue
        if any(stem + c in names for c in _COMPANIONS):
            continue
        try:
            if os.stat(os.path.join(d, n)).st_size < SMALL_BYTES:
                small.append(stem)
        except OSError:
            continue
    if len(small) <= limit:
        return 0
    _remove_stale(d)
    merged: list[str] = []
    fd, tmp_pack = tempfile.mkstemp(prefix="tmp-tc-", suffix=".pack", dir=d)
    try:
        with os.fdopen(fd, "w+b") as f:
            f.write(b"PACK" + struct.pack(">II", 2, 0))
            offset, count, seen, entries = 12, 0, set(), bytearray()
            for stem in sorted(small):
                try:
                    idx = _read_idx(os.path.join(d, stem + ".idx"))
                    objs = _whole_objects(os.path.join(d, stem + ".pack"), *idx) if idx is not None else None
                except OSError:
                    objs = None
                if objs is None:
                    continue
                merged.append(stem)
                for raw, crc, entry in objs:
                    if raw in seen:
                        continue
                    seen.add(raw)
                    f.write(entry)
                    entries += _REC.pack(raw, crc, offset)
                    offset += len(entry)
                    count += 1
            if len(merged) < 2:
                return 0
            # always synced: once the old packs are unlinked this is the only copy of objects
            # that were on disk for good, and a power loss must not take them (git syncs packs too)
            new_stem = os.path.basename(seal(f, tmp_pack, count, entries, sync=True))
    finally:
        discard(tmp_pack)  # (gone once in place)
    _sync_dir(d)  # the new names on disk before the old ones go
    # every object now also in the new pack: the old ones go, .idx first (git's order)
    for stem in merged:
        if stem == new_stem:  # the same objects in the same order: the same pack
            continue
        for ext in (".idx", ".pack"):
            try:
                os.unlink(os.path.join(d, stem + ext))
            except FileNotFoundError:
                pass
    return len(merged)


def _sync_dir(d: str) -> None:
    try:
        fd = os.open(d, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return  # (Windows: no directory handles; its renames are durable)
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


_LEFT_ALONE: set[tuple] = set()  # orphans that could not be proven redundant, by identity: not parsed again
# an orphan above SMALL_BYTES is indexed by libgit2's indexer (git index-pack's way), streamed from
# the file; above this it is left alone (indexing it would hold the save's lock for too long)
ORPHAN_INDEX_MAX = int(os.environ.get("TC_ORPHAN_INDEX_MAX_MB", "1024")) << 20
LEFT_ALONE_FILE = "orphans-left-alone.json"  # in the store's tc/: large orphans the indexer refused


def _settle_orphan(repo: pygit2.Repository, path: str) -> None:
    """A `.pack` without its `.idx`: a save killed between the two renames, a consolidation
    killed between the two unlinks, or someone else's. Invisible to git and libgit2 (they find
    packs by their `.idx`), so nothing reads it. Once stale (neither written nor renamed for
    STALE seconds, ctime included: not a live writer's) it is parsed: every entry a whole object
    whose bytes hash to its id, it is removed when each of those objects is elsewhere in the
    store, and otherwise gets its `.idx` back (the objects are visible again: nothing lost). One
    that cannot be parsed so (deltas, damage, a name that is not its checksum) is left as it is
    (runbook: `git index-pack` it or remove it). One larger than SMALL_BYTES goes through
    `_index_orphan` instead."""
    try:
        st = os.lstat(path)
    except OSError:
        return
    key = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    if key in _LEFT_ALONE or time.time() - max(st.st_mtime, st.st_ctime) <= STALE:
        return
    if stat_mod.S_ISREG(st.st_mode) and st.st_size > SMALL_BYTES:
        if not _index_orphan(repo, path, st):
            _LEFT_ALONE.add(key)
        return
    data = _read_regular(path, SMALL_BYTES)
    got = _scan(data) if data is not None else None
    if got is None or os.path.basename(path) != f"pack-{got[1].hex()}.pack":
        _LEFT_ALONE.add(key)
        return
    recs, pack_sum = got
    if all(repo.odb.exists(pygit2.Oid(raw=raw)) for raw, _c, _o in recs):
        discard(path)
        return
    # (synced: rare, only after a crash)
    tmp = index_file(os.path.dirname(path), b"".join(_REC.pack(*r) for r in recs), pack_sum, sync=True)
    try:
        os.replace(tmp, path[:-5] + ".idx")
    finally:
        discard(tmp)


def _index_orphan(repo: pygit2.Repository, path: str, st: os.stat_result) -> bool:
    """A stale orphan larger than SMALL_BYTES, fed to libgit2's indexer (`git_odb_write_pack`,
    as `git index-pack` would: every object inflated and hashed, deltas resolved, a thin pack's
    bases taken from the store) in 1 MiB reads: memory grows with its objects, not its bytes.
    Committed, the indexer has written the pack and its `.idx` under the pack's checksum: the
    orphan's own name (it has its index now), or, when it was thin or misnamed, another pack
    holding all of it (the orphan is then removed). Nothing is dropped unless the indexer kept
    all of it. False (left alone, and remembered in the store so no later process pays for it
    again): damaged, truncated, a base missing, not a regular file, larger than
    ORPHAN_INDEX_MAX, no native indexer (TC_NATIVE=off)."""
    tag = f"{os.path.basename(path)} {st.st_ino} {st.st_size} {st.st_mtime_ns} {st.st_ctime_ns}"
    left_file = os.path.join(repo.path, "tc", LEFT_ALONE_FILE)
    left = _read_left_alone(left_file)
    if tag in left or st.st_size > ORPHAN_INDEX_MAX or not _native.has(_native.INDEXER):
        return False
    try:
        fd = os.open(path, _RD_FLAGS)
    except OSError:
        return False
    try:
        f = os.fstat(fd)
        if not stat_mod.S_ISREG(f.st_mode) or (f.st_ino, f.st_size) != (st.st_ino, st.st_size):
            return False
        with _native.PackSink(repo) as sink:
            while True:
                chunk = os.read(fd, 1 << 20)
                if not chunk:
                    break
                sink.append(chunk)
            sink.commit()
    except (OSError, _native.GitCallError):
        from ..base.fsutil import atomic_write

        here = os.path.dirname(path)  # (orphans gone since are forgotten: the list stays as long as what is left)
        keep = {t for t in left if os.path.lexists(os.path.join(here, t.split(" ", 1)[0]))} | {tag}
        try:
            atomic_write(left_file, "\n".join(sorted(keep)).encode() + b"\n")
        except OSError:
            pass
        return False
    finally:
        os.close(fd)
    if not os.path.exists(path[:-5] + ".idx"):
        discard(path)  # every object of it is in the pack the indexer wrote
    return True


def _read_left_alone(path: str) -> set[str]:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return {ln for ln in f.read().splitlines() if ln}
    except OSError:
        return set()
