"""Soak (issue 33): one real `tc-mcp` server over stdio, a day of agent work compressed.

    python benchmarks/bench_soak.py                               # 10,000 files, 3,000 rounds
    python benchmarks/bench_soak.py --files 2000 --rounds 300 --out /tmp/soak.md

One server process for the whole run, driven by the official `mcp` SDK client. Each round is
what an agent does between two steps: edit files (3 per round, a new file every 5th round),
then a mix of calls — tc_save every round; tc_show (the log: limit 5) and tc_resume every
round; tc_show with drifts every 3rd; a restore preview to step 1 and to the step before every
4th; tc_capture after an extra edit every 2nd (an explicit drift); a restore applied and undone
every 50th; tc_compress every 500th. The server runs with its drift watcher ON (TC_WATCH=on,
TC_WATCH_INTERVAL=--watch-interval seconds), so drifts also come from the file edits, as in a
real session.

Measured: every call's kind and latency (client side, request to answer), the server's RSS every
--rss-every calls (psutil), and how the server ended: it is started as `sh -c 'python -m tc_git
2>ERR; echo $? >STATUS'`, so an abort (SIGABRT: 134; `Fatal Python error` in ERR) is seen even
after the client closed. Writes a Markdown report with verdicts (no abort; RSS flat after
warm-up; latency of each call kind flat), a JSON file and a PNG plot beside it.

Nothing in the tests depends on these figures: tests/test_soak.py is the short form for CI
(correctness and no abort, no time asserted).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

import anyio

warnings.filterwarnings("ignore")
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from common import clean_env, edit_files, file_path, make_workspace  # noqa: E402

WARMUP = 0.2  # the first 20% of the calls: the server's caches fill, the store's first packs form
WINDOWS = 10  # the run cut into 10 windows of equal call counts


def _rss(pid: int) -> int | None:
    import psutil

    try:
        return psutil.Process(pid).memory_info().rss
    except psutil.Error:
        return None


def _server_pid(marker: str) -> int | None:
    import psutil

    for p in psutil.Process().children(recursive=True):
        try:
            cmd = p.cmdline()
        except psutil.Error:
            continue
        try:
            mine = p.environ().get("TC_SOAK_RUN") == marker
        except psutil.Error:
            continue
        if "tc_git" in cmd and "-m" in cmd and mine:
            return p.pid
    return None


async def soak(ws: Path, files: int, rounds: int, max_seconds: float, watch_interval: float, rss_every: int,
               tmp: Path) -> dict:
    from mcp import Client, StdioServerParameters

    root = str(ws)
    status, err = tmp / "server.status", tmp / "server.err"
    marker = tmp.name
    env = clean_env(TC_WATCH="on", TC_WATCH_INTERVAL=str(watch_interval), TC_GIT="off", TC_SOAK_RUN=marker,
                    **({"TC_TEST_SETTINGS": os.environ["SOAK_SETTINGS"]} if os.environ.get("SOAK_SETTINGS") else {}))
    cmd = f"'{sys.executable}' -m tc_git 2>'{err}'; echo $? >'{status}'"
    params = StdioServerParameters(command="sh", args=["-c", cmd], env=env, cwd=root)
    calls: list[dict] = []
    rss: list[dict] = []
    failures: list[dict] = []
    t0 = time.perf_counter()
    pid = None
    head = 0
    async with Client(params, mode="legacy", read_timeout_seconds=600) as c:
        async def call(tool, /, label="", **args):
            nonlocal pid
            kind = tool + (f"({label})" if label else "")
            t = time.perf_counter()
            r = await c.call_tool(tool, {"root": root, **args})
            ms = (time.perf_counter() - t) * 1000
            calls.append({"n": len(calls), "kind": kind, "ms": ms, "t": time.perf_counter() - t0})
            text = r.content[0].text if r.content else ""
            if r.is_error:
                failures.append({"n": len(calls), "tool": tool, "args": args, "error": text[:500]})
                return {}
            if pid is None:
                pid = _server_pid(marker)
            if pid is not None and len(calls) % rss_every == 0:
                rss.append({"n": len(calls), "t": time.perf_counter() - t0, "rss": _rss(pid)})
            return json.loads(text)

        await call("tc_init", name="soak", goal="a day of agent work, compressed")
        head = (await call("tc_save", title="base")).get("index", 1)
        done = 0
        for i in range(rounds):
            if time.perf_counter() - t0 > max_seconds:
                break
            edit_files(ws, 3, f"r{i}", files)
            if i % 5 == 4:
                new = ws / "src" / "new" / f"n{i}.py"
                new.parent.mkdir(parents=True, exist_ok=True)
                new.write_text(f"n = {i}\n")
            head = (await call("tc_save", title=f"round {i}", conclusion=f"did {i}", next=f"then {i + 1}")).get(
                "index", head)
            await call("tc_show", limit=5)
            await call("tc_resume")
            if i % 3 == 0:
                await call("tc_show", "drifts", include_drift=True, limit=5)
            if i % 4 == 1:
                await call("tc_restore", "preview to 1", index=1)
                await call("tc_restore", "preview to N-1", index=max(1, head - 1))
            if i % 2 == 0:
                with open(ws / file_path((i * 13) % files), "a") as f:
                    f.write(f"# drift {i}\n")
                await call("tc_capture")
            if i % 50 == 49:
                await call("tc_restore", "apply", index=max(1, head - 1), apply=True)
                await call("tc_undo", "apply", apply=True)
            if i % 500 == 499:
                await call("tc_compress", keep_seconds=0, minimum=20, maximum=50)
            done = i + 1
        await c.list_tools()  # still answering
        final_rss = _rss(pid) if pid else None
    seconds = time.perf_counter() - t0
    for _ in range(100):  # the shell writes the status once the server exited
        if status.exists() and status.read_text().strip():
            break
        await anyio.sleep(0.1)
    code = status.read_text().strip() if status.exists() else "?"
    errtext = err.read_text(errors="replace") if err.exists() else ""
    return {"files": files, "rounds": done, "calls": len(calls), "seconds": seconds, "steps": head,
            "exit": code, "fatal": "Fatal Python error" in errtext, "stderr_tail": errtext[-2000:],
            "failures": failures, "rss": rss, "final_rss": final_rss, "samples": calls,
            "python": platform.python_version(), "load": os.getloadavg(), "watch_interval": watch_interval}


def windows(res: dict) -> dict[str, list[float | None]]:
    """Per call kind, the median latency in each of WINDOWS equal slices of the run's calls."""
    n = res["calls"]
    out: dict[str, list[float | None]] = {}
    for kind in sorted({s["kind"] for s in res["samples"]}):
        row: list[float | None] = []
        for w in range(WINDOWS):
            lo, hi = n * w // WINDOWS, n * (w + 1) // WINDOWS
            xs = [s["ms"] for s in res["samples"] if s["kind"] == kind and lo <= s["n"] < hi]
            row.append(statistics.median(xs) if xs else None)
        out[kind] = row
    return out


def verdicts(res: dict, win: dict) -> list[str]:
    out = []
    aborted = res["exit"] not in ("0",) or res["fatal"]
    out.append(f"no abort: {'met' if not aborted and not res['failures'] else 'NOT met'} (server exit status "
               f"{res['exit']}, fatal error in stderr: {res['fatal']}, {len(res['failures'])} error results "
               f"of {res['calls']:,} calls)")
    after = [r["rss"] for r in res["rss"] if r["rss"] and r["n"] >= WARMUP * res["calls"]]
    if len(after) >= 4:
        q = max(1, len(after) // 10)
        first, last = statistics.median(after[:q]), statistics.median(after[-q:])
        growth = last / first - 1
        out.append(f"RSS flat after warm-up (the last tenth within 10% of the first tenth after the first "
                   f"{WARMUP:.0%} of calls): {'met' if growth <= 0.10 else 'NOT met'} ({first / 2**20:.0f} -> "
                   f"{last / 2**20:.0f} MiB, {growth:+.1%}; peak {max(after) / 2**20:.0f} MiB)")
    flat, grew = [], []
    n = res["calls"]
    for kind in win:
        xs = [s for s in res["samples"] if s["kind"] == kind]
        first = [s["ms"] for s in xs if WARMUP * n <= s["n"] < (WARMUP + 0.2) * n]
        last = [s["ms"] for s in xs if s["n"] >= 0.8 * n]
        if len(first) < 3 or len(last) < 3:
            continue
        base, end = statistics.median(first), statistics.median(last)
        (flat if end <= 1.5 * base + 5 else grew).append(f"{kind} {base:.0f} -> {end:.0f} ms")
    out.append(f"latency of each call kind flat (median over the last fifth of the calls within 1.5x (+5 ms) of "
               f"the fifth after warm-up): {'met' if not grew else 'NOT met'}; grew: {'; '.join(grew) or 'none'}; "
               f"flat: {'; '.join(flat)}")
    return out


def report(res: dict, win: dict, png: str | None) -> str:
    mib = 2**20
    lines = [f"# Soak: one tc-mcp server, {res['calls']:,} calls over {res['files']:,} files (issue 33)", "",
             f"`benchmarks/bench_soak.py --files {res['files']} --rounds {res['rounds']}`: Python {res['python']}, "
             f"{res['calls']:,} calls in {res['seconds'] / 60:.1f} min ({res['rounds']:,} rounds; the task reached "
             f"step {res['steps']:,}), drift watcher on (interval {res['watch_interval']:g} s), load at the end "
             f"{res['load'][0]:.1f}. Latency is the client's (request to answer), median per tenth of the run.", ""]
    lines += ["## Verdicts", ""] + [f"- {v}" for v in verdicts(res, win)] + [""]
    head = "| call kind | n | " + " | ".join(f"{10 * (w + 1)}%" for w in range(WINDOWS)) + " |"
    lines += ["## Latency (ms) per tenth of the run", "", head, "|---|---|" + "---|" * WINDOWS]
    for kind, row in win.items():
        n = sum(1 for s in res["samples"] if s["kind"] == kind)
        lines.append(f"| {kind} | {n:,} | " + " | ".join("-" if x is None else f"{x:.0f}" for x in row) + " |")
    lines += ["", "## Server RSS", ""]
    pts = [r for r in res["rss"] if r["rss"]]
    if pts:
        step = max(1, len(pts) // 10)
        lines += ["| after calls | " + " | ".join(f"{r['n']:,}" for r in pts[::step]) + " |",
                  "|---|" + "---|" * len(pts[::step]),
                  "| RSS MiB | " + " | ".join(f"{r['rss'] / mib:.0f}" for r in pts[::step]) + " |"]
    if png:
        lines += ["", f"![soak]({png})"]
    if res["failures"]:
        lines += ["", "## Error results", ""] + [f"- {f['tool']} {f['args']}: {f['error']}" for f in res["failures"][:20]]
    return "\n".join(lines) + "\n"


def plot(res: dict, path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, (a, b) = plt.subplots(2, 1, figsize=(10, 8), sharex=True)
    pts = [r for r in res["rss"] if r["rss"]]
    a.plot([r["n"] for r in pts], [r["rss"] / 2**20 for r in pts])
    a.set_ylabel("server RSS (MiB)")
    a.set_ylim(bottom=0)
    a.set_title(f"tc-mcp soak: {res['calls']:,} calls, {res['files']:,} files, one server")
    for kind in sorted({s["kind"] for s in res["samples"]}):
        xs = [s for s in res["samples"] if s["kind"] == kind]
        if len(xs) < 20:
            continue
        k = max(5, len(xs) // 50)  # rolling median over k calls of this kind
        med = [statistics.median(x["ms"] for x in xs[i:i + k]) for i in range(0, len(xs) - k + 1, max(1, k // 2))]
        ns = [xs[i + k // 2]["n"] for i in range(0, len(xs) - k + 1, max(1, k // 2))]
        b.plot(ns, med, label=kind)
    b.set_yscale("log")
    b.set_ylabel("latency, rolling median (ms)")
    b.set_xlabel("calls")
    b.legend(fontsize=7, ncol=3)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    return True


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=10000)
    ap.add_argument("--rounds", type=int, default=3000, help="agent rounds (~5.6 calls each)")
    ap.add_argument("--max-minutes", type=float, default=120, help="stop starting rounds after this long")
    ap.add_argument("--watch-interval", type=float, default=2.0, help="TC_WATCH_INTERVAL of the server")
    ap.add_argument("--rss-every", type=int, default=25, help="sample the server's RSS every N calls")
    ap.add_argument("--out", type=Path, default=HERE / "results" / "soak.md")
    a = ap.parse_args(argv)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="tc-bench-soak-"))
    ws = tmp / "ws"
    ws.mkdir()
    make_workspace(ws, a.files, binary_mb=1)
    res = anyio.run(soak, ws, a.files, a.rounds, a.max_minutes * 60, a.watch_interval, a.rss_every, tmp)
    win = windows(res)
    png = a.out.with_suffix(".png")
    made = plot(res, png)
    a.out.write_text(report(res, win, png.name if made else None))
    a.out.with_suffix(".json").write_text(json.dumps({k: v for k, v in res.items() if k != "samples"}, indent=1))
    print(a.out.read_text())
    return 0 if res["exit"] == "0" and not res["fatal"] and not res["failures"] else 1


if __name__ == "__main__":
    sys.exit(main())
