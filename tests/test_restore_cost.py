"""What a restore costs beyond its own writes (issue 14), judged by what it leaves on disk, not
by timings (the machine may be loaded):

- the snapshot after the writes does not write again the blobs it just restored (they are
  the target's: create_blob only freshened them, ~0.2-0.6 ms a file);
- stock git agrees with every tree and `git fsck` with the store."""
from __future__ import annotations

import os

import pygit2
from conftest import fsck, git_tree, write

OLD = 946684800  # 2000-01-01: a loose object touched by the restore gets a newer mtime


def _loose(store, oid) -> str:
    h = str(oid)
    return os.path.join(store, "objects", h[:2], h[2:])


def test_restore_does_not_rewrite_the_blobs_it_restored(tmp_path, monkeypatch):
    monkeypatch.setenv("TC_GIT", "off")
    from tc_git.engine import Engine

    ws = tmp_path / "ws"
    for i in range(60):
        write(ws, f"src/p{i % 6}/f{i}.py", f"v = {i}\n".encode())
    e = Engine(ws)
    e.init("cost")
    e.save("one")  # the first snapshot: a pack
    for i in range(0, 60, 3):
        write(ws, f"src/p{i % 6}/f{i}.py", f"edited = {i}\n".encode())
    e.save("two")  # 20 loose blobs
    repo = pygit2.Repository(str(e.store.path))
    two = repo.revparse_single(e.restore(index=2)["target_commit"]).peel(pygit2.Commit).tree
    blobs = [two[f"src/p{i % 6}/f{i}.py"].id for i in range(0, 60, 3)]
    assert all(os.path.exists(_loose(e.store.path, b)) for b in blobs)

    r = e.restore(index=1, apply=True)
    assert r["applied"] and r["plan"]["counts"]["to_replace"] == 20
    for b in blobs:
        os.utime(_loose(e.store.path, b), (OLD, OLD))
    r = e.restore(index=2, apply=True)
    assert r["applied"] and r["plan"]["counts"]["to_replace"] == 20
    # the 20 files now on disk are those blobs, read back and indexed, but never written again
    assert [os.stat(_loose(e.store.path, b)).st_mtime for b in blobs] == [OLD] * 20
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
