"""The hook entry point, run as the agent runs it: a subprocess with the event JSON on stdin.

Event payloads follow the documented Claude Code / Codex hook inputs (../shared/notes/
agent-formats.md §1.3 and §3.3). Effects are judged with stock git on the store.
"""
from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import TRANSCRIPTS as FIXTURES
from conftest import clean_env, fsck, git, knobs

CLAUDE_FIXTURE = FIXTURES / "claude-drmaciver-1.jsonl"
CODEX_FIXTURE = FIXTURES / "codex-agentsessions-1.jsonl"
HOOK = [sys.executable, "-P", "-m", "tc_git.hooks"]

pytestmark = pytest.mark.usefixtures("fsck_after")


# Claude Code gives all SessionEnd hooks together 1.5 s. The hook's wall-clock time on a loaded test
# machine says more about the machine than about the hook (1.9 s seen with 0.1 s of CPU), so its
# cost is judged by the CPU it used, which the load does not stretch: the hook alone uses ~0.1 s,
# one that recorded the session itself (or waited for its worker) ~0.7 s.
HOOK_CPU = 0.4


def run_hook(event: dict | str, *args: str, env: dict | None = None, cmd=None, timeout=60):
    """The hook run once; `.elapsed` its wall-clock seconds, `.cpu` the CPU seconds it used (with
    whatever it waited for: a detached worker is not waited for, so not counted)."""
    data = event if isinstance(event, str) else json.dumps(event)
    t0, before = time.monotonic(), resource.getrusage(resource.RUSAGE_CHILDREN)
    r = subprocess.run((cmd or HOOK) + list(args), input=data.encode(), capture_output=True,
                       env=env or clean_env(), timeout=timeout)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    r.elapsed = time.monotonic() - t0
    r.cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return r


def base(ws: Path, name: str, session: str = "0b7f3f4c-hooks", transcript: Path | None = None, **kw) -> dict:
    ev = {"session_id": session, "transcript_path": str(transcript or ws / "missing.jsonl"), "cwd": str(ws),
          "hook_event_name": name, "permission_mode": "default"}
    ev.update(kw)
    return ev


@pytest.fixture
def ws(tmp_path):
    """A workspace with an active task and one saved step."""
    from tc_git.engine import Engine

    root = tmp_path / "ws"
    (root / "src").mkdir(parents=True)
    (root / "src" / "a.py").write_text("print('a')\n")
    e = Engine(root)
    e.init("hooked task", goal="prove the hooks", constraints="no network")
    e.save("first step", conclusion="a.py prints a", next="make b.py")
    return root


def store_of(ws: Path) -> Path:
    return ws / ".checkpoints"


def refs(store: Path, prefix: str) -> dict[str, str]:
    out = git(store, "for-each-ref", "--format=%(refname) %(objectname)", prefix).decode().split("\n")
    return dict(line.split(" ", 1) for line in out if line)  # name -> oid


def drift_notes(store: Path) -> list[dict]:
    head = git(store, "for-each-ref", "--format=%(objectname)", "refs/checkpoints/tasks/").decode().split()[0]
    notes = []
    for oid in git(store, "rev-list", head).decode().split():
        r = subprocess.run(["git", f"--git-dir={store}", "notes", "--ref=checkpoints", "show", oid],
                           capture_output=True, env=clean_env())
        if r.returncode == 0:
            notes.append({"oid": oid, "subject": git(store, "log", "-1", "--format=%s", oid).decode().strip(),
                          **json.loads(r.stdout)})
    return notes


# ---------------------------------------------------------------------------------- SessionStart
@pytest.mark.parametrize("source", ["startup", "resume", "compact", "clear"])
def test_session_start_injects_the_handoff(ws, source):
    from tc_git.engine import Engine

    handoff = Engine(ws).resume()["handoff"]
    r = run_hook(base(ws, "SessionStart", source=source, model="claude-sonnet-4-5"), "session-start")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    hso = out["hookSpecificOutput"]
    assert hso["hookEventName"] == "SessionStart"
    assert handoff in hso["additionalContext"]
    assert "hooked task" in hso["additionalContext"] and "make b.py" in hso["additionalContext"]


def test_session_start_from_a_subdirectory_finds_the_workspace(ws):
    r = run_hook(base(ws / "src", "SessionStart", source="startup"), "session-start")
    assert r.returncode == 0 and "hooked task" in json.loads(r.stdout)["hookSpecificOutput"]["additionalContext"]


def test_no_store_means_no_output_and_no_store_created(tmp_path):
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "f.txt").write_text("x")
    for name, extra in (("SessionStart", {"source": "startup"}), ("SessionEnd", {"reason": "other"}),
                        ("PreCompact", {"trigger": "auto", "custom_instructions": ""}),
                        ("PostToolUse", {"tool_name": "Write", "tool_input": {"file_path": str(plain / "f.txt")},
                                         "tool_response": {"success": True}, "tool_use_id": "toolu_1"})):
        ev = base(plain, name, transcript=CLAUDE_FIXTURE, **extra)
        r = run_hook(ev)
        assert (r.returncode, r.stdout, r.stderr) == (0, b"", b""), name
    assert sorted(p.name for p in plain.iterdir()) == ["f.txt"]


def test_store_without_active_task_does_nothing(ws):
    from tc_git.storage.store import Store

    Store(store_of(ws), ws.resolve()).set_active_task(None)
    r = run_hook(base(ws, "SessionStart", source="startup"))
    assert (r.returncode, r.stdout) == (0, b"")


def test_closed_task_injects_nothing(ws):
    from tc_git.engine import Engine

    Engine(ws).save("last", close=True)
    r = run_hook(base(ws, "SessionStart", source="resume"))
    assert (r.returncode, r.stdout) == (0, b"")


# ---------------------------------------------------------------------------------- never fail
@pytest.mark.parametrize("stdin", ["", "not json", "[1, 2]", '{"hook_event_name": "SessionStart"}',
                                   '{"hook_event_name": "Nope", "cwd": "/"}'])
def test_garbage_never_fails_the_agent(stdin, tmp_path):
    r = run_hook(stdin, "session-start", env=clean_env(HOME=str(tmp_path)))
    assert r.returncode == 0 and r.stdout == b""


def test_an_error_exits_0_with_stderr_and_a_log_line(ws):
    """A busy store (another writer holds the lock past the timeout) must not reach the agent."""
    from tc_git.storage.store import Store

    store = store_of(ws)
    (ws / "src" / "a.py").write_text("print('changed')\n")
    ev = base(ws, "PostToolUse", tool_name="Edit", tool_use_id="toolu_err",
              tool_input={"file_path": str(ws / "src" / "a.py"), "old_string": "a", "new_string": "changed"},
              tool_response={"filePath": str(ws / "src" / "a.py")})
    with Store(store, ws.resolve()).lock():
        r = run_hook(ev, "post-tool-use", env=clean_env(TC_LOCK_TIMEOUT="0.3"))
    assert r.returncode == 0 and r.stdout == b""
    assert b"tc-git hook PostToolUse: StoreBusy" in r.stderr
    assert "PostToolUse: error: StoreBusy" in (store / "tc" / "hooks.log").read_text()


def test_a_broken_pointer_file_is_reported_not_raised(tmp_path):
    w = tmp_path / "w"
    w.mkdir()
    (w / ".task-checkpoint-store.json").write_text("{broken")
    r = run_hook(base(w, "SessionStart", source="startup"))
    assert r.returncode == 0 and r.stdout == b"" and b"tc-git hook SessionStart" in r.stderr


# ---------------------------------------------------------------------------------- PostToolUse
def test_post_tool_use_records_a_drift_linked_to_the_tool_call(ws):
    store = store_of(ws)
    (ws / "src" / "b.py").write_text("print('b')\n")
    ev = base(ws, "PostToolUse", tool_name="Write", tool_use_id="toolu_01ABC",
              tool_input={"file_path": str(ws / "src" / "b.py"), "content": "print('b')\n"},
              tool_response={"filePath": str(ws / "src" / "b.py"), "success": True}, duration_ms=12)
    r = run_hook(ev, "post-tool-use")
    assert r.returncode == 0 and r.stdout == b"", r.stderr
    drift = drift_notes(store)[0]
    assert drift["subject"] == "drift d0001: Write src/b.py"
    assert drift["tool_call"]["id"] == "toolu_01ABC"
    assert drift["tool_call"]["name"] == "Write" and drift["tool_call"]["paths"] == ["src/b.py"]
    assert drift["session"] == "0b7f3f4c-hooks" and drift["agent"] == "claude"
    tree = git(store, "ls-tree", "-r", "--name-only", drift["oid"]).decode().split()
    assert "src/b.py" in tree
    # nothing changed since: the next call records nothing
    r = run_hook({**ev, "tool_use_id": "toolu_02"}, "post-tool-use")
    assert r.returncode == 0
    assert [d["tool_call"]["id"] for d in drift_notes(store) if "tool_call" in d] == ["toolu_01ABC"]


def test_post_tool_use_bash_and_codex_apply_patch(ws):
    store = store_of(ws)
    (ws / "gen.txt").write_text("made by a shell\n")
    ev = base(ws, "PostToolUse", tool_name="Bash", tool_use_id="toolu_bash",
              tool_input={"command": "echo made > gen.txt && export TOKEN=ghp_" + "a" * 36,
                          "description": "make a file"},
              tool_response={"stdout": "", "stderr": "", "interrupted": False, "isImage": False})
    assert run_hook(ev).returncode == 0
    (ws / "src" / "a.py").write_text("print('patched')\n")
    patch = "*** Begin Patch\n*** Update File: src/a.py\n@@\n-print('a')\n+print('patched')\n*** End Patch\n"
    ev = {"session_id": "019a-codex", "transcript_path": None, "cwd": str(ws), "hook_event_name": "PostToolUse",
          "model": "gpt-5-codex", "permission_mode": "default", "turn_id": "turn-1", "tool_name": "apply_patch",
          "tool_input": {"command": patch}, "tool_response": "Success", "tool_use_id": "call_9"}
    assert run_hook(ev, "post-tool-use", "--agent", "codex").returncode == 0
    notes = {d["tool_call"]["id"]: d for d in drift_notes(store) if "tool_call" in d}
    assert notes["toolu_bash"]["subject"].startswith("drift d0001: Bash: echo made > gen.txt")
    assert "ghp_" + "a" * 36 not in json.dumps(notes["toolu_bash"])  # the credential is redacted
    assert notes["call_9"]["tool_call"]["paths"] == ["src/a.py"] and notes["call_9"]["agent"] == "codex"
    assert notes["call_9"]["tool_call"]["turn"] == "turn-1"


def test_post_tool_use_ignores_read_only_tools(ws):
    (ws / "src" / "a.py").write_text("changed but not by a file tool\n")
    ev = base(ws, "PostToolUse", tool_name="Read", tool_use_id="toolu_r",
              tool_input={"file_path": str(ws / "src" / "a.py")}, tool_response={})
    assert run_hook(ev).returncode == 0
    assert [d for d in drift_notes(store_of(ws)) if d.get("drift")] == []


# ---------------------------------------------------------------------------------- SessionEnd
def wait_for(cond, timeout=20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = cond()
        if v:
            return v
        time.sleep(0.1)
    return cond()


def test_session_end_returns_at_once_and_records_in_the_background(ws, tmp_path):
    store = store_of(ws)
    tp = tmp_path / "c64cc478-3430-40fe-8e9c-4ee9986e9754.jsonl"
    shutil.copy(CLAUDE_FIXTURE, tp)
    ev = base(ws, "SessionEnd", session="c64cc478-3430-40fe-8e9c-4ee9986e9754", transcript=tp, reason="prompt_input_exit")
    r = run_hook(ev, "session-end", env=clean_env(**knobs(hook_regrow=0.2)))
    assert r.returncode == 0 and r.stdout == b"", r.stderr
    assert r.cpu < HOOK_CPU, f"SessionEnd used {r.cpu:.2f}s of CPU ({r.elapsed:.2f}s in all): over its budget"
    main = "refs/checkpoints/sessions/claude-c64cc478-3430-40fe-8e9c-4ee9986e9754/main"
    tip = wait_for(lambda: refs(store, main).get(main))
    assert tip, f"the detached worker did not record the session; log:\n{(store / 'tc' / 'hooks.log').read_text()}"
    n = len(git(store, "rev-list", tip).decode().split())
    assert n > 10
    assert len(git(store, "log", "--oneline", main).decode().splitlines()) == n
    # the tip is linked to the code timeline
    note = wait_for(lambda: subprocess.run(["git", f"--git-dir={store}", "notes", "--ref=checkpoints", "show", tip],
                                           capture_output=True).stdout)
    assert json.loads(note)["trajectory"]["code_commit"]
    # recording again (a second SessionEnd, e.g. after --resume) adds nothing
    wait_for(lambda: "worker: recorded" in (store / "tc" / "hooks.log").read_text())
    time.sleep(0.6)
    before = git(store, "count-objects", "-v").decode()
    r = run_hook(ev, "session-end", env=clean_env(**knobs(hook_regrow=0.2)))
    assert wait_for(lambda: (store / "tc" / "hooks.log").read_text().count("worker: recorded") >= 2)
    assert refs(store, main)[main] == tip
    log = (store / "tc" / "hooks.log").read_text()
    assert ", 0 new," in log.strip().splitlines()[-1], log
    assert git(store, "count-objects", "-v").decode().split("\n")[0] == before.split("\n")[0]
    fsck(store)


def test_session_end_picks_up_a_transcript_that_is_still_growing(ws, tmp_path):
    store = store_of(ws)
    lines = CLAUDE_FIXTURE.read_bytes().splitlines(keepends=True)
    tp = tmp_path / "grow.jsonl"
    tp.write_bytes(b"".join(lines[:10]))
    ev = base(ws, "SessionEnd", session="c64cc478-3430-40fe-8e9c-4ee9986e9754", transcript=tp, reason="other")
    assert run_hook(ev, env=clean_env(**knobs(hook_settle=0, hook_regrow=0.8))).returncode == 0
    assert wait_for(lambda: "worker: recorded" in (store / "tc" / "hooks.log").read_text())
    tp.write_bytes(b"".join(lines))  # the agent flushed the rest after the hook fired
    main = "refs/checkpoints/sessions/claude-c64cc478-3430-40fe-8e9c-4ee9986e9754/main"
    full = wait_for(lambda: len(git(store, "rev-list", refs(store, main)[main]).decode().split()) > 20 or None)
    assert full, (store / "tc" / "hooks.log").read_text()


def test_codex_stop_records_the_rollout(ws, tmp_path):
    store = store_of(ws)
    tp = tmp_path / "rollout-2026-02-23T11-41-04-019a.jsonl"
    shutil.copy(CODEX_FIXTURE, tp)
    ev = {"session_id": "019a", "transcript_path": str(tp), "cwd": str(ws), "hook_event_name": "Stop",
          "model": "gpt-5-codex", "permission_mode": "default", "turn_id": "t1", "stop_hook_active": False,
          "last_assistant_message": "done"}
    r = run_hook(ev, "stop", "--agent", "codex")
    assert r.returncode == 0 and r.cpu < HOOK_CPU, (r.cpu, r.elapsed)
    found = wait_for(lambda: [k for k in refs(store, "refs/checkpoints/sessions/") if "/codex-" in k])
    assert found, (store / "tc" / "hooks.log").read_text()


# ---------------------------------------------------------------------------------- PreCompact
def test_pre_compact_records_and_marks_a_milestone(ws, tmp_path):
    store = store_of(ws)
    tp = tmp_path / "c64cc478-3430-40fe-8e9c-4ee9986e9754.jsonl"
    shutil.copy(CLAUDE_FIXTURE, tp)
    (ws / "src" / "c.py").write_text("print('c')\n")  # unsaved work at compaction time
    sid = "c64cc478-3430-40fe-8e9c-4ee9986e9754"
    ev = base(ws, "PreCompact", session=sid, transcript=tp, trigger="auto", custom_instructions="")
    r = run_hook(ev, "pre-compact")
    assert r.returncode == 0 and r.stdout == b"", r.stderr
    ms = refs(store, "refs/checkpoints/milestones/")
    name = f"refs/checkpoints/milestones/precompact-{sid}-1"
    main = f"refs/checkpoints/sessions/claude-{sid}/main"
    assert ms[name] == refs(store, main)[main]
    note = json.loads(git(store, "notes", "--ref=checkpoints", "show", ms[name]))["trajectory"]
    code = note["milestones"][f"precompact-{sid}-1"]["code_commit"]
    assert "src/c.py" in git(store, "ls-tree", "-r", "--name-only", code).decode().split()
    # a second compaction in the same session gets the next number
    r = run_hook({**ev, "trigger": "manual", "custom_instructions": "keep the tests"})
    assert r.returncode == 0
    assert f"refs/checkpoints/milestones/precompact-{sid}-2" in refs(store, "refs/checkpoints/milestones/")


def test_pre_compact_without_transcript_is_quiet(ws):
    r = run_hook(base(ws, "PreCompact", trigger="auto", custom_instructions=""))
    assert (r.returncode, r.stdout) == (0, b"")
    assert refs(store_of(ws), "refs/checkpoints/milestones/") == {}
    assert "no transcript" in (store_of(ws) / "tc" / "hooks.log").read_text()


# ---------------------------------------------------------------------------------- entry points
def test_tc_hook_subcommand_is_the_same_entry(ws):
    from conftest import TC

    r = run_hook(base(ws, "SessionStart", source="startup"), "hook", "session-start", cmd=TC)
    assert r.returncode == 0
    assert "hooked task" in json.loads(r.stdout)["hookSpecificOutput"]["additionalContext"]


def test_hook_module_imports_neither_mcp_nor_pygit2_when_idle(tmp_path):
    code = ("import sys, io; sys.stdin = io.StringIO('{\"hook_event_name\": \"SessionStart\", \"cwd\": \"%s\"}');"
            "from tc_git import hooks; hooks.main(['session-start']);"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('mcp', 'pygit2', 'tc_git')))") % tmp_path
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=clean_env())
    assert r.returncode == 0, r.stderr
    # only stdlib-only modules besides the entry itself: the shared names (refs), the clipping rule
    # (jsonsafe), the recording rules, the settings, and the workspace/store locator the CLI uses too (discover, errors)
    assert eval(r.stdout) == ["tc_git", "tc_git.base", "tc_git.base.errors",
                              "tc_git.base.jsonsafe", "tc_git.base.recordrules", "tc_git.base.refs", "tc_git.base.settings",
                              "tc_git.hooks", "tc_git.storage", "tc_git.storage.discover"]


def test_hooks_and_engine_find_the_same_store(tmp_path, monkeypatch):
    """One locator (discover.find_workspace + discover.store_dir): from a subdirectory, the hook
    entry finds the workspace and the store the engine uses, by default, through a pointer file
    and through $TC_STORE."""
    from tc_git import hooks
    from tc_git.engine import Engine

    monkeypatch.delenv("TC_STORE", raising=False)
    cases = {}
    for how in ("default", "pointer", "env"):
        ws = tmp_path / how
        (ws / "sub" / "deeper").mkdir(parents=True)
        if how == "pointer":
            (ws / ".task-checkpoint-store.json").write_text(json.dumps({"store": "../pointer-store"}))
        if how == "env":
            monkeypatch.setenv("TC_STORE", str(tmp_path / "env-store"))
        e = Engine(ws)
        e.init(how)
        place = hooks.locate(str(ws / "sub" / "deeper"))
        cases[how] = (place.root, place.store, place.task)
        assert cases[how] == (str(ws), os.path.realpath(e.store_path), e.show()["task_id"]), how
        monkeypatch.delenv("TC_STORE", raising=False)
    assert cases["pointer"][1] == str(tmp_path / "pointer-store")
    assert cases["env"][1] == str(tmp_path / "env-store")


def test_external_store_through_the_pointer_file(tmp_path):
    from tc_git.engine import Engine

    root = tmp_path / "w2"
    root.mkdir()
    (root / "x.txt").write_text("x")
    Engine(root).init("external", store=str(tmp_path / "elsewhere"))
    r = run_hook(base(root, "SessionStart", source="startup"))
    assert "external" in json.loads(r.stdout)["hookSpecificOutput"]["additionalContext"]
    assert not (root / ".checkpoints").exists()


def test_no_mcp_even_with_an_active_task(ws):
    """The engine path (handoff, drift) loads pygit2 but never the MCP stack (~0.75 s)."""
    ev = json.dumps(base(ws, "SessionStart", source="startup"))
    code = ("import sys, io; sys.stdin = io.StringIO(%r);"
            "from tc_git import hooks; hooks.main(['session-start']);"
            "print('MODS', sorted({m.split('.')[0] for m in sys.modules} & {'mcp', 'pygit2', 'anyio', 'pydantic'}))") % ev
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=clean_env())
    assert r.returncode == 0, r.stderr
    assert "additionalContext" in r.stdout
    # SessionStart reads the handoff cached at the last record (no pygit2 at all); other events
    # load pygit2
    assert r.stdout.strip().splitlines()[-1] in ("MODS []", "MODS ['pygit2']")


def test_locate_never_treats_home_or_root_as_a_workspace(tmp_path, monkeypatch):
    from tc_git import hooks

    home = tmp_path / "home"
    (home / ".checkpoints" / "objects").mkdir(parents=True)
    (home / ".checkpoints" / "HEAD").write_text("ref: refs/heads/master\n")
    (home / "proj").mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("TC_STORE", raising=False)
    assert hooks.locate(str(home)) is None
    assert hooks.locate(str(home / "proj")) is None  # the walk stops below home
    assert hooks.locate("/") is None
    assert hooks.locate(str(tmp_path / "does-not-exist")) is None


def test_hooks_log_rotates(ws, monkeypatch):
    from tc_git import hooks
    from tc_git.base import fsutil

    monkeypatch.setattr(fsutil, "LOG_MAX_BYTES", 200)  # the shared log helper's threshold
    store = str(store_of(ws))
    for i in range(20):
        hooks.log(store, f"line {i} " + "x" * 20)
    log = store_of(ws) / "tc" / "hooks.log"
    assert log.stat().st_size <= 400 and (store_of(ws) / "tc" / "hooks.log.1").exists()
    assert "line 19" in log.read_text()
    hooks.log(str(ws / "nowhere"), "never written")  # no store: no file, no error
    assert not (ws / "nowhere").exists()


def test_post_tool_use_on_a_closed_task_is_quiet(ws):
    from tc_git.engine import Engine

    Engine(ws).save("done", close=True)
    (ws / "src" / "a.py").write_text("after close\n")
    ev = base(ws, "PostToolUse", tool_name="Edit", tool_use_id="toolu_c",
              tool_input={"file_path": str(ws / "src" / "a.py")}, tool_response={})
    r = run_hook(ev)
    assert (r.returncode, r.stdout, r.stderr) == (0, b"", b"")


# ------------------------------------------------------------------ every session is recorded
def _user_env(tmp_path, **extra):
    home, data = tmp_path / "home", tmp_path / "xdg"
    home.mkdir(exist_ok=True)
    return clean_env(HOME=home, XDG_DATA_HOME=data, **knobs(hook_settle=0, hook_regrow=0.2), **extra), data


def recorded(store: Path) -> bool:
    """The recording into `store` is over: its log line ("worker: recorded ...", "PreCompact:
    recorded ...") comes after record_session returns. The session's refs are published before
    the projects index is written (trajectory/userstore.py), so a test that judged the store as
    soon as the ref appeared could read the index, or fsck the store, while the detached worker
    was still at it."""
    log = store / "tc" / "hooks.log"
    return (store / "HEAD").is_file() and log.is_file() and ": recorded " in log.read_text()


def test_session_end_without_a_store_records_into_the_user_store(tmp_path):
    plain = tmp_path / "proj"
    plain.mkdir()
    tp = tmp_path / "c64cc478-3430-40fe-8e9c-4ee9986e9754.jsonl"
    shutil.copy(CLAUDE_FIXTURE, tp)
    env, data = _user_env(tmp_path)
    ev = base(plain, "SessionEnd", session="c64cc478-3430-40fe-8e9c-4ee9986e9754", transcript=tp, reason="other")
    r = run_hook(ev, env=env)
    assert (r.returncode, r.stdout) == (0, b""), r.stderr
    assert r.cpu < HOOK_CPU, f"SessionEnd used {r.cpu:.2f}s of CPU ({r.elapsed:.2f}s in all): over its budget"
    store = data / "tc-git" / "store"
    main = "refs/checkpoints/sessions/claude-c64cc478-3430-40fe-8e9c-4ee9986e9754/main"
    tip = wait_for(lambda: recorded(store) and refs(store, main).get(main), timeout=60)
    assert tip, "the worker did not record into the user-level store"
    assert len(git(store, "log", "--oneline", main).decode().splitlines()) == 37  # stock git reads it
    assert oct((data / "tc-git").stat().st_mode & 0o777) == "0o700"
    assert oct(store.stat().st_mode & 0o777) == "0o700"
    index = json.loads((store / "tc" / "projects.json").read_text())
    assert "claude-c64cc478-3430-40fe-8e9c-4ee9986e9754" in index[str(plain.resolve())]
    assert sorted(p.name for p in plain.iterdir()) == []  # nothing in the project itself
    # the CLI finds it from the project: sessions, events, markdown
    tc = [sys.executable, "-c", "import sys; from tc_git.cli import main; sys.exit(main(sys.argv[1:]))"]
    out = subprocess.run(tc + ["--root", str(plain), "--json", "sessions"], capture_output=True, env=env)
    assert out.returncode == 0, out.stderr
    assert "claude-c64cc478-3430-40fe-8e9c-4ee9986e9754" in out.stdout.decode()
    out = subprocess.run(tc + ["--root", str(plain), "markdown", "claude-c64cc478-3430-40fe-8e9c-4ee9986e9754"],
                         capture_output=True, env=env)
    assert out.returncode == 0 and b"### User" in out.stdout, out.stderr
    page = tmp_path / "view.html"
    out = subprocess.run(tc + ["--root", str(plain), "--json", "view", "-o", str(page)], capture_output=True, env=env)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["sessions"] and page.stat().st_size > 1000
    out = subprocess.run(tc + ["--root", str(plain), "--json", "resume-session", "claude-c64cc478-3430-40fe-8e9c-4ee9986e9754",
                               "--client", "claude"], capture_output=True, env=dict(env, CLAUDE_CONFIG_DIR=str(tmp_path / "cc")))
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got["store"] == "user" and Path(got["path"]).is_relative_to(tmp_path / "cc" / "projects")
    fsck(store)


@pytest.mark.parametrize("how", ["TC_RECORD=off", "opt-out file"])
def test_recording_can_be_turned_off(tmp_path, how):
    plain = tmp_path / "proj"
    plain.mkdir()
    env, data = _user_env(tmp_path, **({"TC_RECORD": "off"} if how == "TC_RECORD=off" else {}))
    if how == "opt-out file":
        (plain / ".tc-no-record").write_text("")
    ev = base(plain, "SessionEnd", transcript=CLAUDE_FIXTURE, reason="other")
    r = run_hook(ev, env=env)
    assert (r.returncode, r.stdout, r.stderr) == (0, b"", b"")
    time.sleep(1.0)
    assert not data.exists(), "nothing may be written"


def test_tc_record_tasks_keeps_the_old_rule(tmp_path):
    plain = tmp_path / "proj"
    plain.mkdir()
    env, data = _user_env(tmp_path, TC_RECORD="tasks")
    r = run_hook(base(plain, "SessionEnd", transcript=CLAUDE_FIXTURE, reason="other"), env=env)
    assert r.returncode == 0
    time.sleep(1.0)
    assert not data.exists()


CODEX_REAL = FIXTURES / "codex-localpush-1.jsonl"


@pytest.mark.parametrize("name", ["SessionStart", "PostToolUse", "PreCompact", "SessionEnd", "Stop"])
def test_every_hook_in_a_directory_without_a_store(tmp_path, name):
    """Each hook event as the agent sends it, in a project with no store: the ones that record
    (SessionEnd, Codex Stop, PreCompact) put the session into the user-level store, where stock
    git reads it; the others write nothing anywhere. The project directory stays untouched."""
    plain = tmp_path / "proj"
    plain.mkdir()
    (plain / "f.txt").write_text("x")
    agent = "codex" if name == "Stop" else "claude"
    sid = "019c8a4d-8f45-7010-8b5d-7fad920aa6f9" if agent == "codex" else "c64cc478-3430-40fe-8e9c-4ee9986e9754"
    tp = tmp_path / (f"rollout-2026-02-23T12-41-04-{sid}.jsonl" if agent == "codex" else f"{sid}.jsonl")
    shutil.copy(CODEX_REAL if agent == "codex" else CLAUDE_FIXTURE, tp)
    extra = {"SessionStart": {"source": "startup"}, "SessionEnd": {"reason": "prompt_input_exit"},
             "PreCompact": {"trigger": "auto", "custom_instructions": ""},
             "Stop": {"turn_id": "t1", "stop_hook_active": False, "last_assistant_message": "done",
                      "model": "gpt-5"},
             "PostToolUse": {"tool_name": "Write", "tool_input": {"file_path": str(plain / "f.txt")},
                             "tool_response": {"success": True}, "tool_use_id": "toolu_1"}}[name]
    env, data = _user_env(tmp_path)
    r = run_hook(base(plain, name, session=sid, transcript=tp, **extra), env=env)
    assert (r.returncode, r.stdout) == (0, b""), r.stderr
    assert sorted(p.name for p in plain.iterdir()) == ["f.txt"]
    store = data / "tc-git" / "store"
    main = f"refs/checkpoints/sessions/{agent}-{sid}/main"
    if name in ("SessionStart", "PostToolUse"):
        time.sleep(0.5)
        assert not data.exists(), f"{name} wrote {list(data.rglob('*'))[:5]}"
        return
    tip = wait_for(lambda: recorded(store) and refs(store, main).get(main), timeout=60)
    assert tip, f"{name} did not record into the user-level store"
    lines = git(store, "log", "--format=%s", main).decode().splitlines()  # stock git reads it
    assert len(lines) == 37 if agent == "claude" else len(lines) > 100
    index = json.loads((store / "tc" / "projects.json").read_text())
    assert f"{agent}-{sid}" in index[str(plain.resolve())]
    if name == "PreCompact":  # recorded before the hook returned, and its tip named
        ms = refs(store, "refs/checkpoints/milestones/")
        assert ms == {f"refs/checkpoints/milestones/precompact-{sid}-1": tip}
        r = run_hook(base(plain, name, session=sid, transcript=tp, **extra), env=env)
        assert r.returncode == 0 and f"refs/checkpoints/milestones/precompact-{sid}-2" in refs(
            store, "refs/checkpoints/milestones/")
    fsck(store)


def test_pre_compact_follows_the_recording_rules(tmp_path, ws):
    """TC_RECORD=off and the opt-out file stop PreCompact too; a workspace store without an active
    task records there (a milestone with no code link), not in the user-level store."""
    from tc_git.storage.store import Store

    plain = tmp_path / "proj"
    plain.mkdir()
    sid = "c64cc478-3430-40fe-8e9c-4ee9986e9754"
    ev = base(plain, "PreCompact", session=sid, transcript=CLAUDE_FIXTURE, trigger="manual", custom_instructions="")
    env, data = _user_env(tmp_path, TC_RECORD="off")
    assert run_hook(ev, env=env).returncode == 0 and not data.exists()
    (plain / ".tc-no-record").write_text("")
    env, data = _user_env(tmp_path)
    assert run_hook(ev, env=env).returncode == 0 and not data.exists()
    env, data = _user_env(tmp_path, TC_RECORD="tasks")
    (plain / ".tc-no-record").unlink()
    assert run_hook(ev, env=env).returncode == 0 and not data.exists()

    Store(store_of(ws), ws.resolve()).set_active_task(None)
    env, data = _user_env(tmp_path)
    r = run_hook(dict(ev, cwd=str(ws)), env=env)
    assert (r.returncode, r.stdout) == (0, b""), r.stderr
    ms = refs(store_of(ws), "refs/checkpoints/milestones/")
    assert list(ms) == [f"refs/checkpoints/milestones/precompact-{sid}-1"]
    note = json.loads(git(store_of(ws), "notes", "--ref=checkpoints", "show", ms[list(ms)[0]]))["trajectory"]
    assert not note["milestones"][f"precompact-{sid}-1"].get("code_commit")
    assert not data.exists()
