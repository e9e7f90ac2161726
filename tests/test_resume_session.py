"""`tc resume-session`: the conversation up to a milestone, written as a session file the agent's
own resume opens. Round trip: the file, read back by our reader and recorded into another
store, gives exactly the event ids of the recorded branch up to that milestone (content
addressing), and nothing after it; its lines use only the shapes the client's real files use.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pygit2
import pytest
from conftest import TRANSCRIPTS, clean_env, first_parent_chain, fsck  # noqa: E402

from tc_git import trajectory as T
from tc_git.storage.store import Store
from tc_git.trajectory.sessionfile import claude_lines, codex_lines, write_session

CASES = ["claude-fasthooks-1.jsonl", "claude-ccviewer-1.jsonl", "claude-daaain-1.jsonl", "claude-daaain-4.jsonl",
         "claude-drmaciver-1.jsonl", "claude-daaain-3.jsonl", "codex-daaain-1.jsonl", "codex-daaain-2.jsonl",
         "codex-daaain-3.jsonl", "codex-localpush-1.jsonl", "codex-agentsessions-1.jsonl",
         "claude-entire-1.jsonl", "claude-entire-2.jsonl", "claude-entire-3.jsonl", "claude-entire-4.jsonl",
         "codex-localpush-2.jsonl", "codex-localpush-3.jsonl"]


def _store(path: Path) -> pygit2.Repository:
    s = Store(path / ".checkpoints", path)
    s.create()
    return s.repo


_chain = first_parent_chain


def _roundtrip(tmp_path: Path, name: str, client: str, branch: str = "main", cut: float = 0.6):
    a = _store(tmp_path / "a")
    res = T.record(a, T.read_transcript(TRANSCRIPTS / name))
    chain = _chain(a, res.branches[branch])
    point = chain[max(0, int(len(chain) * cut) - 1)]
    T.set_milestone(a, "here", point)
    records = T.replay(a, "here", image_data=True)
    lines = (claude_lines if client == "claude" else codex_lines)(records, "00000000-0000-4000-8000-00000000feed",
                                                                  "/work/demo")
    f = tmp_path / "written.jsonl"
    f.write_text("".join(json.dumps(x) + "\n" for x in lines))
    b = _store(tmp_path / "b")
    res_b = T.record(b, T.read_transcript(f))
    return chain[: chain.index(point) + 1], res_b, b, lines


@pytest.mark.parametrize("name", CASES)
def test_written_session_reads_back_to_the_same_event_ids(tmp_path, name):
    client = name.split("-", 1)[0]
    for cut in (0.5, 1.0):
        expected, res_b, b, _ = _roundtrip(tmp_path / str(cut), name, client, cut=cut)
        assert sorted(res_b.branches) == ["main"], res_b.branches  # one line of history, no fork
        assert _chain(b, res_b.branches["main"]) == expected  # same ids, and nothing after the point
        fsck(b.path)


def test_a_fork_and_a_subagent_branch_round_trip(tmp_path):
    fork_case = _store(tmp_path / "x")
    res = T.record(fork_case, T.read_transcript(TRANSCRIPTS / "claude-daaain-1.jsonl"))
    fork = next(b for b in res.branches if b.startswith("fork-"))
    expected, res_b, b, _ = _roundtrip(tmp_path / "f", "claude-daaain-1.jsonl", "claude", branch=fork, cut=1.0)
    assert _chain(b, next(iter(res_b.branches.values()))) == expected
    expected, res_b, b, _ = _roundtrip(tmp_path / "s", "claude-daaain-3.jsonl", "claude", branch="agent-showcol1",
                                       cut=1.0)
    assert _chain(b, res_b.branches["agent-showcol1"]) == expected


def test_codex_compacted_round_trips_exactly(tmp_path):
    """Each `compacted` line (message, window ids, the replacement history Codex resumes with) is
    written back as it was, and a cut right after any compaction reads back to the same ids."""
    src = TRANSCRIPTS / "codex-agentsessions-1.jsonl"
    raw = [json.loads(x) for x in src.read_bytes().splitlines() if x.strip()]
    compacted = [e["payload"] for e in raw if e.get("type") == "compacted"]
    assert len(compacted) == 6 and sum(1 for p in compacted if p.get("replacement_history")) == 6
    a = _store(tmp_path / "a")
    res = T.record(a, T.read_transcript(src))
    chain = _chain(a, res.branches["main"])
    records = T.replay(a, chain[-1], image_data=True)
    lines = codex_lines(records, "00000000-0000-4000-8000-00000000feed", "/work/demo")
    written = [e["payload"] for e in lines if e["type"] == "compacted"]
    key = lambda p: json.dumps(p, sort_keys=True)  # noqa: E731
    assert sorted(map(key, written)) == sorted(map(key, compacted))  # the same lines, whole
    cuts = [i for i, r in enumerate(records) if r["kind"] == "summary" and (r.get("meta") or {}).get("compacted")]
    assert len(cuts) == 6
    for n, i in enumerate(cuts):
        part = codex_lines(records[: i + 1], "00000000-0000-4000-8000-00000000feed", "/work/demo")
        f = tmp_path / f"cut{n}.jsonl"
        f.write_text("".join(json.dumps(x) + "\n" for x in part))
        b = _store(tmp_path / f"b{n}")
        got = T.record(b, T.read_transcript(f))
        assert _chain(b, got.branches["main"]) == chain[: i + 1]
        assert T.load_event(b, got.branches["main"])["history"] == records[i]["history"]


def _shapes(paths, client):
    """{line kind: keys seen} from the client's real fixture files."""
    keys: dict[str, set] = {}
    for p in paths:
        for raw in p.read_bytes().splitlines():
            try:
                e = json.loads(raw)
            except ValueError:
                continue
            if not isinstance(e, dict):
                continue
            if client == "claude":
                kind = f"{e.get('type')}/{e.get('subtype', '')}"
                keys.setdefault(kind, set()).update(e)
                msg = e.get("message")
                if isinstance(msg, dict):
                    keys.setdefault(f"{e.get('type')}.message", set()).update(msg)
                    for blk in msg.get("content") if isinstance(msg.get("content"), list) else []:
                        if isinstance(blk, dict):
                            keys.setdefault(f"block/{blk.get('type')}", set()).update(blk)
            else:
                p_ = e.get("payload") if isinstance(e.get("payload"), dict) else {}
                keys.setdefault(f"{e.get('type')}/{p_.get('type', '')}", set()).update(p_)
    return keys


@pytest.mark.parametrize("client", ["claude", "codex"])
def test_written_lines_use_only_shapes_the_clients_real_files_use(tmp_path, client):
    real = _shapes(sorted(TRANSCRIPTS.glob(f"{client}-*.jsonl")), client)
    written = {}
    for name in CASES:
        if name.startswith(client):
            _, _, _, lines = _roundtrip(tmp_path / name, name, client, cut=1.0)
            f = tmp_path / f"{name}.out"
            f.write_text("".join(json.dumps(x) + "\n" for x in lines))
            for kind, ks in _shapes([f], client).items():
                written.setdefault(kind, set()).update(ks)
    for kind, ks in written.items():
        assert kind in real, f"{client} files never have {kind}"
        assert ks <= real[kind], f"{kind}: fields {sorted(ks - real[kind])} never seen in real {client} files"


def test_cli_writes_where_the_client_looks_and_restores_code(tmp_path):
    """`tc resume-session` from a milestone: Claude's file under CLAUDE_CONFIG_DIR/projects/<slug>/,
    Codex's under CODEX_HOME/sessions/YYYY/MM/DD/; --code previews the linked code restore."""
    from tc_git.engine import Engine

    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("one\n")
    e = Engine(ws)
    e.init("resume me")
    e.save("first")
    r = e.record(transcript=str(TRANSCRIPTS / "claude-drmaciver-1.jsonl"), milestone="m1")
    (ws / "a.txt").write_text("two\n")
    e.save("second")
    env = clean_env(CLAUDE_CONFIG_DIR=tmp_path / "claude", CODEX_HOME=tmp_path / "codex", HOME=tmp_path)
    tc = [sys.executable, "-c", "import sys; from tc_git.cli import main; sys.exit(main(sys.argv[1:]))"]
    out = subprocess.run(tc + ["--root", str(ws), "--json", "resume-session", "m1", "--client", "claude", "--code"],
                         capture_output=True, env=env)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    slug = "".join(ch if ch.isalnum() else "-" for ch in str(ws.resolve()))
    assert Path(got["path"]).parent == tmp_path / "claude" / "projects" / slug
    assert got["command"] == f"claude --resume {got['session_id']}" and got["event"] == r["tip"]
    assert got["restore"] and not got["restore"]["applied"]  # a preview: nothing changed yet
    assert (ws / "a.txt").read_text() == "two\n"
    back = T.read_transcript(got["path"])
    assert back.session_id == got["session_id"] and len(back.events) == r["events"]
    out = subprocess.run(tc + ["--root", str(ws), "--json", "resume-session", "m1", "--client", "codex"],
                         capture_output=True, env=env)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    rel = Path(got["path"]).relative_to(tmp_path / "codex" / "sessions")
    assert len(rel.parts) == 4 and rel.name.startswith("rollout-") and rel.name.endswith(f"{got['session_id']}.jsonl")
    assert got["command"] == f"codex resume {got['session_id']}"
    # --drop-thinking: the same conversation without thinking, still one connected chain
    r2 = e.record(transcript=str(TRANSCRIPTS / "claude-fasthooks-1.jsonl"), milestone="m2")
    out = subprocess.run(tc + ["--root", str(ws), "--json", "resume-session", "m2", "--client", "claude",
                               "--drop-thinking"], capture_output=True, env=env)
    assert out.returncode == 0, out.stderr
    back = T.read_transcript(json.loads(out.stdout)["path"])
    kinds = [ev.kind for ev in back.events]
    assert "thinking" not in kinds and len(kinds) == r2["events"] - 12
    assert sum(1 for ev in back.events if ev.parent is None) == 1
    # bad input: a clear error, nothing written
    out = subprocess.run(tc + ["--root", str(ws), "resume-session", "no-such-point", "--client", "claude"],
                         capture_output=True, env=env)
    assert out.returncode != 0 and b"no-such-point" in out.stderr + out.stdout
    for bad in ("../../../escape", "not-a-uuid", "00000000-0000-4000-8000-00000000000G"):
        out = subprocess.run(tc + ["--root", str(ws), "resume-session", "m1", "--client", "claude",
                                   "--session-id", bad], capture_output=True, env=env)
        assert out.returncode != 0 and b"is not a UUID" in out.stderr + out.stdout, out
    assert not list(tmp_path.rglob("escape*")) and not list(tmp_path.rglob("not-a-uuid*"))


@pytest.mark.parametrize("name,branch", [("claude-fasthooks-1.jsonl", "main"), ("claude-ccviewer-1.jsonl", "main"),
                                         ("claude-daaain-1.jsonl", "fork"), ("claude-daaain-4.jsonl", "main"),
                                         ("claude-entire-2.jsonl", "main"), ("claude-entire-3.jsonl", "main")])
def test_claude_code_itself_opens_the_written_session(tmp_path, name, branch):
    """The real Claude Code CLI (npm, cached as in test_plugin) resolves `--resume <id>` offline:
    a file it cannot read as a conversation is "No conversation found"; ours gets past that to
    the login check (no credentials here, so nothing is sent anywhere)."""
    from test_plugin import _claude_cli

    claude = _claude_cli()
    home, proj = tmp_path / "home", tmp_path / "proj"
    proj.mkdir(parents=True)
    home.mkdir()
    repo = _store(tmp_path / "a")
    res = T.record(repo, T.read_transcript(TRANSCRIPTS / name))
    tip = res.branches["main"] if branch == "main" else next(t for b, t in res.branches.items() if b.startswith(branch))
    env = clean_env(HOME=home, DISABLE_TELEMETRY="1", DISABLE_AUTOUPDATER="1",
                    CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1", NO_COLOR="1", CLAUDE_CONFIG_DIR=home / ".claude")
    for k in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN"):
        env.pop(k, None)
    import os as _os

    old = _os.environ.get("CLAUDE_CONFIG_DIR")
    _os.environ["CLAUDE_CONFIG_DIR"] = str(home / ".claude")
    try:
        got = write_session(T.replay(repo, tip, image_data=True), "claude", str(proj.resolve()))
    finally:
        _os.environ.pop("CLAUDE_CONFIG_DIR") if old is None else _os.environ.__setitem__("CLAUDE_CONFIG_DIR", old)
    bad = Path(got["path"]).with_name("00000000-0000-4000-8000-0000000000ba.jsonl")
    bad.write_text('{"type":"user","uuid":"x","parentUuid":null,"message":{"role":"user"}}\n')

    def resume(sid):
        r = subprocess.run([str(claude), "-p", "--resume", sid, "continue"], capture_output=True, text=True,
                           env=env, cwd=proj, timeout=120, stdin=subprocess.DEVNULL)
        return r.stdout + r.stderr

    assert "No conversation found" in resume("00000000-0000-4000-8000-0000000000ba")  # the control
    out = resume(got["session_id"])
    assert "No conversation found" not in out, out
    assert "login" in out.lower() or "api key" in out.lower(), out


def test_tool_results_of_several_blocks_are_written_back_as_blocks(tmp_path):
    """A Claude tool result that was a list of text blocks or tool references is written back as
    that list (a plain string says something else to the model: a tool reference expands into
    the tool's definition); the round trip keeps the event ids. A result whose text a redaction
    changed cannot be split again: it is written as its (redacted) text."""
    secret = "ghp_" + "aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3zA5"
    results = {"t1": [{"type": "text", "text": "first\nblock"}, {"type": "text", "text": ""},
                      {"type": "text", "text": "second"}],
               "t2": [{"type": "tool_reference", "tool_name": "WebFetch"}, {"type": "text", "text": "loaded"}],
               "t3": [{"type": "text", "text": f"token {secret}"}, {"type": "text", "text": "tail"}]}
    lines = [{"type": "user", "uuid": "u0", "parentUuid": None, "sessionId": "blk", "timestamp": "2026-01-01T00:00:00Z",
              "message": {"role": "user", "content": "go"}}]
    for n, (tid, content) in enumerate(results.items()):
        lines += [{"type": "assistant", "uuid": f"a{n}", "parentUuid": lines[-1]["uuid"], "sessionId": "blk",
                   "timestamp": f"2026-01-01T00:00:{2 * n + 1:02d}Z", "message": {
                       "id": f"m{n}", "role": "assistant",
                       "content": [{"type": "tool_use", "id": tid, "name": "ToolSearch", "input": {}}]}},
                  {"type": "user", "uuid": f"r{n}", "parentUuid": f"a{n}", "sessionId": "blk",
                   "timestamp": f"2026-01-01T00:00:{2 * n + 2:02d}Z",
                   "message": {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tid,
                                                            "content": content}]}}]
    src = tmp_path / "blocks.jsonl"
    src.write_text("".join(json.dumps(x) + "\n" for x in lines))
    a = _store(tmp_path / "a")
    res = T.record(a, T.read_transcript(src))
    out = claude_lines(T.replay(a, res.branches["main"]), "00000000-0000-4000-8000-00000000b10c", "/work/demo")
    sent = {b["tool_use_id"]: b["content"] for x in out if x["type"] == "user"
            for b in x["message"]["content"] if isinstance(b, dict) and b.get("type") == "tool_result"}
    assert sent["t1"] == [b for b in results["t1"] if b["text"]]  # an empty block flattens to nothing
    assert sent["t2"] == results["t2"]
    assert isinstance(sent["t3"], str) and secret not in sent["t3"] and sent["t3"].endswith("tail")
    f = tmp_path / "written.jsonl"
    f.write_text("".join(json.dumps(x) + "\n" for x in out))
    b = _store(tmp_path / "b")
    back = T.record(b, T.read_transcript(f))
    ids = _chain(b, back.branches["main"])
    assert ids[:-2] == _chain(a, res.branches["main"])[:-2]  # the redacted result reads back as a string


def test_a_subagent_result_is_written_back_block_for_block_with_its_tool_use_result(tmp_path):
    """A Task (subagent) result of two text blocks on a line with `toolUseResult` (the subagent's
    id and usage): resume-session writes the blocks and that metadata back as they came (they were
    one string and nothing), and the written file reads back to the same event ids."""
    tur = {"status": "completed", "prompt": "look around", "agentId": "a1b2c3d4",
           "content": [{"type": "text", "text": "found it"}], "totalDurationMs": 1234, "totalTokens": 99,
           "usage": {"input_tokens": 10, "output_tokens": 5}}
    blocks = [{"type": "text", "text": "found it"}, {"type": "text", "text": "agentId: a1b2c3d4 (for resuming)"}]
    lines = [{"type": "user", "uuid": "u0", "parentUuid": None, "sessionId": "sub", "timestamp": "2026-01-01T00:00:00Z",
              "message": {"role": "user", "content": "go"}},
             {"type": "assistant", "uuid": "a0", "parentUuid": "u0", "sessionId": "sub",
              "timestamp": "2026-01-01T00:00:01Z", "message": {
                  "id": "m0", "role": "assistant",
                  "content": [{"type": "tool_use", "id": "toolu_1", "name": "Task", "input": {"prompt": "look around"}}]}},
             {"type": "user", "uuid": "r0", "parentUuid": "a0", "sessionId": "sub", "timestamp": "2026-01-01T00:00:02Z",
              "message": {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                                       "content": blocks}]}, "toolUseResult": tur}]
    src = tmp_path / "sub.jsonl"
    src.write_text("".join(json.dumps(x) + "\n" for x in lines))
    a = _store(tmp_path / "a")
    res = T.record(a, T.read_transcript(src))
    out = claude_lines(T.replay(a, res.branches["main"]), "00000000-0000-4000-8000-0000000050b0", "/work/demo")
    result_line = next(x for x in out if x["type"] == "user" and isinstance(x["message"]["content"], list))
    assert result_line["message"]["content"][0]["content"] == blocks
    assert result_line["toolUseResult"] == tur
    f = tmp_path / "written.jsonl"
    f.write_text("".join(json.dumps(x) + "\n" for x in out))
    b = _store(tmp_path / "b")
    back = T.record(b, T.read_transcript(f))
    assert _chain(b, back.branches["main"]) == _chain(a, res.branches["main"])
    fsck(b.path)
