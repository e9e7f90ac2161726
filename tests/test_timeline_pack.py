"""Timeline.append writes a commit and its note (blob, notes tree, notes commit) itself, loose or
(packed=True) as one small pack instead of libgit2's four loose objects, into a notes tree fanned
out as git's (2/38). Whatever the notes tree holds (nothing yet, flat notes, a note being
replaced, fan-out directories, both, names that are not hex, a blob named like a fan-out
directory), stock git lists the same notes as after libgit2's git_note_create, and where libgit2
descends into a fan-out directory the objects are byte for byte libgit2's. Stock git fsck
--strict the judge, and git log shows the note."""
from __future__ import annotations

import subprocess

import pygit2
import pytest
from pygit2.enums import FileMode, ObjectType

from tc_git.base.refs import NOTES_REF
from tc_git.timeline.chain import NOTES_MESSAGE, Timeline, packed_commit, signature

WHEN = 1_700_000_000


def _commit(repo, parent=None, n=0):
    tree = repo.TreeBuilder().write() if n == 0 else repo.odb.write(
        ObjectType.TREE, b"100644 f\0" + repo.create_blob(b"%d" % n).raw)
    sig = signature(WHEN)
    return tree, repo.create_commit(None, sig, sig, f"step {n}\n\nTc-Kind: step\n", tree, [parent] if parent else [])


def _notes_state(repo, kind: str, target: str):
    """Put the notes ref in a given shape (the same objects in any repository)."""
    if kind == "none":
        return
    blob = repo.create_blob(b"old note\n")
    other = repo.create_blob(b"other\n")
    if kind == "flat":
        tb = repo.TreeBuilder()
        tb.insert("0" * 40, other, FileMode.BLOB)
        tb.insert("f" * 40, other, FileMode.BLOB)
        tb.insert("README", other, FileMode.BLOB)  # not hex: libgit2 looks past it
        tree = tb.write()
    elif kind == "replace":
        tb = repo.TreeBuilder()
        tb.insert(target, blob, FileMode.BLOB)
        tb.insert("f" * 40, other, FileMode.BLOB)
        tree = tb.write()
    elif kind in ("fanout", "fanout-replace", "fanout-other", "mixed"):
        sub = repo.TreeBuilder()
        sub.insert("1" * 38, other, FileMode.BLOB)
        if kind == "fanout-replace":
            sub.insert(target[2:], blob, FileMode.BLOB)
        tb = repo.TreeBuilder()
        prefix = target[:2] if kind != "fanout-other" else ("00" if target[:2] != "00" else "01")
        tb.insert(prefix, sub.write(), FileMode.TREE)
        if kind == "mixed":  # a flat note beside the directories (libgit2's create_note makes them)
            tb.insert("e" * 40, other, FileMode.BLOB)
        tree = tb.write()
    elif kind == "blob-prefix":  # a blob named like the fan-out directory: not descended into
        tb = repo.TreeBuilder()
        tb.insert(target[:2], other, FileMode.BLOB)
        tree = tb.write()
    else:
        raise AssertionError(kind)
    sig = signature(WHEN - 10)
    c = repo.create_commit(None, sig, sig, "notes before\n", tree, [])
    repo.references.create(NOTES_REF, c, force=True)


def _git(path, *args) -> str:
    return subprocess.run(["git", "--git-dir", str(path), *args], check=True, capture_output=True, text=True).stdout


def _top_level(repo) -> list[tuple[str, str]]:
    tree = repo[repo.references[NOTES_REF].target].peel(pygit2.Commit).tree
    return [(e.name, e.type_str) for e in tree]


SAME_AS_LIBGIT2 = ("fanout", "fanout-replace")  # git_note_create descends into the directory too


@pytest.mark.parametrize("kind", ["none", "flat", "replace", "fanout", "fanout-replace", "fanout-other", "mixed",
                                  "blob-prefix"])
def test_packed_commit_notes_as_git_reads_them(tmp_path, kind):
    a = pygit2.init_repository(str(tmp_path / "a.git"), bare=True)
    b = pygit2.init_repository(str(tmp_path / "b.git"), bare=True)
    for r in (a, b):
        base_tree, parent = _commit(r)
    tree, _ = _commit(a, parent, 1)
    _commit(b, parent, 1)  # (the same tree in b)
    msg = "restore r0001: to s0001\n\nTc-Kind: restore\n"
    sig = signature(WHEN)
    want = a.create_commit(None, sig, sig, msg, tree, [parent])
    for r in (a, b):
        _notes_state(r, kind, str(want))
    before = b.references.get(NOTES_REF)
    note = '{\n "kind": "restore"\n}\n'
    a.create_note(note, sig, sig, str(want), NOTES_REF, True)
    got = packed_commit(b, tree, parent, msg, note, WHEN)
    if kind == "blob-prefix":  # not a tree this writes: nothing written, the caller uses libgit2's route
        assert got is None and b.references[NOTES_REF].target == before.target
        return
    assert got == want
    ca, cb = a[a.references[NOTES_REF].target], b[b.references[NOTES_REF].target]
    if kind in SAME_AS_LIBGIT2:
        assert cb.id == ca.id, (kind, cb.tree_id, ca.tree_id)  # tree, parents, message and times alike
    assert cb.raw_message == NOTES_MESSAGE and cb.parent_ids == ca.parent_ids
    # the same notes for stock git, the new one included; the top level fanned out (2/38)
    assert _git(tmp_path / "b.git", "notes", "--ref=checkpoints", "list") == \
        _git(tmp_path / "a.git", "notes", "--ref=checkpoints", "list")
    assert _git(tmp_path / "b.git", "notes", "--ref=checkpoints", "show", str(want)) == note
    assert b.lookup_note(str(want), NOTES_REF).message == note
    assert all(t == "tree" and len(n) == 2 for n, t in _top_level(b) if n != "README"), _top_level(b)
    for oid in (got, cb.id, cb.tree_id):  # packed, not loose
        assert not (tmp_path / "b.git" / "objects" / str(oid)[:2] / str(oid)[2:]).exists()
    _git(tmp_path / "b.git", "fsck", "--strict", "--no-dangling")


def test_flat_notes_fanned_out_once(tmp_path):
    """A store whose notes are flat (older tc-git, libgit2's create_note) is fanned out by its
    next append: every note still read by stock git and by the timeline, the top level only
    directories from then on, and a later append rewrites one directory, not the history."""
    path = tmp_path / "s.git"
    r = pygit2.init_repository(str(path), bare=True)
    tl = Timeline(r, "t1")
    ids = []
    sig = signature(WHEN)
    for i in range(40):  # the old way: libgit2's create_note, flat
        tree, _ = _commit(r, None, i + 1)
        c = r.create_commit(None, sig, sig, f"step {i}\n\nTc-Task: t1\nTc-Kind: step\nTc-Step: {i}\n", tree,
                            [ids[-1]] if ids else [])
        r.create_note('{"step": %d}\n' % i, sig, sig, str(c), NOTES_REF, True)
        ids.append(c)
    r.references.create(tl.ref, ids[-1])
    assert len([n for n, t in _top_level(r) if t == "blob"]) == 40
    tree, _ = _commit(r, None, 99)
    new = tl.append("step", tree, {"task": {"id": "t1"}, "step": 40, "title": "s40", "time": WHEN + 40})
    top = _top_level(r)
    assert top and all(t == "tree" and len(n) == 2 for n, t in top), top
    listed = _git(path, "notes", "--ref=checkpoints", "list").split()
    assert set(listed[1::2]) == {str(c) for c in ids + [new]}
    assert _git(path, "notes", "--ref=checkpoints", "show", str(ids[7])) == '{"step": 7}\n'
    assert tl.record(ids[7]) == {"step": 7} and tl.record(new)["title"] == "s40"
    assert '"title": "s40"' in _git(path, "log", "--notes=checkpoints", "-1", tl.ref)
    old_tree = r[r.references[NOTES_REF].target].peel(pygit2.Commit).tree
    tree, _ = _commit(r, None, 100)
    last = tl.append("step", tree, {"task": {"id": "t1"}, "step": 41, "title": "s41", "time": WHEN + 41})
    new_tree = r[r.references[NOTES_REF].target].peel(pygit2.Commit).tree
    changed = [e.name for e in new_tree if e.name not in old_tree or old_tree[e.name].id != e.id]
    assert changed == [str(last)[:2]]
    _git(path, "fsck", "--strict", "--no-dangling")


def test_append_packed_equals_loose(tmp_path):
    """The timeline seen through either route is the same: ids, notes, refs."""
    stores = []
    for name, packed in (("loose", False), ("packed", True)):
        r = pygit2.init_repository(str(tmp_path / f"{name}.git"), bare=True)
        tl = Timeline(r, "t1")
        ids = []
        for i in range(4):
            rec = {"task": {"id": "t1"}, "step": i, "title": f"s{i}", "time": WHEN + i, "changed": {"count": i}}
            tree, _ = _commit(r, None, i + 1)
            ids.append(tl.append("step", tree, rec, packed=packed))
        stores.append((r, ids))
        out = subprocess.run(["git", "--git-dir", str(tmp_path / f"{name}.git"), "log", "--notes=checkpoints",
                              "--format=%H %N", tl.ref], check=True, capture_output=True, text=True).stdout
        assert '"title": "s3"' in out
        subprocess.run(["git", "--git-dir", str(tmp_path / f"{name}.git"), "fsck", "--strict"], check=True,
                       capture_output=True)
    (ra, ia), (rb, ib) = stores
    assert ia == ib
    assert ra.references[NOTES_REF].target == rb.references[NOTES_REF].target
    for oid in ib:  # no commit of the packed route is loose (the loose route's are)
        assert not (tmp_path / "packed.git" / "objects" / str(oid)[:2] / str(oid)[2:]).exists()
        assert (tmp_path / "loose.git" / "objects" / str(oid)[:2] / str(oid)[2:]).exists()
