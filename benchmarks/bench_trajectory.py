"""Recording a long conversation: a synthetic 10,000-event Claude Code transcript.

Measures, in one run: the first recording (time, objects and bytes the store grew by), recording
the unchanged transcript again (goal: under 10% of the first), and recording it after 100 more
events were appended (only the new ones are written). Writes benchmarks/results/trajectory.md.
Then the real transcript fixtures (tests/fixtures/transcripts): read + record each into a fresh
store, best of 3, and the time per MB of transcript; writes
benchmarks/results/trajectory-fixtures.md.

    python benchmarks/bench_trajectory.py [--events 10000] [--fixtures-only]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))
from common import dir_bytes  # noqa: E402

from tc_git.engine import Engine  # noqa: E402

SESSION = "bench-5e55-4000-8000-000000000001"


def line(kind: str, parent: str | None, i: int, content) -> dict:
    ts = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(1_760_000_000 + i)) + ".000Z"
    msg = {"role": kind, "content": content}
    if kind == "assistant":
        msg.update(id=f"msg_{i:08d}", type="message", model="claude-bench")
    return {"parentUuid": parent, "isSidechain": False, "type": kind, "sessionId": SESSION,
            "uuid": str(uuid.UUID(int=i + 1)), "timestamp": ts, "message": msg}


def transcript(n: int, start: int = 0, parent: str | None = None):
    """n events in rounds of four: prompt, answer with a tool call, the tool result, a summary."""
    out = []
    i = start
    while len(out) < n:
        r = i // 4
        kinds = i % 4
        if kinds == 0:
            rec = line("user", parent, i, f"step {r}: make the parser handle case {r} and run the tests")
        elif kinds == 1:
            rec = line("assistant", parent, i, [{"type": "tool_use", "id": f"toolu_{r:08d}", "name": "Bash",
                                                  "input": {"command": f"pytest -q tests/test_case_{r}.py"}}])
        elif kinds == 2:
            body = "\n".join(f"tests/test_case_{r}.py::test_{k} PASSED" for k in range(40))
            rec = line("user", parent, i, [{"type": "tool_result", "tool_use_id": f"toolu_{r:08d}",
                                             "content": body + f"\n40 passed in 0.{r % 10}s"}])
        else:
            rec = line("assistant", parent, i, [{"type": "text", "text": f"Case {r} passes; next: case {r + 1}."}])
        out.append(rec)
        parent = rec["uuid"]
        i += 1
    return out


def write(path: Path, records) -> None:
    with open(path, "a", encoding="utf-8") as f:
        for r in records:
            f.write(json.dumps(r) + "\n")


FIXTURES = HERE.parent / "tests" / "fixtures" / "transcripts"


def bench_fixtures(out: Path, repeat: int = 3) -> str:
    """Recording time per MB of transcript on the real fixtures (read + redact + write objects
    into a fresh store; subagent files included in the bytes when the reader picks them up)."""
    from tc_git import trajectory as T
    from tc_git.storage.store import Store

    rows, total_b, total_t, total_ev = [], 0, 0.0, 0
    for f in sorted(FIXTURES.glob("*.jsonl")):
        size = f.stat().st_size + sum(p.stat().st_size for p in T.readers.subagent_files(f))
        best, events = None, 0
        for _ in range(repeat):
            with tempfile.TemporaryDirectory(prefix="tc-bench-fx-") as td:
                st = Store(Path(td) / ".checkpoints", Path(td))
                st.create()
                t = time.perf_counter()
                res = T.record(st.repo, T.read_transcript(f))
                dt = time.perf_counter() - t
            best, events = (dt if best is None else min(best, dt)), res.events
        total_b, total_t, total_ev = total_b + size, total_t + best, total_ev + events
        rows.append(f"| {f.name} | {size / 1e3:.1f} KB | {events} | {best * 1e3:.0f} ms | "
                    f"{best / (size / 1e6):.2f} s/MB | {best / max(events, 1) * 1e3:.2f} ms |")
    text = "\n".join([
        "# Trajectory recording on the real fixtures", "",
        f"`python benchmarks/bench_trajectory.py --fixtures-only` on {platform.platform()}, Python "
        f"{platform.python_version()}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} "
        "(other jobs were running: treat as an upper bound). Each transcript read and recorded into a "
        f"fresh store (`read_transcript` + `record`: parse, linearise, redact, hash, write loose objects), "
        f"best of {repeat}.", "",
        "| file | bytes | events | time | per MB | per event |", "|---|---|---|---|---|---|",
        *rows,
        f"| **all** | {total_b / 1e3:.1f} KB | {total_ev} | {total_t * 1e3:.0f} ms | "
        f"**{total_t / (total_b / 1e6):.2f} s/MB** | {total_t / max(total_ev, 1) * 1e3:.2f} ms |", "",
        "Small files are dominated by fixed costs (store creation is outside the timing; ref writes "
        "and the per-event cache file are inside), so the per-MB figure that matters is the total.", "",
    ])
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    print(text)
    return text


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=10_000)
    ap.add_argument("--out", default=str(HERE / "results" / "trajectory.md"))
    ap.add_argument("--fixtures-out", default=str(HERE / "results" / "trajectory-fixtures.md"))
    ap.add_argument("--fixtures-only", action="store_true")
    args = ap.parse_args()
    os.environ["TC_GIT"] = "off"
    bench_fixtures(Path(args.fixtures_out))
    if args.fixtures_only:
        return 0
    with tempfile.TemporaryDirectory(prefix="tc-bench-traj-") as td:
        ws = Path(td) / "ws"
        ws.mkdir()
        (ws / "README.md").write_text("bench\n")
        tr = Path(td) / f"{SESSION}.jsonl"
        recs = transcript(args.events)
        write(tr, recs)
        e = Engine(ws)
        e.init("trajectory benchmark")
        objects = ws / ".checkpoints" / "objects"
        before = dir_bytes(objects)
        t = time.perf_counter()
        first = e.record(transcript=str(tr))
        t_first = time.perf_counter() - t
        grown_by = dir_bytes(objects)[1] - before[1]
        t = time.perf_counter()
        again = e.record(transcript=str(tr))
        t_again = time.perf_counter() - t
        (ws / ".checkpoints" / "tc" / "recorded-files.json").unlink()  # force a full parse
        t = time.perf_counter()
        reparse = e.record(transcript=str(tr))
        t_reparse = time.perf_counter() - t
        write(tr, transcript(100, start=args.events, parent=recs[-1]["uuid"]))
        t = time.perf_counter()
        grown = e.record(transcript=str(tr))
        t_grown = time.perf_counter() - t
    ratio = t_again / t_first
    rows = [
        ("first recording", f"{t_first:.2f} s", f"{first['events']} events, {first['new_commits']} commits, "
                                                f"store +{grown_by / 1e6:.1f} MB on disk"),
        ("same transcript again", f"{t_again:.2f} s", f"{again['new_commits']} new commits; "
                                                      f"{ratio * 100:.1f}% of the first"),
        ("again, without the file fingerprint (full parse, per-event cache)", f"{t_reparse:.2f} s",
         f"{reparse['new_commits']} new commits; {t_reparse / t_first * 100:.1f}% of the first"),
        ("after 100 more events", f"{t_grown:.2f} s", f"{grown['new_commits']} new commits"),
    ]
    text = "\n".join([
        "# Trajectory recording benchmark", "",
        f"`python benchmarks/bench_trajectory.py --events {args.events}` on {platform.platform()}, Python "
        f"{platform.python_version()}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}. "
        "A synthetic Claude Code transcript: rounds of prompt, tool call (Bash), tool result (40 lines), "
        "answer. One run, wall clock, through `Engine.record` (store lock, credential redaction included). "
        "A first recording of a long conversation is written as one pack; an unchanged file is "
        "recognised by its sha1 (and its refs still pointing at the recorded tips) without parsing.", "",
        "| case | time | what |", "|---|---|---|",
        *[f"| {a} | {b} | {c} |" for a, b, c in rows], "",
        "| goal | verdict | measured |", "|---|---|---|",
        f"| re-recording an unchanged transcript under 10% of the first recording | "
        f"{'PASS' if ratio < 0.10 else 'FAIL'} | {ratio * 100:.1f}% |", "",
    ])
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text)
    print(text)
    assert again["new_commits"] == reparse["new_commits"] == 0 and grown["new_commits"] == 100, (again, grown)
    assert again["branches"] == reparse["branches"] == first["branches"]
    return 0


if __name__ == "__main__":
    sys.exit(main())
