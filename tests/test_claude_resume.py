"""The real Claude Code CLI resumes the sessions `tc resume-session --client claude` writes, offline,
past its login check.

`claude -p --resume <id> <prompt>` (npm `@anthropic-ai/claude-code`, cached as in test_plugin)
reads the session file from CLAUDE_CONFIG_DIR, rebuilds the conversation and sends it to the
model. ANTHROPIC_BASE_URL points at a local HTTP server in this process that answers like the
Messages API (a streamed text reply) and keeps each request; the key is a fake one, so nothing
leaves the machine. The judge is what Claude Code itself sends: the `messages` of its request
must hold, block by block, exactly the conversation our file holds (after a compaction boundary
only what follows it, as Claude Code resumes from the summary), followed only by what Claude Code
adds on its own: its `<system-reminder>` context, the "Continue from where you left off." /
"No response requested." pair it puts after an interrupted turn, and the new prompt. Its own
normalisation is allowed for: consecutive user turns joined with a newline, the results of
parallel calls ordered by their calls, and the lines of one API response (one message id) as one
message ahead of the results that were written between them. A file Claude Code cannot read is the control ("No
conversation found", no request). Written and passing with Claude Code 2.1.197 (not pinned,
like test_plugin's, so a format change upstream shows up here).
"""
from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

import pytest
from conftest import TRANSCRIPTS, FakeMessages, clean_env, local_http

from tc_git import trajectory as T
from tc_git.storage.store import Store
from tc_git.trajectory.sessionfile import write_session

FAKE_KEY = "sk-ant-api03-tc-git-fake-key-for-a-local-server"
PROMPT = "continue"
# what Claude Code puts between a resumed conversation that ends mid-turn and the new prompt
ITS_OWN = {("user", "Continue from where you left off."), ("assistant", "No response requested.")}


class _FakeMessages(FakeMessages):
    """Keeps every request and answers each conversation with one text reply."""

    requests: list[dict] = []


@pytest.fixture(scope="module")
def claude():
    from test_plugin import _claude_cli

    return _claude_cli()


@pytest.fixture
def fake_api():
    _FakeMessages.requests = []
    with local_http(_FakeMessages) as port:
        yield port, _FakeMessages.requests


def _blocks(role: str, content) -> list[tuple]:
    """A message's content as comparable items: (role, text), ("tool_call", id),
    ("tool_result", id, its blocks), ("thinking", text), ("image", media type, sha1 of the data)."""
    if isinstance(content, str):
        content = [{"type": "text", "text": content}]
    out: list[tuple] = []
    for b in content or []:
        t = b.get("type")
        if t == "text":
            if not b["text"].startswith("<system-reminder>"):  # Claude Code's own context
                out.append((role, b["text"].rstrip("\n")))
        elif t == "tool_use":
            out.append(("tool_call", b["id"]))
        elif t == "tool_result":  # with its content, block by block (a lone text block is the string)
            body = b.get("content")
            body = [{"type": "text", "text": body}] if isinstance(body, str) else body or []
            shape = tuple((c.get("type"), c.get("text", c.get("tool_name", (c.get("source") or {}).get("media_type"))))
                          for c in body if isinstance(c, dict))
            out.append(("tool_result", b["tool_use_id"], shape))
        elif t in ("thinking", "redacted_thinking"):
            out.append(("thinking", b.get("thinking", ""), b.get("signature") or b.get("data") or ""))
        elif t == "image":
            src = b.get("source") or {}
            out.append(("image", src.get("media_type"), hashlib.sha1((src.get("data") or "").encode()).hexdigest()))
        else:
            out.append((t,))
    return out


def _results_sorted(items: list[tuple]) -> list[tuple]:
    """Runs of tool results in a stable order (Claude Code orders parallel results by their calls)."""
    out, run = [], []
    for it in items + [("end",)]:
        if it[0] == "tool_result":
            run.append(it)
            continue
        out += sorted(run) + [it]
        run = []
    return out[:-1]


def _written(path: Path) -> list[tuple]:
    """What our file holds for the model: user and assistant lines after the last compaction,
    as API messages. One API response is several assistant lines sharing its message id, with
    the results of calls that ran while it streamed written between them (real files do this):
    the response is one message, the results follow it."""
    msgs: list[tuple[str, str | None, list]] = []
    for raw in path.read_bytes().splitlines():
        d = json.loads(raw)
        if d.get("type") == "system" and d.get("subtype") == "compact_boundary":
            msgs = []
        elif d.get("type") in ("user", "assistant") and isinstance(d.get("message"), dict):
            role, mid = d["message"]["role"], d["message"].get("id")
            items = _blocks(role, d["message"].get("content"))
            same = [m for m in msgs[-3:] if role == "assistant" and mid and m[0] == "assistant" and m[1] == mid]
            if same:
                same[-1][2].extend(items)
            else:
                msgs.append((role, mid, items))
    return [it for _, _, items in msgs for it in items]


def _record(tmp_path: Path, name: str, branch: str):
    (tmp_path / "a").mkdir()
    st = Store(tmp_path / "a" / ".checkpoints", tmp_path / "a")
    st.create()
    res = T.record(st.repo, T.read_transcript(TRANSCRIPTS / name))
    tip = res.branches["main"] if branch == "main" else next(t for b, t in res.branches.items() if b.startswith(branch))
    return st.repo, tip


def _resume(claude, home: Path, proj: Path, port: int, sid: str) -> str:
    env = clean_env(HOME=home, CLAUDE_CONFIG_DIR=home / ".claude", ANTHROPIC_BASE_URL=f"http://127.0.0.1:{port}",
                    ANTHROPIC_API_KEY=FAKE_KEY, DISABLE_TELEMETRY="1", DISABLE_AUTOUPDATER="1",
                    CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1", NO_COLOR="1")
    for k in ("ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN", "ANTHROPIC_MODEL", "CLAUDE_CODE_USE_BEDROCK",
              "CLAUDE_CODE_USE_VERTEX"):
        env.pop(k, None)
    r = subprocess.run([str(claude), "-p", "--resume", sid, PROMPT], capture_output=True, text=True, env=env,
                       cwd=proj, timeout=180, stdin=subprocess.DEVNULL)
    return r.stdout + r.stderr


@pytest.mark.parametrize("name,branch", [
    ("claude-drmaciver-1.jsonl", "main"),   # real 2.1.14: split assistant messages, 13 tool pairs
    ("claude-fasthooks-1.jsonl", "main"),   # real: thinking, parallel calls, a /compact: resumes from the summary
    ("claude-ccviewer-1.jsonl", "main"),    # real 1.0.108: two parallel Task calls, slash-command lines
    ("claude-daaain-1.jsonl", "fork"),      # a rewind: the abandoned branch written alone
    ("claude-daaain-4.jsonl", "main"),      # compaction whose logical parent is not in the file
    ("claude-entire-1.jsonl", "main"),      # real 2.1.22: 4 parallel calls, progress lines as parents
    ("claude-entire-2.jsonl", "main"),      # real 2.1.17: /exit then --resume in one file
    ("claude-entire-3.jsonl", "main"),      # real 2.1.29: a pasted PNG
    ("claude-entire-4.jsonl", "main"),      # real 2.1.37: compaction whose logical parent is not in the file
    ("codex-daaain-1.jsonl", "main"),       # a Codex rollout continued in Claude Code: reasoning, apply_patch
    ("codex-daaain-2.jsonl", "main"),       # a Codex turn that ends on a tool result (interrupted)
])
def test_claude_code_sends_exactly_the_written_conversation(claude, fake_api, tmp_path, monkeypatch, name, branch):
    port, requests = fake_api
    home, proj = tmp_path / "home", tmp_path / "proj"
    home.mkdir()
    proj.mkdir()
    repo, tip = _record(tmp_path, name, branch)
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(home / ".claude"))
    got = write_session(T.replay(repo, tip, image_data=True), "claude", str(proj.resolve()))
    ours = _written(Path(got["path"]))  # before Claude Code appends its turn to the file
    assert ours, name

    out = _resume(claude, home, proj, port, got["session_id"])
    assert "resumed fine" in out, out[-2000:]
    calls = [r for r in requests if r["path"].startswith("/v1/messages") and "count_tokens" not in r["path"]]
    assert calls and all(r["key"] == FAKE_KEY for r in calls), requests
    sent = [it for m in calls[-1]["body"]["messages"] for it in _blocks(m["role"], m["content"])]
    head, tail = sent[:len(ours)], sent[len(ours):]
    assert _results_sorted(head) == _results_sorted(ours), (
        next(i for i, (a, b) in enumerate(zip(_results_sorted(head) + [None] * len(ours), _results_sorted(ours)))
             if a != b))
    assert ("user", PROMPT) in tail, tail[:5]
    assert set(tail[:tail.index(("user", PROMPT))]) <= ITS_OWN, tail[:5]
    # thinking goes back with the signature the model gave it, or the real API refuses it
    if name.startswith("claude-"):
        signed = {b.get("thinking"): b.get("signature") for raw in (TRANSCRIPTS / name).read_bytes().splitlines()
                  for b in (json.loads(raw).get("message") or {}).get("content") or []
                  if isinstance(b, dict) and b.get("type") == "thinking"}
        for it in (it for it in head if it[0] == "thinking"):
            assert it[2] and it[2] == signed.get(it[1]), it[1][:80]


def test_a_file_claude_code_cannot_read_sends_nothing(claude, fake_api, tmp_path):
    """The control: a line without content is no conversation; Claude Code says so, asks nothing."""
    port, requests = fake_api
    home, proj = tmp_path / "home", tmp_path / "proj"
    proj.mkdir()
    sid = "00000000-0000-4000-8000-0000000000ba"
    slug = "".join(ch if ch.isalnum() else "-" for ch in str(proj.resolve()))
    bad = home / ".claude" / "projects" / slug / f"{sid}.jsonl"
    bad.parent.mkdir(parents=True)
    bad.write_text('{"type":"user","uuid":"x","parentUuid":null,"message":{"role":"user"}}\n')
    out = _resume(claude, home, proj, port, sid)
    assert "No conversation found" in out, out[-2000:]
    assert not [r for r in requests if r["path"].startswith("/v1/messages")]
