"""The engine's results against their declared shapes (tc_git/base/results.py), and the MCP tools'
output schemas, made from the same declarations.

Real engine calls in a real git repository (so the user-repo mirror and its `git` report run too):
every key a result carries is declared, every required key is there, nested typed dicts included,
and every value has its declared type (pydantic, strict).
"""
from __future__ import annotations

import json
import subprocess
from typing import Any, get_args, get_origin, get_type_hints, is_typeddict

import pytest
from pydantic import TypeAdapter

from tc_git.base import results
from tc_git.engine import Engine
from tc_git.mcp import server

# MCP tool -> the engine method it calls (mcp_server.py); the tools whose result is a typed dict
TOOLS = {"tc_init": "init", "tc_save": "save", "tc_resume": "resume", "tc_show": "show",
         "tc_restore": "restore", "tc_capture": "capture", "tc_switch": "switch", "tc_compress": "compress",
         "tc_record": "record", "tc_sessions": "sessions", "tc_milestone": "milestone", "tc_events": "trajectory_log",
         "tc_checkout": "checkout", "tc_markdown": "export_markdown", "tc_branch": "branch",
         "tc_trajectory_diff": "trajectory_diff", "tc_replay": "replay",
         "tc_export": "export", "tc_push": "push", "tc_pull": "pull"}


def _unwrap(fn):
    while hasattr(fn, "__wrapped__"):
        fn = fn.__wrapped__
    return fn


def _returns(method: str):
    return get_type_hints(_unwrap(getattr(Engine, method)))["return"]


def _typed_dicts(tp) -> list:
    """The typed dicts `tp` is or holds (list[X], X | None)."""
    if is_typeddict(tp):
        return [tp]
    return [t for a in get_args(tp) for t in _typed_dicts(a)]


def check(value: Any, tp, where: str = "result") -> None:
    """`value` has exactly the keys `tp` declares (required ones present), recursively; for a
    union of typed dicts (A | B | None), the keys of one of them."""
    tds = _typed_dicts(tp)
    if not tds or value is None:
        return
    if get_origin(tp) is list:
        for i, item in enumerate(value):
            check(item, tds[0], f"{where}[{i}]")
        return
    assert isinstance(value, dict), f"{where}: {type(value).__name__}, expected {tds[0].__name__}"
    errors = []
    for td in tds:
        hints = get_type_hints(td)
        missing, extra = td.__required_keys__ - value.keys(), value.keys() - hints.keys()
        if missing:
            errors.append(f"{where} ({td.__name__}) lacks {sorted(missing)}")
        elif extra:
            errors.append(f"{where} ({td.__name__}) carries undeclared {sorted(extra)}: declare them in results.py")
        else:
            for k, v in value.items():
                check(v, hints[k], f"{where}.{k}")
            return
    raise AssertionError("; ".join(errors))


def test_every_typed_result_of_the_engine_is_declared_in_results():
    for tool, method in TOOLS.items():
        assert _typed_dicts(_returns(method)), f"Engine.{method} ({tool}) returns no typed dict"
    assert _returns("tasks") == list[results.TaskInfo] and _returns("log") == list[results.EntryView]


def _keys(tp) -> set[str]:
    """Every key of the typed dicts `tp` is or holds, at any depth."""
    out: set[str] = set()
    for td in _typed_dicts(tp):
        for key, hint in get_type_hints(td).items():
            out |= {key} | _keys(hint)
    return out


@pytest.mark.parametrize("tool", sorted(server.SHOWN))
def test_mcp_output_schemas_are_made_from_the_typed_results(tool):
    """An MCP tool's outputSchema shows keys of the typed dict its engine method returns (one
    declaration for CLI and MCP): a key SHOWN names that the typed dict lacks would show nothing."""
    td, keys = server.SHOWN[tool]
    if tool in TOOLS:
        assert td is _typed_dicts(_returns(TOOLS[tool]))[0], tool
    assert set(keys.split()) <= _keys(td), f"{tool}: {sorted(set(keys.split()) - _keys(td))} not in {td.__name__}"
    schema = server._output_schema(tool, depth=3)
    assert set(keys.split()) & set(schema["properties"]) and "required" not in schema, schema


def test_optional_keys_are_optional():
    """`from __future__ import annotations` in results.py would make every NotRequired key
    required (TypedDict reads the markers from evaluated annotations only)."""
    assert results.RestoreResult.__optional_keys__ >= {"undo", "commit", "failed", "restore_id", "check", "git"}
    assert results.CaptureResult.__optional_keys__ == {"files"}
    with pytest.raises(AssertionError, match="undeclared"):
        check({"captured": True, "drift_id": None, "reads": 0, "commit": None, "partial": False, "waiting": False,
               "skipped_paths": [], "unstable": [], "surprise": 1}, results.CaptureResult)
    with pytest.raises(AssertionError, match=r"lacks \['files'\]|lacks \['reads'\]"):
        check({"captured": True, "drift_id": None, "commit": None, "partial": False, "waiting": False,
               "skipped_paths": [], "unstable": []}, results.CaptureResult)


def test_engine_results_carry_exactly_their_declared_keys(tmp_path, monkeypatch):
    monkeypatch.delenv("TC_GIT", raising=False)
    ws = tmp_path / "ws"
    ws.mkdir()
    subprocess.run(["git", "init", "-q", str(ws)], check=True)  # the mirror and the git guard run
    (ws / "a.txt").write_text("one\n")
    (ws / "dir").mkdir()
    (ws / "dir" / "b.txt").write_text("two\n")
    (ws / ".env").write_text("API_KEY=sk-live-0123456789abcdef0123456789abcdef\n")  # left out, reported
    e = Engine(ws)
    got: dict[str, list] = {}

    def run(method: str, *args, **kw):
        out = getattr(e, method)(*args, **kw)
        check(out, _returns(method), method)
        # the values too, strictly: the MCP SDK checks each result against its typed dict
        TypeAdapter(server._readable(_returns(method))).validate_python(out, strict=True)
        got.setdefault(method, []).append(out)
        return out

    first = run("init", "results", goal="shapes", exclude=["*.tmp"])
    run("save", "first", conclusion="c", verified=["v"], open_questions=["q"], next="n")
    assert run("save", "first", conclusion="c", verified=["v"], open_questions=["q"], next="n")["idempotent"]
    assert not run("capture")["captured"]
    (ws / "a.txt").write_text("one more\n")
    assert run("capture")["captured"]
    run("save", "second")
    run("resume")
    run("resume", lang="zh")
    run("show", include_drift=True)
    run("show", index=1)
    run("show_point", "d0001")
    run("log")
    run("tasks")
    preview = run("restore", index=1)
    assert not preview["applied"] and preview["plan"]["counts"]["to_replace"] == 1
    assert run("restore", index=1, apply=True)["applied"]
    assert run("undo", apply=True)["applied"]
    sel = run("restore", at="s0001", apply=True, paths=["a.txt"])
    assert sel["check"]["ok"], sel
    run("restore_commit", sel["target_commit"][:12])
    second = run("init", "other")
    assert second["prev_suspended"] == first["task_id"]
    run("switch", first["task_id"])
    # the trajectory side: recorded steps, a milestone linked to the code, every read of them
    steps = [{"role": "user", "content": "add a line"}, {"role": "assistant", "content": "done"}]
    rec = run("record", steps=steps, session="s1", milestone="m1")
    assert rec["milestone"] and rec["milestone"]["code_commit"], rec
    transcript = tmp_path / "steps.json"
    transcript.write_text(json.dumps(steps + [{"role": "user", "content": "and another"}]))
    run("record", transcript=str(transcript), fmt="steps", session="s2")
    assert run("record", transcript=str(transcript), fmt="steps", session="s2")["unchanged_file"]
    run("milestone", "m2", at=rec["tip"], message="second name")
    run("sessions")
    run("trajectory_log", "m1")
    run("checkout", "m1")
    assert run("checkout", "m1", restore_code=True)["restore"] is not None
    run("export_markdown", "m1")
    assert run("export_markdown", "m1", out="m1.md")["path"].endswith("m1.md")
    run("branch", "alt", at="m1")
    run("trajectory_diff", "m1", "m2")
    for mode in ("messages", "code"):
        run("replay", "m1", mode=mode)
    run("compress", keep_seconds=0, minimum=0)
    # the handoff side: a bundle, and a bare remote pushed to and pulled from
    (tmp_path / "out").mkdir()
    assert run("export", str(tmp_path / "out"))["path"].endswith(".bundle")
    remote = tmp_path / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", str(remote)], check=True)
    assert run("push", str(remote))["pushed"]
    assert run("pull", str(remote))["ok"]
    # every declared result was seen, and the user-repo report with it
    assert set(TOOLS.values()) | {"log", "tasks", "undo"} <= set(got)
    assert any(r["git"]["ok"] for r in got["save"]), got["save"]
    assert any("git" in r for r in got["restore"])
    assert got["save"][0]["skipped_paths"], "the .env file is left out and said so"
