"""A restore's snapshot after its writes trusts what it wrote (snapshot.Written): a file that
still has the stat data it had once in place (wsfs.Writer.write's lstat: the inode written,
the write's size and mtime, a ctime after that mtime) is indexed with the blob id written,
without being read and hashed again; any other file is read as before.

- a restore of 20 files reads none of them back, and its tree is stock git's;
- a file another process rewrote right after the restore placed it (same size; its mtime put
  back too; or replaced by another inode) is read, and its real content is what is recorded;
- an import into an empty workspace (every file of the tree written) reads nothing back, and
  stock git agrees with the tree; nothing is stored twice;
- where the clock did not tick between the write and the rename (ctime == mtime) nothing is
  trusted."""
from __future__ import annotations

import os
from types import SimpleNamespace

import pygit2
import pytest
from conftest import fsck, git, git_tree, write

from tc_git.timeline import restore as restore_mod
from tc_git.workspace import snapshot, wsfs


def _fine_clock(d) -> bool:
    """Does a rename right after a write get a later ctime here (fine-grained timestamps)?"""
    p = os.path.join(d, ".probe")
    with open(p + ".tmp", "wb") as f:
        f.write(b"x")
        os.fstat(f.fileno())
    os.replace(p + ".tmp", p)
    st = os.lstat(p)
    os.unlink(p)
    return st.st_ctime_ns > st.st_mtime_ns


@pytest.fixture
def task(tmp_path, monkeypatch):
    monkeypatch.setenv("TC_GIT", "off")
    from tc_git.engine import Engine

    ws = tmp_path / "ws"
    for i in range(40):
        write(ws, f"src/p{i % 4}/f{i}.py", f"v = {i}\n".encode(), mode=0o755 if i % 7 == 0 else None)
    e = Engine(ws)
    e.init("trust")
    e.save("one")
    for i in range(0, 40, 2):
        write(ws, f"src/p{i % 4}/f{i}.py", f"edited = {i}\n".encode())
    return ws, e


def _reads_after_writes(monkeypatch) -> list[str]:
    """The files snapshots read (snapshot._read_once) from the moment apply_plan returns."""
    seen: list[str] = []
    on = [False]
    real_read, real_apply = snapshot._read_once, restore_mod.apply_plan

    def read_once(full, st):
        if on[0]:
            seen.append(full)
        return real_read(full, st)

    def apply_plan(repo, plan):
        failed = real_apply(repo, plan)
        on[0] = True
        return failed

    monkeypatch.setattr(snapshot, "_read_once", read_once)
    monkeypatch.setattr(restore_mod, "apply_plan", apply_plan)
    return seen


def test_restored_files_are_not_read_back(task, monkeypatch):
    ws, e = task
    seen = _reads_after_writes(monkeypatch)
    r = e.restore(1, apply=True)
    monkeypatch.undo()
    assert r["applied"] and r["plan"]["counts"]["to_replace"] == 20, r["plan"]
    if _fine_clock(ws):
        assert seen == [], seen
    else:  # (coarse timestamps: nothing proven, every file read as before)
        assert len(seen) <= 20
    after = e.repo[r["commit"]].peel(pygit2.Commit)
    assert str(after.tree_id) == git_tree(ws, e.store.path) == str(e.repo[e.restore(1)["target_commit"]].peel(
        pygit2.Commit).tree_id)
    s = e.save("again")  # nothing changed: same tree, nothing read
    assert str(e.repo[s["commit"]].peel(pygit2.Commit).tree_id) == str(after.tree_id)
    u = e.undo(apply=True)
    assert u["applied"] and git_tree(ws, e.store.path) == str(e.repo[u["commit"]].peel(pygit2.Commit).tree_id)
    fsck(e.store.path)


@pytest.mark.parametrize("how", ["rewritten", "mtime put back", "replaced"])
def test_a_file_written_by_another_process_after_ours_is_read(task, monkeypatch, how):
    """Another process writes `src/p0/f0.py` right after the restore put it in place (before the
    snapshot after): what is recorded is the file's real content, never the id the restore wrote."""
    ws, e = task
    real_write = wsfs.Writer.write
    theirs = b"w = 0\n"  # the restored content's size: only the stat data can tell

    def write_then_theirs(self, rel, data, mode, expect_id=None, create=False):
        st = real_write(self, rel, data, mode, expect_id=expect_id, create=create)
        if rel == "src/p0/f0.py":
            assert len(data) == len(theirs) and st is not None
            p = ws / rel
            if how == "replaced":
                (ws / "src/p0/.other").write_bytes(theirs)
                os.replace(ws / "src/p0/.other", p)
            else:
                with open(p, "r+b") as f:
                    f.write(theirs)
                if how == "mtime put back":  # only the ctime moves
                    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))
                    assert os.lstat(p).st_mtime_ns == st.st_mtime_ns
        return st

    monkeypatch.setattr(wsfs.Writer, "write", write_then_theirs)
    seen = _reads_after_writes(monkeypatch)
    r = e.restore(1, apply=True)
    monkeypatch.undo()
    assert r["applied"], r
    assert (ws / "src/p0/f0.py").read_bytes() == theirs
    assert str(ws / "src/p0/f0.py") in seen
    tree = e.repo[r["commit"]].peel(pygit2.Commit).tree
    assert tree["src/p0/f0.py"].id == pygit2.hash(theirs)
    assert str(tree.id) == git_tree(ws, e.store.path)
    # and the next save agrees (nothing hidden behind the stat cache)
    s = e.save("after")
    assert str(e.repo[s["commit"]].peel(pygit2.Commit).tree_id) == git_tree(ws, e.store.path)
    fsck(e.store.path)


def test_import_into_an_empty_workspace_reads_nothing_back(task, tmp_path, monkeypatch):
    ws, e = task
    e.save("two")
    out = tmp_path / "out"
    out.mkdir()
    e.export(str(out))
    from tc_git.engine import Engine

    other = tmp_path / "other"
    other.mkdir()
    seen = _reads_after_writes(monkeypatch)
    imp = Engine(other).import_(str(out), apply=True)
    monkeypatch.undo()
    assert imp["restore"]["applied"], imp["restore"]
    if _fine_clock(other):
        assert seen == [], seen[:5]
    e2 = Engine(other)
    head = e2.repo[imp["restore"]["commit"]].peel(pygit2.Commit)
    assert str(head.tree_id) == git_tree(other, e2.store.path) == git_tree(ws, e.store.path)
    # the imported blobs were not stored again: every object is in the bundle's pack or a tree
    blobs = [ln for ln in git(e2.store.path, "cat-file", "--batch-all-objects", "--batch-check").decode().splitlines()
             if " blob " in ln]
    assert len(blobs) == len(set(blobs))
    s = e2.save("no change")
    assert str(e2.repo[s["commit"]].peel(pygit2.Commit).tree_id) == str(head.tree_id)
    fsck(e2.store.path)


def test_nothing_is_trusted_without_a_clock_tick_between_write_and_rename():
    oid = pygit2.hash(b"x\n")
    w = snapshot.Written([("a", oid, 0o100644)])
    placed = SimpleNamespace(st_ino=7, st_size=2, st_mtime_ns=1000, st_ctime_ns=2000, st_mode=0o100644)
    w.add(0, placed)
    assert w.lookup("a", placed) == (oid, 0o100644)
    assert w.lookup("b", placed) is None
    for change in ({"st_ctime_ns": 3000}, {"st_mtime_ns": 1500}, {"st_ino": 8}, {"st_size": 3},
                   {"st_mode": 0o100755}, {"st_mode": 0o120777}):
        assert w.lookup("a", SimpleNamespace(**{**vars(placed), **change})) is None, change
    coarse = snapshot.Written([("a", oid, 0o100644)])
    tick = SimpleNamespace(**{**vars(placed), "st_ctime_ns": 1000})
    coarse.add(0, tick)
    assert coarse.lookup("a", tick) is None
