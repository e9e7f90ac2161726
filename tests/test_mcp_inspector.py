"""tc-mcp judged by a client we did not write: the MCP Inspector CLI (npm
`@modelcontextprotocol/inspector`, TypeScript SDK). That SDK validates every structuredContent
against the tool's outputSchema, errors included, so a result it dislikes comes back as an MCP
error instead of reaching the agent.

The CLI is installed once into a prefix under ~/.cache/tc-git-test/inspector (or $TC_INSPECTOR_CLI:
an `mcp-inspector` binary to use instead; `.ci/run` pre-installs it). 0.15.0 is the newest release
that runs on Node 20 (0.16+ needs Node 22). Each call starts the real server over stdio
(`python -m tc_git`); the workspace on disk carries the state from one call to the next.
"""
from __future__ import annotations

import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from conftest import clean_env, npm_cli, tree_state, write

PACKAGE = "@modelcontextprotocol/inspector@0.15.0"
SEED_TOOLS = ["tc_init", "tc_save", "tc_resume", "tc_show", "tc_restore", "tc_capture", "tc_switch",
              "tc_export", "tc_import", "tc_compress"]


def _inspector_cli() -> Path:
    return npm_cli("TC_INSPECTOR_CLI", "inspector", PACKAGE, "mcp-inspector",
                   "NOT TESTED WITH A FOREIGN CLIENT: the MCP Inspector CLI")


@pytest.fixture(scope="module")
def inspector():
    return _inspector_cli()


def inspect(cli: Path, cwd: Path, method: str, tool: str | None = None, args: dict | None = None,
            extra: tuple = (), env: dict | None = None) -> dict:
    """One Inspector CLI run against a fresh `python -m tc_git`; its stdout JSON (fails on an MCP
    error: that is what a strict client turns a bad result into)."""
    # the target first: the launcher drops "--", and --tool-arg takes every word after it
    cmd = [str(cli), "--cli", sys.executable, "-m", "tc_git", "--method", method, *extra]
    if tool:
        cmd += ["--tool-name", tool]
    if args:
        cmd += ["--tool-arg", *(f"{k}={v}" for k, v in args.items())]
    env = clean_env(TC_WATCH="off", TC_GIT="off", NO_COLOR="1", **(env or {}))
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=str(cwd), env=env, timeout=180,
                       stdin=subprocess.DEVNULL)
    assert r.returncode == 0, f"inspector {method} {tool or ''} failed: {r.stderr[-1500:]}"
    return json.loads(r.stdout)


def ok(result: dict) -> dict:
    assert result.get("isError") is not True, result
    assert json.loads(result["content"][0]["text"]) == result["structuredContent"]
    return result["structuredContent"]


def err(result: dict, *needles: str) -> str:
    """An error reached the Inspector as a tool result with the tool's message."""
    assert result.get("isError") is True, result
    assert "structuredContent" not in result, result
    text = result["content"][0]["text"]
    assert result["_meta"]["tc-git/code"] and text.endswith(f"[{result['_meta']['tc-git/code']}]")
    for n in needles:
        assert n in text, text
    return text


def test_tools_list(inspector, tmp_path):
    tools = inspect(inspector, tmp_path, "tools/list")["tools"]
    names = [t["name"] for t in tools]
    assert names[:10] == SEED_TOOLS and len(names) == len(set(names)) >= 21
    for t in tools:
        assert t["description"] and t["inputSchema"]["type"] == "object"
        assert t["name"] not in SEED_TOOLS or t["outputSchema"]["type"] == "object"


def test_seed_tools_and_every_error_kind(inspector, tmp_path):
    ws, ws2, out = tmp_path / "ws", tmp_path / "ws2", tmp_path / "out"
    for d in (ws, ws2, out):
        d.mkdir()
    write(ws, "app.py", "v1\n")
    write(ws, "run.sh", "#!/bin/sh\n", mode=0o755)

    def call(tool, cwd=ws, **args):
        return inspect(inspector, cwd, "tools/call", tool, {"root": str(cwd), **args})


    other = ok(call("tc_init", name="other task"))["task_id"]
    tid = ok(call("tc_init", name="inspected", goal="pass a strict client"))["task_id"]
    s1 = ok(call("tc_save", title="v1", conclusion="works", next="v2", verified='["tests"]'))
    assert s1["index"] == 1
    write(ws, "app.py", "v2\n")
    assert ok(call("tc_resume"))["drift_paths"] == ["app.py"]
    cap = ok(call("tc_capture"))
    assert cap["captured"] and cap["drift_id"]
    assert [s["index"] for s in ok(call("tc_show", include_drift="true"))["steps"]] == [1]
    plan = ok(call("tc_restore", index=1))
    assert plan["applied"] is False and plan["plan"]["to_replace"] == ["app.py"]
    assert ok(call("tc_switch", task_id=other))["task_id"] == other
    assert ok(call("tc_switch", task_id=tid))["status"] == "open"
    exp = ok(call("tc_export", to=str(out)))
    imp = ok(call("tc_import", cwd=ws2, package=exp["path"]))
    assert imp["task_id"] == tid
    assert ok(call("tc_compress"))["maximum"] == 50

    # every kind of error: an isError result with the tool's message, never an MCP error
    # (read-only calls, independent of each other: run side by side to save wall time)
    cases = [("tc_show", {"limit": 0}, ("bad arguments", "limit")),
             ("tc_save", {"bogus": "1"}, ("unknown argument", "bogus")),
             ("tc_restore", {"index": 1, "drift_id": cap["drift_id"]}, ("exactly one of at",)),
             ("tc_show", {"index": 99}, ("99",)),
             ("tc_restore", {"drift_id": "d9999"}, ("d9999",)),
             ("tc_init", {"root": "/", "name": "everything"}, ("/",))]
    with ThreadPoolExecutor(3) as pool:
        results = list(pool.map(lambda c: call(c[0], **c[1]), cases))
    for (_, _, needles), r in zip(cases, results):
        err(r, *needles)
    before = tree_state(ws)
    ok(call("tc_save", title="last", close="true"))
    err(call("tc_save", title="after close"), "closed")
    err(call("tc_restore", index=1, apply="true"), "closed")
    assert tree_state(ws) == before


def test_resource_and_prompts(inspector, tmp_path):
    """tc://resume and the prompts through the Inspector (the server's cwd is the workspace)."""
    from tc_git.engine import Engine

    ws = tmp_path / "ws"
    ws.mkdir()
    write(ws, "f.txt", "1")
    eng = Engine(str(ws))
    eng.init("inspected resource", goal="read me")
    eng.save("first", conclusion="fine", next="second")
    res = inspect(inspector, ws, "resources/list")["resources"]
    assert [r["uri"] for r in res] == ["tc://resume"]
    text = inspect(inspector, ws, "resources/read", extra=("--uri", "tc://resume"))["contents"][0]["text"]
    assert "read me" in text and "second" in text
    prompts = {p["name"] for p in inspect(inspector, ws, "prompts/list")["prompts"]}
    assert prompts == {"resume", "save-step"}
    got = inspect(inspector, ws, "prompts/get", extra=("--prompt-name", "resume"))
    assert "read me" in got["messages"][0]["content"]["text"]
    got = inspect(inspector, ws, "prompts/get", extra=("--prompt-name", "save-step", "--prompt-args", "note=green"))
    assert "tc_save" in got["messages"][0]["content"]["text"] and "green" in got["messages"][0]["content"]["text"]


def test_resume_session_tool(inspector, tmp_path):
    """tc_resume_session through a strict client: the session file lands where Claude Code looks
    and reads back to the recorded events; bad arguments are isError results writing nothing."""
    from conftest import TRANSCRIPTS

    from tc_git import trajectory as T
    from tc_git.engine import Engine

    ws = tmp_path / "ws"
    ws.mkdir()
    write(ws, "f.txt", "1")
    eng = Engine(str(ws))
    eng.init("resume through the inspector")
    rec = eng.record(transcript=str(TRANSCRIPTS / "claude-entire-1.jsonl"), milestone="m1")
    env = {"CLAUDE_CONFIG_DIR": str(tmp_path / "claude"), "CODEX_HOME": str(tmp_path / "codex")}

    def call(**args):
        return inspect(inspector, ws, "tools/call", "tc_resume_session", {"root": str(ws), **args}, env=env)

    got = ok(call(point="m1", client="claude"))
    slug = "".join(ch if ch.isalnum() else "-" for ch in str(ws.resolve()))
    assert Path(got["path"]).parent == tmp_path / "claude" / "projects" / slug
    assert got["event"] == rec["tip"] and got["command"] == f"claude --resume {got['session_id']}"
    assert len(T.read_transcript(got["path"]).events) == rec["events"]
    cases = [({"point": "m1", "client": "gemini"}, ("bad arguments", "client")),
             ({"point": "m1", "client": "claude", "session_id": "../../x"}, ("unknown argument", "session_id")),
             ({"point": "no-such-milestone", "client": "codex"}, ("no-such-milestone",))]
    with ThreadPoolExecutor(3) as pool:
        results = list(pool.map(lambda c: call(**c[0]), cases))
    for (_, needles), r in zip(cases, results):
        err(r, *needles)
    # (a non-boolean flag is not sent: the Inspector coerces tool-arg strings by the schema's type)
    assert not (tmp_path / "codex").exists() and len(list((tmp_path / "claude").rglob("*.jsonl"))) == 1
