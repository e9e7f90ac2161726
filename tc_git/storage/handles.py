"""Store handles kept between engine calls, and the private index written after the answer.

Two costs of a save in a long-lived process (the MCP server) grew with the workspace, not with
the change (issue 14, measured at 50k files):

* Opening the store. pygit2 parses the 5 MB private index on a new handle's first `repo.index`
  (30-60 ms), and the server built a new engine, so a new handle, for every tool call. Now each
  engine call gives its handle back when it ends (`Store.release` -> `checkin`) and the next call
  on the same store and workspace takes it (`checkout`). A handle is held by one call at a time,
  never shared between threads; at most KEEP handles are kept (least recently used dropped).
* Writing the index. libgit2 serialises every entry and hashes the whole file with its
  collision-detecting SHA-1 (20-35 ms at 50k entries) for one changed file. In a process that
  opts in (`enable()`: the MCP server and the drift watcher), a snapshot marks the index dirty
  (`mark_dirty`) instead of writing it. The store's file lock stays held past the end of the
  call; `Store.release` hands lock and handle to a short-lived thread that writes the index
  the `index_delay` setting's seconds later (0.05) and then releases the lock. A locked call of this process
  on the same store before that takes lock and handle over as they are (`claim`: the index in
  memory is the current one), so saves in a row write the index once; a dirty index is written
  within MAX_AGE (1 s) of its first change whatever happens.

Safety (the index is a cache; the trees are the truth):
* No other process sees the on-disk index while it is older than the trees committed: the file
  lock is held from the moment the index is dirty until it is written. (A lock-free reader in
  another process, e.g. the unsaved list of `tc resume`, may see the old stat cache for those
  milliseconds, as it could always see a save in progress.)
* A crash between a commit and the index write leaves the old index. `mark_dirty` first writes
  the marker `tc/index-dirty` (before any ref can name the new tree); the writer removes it
  after the index is on disk. A snapshot that finds a marker that is not its own process's live
  one trusts nothing of the index (`trusted`): full scan (no journal, no refresh of given paths,
  no tree patch) and an index write, which removes the marker.
* A reader of this process waits for the write (`checkout`), so the writer thread never shares
  its handle. `flush` writes a dirty index at once (before a handle is dropped or reopened).
"""
from __future__ import annotations

import atexit
import logging
import os
import threading
import time
from typing import Any

from ..base.settings import current
from . import lockfile

log = logging.getLogger("tc_git.storage.handles")

MARKER = os.path.join("tc", "index-dirty")
KEEP = 4  # idle handles kept (one per store and workspace)
MAX_AGE = 1.0  # seconds a dirty index may wait for its write while calls keep taking it over

_cv = threading.Condition()
_users = 0  # long-lived users that asked for deferred index writes (enable)
_idle: dict[tuple[str, str], tuple[Any, Any]] = {}  # (store, workspace) -> (handle, pack stamp); oldest first
_dirty: dict[str, _Dirty] = {}  # store -> the index this process has not written yet
_pending: dict[str, _Dirty] = {}  # store -> a dirty index handed to its writer thread with the lock
_windows: set[str] = set()  # stores whose lock holder will call Store.release (engine calls)
_aliases: dict[tuple, tuple] = {}  # ("pending", token) -> the index file's marker once written


class _Dirty:
    __slots__ = ("repo", "token", "since", "fd", "state", "key", "workspace", "stamp")

    def __init__(self, repo, token: str):
        self.repo, self.token, self.since = repo, token, time.monotonic()
        self.fd: int | None = None
        self.state = "open"  # open (a call holds it) | waiting (its thread, before the delay) | writing | done
        self.key, self.workspace, self.stamp = "", "", None


def key(path) -> str:
    return os.path.normpath(os.fspath(path))


def enable(on: bool = True) -> None:
    """Write indexes after the answer in this process while at least one long-lived user (the
    MCP server, a drift watcher) wants it: `enable()` counts one more, `enable(False)` one less."""
    global _users
    with _cv:
        _users = _users + 1 if on else max(0, _users - 1)


def enabled() -> bool:
    return _users > 0


def _delay() -> float:
    return max(0.0, current().index_delay)


# ----------------------------------------------------------------------------- idle handles
def checkout(store, workspace, claim: bool = False) -> tuple[Any, Any, int | None] | None:
    """The handle an earlier call left for this store and workspace (now this caller's alone):
    (handle, pack stamp, None); None if there is none. A deferred index write of the store is
    waited for, or with `claim` (an engine call, which releases the store when it ends) taken
    over before it starts, lock included: (handle, pack stamp, lock fd)."""
    k, w = key(store), key(workspace)
    with _cv:
        while k in _pending:
            d = _pending[k]
            if claim and d.state == "waiting" and d.workspace == w:
                d.state = "claimed"
                del _pending[k]
                _cv.notify_all()
                return d.repo, d.stamp, d.fd
            _cv.wait(1.0)
        kept = _idle.pop((k, w), None)
        return None if kept is None else (kept[0], kept[1], None)


def checkin(store, workspace, repo, stamp) -> None:
    k = (key(store), key(workspace))
    with _cv:
        _idle.pop(k, None)
        _idle[k] = (repo, stamp)
        while len(_idle) > KEEP:
            _idle.pop(next(iter(_idle)))


def forget_idle(store) -> None:
    """Drop the kept handles of a store (its objects were replaced: a repack, an import)."""
    k = key(store)
    with _cv:
        for ik in [ik for ik in _idle if ik[0] == k]:
            del _idle[ik]


def drop_idle(keep=None) -> int:
    """Drop the kept handles of every store but `keep`'s (their parsed indexes: ~10 MiB each at
    50k files), closing their packs at once: before a call that needs no other workspace's index
    and peaks high itself (export, import, compress in the MCP server). Returns how many went."""
    k = key(keep) if keep is not None else None
    with _cv:
        # a handle whose index write is still deferred (the call just before: a save, an export's
        # capture) is checked in only once written: waited for (<= index_delay + the write),
        # else it came back right after this and stayed through the peak it was dropped for
        for pk in [pk for pk in _pending if pk != k]:
            _wait_written(pk)
        gone = [_idle.pop(ik)[0] for ik in [ik for ik in _idle if ik[0] != k]]
    for repo in gone:
        repo.free()  # (idle: no call holds it) caches, index and pack maps now, not at the next collection
    return len(gone)


# ----------------------------------------------------------------------------- own packs
_own: dict[str, dict[tuple, tuple]] = {}  # store -> {pack-dir stamp before: after} of packs this process added


def own_pack_change(store, before: tuple, after: tuple) -> None:
    """This process added a pack (savepack.py, under the store lock), turning `objects/pack`'s
    stamp from `before` into `after`: handles opened before it need not reopen (a pack added is
    found on the next miss; only removed packs stay mapped). The last 64 per store are kept."""
    k = key(store)
    with _cv:
        chain = _own.setdefault(k, {})
        chain[before] = after
        while len(chain) > 64:
            chain.pop(next(iter(chain)))


def pack_stamp(store) -> tuple | None:
    """`objects/pack`'s stamp (inode, mtime): what a handle opened then knows of the packs."""
    try:
        st = os.stat(os.path.join(os.fspath(store), "objects", "pack"))
    except OSError:
        return None
    return (st.st_ino, st.st_mtime_ns)


def same_packs(store, old, new) -> bool:
    """Whether a handle that saw `objects/pack` at stamp `old` may stay open at stamp `new`: the
    same stamp, or only packs this process added in between."""
    if old == new:
        return old is not None
    with _cv:
        chain = _own.get(key(store), {})
        for _ in range(len(chain)):
            old = chain.get(old)
            if old is None:
                return False
            if old == new:
                return True
    return False


def _wait_written(k: str) -> None:
    while k in _pending:  # (under _cv) the writer thread notifies when done
        _cv.wait(1.0)


# ----------------------------------------------------------------------------- the dirty index
def open_window(store) -> None:
    """The store's lock was taken by a caller that will release it through Store.release."""
    with _cv:
        _windows.add(key(store))


def close_window(store) -> None:
    with _cv:
        _windows.discard(key(store))


def may_defer(repo) -> bool:
    """Whether a snapshot on `repo` may leave its index for the writer thread."""
    return key(repo.path) in _windows and enabled()


def mark_dirty(repo) -> None:
    """The index of `repo` changed in memory and is to be written later. The marker file is on
    disk before this returns: a crash from here on makes the next snapshot a full scan."""
    k = key(repo.path)
    d = _dirty.get(k)
    if d is not None and d.repo is repo:
        return
    token = f"{os.getpid()}-{os.urandom(8).hex()}"
    fd = os.open(os.path.join(k, MARKER), os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_BINARY", 0), 0o600)
    try:
        os.write(fd, token.encode())
    finally:
        os.close(fd)
    with _cv:
        _dirty[k] = _Dirty(repo, token)


def is_dirty(repo) -> bool:
    d = _dirty.get(key(repo.path)) if repo is not None else None
    return d is not None and d.repo is repo


def trusted(repo) -> bool:
    """Whether the index `repo` holds may be trusted as the last snapshot's: no marker of an
    unwritten index, or the marker of this process's own dirty index in this very handle."""
    k = key(repo.path)
    try:
        with open(os.path.join(k, MARKER), "rb") as f:
            token = f.read().decode("ascii", "replace")
    except FileNotFoundError:
        return True
    except OSError:
        return False
    d = _dirty.get(k)
    return d is not None and d.repo is repo and d.token == token


def forget(repo) -> None:
    """The dirty index of `repo` is not going to be written (the snapshot failed and reloads the
    index from disk): its marker stays, so the next snapshot does not trust the old index."""
    with _cv:
        d = _dirty.get(key(repo.path))
        if d is not None and d.repo is repo:
            del _dirty[key(repo.path)]


def clear_marker(repo) -> None:
    """The index of `repo` was just written in full by a snapshot that trusted nothing of the
    old one (the caller holds the lock): no marker, nothing of this handle pending."""
    k = key(repo.path)
    with _cv:
        d = _dirty.get(k)
        if d is not None and d.repo is repo:
            del _dirty[k]
    try:
        os.unlink(os.path.join(k, MARKER))
    except FileNotFoundError:
        pass


def current_marker(store) -> tuple | None:
    """The index's generation: ("pending", token) while this process holds it unwritten, else
    the file's (inode, size, mtime) (journal.index_marker)."""
    k = key(store)
    d = _dirty.get(k)
    if d is not None:
        return ("pending", d.token)
    try:
        st = os.stat(os.path.join(k, "index"))
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


def canon(marker):
    """A marker recorded while the index was pending, as the file's marker once it was written."""
    return _aliases.get(marker, marker) if isinstance(marker, tuple) else marker


def _write(d: _Dirty) -> bool:
    """Write a dirty index (the caller holds the store's lock). The marker file goes after."""
    k = key(d.repo.path)
    try:
        d.repo.index.write()
        st = os.stat(os.path.join(k, "index"))
        with _cv:
            _aliases[("pending", d.token)] = (st.st_ino, st.st_size, st.st_mtime_ns)
            while len(_aliases) > 64:
                _aliases.pop(next(iter(_aliases)))
        try:
            with open(os.path.join(k, MARKER), "rb") as f:
                mine = f.read().decode("ascii", "replace") == d.token
            if mine:
                os.unlink(os.path.join(k, MARKER))
        except FileNotFoundError:
            pass
        return True
    except Exception:
        log.warning("writing the index of %s failed; the next snapshot will scan everything", k, exc_info=True)
        return False
    finally:
        with _cv:
            if _dirty.get(k) is d:
                del _dirty[k]


def flush(repo) -> None:
    """Write the dirty index of `repo` now (the caller holds the store's lock)."""
    d = _dirty.get(key(repo.path)) if repo is not None else None
    if d is not None and d.repo is repo:
        _write(d)


# ----------------------------------------------------------------------------- lock hand-over
def later(store, workspace, repo, fd: int, stamp) -> None:
    """Called by Store.release with the lock still held and the index of `repo` dirty: a thread
    writes it after the delay (unless a call of this process takes it over first), releases the
    lock and keeps the handle for the next call."""
    k = key(store)
    with _cv:
        d = _dirty.get(k)
        if d is None or d.repo is not repo:  # written meanwhile (flush): nothing to wait for
            d = None
        else:
            d.fd, d.state, d.key, d.workspace, d.stamp = fd, "waiting", k, key(workspace), stamp
            _pending[k] = d
    if d is None:
        lockfile.release(fd)
        checkin(store, workspace, repo, stamp)
        return
    due = min(time.monotonic() + _delay(), d.since + MAX_AGE)
    threading.Thread(target=_writer, args=(d, due), name="tc-index-write", daemon=True).start()


def _writer(d: _Dirty, due: float) -> None:
    with _cv:
        while d.state == "waiting" and time.monotonic() < due:
            _cv.wait(max(0.0, due - time.monotonic()))
        if d.state != "waiting":
            return  # taken over by a call of this process
        d.state = "writing"
    _finish(d)


def _finish(d: _Dirty) -> None:
    ok = _write(d)
    fd = d.fd
    try:
        if fd is not None:
            lockfile.release(fd)
    finally:
        with _cv:
            d.state = "done"
            if _pending.get(d.key) is d:
                del _pending[d.key]
            if ok:
                _idle.pop((d.key, d.workspace), None)
                _idle[(d.key, d.workspace)] = (d.repo, d.stamp)
                while len(_idle) > KEEP:
                    _idle.pop(next(iter(_idle)))
            _cv.notify_all()


def claim(store, repo) -> tuple[int, Any, Any] | None:
    """Before a locked call of this process: the lock and handle of a deferred write of this
    store, taken over as they are (fd, handle, pack stamp), when the caller has no handle of its
    own or the same one; with another handle, the dirty index is written first and the caller
    keeps its own (fd, None, None). None: no deferred write is waiting (one being written has
    finished by the time this returns); take the lock as usual."""
    k = key(store)
    with _cv:
        while True:
            d = _pending.get(k)
            if d is None:
                return None
            if d.state == "waiting":
                d.state = "claimed"
                del _pending[k]
                _cv.notify_all()
                break
            _cv.wait(1.0)
    if repo is None or repo is d.repo:
        assert d.fd is not None
        return d.fd, d.repo, d.stamp
    fd, d.fd = d.fd, None
    _write(d)
    assert fd is not None
    return fd, None, None


def flush_all() -> None:
    """Write every deferred index now (the server's exit; atexit)."""
    with _cv:
        waiting = [d for d in _pending.values() if d.state == "waiting"]
        for d in waiting:
            d.state = "writing"
        _cv.notify_all()
    for d in waiting:
        _finish(d)
    with _cv:
        for k in list(_pending):
            _wait_written(k)


atexit.register(flush_all)
