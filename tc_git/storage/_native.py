"""Everything tc-git does below pygit2's public API, in one module (issue 15/16).

Two ways down, both onto the libgit2 that pygit2 itself loaded (same global state):

- **pygit2's own cffi** (`pygit2.ffi`, its compiled `C`) for index entries with stat data:
  pygit2's `IndexEntry` carries only path, id and mode, and an entry without stat data makes the
  next save hash the file again. The declarations are pygit2's (`pygit2/decl/index.h`), compiled
  with the libgit2 it ships, so the struct layout is right by construction; what is private is
  `Index._index`.
- **ctypes** for functions pygit2 declares nowhere: the pack builder over a revision walk and
  `git_packbuilder_write_buf` (bundles), the indexer behind `git_odb_write_pack` (bundle import,
  the first snapshot's pack), the in-memory object backend `git_mempack_*`, and the ignore check
  for a path that is not UTF-8. The library is found through pygit2 itself: its extension
  module's handle first (dlsym there also searches the libgit2 it links: Linux, macOS), then the
  wheel layouts (`pygit2.libs/libgit2-*.so*`, `pygit2/.dylibs/libgit2*.dylib`, `git2*.dll`).

Capabilities, not versions: each group of calls (`PACK`, `INDEXER`, `MEMPACK`, `IGNORE_BYTES`,
`INDEX_STAT`) is used only when every symbol it needs resolves and, for the ctypes groups whose
structs we declare ourselves (`git_buf`, `git_indexer_progress`, `git_odb_writepack`), a
self-test in a scratch repository round-trips a pack through them once per process (~10 ms) and
pygit2's public API confirms the result. Anything else picks the fallback. `TC_NATIVE=off` turns
every path here off; `.ci/run` runs the suite again that way, so what a platform without a
usable libgit2 executes is tested here. The bindings are shaped as a pygit2 contribution would
be (see docs/architecture.md, "Native boundary").
"""
from __future__ import annotations

import contextlib
import ctypes
import errno as errno_mod
import glob
import importlib.util
import os
import shutil
import sys
import tempfile
import threading
import time

import pygit2

from ..base.settings import current

PACK = "pack"            # pack of a revision walk into memory (bundles, connectivity check)
INDEXER = "indexer"      # index a pack stream into a repository (bundle import, first-snapshot pack)
MEMPACK = "mempack"      # new objects held in memory, then written as one pack
IGNORE_BYTES = "ignore"  # ignore rules for a path that is not UTF-8
INDEX_STAT = "index"     # index entries with stat data (pygit2's cffi)
DIFF_SCAN = "scan"       # index-to-workdir diff of listed paths, with its counters (cffi + ctypes)
CAPABILITIES = (PACK, INDEXER, MEMPACK, IGNORE_BYTES, INDEX_STAT, DIFF_SCAN)

# The symbols each ctypes capability calls: a group is usable only when all of them resolve.
_SYMBOLS: dict[str, tuple[str, ...]] = {
    PACK: ("git_error_last", "git_buf_dispose", "git_revwalk_new", "git_revwalk_push", "git_revwalk_hide",
           "git_revwalk_free", "git_packbuilder_new", "git_packbuilder_free", "git_packbuilder_insert_walk",
           "git_packbuilder_write_buf", "git_packbuilder_object_count", "git_packbuilder_set_threads",
           "git_packbuilder_foreach"),
    INDEXER: ("git_error_last", "git_repository_odb", "git_odb_free", "git_odb_write_pack"),
    MEMPACK: ("git_mempack_new", "git_mempack_reset", "git_mempack_write_thin_pack", "git_odb_add_backend"),
    IGNORE_BYTES: ("git_error_last", "git_ignore_path_is_ignored"),
    DIFF_SCAN: ("git_diff_get_perfdata",),
}


def enabled() -> bool:
    """False under TC_NATIVE=off: nothing below pygit2's public API is called."""
    return current().native


class GitCallError(Exception):
    """A libgit2 call through ctypes returned an error (its message is libgit2's)."""


# --------------------------------------------------------------------------- ctypes declarations
class Buf(ctypes.Structure):  # git_buf (libgit2 >= 1.0: ptr, reserved, size)
    _fields_ = [("ptr", ctypes.c_void_p), ("reserved", ctypes.c_size_t), ("size", ctypes.c_size_t)]


class _Error(ctypes.Structure):  # git_error
    _fields_ = [("message", ctypes.c_char_p), ("klass", ctypes.c_int)]


class Progress(ctypes.Structure):  # git_indexer_progress (same as pygit2/decl/indexer.h)
    _fields_ = [(n, ctypes.c_uint) for n in ("total_objects", "indexed_objects", "received_objects",
                                              "local_objects", "total_deltas", "indexed_deltas")] + [
        ("received_bytes", ctypes.c_size_t)]


_APPEND = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(Progress))
_COMMIT = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(Progress))
_FREE = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_FOREACH = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p)


class _DiffPerf(ctypes.Structure):  # git_diff_perfdata (sys/diff.h), GIT_DIFF_PERFDATA_VERSION 1
    _fields_ = [("version", ctypes.c_uint), ("stat_calls", ctypes.c_size_t), ("oid_calculations", ctypes.c_size_t)]


class _WritePack(ctypes.Structure):  # git_odb_writepack (sys/odb_backend.h)
    _fields_ = [("backend", ctypes.c_void_p), ("append", _APPEND), ("commit", _COMMIT), ("free", _FREE)]


# --------------------------------------------------------------------------- finding the library
def _candidates() -> list[str]:
    """Files that may hold the libgit2 pygit2 uses, through pygit2 first: its extension modules
    (their handle resolves libgit2's symbols where it is linked dynamically), then where its
    wheels put the library on each platform, then what this process has mapped (Linux)."""
    paths: list[str] = []
    for mod in ("pygit2._libgit2", "pygit2._pygit2"):
        spec = importlib.util.find_spec(mod)
        if spec is not None and spec.origin:
            paths.append(spec.origin)
    base = os.path.dirname(pygit2.__file__)
    libs = os.path.join(base, os.pardir, "pygit2.libs")
    for pattern in (os.path.join(libs, "libgit2*.so*"), os.path.join(base, ".dylibs", "libgit2*.dylib"),
                    os.path.join(libs, "*git2*.dll"), os.path.join(base, "*git2*.dll"),
                    os.path.join(base, "libgit2*.so*")):
        paths += sorted(glob.glob(pattern))
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            paths += [p for p in (ln.rstrip("\n").split(" ")[-1] for ln in maps) if "git2" in os.path.basename(p)]
    except OSError:
        pass
    found: list[str] = []
    for p in paths:
        real = os.path.realpath(p)
        if os.path.isfile(real) and real not in found:
            found.append(real)
    return found


_lock = threading.Lock()
_LIB: ctypes.CDLL | None = None
_caps: dict[str, bool] = {}     # capability -> usable (filled once per process)
_probed = False
_why: dict[str, str] = {}       # capability -> why not (for `report()` and the tests)


def _load() -> ctypes.CDLL | None:
    """The first candidate that resolves the most capability groups' symbols."""
    best, best_n = None, 0
    for cand in _candidates():
        try:
            lg = ctypes.CDLL(cand)
        except OSError:
            continue
        n = sum(all(hasattr(lg, s) for s in syms) for syms in _SYMBOLS.values())
        if n > best_n:
            best, best_n = lg, n
        if n == len(_SYMBOLS):
            break
    if best is not None:
        best.git_error_last.restype = ctypes.POINTER(_Error)
        if hasattr(best, "git_packbuilder_object_count"):
            best.git_packbuilder_object_count.restype = ctypes.c_size_t
    return best


def _probe() -> None:
    """Fill `_caps` once: symbols first, then the self-test of the struct layouts we declare."""
    global _LIB, _probed
    _LIB = _load()
    for cap, syms in _SYMBOLS.items():
        missing = [s for s in syms if _LIB is None or not hasattr(_LIB, s)]
        _caps[cap] = not missing
        if missing:
            _why[cap] = "no loadable libgit2" if _LIB is None else "missing " + ", ".join(missing)
    if _caps[MEMPACK] and not (_caps[PACK] and _caps[INDEXER]):
        _caps[MEMPACK], _why[MEMPACK] = False, "needs the pack builder and the indexer"
    _caps[INDEX_STAT], why = _index_stat_capable()
    if why:
        _why[INDEX_STAT] = why
    _probed = True


def _test_diff_scan() -> None:
    if _caps[DIFF_SCAN]:
        why = _diff_scan_capable()
        if why:
            _caps[DIFF_SCAN], _why[DIFF_SCAN] = False, why


def _test_packs() -> None:
    if _caps[PACK] or _caps[INDEXER]:
        _selftest()


# The self-tests that write scratch repositories run when their capability is first asked for,
# not all at the first question: a first snapshot asks only for INDEX_STAT (and DIFF_SCAN from
# 5000 files), and the pack builder's round trip cost it ~40 ms of its fixed cost (a 1k-file
# first save was 1.23x git's).
_SELFTESTS = {DIFF_SCAN: _test_diff_scan, PACK: _test_packs, INDEXER: _test_packs, MEMPACK: _test_packs}
_tested: set = set()  # the self-test functions that have run


def has(cap: str) -> bool:
    """Whether the native path `cap` may be used now (always False under TC_NATIVE=off)."""
    if not enabled():
        return False
    test = _SELFTESTS.get(cap)
    if not _probed or (test is not None and test not in _tested):
        with _lock:
            if not _probed:
                _probe()
            if test is not None and test not in _tested:
                test()
                _tested.add(test)
    return _caps.get(cap, False)


def report() -> dict[str, str]:
    """Each capability: `on`, `off (TC_NATIVE=off)` or `off (<why>)`: for diagnostics and tests."""
    if not enabled():
        return {c: "off (TC_NATIVE=off)" for c in CAPABILITIES}
    for c in CAPABILITIES:
        has(c)
    return {c: "on" if _caps.get(c) else f"off ({_why.get(c, 'unknown')})" for c in CAPABILITIES}


def _lib() -> ctypes.CDLL:
    assert _LIB is not None
    return _LIB


def check(rc: int) -> None:
    if rc < 0:
        err = _lib().git_error_last()
        msg = err.contents.message.decode("utf-8", "replace") if err and err.contents.message else f"error {rc}"
        raise GitCallError(msg)


def _buf_bytes(buf: Buf) -> bytes:
    """The bytes of a filled git_buf, after checking what a sane one holds (a pointer, and no
    more bytes than allocated): a layout we declared wrongly fails here instead of reading
    from a random address."""
    if not buf.ptr or buf.size < 12 or buf.reserved < buf.size or buf.size > 1 << 40:
        raise GitCallError(f"unexpected git_buf (size {buf.size}, allocated {buf.reserved})")
    return ctypes.string_at(buf.ptr, buf.size)


def _repo_ptr(repo: pygit2.Repository) -> ctypes.c_void_p:
    return ctypes.c_void_p(int.from_bytes(repo._pointer, sys.byteorder))


def _raw(oid) -> ctypes.c_char_p:
    return ctypes.c_char_p(pygit2.Oid(hex=str(oid)).raw)


# --------------------------------------------------------------------------- self-test
def _scratch_repo(path: str) -> pygit2.Repository:
    """The smallest bare repository libgit2 opens (init_repository copies templates: ~60 ms)."""
    os.makedirs(os.path.join(path, "objects", "pack"))
    os.makedirs(os.path.join(path, "refs", "heads"))
    with open(os.path.join(path, "HEAD"), "w", encoding="ascii") as f:
        f.write("ref: refs/heads/main\n")
    return pygit2.Repository(path, pygit2.enums.RepositoryOpenFlag.NO_SEARCH)


def _selftest() -> None:
    """Round-trip one commit through the pack builder, `git_buf` and the indexer in a scratch
    repository, and one blob through the mempack backend; pygit2's public API judges the result.
    A layout we declare wrongly shows as a wrong count, a bad header or a missing object here,
    not as a corrupt store later."""
    tmp = tempfile.mkdtemp(prefix="tc-native-")
    try:
        src = _scratch_repo(os.path.join(tmp, "a"))
        blob = src.create_blob(b"tc-git native self-test\n")
        text = b"".join(b"line %d of a file the pack builder stores as a delta\n" % i for i in range(200))
        tb = src.TreeBuilder()
        tb.insert("f", blob, pygit2.enums.FileMode.BLOB)
        tb.insert("g", src.create_blob(text), pygit2.enums.FileMode.BLOB)
        tb.insert("h", src.create_blob(text + b"one more line\n"), pygit2.enums.FileMode.BLOB)
        sig = pygit2.Signature("t", "t@t", 0, 0)
        commit = src.create_commit(None, sig, sig, "t", tb.write(), [])
        data = b""
        if _caps[PACK]:
            try:
                n, data = pack_walk(src, [commit], (), _checked=False)
                ok = n == 5 and data[:4] == b"PACK" and int.from_bytes(data[8:12], "big") == 5 and len(data) > 32
                if not ok:
                    _caps[PACK], _why[PACK] = False, f"self-test: {n} objects, header {data[:12]!r}"
            except GitCallError as e:
                _caps[PACK], _why[PACK] = False, f"self-test: {e}"
        if _caps[INDEXER]:
            if not _caps[PACK]:  # no pack builder: a one-blob pack written by hand
                import hashlib
                import zlib
                content = b"tc-git native self-test\n"  # 24 bytes: type 3, size in two header bytes
                body = (b"PACK" + (2).to_bytes(4, "big") + (1).to_bytes(4, "big")
                        + bytes([0x80 | 0x30 | (len(content) & 0xF), len(content) >> 4]) + zlib.compress(content))
                data = body + hashlib.sha1(body).digest()
            dst = _scratch_repo(os.path.join(tmp, "b"))
            try:
                n = write_pack(dst, [data], _checked=False)
                dst = pygit2.Repository(dst.path)
                want = 5 if _caps[PACK] else 1
                if n != want or (commit if _caps[PACK] else blob) not in dst:
                    _caps[INDEXER], _why[INDEXER] = False, f"self-test: indexed {n} objects, expected {want}"
            except GitCallError as e:
                _caps[INDEXER], _why[INDEXER] = False, f"self-test: {e}"
        if _caps[MEMPACK] and not (_caps[PACK] and _caps[INDEXER]):
            _caps[MEMPACK], _why[MEMPACK] = False, "needs the pack builder and the indexer"
        if _caps[MEMPACK]:
            try:
                work = pygit2.Repository(os.path.join(tmp, "a"))
                mp = MemPack(work, _checked=False)
                oid = work.create_blob(b"tc-git mempack self-test\n")
                loose = os.path.join(tmp, "a", "objects", str(oid)[:2], str(oid)[2:])
                n = mp.flush()
                work.free()
                if n != 1 or os.path.exists(loose) or oid not in pygit2.Repository(os.path.join(tmp, "a")):
                    _caps[MEMPACK], _why[MEMPACK] = False, f"self-test: flushed {n} objects"
            except pygit2.GitError as e:
                _caps[MEMPACK], _why[MEMPACK] = False, f"self-test: {e}"
    except Exception as e:  # anything unexpected: every ctypes path off, the fallbacks run
        for cap in (PACK, INDEXER, MEMPACK):
            if _caps.get(cap):
                _caps[cap], _why[cap] = False, f"self-test failed: {type(e).__name__}: {e}"
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _require(cap: str, checked: bool) -> ctypes.CDLL:
    if checked and not has(cap):
        raise GitCallError(f"native {cap} path unavailable: {report()[cap]}")
    return _lib()


# --------------------------------------------------------------------------- PACK
def _packbuilder(repo: pygit2.Repository, tips, hides, checked: bool = True) -> ctypes.c_void_p:
    lg = _require(PACK, checked)
    walk, pb = ctypes.c_void_p(), ctypes.c_void_p()
    check(lg.git_revwalk_new(ctypes.byref(walk), _repo_ptr(repo)))
    try:
        for t in tips:
            check(lg.git_revwalk_push(walk, _raw(t)))
        for h in hides:
            check(lg.git_revwalk_hide(walk, _raw(h)))
        check(lg.git_packbuilder_new(ctypes.byref(pb), _repo_ptr(repo)))
        lg.git_packbuilder_set_threads(pb, 0)
        check(lg.git_packbuilder_insert_walk(pb, walk))
        return pb
    except BaseException:
        if pb:
            lg.git_packbuilder_free(pb)
        raise
    finally:
        lg.git_revwalk_free(walk)


def pack_walk(repo: pygit2.Repository, tips, hides=(), _checked: bool = True) -> tuple[int, bytes]:
    """(object count, pack bytes) of everything reachable from `tips` that `hides` does not
    reach, trees of hidden commits included (`git pack-objects --revs` with `^hide`)."""
    lg = _require(PACK, _checked)
    pb = _packbuilder(repo, tips, hides, _checked)
    try:
        n = lg.git_packbuilder_object_count(pb)
        buf = Buf()
        check(lg.git_packbuilder_write_buf(ctypes.byref(buf), pb))
        try:
            data = _buf_bytes(buf)
        finally:
            lg.git_buf_dispose(ctypes.byref(buf))
        return n, data
    finally:
        lg.git_packbuilder_free(pb)


def pack_walk_to(repo: pygit2.Repository, tips, hides, write, _checked: bool = True,
                 skip_empty: bool = False) -> tuple[int, int]:
    """`pack_walk`, the bytes handed to `write(bytes)` as libgit2 produces them (packbuilder
    foreach), so the pack is never whole in memory (pack_walk holds it twice, libgit2's buffer
    and its Python copy: ~36 MiB for a 50k-file export). Returns (object count, bytes);
    `skip_empty`: a pack of no object is not produced at all (0, 0)."""
    lg = _require(PACK, _checked)
    pb = _packbuilder(repo, tips, hides, _checked)
    if skip_empty and not lg.git_packbuilder_object_count(pb):
        lg.git_packbuilder_free(pb)
        return 0, 0
    total = 0
    failed: list[BaseException] = []

    def chunk(ptr, size, _payload):
        nonlocal total
        try:
            write(ctypes.string_at(ptr, size))
            total += size
            return 0
        except BaseException as e:  # a full disk: libgit2 stops at a non-zero return
            failed.append(e)
            return -1

    cb = _FOREACH(chunk)
    try:
        n = lg.git_packbuilder_object_count(pb)
        rc = lg.git_packbuilder_foreach(pb, cb, None)
        if failed:
            raise failed[0]
        check(rc)
        return n, total
    finally:
        lg.git_packbuilder_free(pb)


def insert_walk(pb: pygit2.PackBuilder, repo: pygit2.Repository, tips) -> None:
    """Every commit `tips` reach and all it holds into a pygit2 PackBuilder, walked by libgit2
    (revwalk and insert_walk: each tree read once, each object with its path)."""
    from pygit2.ffi import ffi  # (pygit2's cffi handle of the builder)

    lg = _require(PACK, True)
    walk = ctypes.c_void_p()
    check(lg.git_revwalk_new(ctypes.byref(walk), _repo_ptr(repo)))
    try:
        for t in tips:
            check(lg.git_revwalk_push(walk, _raw(t)))
        check(lg.git_packbuilder_insert_walk(ctypes.c_void_p(int(ffi.cast("uintptr_t", pb._packbuilder))), walk))
    finally:
        lg.git_revwalk_free(walk)


def insert_named(pb: pygit2.PackBuilder, named) -> None:
    """(id, path or None) pairs into a pygit2 PackBuilder, each with its path (pygit2's `add`
    gives none: libgit2 then pairs objects for deltas by size alone)."""
    from pygit2.errors import check_error
    from pygit2.ffi import C, ffi

    _require(PACK, True)
    git_oid = ffi.new("git_oid *")
    for oid, path in named:
        ffi.buffer(git_oid)[:] = oid.raw
        check_error(C.git_packbuilder_insert(pb._packbuilder, git_oid,
                                             ffi.NULL if path is None else path.encode("utf-8", "surrogateescape")))


def count_walk(repo: pygit2.Repository, tips, hides=()) -> int:
    """How many objects `pack_walk` would pack; the builder reads each object's header while
    collecting, so a missing object raises GitCallError. Nothing is written."""
    lg = _require(PACK, True)
    pb = _packbuilder(repo, tips, hides)
    try:
        return lg.git_packbuilder_object_count(pb)
    finally:
        lg.git_packbuilder_free(pb)


# --------------------------------------------------------------------------- INDEXER
def write_pack(repo: pygit2.Repository, chunks, _checked: bool = True) -> int:
    """Index pack data into `repo`'s objects/pack (thin bases are looked up through its odb).

    `chunks` yields the pack's bytes in order (bytes objects). Returns the number of objects;
    raises GitCallError on a corrupt or truncated pack (nothing is kept then).
    """
    with PackSink(repo, _checked) as sink:
        for chunk in chunks:
            sink.append(chunk)
        return sink.commit()


class PackSink:
    """`write_pack` with the bytes pushed in as they come (`append`; a pack builder's foreach),
    indexed into `repo`'s objects/pack by `commit()`. Leaving the `with` block without a commit
    (an error) keeps nothing."""

    def __init__(self, repo: pygit2.Repository, _checked: bool = True):
        self.lg = _require(INDEXER, _checked)
        self.odb = ctypes.c_void_p()
        check(self.lg.git_repository_odb(ctypes.byref(self.odb), _repo_ptr(repo)))
        self.wp = ctypes.POINTER(_WritePack)()
        try:
            with whole_windows():  # (each call into the indexer: what a pack builder reads between
                # two appends, from the store's packs, keeps the small windows)
                check(self.lg.git_odb_write_pack(ctypes.byref(self.wp), self.odb, None, None))
        except BaseException:
            self.lg.git_odb_free(self.odb)
            raise
        self.st = Progress()
        self.head = b""

    def __enter__(self) -> PackSink:
        return self

    def __exit__(self, *exc) -> None:
        with whole_windows():
            self.wp.contents.free(self.wp)
        self.lg.git_odb_free(self.odb)

    def append(self, chunk) -> None:
        chunk = bytes(chunk)
        if len(self.head) < 12:
            self.head += chunk[:12 - len(self.head)]
        with whole_windows():
            check(self.wp.contents.append(self.wp, ctypes.c_char_p(chunk), len(chunk), ctypes.byref(self.st)))

    def commit(self) -> int:
        st = self.st
        with whole_windows():
            check(self.wp.contents.commit(self.wp, ctypes.byref(st)))
        # what a sane git_indexer_progress says after a commit (thin bases added by the indexer
        # count in `local_objects`, and libgit2 1.9 leaves them out of `total_objects`): a layout
        # we declared wrongly shows here
        sent = int.from_bytes(self.head[8:12], "big")
        if (st.received_objects != sent or st.indexed_objects != st.total_objects
                or st.total_objects not in (sent, sent + st.local_objects) or st.indexed_deltas != st.total_deltas):
            counts = ", ".join(f"{f[0]} {getattr(st, f[0])}" for f in Progress._fields_)
            raise GitCallError(f"unexpected indexer progress: {counts}; the pack holds {sent}")
        return st.total_objects


# --------------------------------------------------------------------------- MEMPACK
class MemPack:
    """Route every object `repo` writes into memory until `flush()` (give it a private handle:
    the backend stays attached to that handle's object database until the handle is freed).
    libgit2's failures arrive as pygit2.GitError, like those of the objects written meanwhile."""

    def __init__(self, repo: pygit2.Repository, _checked: bool = True):
        lg = _require(MEMPACK, _checked)
        self.repo = repo
        self.backend = ctypes.c_void_p()
        try:
            check(lg.git_mempack_new(ctypes.byref(self.backend)))
            odb = ctypes.c_void_p()
            check(lg.git_repository_odb(ctypes.byref(odb), _repo_ptr(repo)))
            try:
                check(lg.git_odb_add_backend(odb, self.backend, 999))  # the odb owns it from here
            finally:
                lg.git_odb_free(odb)
        except GitCallError as e:
            raise pygit2.GitError(f"mempack: {e}") from None

    def flush(self) -> int:
        """Write the objects held in memory as one pack (with its index) under objects/pack."""
        lg = _lib()
        buf = Buf()
        pb = ctypes.c_void_p()
        try:
            # not git_mempack_dump: in libgit2 1.9 it packs only commits and what they reach, and
            # a snapshot writes blobs and trees; write_thin_pack inserts every object held here
            check(lg.git_packbuilder_new(ctypes.byref(pb), _repo_ptr(self.repo)))
            try:
                lg.git_packbuilder_set_threads(pb, 0)
                check(lg.git_mempack_write_thin_pack(self.backend, pb))
                check(lg.git_packbuilder_write_buf(ctypes.byref(buf), pb))
            finally:
                lg.git_packbuilder_free(pb)
            try:
                n = write_pack(self.repo, [_buf_bytes(buf)], _checked=False)
            finally:
                lg.git_buf_dispose(ctypes.byref(buf))
            check(lg.git_mempack_reset(self.backend))
        except GitCallError as e:
            raise pygit2.GitError(f"mempack: {e}") from None
        return n


# --------------------------------------------------------------------------- IGNORE_BYTES
def path_is_ignored(repo: pygit2.Repository, rel: str) -> bool:
    """`repo.path_is_ignored` for any name: pygit2 encodes paths as strict UTF-8, so a name
    that is not (surrogate-escaped bytes) goes through ctypes. Without that path, each byte
    that is not UTF-8 is read as U+FFFD: the wildcards (`*.log`, `build/`, `.env*`) match it as
    they match any character, and only a rule that names those very bytes is missed."""
    try:
        return repo.path_is_ignored(rel)
    except UnicodeEncodeError:
        if not has(IGNORE_BYTES):
            return repo.path_is_ignored(rel.encode("utf-8", "surrogateescape").decode("utf-8", "replace"))
        out = ctypes.c_int(0)
        check(_lib().git_ignore_path_is_ignored(ctypes.byref(out), _repo_ptr(repo),
                                                rel.encode("utf-8", "surrogateescape")))
        return bool(out.value)


# --------------------------------------------------------------------------- INDEX_STAT (cffi)
_ENTRY_FIELDS = ("ctime", "mtime", "dev", "ino", "mode", "uid", "gid", "file_size", "id", "path")


def _index_stat_capable() -> tuple[bool, str]:
    try:
        from pygit2 import ffi
        from pygit2.ffi import C
        fields = {name for name, _ in ffi.typeof("git_index_entry").fields}
        missing = [f for f in _ENTRY_FIELDS if f not in fields]
        missing += [f for f in ("git_index_add", "git_index_get_byindex", "git_index_get_bypath",
                                "git_index_entrycount")
                    if not hasattr(C, f)]
        if missing:
            return False, "pygit2's cffi lacks " + ", ".join(missing)
        if not hasattr(pygit2.Index(), "_index"):
            return False, "pygit2.Index has no _index"
    except Exception as e:  # an older/newer pygit2 shaped otherwise
        return False, f"pygit2's cffi unusable: {type(e).__name__}: {e}"
    return True, ""


def entry_seconds(ns: int) -> int:
    """A file time in ns as an index entry stores its seconds (32-bit signed, clamped)."""
    s = ns // 1_000_000_000
    return max(-(1 << 31), min((1 << 31) - 1, s))


def index_stats(idx: pygit2.Index) -> dict[str, tuple]:
    """path -> (mode, size, mtime s, mtime ns, ctime s, ctime ns, ino) of every entry.

    Without INDEX_STAT the stat fields are None (pygit2's IndexEntry has none): every
    comparison against them fails, so the walk reads those files again (slower, never wrong)."""
    out: dict[str, tuple] = {}
    if has(INDEX_STAT):
        from pygit2 import ffi
        from pygit2.ffi import C
        cidx = idx._index
        for i in range(C.git_index_entrycount(cidx)):
            e = C.git_index_get_byindex(cidx, i)
            out[ffi.string(e.path).decode("utf-8", "surrogateescape")] = (
                e.mode, e.file_size, e.mtime.seconds, e.mtime.nanoseconds, e.ctime.seconds,
                e.ctime.nanoseconds, e.ino)
        return out
    for entry in idx:
        out[entry.path] = (int(entry.mode), None, None, None, None, None, None)
    return out


def _entry_stat(e) -> tuple:
    return (e.mode, e.file_size, e.mtime.seconds, e.mtime.nanoseconds, e.ctime.seconds, e.ctime.nanoseconds,
            e.ino)


def index_entry_stat(idx: pygit2.Index, rel: str) -> tuple | None:
    """One entry's tuple as `index_stats` gives it, None if `rel` has no entry: a refresh of a
    few paths looks them up instead of materializing every entry (~0.15 s at 50k)."""
    if has(INDEX_STAT):
        from pygit2 import ffi
        from pygit2.ffi import C
        e = C.git_index_get_bypath(idx._index, rel.encode("utf-8", "surrogateescape"), 0)
        return None if e == ffi.NULL else _entry_stat(e)
    try:
        entry = idx[rel]
    except (KeyError, UnicodeEncodeError):
        return None
    return (int(entry.mode), None, None, None, None, None, None)


def index_path_reader(idx: pygit2.Index):
    """i -> the raw path of `idx`'s i-th entry (entries are sorted by these bytes), bound once: a
    bisection over 50k entries calls it thousands of times, and a capability check per call
    cost more than the lookup."""
    if has(INDEX_STAT):
        from pygit2 import ffi
        from pygit2.ffi import C
        cidx, get, string = idx._index, C.git_index_get_byindex, ffi.string
        return lambda i: string(get(cidx, i).path)
    return lambda i: os.fsencode(idx[i].path)


def index_add(idx: pygit2.Index, rel: str, oid: pygit2.Oid, mode: int, st, racy_ns: int,
              fence_ns: int | None = None) -> None:
    """Add (or replace) the entry `rel` -> `oid` with the stat data of `st`, taken before the
    file was read, so a later change shows as dirty. An entry changed less than `racy_ns` ago
    gets a zero mtime (git's "racily clean" smudge: the next save reads it again); with
    `fence_ns` (a file-system timestamp taken before the file was read: restore.fs_fence), one
    changed at or after that timestamp instead.

    Without INDEX_STAT the entry has no stat data at all: the next save's diff hashes the file
    once, finds it unchanged and stores the stat data (UPDATE_INDEX)."""
    if not has(INDEX_STAT):
        idx.add(pygit2.IndexEntry(rel, oid, pygit2.enums.FileMode(mode)))
        return
    from pygit2 import ffi
    from pygit2.errors import check_error
    from pygit2.ffi import C
    e = ffi.new("git_index_entry *")
    e.ctime.seconds, e.ctime.nanoseconds = entry_seconds(st.st_ctime_ns), st.st_ctime_ns % 1_000_000_000
    e.mtime.seconds, e.mtime.nanoseconds = entry_seconds(st.st_mtime_ns), st.st_mtime_ns % 1_000_000_000
    if (max(st.st_mtime_ns, st.st_ctime_ns) >= fence_ns if fence_ns is not None
            else time.time_ns() - max(st.st_mtime_ns, st.st_ctime_ns) < racy_ns):
        e.mtime.seconds, e.mtime.nanoseconds = 0, 0  # racily clean: read again next time
    e.dev, e.ino = st.st_dev & 0xFFFFFFFF, st.st_ino & 0xFFFFFFFF
    e.uid, e.gid = st.st_uid & 0xFFFFFFFF, st.st_gid & 0xFFFFFFFF
    e.mode = mode
    e.file_size = st.st_size & 0xFFFFFFFF
    ffi.buffer(ffi.addressof(e, "id"))[:] = oid.raw
    path = ffi.new("char[]", rel.encode("utf-8", "surrogateescape"))
    e.path = path
    check_error(C.git_index_add(idx._index, e))


# --------------------------------------------------------------------------- DIFF_SCAN
_DISABLE_PATHSPEC_MATCH = 1 << 12  # GIT_DIFF_DISABLE_PATHSPEC_MATCH: the paths are names, not patterns


def diff_paths(repo: pygit2.Repository, idx: pygit2.Index, flags: int, paths, _checked: bool = True):
    """libgit2's index-to-workdir diff (`Index.diff_to_workdir`) limited to `paths` (raw workspace
    paths: a file, or a directory and everything under it; never patterns), and its counters
    (stat calls, ids computed). libgit2 skips what is outside `paths` before it stats it, and the
    call runs without the GIL: scan.py runs one a core on disjoint paths. `repo` may be another
    handle of the index's store (the diff only reads `idx` unless UPDATE_INDEX is set)."""
    if _checked and not has(DIFF_SCAN):
        raise GitCallError(f"native {DIFF_SCAN} path unavailable: {report()[DIFF_SCAN]}")
    from pygit2 import ffi
    from pygit2.errors import check_error
    from pygit2.ffi import C
    opts = ffi.new("git_diff_options *")
    check_error(C.git_diff_options_init(opts, 1))
    opts.flags = int(flags) | _DISABLE_PATHSPEC_MATCH
    keep = [ffi.new("char[]", p) for p in paths]
    strings = ffi.new("char *[]", keep)
    opts.pathspec.strings, opts.pathspec.count = strings, len(keep)
    out = ffi.new("git_diff **")
    check_error(C.git_diff_index_to_workdir(out, repo._repo, idx._index, opts))
    diff = pygit2.Diff.from_c(bytes(ffi.buffer(out)[:]), repo)
    perf = _DiffPerf(1, 0, 0)
    try:
        check(_lib().git_diff_get_perfdata(ctypes.byref(perf), ctypes.c_void_p(int(ffi.cast("uintptr_t", out[0])))))
    except GitCallError as e:
        raise pygit2.GitError(f"diff counters: {e}") from None
    return diff, perf.stat_calls, perf.oid_calculations


def _diff_scan_capable() -> str:
    """Why DIFF_SCAN cannot be used ("" if it can): pygit2's cffi must declare the options and the
    call, and in a scratch workspace a diff limited to one name must stat only that name, and
    count the id it computed for a touched file (the layout of git_diff_perfdata we declare)."""
    try:
        from pygit2 import ffi
        from pygit2.ffi import C
        fields = {name for name, _ in ffi.typeof("git_diff_options").fields}
        if "pathspec" not in fields or not hasattr(C, "git_diff_index_to_workdir"):
            return "pygit2's cffi lacks git_diff_options.pathspec or git_diff_index_to_workdir"
        if not hasattr(pygit2.Diff, "from_c"):
            return "pygit2.Diff has no from_c"
    except Exception as e:
        return f"pygit2's cffi unusable: {type(e).__name__}: {e}"
    tmp = tempfile.mkdtemp(prefix="tc-native-scan-")
    try:
        repo = _scratch_repo(os.path.join(tmp, "store"))
        work = os.path.join(tmp, "w")
        os.makedirs(os.path.join(work, "d"))
        repo.workdir = work
        for name in ("a", "d/b", "d/c"):  # older than the index: not "racily clean"
            with open(os.path.join(work, name), "wb") as f:
                f.write(b"tc-git scan self-test\n")
            os.utime(os.path.join(work, name), ns=(1_000_000_000, 1_000_000_000))
        idx = repo.index
        for name in ("a", "d/b", "d/c"):
            idx.add(name)
        idx.write()
        for name in ("a", "d/b"):  # touched, same bytes: libgit2 hashes them to find them unchanged
            os.utime(os.path.join(work, name), ns=(2_000_000_000, 2_000_000_000))
        with open(os.path.join(work, "d", "new"), "wb") as f:
            f.write(b"x")
        flags = int(pygit2.enums.DiffOption.INCLUDE_UNTRACKED)
        diff, stats, ids = diff_paths(repo, idx, flags, [b"d"], _checked=False)
        got = sorted((d.status_char(), d.new_file.path) for d in diff.deltas)
        if got != [("?", "d/new")] or ids != 1 or not 3 <= stats <= 6:
            return f"self-test: deltas {got}, {stats} stat calls, {ids} ids computed"
        diff, stats, ids = diff_paths(repo, idx, flags, [b"a"], _checked=False)
        if len(diff) != 0 or ids != 1 or stats != 1:
            return f"self-test: {len(diff)} deltas, {stats} stat calls, {ids} ids computed for one name"
    except Exception as e:
        return f"self-test failed: {type(e).__name__}: {e}"
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return ""


# --------------------------------------------------------------------------- pack windows
# libgit2 reads packs through mmap'd windows (1 GiB each by default), and every page touched counts
# in the resident size while its window is mapped. A long-lived server maps smaller windows
# (`small_windows`, heap.bound_libgit2) so that its mapped limit can unmap them as it reads on. But
# libgit2 1.9.7's indexer refused a valid 18 MB pack with 1 MiB windows ("unexpected data at the
# end of the pack"; stock git verified it): while any indexer runs (every pack written through
# libgit2: PackSink, a PackBuilder's write, a fetch), windows are libgit2's default size again
# (`whole_windows`). The size is process-wide; a window keeps the size it was mapped with.
_windows = {"small": 0, "default": 0, "indexers": 0}
_windows_lock = threading.Lock()


def small_windows(size: int) -> None:
    """Map pack windows of `size` bytes from now on, outside `whole_windows` (0: libgit2's size)."""
    with _windows_lock:
        if not _windows["default"]:
            _windows["default"] = pygit2.settings.mwindow_size
        _windows["small"] = size
        if not _windows["indexers"]:
            pygit2.settings.mwindow_size = size or _windows["default"]


@contextlib.contextmanager
def whole_windows():
    """libgit2's own window size for as long as the block runs (an indexer inside it)."""
    with _windows_lock:
        _windows["indexers"] += 1
        if _windows["small"] and _windows["indexers"] == 1:
            pygit2.settings.mwindow_size = _windows["default"]
    try:
        yield
    finally:
        with _windows_lock:
            _windows["indexers"] -= 1
            if _windows["small"] and not _windows["indexers"]:
                pygit2.settings.mwindow_size = _windows["small"]


# --------------------------------------------------------------------------- libc
def malloc_trim_fn():
    """glibc's `malloc_trim` (heap.py gives freed pages back with it), or None (musl, macOS,
    Windows: no such function)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        fn = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None
    fn.argtypes, fn.restype = [ctypes.c_size_t], ctypes.c_int
    return fn


def mallopt_fn():
    """glibc's `mallopt` (heap.py fixes the mmap threshold with it), or None elsewhere."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        fn = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return None
    fn.argtypes, fn.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return fn


# ---------------------------------------------------------------------------- libc: renameat2
# wsfs replaces a restored file by swapping names (RENAME_EXCHANGE): Python has no renameat2.
_RENAMEAT2: list = []
_UNSUPPORTED = {getattr(__import__("errno"), n) for n in ("ENOSYS", "EINVAL", "EOPNOTSUPP", "EPERM")}


def _libc_renameat2():
    if not _RENAMEAT2:
        fn = None
        if sys.platform.startswith("linux"):
            try:
                fn = ctypes.CDLL(None, use_errno=True).renameat2
                fn.argtypes = (ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint)
                fn.restype = ctypes.c_int
            except (OSError, AttributeError):  # (glibc before 2.28, musl without it)
                fn = None
        _RENAMEAT2.append(fn)
    return _RENAMEAT2[0]


def has_renameat2() -> bool:
    return enabled() and _libc_renameat2() is not None


def renameat2(src_dir: int, src: str, dst_dir: int, dst: str, flags: int) -> bool:
    """renameat2(2) relative to two directory descriptors: True when done; False where the call
    or the flag is missing (the kernel, the file system, a seccomp filter) or TC_NATIVE=off: the
    caller does without. Any other failure raises OSError, as os.rename does."""
    fn = _libc_renameat2() if enabled() else None
    if fn is None:
        return False
    if fn(src_dir, os.fsencode(src), dst_dir, os.fsencode(dst), flags) == 0:
        return True
    err = ctypes.get_errno()
    if err in _UNSUPPORTED:
        return False
    raise OSError(err, os.strerror(err), dst)


# ---------------------------------------------------------------------------- libc: inotify
# The drift watcher's notifications on Linux (tc_git/workspace/inotify.py): Python has no inotify binding.
_INOTIFY: list = []


def _libc_inotify():
    if not _INOTIFY:
        fns = None
        if sys.platform.startswith("linux"):
            try:
                lib = ctypes.CDLL(None, use_errno=True)
                init, add = lib.inotify_init1, lib.inotify_add_watch
                init.argtypes, init.restype = (ctypes.c_int,), ctypes.c_int
                add.argtypes, add.restype = (ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32), ctypes.c_int
                fns = (init, add)
            except (OSError, AttributeError):
                fns = None
        _INOTIFY.append(fns)
    return _INOTIFY[0]


def has_inotify() -> bool:
    return enabled() and _libc_inotify() is not None


def inotify_init1(flags: int) -> int:
    """inotify_init1(2): a new inotify descriptor; OSError on failure (or without inotify here)."""
    fns = _libc_inotify() if enabled() else None
    if fns is None:
        raise OSError(errno_mod.ENOSYS, "inotify is not available")
    fd = fns[0](flags)
    if fd < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return fd


def inotify_add_watch(fd: int, path: bytes, mask: int) -> int:
    """inotify_add_watch(2): the watch descriptor of `path` (the same one again for a directory
    already watched); OSError with the errno on failure."""
    fns = _libc_inotify() if enabled() else None
    if fns is None:
        raise OSError(errno_mod.ENOSYS, "inotify is not available")
    wd = fns[1](fd, path, mask)
    if wd < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), os.fsdecode(path))
    return wd
