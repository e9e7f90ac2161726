"""None's reference count never falls across engine calls (Python 3.11; issue 33).

Before 3.12, None, True and False are ordinary objects with a reference count: a C extension
that hands one out without owning a reference takes one from its count at each call, and the
interpreter aborts ("Fatal Python error: none_dealloc") when it reaches zero, at exit or in the
middle of a long MCP server session. pygit2 1.21's `discover_repository` did exactly that on
every miss (one per restore preview, ~3 per save: benchmarks/results/pygit2-none-refcount.md).

How this is measured without flaking. The count also moves for reasons that are no leak:
lazy initialisation (a module's `x = None` replaced on first use), caches filling, a save's
first ~2,000 steps (a bounded -50 in all, measured: what made an earlier absolute threshold of
-40 over 2,082 calls fail once), objects that only a collection frees, transient threads. So
every count is taken after `gc.collect()` with tc-git's transient threads joined and deferred
index writes flushed, and a leak is told from that churn by its shape, never by an absolute
number: a leak takes at least one reference per call of the leaking kind, every time.

* per call: each entry point runs alone, counted around every call; a leaking call falls on
  every call, churn on a few. It fails when at least half of the calls fell.
* mixed: rounds of every kind in one process, a window of R rounds, then one of 2R. It fails
  when the second window fell by a quarter of its calls AND by more than 1.5x the first (a leak
  grows with the calls; warm-up churn does not).
"""
from __future__ import annotations

import gc
import subprocess
import sys
import threading

import pytest
from conftest import clean_env, write

from tc_git.engine import Engine
from tc_git.handoff import userrepo
from tc_git.storage import handles, store
from tc_git.timeline import capture

pytestmark = pytest.mark.skipif(sys.getrefcount(None) >= 1 << 30,
                                reason="None is immortal here (Python 3.12+): its count never moves")

SINGLETONS = {"None": None, "True": True, "False": False}
# threads that run briefly after a call (a loop thread such as the idle watcher is not joined)
TRANSIENT = ("tc-heap-settle", "tc-index-write", "tc-restore-write", "Thread-")


def _quiesce() -> None:
    if handles.enabled():
        handles.flush_all()
    for t in threading.enumerate():
        if t is not threading.current_thread() and t.name.startswith(TRANSIENT):
            t.join(60)
    for _ in range(3):
        if not gc.collect():
            break


def _counts() -> dict[str, int]:
    _quiesce()
    return {k: sys.getrefcount(v) for k, v in SINGLETONS.items()}


def _delta(a: dict, b: dict) -> dict:
    return {k: b[k] - a[k] for k in a}


@pytest.fixture
def e(tmp_path):
    ws = tmp_path / "ws"
    for i in range(4):
        write(ws, f"f{i}.txt", f"{i}\n")
    eng = Engine(ws)
    eng.init("refcount", goal="count None")
    eng.save("first")
    write(ws, "f0.txt", "second\n")
    eng.save("second")
    eng.restore(1, apply=True)  # something to undo
    return eng


def _kinds(e) -> dict:
    ws = e.root
    n = [0]

    def edit():
        n[0] += 1
        write(ws, f"f{n[0] % 4}.txt", f"{n[0]}\n")

    def save():
        edit()
        e.save(f"s{n[0]}")

    def capture_():
        edit()
        e.capture()

    return {
        "save": save,
        "capture": capture_,
        "show": lambda: e.show(limit=5),
        "show drift": lambda: e.show(include_drift=True, limit=5),
        "log": lambda: e.log(limit=10),
        "resume": lambda: e.resume(),
        "tasks": lambda: e.tasks(),
        "diff": lambda: e.diff(),
        "restore preview": lambda: e.restore(1),
        "undo preview": lambda: e.undo(),
        "restore apply": lambda: e.restore(1, apply=True),
        "undo apply": lambda: e.undo(apply=True),
        "compress": lambda: e.compress(keep_seconds=0, minimum=1),
    }


def _falls_per_call(call, n: int) -> dict[str, int]:
    """How many of `n` calls (after two unmeasured ones) lowered each count."""
    call()
    call()
    fell = dict.fromkeys(SINGLETONS, 0)
    a = _counts()
    for _ in range(n):
        call()
        b = _counts()
        for k, d in _delta(a, b).items():
            fell[k] += d < 0
        a = b
    return fell


def test_pygit2_entry_points_keep_none(tmp_path):
    """The calls that used pygit2.discover_repository, on a miss and on a hit: 300 each."""
    nogit = tmp_path / "nogit"
    nogit.mkdir()
    ws = tmp_path / "ws"
    write(ws, "a.txt", "a\n")
    e = Engine(ws)
    e.init("entry")
    w = capture.Workspace(e.store, e.policy)
    calls = {}
    if store.repository_around(nogit) is None:  # (a temporary directory inside a repository: no miss)
        calls["repository_around (miss)"] = lambda: store.repository_around(nogit)
        calls["Workspace.base (miss)"] = w.base
        calls["user_gitdir (miss)"] = lambda: userrepo.user_gitdir(e.store)
    subprocess.run(["git", "init", "-q", str(ws)], check=True, capture_output=True, env=clean_env())
    assert store.repository_around(ws) is not None and userrepo.user_gitdir(e.store) is not None
    calls["repository_around (hit)"] = lambda: store.repository_around(ws)
    calls["Workspace.base (hit, unborn)"] = w.base
    calls["user_gitdir (hit)"] = lambda: userrepo.user_gitdir(e.store)
    bad = {}
    for name, call in calls.items():
        for _ in range(5):
            call()
        a = _counts()
        for _ in range(300):
            call()
        d = _delta(a, _counts())
        if min(d.values()) <= -150:
            bad[name] = d
    assert not bad, f"reference counts fell by about one per call: {bad}"


def test_each_engine_call_keeps_none(e):
    """Every engine entry point alone, counted around each call: a leak falls every time."""
    bad = {}
    gc.collect()
    gc.freeze()  # what exists now is never collected: each count's collection scans only the new
    try:
        for name, call in _kinds(e).items():
            n = 4 if name == "compress" else 8
            fell = _falls_per_call(call, n)
            if max(fell.values()) * 2 >= n:
                bad[name] = f"{fell} of {n} calls"
    finally:
        gc.unfreeze()
    assert not bad, f"calls that lowered None/True/False's count most of the time: {bad}"


def test_mixed_operations_keep_none(e):
    """Hundreds of mixed calls in one process, with deferred index writes on as in the server."""
    kinds = _kinds(e)
    cheap = ["show", "show drift", "log", "resume", "tasks", "diff", "restore preview", "undo preview"]

    def round_(i: int) -> int:
        kinds["save"]()
        kinds["capture"]()
        for _ in range(3):
            for k in cheap:
                kinds[k]()
        ops = 2 + 3 * len(cheap)
        if i % 4 == 3:
            kinds["restore apply"]()
            kinds["undo apply"]()
            ops += 2
        if i % 12 == 11:
            kinds["compress"]()
            ops += 1
        return ops

    handles.enable()
    try:
        rounds = 12
        for i in range(3):  # warm-up, not counted
            round_(i)
        windows = []
        for size in (rounds, 2 * rounds):
            a = _counts()
            ops = sum(round_(i) for i in range(size))
            windows.append((ops, _delta(a, _counts())))
    finally:
        handles.enable(False)
        _quiesce()
    (ops_a, da), (ops_b, db) = windows
    total = ops_a + ops_b + 3 * 26
    leaking = {k: (da[k], db[k]) for k in SINGLETONS
               if db[k] <= -ops_b / 4 and db[k] < 1.5 * min(da[k], 0) - 1}
    assert not leaking, (f"counts fell with the number of calls ({ops_a} then {ops_b} calls, "
                         f"{total} in all): {leaking}")
    assert ops_b >= 2 * ops_a - 2
