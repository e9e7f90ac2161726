"""A first snapshot written as one pack instead of one loose file per object.

Probe notes 2b/2f: the first snapshot of a large tree is I/O bound on loose objects (a temp file,
a link and an unlink per blob, and one 4 KB block each on disk). libgit2's `mempack` backend
keeps every new object in memory; `flush()` then hands them to the indexer as a single pack.
pygit2 binds neither, but the wheel's libgit2 exports them, so they are reached through ctypes
on the same loaded library. When that library cannot be found (another platform layout, another
libgit2 minor), `available()` is False and snapshots write loose objects as before.
"""
from __future__ import annotations

import contextlib
import ctypes
import os

import pygit2

from . import libgit2 as lg2


def _lib():
    if os.environ.get("TC_MEMPACK", "on").lower() in ("0", "off", "false", "no"):
        return None
    return lg2.lib()


def available() -> bool:
    return _lib() is not None


def _chk(rc: int) -> None:
    try:
        lg2.check(rc)
    except lg2.GitCallError as e:
        raise pygit2.GitError(f"mempack: {e}") from None


_ptr = lg2.repo_ptr


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
        buf = lg2.Buf()
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
            n = lg2.write_pack(self.repo, [(ctypes.c_void_p(buf.ptr), buf.size)])
        except lg2.GitCallError as e:
            raise pygit2.GitError(f"mempack: {e}") from None
        finally:
            lg.git_buf_dispose(ctypes.byref(buf))
        _chk(lg.git_mempack_reset(self.backend))
        return n


@contextlib.contextmanager
def bulk_writes(repo: pygit2.Repository):
    """A private handle on `repo`'s store whose new objects go to memory, then to one pack.

    For writes of many objects at once (a first snapshot, a first recording of a long
    conversation): one pack instead of a loose file per object. Yields `(handle, pack)`;
    `pack` is None where the backend is unavailable (the handle then writes loose objects).
    Objects are flushed on a clean exit, before anything that names them is published by the
    caller after the block; on an exception they are dropped with the handle.
    """
    work = pygit2.Repository(repo.path, pygit2.enums.RepositoryOpenFlag.NO_SEARCH)
    if repo.workdir:
        work.workdir = repo.workdir
    try:
        yield work, (MemPack(work) if available() else None)
    finally:
        work.free()
