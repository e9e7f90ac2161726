"""Issue 16: the hooks start the same way on every platform: the `tc-hook` console script pip
wrote for the Python that installed tc-git, by absolute path, no shell script in between.

Windows cannot run here: its layout (`Scripts\\tc-hook.exe`) is built in a scratch directory and
the command lines are checked as the agents' shells read them (Claude Code: Git Bash, so a POSIX
split must give the path back; Codex: `cmd`, quoted as the C runtime parses argv)."""
from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

from conftest import clean_env

from tc_git.cli import hooks as hooks_cli


def test_entry_is_this_pythons_console_script():
    base = hooks_cli.entry_command()
    assert len(base) == 1 and os.path.isabs(base[0]) and os.path.basename(base[0]) == "tc-hook"
    with open(base[0], "rb") as f:
        shebang = f.readline()[2:].strip().decode()
    assert os.path.dirname(shebang) == os.path.dirname(sys.executable)
    assert os.path.realpath(shebang) == os.path.realpath(sys.executable)
    for cfg in (hooks_cli.claude_config(), hooks_cli.codex_config()):
        for groups in cfg.values():
            for g in groups:
                for h in g["hooks"]:
                    assert shlex.split(h["command"])[0] == base[0]


def test_a_tc_hook_of_another_python_is_not_taken(tmp_path, monkeypatch):
    """The user scheme's bin directory is shared by all of a user's Pythons: a `tc-hook` whose
    `#!` names another interpreter would run another tc-git (or none)."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    py = bindir / "python"
    py.symlink_to(sys.executable)
    other = bindir / "tc-hook"
    other.write_text("#!/opt/other/python3.9\nraise SystemExit(1)\n")
    other.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(py))
    assert hooks_cli.entry_command() == [str(py), "-P", "-m", "tc_git.hooks"]
    other.write_text(f"#!{py}\nfrom tc_git.hooks import main\nmain()\n")
    assert hooks_cli.entry_command() == [str(other)]


def _cmd_argv(line: str) -> list[str]:
    """argv as the Microsoft C runtime splits a command line (the rules subprocess.list2cmdline
    follows): enough for quoted paths with spaces and no embedded quotes."""
    out, cur, quoted, any_ = [], "", False, False
    for ch in line:
        if ch == '"':
            quoted, any_ = not quoted, True
        elif ch == " " and not quoted:
            if cur or any_:
                out.append(cur)
            cur, any_ = "", False
        else:
            cur += ch
    if cur or any_:
        out.append(cur)
    return out


def test_windows_command_lines(tmp_path, monkeypatch):
    scripts = tmp_path / "Program Files" / "Python312" / "Scripts"
    scripts.mkdir(parents=True)
    (scripts / "tc-hook.exe").write_bytes(b"MZ launcher")  # pip's .exe launcher: no shebang to read
    (scripts / "tc-hook").write_text("#!/bin/sh\n")  # a POSIX script is not what Windows runs
    monkeypatch.setattr(sys, "executable", str(scripts / "python.exe"))
    base = hooks_cli.entry_command("win32")
    assert base == [str(scripts / "tc-hook.exe")]
    # what a Windows path looks like there
    win = ["C:\\Program Files\\Python312\\Scripts\\tc-hook.exe"]
    claude = hooks_cli.claude_config(win, "win32")["SessionStart"][0]["hooks"][0]["command"]
    assert "\\" not in claude  # Git Bash would eat backslashes
    assert shlex.split(claude) == ["C:/Program Files/Python312/Scripts/tc-hook.exe", "session-start"]
    codex = hooks_cli.codex_config(win, "win32")["SessionStart"][0]["hooks"][0]["command"]
    assert codex.startswith('"C:\\Program Files\\')  # cmd /C: double quotes, backslashes kept
    assert _cmd_argv(codex) == [win[0], "session-start", "--agent", "codex"]
    # the same on POSIX is the plain shell quoting
    posix = hooks_cli.codex_config(["/opt/my tools/bin/tc-hook"], "linux")["Stop"][0]["hooks"][0]["command"]
    assert shlex.split(posix) == ["/opt/my tools/bin/tc-hook", "stop", "--agent", "codex"]


def test_session_start_with_a_task_starts_without_pygit2_or_mcp(tmp_path):
    """The SessionStart budget (100 ms with a task) rests on what the entry imports: the
    handoff cached at the last record is printed with the stdlib alone. Wall time is reported,
    and bounded loosely (the suite runs on a loaded machine)."""
    from tc_git.engine import Engine

    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "f.txt").write_text("x\n")
    e = Engine(ws)
    e.init("budget task")
    e.save(title="first step")
    ev = json.dumps({"hook_event_name": "SessionStart", "cwd": str(ws), "source": "startup", "session_id": "s"})
    [entry] = hooks_cli.entry_command()
    code = ("import sys, runpy; sys.argv = [%r, 'session-start']; "
            "import atexit; atexit.register(lambda: sys.stderr.write('MODS %%s\\n' %% sorted("
            "{m.split('.')[0] for m in sys.modules} & {'mcp', 'pygit2', 'pydantic', 'anyio', 'tc_git'})));"
            "runpy.run_path(%r, run_name='__main__')") % (entry, entry)
    r = subprocess.run([sys.executable, "-c", code], input=ev, text=True, capture_output=True, env=clean_env())
    assert r.returncode == 0, r.stderr
    assert "first step" in json.loads(r.stdout)["hookSpecificOutput"]["additionalContext"]
    assert "MODS ['tc_git']" in r.stderr, r.stderr
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        r = subprocess.run([entry, "session-start"], input=ev, text=True, capture_output=True, env=clean_env())
        times.append(time.perf_counter() - t0)
        assert r.returncode == 0 and "first step" in r.stdout
    times.sort()
    print(f"SessionStart with a task via {Path(entry).name}: median {times[2] * 1000:.0f} ms, min {times[0] * 1000:.0f} ms")
    assert times[0] < 1.0
