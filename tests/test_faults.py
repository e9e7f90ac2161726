"""SIGKILL `tc save` and `tc restore --apply` at random moments on a 3000-file workspace.

After every kill: `git fsck --full` is clean, every step that reported success is still in the
chain, the next operation succeeds (stale locks recovered), and the workspace is as before, as
after, or brought back by the undo that the restore journal names (`tc resume` warns about it).
"""
from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import time

import pytest
from conftest import TC, clean_env, fsck, tc, tree_state, write

from tc_git.engine import Engine

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("fsck_after")]

N_FILES = 3000
TRIALS = int(os.environ.get("FAULT_TRIALS", "30"))
ENV = clean_env(TC_GIT="off", TC_LOCK_TIMEOUT="20")


def _make_workspace(ws, rng):
    for i in range(N_FILES):
        write(ws, f"pkg{i % 30:02d}/mod{i // 30:03d}.py", f"# file {i}\n" + "x = %d\n" % i * rng.randint(1, 20))


def _spawn(ws, *args):
    return subprocess.Popen([*TC, "--json", "-C", str(ws), *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=ENV)


def _kill_at(proc, delay):
    """SIGKILL after `delay` s; returns (killed, rc, stdout)."""
    try:
        out, _err = proc.communicate(timeout=delay)
        return False, proc.returncode, out
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGKILL)
        out, _err = proc.communicate()
        return True, proc.returncode, out


def _timed(ws, *args) -> tuple[float, dict]:
    t0 = time.monotonic()
    p = _spawn(ws, *args)
    out, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    return time.monotonic() - t0, json.loads(out)


def _steps(ws) -> dict[int, str]:
    return {x["index"]: x["commit"] for x in Engine(ws).log(limit=100_000) if x["kind"] == "step"}


def _check_store(ws, reported: dict[int, str]):
    fsck(ws / ".checkpoints")
    steps = _steps(ws)
    for idx, commit in reported.items():
        assert steps.get(idx) == commit, f"step {idx} reported as {commit} is gone"


def test_sigkill_tc_save(ws):
    rng = random.Random(1234)
    _make_workspace(ws, rng)
    tc("-C", ws, "init", "faults", env=ENV, check=True)
    _t, first = _timed(ws, "save", "base")
    reported = {first["index"]: first["commit"]}
    files = sorted(p for p in ws.rglob("*.py"))

    def work(trial):  # each trial has real work to store: 400 edits and a new binary
        for p in rng.sample(files, 400):
            p.write_text(p.read_text() + f"# trial {trial}\n")
        write(ws, f"new/t{trial}/added.bin", os.urandom(rng.randint(64 << 10, 256 << 10)))

    work(-1)
    t_save, r = _timed(ws, "save", "calibration")  # start-up + the work of one trial
    reported[r["index"]] = r["commit"]
    killed = 0
    for trial in range(TRIALS):
        work(trial)
        before = tree_state(ws)
        proc = _spawn(ws, "save", f"trial {trial}", "-c", f"conclusion {trial}")
        was_killed, rc, out = _kill_at(proc, rng.uniform(t_save * 0.3, t_save * 1.1))
        if was_killed:
            killed += 1
        else:
            assert rc == 0, out
            r = json.loads(out)
            reported[r["index"]] = r["commit"]
        _check_store(ws, reported)
        assert tree_state(ws) == before  # a save never writes the workspace
        # the next operation succeeds at once: stale locks are recovered, not waited for
        if trial % 5 == 0:
            t0 = time.monotonic()
            r = tc("--json", "-C", ws, "save", f"after kill {trial}", env=clean_env(TC_GIT="off", TC_LOCK_TIMEOUT="5"))
            assert r.returncode == 0, r.stderr
            r = json.loads(r.stdout)
            reported[r["index"]] = r["commit"]
            assert time.monotonic() - t0 < 10
        else:
            Engine(ws).capture()
    assert killed >= TRIALS // 3, f"only {killed} of {TRIALS} saves were actually killed"
    # the chain is whole and the step numbers were never reused
    steps = _steps(ws)
    assert sorted(steps) == list(range(1, max(steps) + 1))
    fsck(ws / ".checkpoints")


def test_sigkill_tc_restore_apply(ws):
    rng = random.Random(99)
    _make_workspace(ws, rng)
    tc("-C", ws, "init", "restore faults", env=ENV, check=True)
    _t, a = _timed(ws, "save", "A")
    files = sorted(ws.rglob("*.py"))
    for p in rng.sample(files, 250):
        p.write_text("changed in B\n" + p.read_text())
    for p in rng.sample(files, 40):
        p.unlink()
    os.chmod(files[0], 0o755) if files[0].exists() else None
    for i in range(60):
        write(ws, f"added/b{i // 10}/n{i}.txt", f"new in B {i}\n")
    _t, b = _timed(ws, "save", "B")
    reported = {1: a["commit"], 2: b["commit"]}
    state_of = {2: tree_state(ws)}
    t_restore, r = _timed(ws, "restore", "1", "--apply")
    state_of[1] = tree_state(ws)
    assert state_of[1] != state_of[2]
    current = 1
    outcomes = {"before": 0, "after": 0, "undone": 0}
    for trial in range(TRIALS):
        target = 2 if current == 1 else 1
        before = state_of[current]
        assert tree_state(ws) == before
        proc = _spawn(ws, "restore", str(target), "--apply")
        was_killed, rc, out = _kill_at(proc, rng.uniform(t_restore * 0.3, t_restore * 1.1))
        if not was_killed:
            assert rc == 0, out
        _check_store(ws, reported)
        journal = ws / ".checkpoints" / "tc" / "restore-journal.json"
        now = tree_state(ws)
        if journal.exists():
            j = json.loads(journal.read_text())
            res = tc("--json", "-C", ws, "resume", env=ENV)
            assert res.returncode == 0
            warn = json.loads(res.stdout)["health"]["errors"]
            assert warn and j["undo"] in warn[0], warn
            assert "interrupted" in tc("-C", ws, "resume", env=ENV).stdout.decode()
            # undo with the drift the journal names: the workspace comes back exactly
            u = tc("--json", "-C", ws, "restore", "--drift", j["undo"], "--apply", env=ENV)
            assert u.returncode == 0, u.stderr
            assert tree_state(ws) == before, f"trial {trial}: undo did not bring the workspace back"
            outcomes["undone"] += 1
            journal.unlink(missing_ok=True)
        elif now == before:
            outcomes["before"] += 1
        else:
            assert now == state_of[target], f"trial {trial}: workspace is neither before nor after"
            outcomes["after"] += 1
            current = target
    assert outcomes["undone"] + outcomes["before"] > 0, outcomes
    # the next operation succeeds and the steps are intact
    assert tc("-C", ws, "save", "after all", env=clean_env(TC_GIT="off", TC_LOCK_TIMEOUT="5")).returncode == 0
    _check_store(ws, reported)
