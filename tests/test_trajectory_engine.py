"""Engine.record: a long first recording goes to one pack with the same ids as loose writes,
and the unchanged-file shortcut never returns a stale result."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from conftest import TRANSCRIPTS, fsck

from tc_git import trajectory as T
from tc_git.engine import Engine
from tc_git.storage.store import Store

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from bench_trajectory import transcript, write  # noqa: E402  (the benchmark's generator)

pytestmark = pytest.mark.usefixtures("tc_env_clean")


def test_long_first_recording_is_one_pack_with_the_same_ids(tmp_path):
    tr = tmp_path / "long.jsonl"
    write(tr, transcript(400))
    ws = tmp_path / "ws"
    ws.mkdir()
    e = Engine(ws)
    r = e.record(transcript=str(tr))
    store = ws / ".checkpoints"
    assert r["new_commits"] == 400
    assert list((store / "objects" / "pack").glob("*.pack")), "expected one pack"
    assert not [d for d in (store / "objects").iterdir() if len(d.name) == 2], "no loose objects"
    fsck(store)
    # the same transcript written loose, in another store: identical commit ids
    other = tmp_path / "other"
    other.mkdir()
    s = Store(other / ".checkpoints", other)
    s.create()
    loose = T.record(s.repo, T.read_transcript(str(tr)))
    assert loose.branches == r["branches"]


def test_unchanged_file_shortcut_checks_the_refs(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    e = Engine(ws)
    fixture = str(TRANSCRIPTS / "claude-daaain-1.jsonl")
    first = e.record(transcript=fixture)
    again = e.record(transcript=fixture)
    assert again["new_commits"] == 0 and again["branches"] == first["branches"] and again.get("unchanged_file")
    # someone deletes a session ref: the shortcut must not claim it is there
    ref = f"refs/checkpoints/sessions/{first['session']}/main"
    e.repo.references.delete(ref)
    third = e.record(transcript=fixture)
    assert not third.get("unchanged_file") and str(e.store.reopen().references[ref].target) == first["branches"]["main"]
    # a milestone on an unchanged file is still named
    m = e.record(transcript=fixture, milestone="m1")["milestone"]
    assert m["name"] == "m1" and m["event"] == first["tip"]
    assert json.loads((ws / ".checkpoints" / "tc" / "recorded-files.json").read_text())
    fsck(ws / ".checkpoints")
