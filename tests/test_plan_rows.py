"""restore.Rows: a plan's (path, blob id, mode) rows held compactly (issue 14: a 50k-file import's
plan held a tuple and a pygit2.Oid per file through the whole import). It must read exactly as the
list of tuples it replaces, wherever the restore reads a plan (len, iteration, indexing, `+` of
the two kinds of rows, filtering), make_plan must give the rows stock git's tree holds, and a
plan's note must list the same changes in the same order, building dicts only for what it keeps."""
from __future__ import annotations

import subprocess
import tracemalloc

import pygit2
import pytest

from tc_git.timeline import restore
from tc_git.timeline.restore import Joined, Plan, Rows, make_plan, paths_of, without


def _ids(repo, n):
    return [repo.create_blob(f"{i}\n".encode()) for i in range(n)]


def test_rows_read_as_the_list_they_replace(tmp_path):
    repo = pygit2.init_repository(str(tmp_path / "r"), bare=True)
    ids = _ids(repo, 5)
    tuples = [(f"d/f{i}", ids[i], 0o100755 if i % 2 else 0o100644) for i in range(5)]
    rows = Rows(tuples)
    assert len(rows) == 5 and bool(rows) and not Rows()
    assert list(rows) == tuples and rows == tuples
    assert [type(x) for x in rows[0]] == [str, pygit2.Oid, int]
    assert rows[-1] == tuples[-1] and rows[1:3] == tuples[1:3] and rows[::-2] == tuples[::-2]
    with pytest.raises(IndexError):
        rows[5]
    with pytest.raises(IndexError):
        rows[-6]
    assert paths_of(rows) == [p for p, _o, _m in tuples] == paths_of(tuples)
    # the two kinds of rows read as one, in either order and with plain lists
    more = [("z", ids[0], 0o120000)]
    for joined in (rows + more, more + rows, rows + Rows(more)):
        assert isinstance(joined, Joined)
        assert len(joined) == 6
        assert list(joined) == list(joined)  # read again: not a one-shot iterator
        assert [joined[i] for i in range(6)] == list(joined) and joined[-1] == list(joined)[-1]
        with pytest.raises(IndexError):
            joined[6]
    assert list(rows + more) == tuples + more and list(more + rows) == more + tuples
    kept = without(rows, {"d/f1", "d/f3"})
    assert isinstance(kept, Rows) and kept == [t for t in tuples if t[0] not in ("d/f1", "d/f3")]
    assert without(tuples, {"d/f0"}) == tuples[1:]
    # an id of another width is refused, and leaves the rows as they were
    class Wide:
        raw = b"\x01" * 32
    with pytest.raises(ValueError):
        rows.append(("w", Wide(), 0o100644))
    assert rows == tuples


def test_rows_are_smaller_than_tuples(tmp_path):
    """The point of Rows: no tuple nor Oid per row (measured with tracemalloc, the paths apart)."""
    repo = pygit2.init_repository(str(tmp_path / "r"), bare=True)
    oid = _ids(repo, 1)[0]
    raws = [bytes([i % 256, i // 256]) + oid.raw[2:] for i in range(20000)]
    paths = [f"pkg/mod/file{i:06d}.py" for i in range(20000)]

    def cost(build):
        tracemalloc.start()
        try:
            held = build()
            size = tracemalloc.get_traced_memory()[0]
        finally:
            tracemalloc.stop()
        del held
        return size

    as_tuples = cost(lambda: [(p, pygit2.Oid(raw=r), 0o100644) for p, r in zip(paths, raws)])
    rows = cost(lambda: Rows((p, pygit2.Oid(raw=r), 0o100644) for p, r in zip(paths, raws)))
    assert rows < as_tuples / 3, (rows, as_tuples)


def test_make_plan_rows_and_note_match_stock_git(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    git = ["git", "-C", str(ws), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    for i in range(30):
        (ws / f"d{i % 3}").mkdir(exist_ok=True)
        (ws / f"d{i % 3}" / f"f{i}.txt").write_text(f"v1 {i}\n")
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "one"], check=True)
    (ws / "d0" / "f0.txt").write_text("v2\n")
    (ws / "d1" / "f1.txt").unlink()
    (ws / "d1" / "f1.txt").symlink_to("f4.txt")
    (ws / "d2" / "f2.txt").unlink()
    (ws / "new.txt").write_text("new\n")
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "two"], check=True)
    repo = pygit2.Repository(str(ws))
    one, two = (repo.revparse_single(r).peel(pygit2.Tree) for r in ("HEAD~1", "HEAD"))
    # from `two` back to `one`: what stock git lists between them, with its ids and modes
    plan = make_plan(repo, two, one)
    assert isinstance(plan.to_write, Rows) and isinstance(plan.to_replace, Rows)

    def ls(tree):
        out = subprocess.run(["git", "-C", str(ws), "ls-tree", "-r", str(tree)], check=True,
                             capture_output=True, text=True).stdout
        return {line.split("\t")[1]: (line.split()[2], int(line.split()[0], 8)) for line in out.splitlines()}

    old, new = ls(one.id), ls(two.id)
    assert {p: (str(o), m) for p, o, m in plan.to_write} == {p: old[p] for p in old.keys() - new.keys()}
    assert {p: (str(o), m) for p, o, m in plan.to_replace} == {p: old[p] for p in old if p in new and old[p] != new[p]}
    assert sorted(plan.to_delete) == sorted(new.keys() - old.keys())
    # the note's changed list: sorted by path, capped as dicts, counted in full
    full = plan.changes()
    assert full["count"] == 4 and [f["path"] for f in full["files"]] == sorted(f["path"] for f in full["files"])
    assert {(f["path"], f["status"]) for f in full["files"]} == {
        ("d0/f0.txt", "M"), ("d1/f1.txt", "M"), ("d2/f2.txt", "A"), ("new.txt", "D")}
    capped = plan.changes(exclude={"d0/f0.txt"}, cap=2)
    assert capped == {"count": 3, "files": [{"path": "d1/f1.txt", "status": "M"}, {"path": "d2/f2.txt", "status": "A"}]}
    view = plan.as_dict(1)
    assert view["to_replace"] == ["d0/f0.txt"] and view["counts"]["to_replace"] == 2
    assert plan.as_dict()["to_replace"] == ["d0/f0.txt", "d1/f1.txt"]
    assert plan.as_dict()["to_replace"] is not plan.to_replace.paths  # a copy, not the plan's own list


def test_a_plan_given_plain_lists_still_works(tmp_path):
    """Callers (tests, other layers) may build a Plan of plain tuples: it reads the same."""
    repo = pygit2.init_repository(str(tmp_path / "r"), bare=True)
    ids = _ids(repo, 2)
    plan = Plan(to_write=[("b", ids[0], 0o100644)], to_replace=Rows([("a", ids[1], 0o100644)]), to_delete=["c"])
    assert not plan.empty and Plan().empty
    assert [r[0] for r in plan.to_write + plan.to_replace] == ["b", "a"]
    assert restore.touched(plan) == ["c", "b", "a"]
    assert [f["status"] for f in plan.changes()["files"]] == ["M", "A", "D"]
