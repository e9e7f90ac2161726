"""Loose objects are packed as they pile up (repack.pack_loose; issue 33), stock git judging."""
from __future__ import annotations

import pytest
from conftest import git, write

from tc_git.engine import Engine
from tc_git.storage import repack

pytestmark = pytest.mark.usefixtures("fsck_after")


def _loose(store) -> int:
    counts = dict(x.split(": ", 1) for x in git(store, "count-objects", "-v").decode().splitlines())
    return int(counts["count"])


@pytest.fixture
def e(ws):
    write(ws, "a.txt", "one\n")
    eng = Engine(ws)
    eng.init("loose")
    return eng


def test_forced_pass_packs_every_loose_object_and_history_reads_the_same(e, ws, monkeypatch):
    monkeypatch.setattr(repack, "LOOSE_AUTO", 1 << 30)  # (no save packs them first: this pass does)
    for i in range(6):
        write(ws, f"d{i}/f.txt", f"{i}\n")
        e.save(f"s{i}")
    write(ws, "a.txt", "drift\n")
    e.capture()
    before = _loose(e.store.path)
    assert before > 20
    log_before = e.log(limit=200)
    n = repack.pack_loose(e.store.repo)
    assert n == before and _loose(e.store.path) == 0
    git(e.store.path, "fsck", "--full", "--strict")
    assert e.log(limit=200) == log_before
    r = e.restore(2, apply=True)
    assert r["applied"] and (ws / "d1" / "f.txt").read_text() == "1\n" and not (ws / "d2").exists()
    assert repack.pack_loose(e.store.repo) > 0  # the restore's own commits and notes
    assert repack.pack_loose(e.store.repo) == 0  # nothing left


def test_saves_pack_them_by_themselves_past_the_threshold(e, ws, monkeypatch):
    monkeypatch.setattr(repack, "LOOSE_AUTO", 0)  # (the estimate is never below 0: every save packs)
    for i in range(15):
        write(ws, f"f{i % 5}.txt", f"{i}\n")
        e.save(f"s{i}")
        assert _loose(e.store.path) == 0, i
        if i % 5 == 4:
            write(ws, "drift.txt", str(i))
            assert e.capture()["captured"]
            assert _loose(e.store.path) == 0, i
    git(e.store.path, "fsck", "--full", "--strict")
    assert [x["index"] for x in e.show(limit=200)["steps"]] == list(range(1, 16))
    git(e.store.path, "bundle", "create", "-q", str(ws.parent / "h.bundle"), "--all")
    git(e.store.path, "bundle", "verify", "-q", str(ws.parent / "h.bundle"))
