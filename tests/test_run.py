"""`run -- <command>` (issue 18): a real child process edits files in bursts while the wrapper
watches; drifts, exit code, output and signals are checked from outside, stock git reads the store."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from conftest import TC, TRANSCRIPTS, clean_env, git, tc_json

pytestmark = [pytest.mark.usefixtures("fsck_after")]

QUIET = "0.3"  # seconds of quiet before a burst becomes a drift (default 15 s)

BURSTS = textwrap.dedent("""
    import sys, time
    def burst(names, text):
        for n in names:
            with open(n, "w") as f:
                f.write(text)
    burst(["a.txt", "b.txt"], "burst 1\\n")
    time.sleep(2)
    burst(["c.txt"], "burst 2\\n")
    time.sleep(2)
    print("stdout:", sys.stdin.readline().strip(), flush=True)
    print("to stderr", file=sys.stderr, flush=True)
    with open("d.txt", "w") as f:  # the last edit: recorded by the drift at exit
        f.write("last\\n")
    sys.exit(3)
""")

WAITS_FOR_SIGINT = textwrap.dedent("""
    import signal, sys, time
    hits = []
    signal.signal(signal.SIGINT, lambda *_: hits.append(1))
    with open("work.txt", "w") as f:
        f.write("working\\n")
    print("ready", flush=True)
    while not hits:
        time.sleep(0.05)
    time.sleep(0.5)  # a second (duplicated) SIGINT would be counted
    with open("interrupted.txt", "w") as f:  # written just before exit: only the drift at exit has it
        f.write(f"SIGINT x{len(hits)}\\n")
    sys.exit(130)
""")


def _env(**extra):
    return clean_env(TC_WATCH_INTERVAL=QUIET, TC_DRIFT_MAX_WAIT="5", TC_GIT="off", **extra)


def _drifts(store, task):
    log = git(store, "log", "--format=%s", f"refs/checkpoints/tasks/{task}/head")
    return log.decode().splitlines()


def test_run_records_a_drift_per_burst_and_passes_exit_code_and_output(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    script = tmp_path / "bursts.py"
    script.write_text(BURSTS)
    t0 = time.monotonic()
    r = subprocess.run([*TC, "--json", "run", "--", sys.executable, str(script)], cwd=ws, env=_env(),
                       input=b"hello from stdin\n", capture_output=True, timeout=120)
    assert r.returncode == 3, r.stderr
    assert time.monotonic() - t0 < 60
    out = r.stdout.decode()
    assert out.startswith("stdout: hello from stdin\n")  # the child's output first, untouched
    assert b"to stderr\n" in r.stderr
    summary = json.loads(out[len("stdout: hello from stdin\n"):])
    assert summary["exit_code"] == 3 and summary["task_created"] and summary["store_created"]
    assert b"no tc-git store here: created" in r.stderr  # said, never silently
    store = ws / ".checkpoints"
    # stock git: one drift per burst while it ran, then the drift at exit with the last edit
    subjects = _drifts(store, summary["task_id"])
    assert re.match(r"drift d\d+: run: .*\(exit 3\)$", subjects[0]), subjects
    assert len(summary["drifts"]) == 3, subjects
    task_ref = f"refs/checkpoints/tasks/{summary['task_id']}/head"
    names = [git(store, "diff-tree", "--no-commit-id", "--name-only", "-r", f"{task_ref}~{i}").decode().split()
             for i in (2, 1, 0)]
    assert names == [["a.txt", "b.txt"], ["c.txt"], ["d.txt"]]
    assert git(store, "show", f"{task_ref}:d.txt") == b"last\n"


# the second variant hides sigtimedwait: the handler-based path macOS and Windows take
FALLBACK = [sys.executable, "-c", "import signal, sys; del signal.sigtimedwait; from tc_git.cli import main; "
            "sys.exit(main(sys.argv[1:]))"]


@pytest.mark.parametrize("wrapper", [TC, FALLBACK], ids=["sigtimedwait", "handlers"])
def test_run_forwards_sigint_and_still_records_the_last_drift(tmp_path, wrapper):
    ws = tmp_path / "ws"
    ws.mkdir()
    script = tmp_path / "wait.py"
    script.write_text(WAITS_FOR_SIGINT)
    tc_json("init", "existing task", cwd=ws, env=_env())
    p = subprocess.Popen([*wrapper, "--json", "run", "--", sys.executable, str(script)], cwd=ws, env=_env(),
                         stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert p.stdout.readline() == b"ready\n"
        time.sleep(0.5)
        os.kill(p.pid, signal.SIGINT)  # to the wrapper only: it must reach the child, not kill the wrapper
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 130, err
    assert (ws / "interrupted.txt").read_text() == "SIGINT x1\n"  # delivered once
    summary = json.loads(out)
    assert summary["signals_forwarded"] == ["SIGINT"] and not summary["task_created"]
    store = ws / ".checkpoints"
    head = f"refs/checkpoints/tasks/{summary['task_id']}/head"
    assert git(store, "show", f"{head}:interrupted.txt") == b"SIGINT x1\n"
    assert "(exit 130)" in _drifts(store, summary["task_id"])[0]


def test_terminal_ctrl_c_reaches_the_child_once(tmp_path):
    """Ctrl-C in a terminal signals the whole foreground group: the wrapper must not send it again."""
    if not sys.platform.startswith("linux"):
        pytest.skip("si_code tells the terminal's signals apart on Linux; elsewhere the fallback decides by foreground group")
    import pty

    ws = tmp_path / "ws"
    ws.mkdir()
    script = tmp_path / "wait.py"
    script.write_text(WAITS_FOR_SIGINT)
    pid, fd = pty.fork()
    if pid == 0:  # child: its own session with the pty as controlling terminal
        os.chdir(ws)
        os.execve(TC[0], [*TC, "run", "--", sys.executable, str(script)], _env())
    buf = b""
    deadline = time.monotonic() + 60
    while b"ready" not in buf and time.monotonic() < deadline:
        buf += os.read(fd, 1024)
    time.sleep(0.5)
    os.write(fd, b"\x03")  # the terminal driver turns this into SIGINT for the foreground group
    while time.monotonic() < deadline:
        try:
            chunk = os.read(fd, 1024)
        except OSError:
            break
        if not chunk:
            break
        buf += chunk
    _, status = os.waitpid(pid, 0)
    os.close(fd)
    assert os.waitstatus_to_exitcode(status) == 130, buf
    assert (ws / "interrupted.txt").read_text() == "SIGINT x1\n"
    assert b"drift" in buf  # the summary line: the last drift was recorded after the interrupt


def test_run_records_a_claude_transcript_and_links_it_with_a_milestone(tmp_path):
    """A stand-in `claude` on PATH edits a file and writes a real Claude Code transcript where Claude
    Code keeps it (<config>/projects/<cwd slug>/<session>.jsonl)."""
    ws = tmp_path / "ws"
    ws.mkdir()
    bindir, config = tmp_path / "bin", tmp_path / "claude-config"
    bindir.mkdir()
    fixture = TRANSCRIPTS / "claude-daaain-1.jsonl"
    slug = re.sub(r"[^A-Za-z0-9]", "-", str(ws))
    fake = bindir / "claude"
    fake.write_text(textwrap.dedent(f"""\
        #!{sys.executable}
        import os, shutil, sys
        open("app.py", "w").write("print('edited by the agent')\\n")
        d = os.path.join({str(config)!r}, "projects", {slug!r})
        os.makedirs(d, exist_ok=True)
        shutil.copy({str(fixture)!r}, os.path.join(d, "00893aaf-19fa-41d2-8238-13269b9b3ca0.jsonl"))
        print("claude stand-in done", sys.argv[1:])
    """))
    fake.chmod(0o755)
    env = _env(CLAUDE_CONFIG_DIR=config, PATH=f"{bindir}{os.pathsep}{os.environ['PATH']}")
    r = subprocess.run([*TC, "--json", "run", "--", "claude", "--model", "x"], cwd=ws, env=env,
                       capture_output=True, timeout=120)
    assert r.returncode == 0, r.stderr
    out = r.stdout.decode()
    assert out.startswith("claude stand-in done ['--model', 'x']\n")
    summary = json.loads(out.split("\n", 1)[1])
    assert summary["milestone"] and summary["transcripts"][0]["events"] > 0, summary
    store = ws / ".checkpoints"
    ms = git(store, "for-each-ref", "--format=%(refname)", "refs/checkpoints/milestones/").decode().split()
    assert ms == [f"refs/checkpoints/milestones/{summary['milestone']}"]
    sessions = git(store, "for-each-ref", "--format=%(refname)", "refs/checkpoints/sessions/").decode()
    assert "claude-" in sessions
    # the milestone's code is the run's last drift, which holds the agent's edit
    co = tc_json("checkout", summary["milestone"], cwd=ws, env=env)
    assert git(store, "show", f"{co['code_commit']}:app.py") == b"print('edited by the agent')\n"


def test_run_refuses_what_it_cannot_start(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    for argv, code in ((["run"], b"nothing to run"), (["run", "--", "no-such-command-tc"], b"command not found")):
        r = subprocess.run([*TC, *argv], cwd=ws, env=_env(), capture_output=True, timeout=60)
        assert r.returncode == 2 and code in r.stderr, r.stderr
    assert not (ws / ".checkpoints").exists()  # a refusal writes nothing


def test_run_records_only_the_codex_rollout_of_this_workspace(tmp_path):
    """A stand-in `codex` writes two real rollouts where Codex keeps them
    ($CODEX_HOME/sessions/YYYY/MM/DD/): one started here, one in another directory."""
    ws = tmp_path / "ws"
    ws.mkdir()
    bindir, home = tmp_path / "bin", tmp_path / "codex-home"
    bindir.mkdir()
    fixture = TRANSCRIPTS / "codex-localpush-1.jsonl"
    fake = bindir / "codex"
    fake.write_text(textwrap.dedent(f"""\
        #!{sys.executable}
        import json, os, time
        open("main.rs", "w").write("fn main() {{}}\\n")
        day = os.path.join({str(home)!r}, "sessions", time.strftime("%Y/%m/%d"))
        os.makedirs(day, exist_ok=True)
        lines = open({str(fixture)!r}, "rb").read().splitlines(keepends=True)
        for name, cwd in (("here", os.getcwd()), ("elsewhere", "/somewhere/else")):
            meta = json.loads(lines[0])
            meta["payload"]["cwd"] = cwd
            meta["payload"]["id"] = meta["payload"]["id"][:-4] + ("0001" if name == "here" else "0002")
            with open(os.path.join(day, f"rollout-2026-12-01T00-00-00-{{name}}.jsonl"), "wb") as f:
                f.write(json.dumps(meta).encode() + b"\\n" + b"".join(lines[1:]))
    """))
    fake.chmod(0o755)
    env = _env(CODEX_HOME=home, PATH=f"{bindir}{os.pathsep}{os.environ['PATH']}")
    r = subprocess.run([*TC, "--json", "run", "--", "codex", "exec", "fix it"], cwd=ws, env=env,
                       capture_output=True, timeout=120)
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout)
    assert [os.path.basename(t["path"]) for t in summary["transcripts"]] == ["rollout-2026-12-01T00-00-00-here.jsonl"]
    assert summary["milestone"].startswith("run-codex-") and summary["transcripts"][0]["events"] > 0
    store = ws / ".checkpoints"
    co = tc_json("checkout", summary["milestone"], cwd=ws, env=env)
    assert git(store, "show", f"{co['code_commit']}:main.rs") == b"fn main() {}\n"


def test_run_after_a_closed_task_starts_a_new_one(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    closed = tc_json("init", "done already", cwd=ws, env=_env())["task_id"]
    tc_json("save", "final", "--close", cwd=ws, env=_env())
    r = subprocess.run([*TC, "--json", "run", "--", sys.executable, "-c", "open('x.txt', 'w').write('x')"],
                       cwd=ws, env=_env(), capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout)
    assert summary["task_created"] and summary["task_id"] != closed and len(summary["drifts"]) == 1
    head = f"refs/checkpoints/tasks/{summary['task_id']}/head"
    assert git(ws / ".checkpoints", "show", f"{head}:x.txt") == b"x"
    assert b"close" in git(ws / ".checkpoints", "log", "-1", "--format=%s", f"refs/checkpoints/tasks/{closed}/head")


def test_a_credential_on_the_command_line_never_becomes_an_object(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    key = "sk-ant-api03-" + "Q7x9" * 20
    r = subprocess.run([*TC, "run", "--", "env", f"TOKEN={key}", sys.executable, "-c", "open('y.txt', 'w').write('y')"],
                       cwd=ws, env=_env(), capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr
    store = ws / ".checkpoints"
    everything = git(store, "log", "--all", "--format=%B%N", "--notes=checkpoints")
    assert b"[REDACTED" in everything and key.encode() not in everything
    objects = git(store, "cat-file", "--batch-all-objects", "--batch")
    assert key[:30].encode() not in objects
