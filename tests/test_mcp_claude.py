"""tc-git's MCP server as the real Claude Code CLI uses it (issue 30), a scripted model on loopback.

Claude Code (2.1.x, print mode) connects MCP servers in the background and builds its first
request to the model without them, unless the server's entry says `alwaysLoad` (then it waits for
the connection, its connect timeout, and never defers the tools): `tc-git setup` writes that.
Here, in a fresh HOME with no fast-start cache (the full SDK start; setup writes one, removed
here) and then with the cache the first run wrote (the fast start, handed over to the SDK at the
first tools/call), the first
request of each run carries every tc-git tool, and an agent lists tasks, switches by name and
restores to `r0001` (preview, then apply) over MCP.

Speed is measured in benchmarks/bench_mcp.py, not here: the connect timeout is raised so a loaded
machine cannot fail the test by being slow.
"""
from __future__ import annotations

import json
import subprocess

import pytest
from conftest import TC, FakeMessages, clean_env, local_http, write
from test_mcp import TOOLS

from tc_git.cli.setup import server_command
from tc_git.engine import Engine

KEY = "sk-ant-api03-tc-git-fake-key-for-a-local-server"
OURS = "mcp__tc-git__"

# each prompt's calls, in order; then a closing text
SCRIPTS = {
    "PROMPT-TASKS": [("tc_tasks", {}), ("tc_switch", {"task_id": "first task"})],
    "PROMPT-RESTORE": [("tc_restore", {"at": "r0001"}), ("tc_restore", {"at": "r0001", "apply": True})],
}


def _texts(content) -> list[str]:
    if isinstance(content, str):
        return [content]
    return [b.get("text", "") for b in content or [] if isinstance(b, dict) and b.get("type") == "text"]


class _Agent(FakeMessages):
    requests: list[dict] = []

    def answer(self, body: dict) -> tuple[str, list[dict]]:
        msgs = body.get("messages") or []
        said = " ".join(t for m in msgs if m["role"] == "user" for t in _texts(m["content"]))
        prompt = next((p for p in SCRIPTS if p in said), None)
        if prompt is None or not body.get("tools"):
            return "msg_side", [{"type": "text", "text": "ok"}]  # Claude Code's own side requests
        done = sum(1 for m in msgs if isinstance(m["content"], list)
                   for b in m["content"] if isinstance(b, dict) and b.get("type") == "tool_result")
        calls = SCRIPTS[prompt]
        if done < len(calls):
            name, args = calls[done]
            return f"msg_{prompt}_{done}", [{"type": "tool_use", "id": f"toolu_{prompt[7:].lower()}{done}",
                                             "name": OURS + name, "input": args}]
        return f"msg_{prompt}_end", [{"type": "text", "text": "all done"}]


def _results(body: dict) -> list[dict]:
    """The tool results Claude Code sent back in a request, in order: our JSON, or the error text."""
    out = []
    for m in body["messages"]:
        for b in m["content"] if isinstance(m["content"], list) else []:
            if isinstance(b, dict) and b.get("type") == "tool_result":
                text = "".join(_texts(b.get("content")))
                assert not b.get("is_error"), text
                out.append(json.loads(text))
    return out


@pytest.fixture(scope="module")
def claude():
    from test_plugin import _claude_cli

    return _claude_cli()


def test_tools_in_the_first_request_then_tasks_switch_and_restore(claude, tmp_path, tc_env_clean):
    home, proj, cache = tmp_path / "home", tmp_path / "proj", tmp_path / "home" / ".cache"
    home.mkdir()
    proj.mkdir()
    env = clean_env(HOME=home, XDG_CACHE_HOME=cache, TC_GIT="off", TC_WATCH="off")
    # the workspace: "first task" with a restore point r0001 (back to v1 from v2), then v3 saved;
    # then "second task", active
    e = Engine(proj)
    write(proj, "app.py", "v1\n")
    e.init("first task")
    e.save("v1")
    write(proj, "app.py", "v2\n")
    e.save("v2")
    assert e.restore(at="1", apply=True)["restore_id"] == "r0001"
    write(proj, "app.py", "v3\n")
    e.save("v3")
    e.init("second task")

    # as a user connects Claude Code: `tc-git setup` (no hooks: only the MCP server is judged here)
    r = subprocess.run([*TC, "setup", "--client", "claude", "--no-hooks", "--no-skill", "--json"], cwd=proj,
                       env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    entry = json.loads((home / ".claude.json").read_text())["mcpServers"]["tc-git"]
    assert entry["alwaysLoad"] is True and entry["command"] == server_command()[0]
    primed = list(cache.glob("tc-git/mcp-*.json"))
    assert len(primed) == 1, primed  # setup started the server once: the first session starts fast
    primed[0].unlink()  # without it (an upgrade since setup) the first start is the SDK's: still on time

    run_env = dict(env, ANTHROPIC_API_KEY=KEY, DISABLE_TELEMETRY="1", DISABLE_AUTOUPDATER="1",
                   CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1", NO_COLOR="1", MCP_CONNECT_TIMEOUT_MS="120000")
    for k in ("CLAUDE_CONFIG_DIR", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN", "ANTHROPIC_MODEL",
              "CLAUDE_CODE_USE_BEDROCK", "CLAUDE_CODE_USE_VERTEX", "MCP_CONNECTION_NONBLOCKING"):
        run_env.pop(k, None)

    def turn(prompt: str) -> list[dict]:
        _Agent.requests = []
        with local_http(_Agent) as port:
            p = subprocess.run([str(claude), "-p", "--allowedTools", "mcp__tc-git", "--", f"{prompt} please"],
                               capture_output=True, text=True, env=dict(run_env, ANTHROPIC_BASE_URL=f"http://127.0.0.1:{port}"),
                               cwd=proj, timeout=300, stdin=subprocess.DEVNULL)
        assert p.returncode == 0 and "all done" in p.stdout, (p.stdout[-2000:], p.stderr[-2000:])
        bodies = [b for b in _Agent.message_bodies() if any(prompt in t for m in b.get("messages") or []
                                                               for t in _texts(m["content"]))]
        assert len(bodies) == len(SCRIPTS[prompt]) + 1, [len(b["messages"]) for b in bodies]
        # the very first request to the model already offers every tc-git tool
        first = {t["name"] for t in bodies[0]["tools"]}
        assert {OURS + t for t in TOOLS} <= first, sorted(first)
        return _results(bodies[-1])

    # cold: a fresh HOME, no fast-start cache
    listed, switched = turn("PROMPT-TASKS")
    rows = {t["name"]: t for t in listed["tasks"]}
    assert set(rows) == {"first task", "second task"} and rows["second task"]["active"], listed
    assert switched["task_id"] == rows["first task"]["task_id"]
    assert list(cache.glob("tc-git/mcp-*.json"))  # the full start wrote it: the next start is the fast one

    # warm: the fast start answers the handshake, the SDK takes over at the first call
    preview, applied = turn("PROMPT-RESTORE")
    assert preview["applied"] is False and preview["plan"]["to_replace"] == ["app.py"], preview
    assert applied["applied"] is True and applied["target"] == preview["target"] == "r0001", applied
    assert (proj / "app.py").read_text() == "v1\n"
    # the switch stuck: the store's active task is the one named, as the CLI sees it
    status = subprocess.run([*TC, "--json", "resume"], cwd=proj, env=env, capture_output=True, text=True)
    assert json.loads(status.stdout)["task_id"] == switched["task_id"], status.stdout[-500:]
