"""The mirror into the user's repository packs natively once the user holds the previous mirror
(handoff/userrepo.sync_into_repo), and with the Python walk otherwise and under TC_NATIVE=off.
Stock git judges the result: fsck of the user's repository and the refs it shows."""
from __future__ import annotations

import subprocess

import pytest
from conftest import clean_env, fsck

from tc_git.engine import Engine
from tc_git.storage import _native

N = 300  # files: enough that the whole tree again would show in the object counts


def _git(ws, *args) -> str:
    return subprocess.run(["git", "-C", str(ws), *args], check=True, capture_output=True, text=True,
                          env=clean_env()).stdout


@pytest.fixture
def committed(tmp_path, monkeypatch):
    """A workspace whose files the user's own git already holds (one commit)."""
    monkeypatch.delenv("TC_GIT", raising=False)
    monkeypatch.delenv("TC_GIT_VERIFY", raising=False)
    ws = tmp_path / "ws"
    for i in range(N):
        d = ws / f"d{i % 10}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"f{i}.txt").write_text(f"file {i}\n")
    _git(tmp_path, "init", "-q", str(ws))
    _git(ws, "add", "-A")
    _git(ws, "-c", "user.name=u", "-c", "user.email=u@example.com", "commit", "-qm", "mine")
    return ws


@pytest.fixture
def pack_walks(monkeypatch):
    """Counts the native pack walks, whole or streamed (a spy: the real walk runs)."""
    calls = []
    for name in ("pack_walk", "pack_walk_to"):
        real = getattr(_native, name)

        def spy(*a, _real=real, **kw):
            out = _real(*a, **kw)
            if kw.get("_checked", True):  # not the native self-test's own walk (the first probe)
                calls.append(out[0])
            return out

        monkeypatch.setattr(_native, name, spy)
    return calls


@pytest.mark.parametrize("native", ["on", "off"])
def test_mirror_packs_only_what_the_user_lacks(committed, pack_walks, monkeypatch, native):
    ws = committed
    if native == "off":
        monkeypatch.setenv("TC_NATIVE", "off")
    else:  # also inside the CI job that switches the native paths off for the other tests
        monkeypatch.delenv("TC_NATIVE", raising=False)
        if not _native.has(_native.PACK):
            pytest.skip(f"no native pack walk here: {_native.report()[_native.PACK]}")
    e = Engine(ws)
    tid = e.init("mirror")["task_id"]
    first = e.save("first")
    # the first mirror: the user's own commit holds every blob and tree, so only the new commits
    # and notes travel (the Python walk that asks the user's object database)
    assert first["git"]["ok"] and first["git"]["unchanged"], first["git"]
    assert first["git"]["objects"] < 20, first["git"]
    assert pack_walks == []
    (ws / "d1" / "f1.txt").write_text("changed\n")
    (ws / "new.txt").write_text("new\n")
    second = e.save("second")
    assert second["git"]["ok"], second["git"]
    # one commit, its root tree, d1's tree, two blobs, the notes commit, its tree and note blobs
    assert 5 <= second["git"]["objects"] < 20, second["git"]
    # natively walked and packed when the user holds the previous mirror; never under TC_NATIVE=off
    assert pack_walks == ([second["git"]["objects"]] if native == "on" else [])
    fsck(ws / ".git")
    head = _git(ws, "rev-parse", f"refs/checkpoints/tasks/{tid}/head").strip()
    assert head == second["commit"]
    assert _git(ws, "show", f"{head}:d1/f1.txt") == "changed\n"
    assert _git(ws, "show", f"{head}:new.txt") == "new\n"
    assert "step 2" in _git(ws, "log", "--oneline", "-1", head)
    # the user's own history is untouched
    assert _git(ws, "log", "--oneline").count("\n") == 1


def test_native_mirror_streams_its_pack(tmp_path, monkeypatch):
    """The native mirror hands the pack builder's output to the user's indexer piece by piece:
    the pack is never one Python object (it was, plus libgit2's own buffer of it). 6 MiB of
    incompressible blobs travel; the Python-side peak stays below 2 MiB, and stock git fsck and
    show accept the result."""
    import os
    import tracemalloc

    import pygit2

    from tc_git.storage import packs

    monkeypatch.delenv("TC_NATIVE", raising=False)
    if not (_native.has(_native.PACK) and _native.has(_native.INDEXER)):
        pytest.skip("no native pack walk or indexer here")
    src = pygit2.init_repository(str(tmp_path / "src"), bare=True)
    tb = src.TreeBuilder()
    for i in range(96):
        tb.insert(f"f{i}.bin", src.create_blob(os.urandom(64 << 10)), pygit2.enums.FileMode.BLOB)
    sig = pygit2.Signature("t", "t@example.com", 0, 0)
    tip = src.create_commit(None, sig, sig, "blobs", tb.write(), [])
    _git(tmp_path, "init", "-q", "--bare", str(tmp_path / "user.git"))
    user = pygit2.Repository(str(tmp_path / "user.git"))
    monkeypatch.setattr(_native, "pack_walk", None)  # the whole-pack walk must not be used
    tracemalloc.start()
    try:
        count = packs.build(src, [tip]).write_into(user, tmp_path / "user.git" / "objects" / "pack")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert count == 98 and peak < 2 << 20, (count, peak)
    fsck(tmp_path / "user.git")
    assert _git(tmp_path / "user.git", "cat-file", "-t", str(tip)).strip() == "commit"
    # nothing to send: no pack written at all
    before = sorted(os.listdir(tmp_path / "user.git" / "objects" / "pack"))
    assert packs.build(src, [tip], hides=[str(tip)]).write_into(user, tmp_path / "user.git" / "objects" / "pack") == 0
    assert sorted(os.listdir(tmp_path / "user.git" / "objects" / "pack")) == before
