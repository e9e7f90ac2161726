"""Hostile transcripts (issue 28): one bad line is one bad event, and a format tc-git does not
read is refused.

A real Claude Code session (fixture) gets odd lines inserted: one nested 3,000 deep, one that
is not JSON, one of 100 MiB (a hole in a sparse file: NUL bytes that cost no disk). `tc-git
record` (CLI) and the SessionEnd hook record the whole session: the conversation's `main` is
the very commit the clean file records to, and each odd line is one "malformed" event (line,
reason) on a `malformed` branch. The 100 MiB line is never read whole: the recording's peak
RSS stays far under 256 MiB. A transcript over 128 MiB (a 512 MiB sparse file) is refused by
`record` and by `tc_record` over MCP (real stdio server) before it is read. A Gemini CLI
session is refused, exit non-zero, nothing recorded.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import TC, TRANSCRIPTS, clean_env, fsck, git, knobs, tc
from mcp import Client, StdioServerParameters
from test_hostile_import import peak_rss_kib

from tc_git.base.errors import BadInput
from tc_git.engine import Engine

CLAUDE = TRANSCRIPTS / "claude-drmaciver-1.jsonl"
GEMINI = Path(__file__).parent / "fixtures" / "foreign" / "gemini-cli-session.json"
BIG = 100 << 20
RSS_BOUND_KIB = 256 << 10

pytestmark = pytest.mark.usefixtures("fsck_after")


def odd_transcript(path: Path, big: bool) -> list[int]:
    """The fixture with odd lines inserted after lines 5, 10 (and 15: the big one); returns
    their 1-based line numbers in the new file."""
    lines = CLAUDE.read_bytes().splitlines(keepends=True)
    deep = b"[" * 3000 + b"]" * 3000 + b"\n"
    with open(path, "wb") as f:
        f.writelines(lines[:5])
        f.write(deep)
        f.writelines(lines[5:10])
        f.write(b'{"type": "assistant", "uuid": \n')
        f.writelines(lines[10:15])
        if big:
            f.seek(BIG, 1)  # a hole: a 100 MiB line of NUL bytes, no disk used
            f.write(b"\n")
        f.writelines(lines[15:])
    return [6, 12] + ([18] if big else [])


def events_of(store: Path, ref: str) -> list[dict]:
    out = []
    for c in git(store, "rev-list", "--reverse", ref).decode().split():
        out.append(json.loads(git(store, "show", f"{c}:event.json")))
    return out


def session_refs(store: Path) -> dict[str, str]:
    """branch -> tip of the one session recorded in `store`."""
    out = {}
    for line in git(store, "for-each-ref", "--format=%(refname) %(objectname)", "refs/checkpoints/sessions/") \
            .decode().splitlines():
        name, oid = line.split()
        out[name.rsplit("/", 1)[1]] = oid
    return out


def clean_main(tmp_path: Path) -> str:
    ws = tmp_path / "clean"
    ws.mkdir()
    Engine(ws).record(transcript=str(CLAUDE))
    return session_refs(ws / ".checkpoints")["main"]


def test_cli_record_keeps_the_session_and_records_each_bad_line_as_one_event(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    Engine(ws).init("t")
    tp = tmp_path / "odd.jsonl"
    bad = odd_transcript(tp, big=True)
    r, rss = peak_rss_kib(*TC, "--json", "record", str(tp), cwd=ws)
    assert r.returncode == 0, r.stderr.decode(errors="replace")
    store = ws / ".checkpoints"
    refs = session_refs(store)
    assert set(refs) == {"main", "malformed"}
    assert refs["main"] == clean_main(tmp_path)  # the conversation as if the odd lines were absent
    odd = events_of(store, refs["malformed"])
    assert [e["kind"] for e in odd] == ["malformed"] * 3
    assert [e["meta"]["line"] for e in odd] == bad
    reasons = [e["meta"]["reason"] for e in odd]
    assert "nested deeper than" in reasons[0] and reasons[1].startswith("not JSON") and "longer than" in reasons[2]
    assert odd[2]["meta"]["bytes"] == BIG + 1
    assert rss < RSS_BOUND_KIB, f"record peaked at {rss >> 10} MiB on a 100 MiB line"
    fsck(store)


def test_session_end_hook_records_the_rest_of_the_session(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    e = Engine(ws)
    e.init("t")
    tp = tmp_path / "e7a6b5c4-odd.jsonl"
    bad = odd_transcript(tp, big=False)
    store = ws / ".checkpoints"
    # the worker SessionEnd detaches, run in the foreground: the same code, nothing to wait for
    payload = {"root": str(ws), "store": str(store), "agent": "claude", "transcript": str(tp),
               "session": "e7a6b5c4-odd", "event": "SessionEnd", "reason": "other", "user_store": None}
    r = subprocess.run([sys.executable, "-P", "-m", "tc_git.hooks", "_worker", json.dumps(payload)], cwd=ws,
                       capture_output=True, env=clean_env(**knobs(hook_settle=0, hook_regrow=0)), timeout=120)
    assert r.returncode == 0, r.stderr
    log = (store / "tc" / "hooks.log").read_text()
    assert "worker: recorded" in log and "failed" not in log, log
    refs = session_refs(store)
    assert refs["main"] == clean_main(tmp_path)
    assert [x["meta"]["line"] for x in events_of(store, refs["malformed"])] == bad


def test_a_512_mib_transcript_is_refused_without_being_read(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    Engine(ws).init("t")
    store = ws / ".checkpoints"
    before = git(store, "for-each-ref")
    tp = tmp_path / "huge.jsonl"
    with open(tp, "wb") as f:  # sparse: 512 MiB stated, no disk used
        f.write(CLAUDE.read_bytes())
        f.truncate(512 << 20)
    r, rss = peak_rss_kib(*TC, "record", str(tp), cwd=ws)
    err = r.stderr.decode(errors="replace")
    assert r.returncode != 0 and "128 MiB" in err and "Nothing was recorded" in err, err
    assert rss < RSS_BOUND_KIB
    assert git(store, "for-each-ref") == before


@pytest.mark.anyio
async def test_tc_record_over_mcp_refuses_a_huge_file_and_goes_on(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    tp = tmp_path / "huge.jsonl"
    with open(tp, "wb") as f:
        f.truncate(512 << 20)
    params = StdioServerParameters(command=sys.executable, args=["-m", "tc_git"], cwd=str(ws),
                                   env=clean_env(TC_WATCH="off", TC_GIT="off"))
    async with Client(params, mode="legacy") as c:
        r = await c.call_tool("tc_init", {"root": str(ws), "name": "t"})
        assert not r.is_error, r.content[0].text
        r = await c.call_tool("tc_record", {"root": str(ws), "transcript": str(tp)})
        assert r.is_error and "128 MiB" in r.content[0].text, r.content[0].text
        r = await c.call_tool("tc_record", {"root": str(ws), "transcript": str(CLAUDE)})
        assert not r.is_error and r.structured_content["events"] > 30, r.content[0].text


def test_gemini_cli_session_is_refused_and_nothing_is_recorded(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    Engine(ws).init("t")
    store = ws / ".checkpoints"
    before = git(store, "for-each-ref")
    r = tc("record", str(GEMINI), cwd=ws)
    err = r.stderr.decode()
    assert r.returncode != 0
    assert "not a transcript format tc-git reads" in err and "Gemini CLI" in err
    assert "Claude Code" in err and "Codex" in err and "Nothing was recorded" in err
    assert git(store, "for-each-ref") == before
    # a JSONL of another tool's records is refused the same way (not "1 event, 12 skipped")
    other = tmp_path / "other.jsonl"
    other.write_text("".join(json.dumps({"event": "step", "n": i}) + "\n" for i in range(12)))
    with pytest.raises(BadInput, match="not a transcript format tc-git reads"):
        Engine(ws).record(transcript=str(other))
    assert git(store, "for-each-ref") == before
