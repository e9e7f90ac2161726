"""What one `tc_save` over MCP reaches (issue 31, "a save that only saves"): Python calls into
tc-git's modules, how many of those modules, and all calls.

    python benchmarks/bench_save_calls.py                 # 2,000 files, 20 saves first, 5 profiled
    python benchmarks/bench_save_calls.py --per-function

The server's `call_tool` is driven in-process (`build_server(watch=False)`), its engine work run
in this thread so that cProfile sees it (the worker thread is what anyio would use); the settings
are installed once, as a front end does. Each profiled save edits 3 files first; the median of 5
saves (by tc-git calls) is printed, with the calls per module.
"""
from __future__ import annotations

import argparse
import asyncio
import collections
import cProfile
import os
import pstats
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from common import edit_files, make_workspace  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--files", type=int, default=2000)
    ap.add_argument("--warm", type=int, default=20, help="saves before the profiled ones")
    ap.add_argument("--per-function", action="store_true")
    a = ap.parse_args()

    import anyio.to_thread

    async def inline(fn, *args, **_kw):
        return fn(*args)

    anyio.to_thread.run_sync = inline  # (the engine's work in this thread, where cProfile looks)
    import tc_git
    from tc_git.base import settings
    from tc_git.mcp.server import build_server

    settings.install(settings.Settings.from_env())
    base = os.path.dirname(tc_git.__file__)
    ws = Path(tempfile.mkdtemp(prefix="tc-bench-calls-")) / "ws"
    ws.mkdir()
    make_workspace(ws, a.files, binary_mb=1)
    srv = build_server(watch=False)
    root = str(ws)

    async def run() -> list:
        await srv.call_tool("tc_init", {"name": "calls", "root": root})
        for i in range(a.warm):
            edit_files(ws, 3, f"w{i}", a.files)
            await srv.call_tool("tc_save", {"title": f"warm {i}", "root": root, "conclusion": "c", "next": "n"})
        out = []
        for i in range(5):
            edit_files(ws, 3, f"p{i}", a.files)
            pr = cProfile.Profile()
            pr.enable()
            await srv.call_tool("tc_save", {"title": f"profiled {i}", "root": root, "conclusion": "c", "next": "n"})
            pr.disable()
            stats = pstats.Stats(pr).stats  # type: ignore[attr-defined]
            per: collections.Counter = collections.Counter()
            funcs: collections.Counter = collections.Counter()
            for (path, line, name), (_cc, calls, _tt, _ct, _callers) in stats.items():
                if path.startswith(base):
                    rel = os.path.relpath(path, base)
                    per[rel] += calls
                    funcs[f"{rel}:{line}({name})"] += calls
            out.append((sum(per.values()), per, funcs, sum(v[1] for v in stats.values())))
        return out

    res = sorted(asyncio.run(run()), key=lambda r: r[0])
    calls, per, funcs, everything = res[len(res) // 2]
    print(f"tc_save: {calls} calls into {len(per)} tc_git modules ({everything} calls in all)")
    for name, n in (funcs if a.per_function else per).most_common():
        print(f"  {n:5d} {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
