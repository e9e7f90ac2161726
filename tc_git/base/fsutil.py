"""Two file-system idioms every layer needs; standard library only, so the hook entry can use
them without loading pygit2."""
from __future__ import annotations

import contextlib
import errno
import os
import time
from pathlib import Path

from .settings import current

LOG_MAX_BYTES = 1 << 20
FSYNC_ENV = "TC_RESTORE_FSYNC"


def fsync_setting() -> str:
    """TC_RESTORE_FSYNC: `large` (default: files of 1 MiB or more), `all` or `off`. Read by the
    workspace writes, the restore journal and the store's own writes alike."""
    return current().fsync


def atomic_write(path, data: bytes, mode: int = 0o600, sync: bool = True) -> None:
    """Write a file so that readers see the old or the new content, never a torn one; `sync`:
    fsync'd before the rename, so it also survives a power loss as the old or the new one."""
    path = os.fspath(path)
    head, name = os.path.split(path)
    tmp = os.path.join(head, f".{name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_BINARY", 0), mode)
    try:
        view = memoryview(data)
        while view:  # os.write may write less than asked
            n = os.write(fd, view)
            if n <= 0:
                raise OSError(errno.ENOSPC, "no progress writing: disk full?", path)
            view = view[n:]
        if sync:
            os.fsync(fd)
        if hasattr(os, "fchmod"):
            os.fchmod(fd, mode)  # O_CREAT's mode is filtered by the umask
    finally:
        os.close(fd)
    if not hasattr(os, "fchmod"):  # Windows before Python 3.13: by path (only read-only means anything)
        os.chmod(tmp, mode)
    os.replace(tmp, path)


def common_dir(gitdir: Path) -> Path:
    """The common directory of a git directory (itself, or the main one of a linked worktree)."""
    f = gitdir / "commondir"
    if f.is_file():
        return (gitdir / f.read_text().strip()).resolve()
    return gitdir


def store_log(store, name: str, line: str) -> None:
    """Append one line to `<store>/tc/<name>` (rotated to `<name>.1` past 1 MB).

    Only when the store exists: logging never creates a store. Never raises.
    """
    if not store:
        return
    tc_dir = os.path.join(os.fspath(store), "tc")
    if not os.path.isdir(tc_dir):
        return
    path = os.path.join(tc_dir, name)
    try:
        try:
            if os.path.getsize(path) > LOG_MAX_BYTES:
                os.replace(path, path + ".1")
        except FileNotFoundError:
            pass
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            os.write(fd, f"{stamp} [{os.getpid()}] {line.rstrip()}\n".encode("utf-8", "backslashreplace"))
        finally:
            os.close(fd)
    except OSError:
        pass


FENCE_WAIT = 0.05  # seconds: a file system whose clock ticks slower (FAT: 2 s) smudges the last tick's files


def fs_fence(state_dir, workspace, name: str) -> int | None:
    """A timestamp of the workspace's file system later than every write made there so far,
    read from a file `name` in `state_dir` (a directory of the store) written after them; None
    when the store is on another file system (its clock may tick differently) or cannot be
    written. It is rewritten until its mtime moves past the first one, so that even on a coarse
    clock the files written in the last tick are older than the fence (snapshot.fenced): a file
    changed after the fence was taken gets an mtime or ctime at or above it (a file system's
    clock does not go back)."""
    path = os.path.join(state_dir, name)
    try:
        if os.stat(state_dir).st_dev != os.stat(workspace).st_dev:
            return None
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0),
                     0o600)
    except OSError:
        return None
    try:
        first = None
        deadline = time.monotonic() + FENCE_WAIT
        while True:
            os.pwrite(fd, b".", 0)
            ns = os.fstat(fd).st_mtime_ns
            if first is None:
                first = ns
            elif ns > first or time.monotonic() > deadline:
                return ns
            time.sleep(0.0005)
    except OSError:
        return None
    finally:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(path)  # nothing is left in the store
