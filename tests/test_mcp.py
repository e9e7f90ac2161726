"""tc-mcp through the SDK's in-memory client: schemas, annotations, errors, roots, progress.

Real engine, real SDK, real stores in tmp dirs; no mocks. The stdio end-to-end run is in
test_mcp_stdio.py, the drift watcher in test_watch.py.
"""
from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from pathlib import Path

import anyio
import jsonschema
import pytest
from conftest import tree_state, write
from mcp import Client
from mcp.types import ListRootsResult, Root

from tc_git.mcp.server import build_server
from tc_git.storage.store import Store

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("fsck_after"),
              pytest.mark.filterwarnings("ignore:.*(deprecated|removed as of):Warning")]

TOOLS = ["tc_init", "tc_save", "tc_resume", "tc_show", "tc_restore", "tc_capture", "tc_switch",
         "tc_export", "tc_import", "tc_compress",  # the seed's ten, first and unchanged
         "tc_tasks", "tc_undo", "tc_push", "tc_pull", "tc_recover", "tc_record", "tc_sessions", "tc_milestone", "tc_events",
         "tc_checkout", "tc_markdown", "tc_branch", "tc_trajectory_diff", "tc_replay", "tc_resume_session", "tc_blame"]


@pytest.fixture(autouse=True)
def _env(tc_env_clean):
    """No TC_* / GIT_* from the caller; no export into a user repository."""


@pytest.fixture
def server():
    s = build_server(watch=False)
    yield s


def client(server, **kw):
    """The in-memory client in legacy mode: the same stream loop (and ping) as over stdio."""
    return Client(server, mode="legacy", **kw)


def ok(r):
    assert not r.is_error, r.content[0].text if r.content else r
    return r.structured_content


def err(r, code=None):
    """An error result: text only (no structuredContent a strict client would check against the
    outputSchema), the code in `_meta` and at the end of the text."""
    assert r.is_error, r.structured_content
    assert r.structured_content is None and len(r.content) == 1, r
    body = {"error": r.content[0].text, "code": (r.meta or {}).get("tc-git/code")}
    assert body["error"] and body["error"].endswith(f" [{body['code']}]"), body
    assert "Traceback" not in body["error"]
    if code:
        assert body["code"] == code, body
    return body


async def call(c, tool, /, **args):
    return await c.call_tool(tool, args)


# ------------------------------------------------------------------------------- listing
async def test_tools_list_names_annotations_schemas(server):
    from tc_git.mcp.server import SHOWN

    async with client(server) as c:
        tools = {t.name: t for t in (await c.list_tools()).tools}
        assert list(tools) == TOOLS
        for t in tools.values():
            if t.name not in SHOWN:  # free-form results: still structuredContent, no schema
                assert t.output_schema is None, t.name
            else:
                assert t.output_schema and t.output_schema["type"] == "object", t.name
                jsonschema.Draft202012Validator.check_schema(t.output_schema)
            jsonschema.Draft202012Validator.check_schema(t.input_schema)
            assert "root" in t.input_schema["properties"] and "root" not in t.input_schema.get("required", [])
        assert tools["tc_resume"].annotations.read_only_hint and tools["tc_show"].annotations.read_only_hint
        assert tools["tc_restore"].annotations is None  # destructive: the spec's default, nothing to send
        assert tools["tc_save"].annotations.read_only_hint is None
        assert tools["tc_save"].annotations.destructive_hint is False
        # the seed's parameters, same names (tc_save's reserved `paths` is accepted but not listed)
        want = {"tc_init": {"root", "name", "goal", "constraints", "store", "exclude"},
                "tc_save": {"root", "title", "task_id", "description", "conclusion", "verified",
                            "open_questions", "next", "close"},
                "tc_show": {"root", "task_id", "index", "include_drift", "limit", "cursor"},
                "tc_restore": {"root", "index", "drift_id", "apply"},
                "tc_capture": {"root"}, "tc_switch": {"root", "task_id"},
                "tc_export": {"root", "to"}, "tc_import": {"root", "package"},
                "tc_compress": {"root", "keep_seconds", "minimum", "maximum"},
                "tc_resume": {"root", "task_id"}}
        for name, params in want.items():
            assert params <= set(tools[name].input_schema["properties"]), name
        assert "paths" not in tools["tc_save"].input_schema["properties"]
        assert tools["tc_show"].input_schema["properties"]["limit"]["maximum"] == 200
        assert await c.send_ping() is not None


async def test_tools_list_budget(server):
    """tools/list is paid in every session: at most 16 KB of compact JSON for all tools, and still
    everything a model needs: every parameter described, one-paragraph descriptions, no titles."""
    async with client(server) as c:
        tools = (await c.list_tools()).tools
    wire = [t.model_dump(by_alias=True, exclude_none=True, mode="json") for t in tools]
    size = len(json.dumps({"tools": wire}, separators=(",", ":"), ensure_ascii=False).encode())
    assert size <= 16 * 1024, size
    for t in wire:
        assert t["description"] and "\n" not in t["description"] and "  " not in t["description"], t["name"]
        assert len(t["description"]) < 300, t["name"]
        for name, prop in t["inputSchema"]["properties"].items():
            assert prop.get("description"), (t["name"], name)
            assert len(prop["description"]) <= 100 and "title" not in prop, (t["name"], name)
        assert '"title": "' not in json.dumps(t.get("outputSchema") or {}), t["name"]  # no auto-titles
        assert '"$ref"' not in json.dumps(t), t["name"]
    # shared descriptions stay short: root is in every tool
    assert len(wire[0]["inputSchema"]["properties"]["root"]["description"]) <= 30


# ------------------------------------------------------------------------------- every tool vs its schema
async def test_every_result_matches_output_schema(server, ws, tmp_path):
    async with client(server) as c:
        schemas = {t.name: t.output_schema for t in (await c.list_tools()).tools}
        seen = set()

        def check(name, r):
            sc = ok(r)
            if schemas[name]:
                jsonschema.validate(sc, schemas[name])
            assert json.loads(r.content[0].text) == sc
            seen.add(name)
            return sc

        root = str(ws)
        init = check("tc_init", await call(c, "tc_init", root=root, name="demo", goal="g", exclude=["logs/"]))
        write(ws, "a.txt", "one")
        write(ws, "logs/x.log", "ignored")
        s1 = check("tc_save", await call(c, "tc_save", root=root, title="first", conclusion="c1", next="n1",
                                         verified=["pytest"], open_questions=["q?"]))
        assert s1["index"] == 1 and s1["task_id"] == init["task_id"]
        write(ws, "a.txt", "two")
        cap = check("tc_capture", await call(c, "tc_capture", root=root))
        assert cap["captured"] and cap["drift_id"] == "d0001"
        again = check("tc_capture", await call(c, "tc_capture", root=root))
        assert again["captured"] is False
        res = check("tc_resume", await call(c, "tc_resume", root=root))
        assert res["next"] == "n1" and len(res["handoff"].encode()) < 2048
        assert check("tc_resume", await call(c, "tc_resume", root=root, lang="zh"))["handoff"]
        sh = check("tc_show", await call(c, "tc_show", root=root, include_drift=True))
        assert [s["index"] for s in sh["steps"]] == [1]
        check("tc_show", await call(c, "tc_show", root=root, index=1))
        pv = check("tc_restore", await call(c, "tc_restore", root=root, index=1))
        assert pv["applied"] is False and pv["plan"]["to_replace"] == ["a.txt"]
        ap = check("tc_restore", await call(c, "tc_restore", root=root, index=1, apply=True))
        assert ap["applied"] and ap["recovered"]
        assert (ws / "a.txt").read_text() == "one"
        second = check("tc_init", await call(c, "tc_init", root=root, name="other"))
        assert second["prev_suspended"] == init["task_id"]
        check("tc_switch", await call(c, "tc_switch", root=root, task_id=init["task_id"]))
        out = tmp_path / "out"
        out.mkdir()
        r = await call(c, "tc_export", root=root, to=str(out))
        if r.is_error:  # the handoff layer is another issue; until then a clean error, no package
            assert err(r)["code"] == "unavailable" and not any(out.iterdir())
        else:
            ex = check("tc_export", r)
            ws2 = tmp_path / "ws2"
            ws2.mkdir()
            im = check("tc_import", await call(c, "tc_import", root=str(ws2), package=ex["path"], apply=False))
            assert im["task_id"] == init["task_id"] and not (ws2 / "a.txt").exists()  # preview only
            im = check("tc_import", await call(c, "tc_import", root=str(ws2), package=ex["path"], merge=True,
                                               apply=True))
            assert (ws2 / "a.txt").read_text() == "one"
        assert seen >= set(TOOLS[:10]) - {"tc_compress"}  # the other tools: test_mcp_trajectory.py
        comp = check("tc_compress", await call(c, "tc_compress", root=root))
        assert comp["converted"] == 0 and comp["maximum"] == 50


# ------------------------------------------------------------------------------- bad input
async def test_bad_inputs_are_tool_errors_and_server_keeps_answering(server, ws, tmp_path):
    afile = tmp_path / "file.txt"
    afile.write_text("x")
    async with client(server) as c:
        root = str(ws)
        cases = [
            (("tc_init", dict(root=root, name="x", exclude=["../up"])), "bad_input"),
            (("tc_init", dict(root=root, name="x", exclude=["!keep"])), "bad_input"),
            (("tc_init", dict(root=str(tmp_path / "missing"), name="x")), "unsafe_root"),
            (("tc_init", dict(root=str(afile), name="x")), "unsafe_root"),
            (("tc_init", dict(root="/", name="x")), "unsafe_root"),
            (("tc_init", dict(root=root, name="   ")), "bad_input"),
            (("tc_save", dict(root=root, title="t")), "not_found"),  # no store yet
            (("tc_resume", dict(root=root)), "not_found"),
            (("tc_init", dict(root=root)), "bad_input"),  # name missing (schema)
            (("tc_show", dict(root=root, limit=0)), "bad_input"),
            (("tc_show", dict(root=root, limit="many")), "bad_input"),
            (("tc_save", dict(root=root, title="t", colour="red")), "bad_input"),  # unknown argument
            (("tc_nope", dict(root=root)), "bad_input"),
        ]
        for (name, args), code in cases:
            body = err(await call(c, name, **args), code)
            assert len(body["error"]) < 400
            await c.send_ping()
        # nothing was created for the bogus roots
        assert not (tmp_path / "missing").exists()
        assert not (ws / ".checkpoints").exists()

        ok(await call(c, "tc_init", root=root, name="task"))
        write(ws, "f", "1")
        ok(await call(c, "tc_save", root=root, title="one"))
        for args, code in [
            (dict(index=1, drift_id="d0001"), "bad_input"),
            (dict(), "bad_input"),
            (dict(index=99), "not_found"),
            (dict(drift_id="d0042"), "not_found"),
            (dict(drift_id="zz"), "bad_input"),
        ]:
            err(await call(c, "tc_restore", root=root, **args), code)
        err(await call(c, "tc_show", root=root, index=7), "not_found")
        err(await call(c, "tc_switch", root=root, task_id="t123"), "not_found")
        # a task is named by id, prefix or name: "../evil" is looked up (never used as a path)
        err(await call(c, "tc_switch", root=root, task_id="../evil"), "not_found")
        err(await call(c, "tc_switch", root=root, task_id="t1\n"), "bad_input")
        err(await call(c, "tc_save", root=root, title="x", paths=["f"]), "bad_input")
        err(await call(c, "tc_compress", root=root, maximum=0), "bad_input")
        # closed task: save/capture/apply refused, read side still works
        ok(await call(c, "tc_save", root=root, title="last", close=True))
        err(await call(c, "tc_save", root=root, title="more"), "task_closed")
        err(await call(c, "tc_capture", root=root), "task_closed")
        write(ws, "f", "2")
        err(await call(c, "tc_restore", root=root, index=1, apply=True), "task_closed")
        assert (ws / "f").read_text() == "2"
        ok(await call(c, "tc_restore", root=root, index=1))
        assert ok(await call(c, "tc_resume", root=root))["status"] == "closed"
        await c.send_ping()


@contextlib.contextmanager
def _lock_held_elsewhere(ws, hold: float = 10):
    """The store's lock held by another thread until the block ends, the yielded event is set or
    `hold` seconds have passed; `release.released_at` is then the time.monotonic() it let go at."""
    held, release = threading.Event(), threading.Event()

    def hold_it():
        with Store(ws / ".checkpoints", ws).lock():
            held.set()
            release.wait(hold)
            release.released_at = time.monotonic()  # (still holding it)

    th = threading.Thread(target=hold_it)
    th.start()
    try:
        assert held.wait(60), "the other thread did not get the store's lock"
        yield release
    finally:
        release.set()
        th.join()


async def test_store_busy_is_a_tool_error(server, ws, monkeypatch):
    monkeypatch.setenv("TC_LOCK_TIMEOUT", "1")
    async with client(server) as c:
        root = str(ws)
        ok(await call(c, "tc_init", root=root, name="t"))
        with _lock_held_elsewhere(ws):
            t0 = time.monotonic()
            body = err(await call(c, "tc_save", root=root, title="blocked"), "store_busy")
            assert "busy" in body["error"] and time.monotonic() - t0 < 5
            await c.send_ping()
        assert ok(await call(c, "tc_save", root=root, title="now"))["index"] == 1


async def test_server_answers_while_a_call_waits(server, ws, monkeypatch):
    """Engine calls run in worker threads: a call stuck on the lock does not block ping or reads.
    Judged by order, not by a time limit a loaded machine can exceed: the ping and the read answer
    while the lock is still held elsewhere and the save still waits for it."""
    monkeypatch.setenv("TC_LOCK_TIMEOUT", "120")  # the save waits as long as the lock is held
    async with client(server) as c:
        root = str(ws)
        ok(await call(c, "tc_init", root=root, name="t"))
        write(ws, "f", "1")
        ok(await call(c, "tc_save", root=root, title="one"))
        results = {}
        with _lock_held_elsewhere(ws, hold=120) as release:
            async with anyio.create_task_group() as tg:
                async def blocked():
                    results["save"] = await call(c, "tc_save", root=root, title="two")

                tg.start_soon(blocked)
                await anyio.sleep(0.3)
                await c.send_ping()
                r = await call(c, "tc_show", root=root)  # read side takes no lock
                results["shown_at"] = time.monotonic()
                assert ok(r)["head"] == 1
                assert "save" not in results  # still waiting for the lock
                release.set()
        # answered before the other thread let go of the lock: the read did not wait for it (a read
        # that did would answer only once the hold ran out, 120 s later)
        assert results["shown_at"] < release.released_at
        assert ok(results["save"])["index"] == 2


async def test_unexpected_exception_is_short_error_with_log(server, ws):
    """A non-TcError from the engine (here: a store whose objects dir is unreadable) -> short isError."""
    async with client(server) as c:
        root = str(ws)
        ok(await call(c, "tc_init", root=root, name="t"))
        objects = ws / ".checkpoints" / "objects"
        os.rename(objects, ws / ".checkpoints" / "objects.off")
        (ws / ".checkpoints" / "objects").write_text("not a directory")
        try:
            r = await call(c, "tc_save", root=root, title="x")
            body = err(r)
            assert "Traceback" not in body["error"] and len(body["error"]) < 500
            await c.send_ping()
        finally:
            (ws / ".checkpoints" / "objects").unlink()
            os.rename(ws / ".checkpoints" / "objects.off", objects)
        ok(await call(c, "tc_save", root=root, title="x"))
        log = (ws / ".checkpoints" / "tc" / "server.log").read_text()
        assert "tc_save" in log


# ------------------------------------------------------------------------------- roots, progress
async def test_root_from_client_roots(server, ws, tmp_path):
    other = tmp_path / "elsewhere"
    other.mkdir()

    async def list_roots(_ctx):
        return ListRootsResult(roots=[Root(uri=other.as_uri(), name="other"), Root(uri=ws.as_uri(), name="ws")])

    async with client(server, list_roots_callback=list_roots) as c:
        init = ok(await call(c, "tc_init", name="via roots"))
        assert Path(init["store"]) == other / ".checkpoints"
        write(other, "x.txt", "hello")
        assert ok(await call(c, "tc_save", title="s"))["index"] == 1
        assert ok(await call(c, "tc_resume"))["name"] == "via roots"


async def test_root_defaults_to_cwd(server, ws, monkeypatch):
    monkeypatch.chdir(ws)
    async with client(server) as c:
        init = ok(await call(c, "tc_init", name="cwd"))
        assert Path(init["store"]) == ws / ".checkpoints"


async def test_progress_notifications(server, ws):
    seen = []

    async def on_progress(p, total, msg):
        seen.append((p, total, msg))

    async with client(server) as c:
        ok(await call(c, "tc_init", root=str(ws), name="big"))
        for i in range(700):  # the engine reports every 256 changed paths (since init: its baseline)
            write(ws, f"d{i % 30}/f{i}.txt", f"{i}\n")
        r = await c.call_tool("tc_save", {"root": str(ws), "title": "first"}, progress_callback=on_progress)
        assert ok(r)["index"] == 1
        assert seen and all(isinstance(p, float) for p, _t, _m in seen)
        before = tree_state(ws)
        for i in range(0, 700, 2):
            (ws / f"d{i % 30}/f{i}.txt").unlink()
        ok(await call(c, "tc_restore", root=str(ws), index=1, apply=True))
        assert tree_state(ws) == before


async def test_handoff_stays_small_on_many_changes(server, ws):
    async with client(server) as c:
        ok(await call(c, "tc_init", root=str(ws), name="n" * 500, goal="g" * 5000, constraints="c" * 5000))
        ok(await call(c, "tc_save", root=str(ws), title="t" * 500, conclusion="x" * 9000, next="y" * 9000,
                      open_questions=["q" * 500] * 20))
        for i in range(800):
            write(ws, f"p/{i:04d}-{'z' * 60}.txt", "x")
        r = await call(c, "tc_resume", root=str(ws))
        res = ok(r)
        assert len(res["handoff"].encode()) < 2048
        assert res["drift_total"] == 800 and len(res["drift_paths"]) <= 200
        assert len(r.content[0].text.encode()) < 64 * 1024


async def test_modern_protocol_in_process(server, ws, monkeypatch):
    """The default (2026-07-28, per-request) in-process path: tools work; no roots -> cwd."""
    monkeypatch.chdir(ws)
    async with Client(server) as c:
        assert [t.name for t in (await c.list_tools()).tools] == TOOLS
        ok(await call(c, "tc_init", name="modern"))
        write(ws, "f", "x")
        assert ok(await call(c, "tc_save", title="s"))["index"] == 1
        err(await call(c, "tc_restore", index=1, drift_id="d0001"), "bad_input")
        assert ok(await call(c, "tc_resume"))["name"] == "modern"


async def test_compress_drops_old_drifts(server, ws):
    async with client(server) as c:
        root = str(ws)
        ok(await call(c, "tc_init", root=root, name="t"))
        write(ws, "f", "0")
        ok(await call(c, "tc_save", root=root, title="s"))
        for i in range(4):
            write(ws, "f", f"v{i}")
            assert ok(await call(c, "tc_capture", root=root))["captured"]
        r = ok(await call(c, "tc_compress", root=root, minimum=0, maximum=1))  # keep only the newest
        assert r["converted"] == 3 and r["bytes_freed"] >= 0
        kinds = [d["kind"] for d in ok(await call(c, "tc_show", root=root, include_drift=True))["drifts"]]
        assert kinds.count("drift") == 1
        assert (ws / "f").read_text() == "v3"


async def test_strict_argument_types(server, tmp_path):
    """A boolean is a boolean and an integer an integer: no lenient coercion of "yes", "5", 1.5 or
    a JSON string for a list; each is a bad_input error that names the argument, and nothing is written."""
    root = str(tmp_path)
    cases = [("tc_save", {"title": "x", "close": "yes"}), ("tc_save", {"title": "x", "close": "true"}),
             ("tc_save", {"title": "x", "close": 1}), ("tc_show", {"limit": "5"}), ("tc_show", {"index": True}),
             ("tc_save", {"title": "x", "verified": '["a"]'}), ("tc_restore", {"index": 1.5}),
             ("tc_init", {"name": 5}), ("tc_compress", {"keep_seconds": "60"})]
    async with client(server) as c:
        for tool, args in cases:
            body = err(await call(c, tool, root=root, **args), "bad_input")
            assert body["error"].startswith(f"{tool}: bad arguments: {next(iter(set(args) - {'title'}))}"), body
        assert not any(tmp_path.iterdir())
        await c.send_ping()


def test_unencodable_result_becomes_an_error():
    """The last-resort guard: a result the stdio writer cannot encode is an isError result."""
    from mcp.types import CallToolResult, TextContent

    from tc_git.mcp.server import _encodable, error_code

    bad = CallToolResult(content=[TextContent(type="text", text="caf\udce9")])
    r = _encodable("tc_x", bad)
    assert r.is_error and error_code(r) == "internal" and "could not be encoded" in r.content[0].text
    r.model_dump_json(by_alias=True)
    good = CallToolResult(content=[TextContent(type="text", text="café")])
    assert _encodable("tc_x", good) is good


# ------------------------------------------------------------------------------- seed workflow: import
async def test_seed_workflow_import_materialises_files(server, tmp_path):
    """An agent written for the seed: tc_export here, tc_import(root, package) into an empty directory
    -> the files are there, with their modes. A non-conflicting workspace keeps its own files and
    gets the new ones; a conflicting one is only previewed, and apply=true then writes."""
    src, empty, mixed, clash, out = (tmp_path / n for n in ("src", "empty", "mixed", "clash", "out"))
    for d in (src, empty, mixed, clash, out):
        d.mkdir()
    write(src, "app.py", "print(1)\n")
    write(src, "bin/run.sh", "#!/bin/sh\necho hi\n", mode=0o755)
    write(src, "data/blob.bin", bytes(range(256)))
    write(mixed, "mine.txt", "keep me")
    write(clash, "app.py", "print('theirs')\n")
    async with client(server) as c:
        ok(await call(c, "tc_init", root=str(src), name="handed over"))
        ok(await call(c, "tc_save", root=str(src), title="ready", next="ship"))
        want = tree_state(src)
        pkg = ok(await call(c, "tc_export", root=str(src), to=str(out)))["path"]

        im = ok(await call(c, "tc_import", root=str(empty), package=pkg))  # the seed's parameters only
        assert im["restore"]["auto"] == "applied" and im["restore"]["applied"], im
        assert tree_state(empty) == want  # bytes and modes (tree_state keeps the mode)
        assert os.stat(empty / "bin/run.sh").st_mode & 0o777 == 0o755
        assert ok(await call(c, "tc_resume", root=str(empty)))["next"] == "ship"

        im = ok(await call(c, "tc_import", root=str(mixed), package=pkg))
        assert im["restore"]["auto"] == "applied" and (mixed / "mine.txt").read_text() == "keep me"
        assert {k: v for k, v in tree_state(mixed).items() if k != b"mine.txt"} == want

        before = tree_state(clash)
        im = ok(await call(c, "tc_import", root=str(clash), package=pkg))
        assert im["restore"]["auto"] == "preview" and not im["restore"]["applied"], im
        assert "apply=true" in im["restore"]["note"] and im["restore"]["plan"]["to_replace"] == ["app.py"]
        assert tree_state(clash) == before  # nothing written
        im = ok(await call(c, "tc_import", root=str(clash), package=pkg, merge=True, apply=True))
        assert im["restore"]["applied"] and tree_state(clash) == want


# ------------------------------------------------------------------------------- resources, prompts
async def test_resume_resource_and_prompts(server, ws):
    """tc://resume is the handoff of the workspace of the last tool call; the prompts `resume` and
    `save-step` (slash commands in Claude Code) carry it and the tc_save fields."""
    async with client(server) as c:
        assert [r.uri for r in (await c.list_resources()).resources] == ["tc://resume"]
        prompts = {p.name: p for p in (await c.list_prompts()).prompts}
        assert set(prompts) == {"resume", "save-step"} and all(p.description for p in prompts.values())
        ok(await call(c, "tc_init", root=str(ws), name="resource task", goal="be readable"))
        write(ws, "f.txt", "1")
        ok(await call(c, "tc_save", root=str(ws), title="one", conclusion="works", next="two"))
        write(ws, b"caf\xe9.txt", "unsaved, odd name")
        text = (await c.read_resource("tc://resume")).contents[0].text
        assert "be readable" in text and "two" in text and '"caf\\351.txt"' in text, text  # jsonsafe's rule
        got = await c.get_prompt("resume", {})
        assert text in got.messages[0].content.text and "tc_save" in got.messages[0].content.text
        got = await c.get_prompt("save-step", {"note": "tests green"})
        body = got.messages[0].content.text
        assert all(k in body for k in ("tc_save", "title", "conclusion", "next", "tests green"))
        assert await c.send_ping() is not None
