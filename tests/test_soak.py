"""The soak benchmark's short form (benchmarks/bench_soak.py; issue 33): one real `tc-mcp`
server over stdio, hundreds of mixed calls and drifts in one session. Asserted: every call
answers without an error result, the results say what the calls did, the server still
answers at the end and exits with status 0 (an abort such as `Fatal Python error:
none_dealloc` at exit is status 134), its memory stays bounded (generous slack: a leak of
the size of a store per call fails, noise does not), stock git judges the store. Nothing
about time is asserted."""
from __future__ import annotations

import json
import os
import sys

import anyio
import pytest
from conftest import clean_env, write
from mcp import Client, StdioServerParameters

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("fsck_after"),
              pytest.mark.filterwarnings("ignore:.*(deprecated|removed as of):Warning")]

ROUNDS = 20  # 132 calls


def _rss_kib(shell_pid: str) -> int | None:
    """Resident memory of the server: the child of the wrapper shell (Linux /proc; None elsewhere)."""
    try:
        for p in os.listdir("/proc"):
            if not p.isdigit():
                continue
            try:
                with open(f"/proc/{p}/stat") as f:
                    ppid = f.read().rsplit(")", 1)[1].split()[1]
                if ppid == shell_pid:
                    with open(f"/proc/{p}/status") as f:
                        return next(int(x.split()[1]) for x in f if x.startswith("VmRSS:"))
            except (OSError, StopIteration, IndexError, ValueError):
                continue
    except OSError:
        pass
    return None


async def test_one_server_many_mixed_calls(tmp_path):
    ws = tmp_path / "ws"
    for i in range(20):
        write(ws, f"src/m{i % 4}/f{i}.py", f"x = {i}\n")
    root = str(ws)
    env = clean_env(TC_WATCH="off", TC_GIT="off")
    # the server under a shell that keeps its exit status and stderr: an abort at exit is seen too
    shpid, status, err = tmp_path / "sh.pid", tmp_path / "status", tmp_path / "stderr"
    cmd = f'echo $$ >"{shpid}"; "{sys.executable}" -m tc_git 2>"{err}"; echo $? >"{status}"'
    params = StdioServerParameters(command="sh", args=["-c", cmd], env=env, cwd=root)
    calls = 0
    rss: list[int] = []
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
            if i in (4, ROUNDS - 1):  # after a warm-up, and at the end
                kib = _rss_kib(shpid.read_text().strip())
                if kib is not None:
                    rss.append(kib)
        assert (await call("tc_show", limit=1))["steps"][0]["index"] == 1
        await c.list_tools()  # still answering
    assert calls == 2 + 6 * ROUNDS + 2 * (ROUNDS // 5) + ROUNDS // 15 + 1
    if len(rss) == 2:  # bounded: at most 1.5x the warmed-up size plus 64 MiB (the bench measures flatness)
        assert rss[1] <= 1.5 * rss[0] + 64 * 1024, rss
    with anyio.fail_after(60):  # the shell writes the status once the server has exited
        while not (status.exists() and status.read_text().strip()):
            await anyio.sleep(0.05)
    stderr = err.read_text(errors="replace")
    assert status.read_text().strip() == "0" and "Fatal Python error" not in stderr, stderr[-3000:]
