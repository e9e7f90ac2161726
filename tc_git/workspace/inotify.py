"""Linux inotify for the drift watcher and its change journal: one descriptor per workspace,
read in bursts by one thread, and read to the end by the snapshot itself at the journal's barrier.

watchdog (the portable fallback, watch.py) hands every notification through three Python threads
(the descriptor's reader, its move-pairing queue, the observer's dispatcher), building objects and
taking locks for each: a restore of 100 files causes ~600 notifications (temporary file created,
written, closed, renamed over the name, per file), and handling them cost ~40 ms of CPU that
competed with the restore for the GIL (bench_mcp at 10k: 138 ms with the journal against 114
without). Here a notification costs a header unpack, a dict lookup and a set insert, on one
thread that wakes at most once per `BATCH` seconds: the kernel queues a burst meanwhile. What
the journal needs is only which paths changed, so renames are not paired: both names are noted.

Ordering (what makes the journal trustworthy): the kernel appends the events of one inotify
instance to one queue in the order they happen. `sync` reads everything queued, writes the
barrier file (in the store's `tc/`, watched on the same descriptor) and reads until the barrier's
own notification: every change made before the write is then noted.

Directories: a new or moved-in directory is watched at once, recursively, and noted as a whole
(the snapshot walks it: what was written before its watch existed is found that way). A moved
directory keeps its watches (the kernel's watch follows the inode); walking its new place maps
them to the new path. A notification read before that carries the old path: noting a path that
no longer exists is harmless (the snapshot finds it gone). The store's directories (all but its
`tc/`) and `.git` directories are not watched at all. A watch that cannot be added for lack of
watches (ENOSPC) makes the journal untrustworthy (`on_blind`) until `rewatch` (tried by the journal
at a full-scan snapshot, at most once a minute) has found a watch for every directory again; a queue
overflow makes it untrusted once (`on_overflow`) and every directory is walked again for missing
watches.
"""
from __future__ import annotations

import errno
import logging
import os
import select
import struct
import threading
import time
from collections.abc import Callable

from ..base.settings import current
from ..storage import _native

log = logging.getLogger("tc_git.mcp.watch")

IN_MODIFY = 0x2
IN_ATTRIB = 0x4
IN_CLOSE_WRITE = 0x8
IN_MOVED_FROM = 0x40
IN_MOVED_TO = 0x80
IN_CREATE = 0x100
IN_DELETE = 0x200
IN_DELETE_SELF = 0x400
IN_MOVE_SELF = 0x800
IN_Q_OVERFLOW = 0x4000
IN_IGNORED = 0x8000
IN_ONLYDIR = 0x01000000
IN_DONT_FOLLOW = 0x02000000
IN_EXCL_UNLINK = 0x04000000
IN_ISDIR = 0x40000000

# writes (IN_MODIFY: a writer that never closes; IN_CLOSE_WRITE: mmap writes), creations,
# deletions, renames, chmods; never opens or reads (captures read files)
MASK = (IN_MODIFY | IN_ATTRIB | IN_CLOSE_WRITE | IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE | IN_DELETE
        | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR | IN_DONT_FOLLOW | IN_EXCL_UNLINK)
_NEW_DIR = IN_CREATE | IN_MOVED_TO | IN_ATTRIB  # (IN_ATTRIB: a directory made readable again)
_HEADER = struct.Struct("iIII")  # struct inotify_event: wd, mask, cookie, len; then len bytes of name
BATCH = 0.05  # seconds the reader lets a burst gather after the first notification
READ_SIZE = 1 << 16


def available() -> bool:
    """Native inotify can be used here: Linux, libc's inotify calls (through _native, so not
    under TC_NATIVE=off), not turned off (the `inotify` setting, for tests). Otherwise watchdog
    reads them."""
    if not current().inotify:
        return False
    return _native.has_inotify()


class Tree:
    """A recursive watch of `root`. `deliver(paths)` gets the workspace-relative paths (str,
    '/'-separated, surrogate-escaped like os.fsdecode) changed in each burst. `store` (a directory
    inside `root`, or None) is not watched but for `store/tc`, where `barrier` is written."""

    def __init__(self, root: str, store: str | None, barrier: str | None,
                 deliver: Callable[[list[str]], None], on_overflow: Callable[[], None],
                 on_blind: Callable[[str], None], store_dirname: str = ".checkpoints"):
        self.root = os.fsencode(os.path.abspath(root))
        self.deliver, self.on_overflow, self.on_blind = deliver, on_overflow, on_blind
        self.top_skip = os.fsencode(store_dirname)
        self.store_rel: bytes | None = None
        if store is not None:
            s = os.fsencode(os.path.realpath(store))
            real_root = os.fsencode(os.path.realpath(root))
            if s.startswith(real_root + b"/"):
                self.store_rel = s[len(real_root) + 1:]
        self.barrier = os.fsencode(barrier) if barrier else None
        self.lock = threading.Lock()
        self.dirs: dict[int, bytes] = {}  # watch descriptor -> directory, relative ("" = root)
        self.tc_wd = -2  # the store's tc/ (the barrier's directory)
        self.root_wd = -2
        self.closed = False
        self.blind = False
        self.starved = False  # a watch was refused for lack of watches (ENOSPC/ENOMEM): `rewatch` may help
        self.gone = False  # the workspace directory itself was moved or deleted: nothing helps
        self.events = 0  # notifications read (tests, status)
        self.stopping = threading.Event()
        self.fd = _native.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        self.wake_r, self.wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            self.root_wd = self._add(b"", root_watch=True)
            if self.store_rel is not None:  # (before the walk: a walk short of watches leaves it one)
                self.tc_wd = self._add(self.store_rel + b"/tc", root_watch=True)
            self._walk(b"")
        except BaseException:
            self._close()
            raise
        self.thread = threading.Thread(target=self._run, name="tc-inotify", daemon=True)
        self.thread.start()

    # ------------------------------------------------------------------ watches
    def _add(self, rel: bytes, root_watch: bool = False) -> int:
        full = self.root + b"/" + rel if rel else self.root
        try:
            wd = _native.inotify_add_watch(self.fd, full, MASK)
        except OSError as exc:
            if root_watch:
                raise
            e = exc.errno
            if e in (errno.ENOSPC, errno.ENOMEM):
                self.starved = True
                if not self.blind:
                    self.blind = True
                    log.warning("no inotify watch for %s (%s): changes under it are not seen; "
                                "raise fs.inotify.max_user_watches", os.fsdecode(full), os.strerror(e))
                    self.on_blind(f"no inotify watch left for {os.fsdecode(rel)} ({os.strerror(e)})")
            return -1  # (vanished, not a directory any more, unreadable: its parent's events tell)
        self.dirs[wd] = rel
        return wd

    def _skip_dir(self, rel: bytes) -> bool:
        name = rel.rpartition(b"/")[2]
        return name == b".git" or rel == self.top_skip or rel == self.store_rel

    def _walk(self, top: bytes) -> None:
        """Watch every directory below `top` (relative; not following links)."""
        stack = [top]
        while stack:
            rel = stack.pop()
            try:
                it = os.scandir(self.root + b"/" + rel if rel else self.root)
            except OSError:
                continue
            with it:
                for entry in it:
                    try:
                        if not entry.is_dir(follow_symlinks=False):
                            continue
                    except OSError:
                        continue
                    sub = rel + b"/" + entry.name if rel else entry.name
                    if self._skip_dir(sub):
                        continue
                    if self._add(sub) >= 0:
                        stack.append(sub)

    # ------------------------------------------------------------------ reading
    def _drain(self, stop_at_barrier: bool = False) -> bool:
        """Read what is queued (under self.lock) and deliver it; True if the barrier was read."""
        changed: set[bytes] = set()
        seen = overflow = False
        dirs, tc_wd, barrier_name = self.dirs, self.tc_wd, self.barrier and os.path.basename(self.barrier)
        unpack, hsize = _HEADER.unpack_from, _HEADER.size
        while True:
            try:
                buf = os.read(self.fd, READ_SIZE)
            except BlockingIOError:
                break
            except OSError:
                break
            n, i = len(buf), 0
            while i < n:
                wd, mask, _cookie, ln = unpack(buf, i)
                name = buf[i + hsize:i + hsize + ln].rstrip(b"\0")
                i += hsize + ln
                self.events += 1
                if mask & IN_Q_OVERFLOW:
                    overflow = True
                    continue
                d = dirs.get(wd)
                if d is None:
                    continue
                if mask & IN_IGNORED:  # the watch is gone (its directory deleted or moved out)
                    del dirs[wd]
                    if wd == self.root_wd:
                        self._root_gone()
                    continue
                if wd == tc_wd:
                    if name == barrier_name:
                        seen = True
                    continue
                if not name:  # about the watched directory itself: its parent's event names it
                    if wd == self.root_wd and mask & (IN_DELETE_SELF | IN_MOVE_SELF):
                        self._root_gone()
                    continue
                rel = d + b"/" + name if d else name
                if name == b".git" or (not d and name == self.top_skip) or rel == self.store_rel:
                    continue
                changed.add(rel)
                if mask & IN_ISDIR and mask & _NEW_DIR and not self._skip_dir(rel):
                    if self._add(rel) >= 0:
                        self._walk(rel)
            if seen and stop_at_barrier:
                break  # (what follows the barrier is read next time)
        if overflow:
            log.warning("inotify queue overflowed below %s: notifications were lost", os.fsdecode(self.root))
            self.on_overflow()
            self._walk(b"")  # directories created meanwhile have no watch yet
        if changed:
            self.deliver([os.fsdecode(p) for p in changed])
        return seen

    def rewatch(self, restored: Callable[[], None]) -> bool:
        """After the watch limit was hit: walk every directory again for a watch (an existing
        one is returned as it is: no watch is spent twice). If every directory has one now,
        `restored()` is called, still under the lock, so no refusal read meanwhile can be
        overtaken by it (changes made before are the caller's full scan's to find). False: still
        short of watches (no log, no `on_blind` again), closed, or blind for another reason."""
        with self.lock:
            if self.closed or self.gone or not self.starved:
                return False
            self.starved = False  # (self.blind stays set meanwhile: a refusal is not reported again)
            self._walk(b"")
            if self.starved:
                return False
            self.blind = False
            log.info("inotify watches for every directory below %s again", os.fsdecode(self.root))
            restored()
            return True

    def _root_gone(self) -> None:
        self.gone = True
        if not self.blind:
            self.blind = True
            self.on_blind("the workspace directory was moved or deleted")

    def sync(self, write_barrier: Callable[[], None], timeout: float) -> bool:
        """Deliver every change made before this call: read the queue, write the barrier
        (`write_barrier()`, OSError passes), read until its notification. False: it did not
        arrive within `timeout` seconds (or the watch is closed)."""
        if self.barrier is None:
            return False
        with self.lock:
            if self.closed:
                return False
            # notifications of earlier barriers are read first: only this write's can end the wait
            self._drain()
            write_barrier()
            deadline = time.monotonic() + timeout
            poll = None
            while not self._drain(stop_at_barrier=True):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                if poll is None:  # (poll, not select: a descriptor may be above FD_SETSIZE)
                    poll = select.poll()
                    poll.register(self.fd, select.POLLIN)
                poll.poll(max(1, int(left * 1000)))
            return True

    def _run(self) -> None:
        poll = select.poll()
        poll.register(self.fd, select.POLLIN)
        poll.register(self.wake_r, select.POLLIN)
        try:
            while not self.stopping.is_set():
                poll.poll()
                if self.stopping.wait(BATCH):  # one wake-up per burst, not per notification
                    break
                with self.lock:
                    if self.closed:
                        break
                    self._drain()
        except Exception:
            log.warning("inotify reader for %s failed", os.fsdecode(self.root), exc_info=True)
            self.on_blind("the inotify reader failed")
        finally:
            with self.lock:
                self._close()

    # ------------------------------------------------------------------ stopping
    def stop(self, join: float | None = None) -> None:
        """Stop reading (never blocks on the reader unless `join`); the descriptor closes with it."""
        self.stopping.set()
        try:
            os.write(self.wake_w, b"x")
        except OSError:
            pass
        if join and self.thread is not threading.current_thread():
            self.thread.join(join)

    def _close(self) -> None:
        if self.closed:
            return
        self.closed = True
        for fd in (self.fd, self.wake_r, self.wake_w):
            try:
                os.close(fd)
            except OSError:
                pass
