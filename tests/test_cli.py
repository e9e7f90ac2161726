"""The command line as a person uses it: discovery from a subdirectory, global options anywhere,
one id grammar, help for every option, `diff --stat` equal to git's. Real processes, stock git
as the judge."""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import pytest
from conftest import TC, clean_env

from tc_git.engine import Engine


def tc(*args, cwd, env=None, check=True):
    r = subprocess.run([*TC, *map(str, args)], cwd=cwd, capture_output=True, text=True,
                       env=env or clean_env(), timeout=120)
    if check:
        assert r.returncode == 0, (args, r.stdout, r.stderr)
    return r


def jtc(*args, cwd, env=None):
    return json.loads(tc(*args, "--json", cwd=cwd, env=env).stdout)


@pytest.fixture
def project(tmp_path):
    ws = tmp_path / "proj"
    (ws / "src" / "pkg").mkdir(parents=True)
    (ws / "src" / "pkg" / "mod.py").write_text("x = 1\n")
    (ws / "README.md").write_text("# proj\n")
    return ws


def test_discovery_from_a_subdirectory_and_init_refuses_nesting(project):
    sub = project / "src" / "pkg"
    tc("init", "the task", cwd=project)
    (sub / "mod.py").write_text("x = 2\n")
    r = jtc("save", "edit in a subdir", cwd=sub)  # found upward, like git
    assert r["index"] == 1
    assert "the task" in tc("resume", cwd=sub).stdout
    r = tc("init", "nested", cwd=sub, check=False)
    assert r.returncode == 2 and "is inside the tc-git workspace" in r.stderr and "--force" in r.stderr
    assert not (sub / ".checkpoints").exists()  # a refusal writes nothing
    # -C names the start directory; discovery goes up from there too
    assert jtc("-C", sub, "log", cwd="/")["entries"][0]["id"] == "s0001"
    # --force: a separate workspace with its own store
    tc("init", "nested", "--force", cwd=sub)
    assert (sub / ".checkpoints" / "HEAD").is_file()
    assert jtc("log", "--all", cwd=sub)["tasks"][0]["name"] == "nested"
    assert jtc("log", "--all", cwd=project)["tasks"][0]["name"] == "the task"


def test_discovery_stops_at_ceiling_and_ignores_a_planted_symlink(project, tmp_path):
    tc("init", "t", cwd=project)
    sub = project / "src"
    env = clean_env(TC_CEILING_DIRECTORIES=str(project))
    r = tc("resume", cwd=sub, env=env, check=False)
    assert r.returncode == 2 and "no tc-git store" in r.stderr and "`tc-git init <name>`" in r.stderr
    # a `.checkpoints` symlink (as a cloned repository could plant) is not a workspace marker
    other = tmp_path / "other" / "deep"
    other.mkdir(parents=True)
    os.symlink(project / ".checkpoints", tmp_path / "other" / ".checkpoints")
    r = tc("resume", cwd=other, check=False)
    assert r.returncode == 2 and "no tc-git store" in r.stderr


def test_discovery_with_tc_store(project, tmp_path):
    store = tmp_path / "elsewhere"
    env = clean_env(TC_STORE=str(store))
    tc("init", "kept elsewhere", cwd=project, env=env)
    assert not (project / ".checkpoints").exists()
    r = jtc("resume", cwd=project / "src" / "pkg", env=env)
    assert r["name"] == "kept elsewhere" and r["store"] == str(store)


def test_discovery_stops_at_a_filesystem_boundary(project, tmp_path):
    """Like git: a mount point is not crossed on the way up."""
    tc("init", "t", cwd=project)
    mnt = project / "mnt"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "tmpfs", str(mnt)], capture_output=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.decode().strip()}")
    try:
        (mnt / "d").mkdir()
        r = tc("resume", cwd=mnt / "d", check=False)
        assert r.returncode == 2 and "no tc-git store" in r.stderr
        env = clean_env(TC_DISCOVERY_ACROSS_FILESYSTEM="1")
        assert jtc("resume", cwd=mnt / "d", env=env)["name"] == "t"
    finally:
        subprocess.run(["umount", str(mnt)], check=True)


def test_global_options_anywhere(project):
    tc("init", "t", cwd=project)
    a = json.loads(tc("--json", "log", cwd=project).stdout)
    b = json.loads(tc("log", "--json", cwd=project).stdout)
    c = json.loads(tc("log", "-n", "5", "--json", "-C", project / "src", cwd="/").stdout)
    assert a == b == c and a["entries"][0]["kind"] == "init"
    r = tc("skill", "path", "--json", cwd=project)
    assert json.loads(r.stdout)["path"].endswith("SKILL.md")


def test_one_id_grammar(project):
    f = project / "src" / "pkg" / "mod.py"
    tc("init", "ids", cwd=project)
    f.write_text("x = 2\n")
    s1 = jtc("save", "one", cwd=project)
    f.write_text("x = 3\n")
    jtc("save", "two", cwd=project)
    f.write_text("x = 4\n")
    d = jtc("capture", cwd=project)
    assert d["drift_id"] == "d0001"
    # every spelling of a step, a drift, and a commit prefix, for restore, show and diff (an
    # all-digit prefix, ~2% of runs, names its commit because no step has that number)
    prefix = s1["commit"][:8]
    for ident in ("1", "s0001", "s1", prefix):
        r = jtc("restore", ident, cwd=project)
        assert r["target"] == "s0001" and not r["applied"], ident
        assert jtc("show", ident, cwd=project)["steps"][0]["id"] == "s0001"
    assert jtc("restore", "d0001", cwd=project)["target"] == "d0001"
    assert jtc("restore", "d1", cwd=project)["target"] == "d0001"
    r = jtc("restore", "s0001", "--apply", cwd=project)
    assert r["restore_id"] == "r0001" and f.read_text() == "x = 2\n"
    # restores have ids of their own in the log (not the step's) and can be named
    log = jtc("log", cwd=project)["entries"]
    assert [e["id"] for e in log[:2]] == ["r0001", "d0002"]
    f.write_text("x = 9\n")
    r = jtc("restore", "r0001", "--apply", cwd=project)
    assert r["target"] == "r0001" and r["restore_id"] == "r0002" and f.read_text() == "x = 2\n"
    assert jtc("log", cwd=project)["entries"][0]["id"] == "r0002"
    # the undo id printed by a restore works as printed
    undo = r["recovered"]
    jtc("restore", undo, "--apply", cwd=project)
    assert f.read_text() == "x = 9\n"
    # stock git sees the restore ids as trailers
    store = project / ".checkpoints"
    tid = jtc("resume", cwd=project)["task_id"]
    msgs = subprocess.run(["git", "--git-dir", store, "log", "--format=%s", f"refs/checkpoints/tasks/{tid}/head"],
                          capture_output=True, text=True, check=True).stdout.splitlines()
    assert "restore r0001: to s0001" in msgs and "restore r0002: to r0001" in msgs


def test_tasks_by_id_prefix_and_name(project):
    a = jtc("init", "parser work", cwd=project)["task_id"]
    b = jtc("init", "docs pass", cwd=project)["task_id"]
    assert jtc("switch", "parser work", cwd=project)["task_id"] == a
    common = os.path.commonprefix([a, b])
    r = tc("switch", common, cwd=project, check=False)
    assert r.returncode == 2 and "matches 2 tasks" in r.stderr
    assert jtc("switch", b[: len(common) + 1], cwd=project)["task_id"] == b
    assert jtc("resume", "--task", "PARSER WORK", cwd=project)["task_id"] == a
    r = tc("switch", "nope", cwd=project, check=False)
    assert r.returncode == 2 and "no task 'nope'" in r.stderr and "tc-git log --all" in r.stderr


def test_resume_is_truthful_after_capture(project):
    tc("init", "t", cwd=project)
    jtc("save", "base", cwd=project)
    for i in range(4):
        (project / f"new{i}.txt").write_text(str(i))
    assert jtc("capture", cwd=project)["captured"]
    text = tc("resume", cwd=project).stdout
    assert "Unsaved changes: 4 files differ from step 1 now: new0.txt, new1.txt, new2.txt, new3.txt" in text
    assert "Recorded since step 1: 1 drift (d0001;" in text
    assert "Unsaved changes: none" not in text
    r = jtc("resume", cwd=project)
    assert r["drift_total"] == 4 and r["drifts_since_total"] == 1


def test_messages_speak_cli(project):
    r = tc("resume", cwd=project, check=False)
    assert r.returncode == 2 and "tc_init" not in r.stderr and "`tc-git init <name>`" in r.stderr
    tc("init", "t", cwd=project)
    r = tc("restore", "7", cwd=project, check=False)
    assert r.returncode == 2 and "tc_show" not in r.stderr and "`tc-git log`" in r.stderr


def test_start_here_and_grouped_help(project):
    r = tc(cwd=project)
    assert "Start here:" in r.stdout and "tc-git demo" in r.stdout and "tc-git init" in r.stdout
    h = tc("--help", cwd=project).stdout
    for group in ("work on a task:", "the conversation:", "share and look:", "connect an agent:"):
        assert group in h
    # `git tc` is the same program under git's name
    r = subprocess.run([sys.executable, "-c", "import sys; sys.argv[0] = 'git-tc'; from tc_git.cli import main; "
                        "sys.exit(main())"], capture_output=True, text=True, cwd=project, env=clean_env())
    assert "git tc init" in r.stdout


OWNED_ELSEWHERE = {"record", "sessions", "milestone", "events", "checkout", "markdown", "branch", "tdiff", "replay",
                   "resume-session"}


def test_every_option_is_described():
    """`<command> --help` explains each option (the trajectory commands are another layer's)."""
    from tc_git.cli import app

    ap = app.build_parser()
    missing = []

    def walk(p, path):
        for a in p._actions:
            if isinstance(a, argparse._SubParsersAction):
                for name, child in a.choices.items():
                    if not path and name in OWNED_ELSEWHERE:
                        continue
                    walk(child, path + [name])
            elif a.help is None and not isinstance(a, argparse._HelpAction):
                missing.append(" ".join(path) + " " + "/".join(a.option_strings or [a.dest]))

    walk(ap, [])
    assert not missing, missing


def test_diff_stat_is_gits(project):
    """`tc-git diff --stat A B` prints what `git diff --stat A B` prints for the same commits."""
    store = project / ".checkpoints"
    tc("init", "t", cwd=project)
    jtc("save", "base", cwd=project)
    (project / "src" / "pkg" / "mod.py").write_text("x = 1\ny = 2\n")   # 1 insertion: git prints `1 +`
    (project / "README.md").write_text("# proj\n\nmore\n" * 30)
    (project / "日本.txt").write_text("quoted by git\n")
    os.rename(project / "src" / "pkg", project / "src" / "pkg2")
    (project / "blob.bin").write_bytes(bytes(range(256)))
    c2 = jtc("save", "more", cwd=project)["commit"]
    c1 = jtc("show", "1", cwd=project)["steps"][0]["commit"]
    for cols in ("80", "40", "200"):
        env = clean_env(COLUMNS=cols)
        ours = tc("diff", "1", "2", "--stat", cwd=project, env=env).stdout
        git = subprocess.run(["git", "--git-dir", store, "diff", "--stat", c1, c2], capture_output=True,
                             env=env).stdout.decode()
        assert ours == git, (cols, ours, git)


def test_demo_reads_well(tmp_path):
    """The README's first command ends in `tc-git demo`: every part of the tour runs, and the text
    is for people (.ci/check-demo is the same check CI runs on the clean-clone install)."""
    from pathlib import Path

    r = tc("demo", cwd=tmp_path)
    out = tmp_path / "demo.out"
    out.write_text(r.stdout)
    check = subprocess.run(["bash", str(Path(__file__).resolve().parents[1] / ".ci" / "check-demo"), str(out)],
                           capture_output=True, text=True)
    assert check.returncode == 0, check.stdout[-3000:]
    assert not list(tmp_path.iterdir()) == [] and not any(p.name.startswith("tc-demo-") for p in tmp_path.iterdir())


def test_stores_from_before_restore_ids_and_readable_notes(tmp_path):
    """Restores written before restore ids exist get the id of their position; one-line notes
    (older stores) read the same as the indented ones; git log --notes shows one field a line;
    HEAD names a ref that exists, so git fsck says nothing."""
    import json as _json

    from tc_git.timeline.chain import NOTES_REF, Timeline, signature

    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("1\n")
    e = Engine(ws)
    tid = e.init("old store")["task_id"]
    e.save("one")
    tl = Timeline(e.repo, tid)
    head = tl.head()
    # a restore commit as older versions wrote it: no Tc-Restore trailer, no counters.restores
    rec = {k: v for k, v in head.record.items() if k != "restore"}
    rec.update(target={"id": "s0001", "commit": str(head.oid)}, title="to s0001", step=1)
    oid = tl.append("restore", e.repo[head.oid].tree_id, rec)
    old_note = _json.dumps(dict(rec, kind="restore"), sort_keys=True)  # one line, as before
    e.repo.create_note(old_note, signature(), signature(), str(oid), NOTES_REF, True)
    assert tl.record(oid)["target"]["id"] == "s0001"
    assert tl.find("r0001").oid == oid and tl.find("r1").oid == oid
    (ws / "a.txt").write_text("2\n")
    e.save("two")
    r = e.restore(at="r0001", apply=True)
    assert r["restore_id"] == "r0002" and (ws / "a.txt").read_text() == "1\n"
    store = str(e.store.path)
    log = subprocess.run(["git", "--git-dir", store, "log", "-1", "--notes=checkpoints",
                          f"refs/checkpoints/tasks/{tid}/head"], capture_output=True, text=True, check=True).stdout
    assert "Notes (checkpoints):\n    {\n" in log and '\n     "restore": "r0002",\n' in log
    fsck = subprocess.run(["git", "--git-dir", store, "fsck", "--full"], capture_output=True, text=True)
    assert fsck.returncode == 0 and "HEAD" not in fsck.stdout + fsck.stderr, fsck.stdout + fsck.stderr


# What a read-only command must never load (issue 33, start-up): the MCP SDK and its stack, the file
# watcher, the secrets rule engine, the conversation layer, and the other command areas of the CLI.
HEAVY = ("mcp", "pydantic", "anyio", "watchdog", "kingfisher_sdk", "tc_git.mcp", "tc_git.hooks",
         "tc_git.trajectory", "tc_git.handoff", "tc_git.cli.hooks", "tc_git.cli.run", "tc_git.cli.setup",
         "tc_git.cli.blame", "tc_git.cli.handoff", "tc_git.cli.trajectory", "tc_git.cli.view", "tc_git.cli.skill")


def test_read_only_commands_import_only_what_they_need(project):
    """`log`, `show` and `resume` as the `tc-git` entry runs them, each in a fresh process: the
    modules loaded at the end (not a time: which code the start-up pays for)."""
    Engine(project).init("light")
    (project / "src" / "pkg" / "mod.py").write_text("x = 2\n")
    Engine(project).save("one", conclusion="c")
    (project / "README.md").write_text("# changed\n")  # resume reads the workspace: one unsaved file
    probe = ("import io, json, sys, contextlib; from tc_git.cli import main\n"
             "out = io.StringIO()\n"
             "with contextlib.redirect_stdout(out): code = main(sys.argv[1:])\n"
             "print(json.dumps({'code': code, 'out': out.getvalue(), 'modules': sorted(sys.modules)}))")
    for argv in (["log"], ["show"], ["resume"], ["log", "--json", "-n", "1"], ["show", "1"]):
        r = subprocess.run([sys.executable, "-c", probe, *argv], cwd=project, capture_output=True, text=True,
                           env=clean_env(), timeout=120)
        assert r.returncode == 0, (argv, r.stderr)
        got = json.loads(r.stdout)
        assert got["code"] == 0 and "one" in got["out"], (argv, got["out"])
        loaded = [m for m in got["modules"] if m in HEAVY or m.split(".")[0] in HEAVY
                  or any(m.startswith(h + ".") for h in HEAVY)]
        assert loaded == [], f"`tc-git {' '.join(argv)}` loaded {loaded}"
        assert "tc_git.engine" in got["modules"]  # the one engine serves them (no second reader)
        if argv == ["resume"]:
            assert "README.md" in got["out"], got["out"]  # the workspace was read: the unsaved file


def test_core_command_parser_is_the_full_parsers_part():
    """A core command parses with `core`'s parsers alone: the same ones the full parser holds."""
    from tc_git.cli import app

    def sub(ap, name):
        return next(a for a in ap._actions if isinstance(a, argparse._SubParsersAction)).choices[name]

    full = app.build_parser()
    for name in ("log", "show", "resume", "save", "restore"):
        assert sub(app.build_parser(name), name).format_help() == sub(full, name).format_help()
    assert app._command_word(["-C", "log", "--json", "show"]) == "show"
    assert app._command_word(["--root=x", "log"]) == "log"
    assert app._command_word(["--json"]) is None
