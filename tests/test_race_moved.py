"""The churn failure "content it never had" (a file-to-directory path inside a moved directory),
forced at its exact point: another process renames a directory on the way to a restored file in
the instant between wsfs's last check of the parent (`_unmoved`) and its swap or rename, then keeps
working in the moved directory. Before: the rename went through the parent's descriptor into
the moved directory, to a path the plan never named, over that process's newest work (in no
restore point: lost), and the restore said `applied`. Now the file is placed so that it can be
taken back (renameat2: the swap, or a rename that never replaces), the parent is
checked after the rename, and a move means the write is taken back and that path alone is
`failed` (a creation that meets a file there: `unrestorable`); the other process's file is as
it left it. Without renameat2 (or renameatx_np) the move is at least reported.
"""
from __future__ import annotations

import os

import pygit2
import pytest
from conftest import fsck, write

from tc_git.engine import Engine
from tc_git.storage import _native
from tc_git.timeline import restore
from tc_git.workspace import wsfs


@pytest.fixture(autouse=True, params=["one writer", "two writers"])
def writers(request, monkeypatch):
    """Every race here also with the plan's writes split over two threads (restore.apply_plan:
    each directory's files on one of them, each thread with its own descriptors)."""
    monkeypatch.setattr(restore, "PARALLEL_MIN", 1 if request.param == "two writers" else 1 << 30)


def _engine(ws):
    write(ws, "x/sub/f.txt", b"f at step 1\n")
    write(ws, "x/new.txt", b"new at step 1\n")
    write(ws, "keep.txt", b"keep at step 1\n")
    eng = Engine(ws)
    eng.init("moved")
    eng.save("one")
    write(ws, "x/sub/f.txt", b"f edited, unsaved\n")
    os.unlink(ws / "x/new.txt")  # the restore creates it again
    write(ws, "keep.txt", b"keep edited\n")
    return eng


def _interfere(monkeypatch, name: str, act) -> list:
    """Run `act` right before the restore's rename of `name` into place (the swap or the rename:
    after every check of the parent), once."""
    hits: list = []
    for meth in ("_swap", "_rename"):
        real = getattr(wsfs.Writer, meth)

        def wrapped(self, tmp, dst, *a, _real=real, **k):
            if dst == name and not hits:
                act()
                hits.append(dst)
            return _real(self, tmp, dst, *a, **k)

        monkeypatch.setattr(wsfs.Writer, meth, wrapped)
    return hits


@pytest.mark.parametrize("layer", ["fd", "fd without renameat2", "paths"])
@pytest.mark.parametrize("target", ["x/sub/f.txt", "x/new.txt"])
@pytest.mark.parametrize("works", [True, False], ids=["then works there", "only moves"])
def test_directory_moved_right_before_the_rename(tmp_path, monkeypatch, layer, target, works):
    monkeypatch.setenv("TC_WSFS", "paths" if layer == "paths" else "fd")
    if layer == "fd" and not _native.has_renameat2():
        pytest.skip("no renameat2 here (or TC_NATIVE=off): the 'fd without renameat2' case runs")
    if layer == "fd without renameat2":
        monkeypatch.setattr(_native, "renameat2", lambda *a: False)
    ws = tmp_path / "ws"
    eng = _engine(ws)

    def move_and_work():
        os.rename(ws / "x", ws / "moved")  # the other process moves the directory
        if works:
            write(ws, "moved/" + target[2:], b"its newest work\n")  # and keeps working in it

    hits = _interfere(monkeypatch, os.path.basename(target), move_and_work)
    r = eng.restore(index=1, apply=True)
    monkeypatch.undo()

    assert hits, "the interference point was never reached: the test no longer tests the check"
    assert r["applied"] is not bool(r["failed"]), r
    assert (ws / "keep.txt").read_bytes() == b"keep at step 1\n"  # the rest applied
    moved = ws / "moved" / target[2:]
    got = moved.read_bytes() if moved.exists() else None
    reasons = {f["path"]: f["reason"] for f in r["failed"] + r["plan"]["unrestorable"]}
    assert target in reasons, r  # reported: failed, or (a creation meeting a file) unrestorable
    if layer == "fd without renameat2":
        # nothing atomic to take it back with: the file went with the directory, and says so
        assert got == (b"f at step 1\n" if target.endswith("f.txt") else b"new at step 1\n")
        assert "went with it" in reasons[target], reasons
        return
    # never written there: the other process's file, or what the directory held, or nothing
    assert got == (b"its newest work\n" if works else b"f edited, unsaved\n" if target.endswith("f.txt") else None)
    if layer == "fd":  # taken back: no temporary left in the moved directory
        assert sorted(p.name for p in (ws / "moved").rglob(".*.tc-*")) == []
        assert works or "not written there" in reasons[target], reasons
    # the next save records the disk as it is
    repo = eng.repo
    s = eng.save("after")
    tree = repo[s["commit"]].tree
    if got is None:
        assert "moved/" + target[2:] not in tree
    else:
        assert repo[tree["moved/" + target[2:]].id].data == got
    fsck(ws / ".checkpoints")


@pytest.mark.parametrize("works", [True, False], ids=["then works there", "only moves"])
def test_file_deleted_then_directory_moved_right_before_the_rename(tmp_path, monkeypatch, works):
    """A file the plan replaces is deleted by another process, which then moves its directory
    (and perhaps writes the file anew there) right before the restore's swap. The swap finds no
    file, so the restore falls back to a rename: a plain rename replaced whatever was at the
    name in the moved directory (that process's newest work, in no restore point) or left the
    restored content there, at a path it never had (test_churn's failure). The fallback places
    the file as a creation does (RENAME_NOREPLACE, taken back after a move)."""
    monkeypatch.setenv("TC_WSFS", "fd")
    if not _native.has_renameat2():
        pytest.skip("no renameat2 here (or TC_NATIVE=off)")
    ws = tmp_path / "ws"
    eng = _engine(ws)

    def delete_move_and_work():
        os.unlink(ws / "x/sub/f.txt")
        os.rename(ws / "x", ws / "moved")
        if works:
            write(ws, "moved/sub/f.txt", b"its newest work\n")

    hits = _interfere(monkeypatch, "f.txt", delete_move_and_work)
    r = eng.restore(index=1, apply=True)
    monkeypatch.undo()
    assert hits == ["f.txt"], hits
    assert (ws / "keep.txt").read_bytes() == b"keep at step 1\n"
    reasons = {f["path"]: f["reason"] for f in r["failed"] + r["plan"]["unrestorable"]}
    assert "x/sub/f.txt" in reasons and r["applied"] is not bool(r["failed"]), r
    moved = ws / "moved/sub/f.txt"
    assert (moved.read_bytes() if moved.exists() else None) == (b"its newest work\n" if works else None), reasons
    assert sorted(p.name for p in (ws / "moved").rglob(".*.tc-*")) == []
    s = eng.save("after")
    tree = eng.repo[s["commit"]].tree
    assert ("moved/sub/f.txt" in tree) is works
    fsck(ws / ".checkpoints")


def test_directory_moved_while_the_temporary_is_written(tmp_path, monkeypatch):
    """Another process moves the directory while the restore writes a file's temporary into it
    (through the directory's descriptor: the temporary goes with it). The check before the
    rename refuses the path; the temporary is removed from the moved directory (before, the
    descriptor was closed first and the removal failed: the temporary, the restored content
    under a hidden name, stayed there and the next save recorded it: test_churn's 'content it
    never had' at a `.<name>.tc-<hex>` path). (Full-path writes, TC_WSFS=paths, cannot follow a
    moved directory: there the temporary stays, as after a kill; runbook.)"""
    monkeypatch.setenv("TC_WSFS", "fd")
    ws = tmp_path / "ws"
    eng = _engine(ws)
    real = wsfs._write_all
    hits: list = []

    def write_all(fd, data):
        real(fd, data)
        if bytes(data) == b"f at step 1\n" and not hits:
            os.rename(ws / "x", ws / "moved")
            hits.append(1)

    monkeypatch.setattr(wsfs, "_write_all", write_all)
    r = eng.restore(index=1, apply=True)
    monkeypatch.undo()
    assert hits, "the interference point was never reached"
    reasons = {f["path"]: f["reason"] for f in r["failed"]}
    assert "moved or replaced" in reasons.get("x/sub/f.txt", ""), r
    assert (ws / "moved/sub/f.txt").read_bytes() == b"f edited, unsaved\n"
    assert sorted(str(p.relative_to(ws)) for p in ws.rglob(".*.tc-*")) == []
    s = eng.save("after")
    tree = eng.repo[s["commit"]].peel(pygit2.Commit).tree
    assert tree["moved/sub"].type_str == "tree" and [e.name for e in eng.repo[tree["moved/sub"].id]] == ["f.txt"]
    fsck(ws / ".checkpoints")


def test_a_directory_that_appears_where_the_file_goes_is_put_back(tmp_path, monkeypatch):
    """The swap with whatever is at the name: a directory that appeared there after the checks
    is swapped back, not left under the temporary name (and the path is `failed`)."""
    monkeypatch.setenv("TC_WSFS", "fd")
    if not _native.has_renameat2():
        pytest.skip("no renameat2 here (or TC_NATIVE=off)")
    ws = tmp_path / "ws"
    eng = _engine(ws)

    def make_dir():
        os.unlink(ws / "x/sub/f.txt")
        write(ws, "x/sub/f.txt/inside.txt", b"a build made this\n")

    hits = _interfere(monkeypatch, "f.txt", make_dir)
    r = eng.restore(index=1, apply=True)
    monkeypatch.undo()
    assert hits and [f["path"] for f in r["failed"]] == ["x/sub/f.txt"], r
    assert (ws / "x/sub/f.txt/inside.txt").read_bytes() == b"a build made this\n"
    assert sorted(p.name for p in (ws / "x/sub").iterdir()) == ["f.txt"]  # no temporary left
    fsck(ws / ".checkpoints")


@pytest.mark.parametrize("layer", ["fd", "paths"])
@pytest.mark.parametrize("works", [True, False], ids=["then works there", "only moves"])
def test_directory_moved_right_before_a_delete(tmp_path, monkeypatch, layer, works):
    """The same instant for a deletion: the file the plan deletes is moved aside first and put
    back if its directory moved meanwhile, so nothing in the moved directory is deleted."""
    monkeypatch.setenv("TC_WSFS", layer)
    ws = tmp_path / "ws"
    eng = _engine(ws)
    write(ws, "x/gone.txt", b"made after step 1\n")  # the restore to step 1 deletes it
    real = wsfs.Writer._unmoved
    hits = []

    def unmoved(self, rel_dir):
        real(self, rel_dir)  # the last check passes; then the other process acts
        if rel_dir == "x" and not hits:
            os.rename(ws / "x", ws / "moved")
            if works:
                write(ws, "moved/gone.txt", b"its newest work\n")
            hits.append(rel_dir)

    monkeypatch.setattr(wsfs.Writer, "_unmoved", unmoved)
    r = eng.restore(index=1, apply=True)
    monkeypatch.undo()
    assert hits, "the interference point was never reached"
    assert "x/gone.txt" in [f["path"] for f in r["failed"]] and not r["applied"], r
    assert (ws / "moved/gone.txt").read_bytes() == (b"its newest work\n" if works else b"made after step 1\n")
    assert sorted(p.name for p in (ws / "moved").rglob(".*.tc-*")) == []
    fsck(ws / ".checkpoints")
