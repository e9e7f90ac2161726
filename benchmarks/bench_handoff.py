"""Handoff benchmark: tc-git export/import vs `git bundle create` / `git fetch` of the same refs,
and vs task-checkpoint-mcp 0.1.7's export/import (the seed).

    python benchmarks/bench_handoff.py            # 10k-file task
    python benchmarks/bench_handoff.py --big      # 10k and 50k
    python benchmarks/bench_handoff.py --sizes 2000 --no-seed --out /tmp/x.md

One run per figure (wall clock, warm page cache); ratios are what to read. The task has two
steps: the first with every file, the second with 1% of them edited.
"""
from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


SEED_DIR = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "tc-git-bench" / "seed-0.1.7"


def ensure_seed() -> bool:
    """task-checkpoint-mcp 0.1.7, installed into a private --target directory when missing: a
    normal install would also replace tc-git's own `tc-mcp` console script with the seed's."""
    try:
        import tc

        return hasattr(tc, "TaskCheckpoint")
    except ImportError:
        pass
    if not (SEED_DIR / "tc.py").is_file():
        r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(SEED_DIR),
                            "task-checkpoint-mcp==0.1.7"])
        if r.returncode:
            return False
    sys.path.insert(0, str(SEED_DIR))
    import tc

    return hasattr(tc, "TaskCheckpoint")


def make_files(root: Path, n: int) -> None:
    for i in range(n):
        d = root / f"pkg{i % 50:02d}" / f"mod{i % 7}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"file{i:05d}.py").write_text(f"# file {i}\n" + f"def f{i}(x):\n    return x * {i}\n" * (1 + i % 5))


def edit(root: Path, n: int) -> None:
    for i in range(0, n, 100):
        p = root / f"pkg{i % 50:02d}" / f"mod{i % 7}" / f"file{i:05d}.py"
        p.write_text(p.read_text() + "# edited\n")


def timed(fn):
    t0 = time.perf_counter()
    r = fn()
    return time.perf_counter() - t0, r


def git_env():
    return {k: v for k, v in os.environ.items() if not k.startswith(("GIT_", "TC_"))}


def bench(n: int, tmp: Path, seed: bool, seed_import: bool = False) -> dict:
    os.environ["TC_GIT"] = "off"  # the workspace is not a git repo anyway; keep it explicit
    from tc_git.engine import Engine

    res = {"files": n}
    a = tmp / f"A{n}"
    a.mkdir()
    make_files(a, n)
    e = Engine(a)
    tid = e.init("bench")["task_id"]
    e.save("all files")
    edit(a, n)
    e.save("1% edited")
    out = tmp / f"out{n}"
    out.mkdir()
    res["tc_export"], x = timed(lambda: e.export(out))
    res["bundle_bytes"] = x["bytes"]
    b = tmp / f"B{n}"
    b.mkdir()
    res["tc_import"], imp = timed(lambda: Engine(b).import_(x["path"]))
    res["tc_import_core"] = imp["seconds"]["import"]  # objects + refs, without the restore preview
    c = tmp / f"C{n}"
    c.mkdir()
    res["tc_import_apply"], _ = timed(lambda: Engine(c).import_(x["path"], apply=True))
    # the same refs through the git CLI
    refs = list(x["refs"])
    store = e.store.path
    gb = tmp / f"git{n}.bundle"
    res["git_bundle_create"], r = timed(lambda: subprocess.run(
        ["git", f"--git-dir={store}", "bundle", "create", "-q", str(gb), *refs], env=git_env(), capture_output=True))
    assert r.returncode == 0, r.stderr
    res["git_bundle_bytes"] = gb.stat().st_size
    fr = tmp / f"fetch{n}.git"
    subprocess.run(["git", "init", "-q", "--bare", str(fr)], check=True, env=git_env())
    res["git_fetch"], r = timed(lambda: subprocess.run(
        ["git", f"--git-dir={fr}", "fetch", "-q", str(gb), "refs/checkpoints/*:refs/checkpoints/*",
         "refs/notes/*:refs/notes/*"], env=git_env(), capture_output=True))
    assert r.returncode == 0, r.stderr
    fr2 = tmp / f"fetch2{n}.git"
    subprocess.run(["git", "init", "-q", "--bare", str(fr2)], check=True, env=git_env())
    res["git_fetch_tc_bundle"], r = timed(lambda: subprocess.run(
        ["git", f"--git-dir={fr2}", "fetch", "-q", x["path"], "refs/checkpoints/*:refs/checkpoints/*",
         "refs/notes/*:refs/notes/*"], env=git_env(), capture_output=True))
    assert r.returncode == 0, r.stderr
    if seed:
        import tc as seed_mod

        s_root = tmp / f"S{n}"
        shutil.copytree(a, s_root, ignore=shutil.ignore_patterns(".checkpoints"))
        os.environ["TC_WATCH"] = "off"
        s = seed_mod.TaskCheckpoint(str(s_root))
        s.init(str(s_root), "bench")
        s.save(str(s_root), "all files")
        s_out = tmp / f"sout{n}"
        s_out.mkdir()
        res["seed_export"], sx = timed(lambda: s.export(str(s_root), str(s_out)))
        if seed_import:  # slow: the seed fsyncs every file it stores (56 s for 2,000 files here)
            s_b = tmp / f"SB{n}"
            s_b.mkdir()
            res["seed_import"], _ = timed(lambda: seed_mod.TaskCheckpoint(str(s_b)).import_handoff(sx["path"], str(s_b)))
    return res


def render(rows: list[dict], seed: bool) -> str:
    lines = [
        "# Handoff benchmark", "",
        f"One run each, {platform.platform()}, Python {platform.python_version()}, "
        f"{os.cpu_count()} CPUs, git {subprocess.run(['git', '--version'], capture_output=True, text=True).stdout.split()[-1]}. "
        "Task: two steps (all files, then 1% edited), captured by tc-git; the same refs are bundled by the "
        "git CLI from the tc-git store. Generated by `python benchmarks/bench_handoff.py`.", "",
        "| files | tc export | git bundle create | ratio | tc import: objects+refs | + restore preview | "
        "tc import --apply | git fetch (git's bundle) | git fetch (tc's bundle) | ratio import/fetch | "
        "bundle MB tc / git |"
        + (" seed export | seed export / tc export | seed import |" if seed else ""),
        "|---|---|---|---|---|---|---|---|---|---|---|" + ("---|---|---|" if seed else ""),
    ]
    for r in rows:
        row = (f"| {r['files']:,} | {r['tc_export']:.2f} s | {r['git_bundle_create']:.2f} s | "
               f"{r['tc_export'] / r['git_bundle_create']:.2f}x | {r['tc_import_core']:.2f} s | {r['tc_import']:.2f} s | "
               f"{r['tc_import_apply']:.2f} s | {r['git_fetch']:.2f} s | {r['git_fetch_tc_bundle']:.2f} s | "
               f"{r['tc_import_core'] / r['git_fetch']:.2f}x | "
               f"{r['bundle_bytes'] / 1e6:.1f} / {r['git_bundle_bytes'] / 1e6:.1f} |")
        if seed:
            if "seed_export" in r:
                si = f"{r['seed_import']:.2f} s" if "seed_import" in r else "not run"
                row += f" {r['seed_export']:.2f} s | {r['seed_export'] / r['tc_export']:.1f}x | {si} |"
            else:
                row += " not run | | |"
        lines.append(row)
    lines += [
        "", "Notes:", "",
        "- tc export = capture of unsaved work (none here) + resume text + pack of the task head, its linked "
        "milestones/sessions and the notes, written as a v2 bundle + HANDOFF.md.",
        "- ratio import/fetch compares the objects+refs part with `git fetch` of git's own bundle; the restore "
        "preview (a plan over every file of the workspace) is extra work git does not do.",
        "- tc import (preview) = header checks, pack indexed into a quarantine (libgit2 indexer), connectivity "
        "check, refs moved with compare-and-swap, restore plan computed (workspace untouched). `--apply` also "
        "writes every file through the engine's restore (undoable).",
        "- Seed figures need task-checkpoint-mcp 0.1.7 (installed by the script when missing); its import is "
        "only timed with --seed-import (it fsyncs every file: 56 s for 2,000 files on this machine).",
        "- The seed's export copies the head step's files into a directory (no history); its import copies them "
        "back into the workspace without a preview.",
    ]
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--big", action="store_true", help="also run the 50k-file task")
    ap.add_argument("--sizes", type=int, nargs="*", default=None)
    ap.add_argument("--no-seed", action="store_true")
    ap.add_argument("--seed-max", type=int, default=10_000, help="run the seed only up to this many files")
    ap.add_argument("--seed-import", action="store_true", help="also time the seed's import (very slow)")
    ap.add_argument("--out", default=str(HERE / "results" / "handoff.md"))
    args = ap.parse_args()
    sizes = args.sizes or ([10_000, 50_000] if args.big else [10_000])
    seed = not args.no_seed and ensure_seed()
    rows = []
    with tempfile.TemporaryDirectory(prefix="tc-bench-handoff-") as td:
        for n in sizes:
            r = bench(n, Path(td), seed and n <= args.seed_max, args.seed_import)
            print(r, flush=True)
            rows.append(r)
    text = render(rows, seed)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
