"""Everyday rewinds (issue 18): restore only named paths, undo in one word.

Workspace bytes are the judge for what changed; stock git reads the restore commits."""
from __future__ import annotations

import os
import sys

import pytest
from conftest import clean_env, git, tc, tc_json, tree_state, write

pytestmark = [pytest.mark.usefixtures("fsck_after", "tc_env_clean")]


def _history(ws, engine):
    """Step 1, then step 2 that edits, deletes and adds under src/ and docs/, then unsaved edits."""
    engine.init("rewind")
    write(ws, "src/app.py", "v1\n")
    write(ws, "src/lib/util.py", "u1\n")
    write(ws, "src/lib/gone.py", "g1\n")
    write(ws, "docs/guide.md", "guide 1\n")
    write(ws, "run.sh", "#!/bin/sh\necho 1\n", mode=0o755)
    engine.save("one")
    step1 = tree_state(ws)
    write(ws, "src/app.py", "v2\n")
    write(ws, "src/lib/util.py", "u2\n")
    (ws / "src/lib/gone.py").unlink()
    write(ws, "src/lib/added.py", "a2\n")
    write(ws, "docs/guide.md", "guide 2\n")
    engine.save("two")
    # edited meanwhile, never saved: a selective restore must leave these alone
    write(ws, "docs/guide.md", "guide 3 (unsaved)\n")
    write(ws, "notes.txt", "unsaved new file\n")
    write(ws, "run.sh", "#!/bin/sh\necho 3\n", mode=0o755)
    return step1


def _only(state, sel):
    return {k: v for k, v in state.items()
            if any(k == s or k.startswith(s + b"/") for s in sel)}


def _outside(state, sel):
    return {k: v for k, v in state.items()
            if not any(k == s or k.startswith(s + b"/") for s in sel)}


@pytest.mark.parametrize("sel", [["src/app.py"], ["src/lib"], ["src/lib/", "./src/app.py"]])
def test_selective_restore_changes_exactly_the_selection_and_undo_reverses_it(ws, engine, sel):
    step1 = _history(ws, engine)
    before = tree_state(ws)
    want = [s.strip("./").rstrip("/").encode() for s in sel]
    store = engine.store.path

    preview = engine.restore(1, paths=sel)
    assert not preview["applied"] and tree_state(ws) == before  # preview writes nothing
    planned = set(preview["plan"]["to_write"] + preview["plan"]["to_replace"] + preview["plan"]["to_delete"])
    assert planned and all(any(p == s.decode() or p.startswith(s.decode() + "/") for s in want) for p in planned)

    r = engine.restore(1, paths=sel, apply=True)
    assert r["applied"] and r["check"]["ok"], r["check"]
    after = tree_state(ws)
    assert _only(after, want) == _only(step1, want)        # the selection is step 1's, byte for byte
    assert _outside(after, want) == _outside(before, want)  # everything else as it was, unsaved edits too

    # stock git: the restore point holds the whole workspace (unsaved edits included); the restore
    # commit differs from it only inside the selection
    log = git(store, "log", "--format=%H %s", f"refs/checkpoints/tasks/{engine.store.active_task()}/head")
    (restore_c, subject), (point_c, point_subject) = [x.split(" ", 1) for x in log.decode().splitlines()[:2]]
    assert subject.startswith("restore r") and "before restore" in point_subject  # restore rNNNN: to ...
    assert git(store, "show", f"{point_c}:docs/guide.md") == b"guide 3 (unsaved)\n"
    assert git(store, "show", f"{point_c}:notes.txt") == b"unsaved new file\n"
    names = git(store, "diff", "--name-only", point_c, restore_c).decode().split()
    assert names and all(any(n.encode() == s or n.encode().startswith(s + b"/") for s in want) for n in names)

    u = engine.undo(apply=True)
    assert u["applied"] and u["undo_of"] == restore_c and u["check"]["ok"]
    assert tree_state(ws) == before  # the selective restore is gone, the unsaved edits are still there
    # undo after undo is the identity: back to where the first undo started
    u2 = engine.undo(apply=True)
    assert u2["applied"] and tree_state(ws) == after


def test_undo_of_a_whole_restore_and_of_nothing(ws, engine):
    from tc_git.base.errors import NotFound

    _history(ws, engine)
    with pytest.raises(NotFound, match="nothing to undo"):
        engine.undo(apply=True)
    before = tree_state(ws)
    engine.restore(1, apply=True)
    restored = tree_state(ws)
    assert restored != before
    preview = engine.undo()  # preview: nothing written
    assert not preview["applied"] and tree_state(ws) == restored and preview["paths"] is None
    engine.undo(apply=True)
    assert tree_state(ws) == before
    engine.undo(apply=True)
    assert tree_state(ws) == restored


def test_undo_of_a_selective_restore_that_wrote_nothing(ws, engine):
    """The selection d/x failed (d is a file now), so neither the restore point nor the workspace
    holds d/x: the undo still runs over the restore's paths (found by the property test below)."""
    engine.init("undo")
    (ws / "d").mkdir()
    write(ws, "d/x", "")
    engine.save("d/x")
    (ws / "d" / "x").unlink()
    (ws / "d").rmdir()
    write(ws, "d", "now a file")
    before = tree_state(ws)
    r = engine.restore(1, paths=["d/x"], apply=True)
    assert [f["path"] for f in r["failed"]] == ["d/x"] and tree_state(ws) == before
    u = engine.undo(apply=True)
    assert u["undo_of"] == r["commit"] and tree_state(ws) == before


def test_selection_refusals_write_nothing(ws, engine):
    _history(ws, engine)
    store = engine.store.path
    refs = git(store, "for-each-ref")
    before = tree_state(ws)
    for bad in (["../outside"], ["/etc/passwd"], ["."], ["src/../../x"], [""], "src", [3], ["a\\b"],
                ["no/such/path"], ["x"] * 1001):
        with pytest.raises(Exception) as e:
            engine.restore(1, paths=bad, apply=True)
        assert getattr(e.value, "code", None) in ("bad_input", "not_found"), (bad, e.value)
    with pytest.raises(Exception):
        engine.restore(undo=True, index=1)
    assert git(store, "for-each-ref") == refs and tree_state(ws) == before


def test_something_else_moving_during_a_selective_restore_is_reported(ws, engine, monkeypatch):
    from tc_git.timeline import restore as restore_mod

    _history(ws, engine)
    real = restore_mod.apply_plan

    def concurrent_writer(repo, plan):  # another process edits a file outside the selection meanwhile
        write(ws, "docs/guide.md", "written by someone else\n")
        return real(repo, plan)

    monkeypatch.setattr(restore_mod, "apply_plan", concurrent_writer)
    r = engine.restore(1, paths=["src"], apply=True)
    assert r["applied"] and not r["check"]["ok"]
    assert r["check"]["outside_changed"] == ["docs/guide.md"] and not r["check"]["differs_from_target"]
    assert (ws / "docs/guide.md").read_bytes() == b"written by someone else\n"  # kept, only reported


def test_cli_restore_path_from_a_subdirectory_and_undo(ws, engine):
    step1 = _history(ws, engine)
    before = tree_state(ws)
    env = clean_env(TC_GIT="off")
    # `--path lib` typed inside src/ means src/lib, as git resolves paths
    r = tc_json("-C", ws, "restore", "1", "--path", "lib", cwd=ws / "src", env=env)
    assert r["paths"] == ["src/lib"] and not r["applied"] and tree_state(ws) == before
    out = tc("-C", ws, "restore", "1", "--path", "lib", "--apply", cwd=ws / "src", env=env, check=True)
    assert b"tc-git undo" in out.stdout
    assert _only(tree_state(ws), [b"src/lib"]) == _only(step1, [b"src/lib"])
    assert tree_state(ws)[b"src/app.py"] == before[b"src/app.py"]
    bad = tc("-C", ws, "restore", "1", "--path", "../../etc", cwd=ws / "src", env=env)
    assert bad.returncode == 2 and b".." in bad.stderr
    out = tc("-C", ws, "undo", cwd=ws, env=env, check=True)
    assert b"undid restore" in out.stdout and tree_state(ws) == before


@pytest.mark.anyio
async def test_selective_restore_and_undo_over_mcp_stdio(ws, engine):
    from mcp import Client, StdioServerParameters

    step1 = _history(ws, engine)
    before = tree_state(ws)
    params = StdioServerParameters(command=sys.executable, args=["-m", "tc_git"],
                                   env=clean_env(TC_WATCH="off", TC_GIT="off"))
    async with Client(params, mode="legacy") as c:
        async def call(tool="tc_restore", **args):
            r = await c.call_tool(tool, {"root": str(ws), **args})
            if r.is_error:  # error results: the message as text, the code in _meta
                return True, {"error": r.content[0].text, "code": (r.meta or {}).get("tc-git/code")}
            return False, r.structured_content

        is_err, body = await call(index=1, paths=["../etc"], apply=True)
        assert is_err and body["code"] == "bad_input" and ".." in body["error"]
        is_err, body = await call(index=1, paths=["src/app.py"])
        assert not is_err and body["plan"]["to_replace"] == ["src/app.py"] and tree_state(ws) == before
        is_err, body = await call(index=1, paths=["src/app.py"], apply=True)
        assert not is_err and body["check"]["ok"]
        assert tree_state(ws) == {**before, b"src/app.py": step1[b"src/app.py"]}
        is_err, body = await call("tc_undo", apply=True)  # undo: its own tool, preview unless apply
        assert not is_err and body["undo_of"] and tree_state(ws) == before
        is_err, body = await call("tc_undo", index=2)
        assert is_err and body["code"] == "bad_input"


def test_trajectory_checkout_restores_only_the_named_paths(ws, engine):
    _history(ws, engine)
    engine.save("three")  # the unsaved edits become step 3
    engine.record(steps=[{"role": "user", "content": "port it"}, {"role": "assistant", "content": "done"}],
                  milestone="ported")
    at_milestone = tree_state(ws)
    write(ws, "src/app.py", "v4\n")
    write(ws, "docs/guide.md", "guide 4\n")
    before = tree_state(ws)
    with pytest.raises(Exception, match="restore_code"):
        engine.checkout("ported", paths=["src"])
    r = engine.checkout("ported", restore_code=True, apply=True, paths=["src"])
    assert r["restore"]["applied"] and r["restore"]["paths"] == ["src"]
    assert tree_state(ws) == {**before, b"src/app.py": at_milestone[b"src/app.py"]}


def test_undo_reverses_an_applied_import(ws, engine, tmp_path):
    from tc_git.engine import Engine

    _history(ws, engine)
    engine.save("three")
    out = tmp_path / "out"
    out.mkdir()
    bundle = engine.export(out)["path"]
    want = tree_state(ws)
    other = tmp_path / "B"
    other.mkdir()
    write(other, "local.txt", "work in B before the import\n")
    write(other, "src/app.py", "B's own app\n")
    b = Engine(other)
    b.init("B's task")
    b.save("b1")
    write(other, "src/app.py", "B's unsaved edit\n")
    before = tree_state(other)
    r = b.import_(bundle, apply=True)
    assert r["restore"]["applied"]
    imported = tree_state(other)
    assert {k: v for k, v in imported.items() if k != b"local.txt"} == want
    u = b.undo(apply=True)
    assert u["applied"] and tree_state(other) == before  # B's unsaved edit is back
    b.undo(apply=True)
    assert tree_state(other) == imported


# ------------------------------------------------------------------ property: selection is exact
def test_selective_restore_property():
    """Random histories (the restore property test's operations: writes, deletes, chmods, links,
    renames, file<->directory swaps, a non-UTF-8 name, ignored files, a nested repository) and a
    random selection: outside it the workspace is byte-identical, inside it equals the step except
    what the restore reported as failed; undo gives the pre-restore state back, undo again the
    restored one."""
    import test_restore_property as P
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    selections = st.lists(st.sampled_from(P.POOL + [b"d/e", b"e/deep"]), min_size=1, max_size=3)

    @settings(max_examples=int(os.environ.get("PROP_EXAMPLES", "15")), deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(st.lists(P.ops, min_size=1, max_size=16), st.lists(P.ops, min_size=1, max_size=8), selections)
    def check(history, later, sel):
        import shutil
        import tempfile

        from tc_git.base.errors import NotFound
        from tc_git.engine import Engine

        old_umask = os.umask(0o022)
        tmp = tempfile.mkdtemp(prefix="tc-sel-")
        try:
            root = os.fsencode(os.path.join(tmp, "ws"))
            os.mkdir(root)
            P._setup(root)
            fence = P._untouchable(root)
            e = Engine(os.fsdecode(root))
            e.init("selective")
            for op in history:
                if op[0] not in ("save", "capture", "restore"):
                    P._apply(root, op)
            e.save("target")
            target = P._state(root)
            for op in later:  # edited meanwhile (sometimes saved, sometimes not)
                if op[0] == "save":
                    e.save("later")
                elif op[0] not in ("capture", "restore"):
                    P._apply(root, op)
            pre = P._state(root)
            paths = [os.fsdecode(s) for s in sel]
            try:
                r = e.restore(1, paths=paths, apply=True)
            except NotFound:  # the selection names nothing in the step nor in the workspace
                assert any(not any(k == s or k.startswith(s + b"/") for k in set(pre) | set(target)) for s in sel)
                assert P._state(root) == pre
                return
            got = P._state(root)
            want = [os.fsencode(p) for p in r["paths"]]
            failed = [os.fsencode(f["path"]) for f in r["failed"]]

            def inside(k):
                return any(k == s or k.startswith(s + b"/") for s in want)

            def near_failure(k):
                return any(k == f or k.startswith(f + b"/") or f.startswith(k + b"/") for f in failed)

            assert {k: v for k, v in got.items() if not inside(k)} == {k: v for k, v in pre.items() if not inside(k)}
            bad = [k for k in set(got) | set(target) if inside(k) and got.get(k) != target.get(k)
                   and not near_failure(k)]
            assert not bad, P._explain(got, target)
            assert not r["check"]["outside_changed"]
            e.undo(apply=True)
            assert P._state(root) == pre
            e.undo(apply=True)
            assert P._state(root) == got
            assert P._untouchable(root) == fence
        finally:
            os.umask(old_umask)
            shutil.rmtree(tmp, ignore_errors=True)

    check()
