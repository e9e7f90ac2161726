"""Timeline.walk() through the per-process chain memo reads the same chain as a walk of the
commits themselves: after new commits, after a walk stopped early, after compress rewrote it."""
from __future__ import annotations

import os

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


def _parsed(monkeypatch) -> list:
    """Counts the commits a walk parses (timeline.entry_of calls)."""
    seen: list = []
    real = timeline.entry_of

    def counting(c):
        seen.append(c.id)
        return real(c)

    monkeypatch.setattr(timeline, "entry_of", counting)
    return seen


def _task(ws, steps: int) -> Engine:
    write(ws, "a.txt", "0\n")
    e = Engine(ws)
    e.init("file")
    for i in range(steps):
        write(ws, "a.txt", f"{i}\n")
        e.save(f"s{i}")
    return e


def test_chain_file_serves_the_next_process(ws, monkeypatch):
    """A long walk leaves the chain on disk; a new process parses only the commits made since."""
    e = _task(ws, 8)
    monkeypatch.setattr(timeline, "CHAIN_FILE_AFTER", 3)
    timeline._chains.clear()
    whole = _same(e)
    path = ws / ".checkpoints" / "tc" / "chain" / f"{e._timeline().task_id}.json"
    assert path.is_file()
    parsed = _parsed(monkeypatch)
    timeline._chains.clear()  # a new process
    assert [(x.oid, x.kind, x.step, x.drift, x.parent) for x in e._timeline().walk()] == whole
    assert parsed == []  # from the file alone
    for i in range(2):
        write(ws, "a.txt", f"more {i}\n")
        e.save(f"more {i}")
    timeline._chains.clear()
    parsed.clear()
    assert [x["index"] for x in e.show(limit=200)["steps"]] == list(range(1, 11))
    assert len(set(parsed)) == 2  # the two new steps (the head also read by itself), then the file
    assert _same(e)[0][1:3] == ("step", 10)
    loads: list = []
    real = timeline._load_chain
    monkeypatch.setattr(timeline, "_load_chain", lambda tl: loads.append(1) or real(tl))
    timeline._chains.clear()
    assert [x["index"] for x in e.log(limit=1)] == [10]  # a walk that stops early...
    assert [x["index"] for x in e.log(limit=2)] == [10, 9]
    assert len(loads) == 1  # ...still leaves the file's chain as the memo


@pytest.mark.parametrize("craft", ["garbage", "unlinked", "bool step", "not to the start", "too big", "stale",
                                   "fifo", "symlink"])
def test_chain_file_that_does_not_fit_is_not_used(ws, monkeypatch, craft):
    """A damaged, planted or outdated chain file changes nothing: the commits are read instead."""
    import json

    e = _task(ws, 6)
    monkeypatch.setattr(timeline, "CHAIN_FILE_AFTER", 3)
    timeline._chains.clear()
    truth = _same(e)
    path = ws / ".checkpoints" / "tc" / "chain" / f"{e._timeline().task_id}.json"
    rows = json.loads(path.read_text())["rows"]
    if craft == "garbage":
        path.write_bytes(b"\xff{not json")
    elif craft == "unlinked":  # a step dropped from the middle: the chain no longer links
        path.write_text(json.dumps({"version": 1, "rows": rows[:2] + rows[3:]}))
    elif craft == "bool step":
        rows[0][2] = True
        path.write_text(json.dumps({"version": 1, "rows": rows}))
    elif craft == "not to the start":  # the oldest entries cut off
        path.write_text(json.dumps({"version": 1, "rows": rows[:3]}))
    elif craft == "too big":
        monkeypatch.setattr(timeline, "CHAIN_FILE_MAX", 100)
    elif craft in ("fifo", "symlink"):  # planted in the file's place: never blocks, never followed
        path.unlink()
        if craft == "fifo":
            os.mkfifo(path)
        else:
            (path.parent / "elsewhere.json").write_text(json.dumps({"version": 1, "rows": rows[:3]}))
            path.symlink_to("elsewhere.json")
    elif craft == "stale":  # compress rewrote the chain after the file was written
        monkeypatch.setattr(timeline, "CHAIN_FILE_AFTER", 10**6)
        e.compress(keep_seconds=0, minimum=0, maximum=1)
        truth = [(x.oid, x.kind, x.step, x.drift, x.parent) for x in e._timeline().walk(e._timeline().head_oid())]
    timeline._chains.clear()
    assert _same(e) == truth
    assert [x["title"] for x in e.show()["steps"]] == [f"s{i}" for i in range(6)]


def test_reading_notes_keeps_no_memory(ws):
    """A long-lived server reads notes again and again (every show lists up to 50): reading them
    must not keep anything per lookup (a pygit2 `tree[name]` kept every name asked for: ~90
    bytes a lookup, 2 MiB per 25,000)."""
    import gc
    import tracemalloc

    e = _task(ws, 12)
    oids = [x.oid for x in e._timeline().walk()]

    def read_all():
        for _ in range(20):
            tl = timeline.Timeline(e.repo, e._timeline().task_id)  # a new instance: as a new call
            assert all(tl.record(o).get("kind") for o in oids)

    read_all()  # warm-up: caches fill
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        for _ in range(10):
            read_all()
        gc.collect()
        grown = sum(s.size_diff for s in tracemalloc.take_snapshot().compare_to(before, "filename"))
    finally:
        tracemalloc.stop()
    assert grown < 64 << 10, f"{grown} bytes kept after {10 * 20 * len(oids)} note reads"
