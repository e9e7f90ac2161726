"""Issue 9 item 2: the store location is not trusted. A pointer file or a `.checkpoints` symlink
planted in a cloned repository (stock git makes and clones it) never makes tc-git open, harden
or write the user's `.git` or another project's git directory: init and save are refused with
a clear error and those directories stay byte-identical (hooks, a pre-commit among them,
config, index)."""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from conftest import clean_env, dir_fingerprint, tc, write

from tc_git.base.errors import BadInput, TcError, UnsafeRoot
from tc_git.engine import Engine
from tc_git.storage.store import MARKER, is_ours

pytestmark = pytest.mark.usefixtures("fsck_after")

PRE_COMMIT = b"#!/bin/sh\necho 'user pre-commit ran' >&2\nexit 0\n"


def sh(*args, cwd=None):
    r = subprocess.run(list(args), cwd=cwd, capture_output=True, env=clean_env(
        GIT_AUTHOR_NAME="u", GIT_AUTHOR_EMAIL="u@x", GIT_COMMITTER_NAME="u", GIT_COMMITTER_EMAIL="u@x"))
    assert r.returncode == 0, r.stderr.decode(errors="replace")
    return r.stdout


def clone_with(tmp_path: Path, plant) -> Path:
    """An upstream repository with `plant(dir)` committed, cloned; the clone gets a pre-commit."""
    up = tmp_path / "upstream"
    up.mkdir()
    sh("git", "init", "-q", "-b", "main", cwd=up)
    write(up, "src/app.py", "print('hi')\n")
    plant(up)
    sh("git", "add", "-A", cwd=up)
    sh("git", "commit", "-q", "-m", "upstream", cwd=up)
    ws = tmp_path / "clone"
    sh("git", "clone", "-q", str(up), str(ws))
    hook = ws / ".git" / "hooks" / "pre-commit"
    hook.write_bytes(PRE_COMMIT)
    hook.chmod(0o755)
    sh("git", "config", "user.name", "the user", cwd=ws)
    return ws


def attempts(ws: Path, env=None):
    """init and save through the engine (what the MCP server calls) and the CLI."""
    errors = []
    for call in (lambda: Engine(ws).init("t"), lambda: Engine(ws).save("s"), lambda: Engine(ws).resume()):
        with pytest.raises(TcError) as ei:
            call()
        errors.append(ei.value)
    for args in (["init", "t"], ["save", "s"], ["resume"]):
        r = tc("-C", ws, *args, env=env)
        assert r.returncode == 2 and b"Traceback" not in r.stderr, (args, r.stderr)
        errors.append(r.stderr.decode())
    return errors


POINTERS = {
    "relative .git": lambda up: (up / ".task-checkpoint-store.json").write_text(json.dumps({"store": ".git"})),
    "inside .git": lambda up: (up / ".task-checkpoint-store.json").write_text(json.dumps({"store": ".git/tc-store"})),
    "case .GIT": lambda up: (up / ".task-checkpoint-store.json").write_text(json.dumps({"store": "./.GIT/../.git"})),
    ".checkpoints -> .git": lambda up: os.symlink(".git", up / ".checkpoints"),
}


@pytest.mark.parametrize("case", list(POINTERS))
def test_planted_pointer_or_symlink_cannot_take_over_dot_git(tmp_path, case):
    ws = clone_with(tmp_path, POINTERS[case])
    before = dir_fingerprint(ws / ".git")
    errs = attempts(ws)
    for e in errs:
        msg = e.message if isinstance(e, TcError) else e
        assert "refusing the store" in msg and (".git" in msg or "symbolic link" in msg), msg
    assert dir_fingerprint(ws / ".git") == before  # hooks (pre-commit too), config, index, refs
    assert (ws / ".git" / "hooks" / "pre-commit").read_bytes() == PRE_COMMIT
    assert not (ws / ".git" / "tc").exists()
    # the user's git is still fine and their hook still runs
    write(ws, "x.txt", "x\n")
    sh("git", "add", "x.txt", cwd=ws)
    r = subprocess.run(["git", "commit", "-m", "x"], cwd=ws, capture_output=True, env=clean_env(
        GIT_AUTHOR_NAME="u", GIT_AUTHOR_EMAIL="u@x", GIT_COMMITTER_NAME="u", GIT_COMMITTER_EMAIL="u@x"))
    assert r.returncode == 0 and b"user pre-commit ran" in r.stderr


def test_pointer_into_another_projects_git_dirs(tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    sh("git", "init", "-q", cwd=other)
    bare = tmp_path / "other-bare.git"
    sh("git", "init", "-q", "--bare", str(bare))
    (other / ".git" / "hooks" / "pre-commit").write_bytes(PRE_COMMIT)
    ws = tmp_path / "ws"
    ws.mkdir()
    fps = {p: dir_fingerprint(p) for p in (other / ".git", bare)}
    for target in (other / ".git", bare, bare / "objects"):
        (ws / ".task-checkpoint-store.json").write_text(json.dumps({"store": str(target)}))
        for e in attempts(ws):
            msg = e.message if isinstance(e, TcError) else e
            assert "refusing the store" in msg and "git" in msg, msg
        ws2 = tmp_path / "ws2"
        ws2.mkdir(exist_ok=True)
        with pytest.raises(UnsafeRoot):  # nor when passed explicitly
            Engine(ws2, store=str(target))
    assert {p: dir_fingerprint(p) for p in fps} == fps


def test_store_only_in_a_new_or_empty_directory(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    full = tmp_path / "full"
    write(full, "keep.txt", "mine\n")
    with pytest.raises(UnsafeRoot) as ei:
        Engine(ws, store=str(full))
    assert "non-empty directory" in ei.value.message
    assert sorted(os.listdir(full)) == ["keep.txt"]
    empty = tmp_path / "empty"
    empty.mkdir()
    e = Engine(ws)
    r = e.init("t", store=str(empty))
    assert Path(r["store"]) == empty and is_ours(empty)
    assert json.loads((empty / MARKER).read_text())["format"] == "tc-git-store"
    # the pointer it wrote is honoured, and it is valid JSON whatever the path holds
    assert Engine(ws).store.path == empty
    assert json.loads((ws / ".task-checkpoint-store.json").read_text()) == {"store": empty.as_posix()}


def test_relative_pointer_resolves_against_the_workspace(tmp_path, monkeypatch):
    ws = tmp_path / "ws"
    ws.mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (ws / ".task-checkpoint-store.json").write_text(json.dumps({"store": "../store-of-ws"}))
    monkeypatch.chdir(elsewhere)
    e = Engine(ws)
    assert e.store.path == tmp_path / "store-of-ws"
    e.init("t")
    assert is_ours(tmp_path / "store-of-ws") and not (tmp_path / "store-of-ws" / "..").samefile(elsewhere)
    r = tc("-C", ws, "save", "s", cwd=elsewhere)
    assert r.returncode == 0, r.stderr
    assert not list(elsewhere.iterdir())


def test_stores_made_before_the_marker_still_open(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    e = Engine(ws)
    e.init("t")
    (ws / ".checkpoints" / MARKER).unlink()  # a store from before the marker existed
    assert is_ours(ws / ".checkpoints")
    write(ws, "a.txt", "a\n")
    assert Engine(ws).save("s")["index"] == 1
    Engine(ws).init("again")  # init repairs: the marker is back
    assert (ws / ".checkpoints" / MARKER).is_file()


def test_bad_pointer_files(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    p = ws / ".task-checkpoint-store.json"
    for body in ("not json", json.dumps({"store": 3}), json.dumps({"store": ""}), json.dumps({"store": "a\0b"}),
                 json.dumps(["x"])):
        p.write_text(body)
        with pytest.raises(BadInput) as ei:
            Engine(ws)
        assert "pointer file" in ei.value.message
    p.unlink()
    os.symlink(tmp_path / "target.json", p)
    with pytest.raises(UnsafeRoot):
        Engine(ws)
    assert sorted(os.listdir(ws)) == [".task-checkpoint-store.json"]


HOOK_EVENTS = ("SessionStart", "PostToolUse", "PreCompact", "Stop", "SessionEnd")


@pytest.mark.parametrize("case", ["relative .git", ".checkpoints -> .git"])
def test_hooks_in_a_planted_clone_leave_dot_git_alone(tmp_path, case):
    """The hooks run by themselves in whatever repository the agent opened: each event in a
    clone with a planted pointer or link exits quietly and writes nothing into `.git`."""
    import sys

    ws = clone_with(tmp_path, POINTERS[case])
    transcript = tmp_path / "t.jsonl"
    transcript.write_text(json.dumps({"type": "user", "uuid": "u1", "sessionId": "s1", "message":
                                      {"role": "user", "content": "hi"}, "timestamp": "2026-01-01T00:00:00Z"}) + "\n")
    before = dir_fingerprint(ws / ".git")
    xdg = tmp_path / "xdg"
    for name in HOOK_EVENTS:
        ev = {"session_id": "s1", "transcript_path": str(transcript), "cwd": str(ws), "hook_event_name": name,
              "tool_name": "Write", "tool_input": {"file_path": str(ws / "src/app.py")}}
        r = subprocess.run([sys.executable, "-P", "-m", "tc_git.hooks", name], input=json.dumps(ev).encode(),
                           capture_output=True, env=clean_env(XDG_DATA_HOME=str(xdg)), timeout=60)
        assert r.returncode == 0 and b"Traceback" not in r.stderr, (name, r.stderr)
    import time

    time.sleep(1.0)  # a session-end worker may still be running: let it finish before judging
    assert dir_fingerprint(ws / ".git") == before
    assert (ws / ".git" / "hooks" / "pre-commit").read_bytes() == PRE_COMMIT


@pytest.mark.anyio
@pytest.mark.filterwarnings("ignore:.*(deprecated|removed as of):Warning")
async def test_planted_pointer_over_mcp(tmp_path):
    """The real stdio server: tc_init / tc_save / tc_resume in the planted clone are isError
    unsafe_root; the clone's `.git` stays byte-identical."""
    import sys

    from mcp import Client, StdioServerParameters

    ws = clone_with(tmp_path, POINTERS["relative .git"])
    before = dir_fingerprint(ws / ".git")
    params = StdioServerParameters(command=sys.executable, args=["-m", "tc_git"],
                                   env=clean_env(TC_WATCH="off"), cwd=str(ws))
    async with Client(params, mode="legacy") as c:
        for tool, args in (("tc_init", {"name": "t"}), ("tc_save", {"title": "s"}), ("tc_resume", {}),
                           ("tc_capture", {})):
            r = await c.call_tool(tool, {"root": str(ws), **args})
            text = r.content[0].text
            assert r.is_error and "[unsafe_root]" in text and "refusing the store" in text, text
    assert dir_fingerprint(ws / ".git") == before


def test_a_seed_store_is_not_taken_over(tmp_path, seed_tc):
    """A workspace still holding task-checkpoint-mcp 0.1.7's `.checkpoints/` (made by the seed
    itself): refused with the way to migrate, the seed's files untouched."""
    ws = tmp_path / "ws"
    ws.mkdir()
    write(ws, "a.txt", "a\n")
    seed = seed_tc.TaskCheckpoint(str(ws))
    seed.init(str(ws), "seed task")
    seed.save(str(ws), "one")
    before = dir_fingerprint(ws / ".checkpoints")
    with pytest.raises(UnsafeRoot) as ei:
        Engine(ws)
    assert "task-checkpoint-mcp store" in ei.value.message and "import each handoff directory" in ei.value.message
    assert dir_fingerprint(ws / ".checkpoints") == before


def test_hooks_read_a_relative_pointer_against_the_workspace(tmp_path, monkeypatch):
    from tc_git import hooks

    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / ".task-checkpoint-store.json").write_text(json.dumps({"store": "../store-of-ws"}))
    monkeypatch.delenv("TC_STORE", raising=False)
    Engine(ws).init("t")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    place = hooks.locate(str(ws))
    assert place is not None and place.store == str(tmp_path / "store-of-ws") and place.task
