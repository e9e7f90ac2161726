"""The incremental save path (issue 14): what makes a save cost what changed must never change
what it records.

- `patch_tree` (a snapshot builds its tree from the previous one, rewriting only the
  directories on the changed paths) gives exactly the tree libgit2's `write_tree` gives for the
  same index, under random adds, replaces, mode changes and removes; it declines (None) the
  kind changes it leaves to write_tree. The note's `changed` list from the same edits
  (`tree_deltas(patched=snap)`) equals the walk, whose own test has libgit2 as the judge.
- The store keeps its repository handle (and index) open across locked calls: a snapshot that
  fails half-way leaves nothing of itself in the next one, and packs replaced by another
  writer (a repack) are seen.
- A no-change save does not rewrite the index (load-independent evidence of the saved work).
Stock git judges the trees (`git add -A && git write-tree` on a throwaway index) and fsck.
"""
from __future__ import annotations

import os
import random
import time

import pygit2
import pytest
from conftest import fsck, git_tree, saved_task, write
from pygit2.enums import FileMode

from tc_git.storage import _native, savepack, trees
from tc_git.workspace import snapshot
from tc_git.workspace.journal import index_marker

DIRS = ["", "a", "a/b", "a/b/c", "d", "d/e", "a-b", "é"]
NAMES = ["f", "g.txt", "h", "a.txt", "z"]


def _add(repo, idx, rel, data, mode):
    oid = repo.create_blob(data)
    idx.add(pygit2.IndexEntry(rel, oid, mode))
    return oid


def test_patch_tree_equals_write_tree(tmp_path):
    repo = pygit2.init_repository(str(tmp_path / "r"), bare=True)
    rng = random.Random(14)
    patched = declined = with_entries = 0
    for _round in range(60):
        idx = pygit2.Index()
        for _ in range(rng.randint(0, 25)):
            rel = "/".join(x for x in (rng.choice(DIRS), rng.choice(NAMES)) if x)
            try:
                _add(repo, idx, rel, rng.choice([b"1", b"2", b"3"]), rng.choice([FileMode.BLOB, FileMode.BLOB_EXECUTABLE]))
            except (pygit2.GitError, ValueError):
                pass
        base = idx.write_tree(repo)
        edits: dict = {}
        for _ in range(rng.randint(0, 8)):
            paths = [e.path for e in idx]
            if paths and rng.random() < 0.4:
                rel = rng.choice(paths)
                idx.remove(rel)
                edits[rel] = None
                continue
            if paths and rng.random() < 0.5:
                rel = rng.choice(paths)  # replace: new content or mode
            else:
                rel = "/".join(x for x in (rng.choice(DIRS + ["n", "n/m"]), rng.choice(NAMES)) if x)
            mode = rng.choice([FileMode.BLOB, FileMode.BLOB_EXECUTABLE, FileMode.LINK])
            before = {e.path for e in idx}
            oid = _add(repo, idx, rel, rng.choice([b"1", b"4", b"5"]), mode)
            edits[rel] = (oid, mode)
            for gone in before - {e.path for e in idx}:  # libgit2 dropped a file/directory clash
                edits.setdefault(gone, None)
        want = idx.write_tree(repo)
        got = trees.patch_tree(repo, base, edits)
        # the same trees serialised by hand into a save's pack (savepack.py), byte for byte
        pack = savepack.SavePack(repo, loose_max=0)
        olds: dict = {}
        try:
            raw = trees.patch_tree(repo, base, edits, objects=pack, olds=olds)
            assert (raw is None) == (got is None), edits
            pack.finish()
        finally:
            pack.close()
        if got is None:
            declined += 1
            continue
        patched += 1
        assert got == want == raw, (edits, str(base))
        # the save's `changed` list from the records patch_tree read on its way: as the walk says
        want_changes = trees.tree_deltas(repo, repo[base], repo[got])
        if not olds.get(trees.INEXACT):
            exact = snapshot.Snapshot(got, base=base, edits=edits, base_entries=olds)
            assert trees.tree_deltas(repo, repo[base], repo[got], patched=exact) == want_changes, edits
            with_entries += 1
    assert patched >= 30, (patched, declined)  # the ordinary case is patched, not declined
    assert with_entries >= 30, with_entries
    fsck(tmp_path / "r")  # the hand-serialised trees in their packs: stock git reads them all


def test_patch_tree_declines_kind_changes(tmp_path):
    repo = pygit2.init_repository(str(tmp_path / "r"), bare=True)
    idx = pygit2.Index()
    blob = _add(repo, idx, "a/f", b"x", FileMode.BLOB)
    _add(repo, idx, "b", b"y", FileMode.BLOB)
    base = idx.write_tree(repo)
    assert trees.patch_tree(repo, base, {}) == base
    assert trees.patch_tree(repo, base, {"a": (blob, FileMode.BLOB)}) is None  # a file where a directory is
    assert trees.patch_tree(repo, base, {"b/c": (blob, FileMode.BLOB)}) is None  # under a file
    assert trees.patch_tree(repo, base, {"b": None, "b/c": (blob, FileMode.BLOB)}) is None
    # the last file of a directory goes: so does the directory (as write_tree leaves it out)
    emptied = trees.patch_tree(repo, base, {"a/f": None})
    assert emptied is not None and [e.name for e in repo[emptied]] == ["b"]
    everything = trees.patch_tree(repo, base, {"a/f": None, "b": None})
    assert everything is not None and len(repo[everything]) == 0


@pytest.fixture
def task(tmp_path, monkeypatch):
    monkeypatch.setenv("TC_GIT", "off")
    ws = tmp_path / "ws"
    e = saved_task(ws, {f"src/p{i % 3}/f{i}.py": f"v = {i}\n".encode() for i in range(30)}, "save path", "first")
    return ws, e


def test_refresh_of_paths_uses_the_previous_tree_and_is_right(task, monkeypatch):
    ws, e = task
    calls = []
    real = snapshot.patch_tree
    monkeypatch.setattr(snapshot, "patch_tree", lambda *a, **kw: calls.append(a[2]) or real(*a, **kw))
    write(ws, "src/p1/f1.py", b"changed\n")
    write(ws, "src/new/n.py", b"new\n")
    (ws / "src/p2/f2.py").unlink()
    r = e.capture(paths=["src/p1/f1.py", "src/new", "src/p2/f2.py"])
    assert r["captured"], r
    assert calls and set(calls[-1]) == {"src/p1/f1.py", "src/new/n.py", "src/p2/f2.py"}, calls
    assert r["files"]["files"] == [{"path": "src/new/n.py", "status": "A"}, {"path": "src/p1/f1.py", "status": "M"},
                                   {"path": "src/p2/f2.py", "status": "D"}], r["files"]
    assert str(e.repo[r["commit"]].tree_id) == git_tree(ws, e.store.path)
    fsck(e.store.path)


def test_failed_snapshot_leaves_nothing_in_the_kept_index(task, monkeypatch):
    ws, e = task
    time.sleep(snapshot.RACY_NS / 1e9 + 0.2)  # no smudged entry: the failing save's diff writes no index
    e.save("stat data refreshed")
    write(ws, "src/p0/f0.py", b"one\n")
    write(ws, "src/p0/f3.py", b"two\n")
    real = e.policy.classify_content
    seen = []

    def boom(rel, data):
        seen.append(rel)
        if len(seen) == 2:
            raise OSError("disk on fire")
        return real(rel, data)

    monkeypatch.setattr(e.policy, "classify_content", boom)
    with pytest.raises(OSError):
        e.save("fails half-way")
    monkeypatch.setattr(e.policy, "classify_content", real)
    assert seen[0] == "src/p0/f0.py"  # stored in the in-memory index before the failure
    # a refresh of another path builds its tree from the last snapshot's: the same handle must
    # not carry f0's entry from the failed run into an index whose tree lacks it (f0 would
    # then never be a candidate again while the journal's trees miss it)
    r = e.capture(paths=["src/p0/f3.py"])
    on_disk = pygit2.Index(str(e.store.path / "index")).write_tree(e.repo)
    assert e.repo[r["commit"]].tree_id == on_disk
    r = e.save("everything")
    assert str(e.repo[r["commit"]].tree_id) == git_tree(ws, e.store.path)
    fsck(e.store.path)


def test_kept_handle_sees_a_repack_by_another_writer(task, monkeypatch):
    ws, e = task
    from tc_git.engine import Engine

    for k in range(3):
        write(ws, f"src/p0/k{k}.py", f"k{k}\n".encode())
        e.save(f"step {k}")
    other = Engine(ws)  # another handle on the same store, as another process has
    other.compress(keep_seconds=0, minimum=1, maximum=2)  # repacks: loose objects and old packs go
    write(ws, "src/p1/after.py", b"after\n")
    r = e.save("after the repack")
    assert str(e.repo[r["commit"]].tree_id) == git_tree(ws, e.store.path)
    back = e.restore(index=1, apply=True)
    assert back["applied"], back
    assert not (ws / "src/p1/after.py").exists()
    fsck(e.store.path)


def test_no_change_save_does_not_rewrite_the_index(task):
    ws, e = task
    store = e.store.path
    # entries written less than snapshot.RACY_NS ago are stored smudged, and the next diff
    # re-hashes them and refreshes their stat data (libgit2 writes the index then): wait that out
    time.sleep(snapshot.RACY_NS / 1e9 + 0.2)
    e.save("stat data refreshed")
    before = index_marker(store)
    for k in range(2):
        r = e.save(f"nothing changed {k}")
        assert r["changed"] == 0
        assert index_marker(store) == before  # 50k entries written back cost 30-45 ms
    write(ws, "src/p0/f0.py", b"now something\n")
    r = e.save("one file")
    assert r["changed"] == 1 and index_marker(store) != before
    assert str(e.repo[r["commit"]].tree_id) == git_tree(ws, store)


def test_named_path_as_stored_is_not_read_again(task, monkeypatch):
    """The journal names every file a restore (or an editor saving the same bytes) wrote; a
    named file whose stat data matches its entry is not read, scanned and hashed again.
    Without the cffi index access (TC_NATIVE=off) the entries' stat data cannot be seen
    (pygit2's IndexEntry has none), so every named file is read again: slower, never wrong,
    and still nothing but the named files."""
    ws, e = task
    stat_data = _native.has(_native.INDEX_STAT)
    time.sleep(snapshot.RACY_NS / 1e9 + 0.2)  # entries stored with their real stat data
    e.save("stat data refreshed")
    named = {"src/p0/f0.py"} | {f"src/p1/f{i}.py" for i in range(1, 30, 3)}
    reads: list[str] = []
    real = snapshot._read_once
    monkeypatch.setattr(snapshot, "_read_once", lambda full, st: reads.append(full) or real(full, st))
    r = e.capture(paths=["src/p0/f0.py", "src/p1"])
    assert not r["captured"]
    assert reads == [] if stat_data else sorted(os.path.relpath(p, ws) for p in reads) == sorted(named), reads
    reads.clear()
    write(ws, "src/p1/f1.py", b"edited\n")
    r = e.capture(paths=["src/p0/f0.py", "src/p1"])
    assert r["captured"]
    got = sorted(os.path.relpath(p, ws) for p in reads)
    assert got == (["src/p1/f1.py"] if stat_data else sorted(named)), reads
    assert str(e.repo[r["commit"]].tree_id) == git_tree(ws, e.store.path)
