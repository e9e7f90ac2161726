"""The secret engine's compiled rules are built off the hook path (issue 30): `tc-git setup`
compiles them into their disk cache, and a PostToolUse hook that finds them missing (a fresh HOME,
no setup) hands its capture to a detached worker that compiles them, instead of compiling them
itself (~5 s of CPU in the hook of the agent's first edit). Judged by files and the hooks log,
never by wall-clock: the cache's files are not rewritten by a hook after setup, and the hook
that found them missing says it handed over (the worker records the drift, linked to the call,
the credential left out). Each test compiles the rules once, in a cache directory of its own."""
from __future__ import annotations

import json

import pytest
from conftest import TC, clean_env, git
from test_hooks import drift_notes, run_hook, wait_for

pytestmark = pytest.mark.usefixtures("fsck_after")
pytest.importorskip("kingfisher_sdk")

TOKEN = "tkn_" + "9fQ2xL7vB4mN8sR1tY6wZ3cK5hJ0dG"  # credential-shaped: the content scan needs the engine


def _env(tmp_path) -> dict:
    env = clean_env(HOME=str(tmp_path / "home"), XDG_STATE_HOME=str(tmp_path / "state"),
                    KF_RULE_CACHE_DIR=str(tmp_path / "rules"), TC_GIT="off")
    for k in ("CLAUDE_CONFIG_DIR", "CODEX_HOME", "XDG_CACHE_HOME"):
        env.pop(k, None)
    return env


def _cache(tmp_path) -> dict[str, int]:
    d = tmp_path / "rules"
    return {p.name: p.stat().st_mtime_ns for p in d.iterdir() if p.name.endswith(".vscdb")} if d.is_dir() else {}


def _workspace(tmp_path, env):
    import subprocess

    ws = tmp_path / "ws"
    (ws / "src").mkdir(parents=True)
    (ws / "src" / "a.py").write_text("print('a')\n")
    for args in (["init", "first edit"], ["save", "one"]):
        r = subprocess.run(TC + ["-C", str(ws), *args], capture_output=True, text=True, env=env)
        assert r.returncode == 0, r.stderr
    # a shell command wrote two files (the whole workspace is captured): one holds a credential
    (ws / "src" / "conf.py").write_text(f'API_TOKEN = "{TOKEN}"\n')
    (ws / "src" / "b.py").write_text("print('b')\n")
    ev = {"session_id": "c0ffee00-first", "cwd": str(ws), "hook_event_name": "PostToolUse", "tool_name": "Bash",
          "tool_use_id": "toolu_first", "tool_input": {"command": "python gen.py"},
          "tool_response": {"stdout": "", "stderr": ""}}
    return ws, ev


def _drift_tree(ws) -> list[str]:
    drift = drift_notes(ws / ".checkpoints")[0]
    assert drift["tool_call"]["id"] == "toolu_first" and drift["session"] == "c0ffee00-first"
    tree = git(ws / ".checkpoints", "ls-tree", "-r", "--name-only", drift["oid"]).decode().split()
    assert "src/b.py" in tree
    assert "src/conf.py" not in tree  # left out as a credential: the engine scanned it
    return tree


def _hooks_log(ws) -> str:
    p = ws / ".checkpoints" / "tc" / "hooks.log"
    return p.read_text() if p.exists() else ""


def test_setup_compiles_the_rules_and_the_first_hook_only_loads_them(tmp_path):
    import subprocess

    env = _env(tmp_path)
    (tmp_path / "home").mkdir()
    r = subprocess.run(TC + ["--json", "setup", "--client", "claude"], capture_output=True, text=True, env=env,
                       cwd=tmp_path / "home")
    assert r.returncode == 0, r.stderr
    row = {d["what"]: d for d in json.loads(r.stdout)["done"]}["secret rules"]
    assert row["changed"] is True and row["path"] == str(tmp_path / "rules")
    built = _cache(tmp_path)
    assert built, "setup left no compiled rules in the cache"
    ws, ev = _workspace(tmp_path, env)
    r = run_hook(ev, "post-tool-use", env=env)
    assert r.returncode == 0 and r.stdout == b"", r.stderr
    log = _hooks_log(ws)
    assert "PostToolUse Bash toolu_first: drift" in log and "handed to worker" not in log, log
    assert _cache(tmp_path) == built  # loaded, not compiled again
    _drift_tree(ws)
    again = subprocess.run(TC + ["--json", "setup", "--client", "claude"], capture_output=True, text=True, env=env,
                           cwd=tmp_path / "home")
    assert {d["what"]: d for d in json.loads(again.stdout)["done"]}["secret rules"]["changed"] is False


def test_a_hook_that_finds_no_rules_hands_its_capture_to_a_worker(tmp_path):
    env = _env(tmp_path)
    (tmp_path / "home").mkdir()
    ws, ev = _workspace(tmp_path, env)  # (the CLI's save scanned nothing credential-shaped: nothing compiled)
    assert not _cache(tmp_path)
    r = run_hook(ev, "post-tool-use", env=env)
    assert r.returncode == 0 and r.stdout == b"", r.stderr
    assert "secret rules not compiled yet: capture handed to worker" in _hooks_log(ws)
    # the worker compiles them, then records the drift the hook would have, linked to the same call
    done = wait_for(lambda: any(w in _hooks_log(ws) for w in ("toolu_first: drift", "toolu_first: no changes",
                                                               "capture failed")), timeout=300)
    assert done and "PostToolUse Bash toolu_first: drift" in _hooks_log(ws), _hooks_log(ws)
    assert "worker: compiled the secret engine's rules" in _hooks_log(ws) and _cache(tmp_path)
    _drift_tree(ws)


def test_no_engine_means_nothing_to_build(tmp_path, monkeypatch):
    """Where the engine cannot be imported (a platform without its wheel), its missing rules are
    not 'missing': no hook hands its capture to a worker that could not build them either."""
    import sys

    from tc_git.base import settings
    from tc_git.workspace import secrets

    with settings.override(kf_rule_cache=str(tmp_path / "empty")):
        assert secrets.rule_cache_missing()  # (the engine is here, its rules are not)
        monkeypatch.setitem(sys.modules, "kingfisher_sdk", None)  # import fails, as without the wheel
        assert not secrets.rule_cache_missing()
        assert not secrets.build_rule_cache()
