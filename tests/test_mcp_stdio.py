"""End to end: the real `tc-mcp` process (`python -m tc_git`) over stdio, driven by the SDK client
through the seed's whole workflow; workspace bytes are the judge, stock git judges the store."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import jsonschema
import pytest
from conftest import clean_env, git, tree_state, write
from mcp import Client, StdioServerParameters
from test_mcp import TOOLS

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("fsck_after"),
              pytest.mark.filterwarnings("ignore:.*(deprecated|removed as of):Warning")]

SEED_TOOLS = ["tc_init", "tc_save", "tc_resume", "tc_show", "tc_restore", "tc_capture", "tc_switch",
              "tc_export", "tc_import", "tc_compress"]


def stdio(cwd=None, **env):
    base = clean_env(TC_WATCH="off", TC_GIT="off")
    base.update({k: str(v) for k, v in env.items()})
    # legacy = the initialize handshake today's clients (Claude Code, Codex, Cursor) speak; ping
    # exists there (the 2026-07-28 protocol drops it)
    return Client(StdioServerParameters(command=sys.executable, args=["-m", "tc_git"], env=base,
                                        cwd=str(cwd) if cwd else None), mode="legacy")


def ok(r):
    assert not r.is_error, r.content[0].text
    assert json.loads(r.content[0].text) == r.structured_content
    return r.structured_content


def err(r, code):
    assert r.is_error and r.structured_content is None, r
    body = {"error": r.content[0].text, "code": (r.meta or {}).get("tc-git/code")}
    assert body["code"] == code and "Traceback" not in body["error"], body
    return body


async def test_seed_workflow_over_stdio(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    root = str(ws)
    async with stdio() as c:
        tools = {t.name: t for t in (await c.list_tools()).tools}
        assert list(tools) == TOOLS and list(tools)[:10] == SEED_TOOLS  # every tool, the seed's ten first

        async def call(tool, /, **args):
            r = await c.call_tool(tool, args)
            if not r.is_error:
                jsonschema.validate(r.structured_content, tools[tool].output_schema)
            return r

        init = ok(await call("tc_init", root=root, name="stdio task", goal="ship it", constraints="no net"))
        tid = init["task_id"]

        # step 1: text, binary, executable
        write(ws, "src/app.py", "print('v1')\n")
        write(ws, "bin/blob.dat", bytes(range(256)) * 4)
        write(ws, "run.sh", "#!/bin/sh\necho 1\n", mode=0o755)
        s1 = ok(await call("tc_save", root=root, title="scaffold", conclusion="layout works", next="add feature",
                           verified=["py_compile"]))
        state1 = tree_state(ws)
        assert s1["index"] == 1 and not s1["idempotent"]
        assert ok(await call("tc_save", root=root, title="scaffold", conclusion="layout works",
                             next="add feature", verified=["py_compile"]))["idempotent"]

        # step 2: edit, delete, add
        write(ws, "src/app.py", "print('v2')\n")
        (ws / "bin" / "blob.dat").unlink()
        write(ws, "src/new.py", "x = 2\n")
        s2 = ok(await call("tc_save", root=root, title="feature", conclusion="v2 prints", next="polish"))
        state2 = tree_state(ws)

        # step 3: chmod off and more text
        os.chmod(ws / "run.sh", 0o644)
        write(ws, "README", "docs\n")
        s3 = ok(await call("tc_save", root=root, title="docs", conclusion="documented", next="release",
                           open_questions=["version number?"]))
        assert (s1["index"], s2["index"], s3["index"]) == (1, 2, 3)

        # unsaved work, then a new session would resume first
        write(ws, "src/app.py", "print('unsaved')\n")
        write(ws, "scratch.txt", "new file, never saved\n")
        unsaved = tree_state(ws)
        res = ok(await call("tc_resume", root=root))
        assert res["head"] == 3 and res["next"] == "release" and res["open_questions"] == ["version number?"]
        assert set(res["drift_paths"]) >= {"src/app.py", "scratch.txt"}
        assert "release" in res["handoff"] and len(res["handoff"].encode()) < 2048

        show = ok(await call("tc_show", root=root, limit=2))
        assert [s["index"] for s in show["steps"]] == [1, 2] and show["next_cursor"] == 2
        show = ok(await call("tc_show", root=root, cursor=2))
        assert [s["index"] for s in show["steps"]] == [3] and show["next_cursor"] is None
        one = ok(await call("tc_show", root=root, index=2))
        assert one["steps"][0]["conclusion"] == "v2 prints"

        # restore: preview changes nothing, apply brings step 1 back exactly
        pv = ok(await call("tc_restore", root=root, index=1))
        assert not pv["applied"] and tree_state(ws) == unsaved
        assert "src/new.py" in pv["plan"]["to_delete"] and "bin/blob.dat" in pv["plan"]["to_write"]
        ap = ok(await call("tc_restore", root=root, index=1, apply=True))
        assert ap["applied"] and ap["recovered"] and ap["plan"] == pv["plan"]
        assert tree_state(ws) == state1
        # undo the restore: the unsaved edit and the never-saved file come back
        undo = ok(await call("tc_restore", root=root, drift_id=ap["recovered"], apply=True))
        assert undo["applied"] and tree_state(ws) == unsaved
        # and a step in the middle
        ok(await call("tc_restore", root=root, index=2, apply=True))
        assert tree_state(ws) == state2

        # capture
        write(ws, "src/app.py", "print('drift')\n")
        cap = ok(await call("tc_capture", root=root))
        assert cap["captured"] and cap["drift_id"] and cap["reads"] == 1
        assert not ok(await call("tc_capture", root=root))["captured"]

        # switch between tasks
        other = ok(await call("tc_init", root=root, name="side quest"))
        assert other["prev_suspended"] == tid
        assert ok(await call("tc_resume", root=root))["task_id"] == other["task_id"]
        assert ok(await call("tc_switch", root=root, task_id=tid)) == {"task_id": tid, "status": "open"}
        assert ok(await call("tc_resume", root=root))["task_id"] == tid
        assert ok(await call("tc_resume", root=root, task_id=other["task_id"]))["status"] == "suspended"

        # compress: the drifts go (keep none), steps and restore points stay, workspace untouched
        before = tree_state(ws)
        comp = ok(await call("tc_compress", root=root, keep_seconds=0, minimum=0, maximum=1))
        assert comp["maximum"] == 1 and comp["converted"] >= 0
        assert tree_state(ws) == before
        after = ok(await call("tc_show", root=root, include_drift=True))
        assert [s["index"] for s in after["steps"]] == [1, 2, 3]
        await c.send_ping()
        store = ws / ".checkpoints"
        log = git(store, "log", "--format=%s", f"refs/checkpoints/tasks/{tid}/head").decode()
        assert "step 3: docs" in log and "step 1: scaffold" in log
        assert (store / "tc" / "server.log").is_file()


async def test_bad_inputs_over_stdio_server_keeps_answering(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    afile = tmp_path / "plain.txt"
    afile.write_text("x")
    async with stdio(TC_LOCK_TIMEOUT=1) as c:
        root = str(ws)
        cases = [
            ("tc_init", dict(root=root, name="x", exclude=["../escape"]), "bad_input"),
            ("tc_init", dict(root=str(tmp_path / "nope"), name="x"), "unsafe_root"),
            ("tc_init", dict(root=str(afile), name="x"), "unsafe_root"),
            ("tc_init", dict(root="/", name="x"), "unsafe_root"),
            ("tc_show", dict(root=root, limit=1000), "bad_input"),
        ]
        for name, args, code in cases:
            err(await c.call_tool(name, args), code)
            await c.send_ping()
        ok(await c.call_tool("tc_init", {"root": root, "name": "t"}))
        write(ws, "f", "1")
        ok(await c.call_tool("tc_save", {"root": root, "title": "one"}))
        err(await c.call_tool("tc_restore", {"root": root, "index": 1, "drift_id": "d0001"}), "bad_input")
        err(await c.call_tool("tc_show", {"root": root, "index": 9}), "not_found")
        # the store busy: another process holds the lock
        holder = subprocess.Popen(
            [sys.executable, "-c",
             "import sys, time, pathlib; from tc_git.storage.store import Store\n"
             f"s = Store(pathlib.Path({str(ws / '.checkpoints')!r}), pathlib.Path({root!r}))\n"
             "with s.lock():\n    print('held', flush=True); time.sleep(30)\n"],
            stdout=subprocess.PIPE, env=clean_env())
        try:
            assert holder.stdout.readline().strip() == b"held"
            t0 = time.monotonic()
            body = err(await c.call_tool("tc_save", {"root": root, "title": "two"}), "store_busy")
            assert "busy" in body["error"] and time.monotonic() - t0 < 10
            await c.send_ping()
        finally:
            holder.kill()
            holder.wait()
        assert ok(await c.call_tool("tc_save", {"root": root, "title": "two"}))["index"] == 2
        # closed task
        ok(await c.call_tool("tc_save", {"root": root, "title": "end", "close": True}))
        err(await c.call_tool("tc_save", {"root": root, "title": "after"}), "task_closed")
        await c.send_ping()


async def test_stdout_is_only_json_rpc_and_cli_flags(tmp_path):
    """Nothing but JSON-RPC on stdout; logs on stderr; --version/--help answer and exit."""
    env = clean_env(TC_WATCH="off")
    v = subprocess.run([sys.executable, "-m", "tc_git", "--version"], capture_output=True, env=env, timeout=30)
    assert v.returncode == 0 and v.stdout.startswith(b"tc-mcp ")
    bad = subprocess.run([sys.executable, "-m", "tc_git", "--bogus"], capture_output=True, env=env, timeout=30)
    assert bad.returncode == 2 and b"unknown arguments" in bad.stderr
    msgs = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize",
         "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "ping"},
        {"jsonrpc": "2.0", "id": 3, "method": "tools/call",
         "params": {"name": "tc_init", "arguments": {"root": str(tmp_path / "missing"), "name": "x"}}},
        {"jsonrpc": "2.0", "id": 4, "method": "tools/list"},
    ]
    p = subprocess.Popen([sys.executable, "-m", "tc_git"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, env=env)
    out = []
    try:
        for m in msgs:
            p.stdin.write((json.dumps(m) + "\n").encode())
            p.stdin.flush()
            if "id" in m:
                out.append(json.loads(p.stdout.readline()))
    finally:
        p.stdin.close()
        p.wait(10)
    assert [o["id"] for o in out] == [1, 2, 3, 4]
    assert out[0]["result"]["serverInfo"]["name"] == "tc-git"
    assert out[1]["result"] == {}
    assert out[2]["result"]["isError"] is True and "does not exist" in out[2]["result"]["content"][0]["text"]
    assert [t["name"] for t in out[3]["result"]["tools"]] == TOOLS
    assert p.stdout.read() == b""
