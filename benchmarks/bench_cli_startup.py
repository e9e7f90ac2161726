"""Start-up of the read-only CLI commands (issue 33): `tc-git log`, `show`, `resume` as whole
processes, warm (bytecode cached, files in the page cache), against `git log` on the same store.

    python benchmarks/bench_cli_startup.py                        # 2,000 files, 2,000 steps, 20 runs
    python benchmarks/bench_cli_startup.py --steps 200 --runs 10 --src /tmp/old-checkout

One workspace and store built in-process through the engine (3 files edited per step, a drift
every 10 steps, as bench_history.py). Then each command runs `--runs` times after 2 warm-up runs,
one after another; each run's CPU (user + system, from the kernel's accounting of the child) and
wall time are recorded and the median printed. Floors measured the same way: the interpreter
alone (`python -c pass`) and `python -c "import pygit2"`.

"Warm" means what an installed tc-git has: compiled bytecode. The runs get a private bytecode
cache (PYTHONPYCACHEPREFIX in a temporary directory, PYTHONDONTWRITEBYTECODE removed), filled by
the warm-up runs; a checkout run with PYTHONDONTWRITEBYTECODE=1 compiles every module at every
start and measures that instead.

`--src DIR` runs the commands from another checkout's `tc_git` (put first on PYTHONPATH): the same
store, the same interpreter, an older or newer tree; the before/after rows of
benchmarks/results/cli-startup.md were taken that way.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from common import clean_env, edit_files, make_workspace  # noqa: E402

ENTRY = "import sys; from tc_git.cli import main; sys.exit(main())"  # what the `tc-git` script runs


def build(root: Path, files: int, steps: int) -> Path:
    from tc_git.engine import Engine

    ws = root / "ws"
    ws.mkdir()
    make_workspace(ws, files, binary_mb=1)
    e = Engine(ws)
    e.init("startup", goal="a long task")
    e.save("first")
    for i in range(2, steps + 1):
        edit_files(ws, 3, f"s{i}", files)
        e.save(f"step {i}", conclusion=f"conclusion {i}", next=f"next {i}")
        if i % 10 == 0:
            edit_files(ws, 1, f"d{i}", files)
            e.capture()
    return ws


def timed(cmd: list[str], cwd: Path, env: dict) -> tuple[float, float]:
    """(cpu s, wall s) of one whole process: the kernel's user + system time of the child."""
    t = time.perf_counter()
    p = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _pid, status, ru = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t
    p.returncode = os.waitstatus_to_exitcode(status)
    err = p.stderr.read() if p.stderr else b""
    if p.returncode != 0:
        raise SystemExit(f"{cmd} failed ({p.returncode}): {err.decode(errors='replace')[-2000:]}")
    return ru.ru_utime + ru.ru_stime, wall


def series(cmd: list[str], cwd: Path, env: dict, runs: int) -> dict:
    for _ in range(2):
        timed(cmd, cwd, env)
    cpu, wall = zip(*(timed(cmd, cwd, env) for _ in range(runs)))
    return {"cpu_ms": statistics.median(cpu) * 1000, "wall_ms": statistics.median(wall) * 1000,
            "cpu_min_ms": min(cpu) * 1000, "cpu_max_ms": max(cpu) * 1000}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=2000)
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--src", action="append", default=[], metavar="DIR",
                    help="also run the commands from this checkout (repeatable; a column each)")
    ap.add_argument("--ws", type=Path, default=None, help="reuse this workspace (from an earlier run)")
    ap.add_argument("--out", type=Path, default=None, help="write the JSON results here")
    a = ap.parse_args(argv)

    tmp = Path(tempfile.mkdtemp(prefix="tc-bench-startup-"))
    t = time.perf_counter()
    ws = a.ws or build(tmp, a.files, a.steps)
    print(f"workspace {ws} ({'reused' if a.ws else f'built in {time.perf_counter() - t:.0f} s'})", flush=True)
    store = ws / ".checkpoints"
    env = clean_env(PYTHONPYCACHEPREFIX=str(tmp / "pyc"), TC_GIT="off")
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    py = sys.executable
    here = str(Path(__file__).resolve().parents[1])
    trees = [("this tree", here)] + [(f"--src {s}", str(Path(s).resolve())) for s in a.src]
    rows: dict = {}
    floors = {
        "python -c pass": [py, "-c", "pass"],
        "python -c 'import pygit2'": [py, "-c", "import pygit2"],
        "git log -n 50 (same store)": ["git", f"--git-dir={store}", "log", "-n", "50", "--format=%h %ad %s",
                                       "--all"],
    }
    for label, cmd in floors.items():
        rows[label] = series(cmd, ws, env, a.runs)
        print(label, json.dumps(rows[label]), flush=True)
    for name, src in trees:
        tenv = dict(env, PYTHONPATH=src)
        for command in (["log"], ["show"], ["resume"]):
            label = f"tc-git {' '.join(command)} [{name}]"
            rows[label] = series([py, "-c", ENTRY, *command], ws, tenv, a.runs)
            print(label, json.dumps(rows[label]), flush=True)
    res = {"files": a.files, "steps": a.steps, "runs": a.runs, "rows": rows, "load": os.getloadavg(),
           "python": sys.version.split()[0]}
    if a.out:
        a.out.write_text(json.dumps(res, indent=2))
    print("\n| command | CPU (median) | min-max | wall (median) |\n|---|---|---|---|")
    for label, r in rows.items():
        print(f"| `{label}` | {r['cpu_ms']:.0f} ms | {r['cpu_min_ms']:.0f}-{r['cpu_max_ms']:.0f} | {r['wall_ms']:.0f} ms |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
