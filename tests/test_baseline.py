"""`init` records the workspace as the task's baseline (issue 30): a new task starts with nothing
unsaved, its first step (still step 1) records and lists only what changed since, and every
command that reads a timeline takes a task whose first entry is that baseline (step 0, `s0000`):
resume, save, show, log, restore to it and undo, export and import. Stock git judges the stores."""
from __future__ import annotations

import json
import subprocess

import pytest
from conftest import TC, clean_env, fsck, git, tree_state, write

from tc_git.base.errors import NotFound
from tc_git.engine import Engine

pytestmark = pytest.mark.usefixtures("fsck_after", "no_git_export")


def _project(tmp_path):
    ws = tmp_path / "ws"
    for i in range(30):
        write(ws, f"src/m{i}.py", f"x = {i}\n")
    write(ws, "README.md", "# project\n")
    write(ws, ".env", "API_TOKEN=tkn_9fQ2xL7vB4mN8sR1tY6wZ3cK5hJ0dG\n")
    return ws


def test_a_new_task_starts_with_nothing_unsaved(tmp_path):
    ws = _project(tmp_path)
    e = Engine(ws)
    init = e.init("baseline", goal="start clean")
    assert [x.split(" (")[0] for x in init["skipped_paths"]] == ["sensitive: .env"]  # said at init, once
    fresh = e.resume()
    assert (fresh["head"], fresh["drift_total"], fresh["drift_paths"]) == (0, 0, [])
    write(ws, "src/m3.py", "x = 'edited'\n")
    one = e.resume()
    assert (one["drift_total"], one["drift_paths"]) == (1, ["src/m3.py"])
    r = e.save("first step")
    assert r["index"] == 1 and r["changed"] == 1 and r["newly_left_out"] == []
    log = e.log()
    assert [(x["id"], x["kind"]) for x in log] == [("s0001", "step"), ("s0000", "init")]
    assert log[0]["files_changed"] == 1  # the first step lists only what it changed
    shown = e.show(index=1)
    assert [s["id"] for s in shown["steps"]] == ["s0001"] and shown["steps"][0]["files_changed"] == 1
    store = ws / ".checkpoints"
    tip = git(store, "rev-parse", f"refs/checkpoints/tasks/{init['task_id']}/head").decode().strip()
    root = git(store, "rev-list", "--max-parents=0", tip).decode().split()
    files = git(store, "ls-tree", "-r", "--name-only", root[0]).decode().split()
    assert len(root) == 1 and "src/m3.py" in files and "README.md" in files and ".env" not in files
    # the CLI's words, as a person reads them
    text = subprocess.run(TC + ["-C", str(ws), "resume"], capture_output=True, text=True, env=clean_env(TC_GIT="off"))
    assert "Unsaved changes: none" in text.stdout, text.stdout + text.stderr
    text = subprocess.run(TC + ["-C", str(ws), "show", "0"], capture_output=True, text=True, env=clean_env(TC_GIT="off"))
    assert "init s0000: baseline" in text.stdout and "the project as the task started" in text.stdout, text.stdout
    assert "0 files changed" not in text.stdout  # (nothing before it to count against)


def test_restore_to_the_baseline_undo_export_and_import(tmp_path):
    ws = _project(tmp_path)
    e = Engine(ws)
    e.init("baseline")
    start = tree_state(ws)
    write(ws, "src/m0.py", "x = 'changed'\n")
    write(ws, "src/new.py", "print('new')\n")
    (ws / "README.md").unlink()
    e.save("one")
    one = tree_state(ws)
    r = e.restore(at="s0000", apply=True)  # back to how the project was at init
    assert r["applied"] and tree_state(ws) == start
    assert e.resume()["head"] == 0
    u = e.undo(apply=True)
    assert u["applied"] and tree_state(ws) == one
    assert e.save("two")["index"] == 2  # numbering goes on
    pkg = e.export(to=str(tmp_path / "out"))["path"]
    dst = tmp_path / "dst"
    dst.mkdir()
    e2 = Engine(dst)
    imp = e2.import_(pkg, apply=True)
    no_env = lambda t: {k: v for k, v in t.items() if k != b".env"}  # noqa: E731  (never in a snapshot)
    assert imp["task_id"] and tree_state(dst) == no_env(tree_state(ws))
    assert [x["id"] for x in e2.log() if x["kind"] in ("step", "init")] == ["s0002", "s0001", "s0000"]
    r2 = e2.restore(index=0, apply=True)  # the imported task's baseline is a point too
    assert r2["applied"] and tree_state(dst) == no_env(start)
    fsck(dst / ".checkpoints")


def test_a_task_started_before_the_baseline_has_no_step_0(tmp_path):
    """A store written before issue 30: its init commit is an empty tree without a files record;
    restoring to step 0 would delete the workspace, so it is refused with a message."""
    ws = _project(tmp_path)
    e = Engine(ws)
    task = e.init("old")["task_id"]
    store = ws / ".checkpoints"
    # rewrite the task as an old store had it: the init commit's note without `files`, an empty tree
    tip = git(store, "rev-parse", f"refs/checkpoints/tasks/{task}/head").decode().strip()
    note = json.loads(git(store, "notes", "--ref=checkpoints", "show", tip))
    note.pop("files", None)
    empty = git(store, "mktree", input=b"").decode().strip()
    msg = git(store, "log", "-1", "--format=%B", tip).decode()
    old = git(store, "commit-tree", empty, "-m", msg).decode().strip()
    git(store, "notes", "--ref=checkpoints", "add", "-f", "-m", json.dumps(note), old)
    git(store, "update-ref", f"refs/checkpoints/tasks/{task}/head", old)
    with pytest.raises(NotFound, match="before tc-git recorded a baseline"):
        Engine(ws).restore(index=0)
