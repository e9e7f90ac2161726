"""A save's new objects go into one small pack (savepack.py), and the packs stay few.

- A 100-file save writes its blobs and trees as one pack: a handful of loose objects (the commit
  and its note) instead of ~180, and every tree is stock git's.
- Past PACKS_AUTO small packs they are rolled up into one (repack.py); a process killed at any point of that
  (SIGKILL-like `os._exit` at every rename and unlink in turn) leaves a store `git fsck --full`
  accepts with every object still there.
- The kept store handle is not reopened for a pack this process added (only for packs removed).
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pygit2
import pytest
from conftest import fsck, git_tree, saved_task, write

from tc_git.storage import handles, repack, savepack


def _loose(store) -> int:
    objects = os.path.join(store, "objects")
    return sum(len(os.listdir(os.path.join(objects, d))) for d in os.listdir(objects) if len(d) == 2)


def _packs(store) -> list[str]:
    return sorted(f for f in os.listdir(os.path.join(store, "objects", "pack")) if f.endswith(".pack"))


@pytest.fixture
def task(tmp_path, monkeypatch):
    monkeypatch.setenv("TC_GIT", "off")
    ws = tmp_path / "ws"
    e = saved_task(ws, {f"src/p{i % 20}/f{i}.py": f"v = {i}\n".encode() for i in range(200)}, "save pack", "first")
    return ws, e


def test_a_many_file_save_is_one_pack_and_packs_stay_few(task, monkeypatch):
    ws, e = task
    monkeypatch.setattr(repack, "PACKS_AUTO", 3)
    store = str(e.store.path)
    trees = []
    for n in range(7):
        for i in range(0, 200, 4):  # 50 files in 20 directories
            write(ws, f"src/p{i % 20}/f{i}.py", f"v = {i} # {n}\n".encode())
        loose, packs = _loose(store), len(_packs(store))
        r = e.save(f"fifty {n}")
        assert r["changed"] == 50, r
        # the commit, its note, the notes tree and commit: loose; the 50 blobs and ~21 trees: packed
        assert _loose(store) - loose <= 6, (_loose(store) - loose)
        assert len(_packs(store)) <= max(packs + 2, 2 * repack.PACKS_AUTO + 2), _packs(store)
        commit = e.repo[r["commit"]]
        assert str(commit.tree_id) == git_tree(ws, store)
        trees.append(str(commit.tree_id))
    assert len(_packs(store)) <= 2 * repack.PACKS_AUTO + 2  # the first snapshot's, the rolled-up ones, the rest
    fsck(store)
    # every tree saved is still readable after the merges, by a new handle as by stock git
    fresh = pygit2.Repository(store)
    for t in trees:
        assert len(fresh[t]) == 1
        subprocess.run(["git", f"--git-dir={store}", "ls-tree", "-r", t], check=True, capture_output=True)


def test_few_objects_stay_loose(task):
    ws, e = task
    store = str(e.store.path)
    packs = _packs(store)
    write(ws, "src/p1/f1.py", b"changed\n")  # one blob, three trees
    e.save("one")
    assert _packs(store) == packs


CRASH = textwrap.dedent("""
    import os, sys
    import pygit2
    from tc_git.storage import repack
    n = int(sys.argv[2])
    calls = [0]
    def dying(real):
        def f(*a, **k):
            calls[0] += 1
            if calls[0] == n:
                os._exit(9)  # as a SIGKILL: no finally, no cleanup
            return real(*a, **k)
        return f
    os.replace, os.unlink = dying(os.replace), dying(os.unlink)
    repack.roll_up(pygit2.Repository(sys.argv[1]), packs_auto=2)
    sys.exit(0)
""")


def _store_with_small_packs(path, count: int) -> list[str]:
    """A bare store with `count` save packs, each commit's tree and blobs in its own pack and a
    ref on each commit (so `git fsck` reports anything missing)."""
    repo = pygit2.init_repository(str(path), bare=True)
    sig = pygit2.Signature("t", "t@example.com", 0, 0)
    ids = []
    for k in range(count):
        pack = savepack.SavePack(repo, loose_max=0)
        blobs = [pack.add_blob(f"pack {k} file {i}\n".encode() * (i + 1)) for i in range(5)]
        ids += [str(b) for b in blobs]
        tree = pack.add_tree(b"".join(b"100644 f%d\0" % i + b.raw for i, b in enumerate(blobs)))
        pack.finish()
        c = repo.create_commit(f"refs/heads/b{k}", sig, sig, f"c{k}", tree, [])
        ids += [str(tree), str(c)]
    return ids


def test_consolidation_killed_anywhere_leaves_a_valid_store(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    done = False
    n = 0
    while not done:
        n += 1
        assert n < 40
        store = tmp_path / f"s{n}"
        ids = _store_with_small_packs(store, 4)
        before = _packs(store)
        r = subprocess.run([sys.executable, "-c", CRASH, str(store), str(n)], env=env, capture_output=True)
        assert r.returncode in (0, 9), r.stderr.decode()
        done = r.returncode == 0
        fsck(store)
        batch = subprocess.run(["git", f"--git-dir={store}", "cat-file", "--batch-check"], input="\n".join(ids) + "\n",
                               capture_output=True, text=True, check=True, env=env).stdout
        assert "missing" not in batch, (n, batch)
        if done:
            assert len(_packs(store)) == 1 and _packs(store) != before
            # a later run over what a killed one left (a .pack without its .idx) is still fine
    assert n >= 4  # two renames and at least two unlinks were each a crash point


def test_roll_up_over_a_git_delta_pack(tmp_path):
    store = tmp_path / "s"
    ids = _store_with_small_packs(store, 3)
    subprocess.run(["git", f"--git-dir={store}", "repack", "-q", "-d"], check=True)  # a git pack (with .bitmap/deltas?)
    mine = _packs(store)
    assert repack.roll_up(pygit2.Repository(str(store)), packs_auto=1) >= 1
    fsck(store)
    batch = subprocess.run(["git", f"--git-dir={store}", "cat-file", "--batch-check"], input="\n".join(ids) + "\n",
                           capture_output=True, text=True, check=True).stdout
    assert "missing" not in batch
    assert len(_packs(store)) <= len(mine)


def test_own_pack_keeps_the_handle(task, monkeypatch):
    ws, e = task
    from tc_git.engine import Engine
    from tc_git.storage import store as store_mod

    reopened = []

    store_path = os.path.realpath(e.store.path)

    class Counted(pygit2.Repository):  # every handle opened on the store (a reopen, or a kept one dropped),
        def __init__(self, *a, **kw):  # not the look for a user repository around the workspace
            if a and os.path.realpath(str(a[0])) == store_path:
                reopened.append(1)
            super().__init__(*a, **kw)

    monkeypatch.setattr(store_mod.pygit2, "Repository", Counted)
    monkeypatch.setattr(repack, "LOOSE_AUTO", 1 << 30)  # (no upkeep in between: one pack a save)
    monkeypatch.setattr(repack, "PACKS_AUTO", 1 << 30)
    handles.enable()
    try:
        Engine(ws).save("warm")  # the handle is kept from here on
        reopened.clear()
        for n in range(3):
            for i in range(0, 200, 10):
                write(ws, f"src/p{i % 20}/f{i}.py", f"v = {i} # again {n}\n".encode())
            packs = _packs(e.store.path)
            Engine(ws).save(f"twenty {n}")
            assert len(_packs(e.store.path)) == len(packs) + 1  # (a pack was added)
        assert not reopened  # a pack added by this process is no reason to reopen (and re-read the index)
        repack.roll_up(e.repo, packs_auto=1)  # packs removed: the next call reopens
        Engine(ws).save("after a merge")
        assert reopened
    finally:
        handles.flush_all()
        handles.enable(False)
    fsck(e.store.path)
