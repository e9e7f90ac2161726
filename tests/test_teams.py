"""Teams: many workspaces, one remote (issue 34). Pushes that race converge by themselves, a
remote's own rules apply and a refused push leaves nothing half-pushed, anything left unsynced
is a non-zero exit / isError, a task continued on two machines becomes one task with two lines.
Stock git and a real `git daemon` on loopback judge; no mocks."""
from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import pygit2
import pytest
from conftest import clean_env, fsck, tc, write

from tc_git.base.errors import Conflict
from tc_git.engine import Engine

pytestmark = pytest.mark.usefixtures("fsck_after")

ENV = clean_env(TC_GIT="off")


def g(*args, cwd=None) -> str:
    r = subprocess.run(["git", *map(str, args)], cwd=cwd, capture_output=True, env=clean_env())
    assert r.returncode == 0, r.stderr.decode(errors="replace")
    return r.stdout.decode()


def refs_of(gitdir: Path) -> dict[str, str]:
    out = g(f"--git-dir={gitdir}", "for-each-ref", "--format=%(refname) %(objectname)")
    return dict(line.split() for line in out.splitlines() if line.startswith(("refs/checkpoints/", "refs/notes/")))


def bare(path: Path) -> Path:
    g("init", "-q", "--bare", path)
    return path


@pytest.fixture
def daemon(tmp_path):
    """`git daemon` with receive-pack on loopback, serving tmp_path/srv; yields (base, url of a name)."""
    base = tmp_path / "srv"
    base.mkdir()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    d = subprocess.Popen(["git", "daemon", "--export-all", "--enable=receive-pack", "--reuseaddr",
                          "--listen=127.0.0.1", f"--port={port}", f"--base-path={base}", str(base)],
                         env=clean_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.05)  # (waiting for the daemon to listen, not synchronising workers)
        yield base, lambda name: f"git://127.0.0.1:{port}/{name}"
    finally:
        d.terminate()
        d.wait(timeout=30)


def workspace(tmp_path: Path, name: str, task: str | None = "t") -> tuple[Path, Engine]:
    ws = tmp_path / name
    ws.mkdir()
    write(ws, "README", f"{name}\n")
    e = Engine(ws)
    if task:
        e.init(task)
        e.save(f"{name}: first")
    return ws, e


# ------------------------------------------------------------------ refusals and exit codes
def test_a_remote_refusing_the_notes_gets_nothing_and_push_exits_non_zero(tmp_path, monkeypatch):
    """Over a path, the remote's own update hook runs (git's receive side); it refuses
    refs/notes/*, so the task ref must not land either (atomic), and the CLI says so, exit 2."""
    monkeypatch.setenv("TC_GIT", "off")
    remote = bare(tmp_path / "r.git")
    hook = write(remote, "hooks/update", '#!/bin/sh\ncase "$1" in refs/notes/*) echo "no notes here" >&2; exit 1;; esac\n',
                 0o755)
    ws, e = workspace(tmp_path, "A")
    r = tc("push", remote, cwd=ws, env=ENV)
    err = r.stderr.decode()
    assert r.returncode == 2, (r.stdout, err)
    assert "refs/notes/checkpoints" in err and "nothing of it was applied" in err
    assert refs_of(remote) == {}  # nothing half-pushed: no nameless task without its notes
    r = tc("--json", "push", remote, cwd=ws, env=ENV)
    assert r.returncode == 2 and json.loads(r.stdout)["isError"] is True
    hook.unlink()
    out = json.loads(tc("--json", "push", remote, cwd=ws, env=ENV, check=True).stdout)
    assert out["ok"] and refs_of(remote) == refs_of(ws / ".checkpoints")


def test_a_diverged_milestone_makes_push_and_pull_exit_non_zero(tmp_path, monkeypatch):
    monkeypatch.setenv("TC_GIT", "off")
    remote = bare(tmp_path / "r.git")
    wa, a = workspace(tmp_path, "A")
    a.push(str(remote))
    wb, b = workspace(tmp_path, "B", task=None)
    b.pull(str(remote))
    b.init("b's own")
    b.save("b: first")
    for e, msg in ((a, "ma"), (b, "mb")):  # the same milestone name, set apart on each side
        r = e.repo
        sig = pygit2.Signature("t", "t@x", 1700000000, 0)
        c = r.create_commit(None, sig, sig, msg + "\n", r.TreeBuilder().write(), [])
        r.references.create("refs/checkpoints/milestones/shared", c)
    assert tc("push", remote, cwd=wa, env=ENV).returncode == 0
    r = tc("push", remote, cwd=wb, env=ENV)
    err = r.stderr.decode()
    assert r.returncode == 2 and "refs/checkpoints/milestones/shared" in err and "pushed the rest" in err
    b_task = f"refs/checkpoints/tasks/{b.store.active_task()}/head"
    assert refs_of(remote)[b_task] == refs_of(wb / ".checkpoints")[b_task]  # the rest did go
    r = tc("pull", remote, cwd=wb, env=ENV)
    assert r.returncode == 2 and "refs/checkpoints/milestones/shared" in r.stderr.decode()
    with pytest.raises(Conflict, match="milestones/shared"):
        b.pull(str(remote))


# ------------------------------------------------------------------ concurrency
WORKER = r"""
import sys
from pathlib import Path
from tc_git.engine import Engine
ws, url, rounds = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
e = Engine(ws)
attempts = 0
for i in range(rounds):
    (ws / f"f{i}.txt").write_text(f"{ws.name} round {i}\n")
    e.save(f"{ws.name} round {i}")
    r = e.push(url)  # raises (exit 1) unless everything is on the remote
    attempts += r["attempts"]
print(attempts)
"""


def _race(tmp_path: Path, url: str, remote: Path, n: int = 6, rounds: int = 2) -> None:
    spaces = [workspace(tmp_path, f"w{i}", task=f"task{i}")[0] for i in range(n)]
    procs = [subprocess.Popen([sys.executable, "-c", WORKER, str(ws), url, str(rounds)], env=ENV,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) for ws in spaces]
    for p, ws in zip(procs, spaces):
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, f"{ws.name}: {err.decode(errors='replace')[-2000:]}"
    want = refs_of(remote)
    assert len([r for r in want if r.endswith("/head")]) == n
    for ws in spaces:
        Engine(ws).pull(url)
        assert refs_of(ws / ".checkpoints") == want  # every store equal to the remote
    notes = g(f"--git-dir={remote}", "log", "--notes=checkpoints", "--format=%N", "--all")
    for i in range(n):
        for k in range(rounds):
            assert f"w{i} round {k}" in notes  # every step's note survived the races
    fsck(remote)


def test_six_workspaces_push_at_once_to_a_path_and_all_converge(tmp_path):
    remote = bare(tmp_path / "r.git")
    _race(tmp_path, str(remote), remote)


def test_six_workspaces_push_at_once_through_git_daemon_and_all_converge(tmp_path, daemon):
    base, url = daemon
    remote = bare(base / "r.git")
    _race(tmp_path, url("r.git"), remote)


# ------------------------------------------------------------------ shared tasks, pull's leftovers
def test_one_task_continued_on_two_machines_keeps_both_lines(tmp_path, monkeypatch):
    monkeypatch.setenv("TC_GIT", "off")
    remote = bare(tmp_path / "r.git")
    wa, a = workspace(tmp_path, "A", task="shared")
    tid = a.store.active_task()
    a.push(str(remote))
    wb, b = workspace(tmp_path, "B", task=None)
    pl = b.pull(str(remote))
    assert pl["tasks"] == [tid] and "switch <task>" in pl["hint"] and tid in pl["hint"]
    b.switch(tid)
    write(wb, "b.txt", "b's work\n")
    b.save("b continues")
    write(wa, "a.txt", "a's work\n")
    a.save("a continues")
    a.push(str(remote))
    head = f"refs/checkpoints/tasks/{tid}/head"
    a_tip, b_tip = refs_of(wa / ".checkpoints")[head], refs_of(wb / ".checkpoints")[head]
    pb = b.push(str(remote))  # no conflict: the remote's head stays head, B's work becomes a line
    line = pb["lines"][head]
    assert line.startswith(f"refs/checkpoints/tasks/{tid}/lines/") and "adopt" in pb["hint"]
    on_remote = refs_of(remote)
    assert on_remote[head] == a_tip and on_remote[line] == b_tip
    assert b.pull(str(remote))["ok"]
    pa = a.pull(str(remote))
    assert line in pa["created"] and pa["tasks"] == []
    assert refs_of(wa / ".checkpoints") == refs_of(wb / ".checkpoints") == refs_of(remote)
    assert b.push(str(remote))["pushed"] == [] and a.push(str(remote))["pushed"] == []  # not repeated
    assert [t["task_id"] for t in b.tasks()] == [tid]  # one task, no new ids
    name = line.rsplit("/", 1)[1]
    for ws in (wa, wb):  # both see both lines: the head's steps and the other line
        out = tc("log", cwd=ws, env=ENV, check=True).stdout.decode()
        assert "a continues" in out and f"{name}: b continues" in out and f"adopt {name}" in out
    for e in (a, b):  # resume names it, in the result and the handoff text
        r = e.resume()
        assert r["lines"] == [name] and "adopt <line>" in r["handoff"] and name in r["handoff"]
    assert name in Path(a.view()["path"]).read_text()  # and the view
    pv = a.restore(at=b_tip[:12])  # a line's point is restorable like any other
    assert pv["plan"]["to_write"] == ["b.txt"] and pv["plan"]["to_delete"] == ["a.txt"]
    j = json.loads(tc("--json", "adopt", name, cwd=wa, env=ENV, check=True).stdout)  # one command joins
    assert j["files_from"] == "line" and "restore" in j["hint"]
    assert g(f"--git-dir={wa / '.checkpoints'}", "rev-parse", f"{head}^1", f"{head}^2").split() == [a_tip, b_tip]
    assert "b.txt" in g(f"--git-dir={wa / '.checkpoints'}", "ls-tree", "--name-only", head)
    a.push(str(remote))
    b.pull(str(remote))
    assert refs_of(wa / ".checkpoints") == refs_of(wb / ".checkpoints") == refs_of(remote)
    for e in (a, b):
        assert e.lines() == [] and e.resume()["lines"] == []
    write(wb, "c.txt", "after the join\n")
    b.save("b goes on after the join")
    assert b.push(str(remote))["lines"] == {}  # the head moved on: no new line, no conflict


def test_a_compressed_task_replaces_its_old_chain_on_the_remote(tmp_path, daemon, monkeypatch):
    """compress rewrites a task's chain: a remote that still holds the old one holds no work of
    anyone else. Push replaces it (forced only while the remote holds that old chain), pull keeps
    ours, and neither makes a line of it. Work someone else built on the old chain is never
    replaced: that task was continued on two machines, and becomes two lines as always."""
    monkeypatch.setenv("TC_GIT", "off")
    base, url = daemon
    bare(base / "r.git")
    remote = url("r.git")
    wa, a = workspace(tmp_path, "A", task="shared")
    tid = a.store.active_task()
    head = f"refs/checkpoints/tasks/{tid}/head"
    for i in range(4):
        write(wa, "a.txt", f"{i}\n")
        a.capture()
        write(wa, "a.txt", f"saved {i}\n")
        a.save(f"a{i}")
    a.push(remote)
    wc, c = workspace(tmp_path, "C", task=None)  # has the old chain before the compress
    c.pull(remote)
    c.switch(tid)
    assert a.compress(keep_seconds=0, minimum=0, maximum=1)["converted"] >= 3
    new = refs_of(wa / ".checkpoints")[head]
    pl = a.pull(remote)  # the remote's old chain is ours before compress: ours stays, no line
    assert pl["ok"] and refs_of(wa / ".checkpoints")[head] == new and a.lines() == []
    pa = a.push(remote)
    assert head in pa["pushed"] and pa["lines"] == {}, pa
    assert refs_of(base / "r.git")[head] == new
    wb, b = workspace(tmp_path, "B", task=None)
    b.pull(remote)
    assert refs_of(wb / ".checkpoints")[head] == new and b.log(tid)[0]["title"] == "a3"
    # C continued the old chain: its push keeps the remote's head and C's work as a line
    write(wc, "c.txt", "c's work\n")
    c.save("c continues")
    c_tip = refs_of(wc / ".checkpoints")[head]
    pc = c.push(remote)
    line = pc["lines"][head]
    assert refs_of(base / "r.git")[head] == new and refs_of(base / "r.git")[line] == c_tip
    # and A, pulling, gets C's line; a push after it replaces nothing of C's
    a.pull(remote)
    write(wa, "a.txt", "after\n")
    a.save("after compress")
    assert a.push(remote)["ok"] and refs_of(base / "r.git")[line] == c_tip
    fsck(base / "r.git")


def test_a_later_pull_removes_what_a_killed_pull_left(tmp_path, monkeypatch):
    monkeypatch.setenv("TC_GIT", "off")
    remote = bare(tmp_path / "r.git")
    wa, a = workspace(tmp_path, "A")
    a.push(str(remote))
    wb, b = workspace(tmp_path, "B", task="other")
    left = b.store.path / "tc" / "quarantine-killed"  # what a pull killed mid-fetch leaves
    write(left, "objects/pack/pack-x.pack", b"PACK")
    assert b.pull(str(remote))["ok"]
    assert not list((b.store.path / "tc").glob("quarantine-*"))


def test_two_different_notes_on_one_commit_end_the_same_on_both_machines(tmp_path, monkeypatch):
    """The notes are per-commit JSON; when two machines wrote different notes for one commit the
    merge joins them the same way on both sides (not `ours wins`, which differs per side)."""
    monkeypatch.setenv("TC_GIT", "off")
    remote = bare(tmp_path / "r.git")
    wa, a = workspace(tmp_path, "A")
    a.push(str(remote))
    wb, b = workspace(tmp_path, "B", task=None)
    b.pull(str(remote))
    head = refs_of(wa / ".checkpoints")[f"refs/checkpoints/tasks/{a.store.active_task()}/head"]
    sig = pygit2.Signature("t", "t@x", 1700000000, 0)
    for e, extra in ((a, {"reviewed_by": "a"}), (b, {"label": "b"})):
        rec = json.loads(e.repo.lookup_note(head, "refs/notes/checkpoints").message)
        e.repo.create_note(json.dumps({**rec, **extra}), sig, sig, head, "refs/notes/checkpoints", True)
    a.push(str(remote))
    assert b.push(str(remote))["notes"] == "merged"
    a.pull(str(remote))
    notes = [g(f"--git-dir={ws / '.checkpoints'}", "notes", "--ref=checkpoints", "show", head) for ws in (wa, wb)]
    assert notes[0] == notes[1] and '"reviewed_by": "a"' in notes[0] and '"label": "b"' in notes[0]
    assert refs_of(wa / ".checkpoints") == refs_of(wb / ".checkpoints") == refs_of(remote)


def test_a_shared_task_keeps_mirroring_into_the_users_repository(tmp_path):
    """With the workspace in a git repository (TC_GIT on), a head the remote won moves there too,
    beside the line that keeps the local tip: the next save's mirror is not stuck on a diverged ref."""
    remote = bare(tmp_path / "r.git")
    spaces = []
    for name in ("A", "B"):
        ws = tmp_path / name
        ws.mkdir()
        g("init", "-q", cwd=ws)
        write(ws, "README", f"{name}\n")
        spaces.append((ws, Engine(ws)))
    (wa, a), (wb, b) = spaces
    tid = a.init("shared")["task_id"]
    a.save("a: first")
    a.push(str(remote))
    b.pull(str(remote))
    b.switch(tid)
    write(wb, "b.txt", "b\n")
    b.save("b continues")
    write(wa, "a.txt", "a\n")
    a.save("a continues")
    a.push(str(remote))
    line = b.push(str(remote))["lines"][f"refs/checkpoints/tasks/{tid}/head"]
    write(wb, "c.txt", "c\n")
    s = b.save("b after the push")
    assert s["git"]["ok"], s["git"]
    head = f"refs/checkpoints/tasks/{tid}/head"
    mine = refs_of(wb / ".git")
    assert mine[head] == refs_of(wb / ".checkpoints")[head] and mine[line] == refs_of(wb / ".checkpoints")[line]
    fsck(wb / ".git")
