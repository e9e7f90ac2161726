"""Trust boundary, package side: hostile bundles and remotes are refused whole, nothing written.

An attacker's store (A) is made by tc-git, then tampered with stock git only: a step whose
tree holds one hostile entry name (`git hash-object -t tree --literally` takes anything), sent
as a bundle made by `git bundle create` and as a remote filled by `git push` (a bare repository
and a real `git daemon` on 127.0.0.1). The victim (B) lives in a user's repository with a task
of its own. Import and pull must refuse with a clear error and leave the workspace, the store,
the user's `.git` and the parent directory exactly as they were; no hook may run.
"""
from __future__ import annotations

import hashlib
import os
import socket
import subprocess
import time
from pathlib import Path

import pytest
from conftest import clean_env, fsck, git, tree_state, write
from test_trust_paths import add_step, blob, chain_tree, outside_state, raw_tree

from tc_git.base.errors import BadInput
from tc_git.engine import Engine


def g(*args, cwd=None) -> str:
    r = subprocess.run(["git", *map(str, args)], cwd=cwd, capture_output=True, env=clean_env())
    assert r.returncode == 0, f"git {args}: {r.stderr.decode(errors='replace')}"
    return r.stdout.decode(errors="replace")


def store_files(store: Path) -> dict:
    """Every file of a store (content hash) but the lock, the logs and the quarantine parent."""
    out = {}
    for dirpath, _dirs, files in os.walk(store):
        for f in files:
            p = Path(dirpath) / f
            rel = p.relative_to(store).as_posix()
            if rel != "lock" and not rel.endswith(".log") and not rel.startswith("tc/log"):
                out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def classes(store: Path, marker: Path, abs_dir: Path) -> dict[str, list]:
    """One hostile entry set per name class (each alone in its tree)."""
    hook = blob(store, f"#!/bin/sh\ntouch {marker}\n".encode())
    b = blob(store, b"pwned\n")
    ex = b"100755"
    return {
        "dotdot": [chain_tree(store, [b"..", b"escaped.txt"], b"100644", b)],
        "dotdot-in-name": [(b"100644", b"../escaped.txt", b)],
        "dot": [chain_tree(store, [b".", b"dot.txt"], b"100644", b)],
        "slash": [(b"100644", b"a/b", b)],
        "absolute": [(b"100644", os.fsencode(abs_dir / "abs.txt"), b)],
        "dotgit": [chain_tree(store, [b".git", b"hooks", b"post-checkout"], ex, hook)],
        "DOTGIT": [chain_tree(store, [b".GIT", b"hooks", b"post-checkout"], ex, hook)],
        "nested-dotgit": [chain_tree(store, [b"sub", b".git", b"hooks", b"post-checkout"], ex, hook)],
        "store": [chain_tree(store, [b".checkpoints", b"hooks", b"post-update"], ex, hook)],
        "store-state": [chain_tree(store, [b".checkpoints", b"tc", b"active-task"], b"100644", b)],
        "pointer": [(b"100644", b".task-checkpoint-store.json", blob(store, b'{"store": ".git"}'))],
        "hfs": [chain_tree(store, [".g\u200cit".encode(), b"hooks", b"post-checkout"], ex, hook)],
        "ntfs-short": [chain_tree(store, [b"git~1", b"hooks", b"post-checkout"], ex, hook)],
        "ntfs-dots": [chain_tree(store, [b".git. ", b"hooks", b"post-checkout"], ex, hook)],
        "ntfs-stream": [chain_tree(store, [b".git::$INDEX_ALLOCATION", b"hooks", b"post-checkout"], ex, hook)],
        "symlinked-gitmodules": [(b"120000", b".gitmodules", blob(store, b"/etc/passwd"))],
        # symlink-then-file: `lnk` twice, a link to the outside and a directory with a file
        "symlink-then-file": [(b"120000", b"lnk", blob(store, os.fsencode(abs_dir))),
                              (b"40000", b"lnk", raw_tree(store, [(b"100644", b"through.txt", b)]))],
    }


@pytest.fixture
def attack(tmp_path):
    # the attacker: a real task, then one tampered step per class, each on its own task ref
    a_ws = tmp_path / "attacker"
    write(a_ws, "a.txt", "a\n")
    ea = Engine(a_ws)
    base_tid = ea.init("base")["task_id"]
    ea.save("one")
    a_store = a_ws / ".checkpoints"
    base = git(a_store, "rev-parse", f"refs/checkpoints/tasks/{base_tid}/head").decode().strip()
    marker = tmp_path / "HOOK-RAN"
    abs_dir = tmp_path / "abs-target"
    abs_dir.mkdir()
    refs = {}
    for name, entries in classes(a_store, marker, abs_dir).items():
        tid = f"evil-{name}"
        git(a_store, "update-ref", f"refs/checkpoints/tasks/{tid}/head", base)
        add_step(a_store, tid, entries, title=f"hostile {name}")
        refs[name] = f"refs/checkpoints/tasks/{tid}/head"
    # the victim: a user's repository holding a workspace with a task
    parent = tmp_path / "victim-parent"
    ws = parent / "ws"
    ws.mkdir(parents=True)
    g("init", "-q", "-b", "main", cwd=ws)
    write(ws, "README.md", "# mine\n")
    g("-c", "user.name=u", "-c", "user.email=u@x", "add", "-A", cwd=ws)
    g("-c", "user.name=u", "-c", "user.email=u@x", "commit", "-qm", "init", cwd=ws)
    write(ws, ".git/hooks/pre-commit", "#!/bin/sh\nexit 0\n", 0o755)
    eb = Engine(ws)
    eb.init("mine")
    write(ws, "work.txt", "my work\n")
    eb.save("my step")
    return {"tmp": tmp_path, "a_store": a_store, "refs": refs, "ws": ws, "parent": parent, "engine": eb,
            "marker": marker, "abs": abs_dir}


def snapshot_all(v) -> dict:
    return {"ws": tree_state(v["ws"], skip=(b".checkpoints", b".git")), "git": outside_state(v["ws"] / ".git"),
            "store": store_files(v["ws"] / ".checkpoints"), "parent": sorted(os.listdir(v["parent"])),
            "tmp": sorted(os.listdir(v["tmp"])), "abs": sorted(os.listdir(v["abs"]))}


def assert_untouched(v, before) -> None:
    after = snapshot_all(v)
    for k in before:
        assert after[k] == before[k], f"{k} changed"
    fsck(v["ws"] / ".checkpoints")  # no hostile object was left in the store either


def hook_probe(v) -> None:
    """Run what a planted hook would hook into (checkout, commit): it must not run."""
    g("-c", "user.name=u", "-c", "user.email=u@x", "checkout", "-q", "-b", "probe", cwd=v["ws"])
    g("-c", "user.name=u", "-c", "user.email=u@x", "commit", "-q", "--allow-empty", "-m", "p", cwd=v["ws"])
    assert not v["marker"].exists(), "a planted hook ran"


def test_every_hostile_name_class_is_refused_by_import(attack):
    v = attack
    before = snapshot_all(v)
    for name, ref in v["refs"].items():
        bundle = v["tmp"] / f"{name}.bundle"
        git(v["a_store"], "bundle", "create", str(bundle), ref)
        g("bundle", "verify", bundle, cwd=v["a_store"])  # stock git takes it: only we refuse
        with pytest.raises(BadInput, match="refusing") as err:
            v["engine"].import_(str(bundle), apply=True)
        assert "Nothing was imported" in err.value.message, err.value.message
        bundle.unlink()
        assert_untouched(v, before)
    hook_probe(v)


def test_every_hostile_name_class_is_refused_by_pull_from_a_bare_remote(attack):
    v = attack
    (v["tmp"] / "remotes").mkdir()
    before = snapshot_all(v)
    for name, ref in v["refs"].items():
        remote = v["tmp"] / "remotes" / f"{name}.git"
        g("init", "-q", "--bare", remote)
        git(v["a_store"], "push", "-q", str(remote), f"{ref}:{ref}")
        with pytest.raises(BadInput, match="refusing remote"):
            v["engine"].pull(str(remote))
        assert_untouched(v, before)
    hook_probe(v)


def test_pull_into_a_new_store_leaves_no_store_behind(attack, tmp_path):
    remote = tmp_path / "r.git"
    g("init", "-q", "--bare", remote)
    ref = attack["refs"]["dotgit"]
    git(attack["a_store"], "push", "-q", str(remote), f"{ref}:{ref}")
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    with pytest.raises(BadInput, match="refusing remote"):
        Engine(fresh).pull(str(remote))
    assert os.listdir(fresh) == []


def _daemon(base: Path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    d = subprocess.Popen(["git", "daemon", "--export-all", "--reuseaddr", "--listen=127.0.0.1", f"--port={port}",
                          f"--base-path={base}", str(base)], env=clean_env(), stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                break
        time.sleep(0.05)
    return d, port


def test_hostile_remote_over_git_daemon_is_refused_and_a_clean_one_still_pulls(attack):
    v = attack
    base = v["tmp"] / "srv"
    for name in ("dotgit", "nested-dotgit", "symlink-then-file"):
        g("init", "-q", "--bare", base / f"{name}.git")
        git(v["a_store"], "push", "-q", str(base / f"{name}.git"), f"{v['refs'][name]}:{v['refs'][name]}")
    # a clean task from the same attacker, to show the pull path still works
    g("init", "-q", "--bare", base / "clean.git")
    clean_ref = "refs/checkpoints/tasks/clean/head"
    head = git(v["a_store"], "rev-parse", v["refs"]["dotgit"] + "~1").decode().strip()
    git(v["a_store"], "update-ref", clean_ref, head)
    git(v["a_store"], "push", "-q", str(base / "clean.git"), f"{clean_ref}:{clean_ref}")
    d, port = _daemon(base)
    try:
        before = snapshot_all(v)
        for name in ("dotgit", "nested-dotgit", "symlink-then-file"):
            with pytest.raises(BadInput, match="refusing remote"):
                v["engine"].pull(f"git://127.0.0.1:{port}/{name}.git")
            assert_untouched(v, before)
        hook_probe(v)
        r = v["engine"].pull(f"git://127.0.0.1:{port}/clean.git")
        assert clean_ref in r["created"], r
    finally:
        d.terminate()
        d.wait(timeout=10)
    fsck(v["ws"] / ".checkpoints")


def test_windows_reserved_names_import_fine_and_restore_reports_them(tmp_path, monkeypatch):
    a_ws = tmp_path / "a"
    for n in ("CON", "aux.txt", "A.txt", "a.txt", "ok.txt"):
        write(a_ws, n, f"{n}\n")
    ea = Engine(a_ws)
    ea.init("win")
    ea.save("names")
    path = ea.export(str(tmp_path / "win.bundle"))["path"]
    b_ws = tmp_path / "b"
    b_ws.mkdir()
    monkeypatch.setenv("TC_PATH_RULES", "windows")
    r = Engine(b_ws).import_(path, apply=True)
    rs = r["restore"]
    assert rs["applied"] and rs["failed"] == [], rs
    assert sorted(p for p in os.listdir(b_ws) if p != ".checkpoints") == ["ok.txt"]
    assert {u["path"] for u in rs["plan"]["unrestorable"]} == {"CON", "aux.txt", "A.txt", "a.txt"}
