"""The soak benchmark's short form (benchmarks/bench_soak.py; issue 33): one real `tc-mcp`
server over stdio, hundreds of mixed calls and drifts in one session. Asserted: every call
answers without an error result, the results say what the calls did, the server still
answers at the end, stock git judges the store. Nothing about time is asserted."""
from __future__ import annotations

import json
import sys

import pytest
from conftest import clean_env, write
from mcp import Client, StdioServerParameters

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("fsck_after"),
              pytest.mark.filterwarnings("ignore:.*(deprecated|removed as of):Warning")]

ROUNDS = 20  # 132 calls


async def test_one_server_many_mixed_calls(tmp_path):
    ws = tmp_path / "ws"
    for i in range(20):
        write(ws, f"src/m{i % 4}/f{i}.py", f"x = {i}\n")
    root = str(ws)
    env = clean_env(TC_WATCH="off", TC_GIT="off")
    params = StdioServerParameters(command=sys.executable, args=["-m", "tc_git"], env=env, cwd=root)
    calls = 0
    async with Client(params, mode="legacy") as c:
        async def call(tool, /, **args):
            nonlocal calls
            calls += 1
            r = await c.call_tool(tool, {"root": root, **args})
            assert not r.is_error, (tool, args, r.content[0].text)
            return json.loads(r.content[0].text)

        await call("tc_init", name="soak", goal="a long session")
        assert (await call("tc_save", title="base"))["index"] == 1
        for i in range(ROUNDS):
            write(ws, f"src/m{i % 4}/f{i % 20}.py", f"x = {i} # round\n")
            assert (await call("tc_capture"))["captured"]
            write(ws, f"src/m{(i + 1) % 4}/g{i}.py", f"y = {i}\n")
            assert (await call("tc_save", title=f"round {i}"))["index"] == i + 2
            assert (await call("tc_resume"))["head"] == i + 2
            assert (await call("tc_show", limit=5))["head"] == i + 2
            await call("tc_show", include_drift=True, limit=3)
            assert (await call("tc_restore", index=1))["applied"] is False
            if i % 5 == 4:
                assert (await call("tc_restore", index=i + 1, apply=True))["applied"]
                assert (await call("tc_undo", apply=True))["applied"]
            if i % 15 == 14:
                await call("tc_compress", keep_seconds=0, minimum=2, maximum=5)
        assert (await call("tc_show", limit=1))["steps"][0]["index"] == 1
        await c.list_tools()  # still answering
    assert calls == 2 + 6 * ROUNDS + 2 * (ROUNDS // 5) + ROUNDS // 15 + 1
