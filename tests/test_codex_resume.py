"""The real Codex CLI resumes the rollouts `tc resume-session --client codex` writes, offline.

`codex exec resume <id> <prompt>` (npm `@openai/codex`, cached under ~/.cache/tc-git-test/codex)
reads the rollout from CODEX_HOME, rebuilds the conversation and sends it to the model. The
model provider here is a local HTTP server in this process that answers like the Responses API
and keeps each request, so nothing leaves the machine and no credentials are involved. The judge
is what Codex itself sends: the `input` of its request must hold, in order, exactly the items our
file holds for the model (a `compacted` line's `replacement_history` replacing what came before,
as Codex does), followed by Codex's own context and the new prompt. Written and passing with
codex-cli 0.171.0 (the newest on npm when this was written; the install is not pinned, like
test_plugin's Claude Code, so a format change upstream shows up here).
"""
from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest
from conftest import TRANSCRIPTS, FakeResponses, local_http, npm_cli

from tc_git import trajectory as T
from tc_git.storage.store import Store
from tc_git.trajectory.sessionfile import write_session

PACKAGE = "@openai/codex"
SID = "7c0dec0d-0000-4000-8000-00000000c0de"


def _codex_cli() -> Path:
    return npm_cli("TC_CODEX_CLI", "codex", PACKAGE, "codex", "the Codex CLI that judges the written rollouts")


class _FakeResponses(FakeResponses):
    """Keeps every request and answers each with one assistant message."""

    requests: list[dict] = []


@pytest.fixture(scope="module")
def codex():
    return _codex_cli()


@pytest.fixture
def fake_api():
    _FakeResponses.requests = []
    with local_http(_FakeResponses) as port:
        yield port, _FakeResponses.requests


def _record(tmp_path: Path, name: str):
    s = Store(tmp_path / "rec" / ".checkpoints", tmp_path / "rec")
    (tmp_path / "rec").mkdir()
    s.create()
    res = T.record(s.repo, T.read_transcript(TRANSCRIPTS / name))
    return s.repo, res


# Fields a rollout may hold that Codex does not send to the model.
LOCAL_FIELDS = ("id", "internal_chat_message_metadata_passthrough", "success")
CALLS = {"function_call": "function_call_output", "custom_tool_call": "custom_tool_call_output"}


def _norm(item: dict) -> dict:
    out = {k: v for k, v in item.items() if k not in LOCAL_FIELDS}
    if isinstance(out.get("content"), list):  # Codex re-encodes (resizes) a pasted image before sending it:
        out["content"] = [dict(c, image_url=c["image_url"].split(",", 1)[0])  # compare its media type
                          if c.get("type") == "input_image" and str(c.get("image_url", "")).startswith("data:") else c
                          for c in out["content"]]
    return out


def _model_items(rollout: Path) -> list[dict]:
    """What the file gives the model, replayed the way Codex rebuilds history on resume: a
    `compacted` line's replacement history replaces what came before, ghost snapshots are not
    sent, and a call left without its output (a point between a call and its result) gets the
    output "aborted" right after it."""
    hist: list[dict] = []
    for raw in rollout.read_text().splitlines():
        line = json.loads(raw)
        if line["type"] == "response_item":
            hist.append(line["payload"])
        elif line["type"] == "compacted" and line["payload"].get("replacement_history") is not None:
            hist = list(line["payload"]["replacement_history"])
    hist = [_norm(h) for h in hist if h.get("type") != "ghost_snapshot"]
    answered = {h.get("call_id") for h in hist if h.get("type") in CALLS.values()}
    out = []
    for h in hist:
        out.append(h)
        if h.get("type") in CALLS and h.get("call_id") not in answered:
            out.append({"type": CALLS[h["type"]], "call_id": h["call_id"], "output": "aborted"})
    return out


def _resume(codex: Path, home: Path, proj: Path, port: int, prompt: str) -> subprocess.CompletedProcess:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "CODEX_HOME": str(home),
           "TC_FAKE_KEY": "not-a-key", "NO_COLOR": "1"}
    provider = [f'model_providers.local.{k}="{v}"' for k, v in (
        ("name", "local"), ("base_url", f"http://127.0.0.1:{port}/v1"), ("env_key", "TC_FAKE_KEY"),
        ("wire_api", "responses"))]
    cmd = [str(codex), "exec", "--skip-git-repo-check", "-c", "model_provider=local", "-c", "model=gpt-5"]
    for p in provider:
        cmd += ["-c", p]
    return subprocess.run(cmd + ["resume", SID, prompt], capture_output=True, text=True, env=env, cwd=proj,
                          timeout=180, stdin=subprocess.DEVNULL)


# cut: the share of the branch written, or "compaction": up to the last compaction (the
# kitchen-sink file reuses one placeholder call id for unrelated calls after it)
@pytest.mark.parametrize("name,cut", [("codex-daaain-1.jsonl", 1.0), ("codex-daaain-2.jsonl", 1.0),
                                      ("codex-localpush-1.jsonl", 0.5), ("codex-localpush-1.jsonl", 1.0),
                                      ("codex-agentsessions-1.jsonl", "compaction"),
                                      ("codex-localpush-2.jsonl", 1.0), ("codex-localpush-3.jsonl", "compaction"),
                                      ("claude-drmaciver-1.jsonl", 1.0), ("claude-fasthooks-1.jsonl", 1.0),
                                      ("claude-entire-3.jsonl", 1.0),
                                      ("codex-written-1.jsonl", 1.0)])  # local_shell_call, after a rollback
def test_codex_resumes_the_written_rollout(codex, fake_api, tmp_path, name, cut):
    port, requests = fake_api
    repo, res = _record(tmp_path, name)
    records = T.replay(repo, res.branches["main"], image_data=True)
    if cut == "compaction":
        records = records[: 1 + max(i for i, r in enumerate(records) if (r.get("meta") or {}).get("compacted"))]
    else:
        records = records[: max(1, int(len(records) * cut))]
    home, proj = tmp_path / "codex-home", tmp_path / "proj"
    home.mkdir()
    proj.mkdir()
    old = os.environ.get("CODEX_HOME")
    os.environ["CODEX_HOME"] = str(home)
    try:
        got = write_session(records, "codex", str(proj), session_id=SID)
    finally:
        os.environ.pop("CODEX_HOME") if old is None else os.environ.__setitem__("CODEX_HOME", old)
    rollout = Path(got["path"])
    expected = _model_items(rollout)
    assert expected, "nothing for the model in the written file"

    r = _resume(codex, home, proj, port, "carry on from here")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "resumed fine" in r.stdout, r.stdout[-2000:]
    assert len(requests) == 1 and requests[0]["path"].endswith("/responses")
    sent = [_norm(x) for x in requests[0]["body"]["input"]]
    # our items, in order and whole, with only Codex's own context around them
    start = next((i for i in range(len(sent) - len(expected) + 1) if sent[i:i + len(expected)] == expected), None)
    if start is None:
        i0 = next((i for i, x in enumerate(sent) if x == expected[0]), 0)
        i = next((i for i, (a, b) in enumerate(zip(sent[i0:], expected)) if a != b), 0)
        show = {"sent": sent[i0 + i:i0 + i + 2], "ours": expected[i:i + 2]}
        text = re.sub(r"base64,([A-Za-z0-9+/=]{64})[A-Za-z0-9+/=]*", lambda m: f"base64,{m.group(1)}...", json.dumps(show, indent=1))
        raise AssertionError(f"item {i} of {len(expected)} differs ({len(sent)} sent):\n{text[:4000]}")
    assert start <= 3 and len(sent) - start - len(expected) <= 4, (start, len(sent), len(expected))
    assert requests[0]["body"]["input"][-1]["content"][0]["text"] == "carry on from here"
    # Codex appended the new turn to the same file: our lines are still its prefix
    after = rollout.read_text()
    assert after.startswith("".join(json.dumps(x, ensure_ascii=False, separators=(",", ":")) + "\n"
                                    for x in map(json.loads, after.splitlines()[: got["lines"]])))
    back = T.read_transcript(str(rollout))
    assert [e.kind for e in back.events][-1] == "assistant" and back.events[-1].text == "resumed fine"


def test_an_unreadable_rollout_is_refused_by_codex(codex, fake_api, tmp_path):
    """The control: a rollout Codex cannot use is not resumed (so the test above can fail)."""
    port, requests = fake_api
    home, proj = tmp_path / "codex-home", tmp_path / "proj"
    proj.mkdir()
    bad = home / "sessions" / "2026" / "01" / "01" / f"rollout-2026-01-01T00-00-00-{SID}.jsonl"
    bad.parent.mkdir(parents=True)
    bad.write_text('{"type":"response_item","payload":{"type":"message"}}\n')
    r = _resume(codex, home, proj, port, "carry on")
    assert r.returncode != 0 and "failed to read" in r.stderr and not requests, (r.returncode, r.stderr[-1000:])
