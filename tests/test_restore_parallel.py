"""A restore's writes on two threads (restore.apply_plan, PARALLEL_MIN files or more): each
directory's files on one thread, each thread with its own wsfs.Writer (descriptors, checks)
and store handle. The outcome is the one-thread outcome: the same files, bytes and modes, the
same restore commit tree (stock git's tree of the workspace), failures reported in plan order,
and the undo brings back what was there. The races of test_race_moved run both ways.
"""
from __future__ import annotations

import os
import stat

import pytest
from conftest import fsck, git_tree, write

from tc_git.engine import Engine
from tc_git.timeline import restore


def _state(ws) -> dict:
    out = {}
    for dirpath, dirnames, filenames in os.walk(ws):
        dirnames[:] = [d for d in dirnames if d != ".checkpoints"]
        for n in filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
            p = os.path.join(dirpath, n)
            st = os.lstat(p)
            rel = os.path.relpath(p, ws)
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", os.readlink(p))
            else:
                with open(p, "rb") as f:
                    out[rel] = (oct(st.st_mode & 0o111), f.read())
    return out


def _history(ws):
    """Step 1, then unsaved work that a restore to step 1 undoes: edits in 12 directories,
    deletions, new files and directories, a mode change, a link, a file where a directory was."""
    for i in range(120):
        write(ws, f"d{i % 12}/f{i}.txt", f"step 1 file {i}\n".encode() * (i % 7 + 1))
    write(ws, "d0/run.sh", b"#!/bin/sh\necho one\n", mode=0o755)
    write(ws, "swap/inner.txt", b"a directory at step 1\n")
    os.symlink("d1/f1.txt", ws / "link")
    eng = Engine(ws)
    eng.init("parallel")
    eng.save("one")
    for i in range(0, 120, 2):
        write(ws, f"d{i % 12}/f{i}.txt", f"edited {i}\n".encode())
    for i in range(1, 120, 10):
        os.unlink(ws / f"d{i % 12}/f{i}.txt")
    for i in range(8):
        write(ws, f"new{i % 3}/n{i}.txt", b"new, unsaved\n")
    os.chmod(ws / "d0/run.sh", 0o644)
    os.unlink(ws / "swap/inner.txt")
    os.rmdir(ws / "swap")
    write(ws, "swap", b"a file now\n")
    return eng


@pytest.mark.parametrize("layer", ["fd", "paths"])
def test_two_writers_restore_what_one_restores(tmp_path, monkeypatch, tune, layer):
    monkeypatch.setenv("TC_WSFS", layer)
    monkeypatch.setattr(restore, "PARALLEL_MIN", 32)
    threads = []
    real = restore._write_rows

    def counted(ws, read, rows, which, creating, written):
        threads.append(len(list(which)))
        return real(ws, read, rows, which, creating, written)

    monkeypatch.setattr(restore, "_write_rows", counted)
    results = {}
    for mode in ("1", "2"):
        tune(restore_threads=2 if mode == "2" else 1)
        ws = tmp_path / f"ws{mode}"
        eng = _history(ws)
        unsaved = _state(ws)
        threads.clear()
        r = eng.restore(index=1, apply=True)
        assert r["applied"] and not r["failed"], r["failed"]
        assert len(threads) == (1 if mode == "1" else 2), threads
        if mode == "2":
            assert min(threads) >= 20, threads  # both wrote a fair share
        store = ws / ".checkpoints"
        commit = eng.repo[r["commit"]]
        assert str(commit.tree_id) == git_tree(ws, store)  # stock git's tree of the workspace
        results[mode] = (_state(ws), str(commit.tree_id), r["plan"])
        # the undo brings back the unsaved work, bytes and modes
        u = eng.undo(apply=True)
        assert u["applied"] and not u["failed"], u["failed"]
        assert _state(ws) == unsaved
        fsck(store)
    assert results["1"] == results["2"]


def test_failures_are_reported_in_plan_order(tmp_path, monkeypatch, tune):
    """Paths a thread cannot write (kept: unrestorable; failed: an error) are reported as one
    thread reports them, in the plan's order, whichever thread met them."""
    from tc_git.workspace import wsfs

    monkeypatch.setattr(restore, "PARALLEL_MIN", 4)
    real = wsfs.Writer.write

    def refusing(self, rel, *a, **k):
        if rel.endswith("6.txt"):
            raise wsfs.Unrestorable("left as it is (test)")
        if rel.endswith("8.txt"):
            raise OSError(5, "I/O error (test)")
        return real(self, rel, *a, **k)

    monkeypatch.setattr(wsfs.Writer, "write", refusing)
    out = {}
    for mode in ("1", "2"):
        tune(restore_threads=int(mode))
        ws = tmp_path / f"ws{mode}"
        eng = _history(ws)
        r = eng.restore(index=1, apply=True)
        failed = [f["path"] for f in r["failed"]]
        kept = [u["path"] for u in r["plan"]["unrestorable"]]
        assert failed and kept and len({p.split("/")[0] for p in failed}) > 2, (failed, kept)
        out[mode] = (failed, kept, r["plan"]["counts"])
        fsck(ws / ".checkpoints")
    assert out["1"] == out["2"]
