"""`tc-git demo`: the product in one minute, on a scratch project.

An agent adds a tax rate to a tiny shop project. The demo walks the code timeline (saved steps),
a change that goes wrong (restore preview, restore, undo), the conversation recorded from a
bundled Claude Code transcript with a milestone, a git bundle handed to a second workspace that
resumes the work, and the HTML view. Every line shows the command a person would type and what
it did; stock git has the last word.
"""
from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

from ..base import settings
from ..base.refs import task_ref
from ..base.settings import child_env
from ..engine import Engine

APP_V1 = "def total(prices):\n    return sum(prices)\n"
APP_V2 = ('def total(prices, tax=0.0):\n    """Sum of prices, with tax applied."""\n'
          "    return round(sum(prices) * (1 + tax), 2)\n")
TEST = ("from app import total\n\n\ndef test_total():\n    assert total([1, 2]) == 3\n"
        "    assert total([10], tax=0.2) == 12.0\n")
TRANSCRIPT = Path(__file__).resolve().parents[1] / "data" / "demo-session.jsonl"
COL = 44  # where the "what happened" column starts


def _git(*args, cwd) -> str:
    env = child_env(GIT_AUTHOR_NAME="demo", GIT_AUTHOR_EMAIL="demo@example.com", GIT_COMMITTER_NAME="demo",
                    GIT_COMMITTER_EMAIL="demo@example.com", GIT_PAGER="cat")
    return subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True, check=True).stdout


def _files(n: int) -> str:
    return f"{n} file{'s' if n != 1 else ''}"


def _changed(e: Engine, index: int) -> str:
    d = e.diff_object(str(index - 1) if index > 1 else None, str(index)) if index > 1 else None
    if d is None:
        s = e.show(index=index)["steps"][0]
        return f"the project as it is ({_files(s['files_changed'])})"
    return ", ".join(f"{x.status_char()} {x.new_file.path or x.old_file.path}" for x in d.deltas)


def run_demo(keep: bool = False) -> dict:
    from .common import prog

    PROG = prog()
    base = Path(tempfile.mkdtemp(prefix="tc-demo-"))
    ws, ws2, out_dir = base / "shop", base / "laptop" / "shop", base / "handoff"
    for d in (ws, ws2, out_dir):
        d.mkdir(parents=True)
    out: list[str] = []

    def say(line: str = "") -> None:
        out.append(line.rstrip())

    def cmd(command: str, result: str = "") -> None:
        left = f"  $ {PROG} {command}"
        if result and len(left) < COL:
            say(f"{left:<{COL}}{result}")
        else:
            say(left)
            if result:
                say(" " * COL + result)

    previous = settings.install(settings.current().replace(git=False))  # the demo's git repo is a prop
    try:
        (ws / "app.py").write_text(APP_V1)
        (ws / "README.md").write_text("# shop\n")
        (ws / ".gitignore").write_text("*.log\n")
        (ws / "build.log").write_text("ignored by .gitignore: never captured, never touched\n")
        have_git = shutil.which("git") is not None
        if have_git:
            _git("init", "-q", cwd=ws)
            _git("add", "-A", cwd=ws)
            _git("commit", "-qm", "initial", cwd=ws)

        say(f"{PROG} demo: an agent adds a tax rate to a small shop project, in {base}")
        say()
        say("1. The code timeline: each step the agent saves is a git commit of the workspace")
        e = Engine(ws)
        ti = e.init("add tax to total()", goal="total() takes an optional tax rate; tests cover it",
                    constraints="keep the public signature backwards compatible")
        task = ti["task_id"]
        cmd('init "add tax to total()"', f"task {task}")
        (ws / "app.py").write_text(APP_V2)
        s = e.save("tax parameter", conclusion="total() accepts tax and rounds to cents",
                   verified=["total([10], tax=0.2) == 12.0"], next="write the test")
        cmd('save "tax parameter"', f"step {s['index']}: {_changed(e, s['index'])}")
        (ws / "test_app.py").write_text(TEST)
        s = e.save("test for tax", conclusion="test_app.py covers the default and a 20% rate", next="update README")
        cmd('save "test for tax"', f"step {s['index']}: {_changed(e, s['index'])}")
        say()

        say("2. A change goes wrong and is never saved: look, go back, change your mind")
        (ws / "app.py").write_text("def total(prices):\n    raise NotImplementedError  # oops\n")
        (ws / "scratch.txt").write_text("notes made after the last save\n")
        say("     (app.py gets broken and scratch.txt appears)")
        rs = e.restore(index=2)
        p = rs["plan"]
        what = ", ".join([f"replace {x}" for x in p["to_replace"]] + [f"delete {x}" for x in p["to_delete"]])
        cmd("restore 2", f"preview: would {what}")
        rs = e.restore(index=2, apply=True)
        good = (ws / "app.py").read_text() == APP_V2 and not (ws / "scratch.txt").exists()
        cmd("restore 2 --apply", f"app.py is step 2 again{'' if good else ' (NOT: a bug)'}; the broken "
                                 f"state is kept as {rs['recovered']}")
        e.undo(apply=True)
        back = "NotImplementedError" in (ws / "app.py").read_text() and (ws / "scratch.txt").exists()
        cmd("undo", "the broken app.py and scratch.txt are back" if back else "undo did not bring them back (a bug)")
        e.undo(apply=True)
        cmd("undo", "and forward to step 2 again")
        say(f"     build.log, ignored by .gitignore, was {'never touched' if (ws / 'build.log').exists() else 'LOST (a bug)'}")
        say()

        say("3. The conversation: recorded from the agent's transcript, with a milestone")
        shutil.copy(TRANSCRIPT, base / "session.jsonl")
        r = e.record(transcript=str(base / "session.jsonl"), milestone="tax-done")
        linked = "linked to the code of now" if r["milestone"] and r["milestone"].get("code_commit") else ""
        cmd("record session.jsonl --milestone tax-done", f"{r['events']} events; milestone tax-done {linked}")
        cmd("events tax-done --oldest-first")
        log = e.trajectory_log("tax-done", limit=50, oldest_first=True)
        for ev in log["events"]:
            head, _, text = ev["subject"].partition(": ")
            text = " ".join(text.split())
            say(f"     {head:<18} {text[:60] + ('…' if len(text) > 60 else '')}")
        say()

        say("4. Hand the work over: one git bundle, picked up in a second workspace")
        ex = e.export(str(out_dir))
        bundle = Path(ex["path"])
        cmd(f"export {out_dir.name}/", f"{bundle.name} ({ex['bytes'] // 1024 + 1} KB) + HANDOFF.md")
        e2 = Engine(ws2)
        r2 = e2.import_(str(bundle), apply=True)
        same = (ws2 / "app.py").read_text() == APP_V2 and (ws2 / "test_app.py").is_file()
        say(f"  $ cd {ws2.relative_to(base)}")
        cmd(f"import ../../handoff/{bundle.name} --apply",
            f"task active, files at {r2['restore']['target'] if r2.get('restore') else 'head'}"
            + ("" if same else " (files differ: a bug)"))
        cmd("resume", "what a new session reads first:")
        for line in e2.resume()["handoff"].splitlines():
            say(f"     | {line}")
        say()

        say("5. Look at it, and check it with stock git")
        page = e.view()
        cmd("view", "one HTML page: timeline, diffs, the conversation")
        say(f"     {page['path']}")
        if have_git:
            ref = task_ref(task)
            say(f"  $ git --git-dir=.checkpoints log --oneline {ref}")
            for line in _git("--git-dir", str(ws / ".checkpoints"), "log", "--oneline", ref, cwd=ws).splitlines():
                say(f"     {line}")
            fsck = subprocess.run(["git", "--git-dir", str(ws / ".checkpoints"), "fsck", "--full"],
                                  capture_output=True, text=True)
            say(f"  $ git --git-dir=.checkpoints fsck --full      "
                f"{'no errors' if fsck.returncode == 0 and not fsck.stderr.strip() else fsck.stderr.strip()}")
        say()
        say(f"Next: {PROG} setup --client claude (or codex, cursor) connects your agent; "
            f"{PROG} --help lists every command.")
        say(f"Scratch directory: {base}" + ("" if keep else " (removed; --keep leaves it to look around)"))
        return {"workspace": str(ws), "second_workspace": str(ws2), "task_id": task, "view": page["path"],
                "bundle": str(bundle), "text": "\n".join(out)}
    finally:
        settings.install(previous)
        if not keep:
            shutil.rmtree(base, ignore_errors=True)
