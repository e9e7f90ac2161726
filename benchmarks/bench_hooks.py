"""Hook entry start time: how long the agent waits for each tc-git hook process.

Every case is a fresh process fed the event JSON on stdin, as Claude Code runs a command hook;
the time is spawn to exit, wall clock (median and p90 of --runs). Cases:

- python -c pass: the interpreter and `site` alone (the floor nothing below can beat);
- hook entry, no store: SessionStart in a directory without a store (what every session of
  every project without tc-git pays), through `python -P -m tc_git.hooks` and through the
  `tc-hook` console-script form (`from tc_git.hooks import main`);
- `tc hook` through the full CLI (loads every extension: why the hook has its own entry);
- SessionStart with an active task (handoff text injected; loads the engine and pygit2);
- SessionEnd with an active task (returns after handing the recording to a detached worker;
  the worker's own time is reported separately);
- PostToolUse Write with one changed file (records a drift).

Goal (issue 5): hook start under 150 ms. Writes benchmarks/results/hooks.md.

    python benchmarks/bench_hooks.py [--runs 20]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
FIXTURE = HERE.parent / "tests" / "fixtures" / "transcripts" / "claude-drmaciver-2.jsonl"
PY = sys.executable
GOAL_MS = 150


def env() -> dict:
    e = {k: v for k, v in os.environ.items() if not k.startswith(("GIT_", "TC_"))}
    e["TC_TEST_SETTINGS"] = "hook_regrow=0.1"
    return e


CPU: dict[str, list[float]] = {}


def timed(cmd: list[str], stdin: str, runs: int, before=None, after=None, label: str = "") -> list[float]:
    """Wall ms per run; the child's CPU ms (user + sys, from rusage) go to CPU[label]."""
    import resource

    out = []
    for _ in range(runs):
        if before:
            before()
        ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        r = subprocess.run(cmd, input=stdin.encode(), capture_output=True, env=env())
        out.append((time.perf_counter() - t0) * 1000)
        ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        CPU.setdefault(label, []).append(((ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)) * 1000)
        if r.returncode != 0 or r.stderr:
            raise SystemExit(f"{cmd} failed: {r.stderr.decode()}")
        if after:
            after(r)
    return out


def stats(ms: list[float]) -> dict:
    s = sorted(ms)
    return {"median": statistics.median(s), "p90": s[min(len(s) - 1, int(len(s) * 0.9))], "min": s[0]}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--out", default=str(HERE / "results" / "hooks.md"))
    a = ap.parse_args()
    sys.path.insert(0, str(HERE.parent))
    from tc_git.engine import Engine

    tmp = Path(tempfile.mkdtemp(prefix="tc-bench-hooks-"))
    try:
        plain = tmp / "plain"
        plain.mkdir()
        ws = tmp / "ws"
        (ws / "src").mkdir(parents=True)
        for i in range(200):
            (ws / "src" / f"m{i}.py").write_text(f"def f{i}():\n    return {i}\n" * 20)
        e = Engine(ws)
        e.init("bench hooks", goal="measure the hook entry", constraints="none")
        e.save("baseline", conclusion="200 files", next="edit one")
        transcript = tmp / "c0ffee00-bench.jsonl"
        shutil.copy(FIXTURE, transcript)

        def ev(cwd: Path, name: str, **kw) -> str:
            d = {"session_id": "c0ffee00-bench", "transcript_path": str(transcript), "cwd": str(cwd),
                 "hook_event_name": name}
            d.update(kw)
            return json.dumps(d)

        m = [PY, "-P", "-m", "tc_git.hooks"]
        script = [PY, "-c", "import sys; from tc_git.hooks import main; sys.exit(main())"]
        tc_bin = Path(PY).parent / "tc"
        tc_cli = [str(tc_bin)] if tc_bin.exists() else [PY, "-c", "import sys; from tc_git.cli import main; sys.exit(main())"]
        cases = []  # (label, cmd, stdin, gated, before, after)

        def case(label, cmd, stdin, gated=True, before=None, after=None):
            cases.append((label, cmd, stdin, gated, before, after))

        case("python -c pass (interpreter + site, the floor)", [PY, "-c", "pass"], "", gated=False)
        start_plain = ev(plain, "SessionStart", source="startup")
        case("SessionStart, no store: python -P -m tc_git.hooks", m + ["session-start"], start_plain)
        case("SessionStart, no store: tc-hook console-script form", script + ["session-start"], start_plain)
        case("SessionEnd, no store: python -P -m tc_git.hooks", m + ["session-end"],
             ev(plain, "SessionEnd", reason="other"))
        case("SessionStart, no store: `tc hook` (full CLI, all extensions)", tc_cli + ["hook", "session-start"],
             start_plain, gated=False)

        def check_context(r):
            assert "additionalContext" in r.stdout.decode()

        case("SessionStart, active task: handoff injected", m + ["session-start"],
             ev(ws, "SessionStart", source="resume"), after=check_context)

        log = ws / ".checkpoints" / "tc" / "hooks.log"
        count = lambda: log.read_text().count("worker: recorded") if log.exists() else 0  # noqa: E731
        worker_times = []
        state = {}

        def before_end():
            state["n"] = count()

        def after_end(_r):
            t0 = time.perf_counter()
            while count() <= state["n"] and time.perf_counter() - t0 < 30:
                time.sleep(0.01)
            worker_times.append((time.perf_counter() - t0) * 1000)
            time.sleep(0.3)  # let the worker's re-check finish before the next measurement

        case("SessionEnd, active task: return after spawning the worker", m + ["session-end"],
             ev(ws, "SessionEnd", reason="prompt_input_exit"), before=before_end, after=after_end)
        counter = {"i": 0}

        def touch():
            counter["i"] += 1
            (ws / "src" / "m0.py").write_text(f"edited {counter['i']}\n")

        case("PostToolUse Write, one changed file: drift recorded", m + ["post-tool-use"],
             ev(ws, "PostToolUse", tool_name="Write", tool_use_id="toolu_b",
                tool_input={"file_path": str(ws / "src" / "m0.py")}, tool_response={"success": True}),
             gated=False, before=touch)

        # Round-robin: every round runs every case once, so machine load hits all cases alike,
        # and each case's overhead over the floor is taken within the same round.
        times = {c[0]: [] for c in cases}
        timed([PY, "-c", "import tc_git.hooks, tc_git.engine"], "", 1)  # warm the .pyc files
        for _ in range(a.runs):
            for label, cmd, stdin, _g, before, after in cases:
                times[label] += timed(cmd, stdin, 1, before=before, after=after, label=label)
        floor = times[cases[0][0]]
        rows = []
        for label, _cmd, _stdin, gated, _b, _a in cases:
            t = stats(times[label])
            t["over"] = statistics.median(x - f for x, f in zip(times[label], floor))
            t["cpu"] = statistics.median(CPU[label])
            rows.append((label, t, gated))
            print(f"{label:<62} median {t['median']:6.1f} ms  p90 {t['p90']:6.1f}  min {t['min']:6.1f}  "
                  f"over floor {t['over']:6.1f}  cpu {t['cpu']:6.1f}", flush=True)

        imp = subprocess.run([PY, "-X", "importtime", "-c", "import tc_git.hooks"], capture_output=True,
                             text=True, env=env()).stderr
        self_us = [int(line.split("|")[1]) for line in imp.splitlines() if line.rstrip().endswith(" tc_git.hooks")]
        first_worker = worker_times[0] if worker_times else float("nan")
    finally:
        time.sleep(0.5)
        shutil.rmtree(tmp, ignore_errors=True)

    lines = [
        "# Hook entry start time",
        "",
        f"`python benchmarks/bench_hooks.py --runs {a.runs}` on {platform.platform()}, Python "
        f"{platform.python_version()}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the end, "
        f"{time.strftime('%Y-%m-%d')}. Cases run round-robin, one of each per round. Each run is a fresh "
        "process fed the event JSON on stdin (as Claude Code runs a command hook); wall time from spawn to exit. "
        f"Goal (issue 5): under {GOAL_MS} ms.",
        "",
        "| case | wall median ms | wall p90 ms | wall min ms | over the floor, ms (paired median) | CPU median ms (user+sys) | under 150 ms |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for label, t, gated in rows:
        mark = (("yes" if t["median"] < GOAL_MS else "**no**") + " / " + ("yes" if t["cpu"] < GOAL_MS else "**no**")
                if gated else "-")
        lines.append(f"| {label} | {t['median']:.1f} | {t['p90']:.1f} | {t['min']:.1f} | {t['over']:.1f} | "
                     f"{t['cpu']:.1f} | {mark} |")
    lines += [
        "",
        "The last column judges the goal twice: by wall median / by CPU median. CPU time (the child's user + sys "
        "from rusage, the detached worker excluded) is what the process costs on an idle machine; wall time also "
        "holds waiting for a CPU, which dominates when the machine is loaded (see the load average above: "
        "compare the floor's wall and CPU time).",
        "",
        f"- `import tc_git.hooks` itself: {self_us[0] / 1000 if self_us else float('nan'):.1f} ms cumulative "
        "(standard library only; no pygit2, no mcp until a handler needs the engine).",
        f"- The detached SessionEnd worker (capture, record the {FIXTURE.name} fixture, link the tip to the code) "
        f"finished {first_worker:.0f} ms after the hook returned on the first run (a new recording), "
        f"{statistics.median(worker_times[1:]) if len(worker_times) > 1 else float('nan'):.0f} ms median on "
        "re-runs (nothing new to write; includes its 0.3 s settle delay).",
        "- `tc hook` goes through the whole CLI, whose extension loading imports pygit2 and the trajectory "
        "package before parsing: not fit for a hook. The hook configurations therefore call `tc-hook` or "
        "`python -P -m tc_git.hooks` (what `tc hooks install` writes: the interpreter's absolute path, no PATH "
        "lookup and no version-manager shim, which alone adds ~150 ms under pyenv).",
        "- The interpreter floor dominates the no-store cases: most of it is `site` running the environment's "
        ".pth files (here the editable-install finder and a .pth that imports certifi), not tc-git.",
        "- With an active task, SessionStart prints the handoff text the last save left in the store "
        "(`tc_git/timeline/handoff_cache.py`): no pygit2, no workspace scan. PostToolUse records a drift and so loads "
        "the engine: pygit2's import alone is ~120 ms (its enums and settings, which imports ssl).",
    ]
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
