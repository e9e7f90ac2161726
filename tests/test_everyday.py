"""Issue 29: everyday commands around a workspace with a store, judged by stock git.

* `git clean -fdx` (and `-fdX`) keeps the store: it is a nested repository to git; `git status`
  and `git add -A` still do not see it (one pattern in the repository's info/exclude).
* `git clean -ffdx` removes it anyway: every command then says the repository still holds the
  mirrored tasks, and `tc-git recover` brings back every mirrored step with its id.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import TC, clean_env, fsck, knobs, tc, tc_json, write

from tc_git.base.errors import BadInput, NotFound
from tc_git.engine import Engine

pytestmark = pytest.mark.usefixtures("fsck_after")


def _git(ws, *args) -> str:
    r = subprocess.run(["git", *args], cwd=ws, env=clean_env(), capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return r.stdout


def _repo(ws):
    _git(ws, "init", "-q")
    write(ws, "app.py", b"print(1)\n")
    _git(ws, "add", "app.py")
    _git(ws, "-c", "user.name=u", "-c", "user.email=u@x", "commit", "-qm", "first")


def _ids(ws) -> list[tuple[str, str]]:
    return [(e["id"], e["commit"]) for e in Engine(ws).log()]


def test_git_clean_keeps_the_store_and_ffdx_is_recovered(ws):
    _repo(ws)
    e = Engine(ws)
    e.init("parser")
    write(ws, "lib.py", b"x = 1\n")
    e.save("lib")
    write(ws, "lib.py", b"x = 2\n")
    e.capture()
    write(ws, "build/out.o", b"\0" * 10)
    e.save("two")
    before = _ids(ws)
    assert [i for i, _ in before] == ["s0002", "d0001", "s0001", "s0000"]
    store = ws / ".checkpoints"

    # the user's git sees nothing of the store, as before
    assert ".checkpoints" not in _git(ws, "status", "--porcelain", "--untracked-files=all")
    _git(ws, "add", "-A")
    assert ".checkpoints" not in _git(ws, "diff", "--cached", "--name-only")
    _git(ws, "reset", "-q")

    for flags in ("-fdx", "-fdX", "-fd"):
        _git(ws, "clean", flags)
        assert store.is_dir(), flags
        assert _ids(ws) == before, flags
    assert not (ws / "build").exists() and not (ws / "lib.py").exists()  # git clean did its job
    fsck(store)

    # -ff removes nested repositories too: the commands say how to get the work back
    _git(ws, "clean", "-ffdx")
    assert not store.exists()
    for call in (lambda: Engine(ws).log(), lambda: Engine(ws).resume(), lambda: Engine(ws).diff("1")):
        with pytest.raises(NotFound, match="mirrored task") as err:
            call()
        assert [h.action for h in err.value.hints] == ["recover"]
    r = tc("log", cwd=ws)
    assert r.returncode != 0 and b"tc-git recover" in r.stderr, r.stderr
    assert "tc-git recover" in _session_start(ws)  # the agent is told at its session's start
    pv = tc_json("recover", "--preview", cwd=ws)
    assert pv["applied"] is False and [t["name"] for t in pv["mirrored"]] == ["parser"] and not store.exists()
    out = tc_json("recover", cwd=ws)
    assert out["active_task"] and out["ok"]
    assert _ids(ws) == before  # every mirrored step, drift and id as it was
    Engine(ws).restore(drift_id="d0001", apply=True)
    assert (ws / "lib.py").read_bytes() == b"x = 2\n"
    assert ".checkpoints" not in _git(ws, "status", "--porcelain")


def test_store_outside_a_git_repository_and_later_git_init(ws):
    e = Engine(ws)
    e.init("t")
    write(ws, "a.txt", b"a")
    e.save("one")
    assert (ws / ".checkpoints" / ".git").read_text() == "gitdir: .\n"
    _git(ws, "init", "-q")  # the workspace becomes a repository afterwards
    Engine(ws).save("two")
    assert ".checkpoints" not in _git(ws, "status", "--porcelain")
    exclude = (ws / ".git" / "info" / "exclude").read_text()
    assert exclude.count("/.checkpoints/") == 1
    Engine(ws).save("three")  # written once, whatever the number of calls
    assert (ws / ".git" / "info" / "exclude").read_text() == exclude
    r = Engine(ws).save("four")
    assert r["git"]["unchanged"] is True, json.dumps(r["git"])


def _session_start(cwd) -> str:
    ev = {"session_id": "everyday-1", "transcript_path": str(cwd / "missing.jsonl"), "cwd": str(cwd),
          "hook_event_name": "SessionStart", "source": "startup"}
    r = subprocess.run([sys.executable, "-P", "-m", "tc_git.hooks", "session-start"], input=json.dumps(ev).encode(),
                       capture_output=True, env=clean_env(), timeout=60)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)["hookSpecificOutput"]["additionalContext"] if r.stdout.strip() else ""


def test_moved_and_copied_projects_keep_their_task(tmp_path):
    ws = tmp_path / "proj"
    ws.mkdir()
    e = Engine(ws)
    task = e.init("portable", goal="keep going")["task_id"]
    write(ws, "a.txt", b"a")
    e.save("one", next="two")
    moved = tmp_path / "moved"
    ws.rename(moved)
    copied = tmp_path / "copied"
    subprocess.run(["cp", "-a", str(moved), str(copied)], check=True)
    for w in (moved, copied):
        r = Engine(w).resume()
        assert r["task_id"] == task and "one" in r["handoff"], w
        assert "portable" in _session_start(w), w
        write(w, "b.txt", w.name.encode())
        assert Engine(w).save("two")["index"] == 2
    # each copy goes on with its own store; neither changed the other's
    assert (moved / "b.txt").read_bytes() == b"moved"
    assert [x["id"] for x in Engine(copied).log()][:1] == ["s0002"]


# ------------------------------------------------------------------ crash leftovers (SIGKILL)
# The child is killed with SIGKILL at a known point: when the restore is about to put its second
# file in place (its temporary written, not yet renamed), so a temporary is certainly left.
_KILLER = r"""
import os, signal, sys
from tc_git.workspace import wsfs
from tc_git.engine import Engine
seen = set()
def at_second(orig):
    def f(self, tmp, *a, **k):
        seen.add(tmp)
        if len(seen) == 2:
            os.kill(os.getpid(), signal.SIGKILL)
        return orig(self, tmp, *a, **k)
    return f
wsfs.Writer._swap = at_second(wsfs.Writer._swap)
wsfs.Writer._rename = at_second(wsfs.Writer._rename)
e = Engine(sys.argv[1])
if sys.argv[2] == "restore":
    e.restore(1, apply=True)
else:
    e.import_(sys.argv[3], apply=True)
"""


def _temps(ws) -> list[str]:
    from tc_git.base.refs import TEMP_RE

    return sorted(str(p.relative_to(ws)) for p in ws.rglob("*") if TEMP_RE.fullmatch(p.name)
                  and ".checkpoints" not in p.parts)


def _killed(*args) -> None:
    r = subprocess.run([sys.executable, "-c", _KILLER, *map(str, args)], env=clean_env(**knobs(restore_threads=1)),
                       capture_output=True, timeout=120)
    assert r.returncode == -9, r.stderr.decode(errors="replace")


def _tree_names(ws, rev) -> list[str]:
    return subprocess.run(["git", f"--git-dir={ws / '.checkpoints'}", "ls-tree", "-r", "--name-only", rev],
                          capture_output=True, text=True, check=True, env=clean_env()).stdout.split()


def _files(ws) -> dict:
    return {str(p.relative_to(ws)): p.read_bytes() for p in ws.rglob("*")
            if p.is_file() and ".checkpoints" not in p.parts}


def test_sigkill_during_restore_leaves_no_user_data_and_undo_works(ws):
    e = Engine(ws)
    e.init("kill")
    for i in range(6):
        write(ws, f"src/f{i}.txt", b"one %d\n" % i)
    e.save("one")
    for i in range(6):
        write(ws, f"src/f{i}.txt", b"two %d\n" % i)
    write(ws, "src/new.txt", b"unsaved\n")
    before = _files(ws)
    _killed(ws, "restore")
    assert _temps(ws), "the kill came before any temporary was written"
    assert "interrupted" in Engine(ws).resume()["handoff"]
    r = Engine(ws).save("after the kill")
    assert not _temps(ws)  # removed by the first command that found the journal
    assert not [n for n in _tree_names(ws, r["commit"]) if ".tc-" in n]
    u = Engine(ws).undo(apply=True)
    assert u["applied"], u
    assert _files(ws) == before  # back to the workspace as it was before the killed restore
    assert "interrupted" not in Engine(ws).resume()["handoff"]
    assert Engine(ws).undo()["target"] != u["target"]  # the next undo is of that undo, as always


def test_sigkill_during_import_then_undo_and_stale_quarantine(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    e = Engine(src)
    e.init("shared")
    for i in range(6):
        write(src, f"pkg/m{i}.py", b"x = %d\n" % i)
    e.save("one")
    out = e.export(tmp_path / "out")
    dst = tmp_path / "dst"
    dst.mkdir()
    write(dst, "mine.txt", b"mine\n")
    Engine(dst).init("local")
    before = _files(dst)
    _killed(dst, "import", out["path"])
    assert _temps(dst)
    Engine(dst).save("after the kill")
    assert not _temps(dst)
    u = Engine(dst).undo(apply=True)  # reverses the interrupted import as it does a restore
    assert u["applied"], u
    assert _files(dst) == before
    # a quarantine a killed import left behind is removed by the next import once stale
    tc_dir = dst / ".checkpoints" / "tc"
    left = tc_dir / "quarantine-killed"
    (left / "objects" / "pack").mkdir(parents=True)
    for p in (left / "objects" / "pack", left / "objects", left):
        os.utime(p, (1, 1))
    Engine(dst).import_(out["path"], rename="again")
    assert not list(tc_dir.glob("quarantine-*"))


def test_ids_never_reused_after_compress(ws):
    e = Engine(ws)
    e.init("ids")
    write(ws, "a.txt", b"1")
    e.save("one")
    seen = set()
    for i in range(3):
        write(ws, "a.txt", b"drift %d" % i)
        seen.add(e.capture()["drift_id"])
    assert seen == {"d0001", "d0002", "d0003"}
    assert e.compress(keep_seconds=0, minimum=0, maximum=1)["converted"] == 3  # the head drift too
    assert not [x for x in e.log() if x["kind"] == "drift"]
    write(ws, "a.txt", b"after")
    new = e.capture()["drift_id"]
    assert new == "d0004" and new not in seen
    r = e.restore(1, apply=True)
    assert r["restore_id"] == "r0001" and r["recovered"] == "d0005"
    e.compress(keep_seconds=0, minimum=0, maximum=1)  # the restore point stays; d0004 goes
    write(ws, "a.txt", b"later")
    assert e.capture()["drift_id"] == "d0006"
    assert e.save("two")["index"] == 2


def test_json_into_a_closed_pipe_is_no_traceback(ws):
    Engine(ws).init("pipe")
    r_fd, w_fd = os.pipe()
    os.close(r_fd)  # the reader is gone before anything is written: `tc-git --json log | head -0`
    try:
        p = subprocess.run([*TC, "--json", "log"], cwd=ws, env=clean_env(), stdout=w_fd, stderr=subprocess.PIPE,
                           timeout=120)
    finally:
        os.close(w_fd)
    assert b"Traceback" not in p.stderr and b"BrokenPipe" not in p.stderr, p.stderr
    assert p.returncode == 0


def test_left_out_files_are_listed_wherever_files_are_received(tmp_path):
    src = tmp_path / "src"
    write(src, "app.py", b"print(1)\n")
    write(src, ".env", b"DB_PASSWORD=Xq83-lkd0A9z\n")
    e = Engine(src)
    e.init("with secrets")
    e.save("one")
    bundle = e.export(tmp_path / "out")["path"]
    dst = tmp_path / "dst"
    dst.mkdir()
    r = tc("import", bundle, "--apply", cwd=dst, check=True)
    out = r.stdout.decode()
    assert "not in this snapshot" in out and ".env (sensitive" in out, out
    res = tc_json("resume", cwd=dst)
    assert [x["path"] for x in res["left_out"]] == [".env"]
    assert ".env" in res["handoff"]
    assert ".env" in tc("resume", cwd=dst, check=True).stdout.decode()
    text = tc("restore", "1", cwd=dst, check=True).stdout.decode()
    assert "not in this snapshot" in text and ".env" in text, text


def test_the_mirror_says_so_once_and_names_a_large_new_file(ws):
    from tc_git.cli.core import human

    _repo(ws)
    e = Engine(ws)
    e.init("mirror")
    first = human("save", e.save("one"))
    assert "copied into your git repository" in first and "TC_GIT=off" in first, first
    with open(ws / "data.bin", "wb") as f:  # sparse: 11 MiB on disk costs nothing
        f.truncate(11 << 20)
    r = e.save("two")
    assert r["git"]["large"] == [{"path": "data.bin", "bytes": 11 << 20}]
    second = human("save", r)
    assert "copied into your git repository" not in second  # once
    assert "data.bin (11.0 MiB)" in second and ".gitignore" in second, second
    third = e.save("three", conclusion="no new large file")
    assert "large" not in third["git"] and "note" not in third["git"]


@pytest.mark.parametrize("bad", ["../evil.txt", "/abs.txt", "pkg/../../evil.txt", "link"])
def test_sdist_fallback_extraction_refuses_unsafe_members(tmp_path, monkeypatch, bad):
    """tests/sdist_corpus.py on a Python without tarfile's filters (3.11.2): still refuses."""
    import io
    import tarfile

    import sdist_corpus

    arc = tmp_path / "x.tar"
    with tarfile.open(arc, "w") as t:
        ok = tarfile.TarInfo("pkg/ok.py")
        ok.size = 3
        t.addfile(ok, io.BytesIO(b"x=1"))
        m = tarfile.TarInfo(bad)
        if bad == "link":
            m.type, m.linkname = tarfile.SYMTYPE, "/etc/passwd"
        else:
            m.size = 4
        t.addfile(m, io.BytesIO(b"evil") if bad != "link" else None)
    monkeypatch.delattr(tarfile, "data_filter", raising=False)
    dest = tmp_path / "out" / "d"
    dest.mkdir(parents=True)
    with tarfile.open(arc) as t, pytest.raises(ValueError, match="refusing tar member"):
        sdist_corpus.extract_tar(t, dest)
    assert not (tmp_path / "evil.txt").exists() and not (tmp_path / "out" / "evil.txt").exists()
    good = tmp_path / "good"
    good.mkdir()
    with tarfile.open(arc, "w") as t:
        ok = tarfile.TarInfo("pkg/ok.py")
        ok.size = 3
        t.addfile(ok, io.BytesIO(b"x=1"))
    with tarfile.open(arc) as t:
        sdist_corpus.extract_tar(t, good)
    assert (good / "pkg" / "ok.py").read_bytes() == b"x=1"


def test_show_counts_against_the_step_before_and_lists_drifts_in_time_order(ws):
    from tc_git.cli.core import human

    e = Engine(ws)
    e.init("show")
    write(ws, "a.txt", b"a")
    e.save("one")
    write(ws, "b.txt", b"b")
    write(ws, "c.txt", b"c")
    e.capture()
    write(ws, "d.txt", b"d")
    e.save("two")
    r = e.show(include_drift=True)
    assert [s["files_changed"] for s in r["steps"]] == [1, 3]  # b, c and d: not only d
    assert len(subprocess.run(["git", f"--git-dir={ws / '.checkpoints'}", "diff", "--name-only",
                               r["steps"][0]["commit"], r["steps"][1]["commit"]], capture_output=True, text=True,
                              check=True, env=clean_env()).stdout.split()) == 3
    lines = human("show", r).splitlines()
    order = [next(i for i, x in enumerate(lines) if key in x) for key in ("init", "step 1:", "d0001", "step 2:")]
    assert order == sorted(order), lines
    assert "3 files changed since the step before" in lines[order[3]]


def test_diff_takes_a_path_filter(ws):
    e = Engine(ws)
    e.init("diff")
    write(ws, "src/app.py", b"a = 1\n")
    write(ws, "docs/readme.md", b"hello\n")
    e.save("one")
    write(ws, "src/app.py", b"a = 2\n")
    write(ws, "docs/readme.md", b"hello again\n")
    e.save("two")
    both = e.diff("1", "2")
    assert "src/app.py" in both and "docs/readme.md" in both
    only = e.diff("1", "2", paths=["src"])
    assert "src/app.py" in only and "docs/readme.md" not in only
    out = tc("diff", "1", "2", "--", "docs/readme.md", cwd=ws, check=True).stdout.decode()
    assert "hello again" in out and "src/app.py" not in out, out
    st = tc("diff", "1", "2", "--stat", "--", "src", cwd=ws, check=True).stdout.decode()
    assert "src/app.py" in st and "readme" not in st, st
    with pytest.raises(BadInput):
        e.diff("1", "2", paths=["../x"])


def test_undo_names_the_restore_it_reverses(ws):
    from tc_git.cli.core import human

    e = Engine(ws)
    e.init("undo names")
    write(ws, "a.txt", b"1")
    e.save("one")
    write(ws, "a.txt", b"2")
    e.save("two")
    assert e.restore(1, apply=True)["restore_id"] == "r0001"
    u = e.undo(apply=True)
    assert u["undo_of_id"] == "r0001" and u["restore_id"] == "r0002"
    assert human("undo", u).startswith("undid restore r0001: back to d0001 (r0002)"), human("undo", u)
    assert (ws / "a.txt").read_bytes() == b"2"


def test_a_copied_project_says_it_is_a_copy_once(tmp_path):
    """`cp -a` of a project: the copy resumes its task and says, once, that its store is a copy
    (resume and the SessionStart hook); the original never says it; a moved project does not."""
    ws = tmp_path / "proj"
    ws.mkdir()
    e = Engine(ws)
    task = e.init("copied", goal="go on")["task_id"]
    write(ws, "a.txt", b"a")
    e.save("one", next="two")
    copy, copy2 = tmp_path / "copy", tmp_path / "copy2"
    for c in (copy, copy2):
        subprocess.run(["cp", "-a", str(ws), str(c)], check=True)
    r = Engine(copy).resume()
    assert r["task_id"] == task and "one" in r["handoff"]
    assert r["copied_from"] == str((ws / ".checkpoints").resolve())
    assert f"copied from {ws.resolve()}" in r["handoff"] and "independent of the original" in r["handoff"]
    again = Engine(copy).resume()
    assert "copied_from" not in again and "copied from" not in again["handoff"]  # once
    assert "copied from" in _session_start(copy2) and "copied from" not in _session_start(copy2)
    orig = Engine(ws).resume()
    assert "copied_from" not in orig and "copied from" not in orig["handoff"]
    assert "copied from" not in _session_start(ws)
    write(copy, "b.txt", b"copy")  # saves in the copy go on independently
    assert Engine(copy).save("two")["index"] == 2 and Engine(ws).resume()["head"] == 1
    moved = tmp_path / "moved"
    ws.rename(moved)
    r = Engine(moved).resume()
    assert r["task_id"] == task and "copied_from" not in r and "copied from" not in _session_start(moved)
