"""A save that only saves (issue 31): the agent's fields are scanned for credentials once (the
record the note becomes holds them again), a credential is still redacted wherever it comes, and
an MCP result is serialised once (its wire size computed from that one text)."""
from __future__ import annotations

import json

import pytest
from conftest import git

from tc_git.workspace import secrets

GHP = "ghp_" + "Rq8Lm2Vx" * 4 + "Kd7W"  # GitHub's format: 36 characters after the prefix


def _counting(monkeypatch, marker: bytes) -> list[int]:
    """How many texts `secrets.find` is given that hold `marker` (the real scan still runs)."""
    seen = [0]
    real = secrets.find

    def find(data, *args, **kwargs):
        seen[0] += marker in data
        return real(data, *args, **kwargs)

    monkeypatch.setattr(secrets, "find", find)
    return seen


def test_a_saves_fields_are_scanned_once(engine, ws, monkeypatch):
    monkeypatch.setattr(secrets, "_CLEAN", {})  # (no earlier test's texts: the memo is not cleared midway)
    engine.init("scan once", goal="the goal rides in every record")
    (ws / "a.txt").write_text("one\n")
    seen = _counting(monkeypatch, b"zebra-conclusion")
    engine.save("first step", conclusion="the zebra-conclusion of step one", next="go on")
    assert seen[0] == 1
    (ws / "a.txt").write_text("two\n")
    engine.save("second step", conclusion="another one")
    goal = _counting(monkeypatch, b"rides in every record")
    (ws / "a.txt").write_text("three\n")
    engine.save("third step", conclusion="and another")
    assert goal[0] == 0  # found clean before: not scanned again
    note = git(engine.store.path, "log", "--notes=checkpoints", "-3", f"refs/checkpoints/tasks/{engine.store.active_task()}/head")
    assert b"zebra-conclusion" in note and b"another one" in note


def test_a_credential_is_redacted_after_clean_texts(engine, ws):
    engine.init("redact")
    (ws / "a.txt").write_text("one\n")
    engine.save("clean step", conclusion="nothing secret here")
    (ws / "a.txt").write_text("two\n")
    r = engine.save("leaky step", conclusion=f"token {GHP} pasted", next="nothing secret here")
    assert [x["field"] for x in r["redacted"]] == ["conclusion"]
    note = git(engine.store.path, "log", "--notes=checkpoints", "-1", f"refs/checkpoints/tasks/{r['task_id']}/head")
    assert GHP.encode() not in note and b"[REDACTED:" in note
    # the memo holds only texts without a credential
    assert all(GHP not in t for t in secrets._CLEAN)
    assert secrets.redact_count(f"again {GHP}")[1]


def test_wire_size_from_the_one_text():
    """The result's size on the wire (its JSON twice: as the object and as the text block's
    string) from the text alone, as json.dumps of the text would give it."""
    from tc_git.mcp.server import _dumps, _text_wire_size

    for data in ({"a": 'q"uote\\back\nnew\ttab\x01 é 漢 \u2028'}, {"b": [1, 2.5, None, True, {"c": ""}]}, {}):
        text = _dumps(data)
        want = len(json.dumps(text, ensure_ascii=False).encode()) + len(text.encode()) + 96
        assert _text_wire_size(text) == want


@pytest.mark.anyio
async def test_mcp_save_leaves_the_hook_handoff_to_after_its_answer(tmp_path, tc_env_clean):
    """Over MCP a save answers without the SessionStart hook's handoff; the server writes it
    after the answer (the newest per store; at its end, what is left), for the head it describes."""
    from mcp import Client

    from tc_git.mcp.server import build_server
    from tc_git.timeline import handoff_cache

    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("a\n")
    async with Client(build_server(watch=False), mode="legacy") as c:
        tid = (await c.call_tool("tc_init", {"name": "later", "root": str(ws)})).structured_content["task_id"]
        for i in range(3):
            (ws / "a.txt").write_text(f"{i}\n")
            r = await c.call_tool("tc_save", {"title": f"step {i}", "root": str(ws), "next": "more"})
            assert not r.is_error, r.content
    cached = handoff_cache.read(ws / ".checkpoints", tid)
    assert cached is not None and cached["head"] == r.structured_content["commit"]
    assert "step 2" in cached["text"] and cached["status"] == "open"


def test_a_handoff_for_a_head_moved_on_is_not_written(engine, ws):
    from tc_git.timeline import handoff_cache

    engine.init("moved on")
    (ws / "a.txt").write_text("one\n")
    first = engine.save("one")["commit"]
    (ws / "a.txt").write_text("two\n")
    second = engine.save("two")["commit"]
    assert engine.refresh_handoff(engine.store.active_task(), first, []) is False
    cached = handoff_cache.read(engine.store.path, engine.store.active_task())
    assert cached is not None and cached["head"] == second and "two" in cached["text"]
    assert engine.refresh_handoff(engine.store.active_task(), second, ["x.txt"]) is True
    assert "x.txt" in handoff_cache.read(engine.store.path, engine.store.active_task())["text"]
