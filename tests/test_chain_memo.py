"""Timeline.walk() through the per-process chain memo reads the same chain as a walk of the
commits themselves: after new commits, after a walk stopped early, after compress rewrote it."""
from __future__ import annotations

import pytest
from conftest import write

from tc_git.engine import Engine
from tc_git.timeline import chain as timeline

pytestmark = pytest.mark.usefixtures("fsck_after")


def _same(e) -> list:
    tl = e._timeline()
    memo = [(x.oid, x.kind, x.step, x.drift, x.parent) for x in tl.walk()]
    raw = [(x.oid, x.kind, x.step, x.drift, x.parent) for x in tl.walk(tl.head_oid())]
    assert memo == raw and memo
    return memo


def test_memo_follows_new_commits_early_stops_and_rewrites(ws):
    write(ws, "a.txt", "0\n")
    e = Engine(ws)
    e.init("memo")
    for i in range(5):
        write(ws, "a.txt", f"{i}\n")
        e.save(f"s{i}")
        write(ws, f"d{i}.txt", "drift\n")
        e.capture()
    assert len(_same(e)) == 11  # init, 5 steps, 5 drifts
    write(ws, "a.txt", "new\n")
    e.save("after the memo")
    assert [x["index"] for x in e.log(limit=2)] == [6, 5]  # stops early: memo not joined yet
    chain = _same(e)
    assert len(chain) == 12 and chain[0][1:3] == ("step", 6)
    e.restore(2, apply=True)
    assert e.log(limit=1)[0]["kind"] == "restore"
    assert len(_same(e)) == 14  # the restore point's drift and the restore
    e.compress(keep_seconds=0, minimum=0, maximum=1)
    after = _same(e)
    assert [x[1:3] for x in after if x[1] == "step"] == [("step", n) for n in (6, 5, 4, 3, 2, 1)]
    timeline._chains.clear()  # a new process: read whole
    assert _same(e) == after
    e.show(include_drift=True)
    assert e.show(index=3)["steps"][0]["title"] == "s2"
