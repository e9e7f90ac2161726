"""Restores with the MCP server's change journal (issue 14): the journal-informed pre-restore
snapshot (the restore point) equals stock git's tree of the workspace, the restore commit equals
it after the writes, the undo brings the first back, and the notifications of the restore's own
writes are handed over to its snapshot instead of making the next save read every restored
file again. Real inotify watcher, stock git as the judge (conftest.git_tree)."""
from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

import pytest
from conftest import git_tree, write
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_journal import OPS, Watched, apply, small_workspace

from tc_git.workspace import snapshot

pytestmark = pytest.mark.filterwarnings("ignore:Callback with id:RuntimeWarning")


def _engine(w: Watched):
    from tc_git.engine import Engine

    eng = Engine(w.ws)
    eng.journal = w.journal
    return eng


def _restore(w: Watched, **kw) -> tuple[dict, str, str]:
    """Apply a restore through the journal: (result, restore point's tree, restore commit's tree)."""
    eng = _engine(w)
    before = w.journal.refreshes
    r = eng.restore(apply=True, **kw)
    assert r["applied"], (r["failed"], r.get("unstable"))
    assert w.journal.refreshes >= before + 2, w.journal.status()  # pre and after snapshots: journal
    commit = eng.repo[r["commit"]]
    return r, str(commit.parents[0].tree_id), str(commit.tree_id)


def _two_steps(tmp_path: Path) -> tuple[Path, Watched]:
    """A watched workspace of 10 files saved twice, 5 of them changed in between."""
    ws = tmp_path / "ws"
    for i in range(10):
        write(ws, f"d/f{i}.txt", f"{i}\n".encode())
    w = Watched(ws)
    try:
        w.save("one")
        for i in range(5):
            write(ws, f"d/f{i}.txt", b"changed\n")
        w.save("two")
    except BaseException:
        w.stop()
        raise
    return ws, w


def test_restore_hands_over_its_own_notifications(tmp_path, monkeypatch):
    ws = tmp_path / "ws"
    for i in range(30):
        write(ws, f"src/m{i % 3}/f{i}.py", f"v = {i}\n".encode())
    w = Watched(ws)
    try:
        w.save("one")
        for i in range(0, 30, 3):
            write(ws, f"src/m{i % 3}/f{i}.py", f"edited {i}\n".encode())
        w.save("two")
        write(ws, "src/m1/unsaved.py", b"not saved yet\n")  # the restore point must hold it
        pre = git_tree(ws, w.eng.store.path)
        r, point, after = _restore(w, index=1)
        assert r["plan"]["counts"]["to_replace"] == 10 and r["plan"]["counts"]["to_delete"] == 1, r["plan"]
        assert point == pre and after == git_tree(ws, w.eng.store.path)
        status = w.journal.status()
        assert status["trusted"] and status["pending"] == 0, status
        # the next save: the journal names nothing, so no restored file is read again
        reads: list[str] = []
        real = snapshot._read_once
        monkeypatch.setattr(snapshot, "_read_once", lambda full, st: reads.append(full) or real(full, st))
        tree, how = w.save("after")
        assert how == "journal" and reads == [] and tree == after
        # undo through the journal: the workspace is the restore point again
        r, _point, undone = _restore(w, undo=True)
        assert undone == pre == git_tree(ws, w.eng.store.path)
        assert (ws / "src/m1/unsaved.py").read_bytes() == b"not saved yet\n"
    finally:
        w.stop()


@pytest.mark.parametrize("when", ["before", "during"])
def test_untrusted_journal_after_the_writes(tmp_path, monkeypatch, when):
    """A journal that stops being trusted while the restore writes (an overflow) hands over
    nothing. Untrusted before the restore's snapshot: only the written paths are refreshed, as
    without a journal, and the next save is a full scan; untrusted while its barrier is awaited:
    the restore's snapshot is a full scan. Either way stock git agrees with every tree."""
    ws, w = _two_steps(tmp_path)
    try:
        eng = _engine(w)
        from tc_git.timeline import restore as restore_mod

        real_apply, real_begin = restore_mod.apply_plan, w.journal.begin

        def apply_then_overflow(repo, plan):
            failed = real_apply(repo, plan)
            write(ws, "d/meanwhile.txt", b"written by someone else during the restore\n")
            if when == "before":
                w.journal.untrust("overflow (test)")
            else:
                def begin(store_path):
                    w.journal.untrust("overflow (test)")
                    return real_begin(store_path)

                monkeypatch.setattr(w.journal, "begin", begin)
            return failed

        monkeypatch.setattr(restore_mod, "apply_plan", apply_then_overflow)
        full = w.journal.full
        r = eng.restore(index=1, apply=True)
        monkeypatch.undo()
        assert r["applied"], r
        tree = str(eng.repo[r["commit"]].tree_id)
        if when == "before":
            assert w.journal.full == full and "d/meanwhile.txt" not in eng.repo[tree], w.journal.status()
            assert w.save("next") == (git_tree(ws, w.eng.store.path), "full")
        else:
            assert w.journal.full == full + 1 and tree == git_tree(ws, w.eng.store.path), w.journal.status()
            assert w.save("next") == (tree, "journal")
    finally:
        w.stop()


@settings(max_examples=int(os.environ.get("TC_JOURNAL_EXAMPLES", "8")), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=st.lists(st.tuples(OPS, st.integers(1, 3)), min_size=1, max_size=3))
def test_journal_restores_equal_full_scan(batches):
    """Random edits, then a restore to a random earlier step, with the journal on: the restore
    point equals stock git's tree just before, the restore commit equals it just after, a save
    right after changes nothing, and the undo gives the restore point back."""
    with tempfile.TemporaryDirectory(prefix="tc-restore-journal-") as d:
        ws = small_workspace(Path(d) / "ws")
        w = Watched(ws)
        try:
            w.save("first")
            steps = 1
            for ops, back in batches:
                for op in ops:
                    apply(ws, *op)
                w.save("edits")
                steps += 1
                for op in ops[: len(ops) // 2]:  # unsaved work the restore point must keep
                    apply(ws, *op)
                pre = git_tree(ws, w.eng.store.path)
                target = max(1, steps - back)
                eng = _engine(w)
                r = eng.restore(index=target, apply=True)
                commit = eng.repo[r["commit"]]
                assert str(commit.parents[0].tree_id) == pre, (ops, w.journal.status())
                assert str(commit.tree_id) == git_tree(ws, w.eng.store.path), (ops, r["failed"])
                tree, how = w.save("after restore")
                assert how == "journal" and tree == str(commit.tree_id), (ops, w.journal.status())
                r = _engine(w).restore(undo=True, apply=True)
                assert git_tree(ws, w.eng.store.path) == pre, (ops, r["failed"], r["plan"])
                time.sleep(0.01)
        finally:
            w.stop()


# A writer in its own process: after `go` appears it changes, round after round, files the restore
# does not touch, the very files the restore writes, a new directory of new files, and deletes
# one; each round is counted in `rounds` (written by rename, so a reader never sees half of it).
WRITER = r"""
import os, sys, time
ws, go, stop, rounds = sys.argv[1:5]
while not os.path.exists(go):
    time.sleep(0.001)
n = 0
while not os.path.exists(stop):
    n += 1
    for i in range(0, 40, 4):  # other files (the restore leaves them alone)
        with open(os.path.join(ws, f"src/m{i % 4}/f{i + 1}.py"), "a") as f:
            f.write(f"other {n}\n")
    for i in range(0, 40, 8):  # files the restore writes too
        with open(os.path.join(ws, f"src/m{i % 4}/f{i}.py"), "a") as f:
            f.write(f"same {n}\n")
    d = os.path.join(ws, f"new{n % 3}", "deep")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, f"n{n}.txt"), "w") as f:
        f.write(f"{n}\n")
    try:
        os.unlink(os.path.join(ws, f"src/m{n % 4}/f{36 + n % 4}.py"))
    except FileNotFoundError:
        pass
    with open(rounds + ".tmp", "w") as f:
        f.write(str(n))
    os.replace(rounds + ".tmp", rounds)
    time.sleep(0.002)
"""


def _rounds(path: Path) -> int:
    try:
        return int(path.read_text() or 0)
    except (FileNotFoundError, ValueError):
        return 0


@pytest.mark.parametrize("native", [True, False], ids=["native", "watchdog"])
def test_another_process_writing_during_a_restore_is_seen(tmp_path, monkeypatch, tune, native):
    """The restore's own notifications are handed to its snapshot; another process's changes
    made meanwhile (to other files, to the restored files themselves, in new directories, and
    deletions) must not be lost with them: the save after the writer stops, served by the
    journal, equals stock git's tree of the workspace, and so does the one after that."""
    import subprocess
    import sys

    from tc_git.timeline import restore as restore_mod
    from tc_git.workspace import inotify

    if not native:
        tune(inotify="off")
    elif not inotify.available():  # (TC_NATIVE=off: .ci/run's second pass)
        pytest.skip("no native inotify here")
    ws = tmp_path / "ws"
    for i in range(40):
        write(ws, f"src/m{i % 4}/f{i}.py", f"v = {i}\n".encode())
    w = Watched(ws)
    assert w.watcher.native == native
    flags = tmp_path / "flags"
    flags.mkdir()
    go, stop, rounds = flags / "go", flags / "stop", flags / "rounds"
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(ws), str(go), str(stop), str(rounds)])
    try:
        w.save("one")
        for i in range(0, 40, 2):
            write(ws, f"src/m{i % 4}/f{i}.py", f"edited {i}\n".encode())
        w.save("two")
        for i in range(0, 40, 2):  # unsaved edits: the restore writes these 20 files back
            write(ws, f"src/m{i % 4}/f{i}.py", f"unsaved {i}\n".encode())
        real_apply = restore_mod.apply_plan

        def apply_while_another_writes(repo, plan):
            go.write_text("")
            deadline = time.monotonic() + 30
            while _rounds(rounds) < 1 and time.monotonic() < deadline:  # it writes before ...
                time.sleep(0.001)
            seen = _rounds(rounds)
            failed = real_apply(repo, plan)
            while _rounds(rounds) < seen + 2 and time.monotonic() < deadline:  # ... and after our writes
                time.sleep(0.001)
            return failed

        monkeypatch.setattr(restore_mod, "apply_plan", apply_while_another_writes)
        r, _point, _after = _restore(w, index=2)
        monkeypatch.undo()
        if not native:
            tune(inotify="off")
        assert r["plan"]["counts"]["to_replace"] == 20, r["plan"]
        assert _rounds(rounds) >= 2
        stop.write_text("")
        assert writer.wait(30) == 0
        tree, how = w.save("after the writer")
        assert how == "journal" and tree == git_tree(ws, w.eng.store.path), w.journal.status()
        assert "new0" in w.eng.repo[tree] and b"same" in (ws / "src/m0/f0.py").read_bytes()
        assert w.save("again") == (tree, "journal")
    finally:
        stop.write_text("")
        writer.wait(30)
        w.stop()


@pytest.mark.parametrize("native", [True, False], ids=["native", "watchdog"])
def test_files_swapped_unless_notifications_are_slow(tmp_path, monkeypatch, tune, native):
    """Under watchdog (each notification handled in Python on its threads) a restore renames
    files over (a swap is two more notifications per file); read natively, it swaps them as
    without a watcher. Either way the journal's trees equal stock git's."""
    from tc_git.workspace import inotify, wsfs

    if not native:
        tune(inotify="off")
    elif not inotify.available():
        pytest.skip("no native inotify here")
    ws, w = _two_steps(tmp_path)
    try:
        seen: list = []
        real_init = wsfs.Writer.__init__

        def init(self, *a, **kw):
            seen.append(kw.get("exchange"))
            real_init(self, *a, **kw)

        monkeypatch.setattr(wsfs.Writer, "__init__", init)
        r, _point, after = _restore(w, index=1)
        assert seen == [None if native else False], seen
        assert after == git_tree(ws, w.eng.store.path) and w.save("after") == (after, "journal")
    finally:
        w.stop()
