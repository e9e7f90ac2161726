"""Line provenance (tc-git blame / why), judged against an independent replay of the session.

A session is driven as Claude Code drives one: each tool call's effect is applied to the
workspace, then the real hook entry (`python -m tc_git.hooks`) gets the PostToolUse payload
(agent-formats.md §1.3); a person edits files in between, outside any call. The transcript the
client would have written (user prompts, assistant text, tool_use / tool_result lines) is
recorded. The expected owner of every line comes from replaying that transcript's inputs (and
the person's edits) in the test itself, never from tc-git's records.
"""
from __future__ import annotations

import difflib
import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import clean_env, fsck, git

HOOK = [sys.executable, "-P", "-m", "tc_git.hooks"]
SID = "5d0c8a2e-7f1b-4c3e-9a61-0e2f3b4c5d6e"


class Session:
    """Writes a Claude Code transcript while it drives the workspace, and keeps the replay: each
    file's lines with the id of the call that wrote them (None: written outside any call)."""

    def __init__(self, root: Path, transcript: Path):
        self.root, self.path = root, transcript
        self.lines: list[dict] = []
        self.parent: str | None = None
        self.n = 0
        self.t = 0
        self.owners: dict[str, list[tuple[str, str | None]]] = {}

    def _line(self, typ: str, message: dict, **kw) -> str:
        self.n += 1
        self.t += 1
        uid = f"00000000-0000-4000-8000-{self.n:012d}"
        rec = {"parentUuid": self.parent, "isSidechain": False, "userType": "external", "cwd": str(self.root),
               "sessionId": SID, "version": "2.1.14", "gitBranch": "main", "type": typ, "message": message,
               "uuid": uid, "timestamp": f"2026-01-21T06:{self.t // 60:02d}:{self.t % 60:02d}.000Z", **kw}
        self.lines.append(rec)
        self.parent = uid
        self.path.write_text("".join(json.dumps(x) + "\n" for x in self.lines))
        return uid

    def prompt(self, text: str) -> None:
        self._line("user", {"role": "user", "content": text})

    def say(self, text: str) -> None:
        self._line("assistant", {"model": "claude-opus-4-5", "id": f"msg_{self.n}", "type": "message",
                                 "role": "assistant", "content": [{"type": "text", "text": text}]})

    # the replay: the file as lines with owners, updated by the content a call or a person left
    def _replay(self, rel: str, owner: str | None) -> None:
        new = (self.root / rel).read_text().splitlines(keepends=True)
        old = self.owners.get(rel, [])
        out: list[tuple[str, str | None]] = []
        sm = difflib.SequenceMatcher(None, [t for t, _ in old], new, autojunk=False)
        for tag, i1, i2, j1, j2 in sm.get_opcodes():
            out += old[i1:i2] if tag == "equal" else [(t, owner) for t in new[j1:j2]]
        self.owners[rel] = out

    def person(self, rel: str, edit) -> None:
        f = self.root / rel
        f.write_text(edit(f.read_text() if f.exists() else ""))
        self._replay(rel, None)

    def call(self, cid: str, name: str, inp: dict, touched: list[str], hook: bool = True) -> None:
        """The assistant's tool_use, its effect applied from the input, the hook, the result."""
        self._line("assistant", {"model": "claude-opus-4-5", "id": f"msg_{self.n}", "type": "message",
                                 "role": "assistant", "content": [{"type": "tool_use", "id": cid, "name": name,
                                                                   "input": inp}]})
        if name == "Write":
            Path(inp["file_path"]).write_text(inp["content"])
        elif name in ("Edit", "MultiEdit"):
            f = Path(inp["file_path"])
            text = f.read_text()
            for ed in inp.get("edits") or [inp]:
                assert ed["old_string"] in text
                text = text.replace(ed["old_string"], ed["new_string"], 1)
            f.write_text(text)
        elif name == "Bash":
            subprocess.run(["sh", "-c", inp["command"]], cwd=self.root, check=True)
        for rel in touched:
            self._replay(rel, cid)
        if hook:
            self.hook(cid, name, inp)
        self._line("user", {"role": "user", "content": [{"tool_use_id": cid, "type": "tool_result",
                                                         "content": "ok"}]},
                   toolUseResult={"success": True})

    def hook(self, cid: str, name: str, inp: dict) -> None:
        ev = {"session_id": SID, "transcript_path": str(self.path), "cwd": str(self.root),
              "hook_event_name": "PostToolUse", "permission_mode": "default", "tool_name": name,
              "tool_input": inp, "tool_response": {"success": True}, "tool_use_id": cid}
        r = subprocess.run(HOOK + ["post-tool-use"], input=json.dumps(ev).encode(), capture_output=True,
                           env=clean_env(), timeout=60)
        assert r.returncode == 0 and r.stderr == b"", r.stderr


def tc(root: Path, *args: str) -> dict:
    r = subprocess.run([sys.executable, "-m", "tc_git.cli", "-C", str(root), "--json", *args],
                       capture_output=True, env=clean_env(), timeout=120)
    assert r.returncode == 0, r.stderr.decode() + r.stdout.decode()
    return json.loads(r.stdout)


def owners_of(blame: dict) -> list[str | None]:
    out: list[str | None] = []
    for h in blame["hunks"]:
        call = (blame["origins"][h["id"]].get("tool_call") or {}).get("id") if h["by"] == "agent" else None
        out += [call] * (h["end"] - h["start"] + 1)
    return out


def blame(root: Path, path: str, **kw) -> dict:
    from tc_git.engine import Engine

    return Engine(root).blame(path, **kw)


def why(root: Path, target: str, **kw) -> dict:
    from tc_git.engine import Engine

    path, _, line = target.rpartition(":")
    return Engine(root).why(path, int(line), **kw)


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    """One session for the module's tests (about 10 s of hooks and recording); they only read it
    (recomputed notes are the same bytes)."""
    from tc_git.engine import Engine

    tmp_path = tmp_path_factory.mktemp("provenance")
    root = tmp_path / "ws"
    (root / "src").mkdir(parents=True)
    (root / "src" / "app.py").write_text("import os\n\n\ndef main():\n    print('app')\n")
    e = Engine(root)
    e.init("provenance", goal="know who wrote each line")
    e.save("the person's start")
    s = Session(root, tmp_path / f"{SID}.jsonl")
    s._replay("src/app.py", None)
    src = str(root / "src")
    s.prompt("Add a greet module with a greet(name) function")
    s.say("I'll write src/greet.py with greet().")
    s.call("toolu_01Write", "Write", {"file_path": f"{src}/greet.py",
                                      "content": "def greet(name):\n    return f'hello {name}'\n"}, ["src/greet.py"])
    s.prompt("Make app.py greet instead of printing app")
    s.say("Now app.py calls greet.")
    s.call("toolu_02Edit", "Edit", {"file_path": f"{src}/app.py", "old_string": "    print('app')\n",
                                    "new_string": "    print(greet('app'))\n"}, ["src/app.py"])
    # the person adds a line by hand; the next call's capture picks it up with its own change
    s.person("src/app.py", lambda t: t + "# checked by hand\n")
    s.prompt("Import greet in app.py")
    s.call("toolu_03Edit", "Edit", {"file_path": f"{src}/app.py", "old_string": "import os\n",
                                    "new_string": "import os\nfrom greet import greet\n"}, ["src/app.py"])
    s.prompt("Add a version to greet.py from the shell, then a docstring and a shout() helper")
    s.call("toolu_04Bash", "Bash", {"command": "printf 'VERSION = 2\\n' >> src/greet.py",
                                    "description": "append a version"}, ["src/greet.py"])
    s.say("Two edits to greet.py in one call.")
    s.call("toolu_05Multi", "MultiEdit", {"file_path": f"{src}/greet.py", "edits": [
        {"old_string": "def greet(name):\n", "new_string": "def greet(name):\n    \"\"\"Say hello.\"\"\"\n"},
        {"old_string": "VERSION = 2\n", "new_string": "VERSION = 2\n\n\ndef shout(name):\n    return greet(name).upper()\n"},
    ]}, ["src/greet.py"])
    # the person edits again and saves a step: those lines belong to no call
    s.person("src/greet.py", lambda t: t.replace("VERSION = 2", "VERSION = 3"))
    e.save("the person's version bump")
    s.prompt("Write the README")
    s.call("toolu_06Write", "Write", {"file_path": str(root / "README.md"), "content": "# greet\n\nSays hello.\n"},
           ["README.md"])
    # not captured yet: a line the person typed after the last record
    s.person("README.md", lambda t: t + "Draft.\n")
    tc(root, "record", str(s.path))
    yield s
    fsck(root / ".checkpoints")


def test_every_line_is_attributed_to_the_call_that_wrote_it_or_to_nobody(session):
    s = session
    for rel in ("src/app.py", "src/greet.py", "README.md"):
        b = tc(s.root, "blame", rel) if rel == "src/app.py" else blame(s.root, rel)
        assert b["lines_total"] == len(s.owners[rel])
        assert owners_of(b) == [o for _t, o in s.owners[rel]], (rel, b)
        assert b["shares"]["agent"] == sum(1 for _t, o in s.owners[rel] if o)
    app = blame(s.root, "src/app.py")
    hand = next(h for h in app["hunks"] if h["first"] == "# checked by hand")
    assert hand["by"] == "unattributed" and "not written by it" in hand["why"]  # caught in toolu_03's drift
    readme = blame(s.root, "README.md")
    assert readme["at"] == "workspace" and readme["hunks"][-1]["id"] == "workspace"
    # at a point: the file as that drift left it
    early = blame(s.root, "src/app.py", at="d0002")
    assert [h["by"] for h in early["hunks"]] == ["unattributed", "agent"]
    # shares in log and show: what each drift's call added, each step with its drifts
    from tc_git.engine import Engine

    e = Engine(s.root)
    by_id = {x["id"]: x for x in e.log(limit=100)}
    assert by_id["d0001"]["authored"] == {"agent": 2, "other": 0}  # toolu_01Write: greet.py's two lines
    assert by_id["d0002"]["authored"] == {"agent": 1, "other": 0}
    assert by_id["s0001"]["authored"] == {"agent": 0, "other": 5}  # the person's app.py
    shown = e.show()
    assert shown["steps"][1]["authored"]["other"] == 1  # s0002: the person's VERSION = 3
    after = [x for x in by_id.values() if x["kind"] == "drift" and x["id"] > "d0005"]  # after the last step
    assert [x["id"] for x in after] == ["d0006"]
    assert shown["authored"] == {k: sum(x["authored"][k] for x in shown["steps"] + after) for k in ("agent", "other")}


def test_a_page_of_log_reads_only_its_shares_and_finds_the_same(session, monkeypatch):
    """`log` asks for the shares of its page only (read from the head down, not the whole task)
    and gets for each commit what the whole-task computation gives; a missing note makes only
    its own step's share unknown, in both."""
    from tc_git.engine import Engine
    from tc_git.timeline import provenance

    s_root = session.root
    blame(s_root, "src/app.py")  # (the blame notes are written by the first blame)
    e = Engine(s_root)
    tl = e._timeline()
    whole, _total = provenance.line_shares(e.repo, tl)
    assert len(whole) >= 4
    oids = [str(x.oid) for x in tl.walk()]
    for n in range(1, len(oids) + 1):
        page, none = provenance.line_shares(e.repo, tl, only=set(oids[:n]))
        assert none is None and page == {k: v for k, v in whole.items() if k in oids[:n]}, n
    read: list = []
    real = provenance._added
    monkeypatch.setattr(provenance, "_added", lambda b, oid: read.append(oid) or real(b, oid))
    assert [x["id"] for x in Engine(s_root).log(limit=1)] and len(read) < len(oids)
    steps = [x for x in tl.walk() if x.kind == "step"]  # newest first
    step, later = steps[-1], steps[-2]
    monkeypatch.setattr(provenance, "_added", lambda b, oid: None if oid == str(step.oid) else real(b, oid))
    whole, total = provenance.line_shares(e.repo, tl)
    assert total is None and str(step.oid) not in whole
    assert str(later.oid) in whole  # the next step's own span is whole
    assert provenance.line_shares(e.repo, tl, only=set(oids))[0] == whole


def test_why_names_the_prompt_the_words_and_the_call(session):
    s = session
    app = (s.root / "src" / "app.py").read_text().splitlines()
    n = app.index("    print(greet('app'))") + 1
    w = why(s.root, f"src/app.py:{n}")
    assert w["tool_call"]["id"] == "toolu_02Edit" and w["tool_call"]["name"] == "Edit"
    assert w["prompt"] == "Make app.py greet instead of printing app"
    assert w["said"] == "Now app.py calls greet."
    assert w["call"].startswith("Edit ") and w["id"].startswith("d")
    from tc_git.engine import Engine

    ev = Engine(s.root).trajectory_log(w["event"], limit=1)
    assert ev["events"][0]["kind"] == "tool_call"
    bash = (s.root / "src" / "greet.py").read_text().splitlines().index("VERSION = 3") + 1
    w = why(s.root, f"src/greet.py:{bash}")
    assert w["unattributed"].startswith("saved with no recorded tool call") and w["kind"] == "step"
    shout = (s.root / "src" / "greet.py").read_text().splitlines().index("def shout(name):") + 1
    w = why(s.root, f"src/greet.py:{shout}")
    assert w["tool_call"]["id"] == "toolu_05Multi" and w["said"] == "Two edits to greet.py in one call."
    human = subprocess.run([sys.executable, "-m", "tc_git.cli", "-C", str(s.root), "why", f"src/app.py:{n}"],
                           capture_output=True, text=True, env=clean_env())
    assert "prompt: Make app.py greet instead of printing app" in human.stdout, human.stdout


def test_stock_git_reads_the_attribution_and_recomputing_gives_the_same_bytes(session):
    s = session
    store = s.root / ".checkpoints"
    blame(s.root, "src/greet.py")
    head = git(store, "for-each-ref", "--format=%(objectname)", "refs/checkpoints/tasks/").decode().split()[0]
    shown = git(store, "notes", "--ref=checkpoints-blame", "show", head)
    note = json.loads(shown)
    assert note["id"] == "d0006" and note["by"]["tool_call"]["id"] == "toolu_06Write"
    assert note["files"]["README.md"]["added"] == 3
    all_notes = git(store, "notes", "--ref=checkpoints-blame", "list").decode().split("\n")
    before = {ln.split()[1]: ln.split()[0] for ln in all_notes if ln}
    assert len(before) == len(git(store, "rev-list", head).decode().split())  # every commit of the chain
    git(store, "update-ref", "-d", "refs/notes/checkpoints-blame")
    blame(s.root, "src/app.py")
    after = {ln.split()[1]: ln.split()[0] for ln in
             git(store, "notes", "--ref=checkpoints-blame", "list").decode().split("\n") if ln}
    assert after == before


def test_the_attribution_travels_in_a_bundle_and_through_a_remote(session, tmp_path):
    import shutil

    from tc_git.engine import Engine

    here = tmp_path / "here"
    shutil.copytree(session.root, here, symlinks=True)  # export records unsaved work: leave the module's alone
    store = here / ".checkpoints"
    task = git(store, "for-each-ref", "--format=%(refname:lstrip=3)", "refs/checkpoints/tasks/").decode().split("/")[0]
    Engine(here).switch(task)  # the active task is kept per workspace path
    first = blame(here, "src/app.py", at="d0006")
    notes = git(store, "notes", "--ref=checkpoints-blame", "list").decode()
    out = Engine(here).export(str(tmp_path / "task.bundle"))
    git(tmp_path, "bundle", "verify", out["path"])
    assert "refs/notes/checkpoints-blame" in out["refs"]
    there = tmp_path / "there"
    there.mkdir()
    Engine(there).import_(out["path"])
    other = there / ".checkpoints"
    for line in notes.split("\n"):
        if line:
            blob, commit = line.split()
            assert git(other, "notes", "--ref=checkpoints-blame", "show", commit) == git(store, "cat-file", "blob", blob)
    assert Engine(there).blame("src/app.py", at="d0006") == first
    remote = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", str(remote))
    pushed = Engine(here).push(str(remote))
    assert "refs/notes/checkpoints-blame" in pushed["pushed"]
    head = first["commit"]
    assert json.loads(git(remote, "notes", "--ref=checkpoints-blame", "show", head))["id"] == "d0006"
    fsck(remote)
    fsck(other)


@pytest.mark.anyio
@pytest.mark.filterwarnings("ignore:.*(deprecated|removed as of):Warning")
async def test_tc_blame_over_mcp_stays_within_8_kb(tmp_path, tc_env_clean):
    """A file whose lines alternate between the person and an Edit call: more hunks than fit, so
    the answer is cut at 8 KB and says where to go on; `line` explains one line."""
    from mcp import Client

    from tc_git.engine import Engine
    from tc_git.mcp.server import build_server

    root = tmp_path / "ws"
    root.mkdir()
    f = root / "big.txt"
    f.write_text("".join(f"line {i}\n" for i in range(3000)))
    e = Engine(root)
    e.init("big", goal="blame within budget")
    e.save("the person's file")
    f.write_text("".join(f"line {i}{' edited' if i % 2 else ''}\n" for i in range(3000)))
    e.capture(title="Edit big.txt", tool_call={"id": "toolu_big", "name": "Edit", "agent": "claude",
                                                "session": "s-big", "paths": ["big.txt"]})
    async with Client(build_server(watch=False), mode="legacy") as c:
        r = await c.call_tool("tc_blame", {"root": str(root), "path": "big.txt"})
        assert not r.is_error, r.content
        body = r.structured_content
        text = r.content[0].text
        assert len(json.dumps(text).encode()) + len(json.dumps(body, separators=(",", ":")).encode()) <= 8192
        assert body["lines_total"] == 3000 and body["shares"] == {"agent": 1500, "other": 1500}
        assert body["next_start"] == body["hunks"][-1]["end"] + 1
        assert [h["by"] for h in body["hunks"][:2]] == ["unattributed", "agent"]
        more = (await c.call_tool("tc_blame", {"root": str(root), "path": "big.txt",
                                               "start": body["next_start"]})).structured_content
        assert more["hunks"][0]["start"] == body["next_start"]
        one = (await c.call_tool("tc_blame", {"root": str(root), "path": "big.txt", "line": 2})).structured_content
        assert one["tool_call"]["id"] == "toolu_big" and one["text"] == "line 1 edited"
        bad = await c.call_tool("tc_blame", {"root": str(root), "path": "../etc/passwd"})
        assert bad.is_error and "inside the workspace" in bad.content[0].text


def test_once_blamed_each_record_writes_its_note_the_same_as_a_recomputation(tmp_path):
    from tc_git.engine import Engine

    root = tmp_path / "ws"
    root.mkdir()
    f = root / "a.txt"
    f.write_text("one\ntwo\n")
    e = Engine(root)
    e.init("follow", goal="notes kept as commits are written")
    e.save("start")
    store = root / ".checkpoints"
    assert git(store, "notes", "--ref=checkpoints-blame", "list", check=False) == b""  # nothing until blamed
    e.blame("a.txt")
    f.write_text("one\nTWO\nthree\n")
    e.capture(title="Edit a.txt", tool_call={"id": "toolu_f", "name": "Edit", "agent": "claude", "session": "s",
                                             "paths": ["a.txt"]})
    f.write_text("zero\none\nTWO\nthree\n")
    e.save("by hand")
    kept = git(store, "notes", "--ref=checkpoints-blame", "list").decode().split("\n")
    head = git(store, "for-each-ref", "--format=%(objectname)", "refs/checkpoints/tasks/").decode().split()[0]
    assert any(line.endswith(head) for line in kept)  # written by the save itself
    note = json.loads(git(store, "notes", "--ref=checkpoints-blame", "show", head))
    assert note["files"]["a.txt"]["added"] == 1 and "unattributed" in note["by"]
    git(store, "update-ref", "-d", "refs/notes/checkpoints-blame")
    e.blame("a.txt")
    assert sorted(git(store, "notes", "--ref=checkpoints-blame", "list").decode().split("\n")) == sorted(kept)
    assert [h["by"] for h in e.blame("a.txt")["hunks"]] == ["unattributed", "unattributed", "agent"]
    fsck(store)


def test_a_restore_keeps_the_attribution_of_the_point_it_brings_back(tmp_path):
    from tc_git.engine import Engine

    root = tmp_path / "ws"
    root.mkdir()
    f = root / "a.txt"
    f.write_text("one\n")
    e = Engine(root)
    e.init("restore", goal="lines brought back keep their origin")
    e.save("start")
    f.write_text("one\nby the call\n")
    e.capture(title="Write a.txt", tool_call={"id": "toolu_r", "name": "Write", "agent": "claude", "session": "s",
                                              "paths": ["a.txt"]})
    e.save("the call's step")
    f.write_text("something else\n")
    e.save("rewritten by hand")
    r = e.restore(index=2, apply=True)
    assert r["applied"] and f.read_text() == "one\nby the call\n"
    b = e.blame("a.txt")
    assert b["at"].startswith("r") or b["at"].startswith("d")  # the restore's commit (or its drift)
    # "one" was there when the task began: the baseline's (step 0, init)
    assert [(h["id"], h["by"]) for h in b["hunks"]] == [("s0000", "unattributed"), ("d0001", "agent")]
    assert b["origins"]["d0001"]["tool_call"]["id"] == "toolu_r"


def test_codex_apply_patch_and_parallel_claude_calls_through_the_hook(tmp_path):
    """Codex's apply_patch (agent-formats.md §3.3) and two Claude calls run in parallel (both
    edits made before either PostToolUse fires): each line goes to the call that wrote it."""
    from tc_git.engine import Engine

    root = tmp_path / "ws"
    root.mkdir()
    (root / "a.py").write_text("x = 1\n")
    (root / "b.py").write_text("y = 1\n")
    e = Engine(root)
    e.init("clients", goal="codex and parallel calls")
    e.save("start")

    def hook(ev: dict, *args: str) -> None:
        r = subprocess.run(HOOK + ["post-tool-use", *args], input=json.dumps(ev).encode(), capture_output=True,
                           env=clean_env(), timeout=120)
        assert r.returncode == 0 and r.stderr == b"", r.stderr

    (root / "a.py").write_text("x = 2\nz = 3\n")
    patch = "*** Begin Patch\n*** Update File: a.py\n@@\n-x = 1\n+x = 2\n+z = 3\n*** End Patch\n"
    hook({"session_id": "019a-codex", "transcript_path": None, "cwd": str(root), "hook_event_name": "PostToolUse",
          "model": "gpt-5-codex", "permission_mode": "default", "turn_id": "turn-1", "tool_name": "apply_patch",
          "tool_input": {"command": patch}, "tool_response": "Success", "tool_use_id": "call_9"}, "--agent", "codex")
    (root / "a.py").write_text("x = 2\nz = 3\nfrom_a = 1\n")  # two parallel calls: both files first,
    (root / "b.py").write_text("y = 1\nfrom_b = 1\n")  # then their hooks, in order
    for cid, name in (("toolu_pa", "a.py"), ("toolu_pb", "b.py")):
        hook({"session_id": SID, "transcript_path": str(tmp_path / "t.jsonl"), "cwd": str(root),
              "hook_event_name": "PostToolUse", "permission_mode": "default", "tool_name": "Edit",
              "tool_input": {"file_path": str(root / name), "old_string": "", "new_string": ""},
              "tool_response": {"success": True}, "tool_use_id": cid})
    a, b = e.blame("a.py"), e.blame("b.py")
    calls = [(a["origins"][h["id"]].get("tool_call") or {}).get("id") for h in a["hunks"]]
    assert calls == ["call_9", "toolu_pa"] and [h["end"] for h in a["hunks"]] == [2, 3]
    assert a["origins"][a["hunks"][0]["id"]]["tool_call"] == {"id": "call_9", "name": "apply_patch", "agent": "codex",
                                                            "session": "019a-codex"}
    assert "not recorded yet" in a["origins"][a["hunks"][0]["id"]]["conversation"]
    assert [(h["by"], (b["origins"][h["id"]].get("tool_call") or {}).get("id")) for h in b["hunks"]] == \
        [("unattributed", None), ("agent", "toolu_pb")]
    fsck(root / ".checkpoints")
