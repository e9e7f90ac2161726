"""The trajectory and remote tools of tc-mcp through the in-memory client (real engine, real
stores, real fixture transcripts): results match their output schemas, and bad input is an
isError result while the server keeps answering."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import jsonschema
import pytest
from conftest import write
from mcp import Client

from tc_git.mcp.server import build_server

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("fsck_after"),
              pytest.mark.filterwarnings("ignore:.*(deprecated|removed as of):Warning")]

from conftest import TRANSCRIPTS as FIXTURES  # noqa: E402


@pytest.fixture(autouse=True)
def _env(tc_env_clean):
    """No TC_* / GIT_* from the caller; no export into a user repository."""


def fixture(name: str) -> str:
    return os.path.abspath(os.path.join(FIXTURES, name))


async def test_trajectory_tools_end_to_end(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    write(ws, "app.py", "v1\n")
    server = build_server(watch=False)
    async with Client(server, mode="legacy") as c:
        schemas = {t.name: t.output_schema for t in (await c.list_tools()).tools}

        async def ok(tool, **args):
            r = await c.call_tool(tool, {"root": str(ws), **args})
            assert not r.is_error, r.content[0].text
            if schemas[tool]:  # free-form results (events, messages) declare none
                jsonschema.validate(r.structured_content, schemas[tool])
            return r.structured_content

        async def err(tool, **args):
            r = await c.call_tool(tool, {"root": str(ws), **args})
            assert r.is_error and r.structured_content is None, r
            return r.content[0].text

        await ok("tc_init", name="conversation")
        await ok("tc_save", title="v1")
        rec = await ok("tc_record", transcript=fixture("claude-daaain-1.jsonl"), milestone="first")
        assert rec["events"] == 12 and set(rec["branches"]) >= {"main"} and len(rec["branches"]) == 2
        assert rec["milestone"]["code_commit"]  # linked to the code of that moment
        again = await ok("tc_record", transcript=fixture("claude-daaain-1.jsonl"))
        assert again["new_commits"] == 0 and again["branches"] == rec["branches"]

        write(ws, "app.py", "v2\n")  # the code moves on; the next milestone captures it
        steps = [{"role": "user", "content": "make it v2"}, {"role": "assistant", "content": "done: v2"}]
        gen = await ok("tc_record", steps=steps, session="s2", milestone="second")
        assert gen["events"] == 2 and gen["milestone"]["code_commit"] != rec["milestone"]["code_commit"]

        listed = await ok("tc_sessions")
        assert {m["name"] for m in listed["milestones"]} == {"first", "second"}
        assert len(listed["sessions"]) == 2

        ev = await ok("tc_events", point="first", limit=3)
        assert ev["total"] == 10 and len(ev["events"]) == 3 and ev["next_offset"] == 3

        md = await ok("tc_markdown", point="first")
        assert "Start" in md["markdown"] and md["bytes"] > 100

        br = await ok("tc_branch", name="try-again", at="first")
        assert br["ref"].endswith("/try-again") and br["at"] == rec["milestone"]["event"]

        d = await ok("tc_trajectory_diff", a="first", b="second")
        assert d["base"] is None and d["code"]["files"] == [{"path": "app.py", "status": "M"}]

        rp = await ok("tc_replay", point="second")
        assert [m["role"] for m in rp["messages"]] == ["user", "assistant"]

        co = await ok("tc_checkout", point="first", restore_code=True)
        assert co["restore"]["applied"] is False and co["restore"]["plan"]["to_replace"] == ["app.py"]
        assert (ws / "app.py").read_text() == "v2\n"  # preview only
        co = await ok("tc_checkout", point="first", restore_code=True, apply=True)
        assert (ws / "app.py").read_text() == "v1\n" and co["restore"]["recovered"]

        assert "no milestone, session or event" in await err("tc_events", point="nope")
        assert "exactly one of transcript" in await err("tc_record")
        assert "not in a git repository" in await err("tc_push")
        await c.send_ping()


async def test_push_and_pull_through_a_bare_remote(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    write(ws, "f", "1\n")
    remote = tmp_path / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", str(remote)], check=True)
    async with Client(build_server(watch=False), mode="legacy") as c:
        async def ok(tool, root, **args):
            r = await c.call_tool(tool, {"root": str(root), **args})
            assert not r.is_error, r.content[0].text
            return r.structured_content

        t = (await ok("tc_init", ws, name="shared"))["task_id"]
        await ok("tc_save", ws, title="one")
        await ok("tc_push", ws, remote=str(remote))
        refs = subprocess.run(["git", "--git-dir", str(remote), "for-each-ref", "--format=%(refname)"],
                              capture_output=True, text=True, check=True).stdout.split()
        assert f"refs/checkpoints/tasks/{t}/head" in refs and "refs/notes/checkpoints" in refs
        other = tmp_path / "other"
        other.mkdir()
        await ok("tc_pull", other, remote=str(remote))
        assert f"refs/checkpoints/tasks/{t}/head" in subprocess.run(
            ["git", "--git-dir", str(other / ".checkpoints"), "for-each-ref", "--format=%(refname)"],
            capture_output=True, text=True, check=True).stdout.split()
        # a remote that refuses part of a push: an isError result naming it, nothing applied
        hook = remote / "hooks" / "update"
        hook.write_text('#!/bin/sh\ncase "$1" in refs/notes/*) exit 1;; esac\n')
        hook.chmod(0o755)
        write(ws, "f", "2\n")
        await ok("tc_save", ws, title="two")
        r = await c.call_tool("tc_push", {"root": str(ws), "remote": str(remote)})
        assert r.is_error and "refs/notes/checkpoints" in r.content[0].text, r.content


async def test_trajectory_tools_see_the_user_level_store(tmp_path, monkeypatch):
    """Sessions the hooks recorded where a project had no store (the user-level store) are seen
    by the MCP tools from that project: listed, readable, exportable, resumable; in a project
    with its own store, beside that store's sessions. A point neither store has is the
    workspace's own error."""
    from tc_git.trajectory.userstore import record_session

    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "claude"))
    proj, other = tmp_path / "proj", tmp_path / "other"
    proj.mkdir()
    other.mkdir()
    mine = record_session(fixture("claude-daaain-1.jsonl"), proj, session="11111111-1111-4111-8111-111111111111")
    record_session(fixture("claude-drmaciver-1.jsonl"), other)  # another project's session
    server = build_server(watch=False)
    async with Client(server, mode="legacy") as c:
        async def ok(tool, root=proj, **args):
            r = await c.call_tool(tool, {"root": str(root), **args})
            assert not r.is_error, r.content[0].text
            return r.structured_content

        listed = await ok("tc_sessions")
        assert [(s["session"], s["store"]) for s in listed["sessions"]] == [(mine["session"], "user")]
        ev = await ok("tc_events", point=mine["session"], limit=100)
        assert ev["store"] == "user" and ev["total"] == len(ev["events"]) > 0
        md = await ok("tc_markdown", point=mine["session"])
        assert md["store"] == "user" and "Second attempt" in md["markdown"]
        rp = await ok("tc_replay", point=mine["session"])
        assert rp["store"] == "user" and rp["messages"][0]["role"] == "user"
        co = await ok("tc_checkout", point=f"{mine['session']}/main")
        assert co["store"] == "user" and co["event"] == mine["branches"]["main"]
        fork = next(b for b in mine["branches"] if b != "main")
        d = await ok("tc_trajectory_diff", a=f"{mine['session']}/main", b=f"{mine['session']}/{fork}")
        assert d["store"] == "user" and d["base"] and d["only_a_total"] and d["only_b_total"]

        # a project with its own store: both stores' sessions, each read from where it lives
        await ok("tc_init", name="with a store")
        own = await ok("tc_record", steps=[{"role": "user", "content": "hello"}, {"role": "assistant",
                                                                                   "content": "hi"}], session="own")
        listed = await ok("tc_sessions")
        assert sorted((s["session"], s["store"]) for s in listed["sessions"]) == sorted(
            [(own["session"], "workspace"), (mine["session"], "user")])
        assert "store" not in await ok("tc_events", point=own["session"])
        assert (await ok("tc_events", point=mine["session"]))["store"] == "user"
        r = await c.call_tool("tc_events", {"root": str(proj), "point": "nowhere"})
        assert r.is_error and "no milestone, session or event" in r.content[0].text
        # another project sees only its own
        listed = await ok("tc_sessions", root=other)
        assert [s["store"] for s in listed["sessions"]] == ["user"] and listed["sessions"][0]["session"] != mine["session"]


async def test_resume_session_tool(tmp_path, monkeypatch):
    """tc_resume_session writes the session file where the client looks; read back by our reader it
    gives exactly the recorded event ids up to the milestone. Strict arguments: an unknown client,
    a non-boolean flag, an unknown point or argument are isError results that write nothing; a
    session of the user-level store is resumable too."""
    from tc_git import trajectory as T
    from tc_git.trajectory.userstore import record_session

    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "claude"))
    monkeypatch.setenv("CODEX_HOME", str(tmp_path / "codex"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    ws = tmp_path / "ws"
    ws.mkdir()
    write(ws, "app.py", "v1\n")
    async with Client(build_server(watch=False), mode="legacy") as c:
        async def call(tool, **args):
            return await c.call_tool(tool, {"root": str(ws), **args})

        async def ok(tool, **args):
            r = await call(tool, **args)
            assert not r.is_error, r.content[0].text
            return r.structured_content

        await ok("tc_init", name="resumable")
        await ok("tc_save", title="v1")
        rec = await ok("tc_record", transcript=fixture("claude-fasthooks-1.jsonl"), milestone="m1")
        write(ws, "app.py", "v2\n")
        await ok("tc_save", title="v2")
        written = []
        for client in ("claude", "codex"):
            got = await ok("tc_resume_session", point="m1", client=client, code=True)
            assert got["client"] == client and got["event"] == rec["tip"] and got["events"] == rec["events"]
            home = tmp_path / client
            assert Path(got["path"]).is_relative_to(home) and got["session_id"] in got["command"]
            assert got["restore"]["applied"] is False and (ws / "app.py").read_text() == "v2\n"  # preview
            back = T.read_transcript(got["path"])
            assert back.session_id == got["session_id"] and len(back.events) == rec["events"]
            written.append(got["path"])
        # the Claude file, recorded into a fresh store, is the same chain of commits
        from tc_git.engine import Engine
        other = tmp_path / "other"
        other.mkdir()
        again = Engine(other).record(transcript=written[0])
        assert again["tip"] == rec["tip"]
        got = await ok("tc_resume_session", point="m1", client="claude", drop_thinking=True)
        assert got["events"] < rec["events"]
        # Claude's signed thinking cannot go to Codex as it is: left out (notes), unless kept
        got = await ok("tc_resume_session", point="m1", client="codex")
        assert "left out 12 thinking" in got["notice"]
        got = await ok("tc_resume_session", point="m1", client="codex", keep_thinking=True)
        assert got.get("notice") is None

        before = sorted(p for p in tmp_path.rglob("*.jsonl"))
        for args, needle in [({"point": "m1", "client": "gemini"}, "client"),
                             ({"point": "m1", "client": "claude", "code": "yes"}, "code"),
                             ({"point": "m1", "client": "claude", "session_id": "../../x"}, "unknown argument"),
                             ({"point": "nowhere", "client": "claude"}, "nowhere"),
                             ({"point": "", "client": "claude"}, "point"),
                             ({"client": "claude"}, "point")]:
            r = await call("tc_resume_session", **args)
            assert r.is_error and r.structured_content is None and needle in r.content[0].text, (args, r)
        assert sorted(p for p in tmp_path.rglob("*.jsonl")) == before
        assert (ws / "app.py").read_text() == "v2\n"

        # a session the hooks recorded into the user-level store (no store in that project)
        plain = tmp_path / "plain"
        plain.mkdir()
        mine = record_session(fixture("claude-daaain-1.jsonl"), plain)
        r = await c.call_tool("tc_resume_session", {"root": str(plain), "point": mine["session"], "client": "claude"})
        assert not r.is_error, r.content[0].text
        assert r.structured_content["store"] == "user" and Path(r.structured_content["path"]).is_file()
        await c.send_ping()
