"""A first snapshot written as one pack instead of one loose file per object.

Probe notes 2b/2f: the first snapshot of a large tree is I/O bound on loose objects (a temp file,
a link and an unlink per blob, and one 4 KB block each on disk). libgit2's `mempack` backend
keeps every new object in memory; `flush()` then hands them to the indexer as a single pack.
pygit2 binds neither, but the wheel's libgit2 exports them, so they are reached through ctypes
on the same loaded library. When that library cannot be found (another platform layout, another
libgit2 minor), `available()` is False and snapshots write loose objects as before.
"""
from __future__ import annotations

import ctypes
import glob
import os
import sys

import pygit2


class _Buf(ctypes.Structure):
    _fields_ = [("ptr", ctypes.c_void_p), ("reserved", ctypes.c_size_t), ("size", ctypes.c_size_t)]


class _Err(ctypes.Structure):
    _fields_ = [("message", ctypes.c_char_p), ("klass", ctypes.c_int)]


class _Progress(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint) for n in ("total_objects", "indexed_objects", "received_objects",
                                              "local_objects", "total_deltas", "indexed_deltas")] + [
        ("received_bytes", ctypes.c_size_t)]


_APPEND = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(_Progress))
_COMMIT = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(_Progress))
_FREE = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class _WritePack(ctypes.Structure):
    _fields_ = [("backend", ctypes.c_void_p), ("append", _APPEND), ("commit", _COMMIT), ("free", _FREE)]


_LIB = None


def _lib():
    global _LIB
    if _LIB is None:
        _LIB = False
        if os.environ.get("TC_MEMPACK", "on").lower() in ("0", "off", "false", "no"):
            return None
        base = os.path.dirname(pygit2.__file__)
        cands = (glob.glob(os.path.join(base, os.pardir, "pygit2.libs", "libgit2-*.so*"))
                 + glob.glob(os.path.join(base, ".dylibs", "libgit2*.dylib")))
        if cands and pygit2.LIBGIT2_VER[:2] == (1, 9):
            try:
                lg = ctypes.CDLL(cands[0])
                lg.git_error_last.restype = ctypes.POINTER(_Err)
                _LIB = lg
            except OSError:
                pass
    return _LIB or None


def available() -> bool:
    return _lib() is not None


def _chk(rc: int) -> None:
    if rc < 0:
        err = _lib().git_error_last()
        msg = err.contents.message.decode("utf-8", "replace") if err and err.contents.message else f"error {rc}"
        raise pygit2.GitError(f"mempack: {msg}")


def _ptr(repo: pygit2.Repository):
    return ctypes.c_void_p(int.from_bytes(repo._pointer, sys.byteorder))


class MemPack:
    """Route every object `repo` writes into memory until `flush()` (use a private handle: the
    backend stays attached to that handle's object database until the handle is freed)."""

    def __init__(self, repo: pygit2.Repository):
        lg = _lib()
        self.repo = repo
        self.backend = ctypes.c_void_p()
        _chk(lg.git_mempack_new(ctypes.byref(self.backend)))
        odb = ctypes.c_void_p()
        _chk(lg.git_repository_odb(ctypes.byref(odb), _ptr(repo)))
        try:
            _chk(lg.git_odb_add_backend(odb, self.backend, 999))  # the odb owns it from here
        finally:
            lg.git_odb_free(odb)

    def flush(self) -> int:
        """Write the objects held in memory as one pack (with its index) under objects/pack."""
        lg = _lib()
        buf = _Buf()
        # not git_mempack_dump: in libgit2 1.9 it packs only commits and what they reach, and a
        # snapshot writes blobs and trees; write_thin_pack inserts every object held in memory
        pb = ctypes.c_void_p()
        _chk(lg.git_packbuilder_new(ctypes.byref(pb), _ptr(self.repo)))
        try:
            lg.git_packbuilder_set_threads(pb, 0)
            _chk(lg.git_mempack_write_thin_pack(self.backend, pb))
            _chk(lg.git_packbuilder_write_buf(ctypes.byref(buf), pb))
        finally:
            lg.git_packbuilder_free(pb)
        try:
            odb = ctypes.c_void_p()
            _chk(lg.git_repository_odb(ctypes.byref(odb), _ptr(self.repo)))
            wp = ctypes.POINTER(_WritePack)()
            try:
                _chk(lg.git_odb_write_pack(ctypes.byref(wp), odb, None, None))
                st = _Progress()
                try:
                    _chk(wp.contents.append(wp, ctypes.c_void_p(buf.ptr), buf.size, ctypes.byref(st)))
                    _chk(wp.contents.commit(wp, ctypes.byref(st)))
                finally:
                    wp.contents.free(wp)
            finally:
                lg.git_odb_free(odb)
        finally:
            lg.git_buf_dispose(ctypes.byref(buf))
        _chk(lg.git_mempack_reset(self.backend))
        return st.total_objects
