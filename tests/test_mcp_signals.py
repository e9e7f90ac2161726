"""SIGINT and SIGTERM end the stdio server cleanly (issue 30): Claude Code sends SIGTERM on every
exit, a terminal sends SIGINT. The process exits 0 (within a generous bound: no timing is
asserted), in-flight work is finished, and stock git finds the store clean."""
from __future__ import annotations

import json
import signal
import subprocess
import sys

import pytest
from conftest import clean_env, fsck, knobs, write

INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}


class Server:
    def __init__(self, env, cwd):
        self.p = subprocess.Popen([sys.executable, "-m", "tc_git"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, env=env, cwd=cwd)

    def send(self, msg) -> None:
        self.p.stdin.write(json.dumps(msg).encode() + b"\n")
        self.p.stdin.flush()

    def ask(self, msg) -> dict:
        self.send(msg)
        while True:
            line = self.p.stdout.readline()
            assert line, self.p.stderr.read().decode()[-2000:]
            reply = json.loads(line)
            if reply.get("id") == msg["id"]:
                return reply

    def call(self, i, tool, **args) -> dict:
        return self.ask({"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": {"name": tool, "arguments": args}})

    def stop(self, sig) -> int:
        self.p.send_signal(sig)
        try:
            return self.p.wait(timeout=120)  # generous: the point is that it exits, and how
        finally:
            self.p.stdin.close()
            self.p.stdout.close()
            self.p.stderr.close()


@pytest.fixture
def env(tmp_path):
    return clean_env(TC_GIT="off", **knobs(mcp_cache=tmp_path / "cache"))


def test_signals_end_the_server_cleanly(env, tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    write(ws, "a.txt", "1\n")
    s = Server(env, tmp_path)  # a full start (no cache yet; it writes one); the drift watcher is on
    s.ask(INIT)
    s.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    assert not s.call(2, "tc_init", root=str(ws), name="t")["result"]["isError"]
    assert not s.call(3, "tc_save", root=str(ws), title="one")["result"]["isError"]
    write(ws, "b.txt", "2\n")
    # a save still in flight when the signal comes: finished or never started, nothing half-written
    s.send({"jsonrpc": "2.0", "id": 4, "method": "tools/call",
            "params": {"name": "tc_save", "arguments": {"root": str(ws), "title": "two"}}})
    assert s.stop(signal.SIGTERM) == 0
    fsck(ws / ".checkpoints")
    r = subprocess.run(["git", f"--git-dir={ws / '.checkpoints'}", "log", "--all", "--format=%s"],
                       capture_output=True, text=True, env=clean_env())
    assert r.returncode == 0 and "one" in r.stdout

    # a fast start (the cache is there now): SIGINT while only initialize and tools/list were
    # answered, before the SDK took over
    s = Server(env, tmp_path)
    s.ask(INIT)
    s.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    assert s.ask({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})["result"]["tools"]
    assert s.stop(signal.SIGINT) == 0
