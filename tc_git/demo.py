"""`tc demo`: the main job on a built-in default.

Creates a scratch workspace (a small git project), works through a short task the way an agent
would (init, save steps, a change that goes wrong, preview, restore, undo the restore), then
prints the handoff text and `git log` of the checkpoint ref as stock git shows it.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from .engine import Engine

APP_V1 = '''def total(prices):
    return sum(prices)
'''
APP_V2 = '''def total(prices, tax=0.0):
    """Sum of prices, with tax applied."""
    return round(sum(prices) * (1 + tax), 2)
'''
TEST = '''from app import total


def test_total():
    assert total([1, 2]) == 3
    assert total([10], tax=0.2) == 12.0
'''


def _git(*args, cwd) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_AUTHOR_NAME="demo", GIT_AUTHOR_EMAIL="demo@example.com",
               GIT_COMMITTER_NAME="demo", GIT_COMMITTER_EMAIL="demo@example.com", TC_GIT="off")
    return subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True, check=True).stdout


def run_demo(keep: bool = False) -> dict:
    ws = Path(tempfile.mkdtemp(prefix="tc-demo-"))
    out: list[str] = []

    def say(line: str = "") -> None:
        out.append(line)

    try:
        (ws / "app.py").write_text(APP_V1)
        (ws / "README.md").write_text("# shop\n")
        (ws / ".gitignore").write_text("*.log\n")
        (ws / "build.log").write_text("ignored by .gitignore, never captured or touched\n")
        have_git = shutil.which("git") is not None
        if have_git:
            _git("init", "-q", cwd=ws)
            _git("add", "-A", cwd=ws)
            _git("commit", "-qm", "initial", cwd=ws)
        e = Engine(ws)
        r = e.init("add tax to total()", goal="total() takes an optional tax rate; tests cover it",
                   constraints="keep the public signature backwards compatible")
        task = r["task_id"]
        say(f"$ tc init 'add tax to total()'        -> task {task}")

        (ws / "app.py").write_text(APP_V2)
        r = e.save("tax parameter", conclusion="total() accepts tax and rounds to cents",
                   verified=["manual check: total([10], tax=0.2) == 12.0"], next="write the test")
        say(f"$ tc save 'tax parameter'             -> step {r['index']}")

        (ws / "test_app.py").write_text(TEST)
        r = e.save("test for tax", conclusion="test_app.py covers both paths", next="update README")
        say(f"$ tc save 'test for tax'              -> step {r['index']}")

        # A change that goes wrong, never saved: the restore must not lose it for good.
        (ws / "app.py").write_text("def total(prices):\n    raise NotImplementedError  # oops\n")
        (ws / "scratch.txt").write_text("notes made after the last save\n")
        say("  (an edit breaks app.py and a scratch file appears; neither is saved)")

        r = e.restore(index=2)
        p = r["plan"]
        say(f"$ tc restore 2                       -> preview: replace {p['to_replace']}, "
            f"delete {p['to_delete']}")
        r = e.restore(index=2, apply=True)
        undo = r["recovered"]
        say(f"$ tc restore 2 --apply               -> restored; unsaved work kept as drift {undo}")
        say(f"  app.py is step 2 again: {(ws / 'app.py').read_text() == APP_V2}; "
            f"scratch.txt present: {(ws / 'scratch.txt').exists()}; "
            f"build.log untouched: {(ws / 'build.log').exists()}")

        r = e.restore(drift_id=undo, apply=True)
        say(f"$ tc restore --drift {undo} --apply     -> undo: the broken edit and scratch.txt are back: "
            f"{'NotImplementedError' in (ws / 'app.py').read_text() and (ws / 'scratch.txt').exists()}")
        e.restore(drift_id=r["recovered"], apply=True)
        say(f"$ tc restore --drift {r['recovered']} --apply     -> and back to the good state")

        say()
        say("--- handoff text (tc resume) ---")
        say(e.resume()["handoff"])
        if have_git:
            say()
            ref = f"refs/checkpoints/tasks/{task}/head"
            store = str(ws / ".checkpoints")
            say(f"--- git --git-dir=.checkpoints log --oneline {ref} ---")
            say(_git("--git-dir", store, "log", "--oneline", ref, cwd=ws).rstrip())
            step2 = _git("--git-dir", store, "log", "--format=%H", "--grep=^step 2:", ref, cwd=ws).split()[0]
            say()
            say(f"--- git --git-dir=.checkpoints show --stat {step2[:7]}  (step 2, with its trailers) ---")
            say(_git("--git-dir", store, "show", "--stat", "--format=%h %s%n%n%b", step2, cwd=ws).rstrip())
            fsck = subprocess.run(["git", "--git-dir", str(ws / ".checkpoints"), "fsck", "--full"],
                                  capture_output=True, text=True)
            say(f"--- git fsck --full on the store: {'clean' if fsck.returncode == 0 else fsck.stderr}")
        say()
        say(f"workspace: {ws}" + ("" if keep else " (removed; pass --keep to look around)"))
        return {"workspace": str(ws), "task_id": task, "text": "\n".join(out)}
    finally:
        if not keep:
            shutil.rmtree(ws, ignore_errors=True)
