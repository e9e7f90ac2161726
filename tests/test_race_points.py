"""The churn races of issue 17, each forced at its exact point instead of hoped for in a churn run.

Another process acts in the instant between two of our steps: the act itself is real (a real
write or rename on the real file system, as a formatter or a build would do it); only its timing
is arranged, by running it from inside the step that precedes the window.
"""
from __future__ import annotations

import os

import pytest
from conftest import fsck, write

from tc_git.engine import Engine
from tc_git.workspace import snapshot as snapshot_mod
from tc_git.workspace import wsfs


def _tmp_name(name: str) -> bool:
    return name.startswith(".") and ".tc-" in name  # the restore's temporary sibling


@pytest.mark.parametrize("write_layer", ["fd", "paths"])
@pytest.mark.parametrize("how", ["rewritten in place", "replaced by rename"])
def test_temporary_file_changed_before_its_rename_fails_that_path_only(tmp_path, monkeypatch, write_layer, how):
    """A tool that rewrites every file it finds (`sed -i` over the tree, a formatter) reaches the
    restore's temporary file between its checked write and its rename. The restored file would
    then hold bytes the plan never had: that path must be reported `failed` and keep its current
    content; the rest of the restore applies, and the undo brings everything back."""
    monkeypatch.setenv("TC_WSFS", write_layer)
    ws = tmp_path / "ws"
    write(ws, "a.txt", b"a v1\n")
    write(ws, "b.txt", b"b v1\n")
    eng = Engine(ws)
    eng.init("tmp race")
    eng.save("v1")
    write(ws, "a.txt", b"a v2\n")
    write(ws, "b.txt", b"b v2\n")
    eng.save("v2")

    real = {cls: cls.stat for cls in (wsfs._FdOps, wsfs._PathOps)}
    hits = []

    def interfere(cls):
        def stat(self, name, h):
            if _tmp_name(name) and name.startswith(".a.txt") and not hits:
                where = os.path.join(h, name) if isinstance(h, str) else None
                if how == "rewritten in place":
                    fd = (os.open(where, os.O_WRONLY | os.O_TRUNC) if where
                          else os.open(name, os.O_WRONLY | os.O_TRUNC, dir_fd=h))
                    try:
                        os.write(fd, b"formatted by someone else\n")
                    finally:
                        os.close(fd)
                else:
                    other = ".a.txt.formatter"
                    fd = (os.open(os.path.join(h, other), os.O_WRONLY | os.O_CREAT, 0o644) if where
                          else os.open(other, os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=h))
                    try:
                        os.write(fd, b"formatted by someone else\n")
                    finally:
                        os.close(fd)
                    if where:
                        os.replace(os.path.join(h, other), where)
                    else:
                        os.replace(other, name, src_dir_fd=h, dst_dir_fd=h)
                hits.append(name)
            return real[cls](self, name, h)
        return stat

    for cls in real:
        monkeypatch.setattr(cls, "stat", interfere(cls))
    r = eng.restore(index=1, apply=True)
    for cls, fn in real.items():
        monkeypatch.setattr(cls, "stat", fn)

    assert hits, "the interference point was never reached: the test no longer tests the check"
    assert [f["path"] for f in r["failed"]] == ["a.txt"], r
    assert "temporary" in r["failed"][0]["reason"], r["failed"]
    assert (ws / "a.txt").read_bytes() == b"a v2\n"  # kept: never the other process's bytes
    assert (ws / "b.txt").read_bytes() == b"b v1\n"  # the rest applied
    left = sorted(p.name for p in ws.iterdir() if _tmp_name(p.name))
    if how == "rewritten in place":
        assert left == [], left  # still our inode: cleaned up
    else:
        assert left == [hits[0]], left  # someone else's file now: left where it is, never deleted
        assert (ws / hits[0]).read_bytes() == b"formatted by someone else\n"
        os.unlink(ws / hits[0])

    u = eng.undo(apply=True)
    assert u["applied"] and u["failed"] == [], u
    assert (ws / "a.txt").read_bytes() == b"a v2\n"
    assert (ws / "b.txt").read_bytes() == b"b v2\n"
    fsck(ws / ".checkpoints")


def test_a_file_that_never_holds_still_is_listed_unstable_and_keeps_its_last_version(tmp_path, monkeypatch):
    """A file rewritten during every read of a save (a log, a build output being written) is
    never stored torn: the save keeps the version the previous checkpoint holds (a file new since
    then stays out) and lists it as `unstable`; every other change is saved."""
    ws = tmp_path / "ws"
    write(ws, "hot.txt", b"hot v1\n")
    write(ws, "calm.txt", b"calm v1\n")
    eng = Engine(ws)
    eng.init("unstable")
    first = eng.save("v1")
    write(ws, "hot.txt", b"hot v2, being written\n")
    write(ws, "fresh.txt", b"new and hot\n")
    write(ws, "calm.txt", b"calm v2\n")

    real = snapshot_mod._read_once
    reads: dict[str, int] = {}

    def written_meanwhile(full, st):
        name = os.path.basename(full)
        if name in ("hot.txt", "fresh.txt"):
            reads[name] = reads.get(name, 0) + 1
            with open(full, "ab") as f:  # the writer appends while we read
                f.write(b"+")
        return real(full, st)

    monkeypatch.setattr(snapshot_mod, "_read_once", written_meanwhile)
    r = eng.save("v2 under a writer")
    monkeypatch.setattr(snapshot_mod, "_read_once", real)

    assert r["unstable"] == ["fresh.txt", "hot.txt"], r
    assert reads == {"hot.txt": snapshot_mod.READ_ATTEMPTS, "fresh.txt": snapshot_mod.READ_ATTEMPTS}
    repo = eng.repo
    tree = repo[r["commit"]].tree
    assert repo[tree["hot.txt"].id].data == b"hot v1\n"  # the last version that held still
    assert tree["hot.txt"].id == repo[first["commit"]].tree["hot.txt"].id
    assert "fresh.txt" not in tree
    assert repo[tree["calm.txt"].id].data == b"calm v2\n"

    # once the writer stops, the next save takes the file as it is
    again = eng.save("quiet")
    assert again.get("unstable", []) == []
    tree = repo[again["commit"]].tree
    assert repo[tree["hot.txt"].id].data == (ws / "hot.txt").read_bytes()
    assert repo[tree["fresh.txt"].id].data == (ws / "fresh.txt").read_bytes()
    fsck(ws / ".checkpoints")
