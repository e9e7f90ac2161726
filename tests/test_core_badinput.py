"""Bad input gives a clear TcError (CLI: exit 2 and a message) and changes nothing."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
from conftest import clean_env, dir_fingerprint, tc, write

from tc_git.base.errors import BadInput, NotFound, TaskClosed, TcError, UnsafeRoot
from tc_git.engine import Engine

pytestmark = pytest.mark.usefixtures("fsck_after")


@pytest.fixture
def fake_home(tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    return home


def _roots(tmp_path: Path, home: Path):
    f = tmp_path / "a-file"
    f.write_text("x")
    return {
        "missing": (tmp_path / "does-not-exist", "does not exist"),
        "file": (f, "not a directory"),
        "slash": (Path("/"), "filesystem root"),
        "home": (home, "home directory"),
        "empty": ("", "root is empty"),
    }


@pytest.mark.parametrize("case", ["missing", "file", "slash", "home", "empty"])
def test_bad_roots_engine(tmp_path, fake_home, case):
    root, msg = _roots(tmp_path, fake_home)[case]
    before = dir_fingerprint(tmp_path)
    with pytest.raises((UnsafeRoot, BadInput)) as ei:
        Engine(root).init("t")
    assert msg in ei.value.message
    assert dir_fingerprint(tmp_path) == before
    assert not Path(str(root) or "/nonexistent").joinpath(".checkpoints").exists() or case == "slash"
    assert not (tmp_path / "does-not-exist").exists()


@pytest.mark.parametrize("case", ["missing", "file", "slash", "home"])
def test_bad_roots_cli(tmp_path, fake_home, case):
    root, msg = _roots(tmp_path, fake_home)[case]
    before = dir_fingerprint(tmp_path)
    env = clean_env(HOME=str(fake_home))
    for args in (["init", "t"], ["save", "s"], ["resume"], ["restore", "1"]):
        r = tc("-C", root, *args, env=env)
        assert r.returncode == 2, (args, r.stdout, r.stderr)
        assert msg in r.stderr.decode(), r.stderr
        assert b"Traceback" not in r.stderr
    r = tc("--json", "-C", root, "save", "s", env=env)
    assert r.returncode == 2 and b'"isError": true' in r.stdout and b"unsafe_root" in r.stdout
    assert dir_fingerprint(tmp_path) == before


def test_no_store_is_created_by_reads_or_saves(ws):
    e = Engine(ws)
    for call in (lambda: e.save("s"), lambda: e.resume(), lambda: e.show(), lambda: e.capture(),
                 lambda: e.restore(1), lambda: e.restore(1, apply=True), lambda: e.log(),
                 lambda: e.compress(), lambda: e.switch("t123")):
        with pytest.raises(NotFound) as ei:
            call()
        # what to do next is a hint (start a task, or list them), said by each front end in its words
        assert {h.action for h in ei.value.hints} & {"init", "tasks"}, ei.value.message
    assert list(ws.iterdir()) == []
    r = tc("-C", ws, "save", "s")
    assert r.returncode == 2 and b"`tc-git init <name>`" in r.stderr  # the CLI speaks in commands, not MCP tools
    assert list(ws.iterdir()) == []


@pytest.fixture
def task(ws):
    write(ws, "a.txt", "a\n")
    e = Engine(ws)
    e.init("t")
    e.save("one")
    write(ws, "a.txt", "b\n")
    e.save("two")
    write(ws, "a.txt", "unsaved\n")
    return e


def _unchanged(e: Engine):
    """Fingerprint of the store and the workspace (nothing may change on a refused call)."""
    return dir_fingerprint(e.store.path), (e.root / "a.txt").read_bytes()


@pytest.mark.parametrize("kwargs,err,msg", [
    ({"index": 9}, NotFound, "has no step"),
    ({"drift_id": "d0042"}, NotFound, "has no drift"),
    ({}, BadInput, "exactly one of at"),
    ({"index": 1, "drift_id": "d0001"}, BadInput, "exactly one of at"),
    ({"index": -1}, BadInput, "index must be"),  # (0 is the task's baseline: test_baseline.py)
    ({"index": "1"}, BadInput, "index must be"),
    ({"index": True}, BadInput, "index must be"),
    ({"drift_id": "x1"}, BadInput, "drift_id must look like"),
])
def test_restore_bad_arguments(task, kwargs, err, msg):
    before = _unchanged(task)
    for apply in (False, True):
        with pytest.raises(err) as ei:
            task.restore(apply=apply, **kwargs)
        assert msg in ei.value.message
    assert _unchanged(task) == before


def test_show_unknown_step_and_bad_limit(task):
    before = _unchanged(task)
    with pytest.raises(NotFound):
        task.show(index=7)
    with pytest.raises(BadInput):
        task.show(limit=0)
    with pytest.raises(NotFound):
        task.resume(task_id="t999")
    with pytest.raises(NotFound):  # a task may be named by its name: looked up, never a path
        task.resume(task_id="../etc")
    with pytest.raises(BadInput):
        task.save("")
    with pytest.raises(BadInput):
        task.save("x", paths=["a.txt"])
    with pytest.raises(BadInput):
        task.save("x", verified="not a list")
    with pytest.raises(BadInput):
        task.init("")
    with pytest.raises(BadInput):
        task.compress(minimum=-1)
    assert _unchanged(task) == before


def test_cli_bad_arguments(task):
    ws = task.root
    before = _unchanged(task)
    for args, msg in ((["restore", "9"], b"has no step"), (["restore", "--drift", "d0042"], b"has no drift"),
                      (["show", "7"], b"has no step"), (["restore", "--drift", "zz"], b"is not a point"),
                      (["restore", "r0009"], b"has no restore"), (["restore", "s0009"], b"has no step"),
                      (["restore", "ffff0000"], b"no commit ffff0000"), (["switch", "t404"], b"no task 't404'")):
        r = tc("-C", ws, *args)
        assert r.returncode == 2, (args, r.stderr)
        assert msg in r.stderr and b"Traceback" not in r.stderr
    r = tc("-C", ws, "restore", "1", "--drift", "d0001")  # two points
    assert r.returncode == 2 and b"name the point to restore to" in r.stderr
    r = tc("-C", ws, "restore")
    assert r.returncode == 2
    assert _unchanged(task) == before


def test_closed_task_refuses_writes(task):
    ws = task.root
    r = task.save("final", conclusion="done", close=True)
    assert r["closed"] and r["status"] == "closed"
    # reading stays possible (a preview refreshes the private stat cache, nothing else)
    assert task.restore(1)["applied"] is False
    assert task.resume()["status"] == "closed"
    before = _unchanged(task)
    for call, msg in ((lambda: task.save("more"), "closed"), (lambda: task.capture(), "closed"),
                      (lambda: task.restore(1, apply=True), "closed"),
                      (lambda: task.switch(r["task_id"]), "cannot be reopened")):
        with pytest.raises(TaskClosed) as ei:
            call()
        assert msg in ei.value.message
    for args in (["save", "x"], ["capture"], ["restore", "1", "--apply"]):
        p = tc("-C", ws, *args)
        assert p.returncode == 2 and b"closed" in p.stderr, (args, p.stderr)
    assert _unchanged(task) == before


def test_errors_are_tcerrors_with_codes():
    for cls in (BadInput, NotFound, TaskClosed, UnsafeRoot):
        assert issubclass(cls, TcError) and cls.code != "error"


def test_root_is_a_store(ws):
    e = Engine(ws)
    e.init("t")
    with pytest.raises(UnsafeRoot):
        Engine(ws / ".checkpoints")
    assert os.path.isdir(ws / ".checkpoints")
