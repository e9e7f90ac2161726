"""Two file-system idioms every layer needs; standard library only, so the hook entry can use
them without loading pygit2."""
from __future__ import annotations

import errno
import os
import time

LOG_MAX_BYTES = 1 << 20


def atomic_write(path, data: bytes, mode: int = 0o600) -> None:
    """Write a file so that readers see the old or the new content, never a torn one."""
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
        os.fsync(fd)
        if hasattr(os, "fchmod"):
            os.fchmod(fd, mode)  # O_CREAT's mode is filtered by the umask
    finally:
        os.close(fd)
    if not hasattr(os, "fchmod"):  # Windows before Python 3.13: by path (only read-only means anything)
        os.chmod(tmp, mode)
    os.replace(tmp, path)


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
