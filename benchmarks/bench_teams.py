"""Teams benchmark (issue 34): N workspaces (separate processes, each its own store and task)
save and push to one bare remote at once for R rounds, over a path and over `git daemon` on
loopback. Every push call must end with its work on the remote (tc-git retries lost races
itself; nothing outside retries). Reported: time until every push returned (converged), pushes
and attempts (attempts - pushes = races lost and retried), the slowest single push call, the time
for every workspace to pull afterwards, and whether every store then equals the remote.

    python benchmarks/bench_teams.py                 # 6 workspaces, 5 rounds
    python benchmarks/bench_teams.py --n 10 --rounds 10 --out /tmp/teams.md

Writes benchmarks/results/teams.md (and .json). One run per figure, wall clock.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

WORKER = r"""
import json, sys, time
from pathlib import Path
from tc_git.engine import Engine
ws, url, rounds = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
e = Engine(ws)
pushes = []
for i in range(rounds):
    (ws / f"f{i}.txt").write_text(f"{ws.name} round {i}\n")
    e.save(f"{ws.name} round {i}")
    t = time.perf_counter()
    r = e.push(url)
    pushes.append((time.perf_counter() - t, r["attempts"]))
print(json.dumps(pushes))
"""


def env() -> dict:
    e = {k: v for k, v in os.environ.items() if not k.startswith(("GIT_", "TC_"))}
    e["TC_GIT"] = "off"
    return e


def git(*args) -> str:
    return subprocess.run(["git", *map(str, args)], check=True, capture_output=True, text=True, env=env()).stdout


def refs(gitdir: Path) -> dict:
    out = git(f"--git-dir={gitdir}", "for-each-ref", "--format=%(refname) %(objectname)", "refs/checkpoints", "refs/notes")
    return dict(line.split() for line in out.splitlines())


def scenario(tmp: Path, url: str, remote: Path, n: int, rounds: int) -> dict:
    sys.path.insert(0, str(HERE.parent))
    from tc_git.engine import Engine

    spaces = []
    for i in range(n):
        ws = tmp / f"w{i}"
        ws.mkdir()
        (ws / "README").write_text(f"w{i}\n")
        e = Engine(ws)
        e.init(f"task{i}")
        e.save("first")
        spaces.append(ws)
    t0 = time.perf_counter()
    procs = [subprocess.Popen([sys.executable, "-c", WORKER, str(ws), url, str(rounds)], env=env(),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for ws in spaces]
    calls = []
    failed = 0
    for p in procs:
        out, err = p.communicate()
        if p.returncode:
            failed += 1
            print(err[-1500:], file=sys.stderr)
        else:
            calls += json.loads(out)
    converged = time.perf_counter() - t0
    t1 = time.perf_counter()
    for ws in spaces:
        Engine(ws).pull(url)
    pulled = time.perf_counter() - t1
    want = refs(remote)
    equal = all(refs(ws / ".checkpoints") == want for ws in spaces)
    fsck = subprocess.run(["git", f"--git-dir={remote}", "fsck", "--full"], capture_output=True, env=env()).returncode == 0
    return {"n": n, "rounds": rounds, "converged_s": round(converged, 2), "pushes": len(calls),
            "attempts": sum(a for _t, a in calls), "failed_workers": failed,
            "slowest_push_s": round(max((t for t, _a in calls), default=0), 2),
            "pull_all_s": round(pulled, 2), "stores_equal": equal, "fsck_clean": fsck}


def daemon(base: Path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    d = subprocess.Popen(["git", "daemon", "--export-all", "--enable=receive-pack", "--reuseaddr", "--listen=127.0.0.1",
                          f"--port={port}", f"--base-path={base}", str(base)], env=env(),
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(400):
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                break
        time.sleep(0.05)
    return d, port


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=6)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", default=str(HERE / "results" / "teams.md"))
    a = ap.parse_args()
    rows = []
    for transport in ("path", "git daemon"):
        tmp = Path(tempfile.mkdtemp(prefix="bench-teams-"))
        try:
            base = tmp / "srv"
            base.mkdir()
            remote = base / "r.git"
            git("init", "-q", "--bare", remote)
            d = None
            url = str(remote)
            if transport == "git daemon":
                d, port = daemon(base)
                url = f"git://127.0.0.1:{port}/r.git"
            try:
                r = scenario(tmp, url, remote, a.n, a.rounds)
            finally:
                if d:
                    d.terminate()
                    d.wait()
            rows.append({"transport": transport, **r})
            print(rows[-1])
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    load = os.getloadavg()[0]
    head = (f"# Teams benchmark\n\n{platform.platform()}, Python {platform.python_version()}, {os.cpu_count()} CPUs, "
            f"{git('--version').strip()}, load average {load:.1f} at the end. Generated by "
            f"`python benchmarks/bench_teams.py --n {a.n} --rounds {a.rounds}`.\n\n"
            f"Each of {a.n} workspaces (its own process, store and task) saves and pushes {a.rounds} times, all at "
            f"once, to one bare remote. No retry outside tc-git.\n\n")
    table = ["| transport | workspaces x rounds | converged | pushes | attempts | failed | slowest push | "
             "every store pulls | stores equal | fsck |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        table.append(f"| {r['transport']} | {r['n']} x {r['rounds']} | {r['converged_s']:.2f} s | {r['pushes']} | "
                     f"{r['attempts']} | {r['failed_workers']} | {r['slowest_push_s']:.2f} s | {r['pull_all_s']:.2f} s | "
                     f"{'yes' if r['stores_equal'] else 'NO'} | {'clean' if r['fsck_clean'] else 'ERRORS'} |")
    notes = ("\n\n- converged: from starting the workers until the last push call returned, every push with its "
             "work on the remote.\n- attempts - pushes: races lost to another push (the remote moved between "
             "the fetch and the atomic push) and retried by tc-git after a random wait.\n")
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(head + "\n".join(table) + notes)
    out.with_suffix(".json").write_text(json.dumps(rows, indent=1) + "\n")
    print(out.read_text())


if __name__ == "__main__":
    main()
