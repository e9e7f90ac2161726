"""Task operations with the seed's semantics and its bugs fixed."""
from __future__ import annotations

import os
import time

import pytest
from conftest import git, tree_state, write

from tc_git.base.errors import NotFound
from tc_git.engine import Engine
from tc_git.storage import repack

pytestmark = pytest.mark.usefixtures("fsck_after")


@pytest.fixture
def e(ws):
    write(ws, "a.txt", "one\n")
    eng = Engine(ws)
    eng.init("ops", goal="prove the operations", constraints="no mocks")
    return eng


def test_idempotent_only_against_head(e, ws):
    s1 = e.save("step", conclusion="c", next="n")
    again = e.save("step", conclusion="c", next="n")
    assert again["idempotent"] and again["index"] == 1 and again["commit"] == s1["commit"]
    write(ws, "a.txt", "two\n")
    assert e.save("step two")["index"] == 2
    e.restore(1, apply=True)
    # same fields and the same files as step 1, but head is a restore: a NEW step
    r = e.save("step", conclusion="c", next="n")
    assert not r["idempotent"] and r["index"] == 3
    assert e.resume()["head"] == 3
    # a changed field is a new step even with the same files
    assert e.save("step", conclusion="c2", next="n")["index"] == 4


def test_close_records_the_final_step_then_closes(e, ws):
    e.save("first")
    write(ws, "a.txt", "final\n")
    r = e.save("last", conclusion="all done", next="nothing", close=True)
    assert r["index"] == 2 and r["closed"] and r["status"] == "closed" and not r["idempotent"]
    shown = e.show()
    assert [s["title"] for s in shown["steps"]] == ["first", "last"]
    assert shown["steps"][-1]["conclusion"] == "all done" and shown["status"] == "closed"
    log = e.log()
    assert log[0]["kind"] == "close" and log[1]["kind"] == "step"
    assert git(e.store.path, "show", f"{r['commit']}:a.txt") == b"final\n"
    res = e.resume()
    assert res["status"] == "closed" and res["last"]["conclusion"] == "all done"


def test_init_suspends_the_active_task(e, ws):
    first = e.resume()["task_id"]
    r = e.init("second")
    assert r["prev_suspended"] == first
    tasks = {t["task_id"]: t for t in e.tasks()}
    assert tasks[first]["status"] == "suspended" and tasks[r["task_id"]]["status"] == "open"
    assert e.switch(first)["status"] == "open"
    assert e.resume()["task_id"] == first


def test_resume_bounded_with_10k_unsaved_paths_en_and_zh(e, ws):
    e.save("base", conclusion="基线已保存", next="继续")
    for i in range(10_000):
        write(ws, f"gen/d{i % 50}/f{i}.txt", str(i))
    r = e.resume()
    assert r["drift_total"] == 10_000 and len(r["drift_paths"]) <= 200
    assert len(r["handoff"].encode()) < 2048
    for label in ("Task:", "Goal: prove the operations", "Constraints: no mocks", "Current step: 1",
                  "Next: 继续", "Unsaved changes:"):
        assert label in r["handoff"], label
    zh = e.resume(lang="zh")["handoff"]
    assert len(zh.encode()) < 2048
    for label in ("任务", "目标", "约束", "当前步骤", "上一步结论: 基线已保存", "下一步: 继续", "未落档"):
        assert label in zh, label
    # long fields are clipped, still under 2 KB
    e.save("x" * 500, conclusion="长" * 5000, next="n" * 5000, open_questions=["q" * 900] * 9)
    assert len(e.resume(lang="zh")["handoff"].encode()) < 2048


def test_show_pagination(e, ws):
    for i in range(1, 8):
        write(ws, "a.txt", f"{i}\n")
        e.save(f"s{i}")
    e.capture()
    p1 = e.show(limit=3)
    assert [s["index"] for s in p1["steps"]] == [1, 2, 3] and p1["next_cursor"] == 3
    p2 = e.show(limit=3, cursor=p1["next_cursor"])
    assert [s["index"] for s in p2["steps"]] == [4, 5, 6]
    p3 = e.show(limit=3, cursor=p2["next_cursor"])
    assert [s["index"] for s in p3["steps"]] == [7] and p3["next_cursor"] is None
    assert e.show(index=4)["steps"][0]["title"] == "s4"
    write(ws, "a.txt", "drift\n")
    e.capture()
    d = e.show(include_drift=True, limit=2)
    assert any(x["kind"] == "drift" for x in d["drifts"])


def test_compress_drops_old_drifts_keeps_steps_and_restore_points(e, ws):
    e.save("s1")
    drift_ids = []
    for i in range(6):
        write(ws, f"big{i}.bin", os.urandom(200_000))
        drift_ids.append(e.capture()["drift_id"])
        os.unlink(ws / f"big{i}.bin")
    write(ws, "a.txt", "two\n")
    e.save("s2")
    r = e.restore(1, apply=True)
    rp = r["recovered"]
    e.restore(drift_id=rp, apply=True)
    kinds_before = [x["kind"] for x in e.log(limit=200)]
    trees_before = {x["id"]: git(e.store.path, "rev-parse", x["commit"] + "^{tree}")
                    for x in e.log(limit=200) if x["kind"] == "step"}
    state = tree_state(ws)
    res = e.compress(keep_seconds=0, minimum=1, maximum=50)
    assert res["converted"] >= 6 and res["bytes_freed"] > 1_000_000, res
    log = e.log(limit=200)
    kinds = [x["kind"] for x in log]
    assert kinds.count("step") == kinds_before.count("step") == 2
    assert kinds.count("restore") == kinds_before.count("restore") == 2
    ids = {x["id"] for x in log}
    assert rp in ids  # restore points are never dropped
    assert not set(drift_ids[:-1]) & ids  # old drifts gone (the newest non-restore-point may stay)
    assert {x["id"]: git(e.store.path, "rev-parse", x["commit"] + "^{tree}")
            for x in log if x["kind"] == "step"} == trees_before
    assert tree_state(ws) == state  # compress never touches the workspace
    # the dropped blobs are really gone, the kept history is intact
    objs = git(e.store.path, "count-objects", "-v").decode()
    assert "count: 0" in objs
    # undo and steps still work after the rewrite
    e.restore(1, apply=True)
    e.restore(2, apply=True)
    assert (ws / "a.txt").read_text() == "two\n"
    again = e.compress()
    assert again["converted"] == 0


def test_compress_squashes_the_notes_history_and_keeps_every_note(e, ws, monkeypatch):
    """Every note write made a notes commit and a notes tree: the history of the notes is most of
    a long task's store. compress leaves each notes ref one parentless commit holding every note
    (this task's, rewritten commits' under their new ids, another task's), in one pass."""
    monkeypatch.setattr(repack, "LOOSE_AUTO", 1 << 30)  # (the saves' own upkeep would shrink it first)
    store = e.store.path
    for i in range(150):  # (a tree of 150 files: its 60 versions are what deltas save most on)
        write(ws, f"lib/m{i:03d}.py", f"x = {i}\n")
    for i in range(30):
        write(ws, f"lib/m{i:03d}.py", f"x = {i} edited\n")
        write(ws, f"f{i % 5}.txt", f"{i}\n")
        e.capture()
        write(ws, f"f{i % 5}.txt", f"saved {i}\n")
        e.save(f"step {i}")
    task = e.resume()["task_id"]
    other = Engine(ws)
    other.init("second task")
    write(ws, "g.txt", "g\n")
    other.save("other one")
    second = other.resume()["task_id"]
    e2 = Engine(ws)
    e2.switch(task)

    def notes_commits() -> int:
        return len(git(store, "rev-list", "refs/notes/checkpoints").split())

    def noted() -> set[str]:
        return {line.split()[1] for line in git(store, "notes", "--ref=checkpoints", "list").decode().splitlines()}

    assert notes_commits() > 60
    size_before = sum(f.stat().st_size for f in (store / "objects").rglob("*") if f.is_file())
    res = e2.compress(keep_seconds=0, minimum=2, maximum=2)
    assert res["converted"] == 28, res
    assert notes_commits() == 1  # the notes as they are, no history
    chains = git(store, "rev-list", f"refs/checkpoints/tasks/{task}/head", f"refs/checkpoints/tasks/{second}/head")
    commits = set(chains.decode().split())
    assert commits <= noted()  # every commit of both tasks has its note
    log = e2.log(limit=200)
    assert [x["title"] for x in log if x["kind"] == "step"][:2] == ["step 29", "step 28"]
    assert sum(x["kind"] == "drift" for x in log) == 2
    size_after = sum(f.stat().st_size for f in (store / "objects").rglob("*") if f.is_file())
    assert size_after < size_before / 2, (size_before, size_after)
    # packed as well as git packs the same history: each file's versions deltified together
    import shutil
    copy = ws.parent / "copy.git"
    shutil.copytree(store, copy)
    git(copy, "repack", "-adfq")
    by_git = sum(f.stat().st_size for f in (copy / "objects").rglob("*") if f.is_file())
    assert size_after < 1.5 * by_git, (size_after, by_git)
    # and the notes go on from there: a save writes its note on top of the squashed commit
    write(ws, "f0.txt", "after\n")
    e2.capture()
    e2.save("after compress")
    assert notes_commits() == 3 and e2.log(limit=1)[0]["title"] == "after compress"
    assert e2.compress(keep_seconds=0, minimum=2, maximum=2)["converted"] == 1


def test_roundtrip_names_modes_links_empty(e, ws):
    write(ws, b"caf\xe9-latin1.txt", b"latin-1 name")
    write(ws, "sp ace/quo'te\".txt", "q")
    write(ws, "中文/文件.md", "中文内容")
    write(ws, "run.sh", "#!/bin/sh\n", 0o755)
    write(ws, "empty", b"")
    os.symlink("run.sh", ws / "link")
    os.symlink("missing-target", ws / "dangling")
    os.makedirs(ws / "dir")
    os.symlink("../a.txt", ws / "dir" / "up")
    old = os.umask(0o022)
    try:
        os.chmod(ws / "a.txt", 0o644)
        want = tree_state(ws)
        e.save("all kinds")
        os.unlink(os.fsencode(ws) + b"/caf\xe9-latin1.txt")
        os.chmod(ws / "run.sh", 0o644)
        os.chmod(ws / "a.txt", 0o755)
        os.unlink(ws / "link")
        write(ws, "link", "now a file")
        os.unlink(ws / "empty")
        write(ws, "dir/up", "was a link")  # follows the link: writes a.txt!
        e.save("changed")
        r = e.restore(1, apply=True)
        assert r["failed"] == []
        assert tree_state(ws) == want
    finally:
        os.umask(old)
    tree = git(e.store.path, "ls-tree", "-r", "-z", r["commit"]).split(b"\0")
    modes = {t.split(b"\t")[1]: t.split()[0] for t in tree if t}
    assert modes[b"run.sh"] == b"100755" and modes[b"link"] == b"120000" and modes[b"empty"] == b"100644"
    assert modes[b"caf\xe9-latin1.txt"] == b"100644"


def test_mode_only_change_is_a_new_state(e, ws):
    e.save("s1")
    os.chmod(ws / "a.txt", 0o755)
    r = e.save("s2")
    assert not r["idempotent"]
    os.chmod(ws / "a.txt", 0o644)
    e.restore(2, apply=True)
    assert os.stat(ws / "a.txt").st_mode & 0o111


def test_capture_and_stat_cache(e, ws):
    e.save("s1")
    assert e.capture()["captured"] is False
    write(ws, "a.txt", "two\n")
    c = e.capture()
    assert c["captured"] and c["drift_id"] == "d0001" and c["files"]["files"] == [{"path": "a.txt", "status": "M"}]
    assert e.capture()["captured"] is False
    # same size, same second: the racy-git check still sees the change
    write(ws, "a.txt", "six\n")
    c = e.capture()
    assert c["captured"] and c["drift_id"] == "d0002"
    t0 = time.perf_counter()
    for _ in range(3):
        e.save("s1")
    assert time.perf_counter() - t0 < 10


def test_diff_cli_and_engine(e, ws):
    e.save("s1")
    write(ws, "a.txt", "two\n")
    patch = e.diff("1")  # step 1 vs the workspace now
    assert "-one" in patch and "+two" in patch
    e.save("s2")
    assert "2 files changed" not in e.diff("1", "2", stat=True)
    assert "a.txt" in e.diff("1", "2", stat=True)


def test_restore_note_lists_what_git_diff_shows(e, ws):
    """The restore commit's `changed` (derived from the plan) equals stock git's name-status
    between the restore point and the restore commit."""
    write(ws, "keep.txt", "k\n")
    write(ws, "edit.txt", "one\n")
    write(ws, "gone.txt", "g\n")
    e.save("one")
    write(ws, "edit.txt", "two\n")
    os.unlink(ws / "gone.txt")
    write(ws, "new/added.txt", "n\n")
    e.save("two")
    r = e.restore(index=1, apply=True)
    store = ws / ".checkpoints"
    head = git(store, "rev-parse", f"refs/checkpoints/tasks/{e.store.active_task()}/head").decode().strip()
    pre = git(store, "rev-parse", f"{head}^").decode().strip()
    want = [line.split("\t")[::-1] for line in git(store, "diff", "--name-status", pre, head).decode().splitlines()]
    note = e._timeline().record(head)["changed"]
    assert note["count"] == len(want) == 3 and [[f["path"], f["status"]] for f in note["files"]] == want
    assert r["recovered"]


def test_an_all_digit_commit_prefix_names_its_commit(e, ws):
    """git abbreviates ids to 7+ hex digits, and ~4% of those are all digits: such an id names
    its commit when no step has that number (a short number stays a step number)."""
    for i in range(400):
        write(ws, "a.txt", f"v{i}\n")
        s = e.save(f"step {i}")
        if s["commit"][:7].isdigit():
            break
    else:
        pytest.fail("no all-digit commit id in 400 saves")
    prefix = s["commit"][:7]
    assert e.show_point(prefix)["steps"][0]["index"] == s["index"]
    r = e.restore(at=prefix)
    assert r["target"] == f"s{s['index']:04d}" and not r["applied"]
    assert e.show_point("1")["steps"][0]["index"] == 1
    with pytest.raises(NotFound, match="no commit"):
        e.show_point("0000000" if not s["commit"].startswith("0000000") else "9999999")
