"""Secrets by other routes (issue 28 item 3): a credential in a file or directory *name*, an AWS
secret key beside its key id in free text, and a token echoed into tc-git's own logs.

Judged with stock git: every object of the store and of the user's repository (mirrored refs) and
of an exported bundle is read back (`git cat-file --batch-all-objects`, `git ls-tree -r`)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from conftest import TC, clean_env, fsck, git, knobs

from tc_git.workspace import secrets

GHP_FILE = "ghp_" + "Zq7" * 12  # 36 characters after the prefix: GitHub's format
GHP_DIR = "ghp_" + "Xw4k" * 9
AKID = "AKIA" + "QZ7XK2M4VN3RT6WY"
AWS_SECRET = "k9Ft2Lq/Vx7Rb3Nw8Hc+Yz5Jd4Mp6Ts1Gu0Ae2Qi"  # 40 base64 characters, random-looking
HOOK = [sys.executable, "-P", "-m", "tc_git.hooks"]


def objects(gitdir: Path) -> bytes:
    """Every object's content (trees as ls-tree text) and every ref name of a repository."""
    env = clean_env()
    ids = subprocess.run(["git", f"--git-dir={gitdir}", "cat-file", "--batch-all-objects", "--batch-check"],
                         capture_output=True, env=env, check=True).stdout.decode().split("\n")
    out = [subprocess.run(["git", f"--git-dir={gitdir}", "for-each-ref"], capture_output=True, env=env,
                          check=True).stdout]
    for line in ids:
        if not line:
            continue
        oid, kind, _size = line.split()
        cmd = ["ls-tree", oid] if kind == "tree" else ["cat-file", "-p", oid]
        out.append(subprocess.run(["git", f"--git-dir={gitdir}", *cmd], capture_output=True, env=env,
                                  check=True).stdout)
    return b"\n".join(out)


def cli(args, cwd: Path, env: dict) -> dict:
    r = subprocess.run([*TC, "--json", *args], cwd=cwd, capture_output=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr.decode()
    return json.loads(r.stdout)


def test_a_credential_in_a_name_never_becomes_an_object(tmp_path):
    ws = tmp_path / "ws"
    (ws / "src").mkdir(parents=True)
    (ws / "src" / "a.py").write_text("print('a')\n")
    (ws / f"token-{GHP_FILE}.json").write_text('{"cached": true}\n')  # content harmless: the name is not
    (ws / GHP_DIR).mkdir()
    (ws / GHP_DIR / "cache.bin").write_bytes(b"per-token cache\n")
    (ws / "src" / "tokenizer.py").write_text("x = 1\n")  # an ordinary name stays
    (ws / f"link-{GHP_FILE}").symlink_to("src/a.py")  # a link is stored as a link: not under this name
    env = clean_env(GIT_AUTHOR_NAME="u", GIT_AUTHOR_EMAIL="u@x", GIT_COMMITTER_NAME="u",
                    GIT_COMMITTER_EMAIL="u@x")
    for args in (["init", "-q"], ["add", "src"], ["commit", "-qm", "base"]):
        subprocess.run(["git", *args], cwd=ws, env=env, check=True, capture_output=True)
    cli(["init", "names"], ws, env)
    saved = cli(["save", "with token names"], ws, env)
    skipped = "\n".join(saved["skipped_paths"])
    assert "its name holds a credential (github-token)" in skipped, skipped
    assert "its directory name holds a credential (github-token)" in skipped, skipped
    assert skipped.count("its name holds a credential") == 2, skipped  # the file and the link
    store = ws / ".checkpoints"
    tree = git(store, "ls-tree", "-r", "--name-only", saved["commit"]).decode().split("\n")
    assert "src/a.py" in tree and "src/tokenizer.py" in tree, tree
    bundle = tmp_path / "out.bundle"
    cli(["export", str(bundle)], ws, env)
    assert subprocess.run(["git", f"--git-dir={store}", "bundle", "verify", str(bundle)], capture_output=True,
                          env=clean_env()).returncode == 0
    clone = tmp_path / "from-bundle.git"
    subprocess.run(["git", "clone", "-q", "--mirror", str(bundle), str(clone)], check=True, capture_output=True,
                   env=clean_env())
    for gitdir in (store, ws / ".git", clone):
        everything = objects(gitdir)
        assert GHP_FILE.encode() not in everything and GHP_DIR.encode() not in everything, gitdir
    assert b"refs/checkpoints/" in subprocess.run(["git", "for-each-ref"], cwd=ws, capture_output=True,
                                                  env=clean_env()).stdout  # the user's refs were mirrored
    fsck(store)


def test_an_aws_secret_key_beside_its_key_id_is_redacted(tmp_path):
    prompt = f"use key {AKID} {AWS_SECRET} for the upload"
    red = secrets.redact_text(prompt)
    assert AKID not in red and AWS_SECRET not in red and "[REDACTED:aws-secret-access-key]" in red, red
    record = secrets.redact_obj({"type": "user", "message": {"content": [{"type": "text", "text": prompt}]}})
    assert AWS_SECRET not in json.dumps(record)
    # not beside a key id, or not secret-shaped: left alone
    assert secrets.redact_text(f"key {AKID} at commit 0123456789abcdef0123456789abcdef01234567").endswith(
        "0123456789abcdef0123456789abcdef01234567")
    assert secrets.redact_text(AWS_SECRET) == AWS_SECRET
    # a save title, through the CLI, judged on every object of the store
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("a\n")
    env = clean_env(TC_GIT="off")
    cli(["init", "aws"], ws, env)
    saved = cli(["save", f"rotated {AKID} {AWS_SECRET} today"], ws, env)
    assert saved["redacted"], saved
    everything = objects(ws / ".checkpoints")
    assert AKID.encode() not in everything and AWS_SECRET.encode() not in everything


def test_a_token_passed_as_a_task_id_never_reaches_a_log(tmp_path):
    from tc_git.engine import Engine

    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("a\n")
    Engine(ws).init("logs")
    env = clean_env(TC_GIT="off", TC_WATCH="off", **knobs(mcp_fast="off"))
    p = subprocess.Popen([sys.executable, "-m", "tc_git"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, env=env, cwd=ws)
    msgs = [{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}},
            {"jsonrpc": "2.0", "method": "notifications/initialized"},
            {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
             "params": {"name": "tc_show", "arguments": {"root": str(ws), "task_id": GHP_FILE}}},
            {"jsonrpc": "2.0", "id": 3, "method": "tools/call",
             "params": {"name": "tc_switch", "arguments": {"root": str(ws), "task_id": GHP_DIR}}}]
    replies = {}
    for m in msgs:  # one at a time: the SDK cancels what is still running when stdin closes
        p.stdin.write(json.dumps(m).encode() + b"\n")
        p.stdin.flush()
        while "id" in m and m["id"] not in replies:
            line = p.stdout.readline()
            assert line, p.stderr.read().decode()[-2000:]
            reply = json.loads(line)
            replies[reply.get("id")] = reply
    out, err = p.communicate(timeout=120)
    assert replies[2]["result"]["isError"] and replies[3]["result"]["isError"], replies
    log = (ws / ".checkpoints" / "tc" / "server.log").read_text()
    assert "tc_show error" in log and "[REDACTED:github-token]" in log, log
    assert GHP_FILE not in log and GHP_DIR not in log, log
    assert GHP_FILE.encode() not in err and GHP_DIR.encode() not in err, err.decode()[-2000:]
    # the hooks' log too: a tool call id holding a token
    ev = {"session_id": "s1", "cwd": str(ws), "hook_event_name": "PostToolUse", "tool_name": "Bash",
          "tool_use_id": GHP_FILE, "tool_input": {"command": "true"}, "tool_response": {}}
    r = subprocess.run(HOOK, input=json.dumps(ev).encode(), capture_output=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    hooks_log = (ws / ".checkpoints" / "tc" / "hooks.log").read_text()
    assert "PostToolUse Bash" in hooks_log and GHP_FILE not in hooks_log, hooks_log
