"""Imports are transactional and bounded (issue 28): a bundle crafted with stock git whose step holds a
directory chain 5,000 levels deep is refused in quarantine, and a refused or failed import
leaves the store's refs and notes, the active task and the workspace bytes exactly as they
were, removes its quarantine, and the next save and capture work.

The attacker's task is made by tc-git, then one step is added with stock git only:
`git fast-import` builds the deep chain, `git commit-tree` the step, `git bundle create` the
bundle (which `git bundle verify` accepts: only tc-git refuses it). A second bundle holds a
512 MiB file of zeros (~0.5 MB compressed, streamed into `git hash-object`): its size is read
from the object header in quarantine, it is refused over TC_MAX_FILE_BYTES and never inflated,
so `tc-git import --apply` peaks far under 256 MiB of memory; `tc-git pull` from the
attacker's store as a path remote (served by libgit2 in-process) likewise.
"""
from __future__ import annotations

import errno
import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import TC, clean_env, fsck, git, tree_state, write
from test_trust_paths import add_step

from tc_git.base.errors import BadInput, TcError
from tc_git.engine import Engine
from tc_git.workspace import pathsafe


def deep_chain(store: Path, depth: int) -> str:
    """The tree id of `d/d/.../d/f` (`depth` directories below the returned tree's entry `d`),
    written by stock git (fast-import: one process, whatever the depth)."""
    path = "/".join(["d"] * depth) + "/f"
    stream = (f"commit refs/tc-scratch\ncommitter x <x@x> 0 +0000\ndata 1\nx\n"
              f"M 100644 inline {path}\ndata 5\ndeep\n\n").encode()
    subprocess.run(["git", f"--git-dir={store}", "fast-import", "--quiet"], input=stream, check=True,
                   env=clean_env(), capture_output=True)
    sub = git(store, "rev-parse", "refs/tc-scratch^{tree}:d").decode().strip()
    git(store, "update-ref", "-d", "refs/tc-scratch")
    return sub


def crafted_bundle(tmp: Path, depth: int) -> Path:
    a_ws = tmp / f"attacker-{depth}"
    write(a_ws, "a.txt", "a\n")
    ea = Engine(a_ws)
    tid = ea.init("base")["task_id"]
    ea.save("one")
    store = a_ws / ".checkpoints"
    add_step(store, tid, [(b"40000", b"d", deep_chain(store, depth))], title=f"{depth} deep")
    out = tmp / f"deep-{depth}.bundle"
    git(store, "bundle", "create", str(out), f"refs/checkpoints/tasks/{tid}/head")
    git(store, "bundle", "verify", str(out))  # stock git takes it
    return out


def state(ws: Path, e: Engine) -> dict:
    store = ws / ".checkpoints"
    return {"refs": git(store, "for-each-ref", "--format=%(refname) %(objectname)"),
            "active": e.store.active_task(), "ws": tree_state(ws),
            "quarantine": sorted(p.name for p in (store / "tc").glob("quarantine-*"))}


@pytest.fixture
def victim(tmp_path):
    ws = tmp_path / "ws"
    write(ws, "mine.txt", "my work\n")
    e = Engine(ws)
    e.init("mine")
    e.save("my step")
    write(ws, "unsaved.txt", "not saved yet\n")
    return ws, e


def test_deep_chain_bundle_is_refused_in_quarantine_and_changes_nothing(tmp_path, victim):
    ws, e = victim
    bundle = crafted_bundle(tmp_path, 5000)
    assert bundle.stat().st_size < 1 << 20
    before = state(ws, e)
    for apply in (True, None, False):
        with pytest.raises(BadInput, match="nested deeper than") as err:
            e.import_(str(bundle), apply=apply)
        assert "Nothing was imported" in err.value.message
        assert state(ws, e) == before
    fsck(ws / ".checkpoints")
    # the workspace goes on: capture and save work, undo still names this task's history
    assert e.capture()["captured"]
    write(ws, "later.txt", "later\n")
    assert e.save("after the refused import")["index"] == 2
    fsck(ws / ".checkpoints")


def test_a_chain_just_over_the_limit_is_refused_and_one_within_it_imports(tmp_path, victim):
    ws, e = victim
    before = state(ws, e)
    with pytest.raises(BadInput, match="nested deeper than"):
        e.import_(str(crafted_bundle(tmp_path, pathsafe.MAX_TREE_DEPTH + 1)), apply=True)
    assert state(ws, e) == before
    ok = e.import_(str(crafted_bundle(tmp_path, 120)), rename="deep-ok", apply=True)
    assert ok["restore"]["applied"]
    assert (ws.joinpath(*["d"] * 120) / "f").read_bytes() == b"deep\n"
    write(ws, "x.txt", "x\n")
    e.save("saved at depth 120")
    fsck(ws / ".checkpoints")


def test_an_import_that_fails_after_its_refs_moved_is_rolled_back(tmp_path, victim, monkeypatch):
    """A failure after the refs were written (here the disk filling up as the restore starts)
    puts refs, notes and the active task back: the next save goes on the task it was on."""
    ws, e = victim
    src = tmp_path / "src"
    write(src, "theirs.txt", "theirs\n")
    es = Engine(src)
    es.init("theirs")
    es.save("their step")
    bundle = Path(es.export(str(tmp_path))["path"])
    before = state(ws, e)

    def full(*_a, **_k):
        raise OSError(errno.ENOSPC, "No space left on device", str(ws))

    monkeypatch.setattr(Engine, "_restore_imported", full)
    with pytest.raises(TcError) as err:
        e.import_(str(bundle), apply=True)
    assert getattr(err.value, "code", None) == "no_space"
    assert state(ws, e) == before
    monkeypatch.undo()
    write(ws, "more.txt", "more\n")
    assert e.save("still on my task")["index"] == 2
    fsck(ws / ".checkpoints")
    assert e.import_(str(bundle), apply=True)["restore"]["applied"]  # and it imports once it can


RSS_BOUND_KIB = 256 << 10


def peak_rss_kib(*cmd: str, cwd: Path) -> tuple[subprocess.CompletedProcess, int]:
    """Run `cmd` under a fresh Python that reports its children's peak RSS (VmHWM), in KiB."""
    probe = ("import resource, subprocess, sys\n"
             "r = subprocess.run(sys.argv[1:], capture_output=True)\n"
             "sys.stderr.buffer.write(r.stderr)\n"
             "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, r.returncode)\n")
    r = subprocess.run([sys.executable, "-c", probe, *cmd], cwd=cwd, env=clean_env(), capture_output=True)
    rss, rc = r.stdout.split()[-2:]
    r.returncode = int(rc)
    return r, int(rss)


def test_a_512_mib_file_in_a_bundle_or_remote_is_refused_from_its_header(tmp_path, victim):
    ws, e = victim
    a_ws = tmp_path / "attacker"
    write(a_ws, "a.txt", "a\n")
    ea = Engine(a_ws)
    tid = ea.init("base")["task_id"]
    ea.save("one")
    store = a_ws / ".checkpoints"
    # 512 MiB of zeros streamed into stock git (bigFileThreshold: git streams it too)
    cfg = ["-c", "core.bigFileThreshold=1m", "-c", "core.compression=1"]
    zeros = subprocess.Popen(["head", "-c", str(512 << 20), "/dev/zero"], stdout=subprocess.PIPE)
    blob = subprocess.run(["git", f"--git-dir={store}", *cfg, "hash-object", "-w", "--stdin"], stdin=zeros.stdout,
                          capture_output=True, env=clean_env(), check=True).stdout.decode().strip()
    assert zeros.wait() == 0 and git(store, "cat-file", "-s", blob).strip() == str(512 << 20).encode()
    add_step(store, tid, [(b"100644", b"zeros.bin", blob)], title="512 MiB of zeros")
    bundle = tmp_path / "zeros.bundle"
    git(store, *cfg, "bundle", "create", str(bundle), f"refs/checkpoints/tasks/{tid}/head")
    assert bundle.stat().st_size < 4 << 20
    before = state(ws, e)
    r, rss = peak_rss_kib(*TC, "import", str(bundle), "--apply", cwd=ws)
    err = r.stderr.decode(errors="replace")
    assert r.returncode != 0 and "zeros.bin" in err and "TC_MAX_FILE_BYTES" in err, err
    assert "Nothing was imported" in err
    assert rss < RSS_BOUND_KIB, f"import peaked at {rss >> 10} MiB"
    assert state(ws, e) == before
    # a pull from the attacker's store as a path remote (libgit2 serves it in-process) likewise
    r, rss = peak_rss_kib(*TC, "pull", str(store), cwd=ws)
    err = r.stderr.decode(errors="replace")
    assert r.returncode != 0 and "zeros.bin" in err and "TC_MAX_FILE_BYTES" in err, err
    assert rss < RSS_BOUND_KIB, f"pull peaked at {rss >> 10} MiB"
    assert state(ws, e) == before
    fsck(ws / ".checkpoints")


def test_a_seed_handoff_with_a_512_mib_file_is_refused_unread(tmp_path, victim):
    """A task-checkpoint-mcp handoff directory (handoff.json + files/) holding a 512 MiB sparse
    file: refused before anything is read, nothing changed."""
    ws, e = victim
    pkg = tmp_path / "seed-handoff"
    write(pkg, "handoff.json", json.dumps({"task": {"task_id": "seedbig", "name": "big"}, "resume": {}}))
    write(pkg, "files/main.py", "print('x')\n")
    with open(pkg / "files" / "zeros.bin", "wb") as f:
        f.truncate(512 << 20)
    before = state(ws, e)
    r, rss = peak_rss_kib(*TC, "import", str(pkg), "--apply", cwd=ws)
    err = r.stderr.decode(errors="replace")
    assert r.returncode != 0 and "zeros.bin" in err and "TC_MAX_FILE_BYTES" in err, err
    assert rss < RSS_BOUND_KIB
    assert state(ws, e) == before
