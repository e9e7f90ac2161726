"""History growth (issue 33): what one task's calls cost after 10 ... N steps.

    python benchmarks/bench_history.py                           # 2,000 files, 2,000 steps
    python benchmarks/bench_history.py --files 5000 --steps 10000 --out /tmp/h.md

One workspace, one store, in-process through the engine (`Engine`): each step edits 3 files
and saves, a drift (capture) every 10 steps. At each checkpoint (10, 100, 500, 1,000, 2,000,
... steps) it measures, median of 5 unless said: save (median of the last 10 saves before the
checkpoint), `show` (default page), `log` (limit 50), `resume`, restore preview to step 1 and
to the step before the head, the store's size on disk, its loose objects and packs (`git
count-objects -v`) and the size of a bundle of the same history (`git bundle create --all`: what
git needs). After the last checkpoint: `compress` (keep 0 s) timed once and `git fsck` run.
Writes a Markdown table (verdicts per goal), a JSON file and a PNG plot beside it.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from common import clean_env, dir_bytes, edit_files, make_workspace  # noqa: E402


def _t(fn, n: int = 5) -> float:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t) * 1000)
    return statistics.median(out)


def _git(store: Path, *args) -> str:
    return subprocess.run(["git", f"--git-dir={store}", *args], capture_output=True, text=True,
                          env=clean_env(), check=True).stdout


CLI = "import sys; from tc_git.cli import main; sys.exit(main(sys.argv[1:]))"


def cli_cpu_ms(ws: Path, *args: str, n: int = 3) -> float:
    """A one-shot `tc-git <args>` process's CPU (user + system, median of n): what a person or a
    hook pays, start-up and a cold chain included (the in-process figures have a warm memo)."""
    import resource

    out = []
    for _ in range(n):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run([sys.executable, "-c", CLI, "-C", str(ws), *args], capture_output=True,
                       env=clean_env(), check=True)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        out.append((after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime) * 1000)
    return statistics.median(out)


def measure(e, store: Path, step: int, saves: list[float], tmp: Path, cpu: list[float]) -> dict:
    row: dict = {"steps": step, "save_ms": statistics.median(saves[-10:]), "save_cpu_ms": statistics.median(cpu[-10:])}
    row["show_ms"] = _t(lambda: e.show())
    row["log_ms"] = _t(lambda: e.log(limit=50))
    row["resume_ms"] = _t(lambda: e.resume())
    row["restore_first_ms"] = _t(lambda: e.restore(1), 3)
    row["restore_prev_ms"] = _t(lambda: e.restore(max(1, step - 1)), 3)
    for cmd in ("show", "log", "resume"):
        row[f"cli_{cmd}_cpu_ms"] = cli_cpu_ms(e.root, cmd)
    row["store_bytes"] = dir_bytes(store)[1]
    counts = dict(line.split(": ", 1) for line in _git(store, "count-objects", "-v").splitlines())
    row["loose"] = int(counts["count"])
    row["packs"] = int(counts["packs"])
    bundle = tmp / "h.bundle"
    _git(store, "bundle", "create", "-q", str(bundle), "--all")
    row["bundle_bytes"] = bundle.stat().st_size
    bundle.unlink()
    return row


def run(files: int, steps: int, checkpoints: list[int], compress: bool = True) -> dict:
    from tc_git.base import settings
    from tc_git.engine import Engine

    settings.install(settings.Settings.from_env())  # once, as every front end does (not per call)

    tmp = Path(tempfile.mkdtemp(prefix="tc-bench-history-"))
    ws = tmp / "ws"
    ws.mkdir()
    make_workspace(ws, files, binary_mb=1)
    e = Engine(ws)
    e.init("history", goal="a long task")
    t0 = time.perf_counter()
    e.save("first")
    first = (time.perf_counter() - t0) * 1000
    store = e.store.path
    rows, saves, cpu = [], [], []
    for i in range(2, steps + 1):  # the first save was step 1
        edit_files(ws, 3, f"s{i}", files)
        t, c = time.perf_counter(), time.process_time()
        e.save(f"step {i}")
        saves.append((time.perf_counter() - t) * 1000)
        cpu.append((time.process_time() - c) * 1000)  # (this process's CPU: less noisy on a loaded box)
        if i % 10 == 0:
            edit_files(ws, 1, f"d{i}", files)
            e.capture()
        if i in checkpoints:
            rows.append(measure(e, store, i, saves, tmp, cpu))
            print(json.dumps(rows[-1]), flush=True)
    t = time.perf_counter()
    comp = e.compress(keep_seconds=0) if compress else {}
    compress_s = time.perf_counter() - t if compress else None
    after = dir_bytes(store)[1]
    fsck = subprocess.run(["git", f"--git-dir={store}", "fsck", "--full"], capture_output=True, text=True,
                          env=clean_env())
    return {"files": files, "steps": steps, "first_save_ms": first, "rows": rows, "compress_s": compress_s,
            "compress": {k: comp.get(k) for k in ("converted", "bytes_freed")}, "store_after_compress": after,
            "fsck_ok": fsck.returncode == 0, "fsck_err": fsck.stderr[-500:],
            "python": platform.python_version(), "load": os.getloadavg()[0]}


def verdicts(res: dict) -> list[str]:
    rows = res["rows"]
    first, last = rows[0], rows[-1]
    out = []

    def ratio(k):
        return last[k] / first[k] if first[k] else float("inf")

    s = ratio("save_ms")
    out.append(f"save within 10 % of step {first['steps']}: {'met' if s <= 1.1 else 'NOT met'} "
               f"({first['save_ms']:.1f} -> {last['save_ms']:.1f} ms, x{s:.2f})")
    if "save_cpu_ms" in first:
        c = ratio("save_cpu_ms")
        out.append(f"save CPU within 10 % of step {first['steps']}: {'met' if c <= 1.1 else 'NOT met'} "
                   f"({first['save_cpu_ms']:.1f} -> {last['save_cpu_ms']:.1f} ms, x{c:.2f})")
    for k, name in (("show_ms", "show"), ("log_ms", "log (limit 50)"), ("resume_ms", "resume"),
                    ("cli_show_cpu_ms", "one-shot CLI show (CPU)"), ("cli_log_cpu_ms", "one-shot CLI log (CPU)"),
                    ("cli_resume_cpu_ms", "one-shot CLI resume (CPU)")):
        if k not in first:
            continue
        # from the first checkpoint that prints a whole page (50 steps): before it, show and log
        # print fewer entries, and O(what it prints) means the same page costs the same
        base = next((x for x in rows if x["steps"] >= 50 and x is not last), first) if "resume" not in k else first
        r = last[k] / base[k] if base[k] else float("inf")
        out.append(f"{name} O(what it prints) (<= 2x from step {base['steps']} to {last['steps']}): "
                   f"{'met' if r <= 2 else 'NOT met'} ({base[k]:.1f} -> {last[k]:.1f} ms, x{r:.2f})")
    r = last["restore_first_ms"] / max(last["restore_prev_ms"], 1e-9)
    out.append(f"restore to any point costs the same (step 1 vs the step before head at {last['steps']}): "
               f"{'met' if 0.5 <= r <= 2 else 'NOT met'} ({last['restore_first_ms']:.1f} vs "
               f"{last['restore_prev_ms']:.1f} ms)")
    worst = max(x["store_bytes"] / x["bundle_bytes"] for x in rows)
    out.append(f"store within ~2x of the bundle at every checkpoint: {'met' if worst <= 2.2 else 'NOT met'} "
               f"(worst x{worst:.1f})")
    if res["compress_s"] is not None:
        out.append(f"compress in seconds: {'met' if res['compress_s'] < 10 else 'NOT met'} "
                   f"({res['compress_s']:.1f} s at {res['steps']} steps)")
    out.append(f"git fsck: {'ok' if res['fsck_ok'] else 'FAILED'}")
    return out


def markdown(res: dict) -> str:
    mb = 1 << 20
    lines = [f"# History growth: {res['files']:,} files, {res['steps']:,} steps (3 files per step, a drift every 10)",
             "", f"Python {res['python']}, load average {res['load']:.1f} at the end; in-process (`Engine`);"
             f" first save {res['first_save_ms']:.0f} ms.", "",
             "| after N steps | save (median of last 10) | save CPU | show | log (50) | resume | restore preview to 1 "
             "| restore preview to N-1 | CLI show / log / resume (CPU) | store | bundle | loose objects | packs |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    nan = float("nan")
    for r in res["rows"]:
        cli = " / ".join(f"{r.get(f'cli_{c}_cpu_ms', nan):.0f}" for c in ("show", "log", "resume"))
        lines.append(f"| {r['steps']:,} | {r['save_ms']:.1f} ms | {r.get('save_cpu_ms', nan):.1f} ms | {r['show_ms']:.1f} ms | {r['log_ms']:.1f} ms | "
                     f"{r['resume_ms']:.1f} ms | {r['restore_first_ms']:.1f} ms | {r['restore_prev_ms']:.1f} ms | {cli} ms | "
                     f"{r['store_bytes'] / mb:.1f} MB | {r['bundle_bytes'] / mb:.1f} MB | {r['loose']:,} | {r['packs']} |")
    if res["compress_s"] is not None:
        lines += ["", f"compress (keep 0 s) after {res['steps']:,} steps: {res['compress_s']:.1f} s "
                  f"({res['compress']}); store after it {res['store_after_compress'] / mb:.1f} MB."]
    lines += ["", "## Verdicts", ""] + [f"- {v}" for v in verdicts(res)]
    return "\n".join(lines) + "\n"


def plot(res: dict, path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    rows = res["rows"]
    xs = [r["steps"] for r in rows]
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    for k, name in (("save_ms", "save"), ("show_ms", "show"), ("log_ms", "log 50"), ("resume_ms", "resume"),
                    ("restore_first_ms", "restore preview to 1")):
        a.plot(xs, [r[k] for r in rows], marker="o", label=name)
    a.set_xscale("log")
    a.set_xlabel("steps in the task")
    a.set_ylabel("ms")
    a.legend()
    a.set_title("call cost against history length")
    b.plot(xs, [r["store_bytes"] / (1 << 20) for r in rows], marker="o", label="store on disk")
    b.plot(xs, [r["bundle_bytes"] / (1 << 20) for r in rows], marker="o", label="bundle (git's need)")
    b.set_xscale("log")
    b.set_xlabel("steps in the task")
    b.set_ylabel("MB")
    b.legend()
    b.set_title("store size")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    return True


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--files", type=int, default=2000)
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--out", default=str(HERE / "results" / "history.md"))
    ap.add_argument("--no-compress", action="store_true", help="skip the final compress (minutes under load)")
    a = ap.parse_args()
    checkpoints = [c for c in (10, 100, 250, 500, 1000, 2000, 5000, 10000) if c <= a.steps]
    if a.steps not in checkpoints:
        checkpoints.append(a.steps)
    res = run(a.files, a.steps, checkpoints, compress=not a.no_compress)
    out = Path(a.out)
    out.with_suffix(".json").write_text(json.dumps(res, indent=1))
    png = out.with_suffix(".png")
    md = markdown(res)
    if plot(res, png):
        md += f"\n![history growth]({png.name})\n"
    out.write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
