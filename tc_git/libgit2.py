"""The parts of libgit2 that pygit2 1.21 does not bind, reached through ctypes.

The wheel's libgit2 exports its whole C API, so ctypes loads the *same* library pygit2 already
loaded (same global state). Used for bundles (`git_packbuilder_insert_walk`,
`git_packbuilder_write_buf`, the indexer via `git_odb_write_pack`) and for the first snapshot's
in-memory object database (`git_mempack_*`). The struct layouts are libgit2 1.9's, which is why
pyproject pins pygit2 to 1.21; with another libgit2, a missing symbol, no loadable file, or
`TC_NATIVE=off`, `available()` is False and callers fall back to pygit2 or the git CLI (CI runs
the core and handoff tests a second time that way).
"""
from __future__ import annotations

import ctypes
import glob
import os
import sys

import pygit2


class Buf(ctypes.Structure):
    _fields_ = [("ptr", ctypes.c_void_p), ("reserved", ctypes.c_size_t), ("size", ctypes.c_size_t)]


class _Error(ctypes.Structure):
    _fields_ = [("message", ctypes.c_char_p), ("klass", ctypes.c_int)]


class Progress(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint) for n in ("total_objects", "indexed_objects", "received_objects",
                                              "local_objects", "total_deltas", "indexed_deltas")] + [
        ("received_bytes", ctypes.c_size_t)]


_APPEND = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(Progress))
_COMMIT = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(Progress))
_FREE = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class _WritePack(ctypes.Structure):
    _fields_ = [("backend", ctypes.c_void_p), ("append", _APPEND), ("commit", _COMMIT), ("free", _FREE)]


_LIB = None

# Every symbol the callers use: the library is used only when all of them resolve.
_SYMBOLS = ("git_error_last", "git_repository_odb", "git_odb_free", "git_odb_write_pack",
            "git_odb_add_backend", "git_buf_dispose", "git_packbuilder_new", "git_packbuilder_free",
            "git_packbuilder_insert_walk", "git_packbuilder_write_buf", "git_packbuilder_object_count",
            "git_packbuilder_set_threads", "git_revwalk_new", "git_revwalk_push", "git_revwalk_hide",
            "git_revwalk_free", "git_mempack_new", "git_mempack_reset", "git_mempack_write_thin_pack")
# libgit2 versions whose struct layouts (git_buf, git_indexer_progress, git_odb_writepack) were
# checked against the declarations above; another version takes the fallbacks.
_TESTED = {(1, 9)}


def native_disabled() -> bool:
    """TC_NATIVE=off turns every path below pygit2's public API off (CI runs the suite so, to
    exercise what a platform without a loadable libgit2 would run)."""
    return os.environ.get("TC_NATIVE", "").strip().lower() in ("0", "off", "no", "false")


def _candidates() -> list[str]:
    """Where pygit2's wheels put libgit2: manylinux `pygit2.libs/libgit2-*.so*`, macOS
    `pygit2/.dylibs/libgit2*.dylib`, Windows `pygit2.libs/git2*.dll` or beside the package; then
    what this process has already mapped (Linux), pygit2's own extension last (dlsym on its
    handle also searches the libgit2 it links)."""
    base = os.path.dirname(pygit2.__file__)
    libs = os.path.join(base, os.pardir, "pygit2.libs")
    paths: list[str] = []
    for pattern in (os.path.join(libs, "libgit2*.so*"), os.path.join(base, ".dylibs", "libgit2*.dylib"),
                    os.path.join(libs, "*git2*.dll"), os.path.join(base, "*git2*.dll"),
                    os.path.join(base, "libgit2*.so*")):
        paths += sorted(glob.glob(pattern))
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            mapped = (ln.rstrip("\n").split(" ")[-1] for ln in maps)
            paths += [p for p in mapped if "git2" in os.path.basename(p)]
    except OSError:
        pass
    found: list[str] = []
    for p in paths:
        real = os.path.realpath(p)
        if os.path.isfile(real) and real not in found:
            found.append(real)
    return found


def lib():
    """The libgit2 that pygit2 loaded, or None (disabled, not found, an untested version, or a
    symbol missing): callers then fall back to pygit2's public API or the git CLI."""
    global _LIB
    if native_disabled():
        return None
    if _LIB is None:
        _LIB = False
        if pygit2.LIBGIT2_VER[:2] in _TESTED:
            for cand in _candidates():
                try:
                    lg = ctypes.CDLL(cand)
                    if not all(hasattr(lg, name) for name in _SYMBOLS):
                        continue
                except OSError:
                    continue
                lg.git_error_last.restype = ctypes.POINTER(_Error)
                lg.git_packbuilder_object_count.restype = ctypes.c_size_t
                _LIB = lg
                break
    return _LIB or None


def available() -> bool:
    return lib() is not None


class GitCallError(Exception):
    pass


def check(rc: int) -> None:
    if rc < 0:
        err = lib().git_error_last()
        msg = err.contents.message.decode("utf-8", "replace") if err and err.contents.message else f"error {rc}"
        raise GitCallError(msg)


def repo_ptr(repo: pygit2.Repository):
    return ctypes.c_void_p(int.from_bytes(repo._pointer, sys.byteorder))


def raw_oid(oid) -> ctypes.c_char_p:
    return ctypes.c_char_p(pygit2.Oid(hex=str(oid)).raw)


def write_pack(repo: pygit2.Repository, chunks) -> int:
    """Index pack data into `repo`'s objects/pack (thin bases are looked up through its odb).

    `chunks` yields `(pointer, length)` pairs of the pack's bytes, in order. Returns the number
    of objects; raises GitCallError on a corrupt or truncated pack (nothing is kept then).
    """
    lg = lib()
    odb = ctypes.c_void_p()
    check(lg.git_repository_odb(ctypes.byref(odb), repo_ptr(repo)))
    wp = ctypes.POINTER(_WritePack)()
    st = Progress()
    try:
        check(lg.git_odb_write_pack(ctypes.byref(wp), odb, None, None))
        try:
            for ptr, size in chunks:
                check(wp.contents.append(wp, ptr, size, ctypes.byref(st)))
            check(wp.contents.commit(wp, ctypes.byref(st)))
        finally:
            wp.contents.free(wp)
    finally:
        lg.git_odb_free(odb)
    return st.total_objects
