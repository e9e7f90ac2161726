"""Over MCP an agent can do what a person does at the CLI (issue 30): list tasks and switch by
name or prefix, restore to any point (`at`: step, drift, restore point, commit, milestone), undo
with its own preview/apply; errors carry a structured hint each front end says in its own words.

Real engine and SDK (in-memory client, legacy stream loop), real stores; the CLI as a subprocess.
"""
from __future__ import annotations

import json
import subprocess

import pytest
from conftest import clean_env, tc, tree_state, write
from mcp import Client

from tc_git.base.errors import ACTIONS, Hint
from tc_git.cli.app import hint_command
from tc_git.engine import Engine
from tc_git.mcp.server import build_server, hint_call

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("fsck_after"),
              pytest.mark.filterwarnings("ignore:.*(deprecated|removed as of):Warning")]


@pytest.fixture(autouse=True)
def _env(tc_env_clean):
    """No TC_* / GIT_* from the caller; no export into a user repository."""


class Agent:
    def __init__(self, c, root):
        self.c, self.root = c, root

    async def ok(self, tool, **args):
        r = await self.c.call_tool(tool, {"root": self.root, **args})
        assert not r.is_error, r.content[0].text
        return r.structured_content

    async def err(self, tool, **args):
        r = await self.c.call_tool(tool, {"root": self.root, **args})
        assert r.is_error and r.structured_content is None, r
        return r.content[0].text, r.meta or {}


async def test_list_tasks_switch_by_name_and_prefix(ws):
    async with Client(build_server(watch=False), mode="legacy") as c:
        a = Agent(c, str(ws))
        write(ws, "f.txt", "1\n")
        first = (await a.ok("tc_init", name="parser work"))["task_id"]
        await a.ok("tc_save", title="one")
        await a.ok("tc_save", title="two", conclusion="c")
        second = (await a.ok("tc_init", name="my task: part 2"))["task_id"]

        listed = await a.ok("tc_tasks")
        assert listed["total"] == 2 and [t["task_id"] for t in listed["tasks"]] == [second, first]
        rows = {t["task_id"]: t for t in listed["tasks"]}
        assert rows[second]["active"] and not rows[first]["active"]
        assert rows[first]["steps"] == 2 and rows[second]["steps"] == 0
        assert rows[first]["status"] == "suspended" and rows[first]["updated"]

        # a name (with spaces and a colon), a unique prefix, any case: as the CLI takes them
        assert (await a.ok("tc_switch", task_id="Parser Work"))["task_id"] == first
        assert (await a.ok("tc_switch", task_id="my task: part 2"))["task_id"] == second
        common = len(__import__("os").path.commonprefix([first, second]))
        assert (await a.ok("tc_switch", task_id=first[:common + 1]))["task_id"] == first
        text, _ = await a.err("tc_switch", task_id=first[:common])
        assert "matches 2 tasks" in text
        # every task_id takes the same forms (read-only: the active task stays)
        assert (await a.ok("tc_resume", task_id="my task"[:7] + ": part 2"))["task_id"] == second
        assert (await a.ok("tc_show", task_id="parser work"))["head"] == 2

        # unknown task: the hint is tc_tasks, said as a tool call, and in _meta as action + arguments
        text, meta = await a.err("tc_switch", task_id="nope")
        assert "tc_tasks()" in text and "tc log" not in text and "`" not in text
        assert meta["tc-git/hint"] == [{"action": "tc_tasks", "arguments": {}}]


async def test_restore_at_any_point_and_undo_verb(ws):
    async with Client(build_server(watch=False), mode="legacy") as c:
        a = Agent(c, str(ws))
        write(ws, "app.py", "v1\n")
        await a.ok("tc_init", name="points")
        s1 = await a.ok("tc_save", title="v1")
        await a.ok("tc_record", steps=[{"role": "user", "content": "v1 please"}], session="s1", milestone="good")
        v1 = tree_state(ws)
        write(ws, "app.py", "v2\n")
        await a.ok("tc_save", title="v2")
        v2 = tree_state(ws)

        assert (await a.ok("tc_restore", at="1"))["plan"]["to_replace"] == ["app.py"]  # preview
        assert tree_state(ws) == v2
        assert (await a.ok("tc_restore", at=1))["target"] == (await a.ok("tc_restore", at="s0001"))["target"]
        assert (await a.ok("tc_restore", at=s1["commit"][:10]))["plan"]["to_replace"] == ["app.py"]
        done = await a.ok("tc_restore", at="good", apply=True)  # a milestone: the code it links
        assert done["applied"] and tree_state(ws) == v1 and done["restore_id"] == "r0001"

        # undo: its own verb, preview first, as explicit as restore
        pv = await a.ok("tc_undo")
        assert pv["applied"] is False and pv["plan"]["to_replace"] == ["app.py"] and tree_state(ws) == v1
        assert (await a.ok("tc_undo", apply=True))["applied"] and tree_state(ws) == v2
        # the restore point r0001 is a target too; index / drift_id stay as aliases
        assert (await a.ok("tc_restore", at="r0001", apply=True))["applied"] and tree_state(ws) == v1
        assert (await a.ok("tc_restore", index=2, apply=True))["applied"] and tree_state(ws) == v2
        assert (await a.ok("tc_restore", drift_id=done["recovered"]))["applied"] is False

        text, _ = await a.err("tc_restore", at="no such thing")
        assert "is not a point" in text and "milestone" in text
        text, meta = await a.err("tc_restore", at="d0099")
        assert "tc_show(include_drift=true)" in text
        assert meta["tc-git/hint"] == [{"action": "tc_show", "arguments": {"include_drift": True}}]
        text, _ = await a.err("tc_restore", at="1", index=1)
        assert "exactly one of at" in text


async def test_recover_after_git_clean_ffdx(ws, monkeypatch):
    """The store deleted with the mirror still in the user's repository (issue 29): every tool's
    error names tc_recover; it previews (writes nothing), then brings back every mirrored step,
    drift and id, and makes the task active."""
    monkeypatch.delenv("TC_GIT")  # the mirror into the user's repository is what recover reads
    write(ws, "app.py", "v0\n")
    for args in (("init", "-q"), ("add", "-A"), ("-c", "user.name=u", "-c", "user.email=u@x", "commit", "-qm", "c")):
        subprocess.run(["git", *args], cwd=ws, env=clean_env(), check=True, capture_output=True)
    e = Engine(ws)
    e.init("parser")
    write(ws, "lib.py", "x = 1\n")
    e.save("lib")
    write(ws, "lib.py", "x = 2\n")
    drift = e.capture()["drift_id"]
    e.save("two")
    before = [(p["id"], p["commit"]) for p in e.log()]
    subprocess.run(["git", "clean", "-ffdx", "-q"], cwd=ws, env=clean_env(), check=True)
    assert not (ws / ".checkpoints").exists()

    async with Client(build_server(watch=False), mode="legacy") as c:
        a = Agent(c, str(ws))
        for tool in ("tc_show", "tc_resume", "tc_save"):
            text, meta = await a.err(tool, **({"title": "t"} if tool == "tc_save" else {}))
            assert "1 mirrored task" in text and "tc_recover(apply=true)" in text and "`tc-git" not in text, text
            assert meta["tc-git/hint"] == [{"action": "tc_recover", "arguments": {"apply": True}}]
        pv = await a.ok("tc_recover")
        assert pv["applied"] is False and [(t["name"], t["steps"]) for t in pv["mirrored"]] == [("parser", 2)]
        assert not (ws / ".checkpoints").exists()  # a preview writes nothing
        done = await a.ok("tc_recover", apply=True)
        assert done["applied"] and done["active_task"] == pv["mirrored"][0]["task_id"] and done["mirrored"][0]["active"]
        assert [(p["id"], p["commit"]) for p in Engine(ws).log()] == before  # every id as it was
        assert (await a.ok("tc_recover", apply=True))["applied"]  # again: nothing new, no error
        assert (await a.ok("tc_restore", at=drift, apply=True))["applied"]
        assert (ws / "lib.py").read_text() == "x = 2\n"


def test_every_hint_action_is_said_by_both_front_ends():
    for action in ACTIONS:
        h = Hint(action, {"apply": True} if action in ("restore", "undo") else {})
        assert hint_call(h).startswith(f"tc_{action}(")
        said = hint_command(h)
        assert said.startswith("`tc-git ") and "tc_" not in said, said
    assert hint_call(Hint("restore", {"at": "d0003", "apply": True})) == 'tc_restore(at="d0003", apply=true)'
    assert hint_command(Hint("restore", {"at": "d0003", "apply": True})) == "`tc-git restore d0003 --apply`"
    assert hint_command(Hint("init", {"name": None})) == "`tc-git init <name>`"
    assert hint_command(Hint("undo", {})) == "`tc-git undo --preview`"
    assert hint_command(Hint("recover", {"apply": True})) == "`tc-git recover`"


def test_cli_says_commands_with_hints_in_json(tmp_path):
    project = tmp_path / "p"
    project.mkdir()
    (project / "f").write_text("x\n")
    r = tc("-C", project, "resume")
    assert r.returncode == 2 and b"`tc-git init <name>`" in r.stderr and b"tc_" not in r.stderr
    assert tc("-C", project, "init", "alpha").returncode == 0
    r = tc("-C", project, "switch", "nope")
    assert r.returncode == 2 and b"`tc-git log --all`" in r.stderr and b"tc_" not in r.stderr
    r = tc("-C", project, "--json", "restore", "d0042")
    body = json.loads(r.stdout)
    assert body["code"] == "not_found" and body["hints"] == [{"action": "show", "arguments": {"include_drift": True}}]
    assert "`tc-git log`" in body["error"]
