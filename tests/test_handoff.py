"""Handoff: user-repo export, bundles, import, push/pull. Stock git is the judge, no mocks.

Every scenario compares the user's repository (HEAD, branches, tags, index bytes, stash, config,
hooks) before and after each operation, and `fsck_after` runs `git fsck --full` on every store.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest
from conftest import clean_env, fsck, tc_json, tree_state, write

from tc_git.base.errors import BadInput, Conflict, TcError
from tc_git.engine import Engine

pytestmark = pytest.mark.usefixtures("fsck_after")


# ----------------------------------------------------------------------------- helpers
def g(*args, cwd=None, check=True, input=None) -> str:
    r = subprocess.run(["git", *map(str, args)], cwd=cwd, capture_output=True, env=clean_env(), input=input)
    if check and r.returncode:
        raise AssertionError(f"git {' '.join(map(str, args))}: rc={r.returncode}\n{r.stderr.decode(errors='replace')}")
    return r.stdout.decode(errors="replace")


def gr(*args, cwd=None):
    return subprocess.run(["git", *map(str, args)], cwd=cwd, capture_output=True, env=clean_env())


def make_user_repo(path: Path) -> Path:
    """A user's repository with history, a branch, a tag, a stash, a hook and staged work."""
    path.mkdir(parents=True, exist_ok=True)
    g("init", "-q", "-b", "main", cwd=path)
    g("config", "user.name", "User", cwd=path)
    g("config", "user.email", "user@example.com", cwd=path)
    write(path, "README.md", "# project\n")
    write(path, "src/app.py", "print('v1')\n")
    g("add", "-A", cwd=path)
    g("commit", "-qm", "initial", cwd=path)
    g("branch", "feature", cwd=path)
    g("tag", "v1", cwd=path)
    write(path, "src/app.py", "print('stashed')\n")
    g("stash", "-q", cwd=path)
    write(path, "src/staged.py", "staged = True\n")
    g("add", "src/staged.py", cwd=path)
    write(path, ".git/hooks/pre-commit", "#!/bin/sh\nexit 0\n", 0o755)
    return path


def user_state(repo: Path) -> dict:
    """What tc-git must never change in the user's repository, read by stock git (read-only)."""
    gitdir = Path(g("rev-parse", "--absolute-git-dir", cwd=repo).strip())
    return {
        "HEAD": g("rev-parse", "HEAD", cwd=repo), "symbolic": g("symbolic-ref", "HEAD", cwd=repo),
        "refs": g("for-each-ref", "--format=%(refname) %(objectname)", "refs/heads", "refs/tags", "refs/stash",
                  "refs/remotes", cwd=repo),
        "index": hashlib.sha256((gitdir / "index").read_bytes()).hexdigest(),
        "ls-files": g("ls-files", "-s", cwd=repo), "stash": g("stash", "list", cwd=repo),
        "config": (gitdir / "config").read_bytes(),
        "hooks": sorted((p.name, p.read_bytes()) for p in (gitdir / "hooks").iterdir()),
    }


def store_state(store: Path) -> dict:
    """Every file of a store (content hash), ignoring directory mtimes and the lock file."""
    out = {}
    if not store.exists():
        return out
    for dirpath, _dirs, files in os.walk(store):
        for f in files:
            p = Path(dirpath) / f
            rel = p.relative_to(store).as_posix()
            if rel != "lock":
                out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def chain(store: Path, tid: str) -> list[str]:
    return g(f"--git-dir={store}", "log", "--format=%H %s", f"refs/checkpoints/tasks/{tid}/head").splitlines()


def notes_of(store: Path, tid: str) -> dict:
    out = {}
    for line in chain(store, tid):
        oid = line.split()[0]
        out[oid] = json.loads(g(f"--git-dir={store}", "notes", "--ref=checkpoints", "show", oid))
    return out


def files(root: Path) -> dict:
    return {k: v for k, v in tree_state(root, skip=(b".checkpoints", b".git")).items()}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def world(tmp_path):
    """Workspace A inside a user's git repo with a task of two steps and unsaved work."""
    repo = make_user_repo(tmp_path / "A")
    e = Engine(repo)
    tid = e.init("handoff demo", goal="carry the work to B and back")["task_id"]
    write(repo, "src/app.py", "print('v2')\n")
    write(repo, "bin/run.sh", "#!/bin/sh\necho run\n", 0o755)
    e.save("step one", conclusion="app says v2", next="add a module")
    write(repo, "src/mod.py", "x = 1\n")
    s2 = e.save("step two", conclusion="module added", next="ship it", verified=["pytest"])
    assert s2["git"]["ok"] and s2["git"]["unchanged"] is True, s2["git"]
    write(repo, "notes.txt", "unsaved work\n")  # must travel too: export captures it
    return repo, e, tid


# ----------------------------------------------------------------------------- user repository
def test_steps_appear_in_the_users_repo_and_nothing_else_changes(tmp_path):
    repo = make_user_repo(tmp_path / "R")
    sub = repo / "pkg"  # the workspace is a subdirectory of the repository
    write(sub, "a.py", "a = 1\n")
    before = user_state(repo)
    packs0 = set(os.listdir(repo / ".git/objects/pack"))
    e = Engine(sub)
    tid = e.init("sub")["task_id"]
    s1 = e.save("first", conclusion="c1", next="n1")
    assert s1["git"]["ok"] and s1["git"]["unchanged"] is True and s1["git"]["ref"].endswith(f"{tid}/head")
    write(sub, "b.py", "b = 2\n")
    s2 = e.save("second")
    assert s2["git"]["ok"] and s2["git"]["unchanged"] is True
    assert user_state(repo) == before
    new_packs = {p for p in set(os.listdir(repo / ".git/objects/pack")) - packs0 if p.endswith(".pack")}
    assert len(new_packs) == 2  # one pack per step, incremental
    log = g("log", "--format=%s%n%(trailers:key=Tc-Kind,valueonly)", f"refs/checkpoints/tasks/{tid}/head", cwd=repo)
    assert "step 2: second" in log and "step 1: first" in log and "step" in log.split("\n")[1]
    notes = g("log", "--notes=checkpoints", "-1", f"refs/checkpoints/tasks/{tid}/head", cwd=repo)
    assert '"title": "second"' in notes
    assert g("cat-file", "-p", f"refs/checkpoints/tasks/{tid}/head:b.py", cwd=repo) == "b = 2\n"
    fsck(repo / ".git")
    # identical re-save: no new step, nothing exported
    assert e.save("second")["git"]["reason"] == "no new step"


def test_tc_git_off_and_no_repository(tmp_path, monkeypatch):
    repo = make_user_repo(tmp_path / "R")
    monkeypatch.setenv("TC_GIT", "off")  # (settings are read when the engine is made)
    e = Engine(repo)
    e.init("off")
    r = e.save("s")["git"]
    assert r["reason"] == "TC_GIT=off" and not r["ok"]
    assert g("for-each-ref", "refs/checkpoints", cwd=repo) == ""
    plain = tmp_path / "plain"
    plain.mkdir()
    monkeypatch.delenv("TC_GIT")
    e2 = Engine(plain)
    e2.init("plain")
    write(plain, "x", "1")
    assert e2.save("s")["git"]["reason"] == "not a git repo"


# ----------------------------------------------------------------------------- bundles A -> B -> A
def test_bundle_round_trip_A_to_B_and_back(world, tmp_path):
    repo, a, tid = world
    out = tmp_path / "out"
    out.mkdir()
    before = user_state(repo)
    want = files(repo)
    x = a.export(out)
    assert user_state(repo) == before
    assert x["captured"] and Path(x["path"]).name == f"{tid}.bundle" and (out / "HANDOFF.md").is_file()
    md = (out / "HANDOFF.md").read_text()
    assert "tc-git import" in md and "git fetch" in md and "step two" in md
    # stock git is the judge: verify, fetch, clone
    assert "is okay" in g("bundle", "verify", x["path"], cwd=repo, check=True) + gr(
        "bundle", "verify", x["path"], cwd=repo).stderr.decode()
    plain = tmp_path / "plain.git"
    g("init", "-q", "--bare", plain)
    g(f"--git-dir={plain}", "fetch", "-q", x["path"], "refs/checkpoints/*:refs/checkpoints/*", "refs/notes/*:refs/notes/*")
    assert "step 2: step two" in g(f"--git-dir={plain}", "log", "--format=%s", f"refs/checkpoints/tasks/{tid}/head")
    assert '"conclusion": "module added"' in g(f"--git-dir={plain}", "log", "--notes=checkpoints",
                                               f"refs/checkpoints/tasks/{tid}/head")
    fsck(plain)
    g("clone", "-q", "--mirror", x["path"], tmp_path / "mirror.git")
    fsck(tmp_path / "mirror.git")

    # B: another path, not a git repository; preview first, nothing written to the workspace
    wb = tmp_path / "elsewhere" / "B"
    wb.mkdir(parents=True)
    b = Engine(wb)
    r = b.import_(x["path"])
    assert r["task_id"] == tid and r["restore"]["applied"] is False and files(wb) == {}
    assert b.store.active_task() == tid
    assert chain(b.store.path, tid) == chain(a.store.path, tid)
    assert notes_of(b.store.path, tid) == notes_of(a.store.path, tid)
    # the engine's restore brings the files (undoable)
    target = r["restore"]["target"]
    applied = b.restore(drift_id=target, apply=True) if target.startswith("d") else b.restore(index=int(target[1:]), apply=True)
    assert applied["applied"] and files(wb) == want
    # continue there: save, restore, undo
    write(wb, "src/from_b.py", "b = True\n")
    sb = b.save("step three in B", conclusion="B was here", next="bring it back")
    assert sb["index"] == 3
    rb = b.restore(index=1, apply=True)
    assert not (wb / "src/mod.py").exists()
    b.restore(drift_id=rb["recovered"], apply=True)
    assert (wb / "src/from_b.py").read_text() == "b = True\n"
    want_b = files(wb)

    # incremental bundle back to A
    y = b.export(out, since=x["path"])
    assert y["incremental"] and set(x["refs"].values()) & set(y["prerequisites"])
    assert y["objects"] < x["objects"] + 20
    empty = tmp_path / "empty"
    g("init", "-q", empty)
    assert gr("bundle", "verify", y["path"], cwd=empty).returncode != 0  # lacks the prerequisites
    assert gr("bundle", "verify", y["path"], cwd=plain).returncode == 0
    g(f"--git-dir={plain}", "fetch", "-q", y["path"], "refs/checkpoints/*:refs/checkpoints/*", "+refs/notes/*:refs/notes/*")
    fsck(plain)

    state = store_state(a.store.path)
    with pytest.raises(Conflict, match="already exists"):
        a.import_(y["path"])
    assert store_state(a.store.path) == state
    back = a.import_(y["path"], merge=True)
    assert back["fast_forwarded"] == [f"refs/checkpoints/tasks/{tid}/head"]
    assert chain(a.store.path, tid) == chain(b.store.path, tid)
    assert notes_of(a.store.path, tid) == notes_of(b.store.path, tid)
    assert back["git"]["ok"] and back["git"]["unchanged"] is True
    assert g("rev-parse", f"refs/checkpoints/tasks/{tid}/head", cwd=repo) == g(
        f"--git-dir={b.store.path}", "rev-parse", f"refs/checkpoints/tasks/{tid}/head")
    rs = back["restore"]
    assert not rs["applied"] and "src/from_b.py" in rs["plan"]["to_write"]
    a.restore(index=3, apply=True)
    assert files(repo) == {**want_b, **{k: v for k, v in files(repo).items() if k.startswith(b"src/staged")}}
    # re-importing the same bundle is a no-op
    again = a.import_(y["path"], merge=True)
    assert again["fast_forwarded"] == [] and again["kept_local"]
    after = user_state(repo)
    assert {k: v for k, v in after.items() if k not in ("index", "ls-files")} == {
        k: v for k, v in before.items() if k not in ("index", "ls-files")}
    assert after["index"] == before["index"]  # restores write files, never the user's index
    fsck(repo / ".git")


def test_cli_export_import(world, tmp_path):
    repo, a, tid = world
    out = tmp_path / "cli"
    out.mkdir()
    x = tc_json("-C", repo, "export", out)
    assert x["task_id"] == tid
    wb = tmp_path / "B"
    wb.mkdir()
    r = tc_json("-C", wb, "import", x["path"], "--apply")
    assert r["restore"]["applied"] and (wb / "src/mod.py").read_text() == "x = 1\n"
    r2 = tc_json("-C", wb, "import", x["path"], "--rename", "copy-of-task")
    assert r2["task_id"] == "copy-of-task"
    assert "copy-of-task" in g(f"--git-dir={wb / '.checkpoints'}", "log", "-1", "--format=%B",
                               "refs/checkpoints/tasks/copy-of-task/head")


# ----------------------------------------------------------------------------- refusals
def _craft(path: Path, header_lines: list[bytes], pack: bytes) -> Path:
    path.write_bytes(b"# v2 git bundle\n" + b"".join(header_lines) + b"\n" + pack)
    return path


def test_tampered_bundles_are_refused_with_nothing_written(world, tmp_path):
    repo, a, tid = world
    out = tmp_path / "out"
    out.mkdir()
    x = a.export(out)
    raw = Path(x["path"]).read_bytes()
    head_end = raw.index(b"\n\n") + 2
    header, pack = raw[:head_end], raw[head_end:]
    lines = header.split(b"\n")[1:-2]
    bad = tmp_path / "bad"
    bad.mkdir()
    cases = {
        "truncated": raw[: len(raw) - 200],
        "corrupt": raw[: head_end + len(pack) // 2] + bytes([raw[head_end + len(pack) // 2] ^ 0xFF])
        + raw[head_end + len(pack) // 2 + 1:],
        "not-a-bundle": b"hello world\n",
    }
    for name, data in cases.items():
        (bad / f"{name}.bundle").write_bytes(data)
    # a ref that names an object not in the pack
    wrong = [ln if b"tasks/" not in ln else b"0123456789abcdef0123456789abcdef01234567 " + ln.split(b" ", 1)[1]
             for ln in lines]
    _craft(bad / "wrong-ref.bundle", [ln + b"\n" for ln in wrong], pack)
    # refs outside our namespaces: crafted, and made by stock git from the user's branches
    _craft(bad / "outside.bundle", [ln + b"\n" for ln in lines] + [lines[0].split(b" ")[0] + b" refs/heads/main\n"], pack)
    g("bundle", "create", "-q", bad / "branches.bundle", "main", cwd=repo)
    # prerequisites this store does not have
    other = Engine(make_user_repo(tmp_path / "O"))
    other.init("other")
    write(other.root, "o.txt", "o")
    other.save("o1")
    first = other.export(tmp_path / "o1.bundle")
    write(other.root, "o.txt", "o2")
    other.save("o2")
    other.export(bad / "missing-prereq.bundle", since=first["path"])
    # a bundle whose only ref is the notes: no task
    _craft(bad / "no-task.bundle", [ln + b"\n" for ln in lines if b"notes" in ln], pack)

    wb = tmp_path / "B"
    wb.mkdir()
    fresh = Engine(wb)
    for f in sorted(bad.iterdir()):
        for eng in (a, fresh):
            before = store_state(eng.store.path)
            ws_before = files(eng.root)
            with pytest.raises(TcError) as ei:
                eng.import_(f, merge=True)
            assert ei.value.message, f.name
            assert store_state(eng.store.path) == before, f"{f.name} wrote into {eng.root}"
            assert files(eng.root) == ws_before
        assert not (wb / ".checkpoints").exists(), f.name
    # the messages say what is wrong
    with pytest.raises(BadInput, match="outside refs/checkpoints"):
        fresh.import_(bad / "branches.bundle")
    with pytest.raises(BadInput, match="prerequisites"):
        fresh.import_(bad / "missing-prereq.bundle")
    with pytest.raises(BadInput, match="corrupt or truncated"):
        fresh.import_(bad / "truncated.bundle")
    assert not list((a.store.path / "tc").glob("quarantine-*"))


def test_seed_handoff_directory_is_migrated(tmp_path, seed_tc):
    seed = seed_tc  # task-checkpoint-mcp 0.1.7

    src = tmp_path / "seedws"
    src.mkdir()
    write(src, "main.py", "print('seed')\n")
    write(src, "lib/util.py", "u = 1\n")
    write(src, ".env", "API_KEY=sk-live-123\n")
    s = seed.TaskCheckpoint(str(src))
    tid = s.init(str(src), "seed task", goal="migrate me")["task_id"]
    s.save(str(src), "seed step", conclusion="seed works", next_step="port it")
    pkg_root = tmp_path / "pkgs"
    pkg_root.mkdir()
    pkg = Path(s.export(str(src), str(pkg_root))["path"])
    wb = tmp_path / "B"
    wb.mkdir()
    b = Engine(wb)
    r = b.import_(pkg, apply=True)
    assert r["task_id"] == tid and r["format"] == "task-checkpoint-mcp"
    assert (wb / "main.py").read_text() == "print('seed')\n" and not (wb / ".env").exists()
    res = b.resume()
    assert res["goal"] == "migrate me" and res["next"] == "port it"
    # hostile packages: a symlink, a reserved path; nothing written
    for name, make in (("link", lambda f: os.symlink("/etc/passwd", f / "passwd-link")),
                       ("gitdir", lambda f: write(f, ".git/config", "[core]\n"))):
        evil = tmp_path / f"evil-{name}"
        shutil.copytree(pkg, evil)
        make(evil / "files")
        wc = tmp_path / f"C-{name}"
        wc.mkdir()
        with pytest.raises(BadInput, match="symlink|reserved|escapes"):
            Engine(wc).import_(evil)
        assert not (wc / ".checkpoints").exists()
    with pytest.raises(Conflict):
        b.import_(pkg)


# ----------------------------------------------------------------------------- remotes
def _round_trip_through(url: str, world, tmp_path):
    repo, a, tid = world
    before = user_state(repo)
    p = a.push(url)
    assert p["ok"] and not p["conflicts"]
    remote_refs = g("ls-remote", url)
    assert f"refs/checkpoints/tasks/{tid}/head" in remote_refs and "refs/notes/checkpoints" in remote_refs
    assert user_state(repo) == before
    assert a.push(url)["pushed"] == []  # idempotent
    wb = tmp_path / "B"
    wb.mkdir()
    b = Engine(wb)
    pl = b.pull(url)
    assert f"refs/checkpoints/tasks/{tid}/head" in pl["created"] and pl["store_created"]
    assert chain(b.store.path, tid) == chain(a.store.path, tid)
    b.switch(tid)
    b.restore(index=2, apply=True)
    write(wb, "b.txt", "from B\n")
    b.save("step three in B")
    # meanwhile A starts another task: the notes diverge
    t2 = a.init("second task")["task_id"]
    write(repo, "t2.txt", "t2\n")
    a.save("t2 step")
    assert b.push(url)["pushed"]
    pa = a.push(url)
    assert pa["notes"] == "merged" and f"refs/checkpoints/tasks/{tid}/head" in pa["remote_ahead"]
    back = a.pull(url)
    assert f"refs/checkpoints/tasks/{tid}/head" in back["fast_forwarded"]
    assert chain(a.store.path, tid) == chain(b.store.path, tid)
    assert notes_of(a.store.path, tid) == notes_of(b.store.path, tid)  # B's notes survived the merge
    assert notes_of(a.store.path, t2)  # and A's too
    pb = b.pull(url)
    assert f"refs/checkpoints/tasks/{t2}/head" in pb["created"]
    assert notes_of(b.store.path, t2) == notes_of(a.store.path, t2)
    assert user_state(repo) == before
    return a, b, tid


def test_push_pull_through_a_bare_repository(world, tmp_path):
    remote = tmp_path / "remote.git"
    g("init", "-q", "--bare", remote)
    repo = world[0]
    g("remote", "add", "origin", remote, cwd=repo)  # default remote: the user's origin
    before = user_state(repo)
    first = world[1].push()
    assert first["remote"] == str(remote) and f"refs/checkpoints/tasks/{world[2]}/head" in first["pushed"]
    assert user_state(repo) == before
    _round_trip_through(str(remote), world, tmp_path)
    fsck(remote)
    assert g(f"--git-dir={remote}", "for-each-ref", "refs/heads") == ""  # only our namespaces


def test_push_pull_through_git_daemon_and_server_rejection(world, tmp_path):
    base = tmp_path / "srv"
    base.mkdir()
    g("init", "-q", "--bare", base / "remote.git")
    port = free_port()
    d = subprocess.Popen(["git", "daemon", "--export-all", "--enable=receive-pack", "--reuseaddr",
                          "--listen=127.0.0.1", f"--port={port}", f"--base-path={base}", str(base)],
                         env=clean_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.05)
        url = f"git://127.0.0.1:{port}/remote.git"
        a, b, tid = _round_trip_through(url, world, tmp_path)
        fsck(base / "remote.git")
        # a server-side rejection is reported, never swallowed
        hook = write(base / "remote.git", "hooks/update", "#!/bin/sh\necho no >&2\nexit 1\n", 0o755)
        write(b.root, "c.txt", "c\n")
        b.save("rejected step")
        with pytest.raises(Conflict, match="rejected"):
            b.push(url)
        hook.unlink()
        assert f"refs/checkpoints/tasks/{tid}/head" in b.push(url)["pushed"]
    finally:
        d.terminate()
        d.wait(timeout=10)


# ----------------------------------------------------------------------------- trajectory links
def test_linked_session_and_milestone_travel_with_the_task(world, tmp_path):
    import pygit2

    from tc_git.trajectory import milestones

    repo, a, tid = world
    r = a.repo
    sig = pygit2.Signature("tc-git", "tc-git@localhost", 1700000000, 0)
    tb = r.TreeBuilder()
    tb.insert("event.json", r.create_blob(b'{"kind": "user", "text": "hi"}'), pygit2.enums.FileMode.BLOB)
    ev = r.create_commit(None, sig, sig, "user: hi\n", tb.write(), [])
    r.references.create("refs/checkpoints/sessions/claude-s1/main", ev)
    unrelated = r.create_commit(None, sig, sig, "unrelated\n", r.TreeBuilder().write(), [])
    r.references.create("refs/checkpoints/sessions/other-s9/main", unrelated)
    head = r.references[f"refs/checkpoints/tasks/{tid}/head"].target
    milestones.set_milestone(r, "tests-green", str(ev), session="claude-s1", code_commit=str(head))
    write(repo, "more.py", "m = 1\n")
    s = a.save("after milestone")
    assert s["git"]["ok"] and s["git"]["unchanged"]
    assert g("rev-parse", "refs/checkpoints/milestones/tests-green", cwd=repo).strip() == str(ev)
    x = a.export(tmp_path / "m.bundle")
    assert "refs/checkpoints/milestones/tests-green" in x["refs"]
    assert "refs/checkpoints/sessions/claude-s1/main" in x["refs"]
    assert "refs/checkpoints/sessions/other-s9/main" not in x["refs"]
    wb = tmp_path / "B"
    wb.mkdir()
    b = Engine(wb)
    b.import_(x["path"])
    assert milestones.get_milestone(b.repo, "tests-green").code_commit == str(head)


def test_bundle_carries_only_the_exported_tasks_notes(tmp_path, monkeypatch):
    monkeypatch.setenv("TC_GIT", "off")
    ws = tmp_path / "ws"
    ws.mkdir()
    write(ws, "a.txt", "a\n")
    e = Engine(ws)
    other = e.init("private other task")["task_id"]
    e.save("secret plan for the other task")
    mine = e.init("shared task")["task_id"]
    write(ws, "b.txt", "b\n")
    e.save("shared step")
    out = tmp_path / "out"
    out.mkdir()
    b = Path(e.export(out)["path"])
    clone = tmp_path / "clone.git"
    g("init", "-q", "--bare", str(clone))
    g("--git-dir", str(clone), "fetch", "-q", str(b), "refs/checkpoints/*:refs/checkpoints/*",
      "refs/notes/*:refs/notes/*")
    notes = g("--git-dir", str(clone), "log", "--notes=checkpoints", "--format=%N",
              f"refs/checkpoints/tasks/{mine}/head")
    assert "shared step" in notes
    everything = g("--git-dir", str(clone), "cat-file", "--batch-all-objects", "--batch")
    assert "secret plan for the other task" not in everything and other not in everything
    # the exporting store keeps all its notes
    assert "secret plan" in g("--git-dir", str(ws / ".checkpoints"), "log", "--notes=checkpoints", "--format=%N",
                              f"refs/checkpoints/tasks/{other}/head")
