"""The first file edit in a fresh HOME: how long Claude Code's PostToolUse hook takes (issue 30).

The secret engine (Kingfisher) compiles its ~490 rules once per machine into a disk cache
(`~/.cache/kingfisher/rule-cache`); whoever scans content first pays it (~5 s of CPU). Before issue 30
that was the first PostToolUse hook of the first session. Now `tc-git setup` compiles them, the MCP
server does in a background thread at start, and a hook that still finds them missing hands its
capture to a detached worker that compiles them first. Cases, each in its own fresh HOME, a
workspace with a task and a step, then a Write of a file with a credential-shaped token (so the
engine is needed), the hook fed the event as Claude Code does:

- cold: nothing built the rule cache (no setup, no MCP server yet): the hook hands over;
- built: `build_rule_cache()` ran first (what `tc-git setup` and the MCP server's start-up do);
  the hook loads the compiled rules (~0.3 s) because the edit is credential-shaped;
- built, plain edit: the same, the file an ordinary one (the engine is not loaded at all).

Wall ms of the hook process and its CPU ms (user + sys; wall is inflated on a loaded machine).

    python benchmarks/bench_first_edit.py [--runs 3]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
PY = sys.executable


def run(cmd, home: Path, stdin: str = "", cwd: Path | None = None) -> tuple[float, float]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GIT_", "TC_", "KF_", "XDG_"))}
    env.update(HOME=str(home), TC_GIT="off")
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    r = subprocess.run(cmd, input=stdin.encode(), capture_output=True, env=env, cwd=cwd)
    wall = (time.perf_counter() - t0) * 1000
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode != 0:
        raise SystemExit(f"{cmd} failed: {r.stderr.decode()[-2000:]}")
    return wall, ((ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)) * 1000


def one(tmp: Path, built: bool, plain: bool = False) -> dict:
    home, ws = tmp / "home", tmp / "ws"
    home.mkdir()
    (ws / "src").mkdir(parents=True)
    for i in range(50):
        (ws / "src" / f"m{i}.py").write_text(f"def f{i}():\n    return {i}\n")
    cli = [PY, "-c", "import sys; from tc_git.cli import main; sys.exit(main(sys.argv[1:]))"]
    run(cli + ["-C", str(ws), "init", "first edit"], home)
    out: dict = {}
    if built:
        out["build"] = run([PY, "-c", "from tc_git.workspace import secrets; assert secrets.build_rule_cache()"], home)
    edited = ws / "src" / "conf.py"  # a credential-shaped value: the content scan needs the engine
    edited.write_text("TIMEOUT = 30\n" if plain else 'API_TOKEN = "' + "tkn_" + "9fQ2xL7vB4mN8sR1tY6wZ3cK5hJ0dG" + '"\n')
    ev = json.dumps({"session_id": "c0ffee00-first", "cwd": str(ws), "hook_event_name": "PostToolUse",
                     "tool_name": "Write", "tool_use_id": "toolu_first",
                     "tool_input": {"file_path": str(edited)}, "tool_response": {"success": True}})
    out["hook"] = run([PY, "-P", "-m", "tc_git.hooks", "post-tool-use"], home, ev, cwd=ws)
    log = ws / ".checkpoints" / "tc" / "hooks.log"
    deadline = time.monotonic() + 600  # the cold case's worker: done before the next case starts
    while "handed to worker" in log.read_text() and time.monotonic() < deadline and \
            not any(w in log.read_text() for w in ("worker: capture failed", "toolu_first: drift", "toolu_first: no")):
        time.sleep(0.2)
    out["handed"] = "handed to worker" in log.read_text()
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--out", default=str(HERE / "results" / "hooks-first-edit.md"))
    a = ap.parse_args()
    load0 = os.getloadavg()
    rows: dict[str, list[dict]] = {"cold": [], "built": [], "built, plain edit": []}
    for _ in range(a.runs):  # interleaved: a load spike hits both cases alike
        for case in rows:
            with tempfile.TemporaryDirectory(prefix="tc-bench-first-") as d:
                rows[case].append(one(Path(d), case != "cold", plain=case.endswith("plain edit")))
    med = lambda xs: statistics.median(xs)  # noqa: E731
    lines = ["# First PostToolUse hook in a fresh HOME (secret rule cache)", "",
             f"{time.strftime('%Y-%m-%d %H:%M')} — Python {platform.python_version()}, {platform.system()} "
             f"{platform.machine()}, {os.cpu_count()} CPUs; load average {load0[0]:.1f} at the start, "
             f"{os.getloadavg()[0]:.1f} at the end (wall times on a busy machine are inflated: compare CPU). "
             f"Median of {a.runs}. `python benchmarks/bench_first_edit.py`.", "",
             "| case | hook wall | hook CPU | capture handed to the worker | rule-cache build (setup / MCP server) wall / CPU |",
             "|---|---|---|---|---|"]
    for case, rs in rows.items():
        build = (f"{med([r['build'][0] for r in rs]):.0f} ms / {med([r['build'][1] for r in rs]):.0f} ms"
                 if case != "cold" else "—")
        lines.append(f"| {case} | {med([r['hook'][0] for r in rs]):.0f} ms | {med([r['hook'][1] for r in rs]):.0f} ms "
                     f"| {sum(r['handed'] for r in rs)} of {len(rs)} | {build} |")
    lines.append("")
    Path(a.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
