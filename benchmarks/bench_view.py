"""`tc view` on large histories: a 2,000-step task and a 10,000-event session.

Measures, per case: the Python render (seconds), the HTML size, and in headless Chromium (the
DevTools protocol over a pipe) the time until the page's own script has built the view
(`performance.now()` at the end of the build, i.e. from navigation start, parsing included),
the navigation-to-`load` time seen from outside, a search over every row and opening one diff.
Writes benchmarks/results/view.md.

    python benchmarks/bench_view.py [--steps 2000] [--events 10000] [--runs 3]
"""
from __future__ import annotations

import argparse
import json
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
sys.path.insert(0, str(HERE.parent / "tests"))

from test_view_support import CHROMIUM, Browser  # noqa: E402

from tc_git.engine import Engine  # noqa: E402
from tc_git.timeline.view import build  # noqa: E402

WORDS = ("parse render store index commit branch diff merge cache tree blob note hook session agent "
         "milestone replay restore drift step verify export bundle remote push pull").split()


def make_task(ws: Path, steps: int) -> tuple[Engine, str, float]:
    """Real engine steps: 60 source files, each step edits 1-3 of them (a drift every 25 steps)."""
    rnd = random.Random(7)
    ws.mkdir(parents=True)
    for i in range(60):
        d = ws / f"pkg{i % 6}"
        d.mkdir(exist_ok=True)
        (d / f"mod{i}.py").write_text("".join(f"def f{n}(x):\n    return x + {n}\n\n" for n in range(40)))
    e = Engine(ws)
    tid = e.init("bench: 2000 steps", goal="a long task")["task_id"]
    t0 = time.monotonic()
    for s in range(1, steps + 1):
        for _ in range(rnd.randint(1, 3)):
            i = rnd.randrange(60)
            p = ws / f"pkg{i % 6}" / f"mod{i}.py"
            lines = p.read_text().splitlines(keepends=True)
            k = rnd.randrange(len(lines))
            lines[k] = f"    # step {s}: {' '.join(rnd.sample(WORDS, 4))}\n"
            p.write_text("".join(lines))
        if s % 25 == 0:
            e.capture()
            (ws / "pkg0" / "mod0.py").write_text((ws / "pkg0" / "mod0.py").read_text() + f"# after drift {s}\n")
        e.save(f"step {s}: {' '.join(rnd.sample(WORDS, 5))}", conclusion=" ".join(rnd.sample(WORDS, 12)),
               next=" ".join(rnd.sample(WORDS, 6)), verified=[f"pytest -k {rnd.choice(WORDS)}"])
    return e, tid, time.monotonic() - t0


def make_session(engine: Engine, events: int) -> tuple[str, float]:
    """Generic steps: prompt, answer, tool call, tool result (1 in 20 outputs over 8 KB), with a
    rewind (a branch) every 500 events."""
    from tc_git.trajectory.readers import read_steps
    from tc_git.trajectory.recorder import record

    rnd = random.Random(11)
    steps, n, sid = [], 0, 0
    last_ids: list[str] = []
    while n < events:
        sid += 1
        step: dict = {"id": f"u{sid}", "role": "user", "content": " ".join(rnd.sample(WORDS, 10))}
        if sid % 125 == 0 and len(last_ids) > 10:  # rewind: continue from an earlier point
            step["parent"] = last_ids[-8]
        elif last_ids:
            step["parent"] = last_ids[-1]
        steps.append(step)
        last_ids.append(f"u{sid}")
        big = rnd.random() < 0.05
        out = "\n".join(f"{rnd.choice(WORDS)} {i} " + "x" * rnd.randint(10, 80) for i in range(600 if big else 12))
        steps += [
            {"id": f"a{sid}", "parent": f"u{sid}", "role": "assistant", "content": " ".join(rnd.sample(WORDS, 20)),
             "tool_calls": [{"id": f"c{sid}", "function": {"name": "Bash", "arguments": json.dumps(
                 {"command": f"pytest -k {rnd.choice(WORDS)}", "description": "run tests"})}}]},
            {"id": f"r{sid}", "parent": f"a{sid}", "role": "tool", "tool_call_id": f"c{sid}", "content": out},
        ]
        last_ids += [f"a{sid}", f"r{sid}"]
        n += 4  # user, assistant text, tool call, tool result
    t = read_steps(steps, session_id="bench-10k", base_time=1_700_000_000)
    t.events = t.events[:events]
    t0 = time.monotonic()
    with engine.store.lock():
        r = record(engine.repo, t)
    return r.session, time.monotonic() - t0


def measure(browser: Browser, path: Path, runs: int, query: str) -> dict:
    out: dict[str, list] = {"render_ms": [], "complete_ms": [], "load_ms": [], "search_ms": [], "open_diff_ms": []}
    for _ in range(runs):
        p = browser.page(1200, 900)
        try:
            load = p.goto(path.as_uri())
            out["load_ms"].append(load * 1000)
            out["render_ms"].append(float(p.js("document.documentElement.dataset.renderMs")))
            for _ in range(1200):
                if p.js("document.documentElement.dataset.ready") == "1":
                    break
                time.sleep(0.05)
            out["complete_ms"].append(float(p.js("document.documentElement.dataset.completeMs")))
            out["rows"] = int(p.js("document.documentElement.dataset.rows"))
            out["search_ms"].append(p.js(
                "(() => { const q = document.getElementById('q'), c = document.getElementById('count');"
                " const t = performance.now();"
                f" q.value = {json.dumps(query)}; q.dispatchEvent(new Event('input'));"
                " return new Promise(r => { const poll = () => c.textContent.includes('match')"
                " ? r(performance.now() - t) : setTimeout(poll, 2); poll(); }); })()"))
            out["open_diff_ms"].append(p.js(
                "(() => { const b = [...document.querySelectorAll('button[data-act=diff]')].pop();"
                " if (!b) return -1; const t = performance.now(); b.click();"
                " document.body.offsetHeight; return performance.now() - t; })()"))
            out["errors"] = len(p.mine("Runtime.exceptionThrown"))
        finally:
            p.close()
    return out


def med(xs):
    xs = [x for x in xs if x is not None and x >= 0]
    return round(statistics.median(xs), 1) if xs else None


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--events", type=int, default=10000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--out", default=str(HERE / "results" / "view.md"))
    a = ap.parse_args()
    if not CHROMIUM:
        print("chromium is not installed (apt-get install -y chromium)", file=sys.stderr)
        return 2
    tmp = Path(tempfile.mkdtemp(prefix="bench-view-"))
    print(f"building a {a.steps}-step task ...", flush=True)
    e, tid, t_task = make_task(tmp / "ws", a.steps)
    print(f"  {t_task:.1f}s; recording a {a.events}-event session ...", flush=True)
    skey, t_sess = make_session(e, a.events)
    print(f"  {t_sess:.1f}s", flush=True)
    cases = []
    b = Browser()
    try:
        for name, tasks, sessions, query in (
                (f"task, {a.steps} steps", [tid], [], "verify"),
                (f"session, {a.events} events", [], [skey], "milestone"),
                ("both on one page", [tid], [skey], "restore")):
            t0 = time.monotonic()
            html, summary = build(e.repo, tasks, sessions)
            secs = time.monotonic() - t0
            path = tmp / f"{len(cases)}.html"
            path.write_text(html, encoding="utf-8")
            m = measure(b, path, a.runs, query)
            cases.append({"name": name, "build_s": round(secs, 2), "bytes": summary["bytes"],
                          "diffs": summary["diffs"], "rows": m.get("rows"), "errors": m.get("errors"),
                          **{k: med(v) for k, v in m.items() if isinstance(v, list)},
                          "truncated": summary["truncated"]})
            print(json.dumps(cases[-1]), flush=True)
    finally:
        b.close()
    version = subprocess.run([CHROMIUM, "--version"], capture_output=True, text=True).stdout.strip()
    lines = [
        "# tc view: large histories in the browser",
        "",
        f"One run of `python benchmarks/bench_view.py --steps {a.steps} --events {a.events} --runs {a.runs}` "
        f"({time.strftime('%Y-%m-%d')}, {platform.machine()}, Python {platform.python_version()}, {version}, "
        "headless, DevTools protocol over a pipe). Medians of the runs.",
        "",
        f"- The task was made with the real engine: {a.steps} `save` calls on a 60-file workspace, 1-3 files edited "
        f"per step, a drift every 25 steps ({t_task:.0f} s to build).",
        f"- The session is {a.events} generic events recorded by the trajectory recorder (user, assistant, tool call, "
        "tool result; 1 output in 20 over 8 KB, stored as its own blob), with a rewind every 500 events "
        f"({t_sess:.1f} s to record).",
        "- **first screen** = `performance.now()` when the page's script has parsed the data and built the first "
        "150 rows (from navigation start: HTML and JSON parse included; the page is usable from here); **all rows** = "
        "every row built (in 30 ms slices that keep the page responsive) and the next frame painted; **load** = "
        "navigate to `load`, measured by the driver; **search** = typing a query until the results panel lists the "
        "matches (the page's 40/120 ms debounce included); **open diff** = building the DOM of one diff.",
        "",
        "| case | rows | HTML bytes | diffs embedded | python build | first screen | all rows | load | search | open diff | JS errors |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for c in cases:
        lines.append(f"| {c['name']} | {c['rows']} | {c['bytes']:,} | {c['diffs']} | {c['build_s']} s | "
                     f"{c['render_ms']} ms | {c['complete_ms']} ms | {c['load_ms']} ms | {c['search_ms']} ms | {c['open_diff_ms']} ms | "
                     f"{c['errors']} |")
    def verdict(key):
        return "; ".join(f"{c['name']}: {'met' if c[key] is not None and c[key] < 2000 else 'NOT met'}"
                         for c in cases)

    lines += ["", f"Goal (issue 6), under 2 s. First screen — {verdict('render_ms')}. "
              f"All rows built and painted — {verdict('complete_ms')}.", "",
              "Size is bounded by caps, not by history length: each diff is cut at 48,000 characters (400 per "
              "line, 200 files), all diffs of a page share 16 MB, each message 20,000 characters, each tool "
              "input/output 16,000, all event text 24 MB; what is cut is marked `truncated` in the page. "
              f"Budgets spent in these runs: {json.dumps([c['truncated'] for c in cases])}.", ""]
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text("\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    rc = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # pygit2 1.21 has aborted here in interpreter finalisation ("none_dealloc") after a complete
    # run with a large store; the results are written by then, so leave without finalising.
    os._exit(rc)
