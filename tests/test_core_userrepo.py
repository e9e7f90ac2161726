"""A workspace that is the user's git repository: its `.git` is never modified.

Every file under `.git` is compared (content, mode, mtime) before and after each operation.
With the export into the user's repo off (TC_GIT=off) nothing may differ at all; with it on
(handoff layer), only our refs, their objects and packed-refs may.
"""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from conftest import clean_env, diff_fingerprints, dir_fingerprint, fsck, write

from tc_git.base.refs import EXCLUDE_COMMENT
from tc_git.engine import Engine

pytestmark = pytest.mark.usefixtures("fsck_after")

ALLOWED = (b"refs/checkpoints/", b"refs/notes/", b"logs/refs/checkpoints", b"logs/refs/notes", b"objects/",
           b"packed-refs")


def _git(ws, *args):
    env = clean_env(GIT_AUTHOR_NAME="u", GIT_AUTHOR_EMAIL="u@x", GIT_COMMITTER_NAME="u", GIT_COMMITTER_EMAIL="u@x")
    subprocess.run(["git", "-C", str(ws), *args], check=True, capture_output=True, env=env)


@pytest.fixture
def user_repo(ws):
    _git(ws, "init", "-q", "-b", "main")
    write(ws, "app.py", "print(1)\n")
    write(ws, "lib/util.py", "def f(): pass\n")
    write(ws, ".gitignore", "*.log\n")
    _git(ws, "add", "-A")
    _git(ws, "commit", "-qm", "initial")
    _git(ws, "branch", "feature")
    write(ws, "app.py", "print(2)\n")
    _git(ws, "stash")
    write(ws, "lib/util.py", "def f(): return 1\n")
    _git(ws, "add", "lib/util.py")          # staged
    write(ws, "app.py", "print(3)\n")        # unstaged
    write(ws, "new.txt", "untracked\n")
    write(ws, "debug.log", "ignored\n")
    return ws


def _operations(ws: Path):
    """Every core operation, each yielded after it ran (name, result)."""
    e = Engine(ws)
    yield "init", e.init("user repo")
    yield "save", e.save("first", conclusion="c", next="n")
    write(ws, "app.py", "print(4)\n")
    yield "capture", e.capture()
    yield "save2", e.save("second")
    yield "resume", e.resume()
    yield "show", e.show(include_drift=True)
    yield "log", e.log()
    yield "diff", e.diff("1", "2")
    yield "restore-preview", e.restore(1)
    r = e.restore(1, apply=True)
    yield "restore", r
    yield "undo", e.restore(drift_id=r["recovered"], apply=True)
    yield "compress", e.compress(keep_seconds=0, minimum=0, maximum=1)
    yield "resume-zh", e.resume(lang="zh")
    yield "save-close", e.save("last", close=True)
    fsck(e.store.path)


def test_dot_git_byte_identical(user_repo, monkeypatch):
    monkeypatch.setenv("TC_GIT", "off")
    gitdir = user_repo / ".git"
    before = dir_fingerprint(gitdir)
    for name, _result in _operations(user_repo):
        changed = diff_fingerprints(before, dir_fingerprint(gitdir))
        assert changed == [], f"{name} modified .git: {changed[:10]}"
    # and the user's view is as it was: git status shows the same, the store is hidden
    st = subprocess.run(["git", "-C", str(user_repo), "status", "--porcelain"], capture_output=True,
                        env=clean_env()).stdout.decode()
    assert ".checkpoints" not in st


def test_dot_git_only_our_refs_differ_with_export_on(user_repo, monkeypatch):
    monkeypatch.delenv("TC_GIT", raising=False)
    gitdir = user_repo / ".git"
    before = dir_fingerprint(gitdir)
    before_exclude = (gitdir / "info" / "exclude").read_text()
    for name, _result in _operations(user_repo):
        after = dir_fingerprint(gitdir)
        changed = diff_fingerprints(before, after)
        bad = [p for p in changed if not p.startswith(tuple(a.rstrip(b"/") for a in ALLOWED))]
        # a directory on the way to our refs/objects may only gain entries (its mtime changes)
        bad = [p for p in bad if not (p in (b"refs", b"logs", b"logs/refs", b"objects")
                                      and before.get(p, (0,))[0] == after.get(p, (1,))[0])]
        # info/exclude gains our two lines that hide the store (a nested repository) from git status
        bad = [p for p in bad if p not in (b"info", b"info/exclude")]
        assert bad == [], f"{name} modified .git outside our refs: {bad[:10]}"
    text = (gitdir / "info" / "exclude").read_text()
    assert text == before_exclude + EXCLUDE_COMMENT + "\n/.checkpoints/\n"
    r = subprocess.run(["git", "-C", str(user_repo), "fsck", "--full"], capture_output=True, env=clean_env())
    assert r.returncode == 0, r.stderr


def test_cli_operations_leave_dot_git_identical(user_repo):
    from conftest import tc

    env = clean_env(TC_GIT="off")
    gitdir = user_repo / ".git"
    before = dir_fingerprint(gitdir)
    for args in (["init", "cli"], ["save", "s1"], ["capture"], ["resume"], ["log"], ["show"],
                 ["restore", "1"], ["restore", "1", "--apply"], ["compress"]):
        r = tc("-C", user_repo, *args, env=env)
        assert r.returncode == 0, (args, r.stderr)
        assert diff_fingerprints(before, dir_fingerprint(gitdir)) == [], args
    assert os.path.isdir(user_repo / ".checkpoints")


def _rev(ws, ref) -> str:
    return subprocess.run(["git", "-C", str(ws), "rev-parse", ref], capture_output=True, text=True,
                          env=clean_env()).stdout.strip()


def test_the_mirror_follows_a_compress_and_still_refuses_other_divergence(user_repo, monkeypatch):
    """compress rewrites the chain after the first dropped drift: the copy in the user's
    repository is the old chain, replaced by the next mirror (before, every later save said
    'diverged in the target; left as it is' for good). A copy that moved on by itself (work the
    store does not hold) is still never overwritten."""
    monkeypatch.delenv("TC_GIT", raising=False)
    e = Engine(user_repo)
    task = e.init("mirrored")["task_id"]
    ref = f"refs/checkpoints/tasks/{task}/head"
    for i in range(4):
        write(user_repo, "app.py", f"print({i})\n")
        e.capture()
        write(user_repo, "app.py", f"print('saved {i}')\n")
        assert e.save(f"s{i}")["git"]["ok"]
    old = _rev(user_repo, ref)
    assert e.compress(keep_seconds=0, minimum=0, maximum=1)["converted"] >= 3
    write(user_repo, "app.py", "print('after')\n")
    r = e.save("after compress")
    assert r["git"]["ok"], r["git"]
    assert _rev(user_repo, ref) == _rev(e.store.path, ref) != old
    fsck(user_repo / ".git")
    # another chain there, not one compress replaced: reported, left as it is
    _git(user_repo, "update-ref", ref, _rev(user_repo, "refs/heads/main"))
    write(user_repo, "app.py", "print('later')\n")
    r = e.save("later")
    assert not r["git"]["ok"] and "diverged in the target; left as it is" in r["git"]["error"], r["git"]
    assert _rev(user_repo, ref) == _rev(user_repo, "refs/heads/main")
