"""Blame of a 10,000-line file with 500 steps of history (issue 32: goal under 0.5 s).

The history: 500 saved steps; before every other save an Edit-like change is captured as a drift
that names its tool call (as the PostToolUse hook records it), so 750 commits, each changing a
few scattered lines (replaced, inserted, deleted). Then, in-process, each with a fresh Engine:

- cold: the first blame, which computes the blame note of every commit of the chain;
- warm: blame again (the notes exist), median of --runs;
- one more drift: blame after one new commit (one note computed);
- why: one line's answer (no conversation recorded: the join is a lookup that finds nothing);
- CLI: `tc-git blame` as a process (interpreter and imports included), median of 3.

Writes benchmarks/results/blame.md.

    python benchmarks/bench_blame.py [--lines 10000] [--steps 500] [--runs 5]
"""
from __future__ import annotations

import argparse
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
GOAL_S = 0.5


def build(root: Path, lines: int, steps: int, seed: int = 32) -> None:
    from tc_git.engine import Engine

    rnd = random.Random(seed)
    text = [f"line {i}: {'x' * (i % 40)}\n" for i in range(lines)]
    f = root / "big.py"
    f.write_text("".join(text))
    e = Engine(root)
    e.init("blame bench", goal="a long history")
    e.save("start")
    for s in range(steps):
        for _ in range(3):
            i = rnd.randrange(len(text))
            text[i] = f"edited in {s}: {rnd.random()}\n"
        text.insert(rnd.randrange(len(text)), f"inserted in {s}\n")
        del text[rnd.randrange(len(text))]
        f.write_text("".join(text))
        if s % 2:
            e.capture(title=f"Edit big.py #{s}", tool_call={"id": f"toolu_{s:04d}", "name": "Edit",
                                                            "agent": "claude", "session": "bench",
                                                            "paths": ["big.py"]})
            text[rnd.randrange(len(text))] = f"by hand in {s}\n"
            f.write_text("".join(text))
        e.save(f"step {s + 1}")


def timed(fn) -> tuple[float, object]:
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lines", type=int, default=10000)
    ap.add_argument("--steps", type=int, default=500)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--out", default=str(HERE / "results" / "blame.md"))
    a = ap.parse_args()
    from tc_git.engine import Engine

    with tempfile.TemporaryDirectory() as d:
        root = Path(d) / "ws"
        root.mkdir()
        t_build, _ = timed(lambda: build(root, a.lines, a.steps))
        commits = len(Engine(root).log(limit=100000))
        cold, first = timed(lambda: Engine(root).blame("big.py", limit=100000))
        warm = [timed(lambda: Engine(root).blame("big.py", limit=100000))[0] for _ in range(a.runs)]
        f = root / "big.py"
        f.write_text(f.read_text().replace("line 5:", "line five:", 1))
        Engine(root).capture(title="one more", tool_call={"id": "toolu_last", "name": "Edit", "agent": "claude",
                                                          "session": "bench", "paths": ["big.py"]})
        inc, _ = timed(lambda: Engine(root).blame("big.py", limit=100000))
        why = [timed(lambda: Engine(root).why("big.py", a.lines // 2))[0] for _ in range(a.runs)]
        env = {k: v for k, v in os.environ.items() if not k.startswith(("TC_", "GIT_"))}
        cli = []
        for _ in range(3):
            t = time.perf_counter()
            subprocess.run([sys.executable, "-m", "tc_git.cli", "-C", str(root), "--json", "blame", "big.py"],
                           check=True, capture_output=True, env=env)
            cli.append(time.perf_counter() - t)
        assert isinstance(first, dict)
        shares = first["shares"]
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    med = statistics.median(warm)
    rows = [
        ("cold: first blame (computes every note)", cold),
        (f"warm: blame, median of {a.runs}", med),
        ("after one more drift (one note computed)", inc),
        (f"why one line, median of {a.runs}", statistics.median(why)),
        ("CLI `tc-git blame --json` as a process, median of 3", statistics.median(cli)),
    ]
    md = [f"# Blame: {a.lines:,}-line file, {a.steps} steps ({commits} commits)", "",
          f"Python {platform.python_version()}, {platform.machine()}, {os.cpu_count()} CPUs, load {load:.1f} at the end; "
          f"history built in {t_build:.1f} s. Goal: under {GOAL_S} s (warm: "
          f"{'met' if med < GOAL_S else 'NOT met'}).", "",
          f"Lines: {shares['agent']:,} by agent tool calls, {shares['other']:,} unattributed.", "",
          "| case | seconds |", "|---|---|"] + [f"| {n} | {t:.3f} |" for n, t in rows] + [
          "", "`python benchmarks/bench_blame.py " + " ".join(sys.argv[1:]) + "`", ""]
    Path(a.out).write_text("\n".join(md))
    print("\n".join(md))


if __name__ == "__main__":
    main()
