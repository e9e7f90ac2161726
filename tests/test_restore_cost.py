"""What a restore costs beyond its own writes (issue 14), judged by what it leaves on disk, not
by timings (the machine may be loaded):

- the snapshot after the writes does not write again the blobs it just restored (they are
  the target's: create_blob only freshened them, ~0.2-0.6 ms a file), nor the trees: a plan
  applied in full leaves the target's tree, unless a file does not read back as written;
- stock git agrees with every tree and `git fsck` with the store."""
from __future__ import annotations

import os
import subprocess

import pygit2
from conftest import fsck, git_tree, saved_task, write

OLD = 946684800  # 2000-01-01: a loose object touched by the restore gets a newer mtime


def _loose(store, oid) -> str:
    h = str(oid)
    return os.path.join(store, "objects", h[:2], h[2:])


def _pack_indexes(store) -> set[str]:
    d = os.path.join(store, "objects", "pack")
    return {os.path.join(d, f) for f in os.listdir(d) if f.endswith(".idx")}


def _ids_in(idx_path) -> set[str]:
    with open(idx_path, "rb") as f:
        return set(subprocess.run(["git", "show-index"], stdin=f, capture_output=True, text=True,
                                  check=True).stdout.split()[1::3])


def test_restore_does_not_rewrite_the_blobs_it_restored(tmp_path, monkeypatch):
    monkeypatch.setenv("TC_GIT", "off")
    ws = tmp_path / "ws"
    e = saved_task(ws, {f"src/p{i % 6}/f{i}.py": f"v = {i}\n".encode() for i in range(60)}, "cost")  # a pack
    for i in range(0, 60, 3):
        write(ws, f"src/p{i % 6}/f{i}.py", f"edited = {i}\n".encode())
    e.save("two")  # 20 blobs and the trees on their paths: one small pack (savepack.py; loose with the savepack setting off)
    repo = pygit2.Repository(str(e.store.path))
    two = repo.revparse_single(e.restore(index=2)["target_commit"]).peel(pygit2.Commit).tree
    blobs = [two[f"src/p{i % 6}/f{i}.py"].id for i in range(0, 60, 3)]
    # (its root tree is freshened by libgit2's commit creation itself)
    trees = [two["src"].id, two["src/p0"].id, two["src/p3"].id]  # the ones step 2 wrote (edits: p0, p3)
    assert all(b in repo.odb for b in blobs + trees)

    r = e.restore(index=1, apply=True)
    assert r["applied"] and r["plan"]["counts"]["to_replace"] == 20
    loose = [b for b in blobs + trees if os.path.exists(_loose(e.store.path, b))]
    for b in loose:
        os.utime(_loose(e.store.path, b), (OLD, OLD))
    packs = _pack_indexes(e.store.path)
    r = e.restore(index=2, apply=True)
    assert r["applied"] and r["plan"]["counts"]["to_replace"] == 20
    # the 20 files now on disk are those blobs, read back and indexed, but never written again:
    # no loose one touched, none in a pack written since
    touched = [str(b) for b in loose if os.stat(_loose(e.store.path, b)).st_mtime != OLD]
    assert touched == [], (touched, [str(t) for t in trees])
    for idx in _pack_indexes(e.store.path) - packs:
        assert not _ids_in(idx) & {str(b) for b in blobs + trees}, idx
    head = repo.revparse_single(r["commit"]).peel(pygit2.Commit)
    assert str(head.tree.id) == str(two.id) == git_tree(ws, e.store.path)
    # a file changed back to content the store holds is still indexed and saved as that content
    write(ws, "src/p0/f0.py", b"edited = 0\n")  # what step 2 holds already... unchanged
    write(ws, "src/p1/f1.py", b"edited = 0\n")  # ... and the same content under another name
    s = e.save("three")
    tree = repo.revparse_single(s["commit"]).peel(pygit2.Commit).tree
    assert tree["src/p1/f1.py"].id == two["src/p0/f0.py"].id
    assert str(tree.id) == git_tree(ws, e.store.path)
    fsck(e.store.path)


def test_a_file_rewritten_after_its_restore_is_snapshotted_as_it_is(tmp_path, monkeypatch):
    """Another process rewrites a restored file between the restore's writes and its snapshot
    (the fence is the last step before it): the restore commit's tree is then not the target's
    but what is on disk, as stock git reads it."""
    monkeypatch.setenv("TC_GIT", "off")
    from tc_git.timeline import restore

    ws = tmp_path / "ws"
    e = saved_task(ws, {f"d{i % 3}/f{i}.txt": f"v1 {i}\n".encode() for i in range(12)}, "race")
    for i in range(0, 12, 2):
        write(ws, f"d{i % 3}/f{i}.txt", f"v2 {i}\n".encode())
    e.save("two")
    real = restore.fs_fence

    def rewrite_then_fence(store):
        write(ws, "d0/f0.txt", b"rewritten by a formatter\n")
        return real(store)

    monkeypatch.setattr(restore, "fs_fence", rewrite_then_fence)
    r = e.restore(index=1, apply=True)
    repo = pygit2.Repository(str(e.store.path))
    tree = repo.revparse_single(r["commit"]).peel(pygit2.Commit).tree
    one = repo.revparse_single(r["target_commit"]).peel(pygit2.Commit).tree
    assert tree.id != one.id and repo[tree["d0/f0.txt"].id].data == b"rewritten by a formatter\n"
    assert str(tree.id) == git_tree(ws, e.store.path)
    monkeypatch.setattr(restore, "fs_fence", real)
    assert str(repo.revparse_single(e.save("after")["commit"]).peel(pygit2.Commit).tree.id) == str(tree.id)
    fsck(e.store.path)


def test_a_plan_entry_naming_a_tree_fails_that_path_only(tmp_path, monkeypatch):
    """apply_plan reads each blob straight from the object database: an id that names another
    kind of object (a tampered tree) fails that path, with the reason; the rest is written."""
    monkeypatch.setenv("TC_GIT", "off")
    from tc_git.timeline import restore
    ws = tmp_path / "ws"
    e = saved_task(ws, {"a.txt": b"a\n", "d/b.txt": b"b\n"}, "kinds")
    repo = pygit2.Repository(str(e.store.path), pygit2.enums.RepositoryOpenFlag.NO_SEARCH)
    repo.workdir = str(ws)
    tree = repo.revparse_single(e.restore(index=1)["target_commit"]).peel(pygit2.Commit).tree
    plan = restore.Plan(to_replace=[("a.txt", tree["d"].id, 0o100644), ("d/b.txt", repo.create_blob(b"new\n"), 0o100644)])
    failed = restore.apply_plan(repo, plan)
    assert failed == [{"path": "a.txt", "reason": f"write failed: {str(tree['d'].id)[:12]} is not a blob"}]
    assert (ws / "a.txt").read_bytes() == b"a\n" and (ws / "d/b.txt").read_bytes() == b"new\n"
