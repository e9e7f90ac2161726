"""The restore's snapshot after its writes judges "racily clean" entries against a file-system
fence (restore.fs_fence, snapshot.fenced) instead of smudging every file it has just written
(issue 14: the next save then hashed them all again and rewrote the whole index).

- the fence is later than every write made before it, and every write after it is not earlier;
- an entry changed at or after the fence is still smudged (read again next time), one older
  is kept with its stat data;
- after a restore the next no-change save neither reads a restored file nor rewrites the
  index, and stock git agrees with every tree; a file rewritten right after the restore with
  the same size is still seen;
- a store on another file system gets no fence (its clock may tick differently)."""
from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import pygit2
import pytest
from conftest import git_tree, write

from tc_git.storage import _native
from tc_git.timeline import restore
from tc_git.workspace import snapshot
from tc_git.workspace.journal import index_marker

needs_stat = pytest.mark.skipif(not _native.has(_native.INDEX_STAT),
                                reason="index entries carry stat data only with the native index calls")


@pytest.fixture
def task(tmp_path, monkeypatch):
    monkeypatch.setenv("TC_GIT", "off")
    from tc_git.engine import Engine

    ws = tmp_path / "ws"
    for i in range(40):
        write(ws, f"src/p{i % 4}/f{i}.py", f"v = {i}\n".encode())
    e = Engine(ws)
    e.init("fence")
    e.save("one")
    for i in range(0, 40, 2):
        write(ws, f"src/p{i % 4}/f{i}.py", f"edited = {i}\n".encode())
    e.save("two")
    return ws, e


def test_fence_orders_writes(task):
    ws, e = task
    before = os.lstat(ws / "src/p0/f0.py")
    fence = restore.fs_fence(e.store)
    assert fence is not None and fence > max(before.st_mtime_ns, before.st_ctime_ns)
    write(ws, "src/p0/after.py", b"x\n")
    after = os.lstat(ws / "src/p0/after.py")
    assert min(after.st_mtime_ns, after.st_ctime_ns) >= fence


def test_store_on_another_file_system_has_no_fence(tmp_path):
    other = Path("/dev/shm")
    if not other.is_dir() or os.stat(other).st_dev == os.stat(tmp_path).st_dev:
        pytest.skip("no second file system here")
    store = SimpleNamespace(state_dir=other, workspace=tmp_path)
    assert restore.fs_fence(store) is None


@needs_stat
def test_entry_at_the_fence_is_smudged(tmp_path):
    repo = pygit2.init_repository(str(tmp_path / "r"), bare=True)
    write(tmp_path, "f", b"data\n")
    st = os.lstat(tmp_path / "f")
    oid = repo.create_blob(b"data\n")
    idx = pygit2.Index()
    newest = max(st.st_mtime_ns, st.st_ctime_ns)
    for fence, smudged in ((newest, True), (newest + 1, False)):
        _native.index_add(idx, "f", oid, 0o100644, st, snapshot.RACY_NS, fence)
        mode, size, ms, mns, _cs, _cns, _ino = _native.index_entry_stat(idx, "f")
        assert ((ms, mns) == (0, 0)) is smudged, (fence, ms, mns)
    # without a fence, RACY_NS decides: a file changed just now is smudged
    _native.index_add(idx, "f", oid, 0o100644, st, snapshot.RACY_NS)
    assert _native.index_entry_stat(idx, "f")[2:4] == (0, 0)


@needs_stat
def test_restored_files_are_not_read_again(task, monkeypatch):
    ws, e = task
    r = e.restore(index=1, apply=True)
    assert r["applied"] and r["plan"]["counts"]["to_replace"] == 20, r["plan"]
    tree = str(e.repo[r["commit"]].tree_id)
    assert tree == git_tree(ws, e.store.path)
    idx = e.repo.index
    idx.read(False)
    smudged = [p for p in r["plan"]["to_replace"] if _native.index_entry_stat(idx, p)[2:4] == (0, 0)]
    assert smudged == []
    marker = index_marker(e.store.path)
    reads: list[str] = []
    real = snapshot._read_once
    monkeypatch.setattr(snapshot, "_read_once", lambda full, st: reads.append(full) or real(full, st))
    s = e.save("after the restore")
    assert reads == [] and index_marker(e.store.path) == marker  # nothing hashed, index not rewritten
    assert str(e.repo[s["commit"]].tree_id) == tree


def test_same_size_rewrite_right_after_the_restore_is_seen(task):
    ws, e = task
    r = e.restore(index=1, apply=True)
    assert r["applied"], r
    rel = r["plan"]["to_replace"][0]
    old = (ws / rel).read_bytes()
    new = bytes([old[0] ^ 1]) + old[1:]  # same size, other bytes, right away
    (ws / rel).write_bytes(new)
    s = e.save("rewritten")
    assert e.repo[e.repo[s["commit"]].tree[rel].id].data == new
    assert str(e.repo[s["commit"]].tree_id) == git_tree(ws, e.store.path)
    # and the undo still brings back what was there before the restore
    u = e.restore(undo=True, apply=True)
    assert u["applied"] and str(e.repo[u["commit"]].tree_id) == git_tree(ws, e.store.path)
