"""Every transcript fixture, recorded and judged against counts taken here from its raw lines.

The counts below do not use the readers: they walk the JSON lines with the simplest rules that
describe the formats (a prompt is a `user` line with text that is not meta/compaction; a call
is a `tool_use` block or a Codex `*_call` item; a rewind is a second prompt under one parent).
What the recorder stored is read back through git (refs, commits, trees) and must agree:
prompts, answers, thinking, calls and results, real forks only (0 where the file has no
rewind), every call on the same chain as its result, every prompt in the Markdown export of
the branches, and each subagent hanging off the call that spawned it.
"""
from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pygit2
import pytest
from conftest import TRANSCRIPTS, fsck  # noqa: E402

from tc_git import trajectory as T
from tc_git.storage.store import Store

CLAUDE = sorted(p.name for p in TRANSCRIPTS.glob("claude-*.jsonl"))
CODEX = sorted(p.name for p in TRANSCRIPTS.glob("codex-*.jsonl"))
# A schema-coverage file, not a conversation (lines from unrelated sessions): its DAG is
# checked for calls/results and counts only, not for forks.
INCOHERENT = {"claude-agentsessions-1.jsonl", "codex-agentsessions-1.jsonl"}


def _lines(path: Path) -> list[dict]:
    out = []
    for raw in path.read_bytes().splitlines():
        try:
            e = json.loads(raw)
        except ValueError:
            continue
        if isinstance(e, dict):
            out.append(e)
    return out


def _subagent_files(path: Path) -> list[Path]:
    d = path.with_suffix("") / "subagents"
    return sorted(d.rglob("agent-*.jsonl")) if d.is_dir() else []


# -- independent counts ----------------------------------------------------------------------

def _claude_text(content) -> str:
    if isinstance(content, str):
        return content
    return "\n".join(b.get("text") or "" for b in content or []
                     if isinstance(b, dict) and b.get("type") == "text")


def claude_counts(path: Path) -> dict:
    c: Counter = Counter()
    prompts: list[str] = []
    prompt_parents: Counter = Counter()
    seen: set = set()
    results_with_agent: dict[str, str] = {}  # agentId -> tool_use id, from trunk results
    side_agents: set = set()  # agents whose own lines are present
    spawn_prompts: dict[str, str] = {}  # prompt -> tool_use id of the Task/Agent call
    side_roots: dict[str, str] = {}  # uuid of an inline sidechain root -> its prompt
    ids: dict[str, set] = {"use": set(), "result": set()}
    for f in [path, *_subagent_files(path)]:
        for e in _lines(f):
            if e.get("type") not in ("user", "assistant") or not isinstance(e.get("message"), dict):
                continue
            key = json.dumps(e, sort_keys=True)
            if key in seen:
                continue  # a resumed file replays lines verbatim
            seen.add(key)
            if e.get("isSidechain") and isinstance(e.get("agentId"), str):
                side_agents.add(e["agentId"])
            content = e["message"].get("content")
            blocks = content if isinstance(content, list) else []
            for b in blocks:
                if not isinstance(b, dict):
                    continue
                t = b.get("type")
                if t == "tool_use":
                    c["tool_call"] += 1
                    ids["use"].add(b.get("id"))
                    if b.get("name") in ("Task", "Agent") and isinstance(b.get("input"), dict) \
                            and isinstance(b["input"].get("prompt"), str):
                        spawn_prompts[b["input"]["prompt"].strip()] = b.get("id")
                elif t == "tool_result":
                    c["tool_result"] += 1
                    ids["result"].add(b.get("tool_use_id"))
                    tur = e.get("toolUseResult")
                    if isinstance(tur, dict) and isinstance(tur.get("agentId"), str) and not e.get("isSidechain"):
                        results_with_agent[tur["agentId"]] = b.get("tool_use_id")
                elif e["type"] == "assistant" and t == "text" and (b.get("text") or "").strip():
                    c["assistant"] += 1
                elif e["type"] == "assistant" and (t == "thinking" and (b.get("thinking") or "").strip()
                                                   or t == "redacted_thinking"):
                    c["thinking"] += 1
            if isinstance(content, str) and e["type"] == "assistant" and content.strip():
                c["assistant"] += 1
            if e["type"] == "user" and not e.get("isMeta") and not e.get("isCompactSummary"):
                text = _claude_text(content)
                has_image = any(isinstance(b, dict) and b.get("type") == "image" for b in blocks)
                if e.get("isSidechain") and e.get("parentUuid") is None and text.strip():
                    side_roots[e["uuid"]] = text.strip()
                if text.strip() or has_image:
                    prompts.append(text)
                    if not e.get("isSidechain"):
                        prompt_parents[e.get("parentUuid")] += 1
    c["user"] = len(prompts)
    rewinds = sum(n - 1 for parent, n in prompt_parents.items() if parent is not None and n > 1)
    agents = {a: t for a, t in results_with_agent.items() if a in side_agents}
    pairs = len((ids["use"] & ids["result"]) - {None})
    inline = {u: spawn_prompts[p] for u, p in side_roots.items() if p in spawn_prompts}
    return {"counts": c, "prompts": prompts, "rewinds": rewinds, "agents": agents, "pairs": pairs,
            "inline": inline}


def codex_counts(path: Path) -> dict:
    c: Counter = Counter()
    items = {"user": [], "assistant": [], "thinking": []}
    events = {"user": [], "assistant": [], "thinking": []}
    rollbacks = 0
    ids: dict[str, set] = {"use": set(), "result": set()}
    for e in _lines(path):
        kind, p = e.get("type"), e.get("payload")
        if not isinstance(p, dict):
            if kind in ("message", "function_call", "function_call_output"):
                kind, p = "response_item", e  # legacy: items without an envelope
            else:
                continue
        t = p.get("type")
        if kind == "response_item":
            if t in ("function_call", "custom_tool_call", "local_shell_call", "web_search_call", "tool_search_call"):
                c["tool_call"] += 1
                ids["use"].add(p.get("call_id"))
            elif t in ("function_call_output", "custom_tool_call_output", "tool_search_output"):
                c["tool_result"] += 1
                ids["result"].add(p.get("call_id"))
            elif t == "reasoning" and any((x.get("text") or "").strip() for x in p.get("summary") or []
                                          if isinstance(x, dict)):
                items["thinking"].append(p)
            elif t == "message" and p.get("role") in ("user", "assistant"):
                text = " ".join(x.get("text") or "" for x in p.get("content") or [] if isinstance(x, dict))
                if text.strip() and not (p["role"] == "user" and text.lstrip().startswith(("<", "# AGENTS.md"))):
                    items[p["role"]].append(text)
        elif kind == "event_msg":
            if t == "user_message" and (p.get("message") or "").strip():
                events["user"].append(p["message"])
            elif t == "agent_message" and (p.get("message") or "").strip():
                events["assistant"].append(p["message"])
            elif t == "agent_reasoning" and (p.get("text") or "").strip():
                events["thinking"].append(p["text"])
            elif t == "thread_rolled_back":
                rollbacks += 1
            elif t == "item_completed" and isinstance(p.get("item"), dict) \
                    and p["item"].get("type") in ("UserMessage", "AgentMessage"):  # Codex 0.17x
                text = " ".join(str(x.get("text") or "") for x in p["item"].get("content") or [] if isinstance(x, dict))
                if text.strip():
                    events["user" if p["item"]["type"] == "UserMessage" else "assistant"].append(text)
    # the two streams carry the same utterances; a rollout may hold only one of them
    for role in ("user", "assistant", "thinking"):
        c[role] = max(len(items[role]), len(events[role]))
    prompts = events["user"] if len(events["user"]) >= len(items["user"]) else items["user"]
    pairs = len((ids["use"] & ids["result"]) - {None})
    agents: dict[str, str] = {}
    # agents it spawned (spawn_agent's result names the agent's thread): their own rollouts, found
    # by that id in the file name next to this one, count with it when they name it as parent
    lines = _lines(path)
    me = next((e["payload"].get("id") for e in lines if e.get("type") == "session_meta"), None)
    spawns = {e["payload"].get("call_id") for e in lines if e.get("type") == "response_item"
              and e["payload"].get("name") == "spawn_agent"}
    for e in lines:
        p = e.get("payload") if e.get("type") == "response_item" else None
        if not p or p.get("type") != "function_call_output" or p.get("call_id") not in spawns:
            continue
        try:
            agent = json.loads(p.get("output"))["agent_id"]
        except (TypeError, ValueError, KeyError):
            continue
        roots = [path.parent] + ([path.parents[3]] if len(path.parents) > 3 and path.parents[2].parent.name == "sessions"
                                 else [])
        child = sorted({f for r in roots for f in r.glob(f"**/rollout-*-{agent}.jsonl")})
        if not child:
            continue
        meta = _lines(child[0])[0].get("payload") or {}
        src = meta.get("source") if isinstance(meta.get("source"), dict) else {}
        spawn = src.get("subagent") if isinstance(src.get("subagent"), dict) else {}
        if (meta.get("parent_thread_id") or (spawn.get("thread_spawn") or {}).get("parent_thread_id")) != me:
            continue
        sub = codex_counts(child[0])
        c.update(sub["counts"])
        prompts = prompts + sub["prompts"]
        pairs += sub["pairs"]
        agents[agent] = p["call_id"]
    return {"counts": c, "prompts": prompts, "rewinds": rollbacks, "agents": agents, "pairs": pairs}


# -- the recorded side -------------------------------------------------------------------------

@pytest.fixture
def repo(tmp_path: Path) -> pygit2.Repository:
    s = Store(tmp_path / ".checkpoints", tmp_path)
    s.create()
    return s.repo


def _recorded(repo: pygit2.Repository, path: Path):
    res = T.record(repo, T.read_transcript(path))
    prefix = res.ref_prefix
    tips = {r[len(prefix):]: repo.references[r].target for r in repo.references if r.startswith(prefix)}
    commits: dict[str, pygit2.Commit] = {}
    for tip in tips.values():
        for c in repo.walk(tip, pygit2.enums.SortMode.TOPOLOGICAL):
            commits[str(c.id)] = c
    records = {cid: T.load_event(repo, c) for cid, c in commits.items()}
    return res, tips, commits, records


def _check(repo, path: Path, expected: dict, tmp_path: Path) -> None:
    res, tips, commits, records = _recorded(repo, path)
    kinds = Counter(r["kind"] for r in records.values())
    for k in ("user", "assistant", "thinking", "tool_call", "tool_result"):
        assert kinds[k] == expected["counts"][k], (k, dict(kinds), dict(expected["counts"]))
    assert res.events == len(records), "every event is reachable from a branch ref"
    if any(not r.get("sidechain") for r in records.values()):
        assert "main" in tips, sorted(tips)  # the main line has a name even if a subagent ends it

    # forks: exactly the rewinds the file holds (0 when it has none)
    if path.name not in INCOHERENT:
        forks = [b for b in tips if "fork-" in b and not b.startswith("agent-")]
        assert len(forks) == expected["rewinds"], sorted(tips)
        roots = [c for c in commits.values() if not c.parent_ids]
        assert len(roots) == 1, f"{len(roots)} unconnected pieces"

    # every call on the same chain as its result
    by_call, dup = {}, set()
    for cid, rec in records.items():
        if rec["kind"] == "tool_call" and rec.get("call_id"):
            if rec["call_id"] in by_call:
                dup.add(rec["call_id"])
            by_call[rec["call_id"]] = cid
    for d in dup:  # an id used twice pairs with neither for certain
        del by_call[d]
    paired = 0
    for cid, rec in records.items():
        if rec["kind"] == "tool_result" and rec.get("call_id") in by_call:
            call = pygit2.Oid(hex=by_call[rec["call_id"]])
            assert repo.descendant_of(pygit2.Oid(hex=cid), call), f"result of {rec['call_id']} is not after its call"
            paired += 1
    if path.name not in INCOHERENT:
        assert paired == expected["pairs"]

    # every prompt in the Markdown of the branches
    md = "\n".join(T.export_markdown(repo, str(t)) for t in tips.values())
    flat = " ".join(md.split())
    for prompt in expected["prompts"]:
        words = " ".join(prompt.split())[:60]
        assert words in flat, f"prompt {words!r} missing from the Markdown"

    # subagents hang off the call that spawned them
    metas = {}
    for f in _subagent_files(path):
        meta = f.with_suffix(".meta.json")
        if meta.is_file() and json.loads(meta.read_text()).get("toolUseId"):
            metas[f.stem[len("agent-"):]] = json.loads(meta.read_text())["toolUseId"]
    for agent, tool_use in {**expected["agents"], **metas}.items():
        tip = tips.get(f"agent-{agent}")
        assert tip is not None, f"no branch for subagent {agent}: {sorted(tips)}"
        chain = list(repo.walk(tip, pygit2.enums.SortMode.TOPOLOGICAL))
        first_own = [c for c in chain if records[str(c.id)].get("agent_id") == agent][-1]
        spawn = records[str(first_own.parent_ids[0])]
        assert spawn["kind"] == "tool_call" and spawn.get("call_id") == tool_use, (agent, spawn)
    # inline sidechains (older files: no agent id) hang off the call whose prompt they got
    for uuid, tool_use in expected.get("inline", {}).items():
        cid = next(cid for cid, rec in records.items() if rec.get("source", {}).get("uuid") == uuid)
        spawn = records[str(commits[cid].parent_ids[0])]
        assert spawn["kind"] == "tool_call" and spawn.get("call_id") == tool_use, (uuid, spawn)
    fsck(repo.path)


@pytest.mark.parametrize("name", CLAUDE)
def test_claude_fixture_against_raw_lines(repo, name: str, tmp_path: Path) -> None:
    path = TRANSCRIPTS / name
    _check(repo, path, claude_counts(path), tmp_path)


@pytest.mark.parametrize("name", CODEX)
def test_codex_fixture_against_raw_lines(repo, name: str, tmp_path: Path) -> None:
    path = TRANSCRIPTS / name
    _check(repo, path, codex_counts(path), tmp_path)


def test_unknown_line_types_are_reported_not_fatal(repo) -> None:
    res = T.record(repo, T.read_transcript(TRANSCRIPTS / "codex-daaain-1.jsonl"))
    assert res.unknown_types == {"future_synthetic_record": 1}
    res = T.record(repo, T.read_transcript(TRANSCRIPTS / "claude-agentsessions-1.jsonl"))
    assert sum(res.unknown_types.values()) == 6 and "bridge-session" in res.unknown_types


def test_thinking_and_images_are_kept(repo, tmp_path: Path) -> None:
    """Thinking is its own event kind; a pasted image is a blob with its media type, and one
    over the size cap is noted, not stored."""
    import base64

    png = base64.b64encode(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4).decode()
    big = base64.b64encode(b"\0" * (T.model.IMAGE_MAX_BYTES + 1)).decode()
    lines = [
        {"type": "user", "uuid": "u1", "parentUuid": None, "sessionId": "img", "timestamp": "2026-01-01T00:00:00Z",
         "message": {"role": "user", "content": [
             {"type": "text", "text": "what is in this screenshot?"},
             {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": png}},
             {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": big}}]}},
        {"type": "assistant", "uuid": "a1", "parentUuid": "u1", "sessionId": "img", "timestamp": "2026-01-01T00:00:01Z",
         "message": {"id": "m1", "role": "assistant", "content": [
             {"type": "thinking", "thinking": "It looks like a PNG header.", "signature": "sig"},
             {"type": "text", "text": "A PNG."}]}},
    ]
    f = tmp_path / "img.jsonl"
    f.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    res = T.record(repo, T.read_transcript(f))
    tip = repo[res.branches["main"]]
    chain = []
    c = tip
    while True:
        chain.append(c)
        if not c.parent_ids:
            break
        c = repo[c.parent_ids[0]]
    kinds = [T.load_event(repo, c)["kind"] for c in reversed(chain)]
    assert kinds == ["user", "thinking", "assistant"]
    user = chain[-1]
    rec = T.load_event(repo, user)
    assert rec["images"][0]["media_type"] == "image/png" and rec["images"][0]["path"] == "image-0.png"
    assert user.tree["image-0.png"].data == base64.b64decode(png)
    assert rec["images"][1]["omitted"] and "path" not in rec["images"][1]
    assert len(user.tree) == 2  # event.json + the one kept image
    md = T.export_markdown(repo, str(tip.id))
    assert "Thinking: It looks like a PNG header." in md and "image/png" in md


def test_progress_line_parent_is_not_a_fork(repo, tmp_path: Path) -> None:
    """Shape of Claude Code >= 2.1 parallel calls (no public file has it; see SOURCES.md): the
    next call of an answer names a hook `progress` line of an earlier result as its parent.
    Not a rewind: one branch, every result after its call."""
    def line(uuid, parent, kind, content, mid=None, **kw):
        msg = {"role": kind, "content": content}
        if mid:
            msg["id"] = mid
        return {"type": kind, "uuid": uuid, "parentUuid": parent, "sessionId": "prog",
                "timestamp": f"2026-01-01T00:00:{len(uuid):02d}Z", "message": msg, **kw}

    use = lambda i: {"type": "tool_use", "id": f"t{i}", "name": "Read", "input": {"file_path": f"/f{i}"}}  # noqa: E731
    res = lambda i: {"type": "tool_result", "tool_use_id": f"t{i}", "content": f"body {i}"}  # noqa: E731
    lines = [
        line("u", None, "user", "read both files"),
        line("aa", "u", "assistant", [use(1)], "m1"),
        line("aaa", "aa", "assistant", [use(2)], "m1"),
        line("rrrr", "aa", "user", [res(1)]),
        line("rrrrr", "aaa", "user", [res(2)]),
        {"type": "progress", "uuid": "pppppp", "parentUuid": "rrrr", "toolUseID": "t1",
         "data": {"type": "hook_progress", "hookEvent": "PostToolUse"}},
        line("aaaaaaa", "rrrrr", "assistant", [{"type": "text", "text": "one more"}], "m2"),
        line("aaaaaaaa", "pppppp", "assistant", [use(3)], "m2"),
        line("rrrrrrrrr", "aaaaaaaa", "user", [res(3)]),
        line("aaaaaaaaaa", "rrrrrrrrr", "assistant", [{"type": "text", "text": "done"}], "m3"),
    ]
    f = tmp_path / "prog.jsonl"
    f.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    res_ = T.record(repo, T.read_transcript(f))
    assert sorted(res_.branches) == ["main"]
    kinds = [r["kind"] for r in T.replay(repo, res_.branches["main"])]
    assert kinds == ["user", "tool_call", "tool_call", "tool_result", "tool_result", "assistant",
                     "tool_call", "tool_result", "assistant"]


def test_a_session_without_main_opens_by_name(repo, tmp_path: Path) -> None:
    """A subagent file recorded alone has only `agent-<id>`; a session's name resolves to its
    only branch, or to the branch with the most recent event."""
    import subprocess
    import sys

    from conftest import clean_env

    res = T.record(repo, T.read_transcript(TRANSCRIPTS / "claude-daaain-3-subagent-showcol2.jsonl"))
    assert sorted(res.branches) == ["agent-showcol2"]
    entries, total = T.log(repo, res.session)
    assert total == 4 and entries[0]["id"] == res.branches["agent-showcol2"]
    assert "Survey src/jobs" in T.export_markdown(repo, res.session)
    # two branches, neither main: the latest event wins
    repo.references.create(f"{res.ref_prefix}older", str(repo[res.branches["agent-showcol2"]].parent_ids[0]))
    assert str(T.resolve(repo, res.session).id) == res.branches["agent-showcol2"]
    # and through the CLI, as a user types it
    tc = [sys.executable, "-c", "import sys; from tc_git.cli import main; sys.exit(main(sys.argv[1:]))"]
    ws = Path(repo.path).parent
    for cmd in (["events", res.session], ["markdown", res.session]):
        r = subprocess.run(tc + ["--root", str(ws), *cmd], capture_output=True, env=clean_env())
        assert r.returncode == 0 and r.stdout.strip(), r.stderr


def test_redaction_is_the_secrets_engines(repo, tmp_path: Path) -> None:
    """Tool inputs go through the secrets engine's structure-aware redaction: a credential under
    a credential-named key is redacted (keys included), placeholders are not secrets."""
    from tc_git.workspace import secrets

    real = "sk-proj-" + "Q3v9XkT2mB7pL4wR8nY1cZ6hJ0dF5gA2sE9uI3oK"
    lines = [
        {"type": "user", "uuid": "u1", "parentUuid": None, "sessionId": "red", "timestamp": "2026-01-01T00:00:00Z",
         "message": {"role": "user", "content": "configure the client"}},
        {"type": "assistant", "uuid": "a1", "parentUuid": "u1", "sessionId": "red", "timestamp": "2026-01-01T00:00:01Z",
         "message": {"id": "m1", "role": "assistant", "content": [
             {"type": "tool_use", "id": "t1", "name": "Write",
              "input": {"file_path": "/w/.env", "env": {"OPENAI_API_KEY": real, "PLACEHOLDER": "proxy-handled"}}}]}},
    ]
    f = tmp_path / "red.jsonl"
    f.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    res = T.record(repo, T.read_transcript(f))
    call = T.load_event(repo, res.branches["main"])
    assert real not in json.dumps(call) and res.redactions >= 1
    assert call["tool_input"]["env"]["PLACEHOLDER"] == "proxy-handled"
    assert call["tool_input"]["env"]["OPENAI_API_KEY"] == secrets.redact_obj({"OPENAI_API_KEY": real})["OPENAI_API_KEY"]
    out = subprocess_git_grep(repo, real)
    assert out == "", "the credential became an object"


def subprocess_git_grep(repo, needle: str) -> str:
    import subprocess

    from conftest import clean_env

    objs = subprocess.run(["git", f"--git-dir={repo.path}", "cat-file", "--batch-all-objects", "--batch"],
                          capture_output=True, env=clean_env()).stdout
    return needle if needle.encode() in objs else ""


# -- the shapes that only synthetic files had, now from real ones (SOURCES.md) ----------------

def test_real_parallel_calls_under_hook_progress_lines(repo) -> None:
    """claude-entire-1 (Claude Code 2.1.22, PostToolUse hooks): four parallel calls whose
    results are interleaved with `hook_progress` lines, and answers whose parent is a progress
    line. One branch, each result right after the calls of its batch, no fork."""
    path = TRANSCRIPTS / "claude-entire-1.jsonl"
    raw = _lines(path)
    by = {e["uuid"]: e for e in raw if e.get("uuid")}
    under_progress = [e for e in raw if e.get("type") == "assistant"
                      and by.get(e.get("parentUuid"), {}).get("type") == "progress"]
    assert len(under_progress) >= 2 and sum(1 for e in raw if e.get("type") == "progress") >= 8
    res = T.record(repo, T.read_transcript(path))
    assert sorted(res.branches) == ["main"]
    chain = T.replay(repo, res.branches["main"])
    kinds = [r["kind"] for r in chain]
    first = kinds.index("tool_call")
    assert kinds[first:first + 8] == ["tool_call"] * 4 + ["tool_result"] * 4
    calls = [r["call_id"] for r in chain[first:first + 4]]
    assert sorted(r["call_id"] for r in chain[first + 4:first + 8]) == sorted(calls)


def test_real_exit_and_resume_in_one_file(repo) -> None:
    """claude-entire-2 (Claude Code 2.1.17): `/exit`, then `claude --resume` appended to the same
    file (a synthetic assistant line, SessionStart:resume hook lines, the next prompt), and a
    second `/exit`. One connected history: the prompt after the resume follows what was said
    before the exit."""
    path = TRANSCRIPTS / "claude-entire-2.jsonl"
    raw = _lines(path)
    exits = [i for i, e in enumerate(raw) if "<command-name>/exit" in str((e.get("message") or {}).get("content"))]
    resumes = [i for i, e in enumerate(raw) if (e.get("data") or {}).get("hookName") == "SessionStart:resume"]
    assert len(exits) == 2 and resumes and exits[0] < resumes[0] < exits[1]
    assert len({e.get("sessionId") for e in raw if e.get("sessionId")}) == 1
    res = T.record(repo, T.read_transcript(path))
    assert sorted(res.branches) == ["main"]
    chain = T.replay(repo, res.branches["main"])
    texts = [r.get("text") or "" for r in chain]
    before = next(i for i, t in enumerate(texts) if "Catch you later" in t)  # the first /exit's answer
    after = texts.index("linting is failing now")
    assert before < after and all(r["kind"] != "user" for r in chain[before + 1:after])


def test_real_compaction_whose_parents_are_not_in_the_file(repo) -> None:
    """claude-entire-4 (Claude Code 2.1.37, an excerpt of a real session): an auto-compaction hit
    while an Edit call was in flight. Its `compact_boundary` names a logical parent that no line
    of the file has (nor does the hook line right before it), the Edit never gets a result, and
    the excerpt's first line hangs off a line left out. One connected history all the same: the
    work before the compaction, the summary, and the work after it, on one chain, in the Markdown."""
    path = TRANSCRIPTS / "claude-entire-4.jsonl"
    raw = _lines(path)
    uuids = {e["uuid"] for e in raw if e.get("uuid")}
    boundary = next(e for e in raw if e.get("subtype") == "compact_boundary")
    assert boundary["parentUuid"] is None and boundary["logicalParentUuid"] not in uuids
    assert sum(1 for e in raw if e.get("parentUuid") and e["parentUuid"] not in uuids) == 2  # first line, hook
    edits = [b["id"] for e in raw if e.get("type") == "assistant" for b in e["message"]["content"]
             if b.get("type") == "tool_use" and b["name"] == "Edit"]
    assert len(edits) == 1 and edits[0] not in json.dumps(raw[raw.index(boundary):])
    res = T.record(repo, T.read_transcript(path))
    assert sorted(res.branches) == ["main"]
    chain = T.replay(repo, res.branches["main"])
    texts = [r.get("text") or "" for r in chain]
    before = next(i for i, t in enumerate(texts) if "Now apply the fixes" in t)
    summary = next(i for i, r in enumerate(chain) if r["kind"] == "summary")
    after = next(i for i, t in enumerate(texts) if "continue fixing the PR review feedback" in t)
    edit = next(i for i, r in enumerate(chain) if r.get("call_id") == edits[0])
    assert before < edit < summary < after
    md = " ".join(T.export_markdown(repo, res.branches["main"]).split())
    assert "Now apply the fixes" in md and "continue fixing the PR review feedback" in md


def test_real_pasted_image_is_kept_byte_for_byte(repo, tmp_path: Path) -> None:
    """claude-entire-3 (Claude Code 2.1.29): a pasted PNG (a diagram) as a user line. Its bytes
    are a blob in the event's tree, with its media type; the Markdown names it; the session file
    written back carries the same base64."""
    import base64

    path = TRANSCRIPTS / "claude-entire-3.jsonl"
    src = next(b for e in _lines(path) if e.get("type") == "user"
               for b in (e["message"]["content"] if isinstance(e["message"]["content"], list) else [])
               if b.get("type") == "image")
    data = base64.b64decode(src["source"]["data"])
    res = T.record(repo, T.read_transcript(path))
    tip = res.branches["main"]
    user = next(c for c in repo.walk(repo[tip].id) if T.load_event(repo, c)["kind"] == "user")
    rec = T.load_event(repo, user)
    assert rec["images"][0]["media_type"] == "image/png" and user.tree[rec["images"][0]["path"]].data == data
    assert "image/png" in T.export_markdown(repo, tip)
    from tc_git.trajectory.sessionfile import claude_lines

    lines = claude_lines(T.replay(repo, tip, image_data=True), "00000000-0000-4000-8000-00000000feed", "/w")
    blocks = [b for ln in lines for b in (ln.get("message", {}).get("content") or [] if isinstance(
        ln.get("message", {}).get("content"), list) else []) if b.get("type") == "image"]
    assert [b["source"]["data"] for b in blocks] == [src["source"]["data"]]


def test_real_codex_web_search_images_and_compaction(repo) -> None:
    """codex-localpush-3 (Codex Desktop 0.104, sanitised upstream): `web_search_call` items
    (no call id), 13 prompts with pasted images (their data replaced by a placeholder upstream:
    kept as a reference), and a real `compacted` line whose replacement
    history (39 messages + the encrypted compaction item) is kept whole."""
    path = TRANSCRIPTS / "codex-localpush-3.jsonl"
    raw = _lines(path)
    searches = [e["payload"] for e in raw if (e.get("payload") or {}).get("type") == "web_search_call"]
    compacted = [e["payload"] for e in raw if e.get("type") == "compacted"]
    assert len(searches) == 7 and len(compacted) == 1
    res = T.record(repo, T.read_transcript(path))
    chain = T.replay(repo, res.branches["main"])
    web = [r for r in chain if r["kind"] == "tool_call" and r.get("tool_name") == "web_search"]
    assert [r.get("tool_input") for r in web] == [s.get("action") for s in searches]
    summary = next(r for r in chain if r["kind"] == "summary")
    assert summary["history"] == compacted[0]["replacement_history"] and summary["text"] == compacted[0]["message"]
    pasted = sum(1 for e in raw if (e.get("payload") or {}).get("type") == "user_message" and e["payload"].get("images"))
    assert pasted == 13 and sum(1 for r in chain if r["kind"] == "user" and r.get("images")) == pasted
