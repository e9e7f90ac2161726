"""Stock git reads the code timeline: log, show, diff, ls-tree and notes on the store."""
from __future__ import annotations

import json
import os

import pytest
from conftest import git, write

from tc_git.engine import Engine

pytestmark = pytest.mark.usefixtures("fsck_after")


@pytest.fixture
def timeline(ws):
    write(ws, "src/app.py", "print('hello')\n")
    write(ws, "README.md", "# demo\n")
    write(ws, "bin/run.sh", "#!/bin/sh\necho run\n", 0o755)
    write(ws, "empty.txt", b"")
    os.symlink("src/app.py", ws / "app-link")
    e = Engine(ws)
    init = e.init("git judge", goal="prove stock git reads it", constraints="no mocks")
    s1 = e.save("first step", conclusion="the app prints hello", verified=["pytest -q", "ruff"],
                open_questions=["is hello enough?"], next="make it say goodbye")
    write(ws, "src/app.py", "print('goodbye')\n")
    write(ws, "src/new.py", "x = 1\n")
    (ws / "README.md").unlink()
    s2 = e.save("second step", conclusion="now it says goodbye", next="ship it")
    return e, init["task_id"], s1, s2


def test_git_log_reads_like_a_work_log(timeline):
    e, tid, s1, s2 = timeline
    store = e.store.path
    ref = f"refs/checkpoints/tasks/{tid}/head"
    log = git(store, "log", "--format=%s", ref).decode().splitlines()
    assert log == ["step 2: second step", "step 1: first step", "init: git judge"]
    body = git(store, "log", "-1", "--format=%B", s1["commit"]).decode()
    assert "the app prints hello" in body
    # git itself parses the trailers
    trailers = git(store, "log", "-1", "--format=%(trailers:only,unfold)", s1["commit"]).decode()
    for line in (f"Tc-Task: {tid}", "Tc-Step: 1", "Tc-Kind: step", "Next: make it say goodbye",
                 "Verified: pytest -q", "Verified: ruff", "Open-Question: is hello enough?"):
        assert line in trailers.splitlines(), (line, trailers)
    value = git(store, "log", "-1", "--format=%(trailers:key=Tc-Step,valueonly)", s2["commit"]).decode().strip()
    assert value == "2"
    assert git(store, "rev-parse", ref).decode().strip() == s2["commit"]


def test_git_show_has_the_workspace_files(timeline, ws):
    e, _tid, s1, s2 = timeline
    store = e.store.path
    assert git(store, "show", f"{s1['commit']}:src/app.py") == b"print('hello')\n"
    assert git(store, "show", f"{s1['commit']}:README.md") == b"# demo\n"
    assert git(store, "show", f"{s1['commit']}:empty.txt") == b""
    tree = git(store, "ls-tree", "-r", s1["commit"]).decode().splitlines()
    modes = {ln.split("\t")[1]: ln.split()[0] for ln in tree}
    assert modes == {"README.md": "100644", "app-link": "120000", "bin/run.sh": "100755",
                     "empty.txt": "100644", "src/app.py": "100644"}
    assert git(store, "cat-file", "-p", f"{s1['commit']}:app-link") == b"src/app.py"
    shown = git(store, "show", "--stat", "--format=%s%n%b", s2["commit"]).decode()
    assert "step 2: second step" in shown and "Tc-Kind: step" in shown
    assert "src/new.py" in shown and "README.md" in shown and "src/app.py" in shown
    # the store never shows up in the tree
    assert ".checkpoints" not in git(store, "ls-tree", "-r", "--name-only", s2["commit"]).decode()


def test_git_diff_between_steps(timeline):
    e, _tid, s1, s2 = timeline
    patch = git(e.store.path, "diff", s1["commit"], s2["commit"]).decode()
    assert "-print('hello')" in patch and "+print('goodbye')" in patch
    assert "deleted file mode 100644" in patch and "README.md" in patch
    assert "new file mode 100644" in patch and "src/new.py" in patch
    names = git(e.store.path, "diff", "--name-status", s1["commit"], s2["commit"]).decode().split("\n")
    assert "D\tREADME.md" in names and "A\tsrc/new.py" in names and "M\tsrc/app.py" in names
    # the engine's diff agrees with git's
    assert e.diff("1", "2") == patch


def test_notes_hold_the_machine_record(timeline):
    e, tid, s1, _s2 = timeline
    note = git(e.store.path, "notes", "--ref=checkpoints", "show", s1["commit"]).decode()
    rec = json.loads(note)
    assert rec["task"]["id"] == tid and rec["step"] == 1 and rec["kind"] == "step"
    assert rec["verified"] == ["pytest -q", "ruff"] and rec["task"]["goal"] == "prove stock git reads it"
    log = git(e.store.path, "log", "-1", "--notes=checkpoints", s1["commit"]).decode()
    assert "Notes (checkpoints)" in log


def test_restore_and_drift_commits_are_git_commits(timeline, ws):
    e, tid, _s1, _s2 = timeline
    write(ws, "scratch.txt", "unsaved\n")
    r = e.restore(1, apply=True)
    store = e.store.path
    subjects = git(store, "log", "--format=%s", f"refs/checkpoints/tasks/{tid}/head").decode().splitlines()
    assert subjects[0] == "restore r0001: to s0001"
    assert subjects[1].startswith(f"drift {r['recovered']}: before restore to s0001")
    # the restore point holds the unsaved file; the restore commit has step 1's tree again
    assert git(store, "show", f"{r['commit']}~1:scratch.txt") == b"unsaved\n"
    t_restore = git(store, "rev-parse", f"{r['commit']}^{{tree}}").strip()
    t_step1 = git(store, "rev-parse", f"{r['target_commit']}^{{tree}}").strip()
    assert t_restore == t_step1 and not (ws / "scratch.txt").exists()
    assert git(store, "diff", "--name-only", r["target_commit"], r["commit"] + "~1").decode().split() == [
        "README.md", "scratch.txt", "src/app.py", "src/new.py"]
    u = e.restore(drift_id=r["recovered"], apply=True)
    assert (ws / "scratch.txt").read_bytes() == b"unsaved\n" and u["applied"]
    kinds = git(store, "log", "--format=%(trailers:key=Tc-Kind,valueonly)",
                f"refs/checkpoints/tasks/{tid}/head").decode().split()
    assert kinds == ["restore", "drift", "restore", "drift", "step", "step", "init"]
