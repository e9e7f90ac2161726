"""The parts of libgit2 that pygit2 1.21 does not bind, reached through ctypes.

The wheel's libgit2 exports its whole C API, so ctypes loads the *same* library pygit2 already
loaded (same global state). Used for bundles (`git_packbuilder_insert_walk`,
`git_packbuilder_write_buf`, the indexer via `git_odb_write_pack`) and for the first snapshot's
in-memory object database (`git_mempack_*`). The struct layouts are libgit2 1.9's, which is why
pyproject pins pygit2 to 1.21; with another libgit2, `available()` is False and callers fall
back to pygit2 or the git CLI.
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


def lib():
    """The libgit2 that pygit2 loaded, or None when its file cannot be found."""
    global _LIB
    if _LIB is None:
        base = os.path.dirname(pygit2.__file__)
        cands = (glob.glob(os.path.join(base, os.pardir, "pygit2.libs", "libgit2-*.so*"))
                 + glob.glob(os.path.join(base, ".dylibs", "libgit2*.dylib"))
                 + glob.glob(os.path.join(base, "git2*.dll")))
        _LIB = False
        if cands and pygit2.LIBGIT2_VER[:2] == (1, 9):
            try:
                lg = ctypes.CDLL(cands[0])
                lg.git_error_last.restype = ctypes.POINTER(_Error)
                lg.git_packbuilder_object_count.restype = ctypes.c_size_t
                _LIB = lg
            except OSError:
                pass
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
