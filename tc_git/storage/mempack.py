"""A first snapshot written as one pack instead of one loose file per object.

Probe notes 2b/2f: the first snapshot of a large tree is I/O bound on loose objects (a temp file,
a link and an unlink per blob, and one 4 KB block each on disk). libgit2's `mempack` backend
keeps every new object in memory; `flush()` then hands them to the indexer as a single pack.
pygit2 binds neither; `_native` reaches them on the libgit2 pygit2 loaded. Where that path is
unavailable (capability check failed, TC_NATIVE=off), `available()` is False and snapshots write
loose objects as before.
"""
from __future__ import annotations

import contextlib

import pygit2

from ..base.settings import current
from . import _native


def available() -> bool:
    """The in-memory backend can be used (`_native` MEMPACK capability, and the `mempack` setting)."""
    return current().mempack and _native.has(_native.MEMPACK)


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
        yield work, (_native.MemPack(work) if available() else None)
    finally:
        work.free()
