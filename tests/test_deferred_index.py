"""The private index written after the answer (tc_git/storage/handles.py, issue 14), and store handles
kept between engine calls. Stock git is the judge of every tree (`git_tree`: `git add -A &&
git write-tree` on a fresh index), real processes hold the lock, a real SIGKILL makes the crash.

* an engine call returns with the index still to be written; another process cannot take the
  store's lock until it is written; the next call of the same process takes lock and handle over
  (saves in a row write the index once);
* a crash between a save's answer and its index write leaves a store git accepts, and the next
  snapshot in another process (a hook's partial capture) does not trust the old index: its tree
  is the workspace's, the crashed save's change included;
* another process's capture during the deferred window waits for the lock and sees correct trees;
* a snapshot that fails after taking over an unwritten index leaves the next one a full scan.
"""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from conftest import clean_env, fsck, git_tree, knobs, write

from tc_git.storage import handles


@pytest.fixture
def deferring(monkeypatch, tune):
    monkeypatch.setenv("TC_GIT", "off")
    tune(index_delay=0.3)
    handles.enable()
    yield
    handles.flush_all()
    handles.enable(False)


def _ws(tmp_path: Path, n: int = 30) -> Path:
    ws = tmp_path / "ws"
    for i in range(n):
        write(ws, f"d{i % 3}/f{i}.txt", f"file {i}\n".encode())
    return ws


def _lock_free(store: Path) -> bool:
    """Whether another process could take the store's lock right now."""
    code = ("import fcntl, os, sys; fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)\n"
            "try:\n    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB); print('free')\n"
            "except OSError:\n    print('held')")
    out = subprocess.run([sys.executable, "-c", code, str(store / "lock")], capture_output=True, text=True,
                         check=True).stdout.strip()
    return out == "free"


def _first_saved(tmp_path: Path, *extra: tuple[str, bytes]):
    """A workspace of 30 files (+ `extra` (path, bytes)), its task and first save: (ws, engine, store)."""
    from tc_git.engine import Engine

    ws = _ws(tmp_path)
    for rel, data in extra:
        write(ws, rel, data)
    eng = Engine(ws)
    eng.init("t")
    eng.save("first")
    return ws, eng, eng.store.path


def _tree(eng, commit: str) -> str:
    return str(eng.repo[commit].peel(__import__("pygit2").Commit).tree_id)


def test_index_written_after_the_answer(tmp_path, deferring, monkeypatch, tune):

    tune(index_delay=30)  # (flush_all below writes it; a loaded machine is slow)
    monkeypatch.setattr(handles, "MAX_AGE", 60.0)

    ws, eng, store = _first_saved(tmp_path)  # (a first snapshot writes its index at once)
    write(ws, "d0/f0.txt", b"changed\n")
    r = eng.save("one file")
    # answered: the index is still to be written (the marker says so) and the lock is still held
    token = (store / handles.MARKER).read_text()
    assert not _lock_free(store)
    # a second save of this process before the delay takes lock and handle over as they are:
    # the same unwritten index (same marker), one write for both
    write(ws, "d1/f1.txt", b"changed too\n")
    r2 = eng.save("another")
    assert (store / handles.MARKER).read_text() == token
    handles.flush_all()
    assert not (store / handles.MARKER).exists()
    assert _lock_free(store)
    assert _tree(eng, r2["commit"]) == git_tree(ws, store)
    assert _tree(eng, r["commit"]) != _tree(eng, r2["commit"])
    # the index on disk is the one the last save built: a fresh process's no-change save agrees
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(f"""
        import json
        from tc_git.engine import Engine
        r = Engine({str(ws)!r}).save("same")
        print(json.dumps([r["changed"], r["commit"]]))
    """)], capture_output=True, text=True, env=clean_env(TC_GIT="off"), check=True).stdout
    changed, commit = json.loads(out)
    assert changed == 0 and _tree(eng, commit) == git_tree(ws, store)
    fsck(store)


def test_handle_kept_between_engines(tmp_path, deferring):
    """The MCP server builds an engine per tool call: the store handle, and its parsed index,
    goes from one to the next instead of being reopened."""
    from tc_git.engine import Engine

    ws = _ws(tmp_path)
    e1 = Engine(ws)
    e1.init("t")
    e1.save("first")
    e1.save("again")  # (the first save wrote a pack: that handle was replaced once)
    repo = e1.repo
    e1.show()  # an engine call: the handle goes back when it ends
    e2 = Engine(ws)
    assert e2.repo is repo  # the same handle, its index already parsed
    e2.show()
    e3, e4 = Engine(ws), Engine(ws)
    assert e3.repo is repo and e4.repo is not repo  # one holder at a time: never shared
    handles.flush_all()


_SAVER = textwrap.dedent("""
    import os, sys, time
    from tc_git.storage import handles
    from tc_git.engine import Engine
    handles.enable()
    eng = Engine(sys.argv[1])
    with open(os.path.join(sys.argv[1], "a.txt"), "w") as f:
        f.write("saved by the crashed server\\n")
    r = eng.save("deferred")
    print(r["commit"], flush=True)
    if sys.argv[2] == "crash":
        os.kill(os.getpid(), 9)  # after the answer, before the index write (index_delay 30)
    time.sleep(float(sys.argv[3]))
""")


def _saver(ws: Path, mode: str, hold: float, delay: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", _SAVER, str(ws), mode, str(hold)], stdout=subprocess.PIPE,
                            text=True, env=clean_env(TC_GIT="off", **knobs(index_delay=delay)))


def test_crash_between_answer_and_index_write(tmp_path):
    from tc_git.engine import Engine

    ws, eng, store = _first_saved(tmp_path, ("a.txt", b"before\n"))
    p = _saver(ws, "crash", 0, "30")
    commit = p.stdout.readline().strip()
    assert p.wait(60) == -signal.SIGKILL
    # the save's commit is there; the index on disk still names a.txt's old version (the diff
    # may have refreshed stat data of other entries, never this one); the marker says so
    import pygit2

    on_disk = pygit2.Index(str(store / "index"))
    assert on_disk["a.txt"].id != eng.repo[commit].peel(pygit2.Commit).tree["a.txt"].id
    assert (store / handles.MARKER).exists()
    fsck(store)
    crashed_tree = _tree(eng, commit)
    assert crashed_tree == git_tree(ws, store)
    # a hook's partial capture in another process (only the file its edit tool named): the old
    # index would give back a.txt's previous version; the marker makes it a full scan
    write(ws, "d2/f2.txt", b"edited by a tool\n")
    hook = Engine(ws)
    r = hook.capture(paths=["d2/f2.txt"])
    assert r["captured"]
    assert _tree(hook, r["commit"]) == git_tree(ws, store)
    assert hook.repo[_tree(hook, r["commit"])]["a.txt"].data == b"saved by the crashed server\n"
    assert [f["path"] for f in r["files"]["files"]] == ["d2/f2.txt"]  # a.txt is not "changed back"
    assert not (store / handles.MARKER).exists()
    # and from here the stat cache is trusted again: a no-change save changes nothing
    s = Engine(ws).save("after")
    assert s["changed"] == 0 and _tree(eng, s["commit"]) == git_tree(ws, store)
    fsck(store)


def test_other_process_capture_waits_for_the_index(tmp_path):
    from tc_git.engine import Engine

    ws, eng, store = _first_saved(tmp_path, ("a.txt", b"before\n"))
    p = _saver(ws, "hold", 3.0, "1.0")  # the index written 1 s after the answer
    commit = p.stdout.readline().strip()
    try:
        assert (store / handles.MARKER).exists()
        write(ws, "d1/f4.txt", b"edited meanwhile\n")
        t0 = time.monotonic()
        r = Engine(ws).capture(paths=["d1/f4.txt"])  # waits for the lock: the index is not written yet
        waited = time.monotonic() - t0
        assert not (store / handles.MARKER).exists()
        tree = _tree(eng, r["commit"])
        assert tree == git_tree(ws, store)
        assert eng.repo[tree]["a.txt"].data == b"saved by the crashed server\n"
        assert [f["path"] for f in r["files"]["files"]] == ["d1/f4.txt"]
        assert waited > 0.2, waited  # (it could not have run before the write)
        assert eng.repo[commit].peel(__import__("pygit2").Commit).tree_id != eng.repo[tree].id
    finally:
        assert p.wait(60) == 0
    fsck(store)


def test_failed_snapshot_after_takeover_means_full_scan(tmp_path, deferring, monkeypatch):
    from tc_git.engine import Engine
    from tc_git.workspace import snapshot

    ws, eng, store = _first_saved(tmp_path)
    write(ws, "d0/f3.txt", b"one\n")
    eng.save("deferred")  # its index is not written yet
    write(ws, "d2/f5.txt", b"two\n")
    real = snapshot._Run.refresh

    def boom(self, rel):
        raise OSError(5, "injected failure")

    monkeypatch.setattr(snapshot._Run, "refresh", boom)
    with pytest.raises(Exception):
        eng.save("fails")  # took the unwritten index over, then failed: it reloads the old one
    monkeypatch.setattr(snapshot._Run, "refresh", real)
    assert (store / handles.MARKER).exists()
    assert _lock_free(store)  # a failed call never keeps the lock
    r = Engine(ws).save("recovers")
    handles.flush_all()
    assert _tree(eng, r["commit"]) == git_tree(ws, store)
    assert not (store / handles.MARKER).exists()
    fsck(store)


def test_read_right_after_a_save_takes_the_unwritten_index_over(tmp_path, deferring, monkeypatch, tune):
    """A read-only engine call (tc_show) right after a save neither waits for the deferred write
    nor opens a second handle: it takes handle and lock over like a save would, and the write
    happens after it."""
    from tc_git.engine import Engine

    tune(index_delay=30)
    monkeypatch.setattr(handles, "MAX_AGE", 60.0)
    ws, eng, store = _first_saved(tmp_path)
    write(ws, "d0/f0.txt", b"changed\n")
    eng.save("one file")
    token = (store / handles.MARKER).read_text()
    t0 = time.monotonic()
    shown = Engine(ws).show()
    assert time.monotonic() - t0 < 10  # (it did not wait for the 30 s delay)
    assert shown["task_id"]
    assert (store / handles.MARKER).read_text() == token  # still the same unwritten index
    assert not _lock_free(store)
    handles.flush_all()
    assert not (store / handles.MARKER).exists() and _lock_free(store)
    # outside an engine call nothing is taken over: a plain read waits for the write instead
    tune(index_delay=0.5)
    write(ws, "d1/f1.txt", b"again\n")
    r = eng.save("two")
    assert (store / handles.MARKER).exists()
    tree = _tree(Engine(ws), r["commit"])  # Engine.repo outside a call: waits, then reads
    assert tree == git_tree(ws, store)
    handles.flush_all()
    fsck(store)


def test_no_refreshing_scan_pass_while_the_index_is_unwritten(tmp_path, deferring, monkeypatch):
    """While the index in memory is unwritten (its write deferred), libgit2 judges every entry
    newer than the index file's last write racy and hashes it whatever a refresh writes: the
    parallel scan's second, refreshing pass over a share (UPDATE_INDEX) then refreshed nothing
    and doubled the scan of a 100-file save at 10k files. It is skipped then, and still runs
    once the index is written (files touched meanwhile get their stat data back)."""
    import os

    from pygit2.enums import DiffOption

    from tc_git.storage import _native
    from tc_git.workspace import scan

    monkeypatch.setattr(scan, "MIN_ENTRIES", 10)  # the parallel scan from 10 entries
    ws, eng, store = _first_saved(tmp_path)
    handles.flush_all()
    old = time.time() - 100
    for i in range(0, 30, 5):
        os.utime(ws / f"d{i % 3}/f{i}.txt", (old, old))  # same bytes, other stat data: hashed
    passes: list[bool] = []
    real = _native.diff_paths

    def counting(handle, idx, flags, paths, *a, **kw):
        passes.append(bool(flags & DiffOption.UPDATE_INDEX))
        return real(handle, idx, flags, paths, *a, **kw)

    monkeypatch.setattr(_native, "diff_paths", counting)
    repo = eng.repo
    idx = repo.index
    idx.read(True)
    flags = (DiffOption.INCLUDE_UNTRACKED | DiffOption.RECURSE_UNTRACKED_DIRS | DiffOption.UPDATE_INDEX)
    assert scan.parallel_ok(len(idx))
    assert scan.changed_paths(repo, idx, flags, unwritten=True) == []
    assert passes and not any(passes), passes  # one pass per share, no refreshing one
    passes.clear()
    assert scan.changed_paths(repo, idx, flags) == []
    assert any(passes), passes  # written index: the touched files are refreshed
    fsck(store)
