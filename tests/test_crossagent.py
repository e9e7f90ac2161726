"""Continuing a session in the other agent: what the real clients send is what the providers' APIs
take, judged by the providers' own request schemas offline (tests/api_schemas.py: the official
`anthropic` and `openai` SDK types, strictly, plus signed thinking and paired calls).

Real recorded sessions are cut at a milestone between a call and its result, written for the
other agent (`write_session`, as `tc-git resume-session` does), and resumed by the real Claude
Code / Codex CLI against a fake model endpoint on loopback (as tests/test_claude_resume.py and
tests/test_codex_resume.py do). Every request the client sends must validate; nothing after the
milestone may appear in it; the unverifiable thinking is left out with a notice; a Codex
`apply_patch` reaches Claude as an object input, a web search as text; error flags cross both ways.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from api_schemas import _validate, as_codex_sends, check_input, check_messages
from conftest import TRANSCRIPTS, local_http
from test_claude_resume import FAKE_KEY, _FakeMessages
from test_claude_resume import _resume as _claude_resume
from test_codex_resume import SID, _FakeResponses
from test_codex_resume import _resume as _codex_resume

from tc_git import trajectory as T
from tc_git.storage.store import Store
from tc_git.trajectory.sessionfile import claude_lines, codex_lines, for_client, write_session

_RECORDED: dict[str, list[dict]] = {}


def _records(tmp_path_factory, name: str) -> list[dict]:
    """The main branch of a recorded fixture, oldest first (recorded once per module)."""
    if name not in _RECORDED:
        d = tmp_path_factory.mktemp("rec")
        st = Store(d / ".checkpoints", d)
        st.create()
        res = T.record(st.repo, T.read_transcript(TRANSCRIPTS / name))
        tip = res.branches.get("main") or next(iter(res.branches.values()))  # (a subagent's file: its lane)
        _RECORDED[name] = T.replay(st.repo, tip, image_data=True)
    return _RECORDED[name]


def _cut(records: list[dict], share: float) -> int:
    """The last call before `share` of the chain whose result comes after it: a milestone
    between a call and its result (or the last event when there is no such call)."""
    answered = {r.get("call_id") for r in records if r["kind"] == "tool_result"}
    calls = [i for i, r in enumerate(records) if r["kind"] == "tool_call" and r.get("call_id") in answered
             and i < share * len(records) and not any(x["kind"] == "tool_result" and x.get("call_id") == r["call_id"]
                                                      for x in records[:i])]
    return calls[-1] if calls else len(records) - 1


def _after(records: list[dict], i: int) -> tuple[set, set]:
    """Call ids and texts (long enough to be unique) that only come after event `i`."""
    before = {r.get("call_id") for r in records[: i + 1]}
    ids = {r["call_id"] for r in records[i + 1:] if r.get("call_id") and r["call_id"] not in before}
    said = {r["text"] for r in records[: i + 1] if r.get("text")}
    texts = {r["text"] for r in records[i + 1:] if r["kind"] in ("user", "assistant") and len(r.get("text") or "") > 40
             and r["text"] not in said}
    return ids, texts


@pytest.fixture
def claude_api():
    _FakeMessages.requests = []
    with local_http(_FakeMessages) as port:
        yield port, _FakeMessages.requests


@pytest.fixture
def codex_api():
    _FakeResponses.requests = []
    with local_http(_FakeResponses) as port:
        yield port, _FakeResponses.requests


# share of the chain the milestone is cut before: after each one's compaction, with images,
# apply_patch calls, web searches and parallel calls before it
# (codex-agentsessions-1's compactions, image generation and web search: the file-level test below)
@pytest.mark.parametrize("name,share", [("codex-localpush-3.jsonl", 0.9)])
def test_a_codex_session_resumed_in_claude_code_is_what_the_messages_api_takes(
        tmp_path_factory, tmp_path, monkeypatch, claude_api, name, share):
    from test_plugin import _claude_cli

    claude = _claude_cli()
    port, requests = claude_api
    records = _records(tmp_path_factory, name)
    i = _cut(records, share)
    assert records[i]["kind"] == "tool_call", "the fixture has no call to cut after"
    part = records[: i + 1]
    home, proj = tmp_path / "home", tmp_path / "proj"
    home.mkdir()
    proj.mkdir()
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(home / ".claude"))
    got = write_session(part, "claude", str(proj.resolve()))
    thinking = sum(1 for r in part if r["kind"] == "thinking")
    assert got["notice"] and f"left out {thinking} thinking" in got["notice"], got["notice"]
    # the file itself: each line's message is API params, block by block
    lines = [json.loads(x) for x in Path(got["path"]).read_text().splitlines()]
    for n, line in enumerate(lines):
        if line.get("type") in ("user", "assistant"):
            m = line["message"]
            _validate("message", {"role": m["role"], "content": m["content"]}, f"file line {n}")
            for b in m["content"] if isinstance(m["content"], list) else []:
                _validate("block", b, f"file line {n}")
    blocks = [b for ln in lines if ln.get("type") == "assistant" for b in ln["message"]["content"]]
    assert not [b for b in blocks if b["type"] == "thinking"]
    patches = [b for b in blocks if b["type"] == "tool_use" and b["name"] == "apply_patch"]
    searches = [b for b in blocks if b["type"] == "text" and b["text"].startswith("[web search")]
    assert len(searches) == sum(1 for r in part if r.get("tool_name") == "web_search")
    assert all(set(b["input"]) == {"patch"} and isinstance(b["input"]["patch"], str) for b in patches)  # (redacted here)

    out = _claude_resume(claude, home, proj, port, got["session_id"])
    assert "resumed fine" in out, out[-2000:]
    calls = [r for r in requests if r["path"].startswith("/v1/messages") and "count_tokens" not in r["path"]]
    assert calls and all(r["key"] == FAKE_KEY for r in calls)
    for r in calls:
        check_messages(r["body"]["messages"])
    main = max(calls, key=lambda r: len(r["body"]["messages"]))["body"]["messages"]  # (not a side request)
    sent = json.dumps(main, ensure_ascii=False)
    ids, texts = _after(records, i)
    # the conversation goes up to the milestone (Claude Code leaves out a last call that has no
    # result yet; any call it sends is paired: check_messages) ...
    last = next(r for r in reversed(part[:-1]) if r["kind"] == "tool_result")
    assert f'"{last["call_id"]}"' in sent
    assert not [c for c in ids if f'"{c}"' in sent] and not [t for t in texts if json.dumps(t)[1:-1] in sent]  # ... no further
    if name == "codex-localpush-3.jsonl":
        assert len(patches) > 10 and searches  # (what this fixture is here for)
    tool_uses = {b["id"] for m in main if m["role"] == "assistant"
                 for b in m["content"] if b.get("type") == "tool_use"}
    assert tool_uses >= {b["id"] for b in patches}
    # error flags cross: a failed Codex call is a Claude tool result with is_error
    failed = {r["call_id"] for r in part if r["kind"] == "tool_result" and r.get("is_error")}
    flagged = {b["tool_use_id"] for m in main if m["role"] == "user"
               and isinstance(m["content"], list) for b in m["content"] if b.get("type") == "tool_result" and b.get("is_error")}
    assert failed <= flagged


@pytest.mark.parametrize("name,share", [("claude-fasthooks-1.jsonl", 0.9),  # thinking, parallel calls, /compact, errors
                                        ("claude-ccviewer-1.jsonl", 0.7),   # parallel Task calls, a tool error
                                        ("claude-entire-3.jsonl", 1.0)])    # a pasted PNG, thinking
def test_a_claude_session_resumed_in_codex_is_what_the_responses_api_takes(
        tmp_path_factory, tmp_path, codex_api, name, share):
    from test_codex_resume import _codex_cli

    codex = _codex_cli()
    port, requests = codex_api
    records = _records(tmp_path_factory, name)
    i = _cut(records, share)
    part = records[: i + 1]
    home, proj = tmp_path / "codex-home", tmp_path / "proj"
    home.mkdir()
    proj.mkdir()
    old = os.environ.get("CODEX_HOME")
    os.environ["CODEX_HOME"] = str(home)
    try:
        got = write_session(part, "codex", str(proj), session_id=SID)
    finally:
        os.environ.pop("CODEX_HOME") if old is None else os.environ.__setitem__("CODEX_HOME", old)
    thinking = sum(1 for r in part if r["kind"] == "thinking")
    assert (got["notice"] is None) == (thinking == 0) and (not thinking or f"left out {thinking} " in got["notice"])
    items = [json.loads(x)["payload"] for x in Path(got["path"]).read_text().splitlines()]
    items = [p for p in items if p.get("type") in ("message", "reasoning", "function_call", "function_call_output")]
    assert not [p for p in items if p["type"] == "reasoning"]
    for n, p in enumerate(items):  # (`success` is the rollout's own field: Codex does not send it)
        _validate("item", as_codex_sends({k: v for k, v in p.items() if k != "success"}), f"file item {n}")

    r = _codex_resume(codex, home, proj, port, "carry on from here")
    assert r.returncode == 0 and "resumed fine" in r.stdout, r.stdout[-2000:] + r.stderr[-2000:]
    assert requests
    for q in requests:
        check_input([as_codex_sends(x) for x in q["body"]["input"]])
    sent_items = requests[-1]["body"]["input"]
    sent = json.dumps(sent_items, ensure_ascii=False)
    ids, texts = _after(records, i)
    if records[i]["kind"] == "tool_call":
        assert f'"{records[i]["call_id"]}"' in sent
    assert not [c for c in ids if f'"{c}"' in sent] and not [t for t in texts if json.dumps(t)[1:-1] in sent]
    assert not [x for x in sent_items if x.get("type") == "reasoning"]
    # error flags cross: the output of a failed Claude call says so to the model
    failed = {r["call_id"] for r in part if r["kind"] == "tool_result" and r.get("is_error")}
    outs = {x["call_id"]: x["output"] for x in sent_items if x.get("type") == "function_call_output"}
    assert all(str(outs[c]).startswith(("Error", "<tool_use_error>")) for c in failed)
    if name == "claude-fasthooks-1.jsonl":
        assert failed and thinking
    if name == "claude-entire-3.jsonl":
        assert [c for x in sent_items for c in x.get("content") or [] if c.get("type") == "input_image"]


@pytest.mark.parametrize("target", ["claude", "codex"])
def test_every_recorded_session_written_for_the_other_agent_validates(tmp_path_factory, target):
    """Without the clients: every fixture of the other agent, whole, written for `target`, holds
    only what the target's API schema takes (Claude: each line's message; Codex: each item)."""
    names = sorted(p.name for p in TRANSCRIPTS.glob("*.jsonl") if not p.name.startswith(target))
    assert len(names) >= 8
    for name in names:
        records, notice = for_client(_records(tmp_path_factory, name), target)
        if target == "claude":
            for n, ln in enumerate(claude_lines(records, SID, "/work/demo")):
                if ln.get("type") in ("user", "assistant"):
                    m = ln["message"]
                    _validate("message", {"role": m["role"], "content": m["content"]}, f"{name} line {n}")
                    for b in m["content"] if isinstance(m["content"], list) else []:
                        _validate("block", b, f"{name} line {n}")
                        assert b["type"] != "thinking" or b["signature"], name
        else:
            items = [ln["payload"] for ln in codex_lines(records, SID, "/work/demo") if ln["type"] == "response_item"]
            assert not [p for p in items if p["type"] == "reasoning"], name
            for n, p in enumerate(items):
                _validate("item", as_codex_sends({k: v for k, v in p.items() if k != "success"}), f"{name} item {n}")


def test_keep_thinking_keeps_what_the_judge_refuses(tmp_path_factory):
    """The control for the judge, and --keep-thinking: Codex reasoning kept for Claude is thinking
    without a signature (refused), Claude thinking kept for Codex a reasoning item without the
    encrypted content and id the Responses API needs (refused); a string tool input is refused."""
    codex_side = _records(tmp_path_factory, "codex-daaain-1.jsonl")
    kept, notice = for_client(codex_side, "claude", "keep")
    assert notice is None and kept == codex_side
    msgs = [{"role": ln["message"]["role"], "content": ln["message"]["content"]}
            for ln in claude_lines(kept, SID, "/w") if ln.get("type") == "assistant"]
    with pytest.raises(AssertionError, match="thinking without a signature"):
        check_messages([m for m in msgs if any(b["type"] == "thinking" for b in m["content"])])
    with pytest.raises(AssertionError, match="not a valid block"):
        _validate("block", {"type": "tool_use", "id": "c1", "name": "apply_patch", "input": "*** Begin Patch"}, "old")
    claude_side = _records(tmp_path_factory, "claude-entire-3.jsonl")
    kept, notice = for_client(claude_side, "codex", "keep")
    items = [ln["payload"] for ln in codex_lines(kept, SID, "/w") if ln["type"] == "response_item"]
    reasoning = [p for p in items if p["type"] == "reasoning"]
    assert reasoning and notice is None
    with pytest.raises(AssertionError, match="not a valid item"):
        _validate("item", reasoning[0], "kept")
    # drop: every thinking block out, no notes (the old --drop-thinking)
    dropped, notice = for_client(claude_side, "codex", "drop")
    assert [r["kind"] for r in dropped] == [r["kind"] for r in claude_side if r["kind"] != "thinking"]
    assert "left out 2 " in notice and "note" not in notice


def test_cli_notice_and_thinking_flags(tmp_path, monkeypatch, capsys):
    """`tc-git resume-session` says on stderr what it left out; --keep-thinking keeps it;
    --keep-thinking with --drop-thinking is refused."""
    from tc_git.cli import main
    from tc_git.engine import Engine

    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("one\n")
    e = Engine(ws)
    e.init("cross")
    e.save("first")
    e.record(transcript=str(TRANSCRIPTS / "codex-daaain-1.jsonl"), milestone="m1")
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "claude"))
    tc = ["--root", str(ws)]
    capsys.readouterr()
    assert main(tc + ["resume-session", "m1", "--client", "claude"]) == 0
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "left out 1 thinking" in err and "--keep-thinking" in err, err
    assert main(tc + ["--json", "resume-session", "m1", "--client", "claude", "--keep-thinking"]) == 0
    out = capsys.readouterr()
    assert not out.err and json.loads(out.out)["notice"] is None, out.err
    back = T.read_transcript(json.loads(out.out)["path"])
    assert [ev.kind for ev in back.events].count("thinking") == 1
    with pytest.raises(SystemExit):
        main(tc + ["resume-session", "m1", "--client", "claude", "--keep-thinking", "--drop-thinking"])
    assert "not allowed with" in capsys.readouterr().err
