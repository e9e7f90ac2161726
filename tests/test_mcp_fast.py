"""Fast start (tc_git/mcp/fast.py): once a full start has written the cache, `initialize`, `ping`
and `tools/list` are answered before the MCP SDK is imported, byte-for-byte what the full server
answers, and the first other request hands the session to the real server."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
from conftest import clean_env, knobs

INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}


class Wire:
    def __init__(self, cmd, env, cwd):
        self.p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  env=env, cwd=cwd)

    def send(self, msg) -> None:
        self.p.stdin.write((msg if isinstance(msg, bytes) else json.dumps(msg).encode()) + b"\n")
        self.p.stdin.flush()

    def ask(self, msg) -> dict:
        self.send(msg)
        while True:
            line = self.p.stdout.readline()
            assert line, self.p.stderr.read().decode()[-2000:]
            reply = json.loads(line)
            if reply.get("id") == msg["id"]:
                return reply

    def close(self) -> int:
        self.p.stdin.close()
        try:
            return self.p.wait(timeout=60)
        finally:
            self.p.stdout.close()
            self.p.stderr.close()


def _fast(on: bool, env: dict) -> dict:
    """The test hook's knobs of `env` plus the fast start on or off."""
    return {"TC_TEST_SETTINGS": env["TC_TEST_SETTINGS"] + f",mcp_fast={'on' if on else 'off'}"}


@pytest.fixture
def env(tmp_path):
    return clean_env(TC_WATCH="off", TC_GIT="off", **knobs(mcp_cache=tmp_path / "cache"))


def session(env, cwd, fast: bool, version="2025-06-18") -> tuple[list[dict], float]:
    w = Wire([sys.executable, "-m", "tc_git"], dict(env, **_fast(fast, env)), cwd)
    t0 = time.perf_counter()
    init = w.ask({**INIT, "params": {**INIT["params"], "protocolVersion": version}})
    w.send(INITIALIZED)
    tools = w.ask({"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}})
    t_list = time.perf_counter() - t0
    ping = w.ask({"jsonrpc": "2.0", "id": 3, "method": "ping"})
    call = w.ask({"jsonrpc": "2.0", "id": 4, "method": "tools/call",
                  "params": {"name": "tc_show", "arguments": {"root": str(cwd / "nowhere")}}})
    after = w.ask({"jsonrpc": "2.0", "id": 5, "method": "ping"})
    res = w.ask({"jsonrpc": "2.0", "id": 6, "method": "resources/list"})
    assert w.close() == 0
    return [init, tools, ping, call, after, res], t_list


def test_fast_start_answers_like_the_full_server(env, tmp_path):
    stale, other = tmp_path / "cache" / "mcp-0000000000000000.json", tmp_path / "cache" / "mcp-1111111111111111.json"
    stale.parent.mkdir()
    stale.write_text("{}")
    os.utime(stale, (time.time() - 30 * 86400,) * 2)  # unused for a month: pruned
    other.write_text("{}")  # another install's, in use: kept
    full, _ = session(env, tmp_path, fast=False)  # writes the cache
    assert len(list((tmp_path / "cache").glob("mcp-*.json"))) == 2 and not stale.exists() and other.exists()
    for version in ("2025-06-18", "2024-11-05", "1999-01-01"):
        slow, _ = session(env, tmp_path, fast=False, version=version)
        fast, _ = session(env, tmp_path, fast=True, version=version)
        assert fast == slow, version  # initialize, tools/list, ping, a tool call after the handover
    assert full[3]["result"]["isError"] is True and "nowhere" in full[3]["result"]["content"][0]["text"]


MODERN_META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
               "io.modelcontextprotocol/clientInfo": {"name": "mcp", "version": "0.1.0"},
               "io.modelcontextprotocol/clientCapabilities": {}}


def modern_session(env, cwd, fast: bool) -> list[dict]:
    """What the current SDK's default client (mode "auto") sends: server/discover, then requests
    that each carry their protocol version in `_meta` (no initialize)."""
    w = Wire([sys.executable, "-m", "tc_git"], dict(env, **_fast(fast, env)), cwd)
    out = [w.ask({"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": MODERN_META}}),
           w.ask({"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {"_meta": MODERN_META}}),
           w.ask({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                  "params": {"name": "tc_show", "arguments": {"root": str(cwd / "nowhere")}, "_meta": MODERN_META}}),
           w.ask({"jsonrpc": "2.0", "id": 4, "method": "tools/list", "params": {"_meta": MODERN_META}})]
    assert w.close() == 0
    return out


def test_fast_start_answers_the_current_sdk_client_like_the_full_server(env, tmp_path):
    session(env, tmp_path, fast=False)  # writes the cache
    slow = modern_session(env, tmp_path, fast=False)
    fast = modern_session(env, tmp_path, fast=True)
    assert fast == slow
    assert "2026-07-28" in slow[0]["result"]["supportedVersions"] and slow[1]["result"]["tools"]
    assert slow[2]["result"]["isError"] is True


def test_fast_start_does_not_wait_for_the_sdk(env, tmp_path):
    """With the SDK import blocked, initialize, ping and tools/list are still answered."""
    session(env, tmp_path, fast=False)
    code = ("import threading, sys; from tc_git.mcp import fast as mcp_fast; "
            "mcp_fast.FastFront._import_server = lambda self: threading.Event().wait(); "
            "mcp_fast.main([])")
    w = Wire([sys.executable, "-c", code], dict(env, **_fast(True, env)), tmp_path)
    assert w.ask(INIT)["result"]["serverInfo"]["name"] == "tc-git"
    w.send(INITIALIZED)
    assert w.ask({"jsonrpc": "2.0", "id": 2, "method": "ping"})["result"] == {}
    tools = w.ask({"jsonrpc": "2.0", "id": 3, "method": "tools/list"})["result"]["tools"]
    assert [t["name"] for t in tools][:2] == ["tc_init", "tc_save"]
    assert w.close() == 0
    w = Wire([sys.executable, "-c", code], dict(env, **_fast(True, env)), tmp_path)  # the current client's way
    assert w.ask({"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": MODERN_META}})["result"]
    tools = w.ask({"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {"_meta": MODERN_META}})["result"]["tools"]
    assert [t["name"] for t in tools][:2] == ["tc_init", "tc_save"]
    assert w.close() == 0


def test_fast_start_survives_garbage_and_a_broken_cache(env, tmp_path):
    session(env, tmp_path, fast=False)
    w = Wire([sys.executable, "-m", "tc_git"], env, tmp_path)  # fast
    w.ask(INIT)
    w.send(INITIALIZED)
    w.send(b"this is not json")  # answered -32700 by the input screen (mcp_wire.screen), no handover
    assert w.ask({"jsonrpc": "2.0", "id": 9, "method": "ping"})["result"] == {}
    assert w.close() == 0
    for f in (tmp_path / "cache").glob("mcp-*.json"):
        f.write_text("{not json")  # a broken cache: the full server starts, and rewrites it
    w = Wire([sys.executable, "-m", "tc_git"], env, tmp_path)
    assert w.ask(INIT)["result"]["serverInfo"]["name"] == "tc-git"
    assert w.close() == 0
    assert all(json.loads(f.read_text())["tools"] for f in (tmp_path / "cache").glob("mcp-*.json"))


@pytest.mark.parametrize("fast", [False, True])
def test_hostile_strings_are_answered(env, tmp_path, fast):
    """Lone UTF-16 surrogates anywhere in a request (which the SDK's parser refuses without an
    answer), unknown names, odd roots: every request gets an answer, the server keeps answering ping."""
    if fast:
        session(env, tmp_path, fast=False)  # writes the cache
    w = Wire([sys.executable, "-m", "tc_git"], dict(env, **_fast(fast, env)), tmp_path)
    w.ask(INIT)
    w.send(INITIALIZED)
    root = json.dumps(str(tmp_path))
    calls = [('tools/call', '{"name":"tc_init","arguments":{"root":%s,"name":"a\\udce9b"}}' % root),
             ('tools/call', '{"name":"tc_\\udce9","arguments":{}}'),
             ('tools/call', '{"name":"tc_show","arguments":{"root":%s,"x\\ud800":1}}' % root),
             ('tools/call', '{"name":"tc_resume","arguments":{"root":"/tmp/no\\udce9where"}}'),
             ('tools/call', '{"name":"tc_init","arguments":{"root":%s,"name":"ok \\ud83d\\ude00"}}' % root),
             ('tools/call', '{"name":"tc_save","arguments":{"root":%s,"title":"x","close":"yes"}}' % root),
             ('prompts/get', '{"name":"save-step","arguments":{"note":"\\udfff"}}'),
             ('resources/read', '{"uri":"tc://\\udce9"}'),
             ('resources/read', '{"uri":"tc://resume"}')]
    for i, (method, params) in enumerate(calls, 10):
        w.send(b'{"jsonrpc":"2.0","id":%d,"method":"%s","params":%s}' % (i, method.encode(), params.encode()))
        while True:
            reply = json.loads(w.p.stdout.readline())
            if reply.get("id") == i:
                break
        assert "result" in reply or "error" in reply, reply
        if method == "tools/call" and i != 14:
            assert reply["result"]["isError"] is True, reply
        assert w.ask({"jsonrpc": "2.0", "id": 100 + i, "method": "ping"})["result"] == {}
    assert w.close() == 0


def _nested(msg_id, depth: int, inner: str = "1") -> bytes:
    return (b'{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"tc_show","arguments":{"x":' % msg_id
            + b"[" * depth + inner.encode() + b"]" * depth + b"}}}")


def _answer(w: Wire, msg_id) -> dict:
    while True:
        line = w.p.stdout.readline()
        assert line, w.p.stderr.read().decode()[-2000:]
        reply = json.loads(line)
        if reply.get("id") == msg_id:
            return reply


@pytest.mark.parametrize("fast", [True, False])
def test_no_line_stops_the_reader(env, tmp_path, fast):
    """Issue 28: a 100,000-deep first request killed the fast front (RecursionError); after the SDK
    took over, a 600-deep request holding `\\ud800` killed the stdin reader and one without it was
    dropped unanswered. Every such line is answered (-32600 / -32700, with its id) and the server
    goes on answering."""
    if fast:
        session(env, tmp_path, fast=False)  # writes the cache
    w = Wire([sys.executable, "-m", "tc_git"], dict(env, **_fast(fast, env)), tmp_path)
    w.send(_nested(1000, 100_000))  # before anything else: in the fast front when there is one
    r = _answer(w, 1000)
    assert r["error"]["code"] == -32600 and "deeper" in r["error"]["message"], r
    assert w.ask(INIT)["result"]["serverInfo"]["name"] == "tc-git"
    w.send(INITIALIZED)
    call = w.ask({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                  "params": {"name": "tc_show", "arguments": {"root": str(tmp_path / "nowhere")}}})
    assert call["result"]["isError"] is True  # the SDK serves from here on
    w.send(_nested(1001, 600, '"\\ud800"'))
    assert _answer(w, 1001)["error"]["code"] == -32600
    w.send(_nested(1002, 600))
    assert _answer(w, 1002)["error"]["code"] == -32600
    w.send(b'{"jsonrpc":"2.0","method":"tools/call","params":' + b"[" * 5000 + b"]" * 5000 + b',"id":"late"}')
    assert _answer(w, "late")["error"]["code"] == -32600  # the id is read after the deep part too
    w.send(b'{"jsonrpc":"2.0","id":1003,"method":"ping"')  # cut short
    assert _answer(w, 1003)["error"]["code"] == -32700
    w.send(b"not json at all")
    assert _answer(w, None)["error"]["code"] == -32700
    w.send(b'{"jsonrpc":"2.0","id":1004,"method":"ping","params":{"t":"' + b"a" * (17 << 20) + b'"}}')
    assert "MiB" in _answer(w, 1004)["error"]["message"]  # over the line limit: read in pieces, answered
    w.send(_nested(1005, 40))  # deep but within the bound: served as usual
    assert "result" in _answer(w, 1005)
    tools = w.ask({"jsonrpc": "2.0", "id": 3, "method": "tools/list", "params": {}})
    assert {t["name"] for t in tools["result"]["tools"]} >= {"tc_init", "tc_save", "tc_show"}
    assert w.ask({"jsonrpc": "2.0", "id": 4, "method": "ping"})["result"] == {}
    assert w.close() == 0
