"""tc-mcp vs task-checkpoint-mcp 0.1.7, side by side in one run, through the same SDK client.

Measures, for each server:
  * cold start: process spawn -> initialize -> first answered tools/list (median of --starts);
  * per-call latency of every tool on workspaces of --sizes files (median of --repeat calls);
  * byte size of tools/list and of typical responses (the JSON-RPC result as sent).

Both servers run over stdio with TC_WATCH=off and TC_GIT=off, on identical freshly generated
workspaces (not git repositories). Writes a markdown table to benchmarks/results/mcp.md.

    python benchmarks/bench_mcp.py                 # 1k and 10k files
    python benchmarks/bench_mcp.py --big           # adds 50k
    python benchmarks/bench_mcp.py --sizes 2000 --repeat 2 --out /tmp/mcp.md
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import anyio

warnings.filterwarnings("ignore")
SEED = "task-checkpoint-mcp==0.1.7"
HERE = Path(__file__).resolve().parent


# ----------------------------------------------------------------------------- setup
def ensure_seed() -> list[str]:
    exe = shutil.which("task-checkpoint-mcp")
    if exe is None:
        print(f"installing {SEED} ...", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", SEED], check=True)
        exe = shutil.which("task-checkpoint-mcp")
    if exe is None:
        raise SystemExit("task-checkpoint-mcp did not install a console script")
    return [exe]


def servers() -> dict[str, list[str]]:
    return {"tc-mcp": [sys.executable, "-m", "tc_git"], "seed 0.1.7": seed_server_cmd()}


# tc-mcp with its drift watcher on (it never captures by itself here: hour-long quiet period), so
# saves go through the change journal (issue 14)
JOURNAL = ["env", "TC_WATCH=on", "TC_WATCH_INTERVAL=3600", "TC_DRIFT_MAX_WAIT=3600", sys.executable, "-m", "tc_git"]


class PeakRSS:
    """Peak resident memory of this process's children (the server under test), sampled every 50 ms."""

    def __init__(self):
        import threading

        self.peak = 0
        self.window = 0  # peak since the last window() call: what one tool call costs
        self.window_anon = 0  # anonymous memory at that peak (the rest: mapped files, e.g. packs, .so)
        self.last_anon = 0  # window_anon of the window window_peak() just closed
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self.stop.wait(0.05):
            self.sample()

    def sample(self) -> None:
        try:
            import psutil
        except ImportError:
            return
        for ch in psutil.Process().children(recursive=True):
            try:
                rss = ch.memory_info().rss
            except psutil.Error:
                continue
            self.peak = max(self.peak, rss)
            if rss > self.window:
                self.window, self.window_anon = rss, _anon_bytes(ch.pid)

    def window_peak(self) -> int:
        """The peak since the last call (sampled once more now), and a new window."""
        self.sample()
        out, self.last_anon, self.window, self.window_anon = self.window, self.window_anon, 0, 0
        return out

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()


def _anon_bytes(pid: int) -> int:
    """Anonymous resident memory of a process (heap, arenas: Linux smaps_rollup; 0 elsewhere):
    the part of the resident size a call allocated, not file pages it mapped (packs, libraries)."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Anonymous:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


# ----------------------------------------------------------------------------- cold start, tools/list (issue 11)
def seed_server_cmd() -> list[str]:
    """The seed's stdio server from the private --target directory of benchmarks/common.py (a normal
    pip install would replace tc-git's own `tc-mcp` script)."""
    sys.path.insert(0, str(HERE))
    from common import SEED_DIR
    from common import ensure_seed as ensure_seed_dir

    if not ensure_seed_dir():
        raise SystemExit("could not install task-checkpoint-mcp 0.1.7 into " + str(SEED_DIR))
    return [sys.executable, "-c", f"import sys; sys.path.insert(0, {str(SEED_DIR)!r}); import tc_mcp; tc_mcp.main()"]


MODERN_META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
               "io.modelcontextprotocol/clientInfo": {"name": "bench", "version": "0"},
               "io.modelcontextprotocol/clientCapabilities": {}}


def raw_cold_start(cmd: list[str], cwd: str, extra_env: dict | None = None, modern: bool = False) -> dict:
    """Spawn the server and speak newline-delimited JSON-RPC on its pipes (no client library in the
    way): seconds from spawn to the initialize answer and to the tools/list answer, and the
    tools/list result as compact JSON. `modern`: as the mcp 2.x SDK's default client (mode "auto")
    opens a session: server/discover, then tools/list with the protocol version in `_meta`."""
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                         env={**env(), **(extra_env or {})}, cwd=cwd)

    def ask(msg: dict) -> dict:
        p.stdin.write((json.dumps(msg) + "\n").encode())
        p.stdin.flush()
        while True:
            line = p.stdout.readline()
            if not line:
                raise RuntimeError(f"{cmd[0]} closed stdout")
            reply = json.loads(line)
            if reply.get("id") == msg["id"]:
                return reply

    try:
        if modern:
            ask({"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": MODERN_META}})
            t_init = time.perf_counter() - t0
            tools = ask({"jsonrpc": "2.0", "id": 2, "method": "tools/list",
                         "params": {"_meta": MODERN_META}})["result"]["tools"]
        else:
            ask({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                 "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                            "clientInfo": {"name": "bench", "version": "0"}}})
            t_init = time.perf_counter() - t0
            p.stdin.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
            tools = ask({"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}})["result"]["tools"]
        t_list = time.perf_counter() - t0
    finally:
        p.stdin.close()
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
    return {"initialize": t_init, "tools_list": t_list, "tools": tools}


def compact_bytes(value) -> int:
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())


def cold_start_report(srv: dict[str, list[str]], starts: int) -> list[str]:
    """Markdown: cold start to initialize and to tools/list (median), and tools/list bytes per tool
    (compact JSON) for every server side by side; the seed's ten tools first."""
    scratch = tempfile.mkdtemp(prefix="bench-mcp-cold-")
    # tc-mcp twice: as installed (fast start from its cache) and with mcp_fast=off (the SDK first)
    # and tc-mcp as the current SDK's default client opens a session (discover; no initialize)
    variants = {name: (cmd, {}, False) for name, cmd in srv.items()}
    ours = next(iter(srv))
    variants = {ours: variants.pop(ours), f"{ours} mcp_fast=off": (srv[ours], {"TC_TEST_SETTINGS": "mcp_fast=off"}, False),
                f"{ours}, 2026 client (discover)": (srv[ours], {}, True),
                f"{ours} mcp_fast=off, 2026 client (discover)": (srv[ours], {"TC_TEST_SETTINGS": "mcp_fast=off"}, True),
                **variants}
    runs: dict[str, list[dict]] = {name: [] for name in variants}
    try:
        for cmd, extra, modern in variants.values():  # untimed: byte-compile, page cache, tc-mcp's start cache
            raw_cold_start(cmd, scratch, extra, modern)
        for _ in range(starts):  # interleaved, so a load spike hits every server alike
            for name, (cmd, extra, modern) in variants.items():
                runs[name].append(raw_cold_start(cmd, scratch, extra, modern))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "?"
    lines = [f"## Cold start (raw stdio, median of {starts}) and tools/list size", "",
             f"Load average at the end: {load} (on {os.cpu_count()} CPUs; timings on a busy machine are "
             "inflated, compare the rows with each other). One untimed start per server first (tc-mcp's "
             "fast-start cache is written by it).", "",
             "| server | spawn -> initialize (or discover) answered | spawn -> tools/list answered | tools | tools/list bytes |",
             "|---|---|---|---|---|"]
    per_tool: dict[str, dict[str, int]] = {}
    for name, rs in runs.items():
        tools = rs[-1]["tools"]
        per_tool[name] = {t["name"]: compact_bytes(t) for t in tools}
        lines.append(f"| {name} | {fmt_s(statistics.median(r['initialize'] for r in rs))} | "
                     f"{fmt_s(statistics.median(r['tools_list'] for r in rs))} | {len(tools)} | "
                     f"{compact_bytes({'tools': tools})} |")
        print(f"cold {name}: init {statistics.median(r['initialize'] for r in rs):.3f}s, tools/list "
              f"{statistics.median(r['tools_list'] for r in rs):.3f}s, {compact_bytes({'tools': tools})} B",
              file=sys.stderr)
    lines += sdk_cold_report(srv[ours], starts)
    names = list(runs)
    order = list(dict.fromkeys(k for n in names for k in per_tool[n]))
    lines += ["", "tools/list bytes per tool (compact JSON: name, description, schemas, annotations):", "",
              "| tool | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for tool in order:
        lines.append(f"| {tool} | " + " | ".join(str(per_tool[n].get(tool, "—")) for n in names) + " |")
    lines.append("")
    return lines


def sdk_cold_start(cmd: list[str], mode: str | None, extra_env: dict | None = None) -> float:
    """Seconds from spawn to the first answered tools/list through the SDK's own stdio client, in
    `mode` ("legacy": initialize; None: the client's default, server/discover with the version in
    every request's `_meta`). The client library is imported before the clock starts."""
    from mcp import Client, StdioServerParameters

    async def once() -> float:
        params = StdioServerParameters(command=cmd[0], args=cmd[1:], env={**env(), **(extra_env or {})})
        t0 = time.perf_counter()
        async with (Client(params, mode=mode) if mode else Client(params)) as c:
            await c.list_tools()
            return time.perf_counter() - t0

    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1) as pool:  # its own event loop (the report runs inside main_async's)
        return pool.submit(anyio.run, once).result()


def sdk_cold_report(cmd: list[str], starts: int) -> list[str]:
    """Markdown: spawn -> tools/list through the SDK client, both handshakes, cached and not."""
    fresh = {"XDG_CACHE_HOME": ""}  # a new empty cache directory for each start: the first start of an install
    variants = {"default mode (server/discover)": (None, {}), "legacy (initialize)": ("legacy", {}),
                "default mode, nothing cached (first start)": (None, fresh),
                "legacy, nothing cached (first start)": ("legacy", fresh)}
    runs: dict[str, list[float]] = {k: [] for k in variants}
    scratch = tempfile.mkdtemp(prefix="bench-mcp-sdk-cold-")

    def start(mode, extra) -> float:
        if extra is fresh:
            extra = {"XDG_CACHE_HOME": tempfile.mkdtemp(dir=scratch)}
        return sdk_cold_start(cmd, mode, extra)

    try:
        for mode, extra in variants.values():
            start(mode, extra)  # untimed: the fast-start cache, page cache
        for _ in range(starts):
            for name, (mode, extra) in variants.items():
                runs[name].append(start(mode, extra))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "?"
    lines = ["", f"### tc-mcp through the SDK's stdio client (`mcp` {_mcp_version()}), median of {starts}", "",
             f"Spawn -> first tools/list answered, the client's own handshake; load average at the end {load}.", "",
             "| client handshake | min | median | max |", "|---|---|---|---|"]
    for name, ts in runs.items():
        lines.append(f"| {name} | {fmt_s(min(ts))} | {fmt_s(statistics.median(ts))} | {fmt_s(max(ts))} |")
        print(f"sdk cold {name}: median {statistics.median(ts):.3f}s", file=sys.stderr)
    return lines + [""]


def env() -> dict:
    e = {k: v for k, v in os.environ.items() if not k.startswith(("TC_", "GIT_"))}
    e.update(TC_WATCH="off", TC_GIT="off")
    return e


def make_workspace(path: Path, n: int, seed: int = 7) -> None:
    """n files, 100 per directory, two levels, 200 B - 2 KB of text each, a few executables."""
    rng = random.Random(seed)
    words = [f"w{i}" for i in range(500)]
    path.mkdir(parents=True)
    for i in range(n):
        d = path / f"pkg{i // 1000:03d}" / f"mod{(i // 100) % 10:02d}"
        if i % 100 == 0:
            d.mkdir(parents=True, exist_ok=True)
        body = " ".join(rng.choice(words) for _ in range(rng.randint(30, 300)))
        f = d / f"file{i:06d}.py"
        f.write_text(f"# {i}\n{body}\n")
        if i % 250 == 0:
            os.chmod(f, 0o755)


def edit(ws: Path, n: int, k: int, tag: str) -> list[str]:
    """Change k existing files (deterministic choice)."""
    rng = random.Random(hash((tag, k)) & 0xFFFF)
    out = []
    for _ in range(k):
        i = rng.randrange(n)
        f = ws / f"pkg{i // 1000:03d}" / f"mod{(i // 100) % 10:02d}" / f"file{i:06d}.py"
        with open(f, "a") as fh:
            fh.write(f"# edit {tag} {time.time_ns()}\n")
        out.append(str(f))
    return out


# ----------------------------------------------------------------------------- client
def client(cmd: list[str], cwd: str | None = None):
    from mcp import Client, StdioServerParameters

    return Client(StdioServerParameters(command=cmd[0], args=cmd[1:], env=env(), cwd=cwd), mode="legacy")


def wire_bytes(result) -> int:
    return len(result.model_dump_json(by_alias=True, exclude_none=True).encode())


async def cold_start(cmd: list[str], starts: int) -> tuple[float, int]:
    times, size = [], 0
    for _ in range(starts):
        t0 = time.perf_counter()
        async with client(cmd) as c:
            r = await c.list_tools()
            times.append(time.perf_counter() - t0)
            size = wire_bytes(r)
    return statistics.median(times), size


class Timer:
    def __init__(self, c, label, rss: PeakRSS | None = None):
        self.c, self.label, self.rss = c, label, rss
        self.times: dict[str, list[float]] = {}
        self.sizes: dict[str, int] = {}
        self.errors: dict[str, str] = {}
        self.peaks: dict[str, int] = {}  # the server's peak RSS during each kind of call
        self.anon: dict[str, int] = {}  # its anonymous part at that peak

    async def call(self, key: str, tool: str, args: dict, size=False):
        if self.rss:
            self.rss.window_peak()
        t0 = time.perf_counter()
        r = await self.c.call_tool(tool, args)
        dt = time.perf_counter() - t0
        if self.rss:
            peak = self.rss.window_peak()
            if peak >= self.peaks.get(key, 0):
                self.peaks[key], self.anon[key] = peak, self.rss.last_anon
        if r.is_error:
            text = r.content[0].text if r.content else "?"
            self.errors[key] = text[:160]
            print(f"  [{self.label}] {key}: ERROR {text[:160]}", file=sys.stderr)
            return None
        self.times.setdefault(key, []).append(dt)
        if size:
            self.sizes[key] = wire_bytes(r)
        return r.structured_content or json.loads(r.content[0].text)


async def run_workflow(cmd: list[str], label: str, ws: Path, n: int, repeat: int, scratch: Path,
                       rss: PeakRSS | None = None) -> Timer:
    root = str(ws)
    async with client(cmd) as c:
        T = Timer(c, label, rss)
        if rss:
            await c.list_tools()
            T.peaks["(started, tools/list answered)"] = rss.window_peak()
            T.anon["(started, tools/list answered)"] = rss.last_anon
        init = await T.call("tc_init", "tc_init", {"root": root, "name": "bench", "goal": "measure"}, size=True)
        task_id = init["task_id"] if init else None
        await T.call("tc_save (first, full tree)", "tc_save", {"root": root, "title": "s1", "next": "go"})
        for _ in range(repeat):
            await T.call("tc_save (no change)", "tc_save", {"root": root, "title": "s1", "next": "go"}, size=True)
        for i in range(repeat):
            edit(ws, n, 1, f"one{i}")
            await T.call("tc_save (1 file changed)", "tc_save", {"root": root, "title": f"one {i}",
                                                                  "conclusion": "c", "next": "n"})
        for i in range(repeat):
            edit(ws, n, 100, f"hundred{i}")
            await T.call("tc_save (100 files changed)", "tc_save", {"root": root, "title": f"hundred {i}"})
        edit(ws, n, 3, "unsaved")
        for _ in range(repeat):
            await T.call("tc_resume", "tc_resume", {"root": root}, size=True)
        for _ in range(repeat):
            await T.call("tc_show", "tc_show", {"root": root}, size=True)
        for _ in range(repeat):
            await T.call("tc_show (one step)", "tc_show", {"root": root, "index": 1})
        await T.call("tc_capture (3 files changed)", "tc_capture", {"root": root}, size=True)
        for _ in range(repeat):
            await T.call("tc_capture (no change)", "tc_capture", {"root": root})
        for i in range(repeat):
            edit(ws, n, 1, f"cap{i}")
            await T.call("tc_capture (1 file changed)", "tc_capture", {"root": root})
        for _ in range(repeat):
            await T.call("tc_restore preview (step 1)", "tc_restore", {"root": root, "index": 1}, size=True)
        # The workspace is ~400 files away from step 1 here (the saves' and captures' edits): that first
        # restore is its own row, so each timed "restore apply" below writes back exactly 100 files.
        await T.call("tc_restore apply (step 1, ~400 files back)", "tc_restore",
                     {"root": root, "index": 1, "apply": True})
        for i in range(repeat):
            edit(ws, n, 100, f"restore{i}")
            await T.call("tc_restore apply (step 1)", "tc_restore", {"root": root, "index": 1, "apply": True},
                         size=True)
        other = await T.call("tc_init (second task)", "tc_init", {"root": root, "name": "other"})
        if task_id:
            for _ in range(repeat):
                await T.call("tc_switch", "tc_switch", {"root": root, "task_id": task_id}, size=True)
                if other:
                    await T.call("tc_switch", "tc_switch", {"root": root, "task_id": other["task_id"]})
            await T.call("tc_switch", "tc_switch", {"root": root, "task_id": task_id})
        for i in range(repeat):
            tag = "".join(ch if ch.isalnum() else "_" for ch in label)
            to = scratch / f"{tag}-{n}-export{i}"
            to.mkdir(parents=True)
            ex = await T.call("tc_export", "tc_export", {"root": root, "to": str(to)}, size=True)
            if ex and i == 0:
                ws2 = scratch / f"{tag}-{n}-import"
                ws2.mkdir()
                await T.call("tc_import", "tc_import", {"root": str(ws2), "package": ex["path"]}, size=True)
        for _ in range(repeat):
            await T.call("tc_compress", "tc_compress", {"root": root}, size=True)
    return T


# ----------------------------------------------------------------------------- report
def fmt_s(v: float | None) -> str:
    if v is None:
        return "—"
    return f"{v * 1000:.0f} ms" if v < 10 else f"{v:.1f} s"


def ratio(seed: float | None, ours: float | None) -> str:
    if not seed or not ours:
        return "—"
    r = seed / ours
    return f"{r:.0f}x" if r >= 10 else f"{r:.1f}x"


async def main_async(args) -> str:
    srv = {"tc-mcp": [sys.executable, "-m", "tc_git"]} if args.no_seed else servers()
    lines = ["# MCP server: tc-mcp vs task-checkpoint-mcp 0.1.7", ""]
    lines.append(f"One run, {time.strftime('%Y-%m-%d %H:%M')} — Python {platform.python_version()}, "
                 f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs. Same SDK client "
                 f"(`mcp` {_mcp_version()}, stdio, legacy handshake), both servers with TC_WATCH=off, "
                 f"TC_GIT=off, workspaces not git repositories. Latency = median of {args.repeat} calls "
                 f"(single calls: first save, tc_init, tc_import), measured at the client, round trip "
                 f"included. `{' '.join(['python benchmarks/bench_mcp.py', *sys.argv[1:]])}`; load average at "
                 f"the start {', '.join(f'{x:.1f}' for x in os.getloadavg())}.")
    lines.append("")

    lines += cold_start_report(srv, args.starts)
    if args.cold_only:
        return "\n".join(lines)

    # cold start + tools/list size
    lines += ["## Cold start and tools/list (through the SDK client)", "",
              "| server | spawn -> first tools/list answered | tools/list bytes |", "|---|---|---|"]
    cold = {}
    for name, cmd in srv.items():
        cold[name] = await cold_start(cmd, args.starts)
        print(f"cold start {name}: {cold[name][0]:.3f}s, tools/list {cold[name][1]} B", file=sys.stderr)
        lines.append(f"| {name} | {fmt_s(cold[name][0])} | {cold[name][1]} |")
    lines.append("")

    seed_name = list(srv)[1]
    if not args.no_journal:
        srv = {**srv, "tc-mcp + journal": JOURNAL}
    results: dict[int, dict[str, Timer]] = {}
    git_first: dict[int, float] = {}
    scratch = Path(tempfile.mkdtemp(prefix="bench-mcp-"))
    try:
        for n in args.sizes:
            results[n] = {}
            ws = scratch / f"ws-git-{n}"
            make_workspace(ws, n)
            git_first[n] = git_first_save(ws, scratch / f"git-{n}")
            print(f"git CLI first save @ {n}: {git_first[n]:.2f}s", file=sys.stderr)
            shutil.rmtree(ws, ignore_errors=True)
            shutil.rmtree(scratch / f"git-{n}", ignore_errors=True)
            for name, cmd in srv.items():
                if name == seed_name and n > args.seed_max:
                    continue  # the seed takes minutes per call series at 50k (--seed-max)
                ws = scratch / f"ws-{name.split()[0]}-{n}"
                t0 = time.perf_counter()
                make_workspace(ws, n)
                print(f"{n} files for {name}: generated in {time.perf_counter() - t0:.1f}s", file=sys.stderr)
                t0 = time.perf_counter()
                with PeakRSS() as rss:
                    results[n][name] = await run_workflow(cmd, name, ws, n, args.repeat, scratch, rss)
                results[n][name].peak_rss = rss.peak
                print(f"  workflow {name} @ {n}: {time.perf_counter() - t0:.1f}s", file=sys.stderr)
                shutil.rmtree(ws, ignore_errors=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    names = list(srv)
    ours, seed = names[0], names[1]
    keys = []
    for n in args.sizes:
        for T in results[n].values():
            for k in list(T.times) + list(T.errors):
                if k not in keys:
                    keys.append(k)
    lines += ["## Per-call latency", ""]
    head = "| call |" + "".join(f" {ours} {n // 1000}k | seed {n // 1000}k | speed-up {n // 1000}k |"
                                 for n in args.sizes)
    lines += [head, "|---|" + "---|---|---|" * len(args.sizes)]
    for k in keys:
        row = f"| {k} |"
        for n in args.sizes:
            a = results[n][ours].times.get(k)
            b = results[n][seed].times.get(k) if seed in results[n] else None
            ma = statistics.median(a) if a else None
            mb = statistics.median(b) if b else None
            sa = fmt_s(ma) if a else ("error" if k in results[n][ours].errors else "—")
            sb = fmt_s(mb) if b else ("error" if seed in results[n] and k in results[n][seed].errors else "—")
            row += f" {sa} | {sb} | {ratio(mb, ma)} |"
        lines.append(row)
    lines.append("")
    errs = [(n, name, k, msg) for n in args.sizes for name, T in results[n].items() for k, msg in T.errors.items()]
    if errs:
        lines += ["Errors (isError results):", ""]
        for n, name, k, msg in errs:
            lines.append(f"- {name} @ {n} files, {k}: `{msg.replace('|', '/')}`")
        lines.append("")

    n0 = args.sizes[-1]
    lines += journal_and_goals(results, args.sizes, ours, seed, git_first)
    lines += [f"## Response sizes (bytes of the JSON-RPC result, {n0 // 1000}k files)", "",
              f"| response | {ours} | seed |", "|---|---|---|"]
    for k in keys:
        a = results[n0][ours].sizes.get(k)
        b = results[n0][seed].sizes.get(k) if seed in results[n0] else None
        if a or b:
            lines.append(f"| {k} | {a or '—'} | {b or '—'} |")
    lines.append("")
    return "\n".join(lines)


def _k(n: int) -> str:
    return f"{n // 1000}k" if n >= 1000 else str(n)


def git_first_save(ws: Path, gitdir: Path) -> float:
    """The git CLI doing a first snapshot of `ws` into a private GIT_DIR (what tc_save's first call
    does): add -A, write-tree, commit-tree, update-ref."""
    e = {k: v for k, v in os.environ.items() if not k.startswith(("GIT_", "TC_"))}
    e.update(GIT_DIR=str(gitdir), GIT_WORK_TREE=str(ws), GIT_AUTHOR_NAME="b", GIT_AUTHOR_EMAIL="b@x",
             GIT_COMMITTER_NAME="b", GIT_COMMITTER_EMAIL="b@x")
    subprocess.run(["git", "init", "-q", "--bare", str(gitdir)], check=True, capture_output=True)

    def git(*a):
        return subprocess.run(["git", *a], check=True, env=e, capture_output=True, text=True).stdout.strip()

    t0 = time.perf_counter()
    git("add", "-A")
    c = git("commit-tree", git("write-tree"), "-m", "s1")
    git("update-ref", "refs/checkpoints/bench", c)
    return time.perf_counter() - t0


def journal_and_goals(results, sizes, ours, seed, git_first=None) -> list[str]:
    """tc-mcp with and without the change journal, peak RSS, and issue 14's MCP goals."""
    med = lambda T, k: statistics.median(T.times[k]) if T and T.times.get(k) else None  # noqa: E731
    out = []
    if all("tc-mcp + journal" in results[n] for n in sizes):
        out += ["## tc-mcp with the change journal (drift watcher on)", "",
                "| call |" + "".join(f" without {_k(n)} | with journal {_k(n)} |" for n in sizes),
                "|---|" + "---|---|" * len(sizes)]
        for k in ("tc_save (no change)", "tc_save (1 file changed)", "tc_save (100 files changed)",
                  "tc_capture (no change)", "tc_capture (1 file changed)", "tc_restore apply (step 1)"):
            out.append(f"| {k} |" + "".join(f" {fmt_s(med(results[n][ours], k))} | "
                                              f"{fmt_s(med(results[n]['tc-mcp + journal'], k))} |" for n in sizes))
        out.append("")
    out += ["## Peak RSS of the server process (psutil, sampled every 50 ms)", "",
            "| server |" + "".join(f" {_k(n)} |" for n in sizes), "|---|" + "---|" * len(sizes)]
    for name in dict.fromkeys(k for n in sizes for k in results[n]):
        out.append(f"| {name} |" + "".join(
            f" {getattr(results[n][name], 'peak_rss', 0) / (1 << 20):.0f} MiB |" if name in results[n] else " — |"
            for n in sizes))
    out.append("")
    big = max(sizes)
    if results[big][ours].peaks:
        names = [k for k in results[big] if results[big][k].peaks]
        out += [f"Peak RSS during each call at {_k(big)} (the process's peak while the call ran; a call never "
                "lowers it below what earlier calls left allocated; in parentheses its anonymous part, the "
                "rest being mapped files: libraries, pack windows):", "",
                "| call |" + "".join(f" {k} |" for k in names), "|---|" + "---|" * len(names)]
        for key in dict.fromkeys(k for name in names for k in results[big][name].peaks):
            out.append(f"| {key} |" + "".join(
                f" {results[big][name].peaks[key] / (1 << 20):.0f} MiB{_anon_note(results[big][name], key)} |"
                if key in results[big][name].peaks else " — |" for name in names))
        out.append("")
    n = 10_000 if 10_000 in results else max(sizes)
    at = f"{_k(n)}" + ("" if n == 10_000 else " (stand-in for 10k)")
    goals = []
    for k, label in (("tc_save (100 files changed)", "100-file save"), ("tc_restore apply (step 1)", "restore apply")):
        a, b = med(results[n][ours], k), med(results[n].get(seed), k)
        if a and b:
            goals.append((f"{at}: {label} over MCP >= 20x faster than the seed", b / a >= 20, f"{b / a:.1f}x"))
    for m in sizes:
        a = med(results[m][ours], "tc_save (first, full tree)")
        g = (git_first or {}).get(m)
        if a and g:
            goals.append((f"{_k(m)}: first save over MCP <= 1.0x the git CLI's (add -A + write-tree + "
                          "commit-tree)", a <= g, f"{a / g:.2f}x ({fmt_s(a)} vs {fmt_s(g)})"))
    rss = getattr(results[big][ours], "peak_rss", 0) / (1 << 20)
    if rss:  # 0: psutil is not installed (pip install 'tc-git[bench]')
        goals.append((f"{_k(big)}{'' if big == 50_000 else ' (stand-in for 50k)'}: server peak RSS < 150 MiB",
                      rss < 150, f"{rss:.0f} MiB"))
    if "tc-mcp + journal" in results[big]:
        for k in ("tc_save (no change)", "tc_save (1 file changed)"):
            t = med(results[big]["tc-mcp + journal"], k)
            if t is not None:
                goals.append((f"{_k(big)}: {k} with the journal <= 20 ms (round trip included)", t <= 0.020,
                              fmt_s(t)))
    out += ["## Goals (issue 14)", "", "| goal | verdict | measured |", "|---|---|---|",
            *[f"| {g} | {'PASS' if ok else 'FAIL'} | {m} |" for g, ok, m in goals], ""]
    return out


def _anon_note(T: Timer, key: str) -> str:
    a = T.anon.get(key, 0)
    return f" ({a / (1 << 20):.0f})" if a else ""


def _mcp_version() -> str:
    from importlib.metadata import version

    return version("mcp")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1000,10000", help="comma-separated workspace sizes (files)")
    ap.add_argument("--big", action="store_true", help="add a 50k-file workspace")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--seed-max", type=int, default=10000, help="run the seed only up to this many files "
                    "(its calls take 14-27 s each at 50k; default 10000)")
    ap.add_argument("--starts", type=int, default=5, help="cold starts per server")
    ap.add_argument("--out", default=str(HERE / "results" / "mcp.md"))
    ap.add_argument("--cold-only", action="store_true", help="only cold start and tools/list sizes")
    ap.add_argument("--no-seed", action="store_true", help="tc-mcp only (no task-checkpoint-mcp to install)")
    ap.add_argument("--no-journal", action="store_true", help="skip tc-mcp with the drift watcher's journal")
    args = ap.parse_args()
    args.sizes = [int(x) for x in args.sizes.split(",") if x.strip()]
    if args.big and 50000 not in args.sizes:
        args.sizes.append(50000)
    text = anyio.run(main_async, args)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text + "\n")
    print(text)
    if out.resolve() == (HERE / "results" / "mcp.md").resolve():
        sys.path.insert(0, str(HERE))
        import readme

        readme.render()


if __name__ == "__main__":
    main()
