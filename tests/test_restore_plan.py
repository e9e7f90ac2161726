"""trees.tree_deltas(patched=snap) builds a restore's plan (and a save's `changed` list, the
other way round) from the snapshot's own edits (the trees it has just built are not read again);
it must list exactly what the walk tree_deltas(pre, target) lists (paths,
order, statuses, modes, ids) for random bases, edits (modified, deleted, added in new
directories, mode and link changes, edits back to the base's content) and targets (the base
itself: the common undo of unsaved work; the base with other edits; unrelated trees with files
that became directories), and fall back to that walk when the snapshot's tree is not exactly its
base with its edits (a record whose mode was canonicalised)."""
from __future__ import annotations

import random

import pygit2
from conftest import random_tree
from pygit2.enums import FileMode

from tc_git.storage import savepack, trees
from tc_git.storage.trees import INEXACT, patch_tree, tree_deltas
from tc_git.workspace.snapshot import Snapshot

NAMES = ["a", "a-b", "a.txt", "b", "x", "é", "z"]
MODES = [FileMode.BLOB, FileMode.BLOB, FileMode.BLOB_EXECUTABLE, FileMode.LINK]


def _tree(repo, rng):
    return random_tree(repo, rng, MODES, NAMES, least=1, sub_p=0.4)


def _files(repo, tree, prefix=""):
    out = {}
    for e in repo[tree]:
        if e.filemode == FileMode.TREE:
            out.update(_files(repo, e.id, prefix + e.name + "/"))
        else:
            out[prefix + e.name] = (e.id, int(e.filemode))
    return out


def _edits(repo, rng, base):
    """Edits a snapshot could make of `base`: files only, never a file where a directory is."""
    files = _files(repo, base)
    dirs = {p.rsplit("/", 1)[0] for p in files if "/" in p}
    edits = {}
    for p in rng.sample(sorted(files), min(len(files), rng.randint(0, 6))):
        r = rng.random()
        if r < 0.3:
            edits[p] = None
        elif r < 0.4:
            edits[p] = files[p]  # stored again as it was
        else:
            edits[p] = (repo.create_blob(rng.choice([b"1", b"2", b"4", b"5"])), int(rng.choice(MODES)))
    for _ in range(rng.randint(0, 3)):  # new files in existing or new directories
        d = rng.choice(sorted(dirs) + ["", "new", "new/deeper"])
        p = (d + "/" if d else "") + rng.choice(["n1", "n2", "a-c", "zz"])
        if p in files or any(f.startswith(p + "/") for f in files) or any(p.startswith(f + "/") for f in files):
            continue
        edits[p] = (repo.create_blob(rng.choice([b"1", b"6"])), int(rng.choice(MODES)))
    return edits


def _pre(repo, base, edits):
    olds: dict = {}
    pack = savepack.SavePack(repo)
    tree = patch_tree(repo, base, edits, objects=pack, olds=olds)
    pack.finish()
    return tree, olds


def _view(deltas):
    return [(d.path, d.status, d.old_id, d.old_mode, d.new_id, d.new_mode) for d in deltas]


def test_deltas_from_edits_equal_the_walk(tmp_path):
    repo = pygit2.init_repository(str(tmp_path / "r.git"), bare=True)
    composed = checked = fast = 0
    for seed in range(250):
        rng = random.Random(seed)
        base = _tree(repo, rng)
        edits = _edits(repo, rng, base)
        tree, olds = _pre(repo, base, edits)
        if tree is None:
            continue
        assert tree == patch_tree(repo, base, edits)  # the hand-serialised trees are TreeBuilder's
        snap = Snapshot(tree, base=base, edits=edits, base_entries=olds)
        for target in (base, patch_tree(repo, base, _edits(repo, rng, base)) or base, _tree(repo, rng)):
            pre_t, target_t = repo[tree].peel(pygit2.Tree), repo[target].peel(pygit2.Tree)
            for typechange in (True, False):
                want = _view(tree_deltas(repo, pre_t, target_t, typechange=typechange))
                got = tree_deltas(repo, pre_t, target_t, typechange=typechange, patched=snap)
                assert _view(got) == want, (seed, edits)
                back = tree_deltas(repo, target_t, pre_t, typechange=typechange)  # the patched tree as `new`
                assert _view(tree_deltas(repo, target_t, pre_t, typechange=typechange, patched=snap)) == _view(back)
                composed += 1
                checked += bool(want)
                fast += trees._from_edits(repo, pre_t.id, target_t.id, typechange, snap) is not None
    assert composed > 1000 and checked > 800 and fast > 800  # not vacuous; mostly from the edits


def test_deltas_walk_when_not_exact(tmp_path):
    """A base record with a mode libgit2 writes otherwise (a hand-made `100664`) is rewritten
    canonically by patch_tree: the tree is not exactly base + edits, and the plan is the walk's
    (which sees that record change)."""
    repo = pygit2.init_repository(str(tmp_path / "r.git"), bare=True)
    blob = repo.create_blob(b"x")
    raw = b"100664 odd\0" + blob.raw + b"100644 plain\0" + blob.raw
    base = repo.odb.write(pygit2.enums.ObjectType.TREE, raw)
    edits = {"plain": (repo.create_blob(b"y"), int(FileMode.BLOB))}
    tree, olds = _pre(repo, base, edits)
    assert olds.get(INEXACT)
    pre_t, base_t = repo[tree].peel(pygit2.Tree), repo[base].peel(pygit2.Tree)
    want = _view(tree_deltas(repo, pre_t, base_t, typechange=True))
    assert [w[0] for w in want] == ["odd", "plain"]  # the canonicalised record shows in the walk
    # what the snapshot records then (snapshot._Run.finish): no base_entries, so the walk is used
    assert _view(tree_deltas(repo, pre_t, base_t, True, patched=Snapshot(tree, base=base, edits=edits))) == want
