"""Trajectory layer: readers, recorder, milestones and operations, judged by stock git.

Per-fixture numbers were computed once and checked by reading the files (see SOURCES.md):
drmaciver-1 = 1 prompt + 8 answers + 2 Stop-hook notes + 13 call/result pairs, one line of
history (its parallel Read/Edit calls are linearised, not forks); daaain-1 = 12 lines with one
rewind (a fork) and a compaction; daaain-2 = an excerpt whose inline sidechain hangs off the
Task call and contains an orphan result (its call is not in the excerpt), hence a sidechain fork.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pygit2
import pytest
from conftest import TRANSCRIPTS as FIXTURES  # noqa: E402

from tc_git import trajectory as T
from tc_git.storage.store import Store

# file -> (events, branch names with fork ids masked, call/result pairs on one chain)
EXPECTED = {
    "claude-drmaciver-1.jsonl": (37, ["main"], 13),
    "claude-drmaciver-2.jsonl": (96, ["main"], 39),
    "claude-daaain-1.jsonl": (12, ["fork-*", "main"], 0),
    "claude-daaain-2.jsonl": (6, ["agent-e1c84ba5", "main"], 1),  # orphan result joins its sidechain
    "claude-daaain-3.jsonl": (20, ["agent-showcol1", "agent-showcol2", "main"], 6),  # + subagents/
    "claude-daaain-3-subagent-showcol2.jsonl": (4, ["agent-showcol2"], 1),
    "claude-agentsessions-1.jsonl": (34, ["fork-*", "fork-*", "main", "sidechain"], 1),  # 2 of 3 pairs lack ids
    "codex-agentsessions-1.jsonl": (29, ["main"], 5),  # 1 result precedes its (trimmed) call; +3: item_completed utterances
    "codex-localpush-1.jsonl": (286, ["main"], 118),  # + 26 thinking (reasoning summaries)
}


def _env() -> dict:
    return {k: v for k, v in os.environ.items() if not k.startswith(("GIT_", "TC_"))}


def git(store: Path, *args: str) -> str:
    r = subprocess.run(["git", f"--git-dir={store}", *args], capture_output=True, env=_env())
    assert r.returncode == 0, r.stderr.decode(errors="replace")
    return r.stdout.decode("utf-8", "replace")


def fsck_clean(store: Path) -> None:
    r = subprocess.run(["git", f"--git-dir={store}", "fsck", "--full", "--strict"],
                       capture_output=True, text=True, env=_env())
    assert r.returncode == 0, r.stderr
    bad = [line for line in (r.stdout + r.stderr).splitlines()
           if re.match(r"^(error|warning|missing|broken|bad)", line)]
    assert not bad, bad


@pytest.fixture
def store(tmp_path: Path) -> Store:
    s = Store(tmp_path / ".checkpoints", tmp_path)
    s.create()
    return s


def _all_objects(store: Path) -> set[str]:
    out = git(store, "cat-file", "--batch-all-objects", "--batch-check=%(objectname)")
    return set(out.split())


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_fixture_records_cleanly(store: Store, name: str) -> None:
    repo = store.repo
    events, branches, pairs = EXPECTED[name]
    tr = T.read_transcript(FIXTURES / name)
    r = T.record(repo, tr)
    assert r.events == events == len(tr.events)
    assert r.new_commits == len(set(r.commits.values()))
    assert sorted(re.sub(r"fork-[0-9a-f]{8}$", "fork-*", b) for b in r.branches) == branches

    # Re-recording writes nothing and gives the same ids.
    before = _all_objects(store.path)
    r2 = T.record_file(repo, str(FIXTURES / name))
    assert r2.new_commits == 0 and r2.commits == r.commits and r2.branches == r.branches
    assert _all_objects(store.path) == before

    seen: dict[str, dict] = {}
    md = ""
    for branch, tip in r.branches.items():
        ref = r.ref_prefix + branch
        chain = T.replay(repo, ref)
        # stock git shows the conversation one line per event
        lines = git(store.path, "log", "--oneline", ref).splitlines()
        assert len(lines) == len(chain) and all(len(line) > 8 for line in lines)
        md += T.export_markdown(repo, ref)
        for rec in chain:
            seen[rec["id"]] = rec
        # every result follows its own call on the same line of history
        prior: set = set()
        for rec in chain:
            if rec["kind"] == "tool_call" and rec.get("call_id"):
                prior.add(rec["call_id"])
            elif rec["kind"] == "tool_result" and rec.get("call_id") in prior:
                rec["_paired"] = True
    assert len(seen) == events  # every event is reachable from a branch ref
    assert sum(1 for rec in seen.values() if rec.get("_paired")) == pairs
    for rec in seen.values():
        if rec["kind"] == "user":
            assert rec["text"] in md
    fsck_clean(store.path)


def test_claude_subagent_file_hangs_off_its_spawn(store: Store) -> None:
    tr = T.read_transcript(FIXTURES / "claude-daaain-3.jsonl",
                           subagents=[FIXTURES / "claude-daaain-3-subagent-showcol2.jsonl"])
    r = T.record(store.repo, tr)
    assert r.events == 18 and sorted(r.branches) == ["agent-showcol2", "main"]
    d = T.diff(store.repo, r.ref_prefix + "main", r.ref_prefix + "agent-showcol2")
    base = T.load_event(store.repo, d.base)
    assert base["kind"] == "tool_call" and base["call_id"] == "toolu_sc_showcol2"
    assert [e["kind"] for e in d.only_b] == ["user", "tool_call", "tool_result", "assistant"]
    fsck_clean(store.path)


def test_parallel_calls_are_linear_and_rewind_is_a_fork(store: Store) -> None:
    r = T.record_file(store.repo, str(FIXTURES / "claude-drmaciver-1.jsonl"))
    kinds = [e["kind"] for e in T.replay(store.repo, r.ref_prefix + "main")]
    i = kinds.index("tool_call", 3)  # the two parallel Reads: call, call, result, result
    assert kinds[i:i + 4] == ["tool_call", "tool_call", "tool_result", "tool_result"]

    r = T.record_file(store.repo, str(FIXTURES / "claude-daaain-1.jsonl"))
    fork = next(b for b in r.branches if b.startswith("fork-"))
    d = T.diff(store.repo, f"{r.session}/main", f"{r.session}/{fork}")
    assert T.load_event(store.repo, d.base)["text"] == "Ready"
    assert [e.get("text") for e in d.only_b] == ["First attempt", "First answer"]
    assert d.only_a[0]["text"] == "Second attempt" and d.only_a[-1]["text"] == "Final answer"
    assert any(e["kind"] == "summary" for e in d.only_a)  # compaction summary kept in line


def test_grown_transcript_appends_only_new_events(store: Store, tmp_path: Path) -> None:
    lines = (FIXTURES / "claude-drmaciver-1.jsonl").read_bytes().splitlines(keepends=True)
    part = tmp_path / "s.jsonl"
    part.write_bytes(b"".join(lines[:20]) + lines[20][:50])  # a torn last line, mid-write
    r1 = T.record_file(store.repo, str(part))
    assert r1.malformed == 1
    part.write_bytes(b"".join(lines))
    r2 = T.record_file(store.repo, str(part))
    assert r2.malformed == 0 and r2.events == 37
    assert r2.new_commits == r2.events - r1.events
    assert store.repo.descendant_of(r2.branches["main"], r1.branches["main"])


def test_tolerant_reader_skips_and_counts(store: Store, tmp_path: Path) -> None:
    p = tmp_path / "odd.jsonl"
    good = {"type": "user", "uuid": "u1", "parentUuid": None, "sessionId": "odd",
            "timestamp": "2026-01-01T00:00:00Z", "message": {"role": "user", "content": "hello"}}
    p.write_text("\n".join([json.dumps(good), "not json {", json.dumps({"type": "brand-new-type"}),
                            json.dumps([1, 2]), json.dumps({"type": "assistant", "uuid": "a1",
                            "parentUuid": "u1", "message": {"id": "m", "content": 7}})]) + "\n")
    r = T.record_file(store.repo, str(p))
    # bad JSON, unknown, a list; the bad JSON line is also one "malformed" event on its own branch
    assert r.events == 2 and r.malformed == 1 and r.skipped == 3 and set(r.branches) == {"main", "malformed"}


def test_codex_rollback_is_a_fork(store: Store) -> None:
    def item(ts: int, payload: dict, kind: str = "response_item") -> dict:
        return {"timestamp": f"2026-01-01T00:00:{ts:02d}Z", "type": kind, "payload": payload}

    def msg(role: str, text: str) -> dict:
        return {"type": "message", "role": role, "content": [{"type": "input_text", "text": text}]}

    lines = [item(0, {"id": "cx1", "cwd": "/w"}, "session_meta"), item(1, msg("user", "one")),
             item(2, msg("assistant", "ok one")), item(3, msg("user", "two")),
             item(4, {"type": "function_call", "name": "shell", "arguments": '{"command":["ls"]}',
                      "call_id": "c1"}),
             item(5, {"type": "function_call_output", "call_id": "c1",
                      "output": '{"output":"a\\nb","metadata":{"exit_code":0}}'}),
             item(6, {"type": "thread_rolled_back", "num_turns": 1}, "event_msg"),
             item(7, msg("user", "three"))]
    tr = T.read_transcript(_write_jsonl(store.path.parent / "roll.jsonl", lines))
    assert tr.agent == "codex" and tr.session_id == "cx1"
    r = T.record(store.repo, tr)
    assert len(r.branches) == 2
    main = [e.get("text") for e in T.replay(store.repo, r.ref_prefix + "main")]
    assert main == ["one", "ok one", "three"]
    fork = T.replay(store.repo, r.ref_prefix + next(b for b in r.branches if b != "main"))
    assert fork[-1]["tool_output"] == "a\nb" and fork[-2]["tool_input"] == {"command": ["ls"]}


def _write_jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_large_output_is_its_own_blob(store: Store) -> None:
    big = "line\n" * 4000
    tr = T.read_steps([{"role": "user", "content": "run it"},
                       {"kind": "tool_call", "tool_name": "Bash", "tool_input": {"command": "yes"},
                        "call_id": "c"},
                       {"kind": "tool_result", "call_id": "c", "tool_output": big}], session_id="big")
    r = T.record(store.repo, tr)
    tip = store.repo[r.branches["main"]]
    assert sorted(e.name for e in tip.tree) == ["event.json", "output.txt"]
    assert T.load_event(store.repo, tip.id)["tool_output"] == big
    assert tip.message.startswith("tool_result Bash: line line")


def test_secrets_never_become_objects(store: Store) -> None:
    token = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
    assert len(token) == 40
    tr = T.read_steps([
        {"role": "user", "content": f"use my token {token} please"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "Bash",
                                           "input": {"command": f"GH_TOKEN={token} gh pr list"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1",
                                      "content": f"auth ok for {token}\n" + "x" * 9000}]},
    ], session_id="secret")
    r = T.record(store.repo, tr)
    assert r.redactions == 3
    T.set_milestone(store.repo, "tok", r.ref_prefix + "main", session=r.session)
    T.branch(store.repo, "side", r.ref_prefix + "main")
    dump = subprocess.run(["git", f"--git-dir={store.path}", "cat-file", "--batch-all-objects", "--batch"],
                          capture_output=True, env=_env()).stdout
    assert token.encode() not in dump and b"ghp_A1b2" not in dump
    assert b"[REDACTED" in dump
    assert token not in T.export_markdown(store.repo, "tok")


def test_milestones_notes_log_and_checkout(store: Store) -> None:
    repo = store.repo
    r = T.record_file(repo, str(FIXTURES / "claude-drmaciver-1.jsonl"))
    entries, total = T.log(repo, r.session, newest_first=False, offset=0, limit=5)
    assert total == 37 and entries[0]["kind"] == "user" and len(entries) == 5
    newest, _ = T.log(repo, r.session, limit=1)
    assert newest[0]["id"] == r.branches["main"]
    code = "c0de" * 10
    m = T.set_milestone(repo, "edited", entries[4]["id"], session=r.session, code_commit=code,
                        message="first edit")
    assert T.get_milestone(repo, "edited") == m
    assert [x.name for x in T.list_milestones(repo, session=r.session)] == ["edited"]
    with pytest.raises(Exception):
        T.set_milestone(repo, "edited", r.branches["main"])
    note = json.loads(git(store.path, "notes", "--ref=refs/notes/checkpoints", "show", m.event))
    assert note["trajectory"]["milestones"]["edited"]["code_commit"] == code
    co = T.checkout(repo, "edited")
    assert len(co.messages) == 5 and co.code_commit == code and co.milestones == ["edited"]
    assert co.messages[0]["role"] == "user"
    assert T.linked_code(repo, r.branches["main"]) == code  # nearest linked ancestor
    assert "> **Milestone `edited`**" in T.export_markdown(repo, r.session)
    assert [s.session for s in T.list_sessions(repo)] == [r.session]
    ref = T.branch(repo, "try-again", "edited")
    assert ref == f"{T.SESSIONS_PREFIX}{r.session}/try-again"
    assert T.record_file(repo, str(FIXTURES / "claude-drmaciver-1.jsonl")).new_commits == 0
    assert ref in repo.references  # recording again leaves user branches alone
    fsck_clean(store.path)


# -- replay verification -----------------------------------------------------------------------

ROOT = "/work/ws"


def _tree(repo: pygit2.Repository, files: dict[str, str]) -> pygit2.Oid:
    idx = pygit2.Index()
    for path, text in files.items():
        idx.add(pygit2.IndexEntry(path, repo.create_blob(text.encode()), pygit2.enums.FileMode.BLOB))
    return idx.write_tree(repo)


BASE = {"src/app.py": "def f():\n    return 1\n", "README.md": "hello\n", "notes.txt": "a\nb\nc\n"}
PATCH = "*** Begin Patch\n*** Update File: notes.txt\n@@\n a\n-b\n+B\n c\n*** Add File: new.txt\n+fresh\n*** End Patch"
AFTER = {"src/app.py": "def f():\n    return 2\n\ndef g():\n    return 3\n",
         "README.md": "hello world\n", "notes.txt": "a\nB\nc\n", "new.txt": "fresh\n",
         "src/util.py": "X = 1\n"}


def _session() -> list[dict]:
    def call(cid: str, name: str, inp: object) -> dict:
        return {"kind": "tool_call", "tool_name": name, "tool_input": inp, "call_id": cid}

    def res(cid: str, error: bool = False) -> dict:
        return {"kind": "tool_result", "call_id": cid, "tool_output": "ok", "is_error": error}

    return [{"role": "user", "content": "change things"},
            call("1", "Edit", {"file_path": f"{ROOT}/src/app.py", "old_string": "return 1",
                               "new_string": "return 2"}), res("1"),
            call("2", "Edit", {"file_path": f"{ROOT}/src/app.py", "old_string": "nope",
                               "new_string": "x"}), res("2", error=True),  # refused: no change
            call("3", "Write", {"file_path": f"{ROOT}/src/util.py", "content": "X = 1\n"}), res("3"),
            call("4", "MultiEdit", {"file_path": f"{ROOT}/src/app.py", "edits": [
                {"old_string": "return 2\n", "new_string": "return 2\n\ndef g():\n    return 3\n"}]}),
            res("4"),
            call("5", "apply_patch", PATCH), res("5"),
            call("6", "Edit", {"file_path": f"{ROOT}/README.md", "old_string": "hello",
                               "new_string": "hello world"}), res("6"),
            {"role": "assistant", "content": "done"}]


def test_verify_edits_reproduces_a_complete_session(store: Store) -> None:
    repo = store.repo
    r = T.record(repo, T.read_steps(_session(), session_id="edits"))
    events = T.replay(repo, r.ref_prefix + "main")
    v = T.verify_edits(repo, events, _tree(repo, BASE), _tree(repo, AFTER), root=ROOT)
    assert v.ok and v.path is None and v.applied == 5 and v.skipped == 1


def test_verify_edits_reports_an_outside_edit(store: Store) -> None:
    repo = store.repo
    events = T.replay(repo, T.record(repo, T.read_steps(_session(), session_id="edits")).ref_prefix + "main")
    # someone changed README.md by hand after the agent's edit
    outside = dict(AFTER, **{"README.md": "hello world\nhand-written\n"})
    v = T.verify_edits(repo, events, _tree(repo, BASE), _tree(repo, outside), root=ROOT)
    assert not v.ok and v.path == "README.md" and v.differences == ["README.md"]
    # ... or before it: the agent's Edit no longer applies to what it found
    base = dict(BASE, **{"src/app.py": "def f():\n    return 10\n"})
    v = T.verify_edits(repo, events, _tree(repo, base), _tree(repo, AFTER), root=ROOT)
    assert not v.ok and v.path == "src/app.py" and "outside" in v.reason
    # a file the agent never touched
    v = T.verify_edits(repo, events, _tree(repo, BASE), _tree(repo, dict(AFTER, extra="1")), root=ROOT)
    assert (v.ok, v.path) == (False, "extra")
    assert T.verify_edits(repo, events, _tree(repo, BASE), _tree(repo, dict(AFTER, extra="1")),
                          root=ROOT, only_touched=True).ok


def test_rewind_after_recording_moves_main_and_keeps_the_old_line(store: Store, tmp_path: Path) -> None:
    lines = (FIXTURES / "claude-daaain-1.jsonl").read_text().splitlines(keepends=True)
    part = tmp_path / "s.jsonl"
    part.write_text("".join(lines[:4]))  # Start, Ready, First attempt, First answer
    r1 = T.record_file(store.repo, str(part))
    assert list(r1.branches) == ["main"]
    part.write_text("".join(lines))  # the user rewound to "Ready" and went on
    r2 = T.record_file(store.repo, str(part))
    fork = next(b for b in r2.branches if b.startswith("fork-"))
    assert r2.branches[fork] == r1.branches["main"] and r2.branches["main"] != r1.branches["main"]
    refs = sorted(r for r in store.repo.references if r.startswith(r2.ref_prefix))
    assert refs == sorted(r2.ref_prefix + b for b in r2.branches)


def test_cache_is_only_a_shortcut(store: Store) -> None:
    r1 = T.record_file(store.repo, str(FIXTURES / "claude-drmaciver-2.jsonl"))
    for f in (store.path / "tc" / "trajectory-cache").iterdir():
        f.unlink()
    r2 = T.record_file(store.repo, str(FIXTURES / "claude-drmaciver-2.jsonl"))
    assert r2.commits == r1.commits and r2.new_commits == 0


def test_package_never_imports_mcp() -> None:
    pkg = Path(T.__file__).parent
    for src in pkg.glob("*.py"):
        assert not re.search(r"^\s*(import|from)\s+mcp\b", src.read_text(), re.M), src
