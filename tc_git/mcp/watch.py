"""The drift layer: while the MCP server runs, unsaved work becomes drift commits on its own.

For every workspace this process has served that has an active task, file-system notifications
(on Linux read by tc_git/workspace/inotify.py, elsewhere or with TC_NATIVE=off by watchdog) mark the
workspace dirty and feed its change journal; once nothing has changed for
`TC_WATCH_INTERVAL` seconds (default 15) the workspace is captured as a drift commit. If files
keep changing, a capture with `partial: true` is taken after `TC_DRIFT_MAX_WAIT` seconds
(default 60) anyway. While nothing changes the watcher does no I/O at all: its cost does not
grow with the workspace. Only where notifications cannot be had (no inotify, watch limit hit)
does it fall back to a stat poll of the tree every interval.

Events inside the store and inside `.git/` are ignored (our own writes must not wake us), and so
are opens and reads (a capture reads files). `TC_WATCH=off` disables the watcher. Nothing here
may crash the server: every failure is logged and counted.

Why two readers of notifications: watchdog is the only one on macOS (FSEvents) and Windows
(ReadDirectoryChangesW); on Linux the native reader replaced it because watchdog passes each
notification through three Python threads: ~40 ms of CPU for the ~600 notifications of a
100-file restore against ~1 ms natively (bench_mcp at 10k files: that restore took 138 ms with
watchdog and the journal, 114 ms without). TC_INOTIFY=off keeps watchdog's path testable on
Linux; the watchdog-7 patches below (`_patch_watch_group`) serve that path only.
"""
from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..base.refs import STORE_DIRNAME
from ..base.settings import current
from ..storage import handles, heap

if TYPE_CHECKING:  # annotations only: the engine (and pygit2) load on first use
    from ..engine import Engine

log = logging.getLogger("tc_git.mcp.watch")

MAX_ROOTS = 16  # workspaces watched at once (oldest dropped first); bounds inotify watches


def watch_enabled() -> bool:
    return current().watch != "off"


class _Root:
    def __init__(self, root: Path, store: Path):
        self.root = root
        self.store = store
        self.store_prefix = str(store.resolve()) + os.sep
        self.root_prefix = str(root) + os.sep
        self.dirty_since: float | None = None
        self.last_event = 0.0
        self.events = 0
        self.handle: Any = None  # watchdog ObservedWatch, or an inotify.Tree
        self.observer = None  # the observer that holds `handle`
        self.errors = 0
        self.captures = 0
        self.registered = time.monotonic()
        self.journal = None  # tc_git/workspace/journal.py: set when notifications (not polling) cover the root

    def ignored(self, path: str) -> bool:
        if not path:
            return True
        if path.startswith(self.store_prefix) or path + os.sep == self.store_prefix:
            return True
        rel = path[len(self.root_prefix):] if path.startswith(self.root_prefix) else path
        parts = rel.split(os.sep)
        return ".git" in parts[:-1] or (parts[-1] == ".git") or parts[0] == STORE_DIRNAME


class DriftWatcher:
    """Background drift recorder. `watch(root, store)` after every served call; `stop()` at exit."""

    def __init__(self, interval: float | None = None, max_wait: float | None = None, log_line=None,
                 engine_factory=None, poll: bool | None = None):
        s = current()
        self.interval = interval if interval is not None else s.watch_interval
        self.max_wait = max_wait if max_wait is not None else s.drift_max_wait
        self.max_wait = max(self.max_wait, self.interval)
        self.log_line = log_line or (lambda store, line: None)
        self.engine_factory = engine_factory
        self.roots: dict[Path, _Root] = {}
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.thread: threading.Thread | None = None
        self.observer: Any = None  # a watchdog observer once started
        self.poller: Any = None
        self.mode: str | None = None  # "inotify" | "poll" once started
        self.native = False  # notifications read by tc_git/workspace/inotify.py (Linux), not by watchdog
        self.failures = 0
        # TC_WATCH=poll forces the stat-poll fallback (file systems without notifications, e.g. NFS)
        self.force_poll = poll if poll is not None else s.watch == "poll"
        handles.enable()  # a long-lived process: indexes are written after each call's answer

    # ----------------------------------------------------------------------- registration
    def watch(self, engine) -> None:
        """Watch the engine's workspace while it has an active task (cheap; safe from any thread;
        never raises)."""
        try:
            entry = engine.watch_entry()
            if entry is not None:
                self._watch(Path(entry[0]), Path(entry[1]))
        except Exception:
            self._fail("cannot watch %s", getattr(engine, "root", "?"))

    def _watch(self, root: Path, store: Path) -> None:
        if self.stopping.is_set():
            return
        with self.lock:
            st = self.roots.get(root)
            if st is not None and st.handle is not None and st.store == store:
                return
        with self.lock:
            self._start_locked()
            if not self.native:  # (watchdog is not even imported when notifications are read natively)
                _skip_store_watches(store)
                _short_move_pairing()
                _watch_moved_in_directories()
                _watch_overflows()
            if st is not None:
                self._unschedule_locked(st)
            st = _Root(root, store)
            st.journal = _new_journal(root, store)
            st.handle, st.observer = self._schedule_locked(st)
            if st.observer is NATIVE:
                st.journal.slow_notifications = False
                st.journal.rewatch = st.handle.rewatch  # (after the watch limit: tc_git/workspace/journal.py)
                if st.journal.barrier is not None:
                    st.journal.sync = st.handle.sync  # the barrier read on the snapshot's thread
            elif st.observer is not self.observer or self.mode == "poll":
                st.journal = None  # polled: changes arrive late, no journal
            self.roots[root] = st
            while len(self.roots) > MAX_ROOTS:
                oldest = min(self.roots.values(), key=lambda r: r.registered)
                self._unschedule_locked(oldest)
                del self.roots[oldest.root]
        log.info("watching %s (%s, quiet period %.1fs, max wait %.1fs)", root, self.mode, self.interval,
                 self.max_wait)

    def forget(self, root: Path) -> None:
        with self.lock:
            st = self.roots.pop(Path(root), None)
            if st is not None:
                self._unschedule_locked(st)

    # ----------------------------------------------------------------------- observers
    def _start_locked(self) -> None:
        if self.thread is not None:
            return
        try:
            if self.force_poll:
                raise RuntimeError("TC_WATCH=poll")
            from ..workspace import inotify

            if inotify.available():  # one reader thread per workspace (tc_git/workspace/inotify.py), no observer
                self.native, self.mode = True, "inotify"
                self.thread = threading.Thread(target=self._loop, name="tc-drift-watcher", daemon=True)
                self.thread.start()
                return
            from watchdog.observers import Observer

            obs = Observer()
            obs.daemon = True
            obs.start()
            self.observer, self.mode = obs, type(obs).__name__.replace("Observer", "").lower() or "native"
        except Exception:
            if not self.force_poll:
                log.warning("file-system notifications unavailable; falling back to a stat poll", exc_info=True)
            self.mode = "poll"
        self.thread = threading.Thread(target=self._loop, name="tc-drift-watcher", daemon=True)
        self.thread.start()

    def _poller_locked(self):
        if self.poller is None:
            from watchdog.observers.polling import PollingObserver

            self.poller = PollingObserver(timeout=self.interval)
            self.poller.daemon = True
            self.poller.start()
        return self.poller

    def _schedule_locked(self, st: _Root):
        if self.native:
            try:
                return _native_tree(self, st), NATIVE
            except OSError as e:  # e.g. ENOSPC: inotify watch limit reached
                log.warning("notifications for %s unavailable (%s); stat polling it every %.1fs", st.root, e,
                            self.interval)
        from watchdog.events import (
            DirCreatedEvent,
            DirDeletedEvent,
            DirMovedEvent,
            FileAttribEvent,
            FileClosedEvent,
            FileCreatedEvent,
            FileDeletedEvent,
            FileModifiedEvent,
            FileMovedEvent,
        )

        handler = _Handler(self, st)
        # Writes, creations, deletions, renames and chmods only: opens and reads (our own
        # captures read files) must not wake the watcher.
        kinds = [FileCreatedEvent, FileDeletedEvent, FileModifiedEvent, FileMovedEvent, FileClosedEvent,
                 FileAttribEvent, DirCreatedEvent, DirDeletedEvent, DirMovedEvent]
        if self.observer is not None and not self.native:
            try:
                return self.observer.schedule(handler, str(st.root), recursive=True, event_filter=kinds), \
                    self.observer
            except Exception as e:  # e.g. ENOSPC: inotify watch limit reached
                log.warning("notifications for %s unavailable (%s); stat polling it every %.1fs", st.root, e,
                            self.interval)
        poller = self._poller_locked()
        return poller.schedule(handler, str(st.root), recursive=True, event_filter=kinds), poller

    def _unschedule_locked(self, st: _Root) -> None:
        if st.observer is NATIVE:
            st.handle.stop()  # (never joined here: its reader may be waiting for self.lock)
        elif st.handle is not None and st.observer is not None:
            try:
                st.observer.unschedule(st.handle)
            except Exception:
                pass
        st.handle = None

    # ----------------------------------------------------------------------- events
    def journal(self, root: Path):
        """The change journal of a watched workspace (None: not watched, or polled)."""
        with self.lock:
            st = self.roots.get(Path(root))
            return st.journal if st is not None else None

    def on_paths(self, st: _Root, rels: list[str]) -> None:
        """A burst of changed workspace-relative paths from tc_git/workspace/inotify.py (already filtered:
        nothing of the store or of .git)."""
        if st.journal is not None:
            st.journal.note_rel(rels)
        now = time.monotonic()
        with self.lock:
            st.events += len(rels)
            st.last_event = now
            if st.dirty_since is None:
                st.dirty_since = now

    def on_event(self, st: _Root, paths) -> None:
        if st.journal is not None:
            st.journal.note([p for p in paths if p and (p == st.journal.barrier or not st.ignored(p))])
        if any(not st.ignored(p) for p in paths if p):
            now = time.monotonic()
            with self.lock:
                st.events += 1
                st.last_event = now
                if st.dirty_since is None:
                    st.dirty_since = now

    # ----------------------------------------------------------------------- the loop
    def _loop(self) -> None:
        tick = min(1.0, max(0.05, self.interval / 5))
        while not self.stopping.wait(tick):
            try:
                self._tick()
            except Exception:
                self._fail("watcher tick failed")

    def _tick(self) -> None:
        now = time.monotonic()
        due = []
        with self.lock:
            for st in self.roots.values():
                if st.dirty_since is None:
                    continue
                quiet = now - st.last_event >= self.interval
                overdue = now - st.dirty_since >= self.max_wait
                if quiet or overdue:
                    due.append((st, not quiet))
                    st.dirty_since = None  # events during the capture start a new window
        for st, partial in due:
            if self.stopping.is_set():
                return
            self._capture(st, partial)
        if due:
            heap.settle()  # the captures' store handles and buffers back to the OS (tc_git/storage/heap.py)

    def _capture(self, st: _Root, partial: bool) -> None:
        from ..base.errors import NotFound, StoreBusy, TaskClosed, TcError

        try:
            eng = self._engine(st.root)
            if eng.journal is None:
                eng.journal = st.journal
            result = eng.capture(partial=partial)
        except (NotFound, TaskClosed) as e:  # no active task any more: stop until served again
            log.info("not watching %s any more: %s", st.root, e.message)
            self.forget(st.root)
            return
        except StoreBusy:
            with self.lock:  # try again after the next quiet period
                if st.dirty_since is None:
                    st.dirty_since = time.monotonic()
                    st.last_event = time.monotonic()
            return
        except TcError as e:
            st.errors += 1
            self._fail("drift capture of %s refused: %s", st.root, e.message, tb=False)
            return
        except Exception:
            st.errors += 1
            self._fail("drift capture of %s failed", st.root)
            return
        if result.get("unstable"):
            # files that never held still kept their last version: look again after the next
            # quiet period (the capture recorded everything that did hold still)
            with self.lock:
                if st.dirty_since is None:
                    st.dirty_since = time.monotonic()
                    st.last_event = time.monotonic()
        if result.get("captured"):
            st.captures += 1
            msg = f"watch: drift {result.get('drift_id')} ({result.get('reads')} files{', partial' if partial else ''})"
            log.info("%s: %s", st.root, msg)
            self.log_line(st.store, msg)

    def _engine(self, root: Path) -> Engine:
        if self.engine_factory is not None:
            return self.engine_factory(root)
        from ..engine import Engine

        return Engine(root, agent="tc-mcp-watch")

    def _fail(self, fmt: str, *args, tb: bool = True) -> None:
        """Log failures at counts 1, 10, 100, ... so a broken root cannot flood the log."""
        self.failures += 1
        n = self.failures
        if n & (n - 1) == 0 or str(n).rstrip("0") == "1":
            log.warning(fmt + f" (failure #{n})", *args, exc_info=tb)

    # ----------------------------------------------------------------------- shutdown
    def stop(self, timeout: float = 5.0) -> None:
        if not self.stopping.is_set():
            handles.enable(False)
        self.stopping.set()
        with self.lock:
            trees = [st.handle for st in self.roots.values() if st.observer is NATIVE]
        for tree in trees:
            tree.stop(join=timeout)
        for obs in (self.observer, self.poller):
            if obs is not None:
                try:
                    obs.stop()
                    obs.join(timeout)
                except Exception:
                    pass
        if self.thread is not None and self.thread is not threading.current_thread():
            self.thread.join(timeout)

    def status(self) -> dict:
        with self.lock:
            return {"mode": self.mode, "interval": self.interval, "max_wait": self.max_wait,
                    "roots": {str(r): {"dirty": s.dirty_since is not None, "events": s.events,
                                       "captures": s.captures, "errors": s.errors}
                              for r, s in self.roots.items()}}


def _new_journal(root: Path, store: Path):
    """A change journal for `root`, if the store is inside it (the barrier file must be watched)."""
    from ..workspace.journal import BARRIER, Journal

    store_abs, root_abs = str(store.resolve()), str(root.resolve())
    inside = store_abs.startswith(root_abs + os.sep)
    return Journal(str(root), os.path.join(str(store), "tc", BARRIER) if inside else None)


NATIVE = "native"  # _Root.observer of a workspace read by tc_git/workspace/inotify.py


def _native_tree(watcher: DriftWatcher, st: _Root):
    from ..workspace import inotify

    def overflow() -> None:
        if st.journal is not None:
            st.journal.untrust("inotify queue overflow")

    def blind(reason: str) -> None:
        if st.journal is not None:
            st.journal.fail(reason)
        watcher._fail("watching %s: %s", st.root, reason, tb=False)

    inside = str(st.store.resolve()).startswith(str(st.root.resolve()) + os.sep)
    return inotify.Tree(str(st.root), str(st.store) if inside else None,
                        st.journal.barrier if st.journal is not None else None,
                        lambda rels: watcher.on_paths(st, rels), overflow, blind, STORE_DIRNAME)


_SKIPPED: set[bytes] = set()  # stores inside watched workspaces: not watched but for their tc/ (the barrier)


def _skip_store_watches(store: Path) -> None:
    """Do not watch the store's directories (and `.git` directories) inside a workspace.

    Every event in them is ignored anyway (`_Root.ignored`), but watchdog watches each directory
    under the root and handles each event in Python on its own thread: a save of 100 files wrote
    ~200 loose objects (temporary file, write, close, rename each; a new `objects/xx` directory
    is watched and walked), and those events competed with the save for the GIL and queued ahead
    of the journal's barrier (10k files: the 100-file save took 228 ms with the journal against
    167 ms without; cProfile showed the same C calls 3-6x slower). Only `<store>/tc`, where the
    barrier file is written, stays watched: one watch group keeps its events in order.
    watchdog 7's InotifyWatchGroup is patched to skip them; another watchdog version watches
    everything, as before (correct, slower)."""
    _SKIPPED.add(os.fsencode(str(Path(store).resolve())))

    def wrap(orig):
        def _add_callback(self, path: bytes) -> None:
            # the watch's own root is always watched (a workspace below a `.git/` directory stays seen)
            if path != getattr(self, "path", None) and _skipped(path):
                return None
            return orig(self, path)
        return _add_callback

    _patch_watch_group("_add_callback", wrap)


def _patch_watch_group(name: str, wrap) -> None:
    """watchdog 7's InotifyWatchGroup.<name> replaced by `wrap(original)`, once. A private method:
    patched only in the major version whose behaviour was read and tested; another one runs as it
    is (correct, slower or, for moved directories, blind as the runbook says)."""
    try:
        from watchdog import version
        from watchdog.observers import inotify as wi

        group = wi.InotifyWatchGroup
        orig = getattr(group, name)
    except (ImportError, AttributeError):
        return
    if version.VERSION_MAJOR != 7 or getattr(orig, "_tc_patched", False):
        return
    new = wrap(orig)
    new._tc_patched = True
    setattr(group, name, new)


MOVE_PAIRING = 0.02  # seconds watchdog waits for a rename's second half (its default: 0.5)


def _short_move_pairing() -> None:
    """watchdog 7 holds each IN_MOVED_FROM for 0.5 s to pair it with its IN_MOVED_TO, and its
    reader thread sleeps out that delay even when the pair arrives at once (DelayedQueue.get):
    every event behind a rename, the journal's barrier included, waited up to 0.5 s. Restores
    rename each file into place and write their journal by rename: a restore with the journal
    took ~550 ms at 1k files against ~110 without. The kernel queues both halves of a rename
    together, so a short wait pairs them; one left unpaired arrives as a deletion and a
    creation, which name the same two paths for the journal and the drift watcher."""
    try:
        from watchdog import version
        from watchdog.observers.inotify_move_event_grouper import InotifyMoveEventGrouper
    except ImportError:
        return
    if version.VERSION_MAJOR == 7 and InotifyMoveEventGrouper.delay > MOVE_PAIRING:
        InotifyMoveEventGrouper.delay = MOVE_PAIRING


def _watch_moved_in_directories() -> None:
    """watchdog 7 moves its watches along with a moved directory but does not look inside it for
    directories it never watched: one created just before its parent was moved is added under the
    old path, which is gone (ENOENT, ignored), and everything written in it later is unseen, so a
    journal save left it out (mkdir x/new; mv x y; write y/new/f: 24 of 100 saves wrong). After
    the move, the new place is walked for directories without a watch, as tc_git/workspace/
    inotify.py does; what was written there before is found by the snapshot, which rescans the
    moved directory as a whole (both of its paths are noted)."""
    def wrap(orig):
        def _move_watches(self, move_src_path: bytes, move_dst_path: bytes) -> bool:
            moved = orig(self, move_src_path, move_dst_path)
            if moved and self.is_recursive:
                self._add_all_callbacks(move_dst_path)  # (skips every directory already watched)
            return moved
        return _move_watches

    _patch_watch_group("_move_watches", wrap)


def _skipped(path: bytes) -> bool:
    if b"/.git/" in path + b"/":
        return True
    for s in _SKIPPED:
        if path == s or path.startswith(s + b"/"):
            return path != s + b"/tc"
    return False


_JOURNALS_OVERFLOW: list[logging.Handler] = []


def _watch_overflows() -> None:
    """watchdog repairs its watches after an inotify queue overflow but only logs it; events were
    lost, so every journal stops being trusted (its next snapshot is a full scan)."""
    if _JOURNALS_OVERFLOW:
        return

    class _Overflow(logging.Handler):
        def emit(self, record):
            if "overflow" in record.getMessage().lower():
                from ..workspace.journal import untrust_all

                untrust_all("inotify queue overflow")

    h = _Overflow(logging.WARNING)
    for name in ("watchdog.observers.inotify", "watchdog.observers.inotify_c"):
        logging.getLogger(name).addHandler(h)
    _JOURNALS_OVERFLOW.append(h)


class _Handler:
    """watchdog event handler (duck-typed: `dispatch` is all the observer calls)."""

    def __init__(self, watcher: DriftWatcher, st: _Root):
        self.watcher, self.st = watcher, st

    def dispatch(self, event) -> None:
        try:
            if event.is_directory and event.event_type == "modified":
                return
            paths = [os.fsdecode(event.src_path)]
            dest = getattr(event, "dest_path", "")
            if dest:
                paths.append(os.fsdecode(dest))
            self.watcher.on_event(self.st, paths)
        except Exception:
            if self.st.journal is not None:
                self.st.journal.fail("a watch event could not be handled")
            self.watcher._fail("bad watch event")
