"""One cross-process file lock for every platform, standard library only.

POSIX: `fcntl.flock` (exclusive, whole file). Windows: `msvcrt.locking` on the first byte.
Both are advisory locks the kernel drops when the holder dies, so a crashed process never
leaves a lock that has to be broken by hand. The platform module is imported when a lock is
first taken, never at import time: importing tc-git must work where `fcntl` does not exist.

`filelock` (the PyPI package) does the same job but costs 40-120 ms to import here (it pulls
in typing/asyncio machinery); the hook entry has a start budget, this module costs < 1 ms.
"""
from __future__ import annotations

import errno
import os
import sys
import time

_BUSY = {errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK, getattr(errno, "EDEADLK", -1),
         getattr(errno, "EDEADLOCK", -1)}


class Busy(Exception):
    """The lock was still held by another process when the wait ran out."""


def _try_lock(fd: int) -> bool:
    """Take the lock without waiting; False if another process holds it."""
    try:
        if sys.platform == "win32":  # (the form type checkers narrow on)
            import msvcrt

            os.lseek(fd, 0, os.SEEK_SET)
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
        else:
            import fcntl

            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except OSError as e:
        if e.errno in _BUSY:
            return False
        raise


def _unlock(fd: int) -> None:
    if sys.platform == "win32":
        import msvcrt

        os.lseek(fd, 0, os.SEEK_SET)
        msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)
    else:
        import fcntl

        fcntl.flock(fd, fcntl.LOCK_UN)


def acquire(path, timeout: float, poll: float = 0.05) -> int:
    """Open `path` (created 0600) and lock it, waiting up to `timeout` seconds.

    Returns the descriptor to pass to `release`; raises `Busy` when the wait runs out.
    """
    fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_BINARY", 0), 0o600)
    deadline = time.monotonic() + timeout
    try:
        while not _try_lock(fd):
            if time.monotonic() >= deadline:
                raise Busy(str(path))
            time.sleep(poll)
    except BaseException:
        os.close(fd)
        raise
    return fd


def release(fd: int) -> None:
    try:
        _unlock(fd)
    finally:
        os.close(fd)
