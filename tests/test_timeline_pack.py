"""Timeline.append(packed=True) writes a commit and its note (blob, notes tree, notes commit) as
one small pack instead of libgit2's four loose objects: the objects must be byte for byte
libgit2's (same ids for the commit, the notes tree and the notes commit), whatever the notes tree
holds: nothing yet, flat notes, a note being replaced, fan-out directories (git notes makes them
past 256 notes), names that are not hex, a blob named like a fan-out directory. Stock git
fsck --strict the judge, and git log shows the note."""
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
    elif kind in ("fanout", "fanout-replace", "fanout-other"):
        sub = repo.TreeBuilder()
        sub.insert("1" * 38, other, FileMode.BLOB)
        if kind == "fanout-replace":
            sub.insert(target[2:], blob, FileMode.BLOB)
        tb = repo.TreeBuilder()
        prefix = target[:2] if kind != "fanout-other" else ("00" if target[:2] != "00" else "01")
        tb.insert(prefix, sub.write(), FileMode.TREE)
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


@pytest.mark.parametrize("kind", ["none", "flat", "replace", "fanout", "fanout-replace", "fanout-other",
                                  "blob-prefix"])
def test_packed_commit_is_libgit2s(tmp_path, kind):
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
    note = '{\n "kind": "restore"\n}\n'
    a.create_note(note, sig, sig, str(want), NOTES_REF, True)
    got = packed_commit(b, tree, parent, msg, note, WHEN)
    assert got == want
    ca, cb = a[a.references[NOTES_REF].target], b[b.references[NOTES_REF].target]
    assert cb.id == ca.id, (kind, cb.tree_id, ca.tree_id)  # tree, parents, message and times alike
    assert cb.raw_message == NOTES_MESSAGE
    assert b.lookup_note(str(want), NOTES_REF).message == note
    for oid in (got, cb.id, cb.tree_id):  # packed, not loose
        assert not (tmp_path / "b.git" / "objects" / str(oid)[:2] / str(oid)[2:]).exists()
    subprocess.run(["git", "--git-dir", str(tmp_path / "b.git"), "fsck", "--strict", "--no-dangling"],
                   check=True, capture_output=True)


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
