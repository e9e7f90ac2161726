"""File names that are not valid UTF-8, or hold a newline or a tab, through every tc-mcp tool that
lists paths, over the real stdio server: every call succeeds, each listed name maps back to the
exact bytes (`jsonsafe.path_in`), the files come back byte for byte, the server keeps answering ping."""
from __future__ import annotations

import os
import sys

import jsonschema
import pytest
from conftest import clean_env, tree_state
from mcp import Client, StdioServerParameters

from tc_git.base import jsonsafe

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("fsck_after"),
              pytest.mark.filterwarnings("ignore:.*(deprecated|removed as of):Warning")]

ODD = [b"caf\xe9.txt", b"new\nline.txt", b"tab\there.txt", b"d\xff\xfe/inner \"q\".txt", b"ok.txt"]


def put(ws, name: bytes, data: bytes) -> None:
    p = os.path.join(os.fsencode(ws), name)
    os.makedirs(os.path.dirname(p), exist_ok=True)
    with open(p, "wb") as f:
        f.write(data)


def get(ws, name: bytes) -> bytes:
    with open(os.path.join(os.fsencode(ws), name), "rb") as f:
        return f.read()


def names(listing) -> set[bytes]:
    """Names as a client reads them, back to bytes; each one must be valid UTF-8 on the wire."""
    out = set()
    for x in listing:
        s = x["path"] if isinstance(x, dict) else x
        s.encode("utf-8")  # no surrogate reached the wire
        out.add(os.fsencode(jsonsafe.path_in(s)))
    return out


def stdio(cwd):
    env = clean_env(TC_WATCH="off", TC_GIT="off")
    return Client(StdioServerParameters(command=sys.executable, args=["-m", "tc_git"], env=env, cwd=str(cwd)),
                  mode="legacy")


async def test_odd_names_round_trip_through_every_listing_tool(tmp_path):
    ws, ws2, out = tmp_path / "ws", tmp_path / "ws2", tmp_path / "out"
    for d in (ws, ws2, out):
        d.mkdir()
    for n in ODD:
        put(ws, n, b"v1 " + n)
    async with stdio(tmp_path) as c:
        schemas = {t.name: t.output_schema for t in (await c.list_tools()).tools}

        async def ok(tool, root=ws, **args):
            r = await c.call_tool(tool, {"root": str(root), **args})
            assert not r.is_error, r.content[0].text
            if schemas[tool]:
                jsonschema.validate(r.structured_content, schemas[tool])
            await c.send_ping()  # still alive after every result
            return r.structured_content

        await ok("tc_init", name="odd names")
        s1 = await ok("tc_save", title="v1")
        for n in ODD:
            put(ws, n, b"v2 " + n)
        put(ws, b"new\xe9\tfile\n", b"only in v2")

        res = await ok("tc_resume")
        assert names(res["drift_paths"]) == set(ODD) | {b"new\xe9\tfile\n"}
        cap = await ok("tc_capture")
        assert cap["captured"] and names(cap["files"]["files"]) == set(ODD) | {b"new\xe9\tfile\n"}
        v2 = tree_state(ws)

        pre = await ok("tc_restore", index=s1["index"])
        plan = pre["plan"]
        assert names(plan["to_replace"]) == set(ODD) and names(plan["to_delete"]) == {b"new\xe9\tfile\n"}
        done = await ok("tc_restore", index=s1["index"], apply=True)
        assert done["applied"] and all(get(ws, n) == b"v1 " + n for n in ODD)
        assert not os.path.exists(os.path.join(os.fsencode(ws), b"new\xe9\tfile\n"))

        shown = await ok("tc_show", include_drift=True)
        assert [s["index"] for s in shown["steps"]] == [s1["index"]] and shown["drifts"]

        undo = await ok("tc_restore", drift_id=done["recovered"], apply=True)
        assert undo["applied"] and tree_state(ws) == v2
        await ok("tc_save", title="v2")

        exp = await ok("tc_export", to=str(out))
        imp = await ok("tc_import", root=ws2, package=exp["path"], apply=True)
        assert names(imp["restore"]["plan"]["to_write"]) == set(ODD) | {b"new\xe9\tfile\n"}
        assert tree_state(ws2) == v2

        # trajectory tools: a milestone links each code state; checkout and diff list the names
        await ok("tc_record", steps=[{"role": "user", "content": "v2 with odd names"}], session="s1",
                 milestone="two")
        await ok("tc_restore", index=s1["index"], apply=True)
        await ok("tc_record", steps=[{"role": "user", "content": "v2 with odd names"},
                                     {"role": "assistant", "content": "back to v1"}], session="s1", milestone="one")
        d = await ok("tc_trajectory_diff", a="two", b="one")
        assert names(d["code"]["files"]) == set(ODD) | {b"new\xe9\tfile\n"}
        co = await ok("tc_checkout", point="two", restore_code=True)
        assert names(co["restore"]["plan"]["to_replace"]) == set(ODD)
        co = await ok("tc_checkout", point="two", restore_code=True, apply=True)
        assert tree_state(ws) == v2
