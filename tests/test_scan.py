"""The full scan on every core (tc_git/workspace/scan.py): libgit2's index-to-workdir diff run once per core,
each on its share of the workspace, finds exactly what the one diff over everything finds, and the
save's tree is stock git's (`git add -A && git write-tree`), under random edits, renames, deletes,
directory moves, type changes, ignored files and links (the same operations as the journal's
hypothesis test: this scan is the full scan that test holds the journal to). The shares cover
every path whatever its name (names that sort next to a directory's, pattern characters, bytes
that are not UTF-8), and a file touched but unchanged gets its stat data refreshed once, as the
single diff's UPDATE_INDEX does."""
from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path

import pygit2
import pytest
from conftest import git_tree, write
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pygit2.enums import DiffOption
from test_journal import OPS, apply

from tc_git.storage import _native
from tc_git.workspace import scan

FLAGS = (DiffOption.INCLUDE_UNTRACKED | DiffOption.RECURSE_UNTRACKED_DIRS | DiffOption.INCLUDE_TYPECHANGE
         | DiffOption.INCLUDE_UNREADABLE)

pytestmark = pytest.mark.skipif(not _native.has(_native.DIFF_SCAN), reason="no native diff of listed paths here")


@pytest.fixture(autouse=True)
def _every_size(monkeypatch):
    monkeypatch.setattr(scan, "MIN_ENTRIES", 0)  # the shared scan from the first entry on


def _engine(ws: Path):
    from tc_git.engine import Engine

    eng = Engine(ws)
    if not eng.store.exists:
        eng.init("scan")
    return eng


def _serial_and_shared(eng) -> tuple[list[str], list[str], tuple | None]:
    """(what the one diff finds, what the shares find, the shares) on the store's index as it is."""
    repo = eng.repo
    idx = repo.index
    idx.read(True)
    serial = sorted(set(scan._paths(idx.diff_to_workdir(FLAGS))))
    shares = scan.split(repo.workdir, _native.index_path_reader(idx), len(idx))
    shared = sorted(set(scan.changed_paths(repo, idx, FLAGS)))
    return serial, shared, shares


def _under(path: bytes, share: list[bytes]) -> bool:
    """Whether `path` is one of the share's names: a file's, or a directory's (trailing "/")."""
    return any(path == p or (p.endswith(b"/") and (path + b"/" == p or path.startswith(p))) for p in share)


def _tree_ws(d: str) -> Path:
    ws = Path(d) / "ws"
    for i in range(24):
        write(ws, f"src/m{i % 3}/f{i}.py", f"v = {i}\n".encode())
    for i in range(6):
        write(ws, f"lib/x{i}.py", f"x = {i}\n".encode())
    write(ws, ".gitignore", b"*.log\nbuild/\n")
    return ws


def test_shares_cover_every_path_whatever_its_name(tmp_path):
    ws = tmp_path / "ws"
    # names that sort right next to a directory's ("a" < "a-x" < "a.b" < "a/" < "a0"), pattern
    # characters (the shares are names, never patterns), a name that is not UTF-8
    names = ["a/in1", "a/in2", "a/deep/in3", "a-x", "a.b", "a0", "[ab]*?", "b/[c]/d", "b/x*", "c/c/c/c/c",
             b"caf\xe9/f".decode("utf-8", "surrogateescape")]
    for i in range(40):
        names.append(f"big/pkg{i % 4}/m{i}.py")
    for n in names:
        write(ws, n, n.encode("utf-8", "surrogateescape"))
    eng = _engine(ws)
    eng.save("one")
    write(ws, "a1", b"new at the root")      # untracked names at the levels left behind
    write(ws, "big/pkg0x", b"new beside a share")
    (ws / "a-x").unlink()                    # deleted entry
    serial, shared, shares = _serial_and_shared(eng)
    assert shares is not None
    assert serial == shared == sorted(["a1", "big/pkg0x", "a-x"])
    every = [os.fsencode(p.relative_to(ws)) for p in ws.rglob("*") if ".checkpoints" not in p.parts]
    every += [os.fsencode(e.path) for e in eng.repo.index]
    for p in every:
        inside = [i for i in (0, 1) if _under(p, shares[i])]
        # a path is in one share, or is a directory above shares (walked by both, owned by neither)
        assert len(inside) == 1 or (not inside and (ws / os.fsdecode(p)).is_dir()), (p, shares)


@settings(max_examples=int(os.environ.get("TC_SCAN_EXAMPLES", "10")), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=st.lists(OPS, min_size=2, max_size=4))
def test_shared_scan_equals_the_single_diff_and_stock_git(batches):
    with tempfile.TemporaryDirectory(prefix="tc-scan-") as d:
        ws = _tree_ws(d)
        eng = _engine(ws)
        eng.save("first")
        # the untouched tree splits; after the ops it may not (a batch that deletes most of the
        # tree leaves one side with nearly everything: split() then keeps the single diff)
        assert _serial_and_shared(eng)[2] is not None, "the shared scan never ran"
        for ops in batches:
            for op in ops:
                apply(ws, *op)
            serial, shared, shares = _serial_and_shared(eng)
            assert shared == serial, (ops, shares)
            r = eng.save(f"s{time.monotonic_ns()}")
            assert str(eng.repo[r["commit"]].tree_id) == git_tree(ws, eng.store.path), ops


def test_touched_but_unchanged_files_are_refreshed_once(tmp_path, monkeypatch):
    from tc_git.workspace import snapshot

    monkeypatch.setattr(snapshot, "RACY_NS", 0)  # files just written: stat data kept, not smudged
    ws = _tree_ws(str(tmp_path))
    old = time.time() - 200
    for p in ws.rglob("*"):
        os.utime(p, (old, old))  # older than the index: not "racily clean" either
    eng = _engine(ws)
    first = eng.save("one")
    old += 100
    for p in list((ws / "src").rglob("*.py"))[:5] + [ws / "lib" / "x1.py"]:
        os.utime(p, (old, old))  # same bytes, other stat data: libgit2 hashes them
    repo = eng.repo
    idx = repo.index
    idx.read(True)
    shares = scan.split(repo.workdir, _native.index_path_reader(idx), len(idx))
    assert shares is not None
    ids = sum(_native.diff_paths(repo, idx, FLAGS, s)[2] for s in shares)
    assert ids == 6  # each touched file hashed
    assert scan.changed_paths(repo, idx, FLAGS | DiffOption.UPDATE_INDEX) == []  # none changed ...
    idx.read(True)
    assert sum(_native.diff_paths(repo, idx, FLAGS, s)[2] for s in shares) == 0  # ... and never hashed again
    r = eng.save("two")
    assert r["commit"] == first["commit"] or str(repo[r["commit"]].tree_id) == str(repo[first["commit"]].tree_id)


def test_serial_when_asked_or_without_the_native_path(tmp_path, monkeypatch):
    ws = _tree_ws(str(tmp_path))
    eng = _engine(ws)
    eng.save("one")
    calls = []
    real = _native.diff_paths
    monkeypatch.setattr(_native, "diff_paths", lambda *a, **k: calls.append(1) or real(*a, **k))
    write(ws, "src/m0/new.py", b"n = 1\n")
    for env, min_entries in (({"TC_NATIVE": "off"}, 0), ({}, 100000)):
        with monkeypatch.context() as m:
            for k, v in env.items():
                m.setenv(k, v)
            m.setattr(scan, "MIN_ENTRIES", min_entries)
            repo = eng.repo
            repo.index.read(True)
            assert scan.changed_paths(repo, repo.index, FLAGS) == ["src/m0/new.py"]
    assert calls == []
    repo.index.read(True)
    assert scan.changed_paths(repo, repo.index, FLAGS) == ["src/m0/new.py"]
    assert calls == [1, 1]  # the control: two shares


def test_a_share_that_fails_fails_the_scan_like_the_diff(tmp_path):
    ws = _tree_ws(str(tmp_path))
    eng = _engine(ws)
    eng.save("one")
    locked = ws / "src" / "m1"
    locked.chmod(0)
    try:
        if os.access(locked, os.R_OK):
            pytest.skip("running as a user that reads any directory")
        repo = eng.repo
        repo.index.read(True)
        with pytest.raises(pygit2.GitError):
            repo.index.diff_to_workdir(FLAGS)
        with pytest.raises(pygit2.GitError):
            scan.changed_paths(repo, repo.index, FLAGS)
    finally:
        locked.chmod(0o755)


# ------------------------------------------------------------------ the first snapshot's index file
def _first(ws: Path, monkeypatch, route: str):
    from tc_git.workspace import snapshot

    calls = []
    real = _native.index_add
    monkeypatch.setattr(_native, "index_add", lambda *a, **k: calls.append(a[1]) or real(*a, **k))
    from tc_git.engine import Engine

    with monkeypatch.context() as m:
        if route == "off":  # the one-by-one route (the one a name git might refuse takes)
            m.setattr(snapshot._Run, "_index_file_first", lambda self, trees: None)
        eng = Engine(ws)
        init = eng.init("scan")  # the first snapshot: the task's baseline (issue 30), then a save with nothing new
        first_calls = list(calls)  # (the save tries a refused name again: not the first snapshot's route)
        r = {**eng.save("first"), "init": init}
    idx = eng.repo.index
    idx.read(True)
    monkeypatch.setattr(_native, "index_add", real)
    return eng, r, first_calls, _native.index_stats(idx), {e.path: (str(e.id), int(e.mode)) for e in idx}


def _git(ws: Path, store: Path, *args, index: Path | None = None) -> str:
    import subprocess

    from conftest import clean_env
    env = clean_env(GIT_DIR=str(store), GIT_WORK_TREE=str(ws), GIT_INDEX_FILE=str(index or store / "index"))
    return subprocess.run(["git", *args], env=env, cwd=ws, check=True, capture_output=True).stdout.decode(
        "utf-8", "surrogateescape")


def test_first_index_written_as_one_file_is_the_one_by_one_index(tmp_path, monkeypatch):
    trees = {}
    for route in ("off", "on"):
        ws = _tree_ws(str(tmp_path / route))
        write(ws, "bin/run.sh", b"#!/bin/sh\n", mode=0o755)
        os.symlink("src/m0/f0.py", ws / "link")
        write(ws, b"caf\xe9.txt".decode("utf-8", "surrogateescape"), b"latin-1 name")
        write(ws, "d/" + "/".join(["n" * 200] * 17) + "/x", b"a long path (the absolute one stays under PATH_MAX)")
        eng, r, calls, stats, entries = _first(ws, monkeypatch, route)
        tree = str(eng.repo[r["commit"]].tree_id)
        assert tree == git_tree(ws, eng.store.path)
        trees[route] = (tree, stats, entries)
        if route == "on":
            assert calls == []  # no entry went through libgit2's add
            # stock git reads the index: every entry, and the workspace as it is (stat data right)
            listed = _git(ws, eng.store.path, "ls-files", "-s", "-z").split("\0")[:-1]
            assert len(listed) == len(entries)
            copy = tmp_path / "index-copy"  # git refreshes the stat data of smudged entries in a copy
            shutil.copyfile(eng.store.path / "index", copy)
            _git(ws, eng.store.path, "update-index", "-q", "--refresh", index=copy)
            assert _git(ws, eng.store.path, "diff-files", "--name-only", index=copy) == ""
            assert eng.save("again")["changed"] == 0
        else:
            assert len(calls) == len(entries)
    (t_off, s_off, e_off), (t_on, s_on, e_on) = trees["off"], trees["on"]
    assert t_on == t_off and e_on == e_off
    # the same stat data but for the files' own (each route wrote its own copy of the workspace)
    assert {p: (m, size) for p, (m, size, *_r) in s_on.items()} == {p: (m, size) for p, (m, size, *_r) in s_off.items()}


def test_a_name_libgit2_refuses_takes_the_one_by_one_route(tmp_path, monkeypatch):
    ws = _tree_ws(str(tmp_path))
    write(ws, "git~1", b"an NTFS alias of .git: libgit2 adds no such entry")
    eng, r, calls, _stats, entries = _first(ws, monkeypatch, "on")
    # the fast route gave way: every entry went through libgit2's add, which refused that one
    assert "git~1" not in entries and sorted(calls) == sorted([*entries, "git~1"])
    left = {x.split(" ")[1] for x in r["init"]["skipped_paths"]}  # said by the first snapshot: init's
    assert "git~1" in left, r
