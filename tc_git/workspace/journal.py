"""Change journal: the paths changed since the last snapshot, so a save costs what changed.

The MCP server's drift watcher (watch.py) already receives a file-system notification for every
change in a watched workspace. It notes each changed path here; a save, capture or restore's
pre-snapshot then refreshes only those index entries (snapshot.take(paths=...)) instead of
comparing the stat data of every file.

The journal is trusted only when it has seen every change since the last snapshot:
- it started before that snapshot began and was never cleared (a server restart starts a new,
  untrusted journal: the first snapshot after it is a full scan);
- the private index is the one this journal's last snapshot wrote: its (inode, size, mtime) is
  the store's generation marker, and any other writer (the CLI, a hook, another server, an
  import) writes the index anew (libgit2 writes it through a lock file and a rename), so the
  marker changes and the next snapshot here is a full scan;
- every notification of a change made before the snapshot began has arrived: the snapshot
  writes a barrier file in the store (inside the watched workspace) and waits for its own
  notification, which inotify delivers after every earlier one (one queue per watch). A store
  outside the workspace, a stat-polling watcher or a barrier that does not arrive in time means
  a full scan;
- no notification was lost: more than MAX_PATHS pending paths, an overflow reported by the
  observer, a `.gitignore` change (which can change what every path means), or any failure of
  the watcher marks it untrusted.
Untrusted means one full scan, after which the journal is trusted again. A failed watch is not
trusted again, except after the watch limit (inotify's ENOSPC): a full-scan snapshot at least
REWATCH_AFTER seconds after the last attempt asks the watch for every directory again, and once
that succeeds the next full scan makes the journal trusted.
"""
from __future__ import annotations

import os
import threading
import time
import weakref
from collections.abc import Callable

from ..storage import handles

MAX_PATHS = 20000
# seconds between attempts to watch every directory again after the watch limit was hit (each walks
# the workspace's directories; only a snapshot that is a full scan anyway makes one)
REWATCH_AFTER = 60.0


def index_marker(store_path) -> tuple | None:
    """The private index's identity: the file's (inode, size, mtime), which changes whenever
    anyone writes the index, or ("pending", token) while this process holds a newer one in
    memory that is written after the answer (handles.py; `handles.canon` maps it to the file's
    identity once written)."""
    return handles.current_marker(store_path)


_ALL: weakref.WeakSet[Journal] = weakref.WeakSet()


def untrust_all(reason: str) -> None:
    for j in list(_ALL):
        j.untrust(reason)


BARRIER = "journal-barrier"
BARRIER_WAIT = 2.0  # seconds; inotify delivers within milliseconds unless a rename is being paired


class Journal:
    def __init__(self, root: str, barrier: str | None = None):
        self.root = str(root).rstrip(os.sep) + os.sep
        self.barrier = barrier  # absolute path of the barrier file, None: cannot be trusted
        self.seen = threading.Event()
        self.lock = threading.Lock()
        self.paths: set[str] = set()
        self.trusted = False  # nothing known before the first full snapshot
        self.marker: tuple | None = None
        self.reason = "no snapshot since the watch started"
        self.left: dict = {}  # path -> Left, as of the last snapshot (a partial one covers only its paths)
        # entries indexed racily clean (snapshot.Snapshot.smudged): path -> the file's newest timestamp
        self.smudged: dict[str, int] = {}
        self.nested: dict = {}
        self.epoch = 0  # bumped whenever it stops being trustworthy
        self.begun = -1  # the epoch the running snapshot began in
        self.broken = False  # the watch itself failed: never trusted again (but see `rewatch`)
        # tc_git/workspace/inotify.py's Tree.rewatch: after the watch limit, watch every directory again
        self.rewatch: Callable[[Callable[[], None]], bool] | None = None
        self.failed_at = 0.0  # monotonic time of the failure or of the last attempt to rewatch
        self.refreshes = 0  # snapshots served from the journal (tests, status)
        self.full = 0
        # tc_git/workspace/inotify.py's Tree.sync: reads the notifications up to the barrier on the caller's
        # thread (None: the watcher's thread notes the barrier and sets `seen`, watchdog's way)
        self.sync: Callable[[Callable[[], None], float], bool] | None = None
        # each notification is handled in Python on other threads (watchdog): a writer that can
        # cause fewer (restore.apply: rename over instead of swapping) should; False when read
        # natively (tc_git/workspace/inotify.py: ~2 us each, on one thread waking once per burst)
        self.slow_notifications = True
        _ALL.add(self)

    # ------------------------------------------------------------------ the watcher's side
    def note(self, abs_paths) -> None:
        with self.lock:
            for p in abs_paths:
                if p == self.barrier:
                    self.seen.set()
                    continue
                if not p.startswith(self.root):
                    continue
                rel = p[len(self.root):].replace(os.sep, "/").strip("/")
                if not rel:
                    continue
                if rel == ".gitignore" or rel.endswith("/.gitignore"):
                    self._untrust("a .gitignore changed")
                self.paths.add(rel)
            if len(self.paths) > MAX_PATHS:
                self._untrust(f"more than {MAX_PATHS} changed paths")

    def note_rel(self, rels) -> None:
        """Changed paths, relative to the root with '/' (the store's and .git's left out)."""
        with self.lock:
            for rel in rels:
                if rel == ".gitignore" or rel.endswith("/.gitignore"):
                    self._untrust("a .gitignore changed")
            self.paths.update(rels)
            if len(self.paths) > MAX_PATHS:
                self._untrust(f"more than {MAX_PATHS} changed paths")

    def untrust(self, reason: str) -> None:
        with self.lock:
            self._untrust(reason)

    def _untrust(self, reason: str) -> None:
        self.epoch += 1
        self.trusted = False
        self.reason = reason
        self.paths.clear()
        self.smudged.clear()  # (the full scan's diff refreshes them)

    # ------------------------------------------------------------------ the snapshot's side
    def begin(self, store_path) -> list[str] | None:
        """The paths to refresh, or None for a full scan. Events from now on go to the next one."""
        if self.broken and self.rewatch is not None and time.monotonic() - self.failed_at >= REWATCH_AFTER:
            self.failed_at = time.monotonic()
            self.rewatch(self._watched_again)  # (success: untrusted in a new epoch, scanned below)
        with self.lock:
            self.begun = self.epoch
        if not self.trusted or self.barrier is None:
            with self.lock:
                self.paths.clear()  # the full scan covers them
                self.begun = self.epoch
            return None
        self.seen.clear()
        try:
            if self.sync is not None:
                arrived = self.sync(self._write_barrier, BARRIER_WAIT)
            else:
                self._write_barrier()
                arrived = self.seen.wait(BARRIER_WAIT)
        except OSError:
            self.untrust("cannot write the barrier file")
            return None
        if not arrived:
            self.untrust("notifications are late")
            return None
        with self.lock:
            paths, self.paths = self.paths, set()
            self.begun = self.epoch
            if not self.trusted:
                return None
            if index_marker(store_path) != handles.canon(self.marker):
                self.trusted, self.reason = False, "the store's index was written by someone else"
                return None
            return sorted(paths)

    def _write_barrier(self) -> None:
        assert self.barrier is not None  # (begin() returns before without one)
        with open(self.barrier, "w") as f:
            f.write(str(os.getpid()))

    def due(self, now_ns: int, window_ns: int) -> list[str]:
        """The smudged entries whose files are `window_ns` old by now: refreshing them keeps their
        stat data (a file changed since is named by the watcher anyway)."""
        with self.lock:
            return [p for p, t in self.smudged.items() if now_ns - t >= window_ns]

    def end(self, snap, store_path, refreshed: list[str] | None) -> tuple[list, dict]:
        """After a snapshot written under the store lock: remember its marker and what it left out,
        and keep the paths that did not hold still for the next one. Returns the complete
        (left, nested) of the workspace as of this snapshot."""
        with self.lock:
            if refreshed is None:  # a full scan: its lists are complete
                self.left = {x.path: x for x in snap.left}
                self.nested = dict(snap.nested)
                self.smudged = {}
                self.full += 1
            else:
                # the refreshed paths (and what is under them) are as this snapshot found them
                fresh = set(refreshed)

                def stale(p):  # p or a directory above it refreshed (a set lookup per level, not a
                    # scan of every refreshed path for every left-out one)
                    if p in fresh:
                        return True
                    i = p.find("/")
                    while i >= 0:
                        if p[:i] in fresh:
                            return True
                        i = p.find("/", i + 1)
                    return False

                self.left = {p: x for p, x in self.left.items() if not stale(p)}
                self.left.update({x.path: x for x in snap.left})
                self.nested = {p: h for p, h in self.nested.items() if not stale(p)}
                self.nested.update(snap.nested)
                for p in refreshed:
                    self.smudged.pop(p, None)
                self.refreshes += 1
            self.smudged.update(getattr(snap, "smudged", {}))
            if len(self.smudged) > MAX_PATHS:
                self.smudged.clear()  # (resume's diff then reads them; no save is wrong for it)
            self.paths.update(snap.unstable)
            self.marker = index_marker(store_path)
            if self.epoch == self.begun and not self.broken:
                self.trusted, self.reason = True, ""
            return sorted(self.left.values(), key=lambda x: x.path), dict(self.nested)

    def fail(self, reason: str) -> None:
        with self.lock:
            self.broken = True
            self.failed_at = time.monotonic()
            self._untrust(reason)

    def _watched_again(self) -> None:
        """Every directory is watched again (called by the watch under its lock, before the full
        scan that follows): what changed before is that scan's to find, what changes after is noted."""
        with self.lock:
            self.broken = False
            self._untrust("watched again after the inotify watch limit: one full scan")

    def status(self) -> dict:
        with self.lock:
            return {"trusted": self.trusted, "pending": len(self.paths), "reason": self.reason,
                    "refreshes": self.refreshes, "full_scans": self.full}
