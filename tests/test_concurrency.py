"""Four processes saving and capturing on one workspace at once: 200 operations, none lost."""
from __future__ import annotations

import multiprocessing as mp
import os
import traceback

import pytest
from conftest import fsck, git, write

from tc_git.engine import Engine

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("fsck_after")]

WORKERS, OPS = 4, 50


def _worker(root: str, wid: int, queue) -> None:
    os.environ["TC_GIT"] = "off"
    os.environ["TC_LOCK_TIMEOUT"] = "120"
    results = []
    try:
        e = Engine(root)
        for i in range(OPS):
            # edits happen outside the lock, as an agent's would
            with open(os.path.join(root, f"w{wid}", f"f{i % 7}.txt"), "w") as f:
                f.write(f"worker {wid} op {i}\n")
            try:
                if i % 2 == 0:
                    r = e.save(f"w{wid} op{i}", conclusion=f"by {wid}")
                    results.append(("step", r["index"], r["commit"], r["idempotent"]))
                else:
                    r = e.capture()
                    results.append(("drift", r["drift_id"], r["commit"], not r["captured"]))
            except Exception as ex:  # noqa: BLE001 - reported to the parent
                from tc_git.base.errors import StoreBusy

                results.append(("busy" if isinstance(ex, StoreBusy) else "error", repr(ex),
                                traceback.format_exc(), None))
    finally:
        queue.put((wid, results))


def test_four_processes_200_operations(ws):
    for w in range(WORKERS):
        write(ws, f"w{w}/f0.txt", "start\n")
    e = Engine(ws)
    e.init("concurrency")
    e.save("base")
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(str(ws), w, q)) for w in range(WORKERS)]
    for p in procs:
        p.start()
    results = {}
    for _ in procs:
        wid, res = q.get(timeout=300)
        results[wid] = res
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    flat = [r for res in results.values() for r in res]
    assert len(flat) == WORKERS * OPS
    errors = [r for r in flat if r[0] == "error"]
    assert errors == [], errors[0][2] if errors else ""
    ok = [r for r in flat if r[0] in ("step", "drift")]
    assert len(ok) >= WORKERS * OPS * 0.95, f"too many StoreBusy: {len(flat) - len(ok)}"
    # every reported step and drift is in the chain, at the commit that was reported
    fresh = Engine(ws)
    chain = {x["commit"]: x for x in fresh.log(limit=100_000)}
    steps = {x["index"]: x["commit"] for x in chain.values() if x["kind"] == "step"}
    drifts = {x["id"]: x["commit"] for x in chain.values() if x["kind"] == "drift"}
    for kind, ident, commit, noop in ok:
        if kind == "step":
            assert steps.get(ident) == commit, (ident, commit)
        elif not noop:
            assert drifts.get(ident) == commit, (ident, commit)
    # step numbers are unique and dense: none was lost or written twice
    new_steps = sorted(r[1] for r in ok if r[0] == "step" and not r[3])
    assert len(new_steps) == len(set(new_steps))
    assert sorted(steps) == list(range(1, max(steps) + 1))
    drift_ids = [r[1] for r in ok if r[0] == "drift" and not r[3]]
    assert len(drift_ids) == len(set(drift_ids))
    # the chain is linear (every commit has exactly one parent except the root)
    revs = git(fresh.store.path, "rev-list", "--parents", f"refs/checkpoints/tasks/{fresh.resume()['task_id']}/head")
    assert all(len(line.split()) == 2 for line in revs.decode().splitlines()[:-1])
    fsck(fresh.store.path)
    leftovers = [f for f in os.listdir(fresh.store.path) if f.endswith(".lock")]
    assert leftovers == []
