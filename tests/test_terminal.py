"""A whole task typed into a real terminal (tmux: send-keys, capture-pane), from a subdirectory
of the project, with the installed `tc-git` console script: init, save, resume, restore by every
id form, undo, log, `diff --stat` byte for byte against `git diff --stat` in the same terminal,
view; and the progress bar of a 50k-file first snapshot (init's baseline)."""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from conftest import clean_env

TMUX = shutil.which("tmux")
BIN = Path(sys.executable).parent
pytestmark = pytest.mark.skipif(TMUX is None or not (BIN / "tc-git").exists(),
                                reason="needs tmux (.ci/run installs it) and the installed tc-git script")


class Terminal:
    def __init__(self, cwd: Path, env: dict, width: int = 120):
        self.sock = f"tc-test-{uuid.uuid4().hex[:8]}"
        self.n = 0
        self.env = env
        subprocess.run([TMUX, "-L", self.sock, "-f", "/dev/null", "new-session", "-d", "-s", "t", "-x", str(width),
                        "-y", "50", "-c", str(cwd), "env", "-i", *[f"{k}={v}" for k, v in env.items()],
                        "bash", "--norc", "--noprofile"], check=True, env=env)
        self.tmux("set-option", "-g", "history-limit", "50000")
        self.send("PS1='$ '; stty -echoctl")

    def tmux(self, *args) -> str:
        return subprocess.run([TMUX, "-L", self.sock, *args], capture_output=True, text=True, check=True,
                              env=self.env).stdout

    def send(self, line: str) -> None:
        self.tmux("send-keys", "-t", "t", "-l", line)
        self.tmux("send-keys", "-t", "t", "Enter")

    def screen(self) -> str:
        return self.tmux("capture-pane", "-t", "t", "-p", "-J", "-S", "-50000")

    def run(self, command: str, timeout: float = 120, ok: bool = True) -> str:
        """Type `command`, wait for it to finish, return what it printed (as the terminal shows it)."""
        self.n += 1
        n = self.n
        self.send(f"printf '__S%s__\\n' {n}; {command}; printf '__E%s_%s__\\n' {n} $?")
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            text = self.screen()
            # no anchors: a typed line exactly as wide as the terminal joins the next one (-J)
            m = re.search(rf"__S{n}__\n(.*?)__E{n}_(\d+)__", text, re.S)
            if m:
                if ok:
                    assert m.group(2) == "0", f"`{command}` exited {m.group(2)}:\n{m.group(1)}"
                self.rc = int(m.group(2))
                return m.group(1)
            time.sleep(0.05)
        raise AssertionError(f"`{command}` did not finish in {timeout}s; screen:\n{self.screen()[-3000:]}")

    def close(self) -> None:
        subprocess.run([TMUX, "-L", self.sock, "kill-server"], capture_output=True, env=self.env)


def _env(home: Path) -> dict:
    env = clean_env(HOME=str(home), PATH=f"{BIN}:/usr/bin:/bin", TERM="xterm-256color", LANG="C.UTF-8",
                    GIT_PAGER="cat", PAGER="cat", TC_GIT="off")
    env.pop("COLUMNS", None)
    env.pop("LINES", None)
    return env


@pytest.fixture
def project(tmp_path):
    ws = tmp_path / "shop"
    (ws / "src" / "pkg").mkdir(parents=True)
    (ws / "src" / "pkg" / "app.py").write_text("def total(p):\n    return sum(p)\n")
    (ws / "README.md").write_text("# shop\n")
    home = tmp_path / "home"
    home.mkdir()
    t = Terminal(ws, _env(home))
    yield ws, t
    t.close()


def test_a_whole_task_from_a_subdirectory(project):
    ws, t = project
    app = ws / "src" / "pkg" / "app.py"
    out = t.run('tc-git init "terminal task" --goal "tax in total()"')
    assert "started task" in out and "tc-git save" in out
    t.run("cd src/pkg")
    out = t.run('tc-git init "nested"', ok=False)
    assert t.rc == 2 and "is inside the tc-git workspace" in out  # no second store below the first
    t.run("printf 'def total(p, tax=0):\\n    return sum(p) * (1 + tax)\\n' > app.py")
    out = t.run('tc-git save "tax parameter" -c "total takes tax" -n "write the test"')
    assert "saved step 1: tax parameter" in out
    t.run("printf 'from app import total\\n' > test_app.py")
    out = t.run('tc-git save "test for tax" -n "update README"')
    assert "saved step 2: test for tax" in out
    out = t.run("tc-git resume")
    assert "Current step: 2 — test for tax" in out and "Next: update README" in out
    assert "Unsaved changes: none" in out
    # unsaved work, captured: resume still says how far the workspace is from step 2
    t.run("echo scratch > notes.txt && echo '# broken' >> app.py")
    out = t.run("tc-git capture")
    assert "captured drift d0001 (2 files changed)" in out
    out = t.run("tc-git resume")
    assert "Unsaved changes: 2 files differ from step 2 now: src/pkg/app.py, src/pkg/notes.txt" in out
    assert "Recorded since step 2: 1 drift (d0001" in out
    # restore by every id form
    v1 = "def total(p, tax=0):\n    return sum(p) * (1 + tax)\n"
    out = t.run("tc-git restore 1")
    assert "restore to s0001 would change" in out and "nothing written" in out
    out = t.run("tc-git restore 1 --apply")
    assert "restored s0001 (r0001); undo with: tc-git undo" in out and app.read_text() == v1
    assert not (ws / "src" / "pkg" / "test_app.py").exists()
    t.run("tc-git restore s0002 --apply")
    assert (ws / "src" / "pkg" / "test_app.py").exists() and not (ws / "src" / "pkg" / "notes.txt").exists()
    t.run("tc-git restore d0001 --apply")
    assert app.read_text().endswith("# broken\n") and (ws / "src" / "pkg" / "notes.txt").exists()
    t.run("tc-git restore r0001 --apply")  # where the first restore left the workspace
    assert app.read_text() == v1 and not (ws / "src" / "pkg" / "test_app.py").exists()
    log = t.run("tc-git log")
    step2 = re.search(r"^s0002\s+([0-9a-f]{10})", log, re.M).group(1)
    t.run(f"tc-git restore {step2[:7]} --apply")  # a commit prefix
    assert (ws / "src" / "pkg" / "test_app.py").exists()
    out = t.run("tc-git undo")
    assert "undid restore" in out and app.read_text() == v1
    log = t.run("tc-git log -n 40")
    ids = re.findall(r"^(\S+)\s+[0-9a-f]{10}\s", log, re.M)
    assert {"s0001", "s0002", "d0001", "r0001", "r0002", "r0003", "r0004", "r0005", "r0006", "s0000"} <= set(ids), log
    assert "Traceback" not in log and "tc_" not in log
    # diff --stat: byte for byte what git prints for the same two commits, in the same terminal
    step1 = re.search(r"^s0001\s+([0-9a-f]{10})", log, re.M).group(1)
    ours = t.run("tc-git diff 1 2 --stat")
    store = ws / ".checkpoints"
    theirs = t.run(f"git --git-dir={store} diff --stat {step1} {step2}")
    assert ours == theirs and "test_app.py" in ours, (ours, theirs)
    ours = t.run(f"tc-git diff {step1[:8]} s0002 --stat --json")
    assert '"patch"' in ours
    # the view goes into the store and the next save does not record it
    out = t.run("tc-git view")
    m = re.search(r"wrote (\S+\.html)", out)
    assert m and Path(m.group(1)).is_file() and str(store) in m.group(1)
    t.run("echo more >> ../../README.md")
    t.run('tc-git save "readme" --json > /dev/null')
    tree = subprocess.run(["git", "--git-dir", str(store), "ls-tree", "-r", "--name-only",
                           f"refs/checkpoints/tasks/{_active(store)}/head"], capture_output=True, text=True).stdout
    assert "README.md" in tree and ".html" not in tree and ".checkpoints" not in tree


def _active(store: Path) -> str:
    import json

    return next(iter(json.loads((store / "tc" / "active.json").read_text()).values()))


def test_progress_bar_draws_on_a_50k_file_first_snapshot(tmp_path):
    ws = tmp_path / "big"
    for d in range(100):
        sub = ws / f"d{d:03d}"
        sub.mkdir(parents=True)
        for i in range(500):
            (sub / f"f{i}.txt").write_bytes(b"x%d\n" % i)
    home = tmp_path / "home"
    home.mkdir()
    t = Terminal(ws, _env(home))
    try:
        t.n += 1  # (init takes the first snapshot: the task's baseline, issue 30)
        n = t.n
        t.send(f"printf '__S%s__\\n' {n}; tc-git init big && tc-git save first; printf '__E%s_%s__\\n' {n} $?")
        seen, end = set(), time.monotonic() + 600
        while time.monotonic() < end:
            text = t.screen()
            seen.update(re.findall(r"^(.*(?:\[[#.]{30}\] \d+/\d+|: \d+))$", text, re.M))
            if re.search(rf"__E{n}_0__", text):
                break
            time.sleep(0.05)
        else:
            raise AssertionError("the 50k-file init and save did not finish")
        final = t.screen()
        assert "saved step 1: first" in final
        assert seen, "no progress line was ever drawn during the 50k-file first snapshot"
        # the bar is erased when done: the last screen shows no bar line after the result
        after = final.split(f"__S{n}__", 1)[1]
        assert not re.search(r"\[[#.]{30}\]", after.split("saved step 1")[1])
    finally:
        t.close()
