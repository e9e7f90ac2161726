"""`run -- <command ...>`: any agent (or any command) with the workspace watched (issue 18).

The command runs as a child of this process, in the same process group and with the same stdin,
stdout and stderr, so a terminal program (Claude Code, Codex, an editor) behaves as if started
directly. While it runs, the drift watcher of the MCP server (watch.py: quiet period
`TC_WATCH_INTERVAL`, `TC_DRIFT_MAX_WAIT`) records each settled burst of edits as a drift; when it
exits, the rest becomes a last drift, and for Claude Code or Codex the session transcript written
during the run is recorded and a milestone links it to that code.

Signals: SIGINT, SIGTERM, SIGHUP and SIGQUIT are blocked in this process and taken with
`sigtimedwait`, so the wrapper never dies before its child. A signal sent by another process
(`kill`, a CI runner, a supervisor) is forwarded to the child; one the terminal generated (Ctrl-C:
`si_code` SI_KERNEL) is not, because the terminal delivered it to the child already (same
foreground process group). The child starts through `posix_spawn` with an empty signal mask and
default dispositions, not through fork + a Python pre-exec hook (unsafe once watcher threads run).
Exit status: the child's code, or 128 + N when signal N ended it.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # annotations only: the engine (and pygit2) load on first use
    from ..engine import Engine

FORWARDED = tuple(getattr(signal, n) for n in ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT") if hasattr(signal, n))
_SI_KERNEL = 0x80  # si_code of a signal the kernel (e.g. the terminal driver) generated
AGENTS = {"claude": "claude", "claude-code": "claude", "codex": "codex"}


def run(root, argv: list[str], say=None) -> dict:
    """Run `argv` in workspace `root`, recording drifts; returns a summary with `exit_code`."""
    from ..base.errors import BadInput, NotFound
    from ..engine import Engine

    inherited = _open_fds()  # what our caller gave us passes on to the command; nothing we open does
    say = say or (lambda line: print(f"tc-git run: {line}", file=sys.stderr, flush=True))
    if not argv:
        raise BadInput("nothing to run: give the command after --, e.g. `run -- claude`")
    exe = shutil.which(argv[0])
    if exe is None:
        raise NotFound(f"command not found: {argv[0]!r} (not on PATH and not an executable path)")
    engine = Engine(root, agent="tc-run")
    had_store = engine.has_store
    task, created = _ensure_task(engine, argv)
    if created:  # never silently: a store (and a task) where there was none is news to the user
        say(f"no tc-git store here: created {engine.store_path} with task {task} (named after the command; "
            "`tc-git init <name>` first names your own)" if not had_store else
            f"no open task here: started task {task} (named after the command; `tc-git init <name>` first names your own)")
    before = engine.capture(title=f"before run: {_label(argv)}")  # the run's drifts hold only its edits
    start_commit = before.get("commit") or engine.head_commit()
    cwd, started = os.getcwd(), time.time()

    forwarded: list[str] = []
    if hasattr(signal, "sigtimedwait"):
        code = _run_blocked(engine, exe, argv, forwarded, inherited)
    else:  # macOS, Windows: no sigtimedwait; handlers forward what the terminal did not send
        code = _run_with_handlers(engine, exe, argv, forwarded)
    exit_code = code if code >= 0 else 128 - code
    how = f"exit {code}" if code >= 0 else f"killed by {signal.Signals(-code).name}"
    out: dict[str, Any] = {"command": argv, "exit_code": exit_code, "task_id": task, "task_created": created,
           "store_created": created and not had_store,
           "drifts": [], "last_drift": None, "signals_forwarded": forwarded,
           "transcripts": [], "milestone": None, "seconds": round(time.time() - started, 3), "error": None}
    try:  # whatever happens here, the command's exit status is passed on
        last = engine.capture(title=f"run: {_label(argv)} ({how})")
        out["last_drift"] = last.get("drift_id")
        drifts = out["drifts"] = engine.drifts_since(start_commit, started)
        agent = AGENTS.get(os.path.basename(argv[0]).lower())
        if agent:
            _record_transcripts(engine, agent, cwd, started, drifts, argv, out)
    except Exception as e:  # noqa: BLE001 - reported, never raised over the child's exit code
        out["error"] = getattr(e, "message", None) or f"{type(e).__name__}: {e}"
        say(f"recording after the command failed: {out['error']}; `tc-git capture` records the workspace now")
    drifts = out["drifts"]
    say(f"{len(drifts)} drift{'s' if len(drifts) != 1 else ''} recorded in task {task}"
        + (f" ({drifts[0]}..{drifts[-1]})" if drifts else "") + f"; command {how}"
        + (f"; milestone {out['milestone']}" if out["milestone"] else ""))
    return out


def _label(argv: list[str]) -> str:
    """The command as commit titles show it: credentials on a command line never become objects."""
    from ..workspace.secrets import redact_text

    text = redact_text(" ".join(argv))
    return text if len(text) <= 60 else text[:59] + "…"


def _ensure_task(engine, argv) -> tuple[str, bool]:
    """The active task, or a new one named after the command when there is none (or it closed)."""
    active = engine.active_open_task()
    if active:
        return active, False
    name = f"run {os.path.basename(argv[0])}"
    return engine.init(name, goal=f"work done by `{_label(argv)}`")["task_id"], True


def _start_watcher(engine):
    from ..mcp.watch import DriftWatcher, watch_enabled
    from ..workspace.secrets import store_log

    if not watch_enabled():  # TC_WATCH=off: only the drift at exit
        return None

    def engine_factory(root) -> Engine:
        from ..engine import Engine

        return Engine(root, agent="tc-run")

    w = DriftWatcher(log_line=lambda store, line: store_log(store, "run.log", line), engine_factory=engine_factory)
    w.watch(engine)
    return w


def _run_blocked(engine, exe: str, argv: list[str], forwarded: list[str], inherited: set[int]) -> int:
    old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, (*FORWARDED, signal.SIGCHLD))
    watcher = None
    try:
        watcher = _start_watcher(engine)
        _no_leaks(inherited)  # the watcher's inotify descriptor must not reach the child
        pid = os.posix_spawn(exe, argv, os.environ, setsigmask=(),
                             setsigdef=(*FORWARDED, signal.SIGPIPE, signal.SIGXFSZ, signal.SIGCHLD))
        status = _wait(pid, forwarded)
    finally:
        if watcher is not None:
            watcher.stop()
        _drain()  # a second Ctrl-C during the run must not kill the recording below
        signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)
    return os.waitstatus_to_exitcode(status)


def _run_with_handlers(engine, exe: str, argv: list[str], forwarded: list[str]) -> int:
    """Fallback: Python handlers cannot see who sent a signal, so SIGINT/SIGQUIT are forwarded
    only when we are not in the terminal's foreground group (there the terminal reached the
    child already); SIGTERM/SIGHUP always."""
    import subprocess

    watcher = _start_watcher(engine)
    child = subprocess.Popen([exe, *argv[1:]], executable=exe)

    def forward(signo, _frame):
        interactive = signo in (signal.SIGINT, getattr(signal, "SIGQUIT", None)) and _foreground()
        if not interactive and child.poll() is None:
            child.send_signal(signo)
            forwarded.append(signal.Signals(signo).name)

    old = {s: signal.signal(s, forward) for s in FORWARDED}
    try:
        while True:
            try:
                return child.wait()  # negative: killed by that signal, as waitstatus_to_exitcode
            except InterruptedError:
                continue
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        if watcher is not None:
            watcher.stop()


def _foreground() -> bool:
    try:
        return os.tcgetpgrp(sys.stdin.fileno()) == os.getpgrp()
    except (OSError, AttributeError, ValueError):
        return False


def _open_fds() -> set[int]:
    try:
        return {int(x) for x in os.listdir("/proc/self/fd")}
    except OSError:
        return set(range(3))


def _no_leaks(inherited: set[int]) -> None:
    """Descriptors opened since `inherited` was taken are not passed on (ones the caller gave us are)."""
    for fd in _open_fds() - inherited:
        try:
            os.set_inheritable(fd, False)
        except OSError:
            pass


def _wait(pid: int, forwarded: list[str]) -> int:
    """Wait for the child, forwarding signals other processes send us; returns the wait status."""
    waited = (*FORWARDED, signal.SIGCHLD)
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status
        info = signal.sigtimedwait(waited, 0.5)
        if info is None or info.si_signo == signal.SIGCHLD:
            continue
        if info.si_code == _SI_KERNEL or info.si_pid == pid:
            continue  # the terminal's (or the child's own group-wide) signal reached the child already
        try:
            os.kill(pid, info.si_signo)
            forwarded.append(signal.Signals(info.si_signo).name)
        except ProcessLookupError:
            pass


def _drain() -> None:
    while signal.sigtimedwait((*FORWARDED, signal.SIGCHLD), 0) is not None:
        pass


# ------------------------------------------------------------------ agent transcripts
def claude_transcripts(cwd: str, since: float) -> list[Path]:
    """Claude Code session files written since `since` for a session started in `cwd`:
    `<config>/projects/<cwd with every non-alphanumeric char as '-'>/<session>.jsonl`."""
    base = Path(os.path.expanduser(os.environ.get("CLAUDE_CONFIG_DIR") or "~/.claude")) / "projects"
    slug = re.sub(r"[^A-Za-z0-9]", "-", cwd)
    dirs = [base / slug] if (base / slug).is_dir() else []
    if not dirs and len(slug) > 200 and base.is_dir():  # long paths: truncated, then a hash
        dirs = [d for d in base.iterdir() if d.name.startswith(slug[:200])]
    return _recent([f for d in dirs for f in d.glob("*.jsonl")], since)


def codex_transcripts(cwd: str, since: float) -> list[Path]:
    """Codex rollouts written since `since` whose `session_meta` names `cwd`
    (`$CODEX_HOME/sessions/YYYY/MM/DD/rollout-*.jsonl`; not per project)."""
    base = Path(os.path.expanduser(os.environ.get("CODEX_HOME") or "~/.codex")) / "sessions"
    days = {time.strftime("%Y/%m/%d", f(t)) for t in (since, time.time()) for f in (time.localtime, time.gmtime)}
    files = [f for d in days for f in (base / d).glob("rollout-*.jsonl")]
    return [f for f in _recent(files, since) if _codex_cwd(f) in (cwd, None)]


def _codex_cwd(path: Path) -> str | None:
    try:
        with open(path, "rb") as f:
            first = json.loads(f.readline(1 << 20) or b"{}")
        return (first.get("payload") or {}).get("cwd") if first.get("type") == "session_meta" else None
    except (OSError, ValueError, AttributeError):
        return None


def _recent(files: list[Path], since: float) -> list[Path]:
    out = []
    for f in files:
        try:
            if f.is_file() and f.stat().st_mtime >= since - 1:
                out.append(f)
        except OSError:
            continue
    return sorted(out, key=lambda f: f.stat().st_mtime)


def _record_transcripts(engine, agent: str, cwd: str, since: float, drifts, argv, out: dict) -> None:
    """Record each session the agent wrote during the run; a milestone on the newest names the run
    and links the code it left (the last drift)."""
    from ..base.errors import TcError

    found = (claude_transcripts if agent == "claude" else codex_transcripts)(cwd, since)
    tip = None
    for path in found:
        try:
            r = engine.record(transcript=str(path), fmt=agent)
        except TcError as e:
            out["transcripts"].append({"path": str(path), "error": e.message})
            continue
        out["transcripts"].append({"path": str(path), "session": r["session"], "events": r["events"]})
        tip = r["tip"] or tip
    if tip:
        name = f"run-{agent}-{time.strftime('%Y%m%d-%H%M%S', time.gmtime(since))}"
        span = f"{drifts[0]}..{drifts[-1]}" if drifts else "no drifts"
        try:
            m = engine.milestone(name, tip, message=f"run: {_label(argv)}; drifts {span}", force=True)
            out["milestone"] = m["name"]
        except TcError as e:
            out["transcripts"].append({"milestone_error": e.message})


# ------------------------------------------------------------------ command line
def setup(sub) -> None:
    import argparse

    p = sub.add_parser("run", help="run a command (e.g. claude, codex) with the workspace watched: drifts "
                                   "per burst of edits, transcript recorded at the end",
                       usage="%(prog)s -- <command> [args ...]")
    p.add_argument("command", nargs=argparse.REMAINDER, help="the command and its arguments, after --")
    p.set_defaults(func=_cli, human=lambda r: "", exit_code_from_result=True)


def _cli(args) -> dict:
    argv = list(args.command)
    if argv[:1] == ["--"]:
        argv = argv[1:]
    return run(args.root, argv)
