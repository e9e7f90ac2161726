"""The transcript shapes no public file had, written by the real clients, offline, and judged.

Issue 12 asks for each shape to be recorded from a file a real client wrote, and counted here
from the raw lines. No public, permissively licensed file had these (SOURCES.md lists the
searches), so the clients write them now, in the test, against local fake model endpoints
(`conftest.local_http`: nothing leaves the machine, no credentials). The fake model is a script
keyed on the conversation it is sent, so each client does its own work: runs the tools, spawns
the subagents, cuts the context, and writes its own session file, which our reader records.

* Claude Code (npm `@anthropic-ai/claude-code`, the cached CLI of test_plugin; written with
  2.1.197): a Bash call, two parallel `Agent` calls whose subagents run a Bash call each (the
  modern `subagents/agent-<id>.jsonl` files with their `.meta.json`), a second prompt, then
  `claude -p --resume <id> --resume-session-at <uuid>` (a hidden flag of the CLI: "only messages
  up to and including the assistant message with <message.id>"; it takes the line's uuid) and a
  third prompt: a real rewind, two prompt lines under one parent in one file.
* Codex 0.80.0 (npm `@openai/codex@0.80.0`, pinned: the newest Codex records a
  `local_shell_call` but no longer runs it, and has no `thread/rollback`), driven over its
  app-server's JSON-RPC on stdio: a `local_shell_call` that Codex executes (model
  `codex-mini-latest`, whose tool set has `local_shell`), a second turn, `thread/rollback`
  (which writes `thread_rolled_back`), a third turn.
* The newest Codex (the cached CLI of test_codex_resume; written with 0.171.0): `codex exec`
  answered with a `local_shell_call`, which it records unanswered; its rollout format
  (`world_state`, `item_completed`, `token_usage_record`, prompts without `event_msg`).

The judge is test_trajectory_fixtures' `_check` with its independent counts: prompts, answers,
calls and results paired on one chain, the forks that really exist (1 here), every prompt in the
Markdown, each subagent hanging off the call that spawned it. The raw files are also checked for
the shape itself (so a client that stops writing it fails here, instead of passing vacuously),
and the requests show each client really cut its context at the rewind.
"""
from __future__ import annotations

import json
import os
import queue
import subprocess
import threading
from pathlib import Path

import pytest
from conftest import FakeMessages, FakeResponses, clean_env, first_parent_chain, fsck, local_http, npm_cli
from test_trajectory_fixtures import _check, _lines, claude_counts, codex_counts

from tc_git import trajectory as T
from tc_git.storage.store import Store

FAKE_KEY = "sk-ant-api03-tc-git-fake-key-for-a-local-server"


def _repo(tmp_path: Path):
    ws = tmp_path / "rec"
    ws.mkdir(parents=True)
    s = Store(ws / ".checkpoints", ws)
    s.create()
    return s.repo


# -- Claude Code ---------------------------------------------------------------------------------

def _texts(content) -> list[str]:
    if isinstance(content, str):
        return [content]
    return [b.get("text", "") for b in content or [] if isinstance(b, dict) and b.get("type") == "text"]


def claude_script(body: dict) -> tuple[str, list[dict]]:
    """The fake model's answer (message id, content blocks) to one Messages request."""
    msgs = body.get("messages") or []
    first = " ".join(_texts(msgs[0]["content"])) if msgs else ""
    answered = {b.get("tool_use_id") for m in msgs if isinstance(m["content"], list)
                for b in m["content"] if isinstance(b, dict) and b.get("type") == "tool_result"}
    prompts = [t for m in msgs if m["role"] == "user" for t in _texts(m["content"]) if "PROMPT-" in t]
    last = prompts[-1] if prompts else ""
    bash = lambda i, cmd: {"type": "tool_use", "id": i, "name": "Bash",  # noqa: E731
                           "input": {"command": cmd, "description": "say where we are"}}
    for tag in ("a", "b"):
        if f"SUBTASK-{tag.upper()}" in first:  # a subagent's own conversation
            if f"toolu_sub{tag}" not in answered:
                return f"msg_sub{tag}1", [bash(f"toolu_sub{tag}", f"echo subagent-{tag}")]
            return f"msg_sub{tag}2", [{"type": "text", "text": f"subagent {tag} finished"}]
    if "PROMPT-TWO" in last:
        return "msg_two", [{"type": "text", "text": "second prompt answered"}]
    if "PROMPT-THREE" in last:
        return "msg_three", [{"type": "text", "text": "third prompt answered"}]
    if "PROMPT-ONE" in last:
        if "toolu_m1" not in answered:
            return "msg_m1", [{"type": "text", "text": "I will run a command."}, bash("toolu_m1", "echo main-one")]
        if "toolu_t1" not in answered:
            return "msg_m2", [{"type": "tool_use", "id": f"toolu_t{n}", "name": "Agent",
                               "input": {"description": f"sub {tag}", "prompt": f"SUBTASK-{tag.upper()} do it",
                                         "subagent_type": "general-purpose"}}
                              for n, tag in ((1, "a"), (2, "b"))]
        return "msg_m3", [{"type": "text", "text": "all done"}]
    return "msg_other", [{"type": "text", "text": "ok"}]  # Claude Code's own side requests


class _ScriptedMessages(FakeMessages):
    requests: list[dict] = []

    def answer(self, body: dict) -> tuple[str, list[dict]]:
        return claude_script(body)


def claude_writes(claude: Path, root: Path) -> tuple[Path, list[dict]]:
    """Claude Code writes the session (three `claude -p` runs); its file and the requests."""
    from test_claude_resume import FAKE_KEY as KEY

    home, proj = root / "home", root / "proj"
    home.mkdir(parents=True)
    proj.mkdir()
    sid = "c1a0de00-0000-4000-8000-00000000c0de"
    _ScriptedMessages.requests = []
    with local_http(_ScriptedMessages) as port:
        env = clean_env(HOME=home, CLAUDE_CONFIG_DIR=home / ".claude", ANTHROPIC_BASE_URL=f"http://127.0.0.1:{port}",
                        ANTHROPIC_API_KEY=KEY, DISABLE_TELEMETRY="1", DISABLE_AUTOUPDATER="1",
                        CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1", NO_COLOR="1")
        for k in ("ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN", "ANTHROPIC_MODEL", "CLAUDE_CODE_USE_BEDROCK",
                  "CLAUDE_CODE_USE_VERTEX"):
            env.pop(k, None)

        def run(*args: str) -> None:
            r = subprocess.run([str(claude), "-p", *args], capture_output=True, text=True, env=env, cwd=proj,
                               timeout=120, stdin=subprocess.DEVNULL)
            assert r.returncode == 0, (args, r.stdout[-2000:], r.stderr[-2000:])

        run("--session-id", sid, "--allowedTools", "Bash", "Agent", "--", "PROMPT-ONE run it")
        run("--resume", sid, "--", "PROMPT-TWO go on")
        path = next(home.rglob(f"{sid}.jsonl"))
        at = next(e["uuid"] for e in _lines(path) if (e.get("message") or {}).get("id") == "msg_m3")
        run("--resume", sid, "--resume-session-at", at, "--", "PROMPT-THREE instead")
        run("--resume", sid, "--fork-session", "--", "PROMPT-TWO forked")  # a new session, its own file
    return path, _ScriptedMessages.message_bodies()


@pytest.fixture(scope="module")
def claude():
    from test_plugin import _claude_cli

    return _claude_cli()


@pytest.fixture(scope="module")
def claude_session(claude, tmp_path_factory):
    return claude_writes(claude, tmp_path_factory.mktemp("claude-written"))


def test_claude_code_writes_subagents_and_a_rewind(claude_session, tmp_path):
    path, requests = claude_session
    raw = _lines(path)
    # the shapes are really in what Claude Code wrote
    subs = sorted((path.with_suffix("") / "subagents").glob("agent-*.jsonl"))
    metas = {json.loads(f.with_suffix(".meta.json").read_text())["toolUseId"] for f in subs}
    assert len(subs) == 2 and metas == {"toolu_t1", "toolu_t2"}, subs
    assert all(e.get("isSidechain") and e.get("agentId") == f.stem[len("agent-"):] for f in subs
               for e in _lines(f) if e.get("type") in ("user", "assistant"))
    expected = claude_counts(path)
    assert expected["rewinds"] == 1 and expected["counts"]["user"] == 5 and expected["pairs"] == 5, expected
    under = [e for e in raw if e.get("type") == "user" and "PROMPT-T" in json.dumps(e.get("message"))]
    assert len(under) == 2 and under[0]["parentUuid"] == under[1]["parentUuid"], "not a rewind in one file"
    # and Claude Code did cut its context there: the third prompt's request lacks the second
    third = next(r for r in requests if "PROMPT-THREE" in json.dumps(r["messages"]))
    assert "PROMPT-TWO" not in json.dumps(third["messages"])

    repo = _repo(tmp_path)
    _check(repo, path, expected, tmp_path)
    res = T.record(repo, T.read_transcript(path))  # again: content addressing, nothing new
    assert res.new_commits == 0
    forks = [b for b in res.branches if b.startswith("fork-")]
    assert sorted(res.branches) == sorted(["main", *forks, *(f"agent-{f.stem[6:]}" for f in subs)])
    main = T.replay(repo, res.branches["main"])
    fork = T.replay(repo, res.branches[forks[0]])
    assert main[-2]["text"] == "PROMPT-THREE instead" and main[-1]["text"] == "third prompt answered"
    assert fork[-2]["text"] == "PROMPT-TWO go on" and fork[-1]["text"] == "second prompt answered"
    assert [r["kind"] for r in main[:-2]] == [r["kind"] for r in fork[:-2]]


def test_claude_code_fork_session_shares_the_recorded_commits(claude_session, tmp_path):
    """`claude --resume <id> --fork-session` copies the conversation into a new session's file:
    recorded, it is its own session whose chain up to the copy point is the very commits of the
    original's (events hash what the source said, never a session id or line number)."""
    path, _ = claude_session
    forked = [f for f in path.parent.glob("*.jsonl") if f != path]
    assert len(forked) == 1
    lines = _lines(forked[0])
    assert {e.get("sessionId") for e in lines if e.get("type") == "user"} == {forked[0].stem}
    repo = _repo(tmp_path)
    a = T.record(repo, T.read_transcript(path))
    b = T.record(repo, T.read_transcript(forked[0]))

    def chain(tip: str) -> list[str]:
        return first_parent_chain(repo, tip)
    assert a.session != b.session and sorted(b.branches) == ["main"]
    ours, theirs = chain(a.branches["main"]), chain(b.branches["main"])
    assert theirs[:len(ours)] == ours and len(theirs) == len(ours) + 2
    assert b.new_commits == 2


# -- Codex ---------------------------------------------------------------------------------------

def codex_script(body: dict) -> list[dict]:
    """The fake Responses model's output items for one request."""
    inp = body.get("input") or []
    outs = {i.get("call_id"): i.get("output") for i in inp if str(i.get("type", "")).endswith("_output")}
    texts = [c.get("text", "") for i in inp if i.get("type") == "message" and i.get("role") == "user"
             for c in i.get("content") or []]
    last = next((t for t in reversed(texts) if "PROMPT-" in t), "")
    say = lambda text: [{"type": "message", "role": "assistant",  # noqa: E731
                         "content": [{"type": "output_text", "text": text}]}]
    if any("SUBTASK-A" in t for t in texts):  # a spawned Codex agent's own conversation
        return say("subagent a finished")
    if "PROMPT-SPAWN" in last:  # the newest Codex's multi-agent tools (namespace multi_agent_v1)
        call = lambda cid, name, args: [{"type": "function_call", "call_id": cid, "name": name,  # noqa: E731
                                         "namespace": "multi_agent_v1", "arguments": json.dumps(args)}]
        if "call_sp1" not in outs:
            return call("call_sp1", "spawn_agent", {"message": "SUBTASK-A do it"})
        if "call_w1" not in outs:
            return call("call_w1", "wait_agent", {"targets": [json.loads(outs["call_sp1"])["agent_id"]],
                                                  "timeout_ms": 10000})
        return say("spawned and done")
    if "PROMPT-ONE" in last:
        if "call_ls1" not in outs:
            return [{"type": "local_shell_call", "id": "lsh_1", "call_id": "call_ls1", "status": "completed",
                     "action": {"type": "exec", "command": ["bash", "-lc", "echo from-local-shell"],
                                "timeout_ms": 10000, "working_directory": None, "env": None, "user": None}}]
        return say("local shell done")
    if "PROMPT-TWO" in last:
        return say("second answered")
    if "PROMPT-THREE" in last:
        return say("third answered")
    return say("ok")


class _ScriptedResponses(FakeResponses):
    requests: list[dict] = []

    def items(self, body: dict) -> list[dict]:
        return codex_script(body)


def _codex_env(home: Path) -> dict:
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "CODEX_HOME": str(home),
            "TC_FAKE_KEY": "not-a-key", "NO_COLOR": "1"}


def _provider(port: int, model: str) -> list[str]:
    out = ["-c", "model_provider=local", "-c", f"model={model}"]
    for k, v in (("name", "local"), ("base_url", f"http://127.0.0.1:{port}/v1"), ("env_key", "TC_FAKE_KEY"),
                 ("wire_api", "responses")):
        out += ["-c", f'model_providers.local.{k}="{v}"']
    return out


class AppServer:
    """Codex's app-server over stdio: JSON-RPC requests, one JSON object a line."""

    def __init__(self, cmd: list[str], env: dict, cwd: Path, log: Path):
        self.p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log.open("w"),
                                  env=env, cwd=cwd, text=True)
        self.q: queue.Queue = queue.Queue()
        self.n = 0
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.p.stdout is not None
        for line in self.p.stdout:
            self.q.put(json.loads(line))

    def send(self, obj: dict) -> None:
        assert self.p.stdin is not None
        self.p.stdin.write(json.dumps(obj) + "\n")
        self.p.stdin.flush()

    def call(self, method: str, params: dict) -> dict:
        self.n += 1
        self.send({"jsonrpc": "2.0", "id": self.n, "method": method, "params": params})
        m = self.until(lambda m: m.get("id") == self.n and ("result" in m or "error" in m))
        assert "result" in m, (method, m)
        return m["result"]

    def until(self, pred, timeout: float = 60) -> dict:
        while True:
            m = self.q.get(timeout=timeout)
            if pred(m):
                return m

    def turn(self, thread: str, prompt: str) -> None:
        self.call("turn/start", {"threadId": thread, "input": [{"type": "text", "text": prompt}]})
        done = self.until(lambda m: m.get("method") == "turn/completed")
        assert done["params"]["turn"]["status"] == "completed", done

    def close(self) -> None:
        assert self.p.stdin is not None
        self.p.stdin.close()
        try:
            self.p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()


CODEX_PINNED = "0.80.0"


@pytest.fixture(scope="module")
def codex_pinned():
    return npm_cli("TC_CODEX_080_CLI", f"codex-{CODEX_PINNED}", f"@openai/codex@{CODEX_PINNED}", "codex",
                   "the Codex that runs local_shell_call and has thread/rollback")


def codex_rolls_back(codex: Path, root: Path) -> tuple[Path, list[dict]]:
    home, proj = root / "home", root / "proj"
    home.mkdir(parents=True)
    proj.mkdir()
    _ScriptedResponses.requests = []
    with local_http(_ScriptedResponses) as port:
        srv = AppServer([str(codex), "app-server", *_provider(port, "codex-mini-latest")], _codex_env(home), proj,
                        root / "app-server.log")
        try:
            srv.call("initialize", {"clientInfo": {"name": "tc-git-test", "version": "0"}})
            srv.send({"jsonrpc": "2.0", "method": "initialized"})
            thread = srv.call("thread/start", {"cwd": str(proj), "approvalPolicy": "never",
                                               "sandbox": "danger-full-access"})["thread"]
            srv.turn(thread["id"], "PROMPT-ONE run the shell")
            srv.turn(thread["id"], "PROMPT-TWO go on")
            srv.call("thread/rollback", {"threadId": thread["id"], "numTurns": 1})
            srv.turn(thread["id"], "PROMPT-THREE instead")
        finally:
            srv.close()
    return Path(thread["path"]), _ScriptedResponses.bodies()


def test_codex_writes_local_shell_call_and_rollback(codex_pinned, tmp_path):
    path, requests = codex_rolls_back(codex_pinned, tmp_path / "codex")
    raw = [e for e in _lines(path) if isinstance(e.get("payload"), dict)]
    items = [e["payload"] for e in raw if e["type"] == "response_item"]
    shell = [i for i in items if i["type"] == "local_shell_call"]
    assert len(shell) == 1 and shell[0]["action"]["command"][-1] == "echo from-local-shell"
    out = [i for i in items if i.get("call_id") == "call_ls1" and i["type"] == "function_call_output"]
    assert len(out) == 1 and "from-local-shell" in out[0]["output"]  # Codex ran it
    assert [e["payload"] for e in raw if e["payload"].get("type") == "thread_rolled_back"] == [
        {"type": "thread_rolled_back", "num_turns": 1}]
    # after the rollback Codex sent the model no trace of the dropped turn
    assert "PROMPT-TWO" not in json.dumps(requests[-1]["input"]) and "PROMPT-THREE" in json.dumps(requests[-1]["input"])

    expected = codex_counts(path)
    assert expected["rewinds"] == 1 and expected["pairs"] == 1 and expected["counts"]["user"] == 3, expected
    repo = _repo(tmp_path)
    _check(repo, path, expected, tmp_path)
    res = T.record(repo, T.read_transcript(path))
    forks = [b for b in res.branches if b.startswith("fork-")]
    assert len(forks) == 1 and sorted(res.branches) == sorted(["main", *forks])
    main = T.replay(repo, res.branches["main"])
    fork = T.replay(repo, res.branches[forks[0]])
    assert [r.get("text") for r in main if r["kind"] == "user"] == ["PROMPT-ONE run the shell", "PROMPT-THREE instead"]
    assert [r.get("text") for r in fork if r["kind"] == "user"] == ["PROMPT-ONE run the shell", "PROMPT-TWO go on"]
    call = next(r for r in main if r["kind"] == "tool_call")
    result = next(r for r in main if r["kind"] == "tool_result")
    assert call["call_id"] == result["call_id"] == "call_ls1" and "from-local-shell" in json.dumps(result)


def test_newest_codex_records_a_local_shell_call_it_does_not_run(tmp_path):
    """The newest Codex writes the model's `local_shell_call` and ends the turn without running it:
    one call, no result, and its current rollout format (prompts without `event_msg`)."""
    from test_codex_resume import _codex_cli

    codex = _codex_cli()
    home, proj = tmp_path / "home", tmp_path / "proj"
    home.mkdir()
    proj.mkdir()
    _ScriptedResponses.requests = []
    with local_http(_ScriptedResponses) as port:
        r = subprocess.run([str(codex), "exec", "--skip-git-repo-check", *_provider(port, "gpt-5"),
                            "PROMPT-ONE run the shell"], capture_output=True, text=True, env=_codex_env(home),
                           cwd=proj, timeout=120, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stderr[-2000:]
    path = next(home.rglob("rollout-*.jsonl"))
    expected = codex_counts(path)
    assert expected["counts"]["tool_call"] == 1 and expected["counts"]["tool_result"] == 0, expected
    assert expected["prompts"] == ["PROMPT-ONE run the shell"]
    repo = _repo(tmp_path)
    _check(repo, path, expected, tmp_path)
    res = T.record(repo, T.read_transcript(path))
    kinds = [r["kind"] for r in T.replay(repo, res.branches["main"])]
    assert kinds.count("user") == 1 and kinds[-1] == "tool_call", kinds


def test_claude_code_resumes_the_recorded_session_as_it_first_sent_it(claude, claude_session, tmp_path, monkeypatch):
    """Round trip through the client's own words: the main branch we recorded from Claude Code's
    file, up to the rewind point, written back by `write_session` and resumed by Claude Code
    with the third prompt, is sent to the model as Claude Code itself sent it the first time,
    block by block (tool results with their content: the Agent results as their lists of text
    blocks). Only Claude Code's own context (system-role listings, system reminders) is left out."""
    import test_claude_resume as CR

    from tc_git.trajectory.sessionfile import write_session

    def said(body: dict) -> list[tuple]:
        return [it for m in body["messages"] for it in CR._blocks(m["role"], m["content"]) if it[0] != "system"]

    path, requests = claude_session
    before = said(next(r for r in requests if "PROMPT-THREE" in json.dumps(r["messages"])))
    assert [it for it in before if it[0] == "tool_result" and len(it[2]) > 1], "no result of several blocks"
    assert before[-1] == ("user", "PROMPT-THREE instead")
    repo = _repo(tmp_path)
    res = T.record(repo, T.read_transcript(path))
    home, proj = tmp_path / "home", tmp_path / "proj"
    home.mkdir()
    proj.mkdir()
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(home / ".claude"))
    records = T.replay(repo, res.branches["main"], image_data=True)[:-2]  # up to the rewind point
    assert records[-1]["text"] == "all done"
    got = write_session(records, "claude", str(proj.resolve()))
    monkeypatch.setattr(CR, "PROMPT", "PROMPT-THREE instead")
    _ScriptedMessages.requests = []
    with local_http(_ScriptedMessages) as port:
        out = CR._resume(claude, home, proj, port, got["session_id"])
    assert "third prompt answered" in out, out[-2000:]
    assert CR._results_sorted(said(_ScriptedMessages.message_bodies()[-1])) == CR._results_sorted(before)


def test_newest_codex_spawns_a_subagent_and_resumes_its_calls(tmp_path, monkeypatch):
    """The newest Codex's own multi-agent tools: `spawn_agent` and `wait_agent` (namespace
    `multi_agent_v1`) in the parent's rollout, the agent's own rollout (`parent_thread_id`), and
    a `<subagent_notification>` Codex adds as a user message (context, not a prompt). Both
    rollouts are judged by the counts; the parent, recorded and written back, is resumed by
    Codex with its calls as Codex first sent them (the namespace kept)."""
    import test_codex_resume as CR

    from tc_git.trajectory.sessionfile import write_session

    codex = CR._codex_cli()
    home, proj = tmp_path / "home", tmp_path / "proj"
    home.mkdir()
    proj.mkdir()
    _ScriptedResponses.requests = []
    with local_http(_ScriptedResponses) as port:
        r = subprocess.run([str(codex), "exec", "--skip-git-repo-check", *_provider(port, "gpt-5"), "PROMPT-SPAWN go"],
                           capture_output=True, text=True, env=_codex_env(home), cwd=proj, timeout=120,
                           stdin=subprocess.DEVNULL)
    assert r.returncode == 0 and "spawned and done" in r.stdout, r.stderr[-2000:]
    first = [q for q in _ScriptedResponses.bodies() if "PROMPT-SPAWN" in json.dumps(q["input"])][-1]
    rollouts = {}
    for f in home.rglob("rollout-*.jsonl"):
        meta = _lines(f)[0]["payload"]
        rollouts["agent" if meta.get("parent_thread_id") else "parent"] = (f, meta)
    (parent, pmeta), (agent, ameta) = rollouts["parent"], rollouts["agent"]
    assert ameta["parent_thread_id"] == pmeta["id"]
    items = [e["payload"] for e in _lines(parent) if e.get("type") == "response_item"]
    calls = [i for i in items if i["type"] == "function_call"]
    assert [(c["namespace"], c["name"]) for c in calls] == [("multi_agent_v1", "spawn_agent"),
                                                           ("multi_agent_v1", "wait_agent")]
    assert any("<subagent_notification>" in json.dumps(i) for i in items if i.get("role") == "user")
    for f, prompts in ((parent, 2), (agent, 1)):  # the parent holds its agent, on the spawn call
        expected = codex_counts(f)
        assert expected["counts"]["user"] == prompts, (f, expected)
        _check(_repo(tmp_path / f.stem), f, expected, tmp_path)
    assert codex_counts(parent)["agents"] == {ameta["id"]: "call_sp1"}

    repo = _repo(tmp_path)
    res = T.record(repo, T.read_transcript(parent))
    back = tmp_path / "back"
    back.mkdir()
    monkeypatch.setenv("CODEX_HOME", str(back))
    write_session(T.replay(repo, res.branches["main"]), "codex", str(proj), session_id=CR.SID)
    _ScriptedResponses.requests = []
    with local_http(_ScriptedResponses) as port:
        r = CR._resume(codex, back, proj, port, "PROMPT-SPAWN again")
    assert r.returncode == 0, r.stderr[-2000:]
    again = _ScriptedResponses.bodies()[-1]["input"]
    tools = lambda inp: [CR._norm(i) for i in inp if str(i.get("type")).startswith("function_call")]  # noqa: E731
    assert tools(again) == tools(first["input"]) and len(tools(again)) == 4


def test_newest_codex_revert_writes_a_segment_that_continues_its_base(tmp_path):
    """The newest Codex has no `thread/rollback`; its app-server's `thread/revert` drops turns by
    writing the thread on in a new rollout, `rollout-<time>-<thread>_<segment>.jsonl`, whose
    `session_meta.history_base` names the line of the first file it follows (`ordinal` < end).
    Read alone the segment was two events with no past, and recording it moved the session's
    `main` off the first file's chain. Now the segment reads as the whole thread (the dropped
    turn a fork), and in either recording order both chains stay referenced."""
    from test_codex_resume import _codex_cli

    home, proj = tmp_path / "home", tmp_path / "proj"
    home.mkdir()
    proj.mkdir()
    _ScriptedResponses.requests = []
    with local_http(_ScriptedResponses) as port:
        srv = AppServer([str(_codex_cli()), "app-server", *_provider(port, "gpt-5")], _codex_env(home), proj,
                        tmp_path / "app-server.log")
        try:
            srv.call("initialize", {"clientInfo": {"name": "tc-git-test", "version": "0"}})
            srv.send({"jsonrpc": "2.0", "method": "initialized"})
            thread = srv.call("thread/start", {"cwd": str(proj), "approvalPolicy": "never",
                                               "sandbox": "danger-full-access"})["thread"]
            turns = []
            for prompt in ("PROMPT-TWO first", "PROMPT-THREE dropped"):
                turns.append(srv.call("turn/start", {"threadId": thread["id"],
                                                     "input": [{"type": "text", "text": prompt}]})["turn"]["id"])
                srv.until(lambda m: m.get("method") == "turn/completed")
            srv.call("thread/revert", {"threadId": thread["id"], "beforeTurnId": turns[1]})
            srv.turn(thread["id"], "PROMPT-TWO instead")
        finally:
            srv.close()
    assert "PROMPT-THREE" not in json.dumps(_ScriptedResponses.bodies()[-1]["input"])  # Codex dropped it
    files = sorted(home.rglob("rollout-*.jsonl"))
    assert len(files) == 2 and files[1].name.endswith(".jsonl") and "_" in files[1].name.rsplit(thread["id"], 1)[1]
    base, segment = files
    hb = _lines(segment)[0]["payload"]["history_base"]
    assert hb["thread_id"] == thread["id"]

    def prompts(lines):
        return [c["text"] for e in lines if e.get("type") == "response_item" and e["payload"].get("role") == "user"
                for c in e["payload"]["content"] if c.get("text", "").startswith("PROMPT-")]
    raw = _lines(base)
    kept = prompts([e for e in raw if e.get("ordinal", 0) < hb["end_ordinal_exclusive"]])
    dropped = prompts([e for e in raw if e.get("ordinal", 0) >= hb["end_ordinal_exclusive"]])
    added = prompts(_lines(segment))
    assert (kept, dropped, added) == (["PROMPT-TWO first"], ["PROMPT-THREE dropped"], ["PROMPT-TWO instead"])

    for n, order in enumerate(([base, segment], [segment, base])):
        repo = _repo(tmp_path / f"order{n}")
        for f in order:
            T.record(repo, T.read_transcript(f))
        chains = sorted([r.get("text") for r in T.replay(repo, str(ref.target)) if r["kind"] == "user"]
                        for name, ref in ((r, repo.references[r]) for r in repo.references)
                        if name.startswith(T.SESSIONS_PREFIX))
        assert chains == sorted([kept + added, kept + dropped]), chains
        fsck(repo.path)
    res = T.record(_repo(tmp_path / "alone"), T.read_transcript(segment))
    assert len(res.branches) == 2 and "main" in res.branches


def test_newest_codex_review_keeps_the_prompt_only_in_events(tmp_path):
    """`codex review <instructions>` (0.171): the parent's rollout holds what the user typed only
    as `event_msg` items (`item_completed` of a `UserMessage`, and `EnteredReviewMode`); its one
    user `response_item` is Codex's `<user_action>` wrapper around the review's output. This is
    the shape issue 12 calls "prompts only as events" as the newest Codex writes it (no version
    tried writes a prompt only as `event_msg`/`user_message`). The prompt is recorded, the
    wrapper is context; the review thread's own rollout is judged too."""
    from test_codex_resume import _codex_cli

    home, proj = tmp_path / "home", tmp_path / "proj"
    home.mkdir()
    proj.mkdir()
    subprocess.run(["git", "init", "-q", str(proj)], check=True, env=clean_env())
    _ScriptedResponses.requests = []
    with local_http(_ScriptedResponses) as port:
        r = subprocess.run([str(_codex_cli()), "review", *_provider(port, "gpt-5"), "PROMPT-TWO review this"],
                           capture_output=True, text=True, env=_codex_env(home), cwd=proj, timeout=120,
                           stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stderr[-2000:]
    files = {("review" if _lines(f)[0]["payload"].get("parent_thread_id") else "parent"): f
             for f in home.rglob("rollout-*.jsonl")}
    parent = _lines(files["parent"])
    items = [e["payload"] for e in parent if e.get("type") == "response_item"]
    assert not [i for i in items if i.get("role") == "user" and "PROMPT-TWO" in json.dumps(i)]
    assert not [e for e in parent if (e.get("payload") or {}).get("type") == "user_message"]
    assert [i for i in items if i.get("role") == "user" and "<user_action>" in json.dumps(i)]
    for name, f in files.items():
        expected = codex_counts(f)
        assert expected["prompts"] == ["PROMPT-TWO review this"], (name, expected)
        _check(_repo(tmp_path / name), f, expected, tmp_path)
