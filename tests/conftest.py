"""Shared helpers for the tc-git test-suite. Stock git is the judge: no mocks.

* `fsck(store)` runs `git --git-dir=<store> fsck --full` and fails the test on any complaint.
* `fsck_after` (fixture; modules opt in with `pytestmark = pytest.mark.usefixtures("fsck_after")`)
  finds every tc-git store under the test's tmp_path at teardown and fscks it, so every scenario
  ends with the judge.
* `tree_state(root)` reads a workspace as {relative path (bytes): (kind, bytes, mode)} for exact
  comparisons of bytes, exec bits, links and absences.
"""
from __future__ import annotations

import contextlib
import os
import stat
import subprocess
import sys

# Hooks record every session into a user-level store under $XDG_DATA_HOME when a directory has
# no store of its own: no test may write into the real one.
import tempfile  # noqa: E402
from pathlib import Path

import pytest

os.environ["XDG_DATA_HOME"] = tempfile.mkdtemp(prefix="tc-git-tests-xdg-")

# The `tc` console script, independent of PATH (`python -m tc_git` is the MCP server).
# Real agent transcripts (MIT; provenance in tests/fixtures/transcripts/SOURCES.md)
TRANSCRIPTS = Path(__file__).resolve().parent / "fixtures" / "transcripts"

TC = [sys.executable, "-c", "import sys; from tc_git.cli import main; sys.exit(main(sys.argv[1:]))"]


def clean_env(**extra) -> dict:
    """The caller's environment without GIT_* / TC_* leaks, plus `extra`."""
    # TC_NATIVE and TC_WSFS are the suite's own mode switches (`.ci/run` reruns tests with the
    # native paths off and workspace writes by full paths): keep them
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GIT_", "TC_")) or k in ("TC_NATIVE", "TC_WSFS")}
    env.update({k: str(v) for k, v in extra.items()})
    return env


def git(store, *args, input: bytes | None = None, check: bool = True, cwd=None) -> bytes:
    """Run git against a tc-git store (bare repo) and return stdout bytes."""
    cmd = ["git", f"--git-dir={store}", *args]
    r = subprocess.run(cmd, input=input, capture_output=True, env=clean_env(), cwd=cwd)
    if check and r.returncode != 0:
        raise AssertionError(f"{' '.join(map(str, cmd))} failed ({r.returncode}): {r.stderr.decode(errors='replace')}")
    return r.stdout


def git_tree(ws: Path, store: Path) -> str:
    """What stock git says the workspace's tree is (a fresh index: no stat cache involved)."""
    with tempfile.TemporaryDirectory() as d:
        env = clean_env(GIT_INDEX_FILE=os.path.join(d, "index"), GIT_DIR=str(store), GIT_WORK_TREE=str(ws))
        subprocess.run(["git", "add", "-A"], env=env, check=True, capture_output=True, cwd=ws)
        return subprocess.run(["git", "write-tree"], env=env, check=True, capture_output=True,
                              cwd=ws).stdout.decode().strip()


@contextlib.contextmanager
def local_http(handler):
    """A real HTTP server on loopback, serving `handler` on its own thread (the fake model
    endpoints the Claude Code and Codex CLIs are pointed at); yields its port."""
    import http.server
    import threading

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def fsck(store) -> None:
    """`git fsck --full` must be clean: exit 0 and no error, missing, broken or corrupt object."""
    r = subprocess.run(["git", f"--git-dir={store}", "fsck", "--full", "--no-progress"],
                       capture_output=True, env=clean_env())
    out = (r.stdout + r.stderr).decode(errors="replace")
    bad = [ln for ln in out.splitlines()
           if ln.startswith(("error", "fatal", "missing", "broken", "bad", "warning")) or "corrupt" in ln]
    assert r.returncode == 0 and not bad, f"git fsck --full on {store} failed (rc={r.returncode}):\n{out}"


def is_store(p: Path) -> bool:
    return (p / "HEAD").is_file() and (p / "objects").is_dir() and (p / "tc").is_dir()


def stores_under(root: Path) -> list[Path]:
    found = []
    for dirpath, dirs, _files in os.walk(root):
        d = Path(dirpath)
        if is_store(d):
            found.append(d)
            dirs[:] = []
        else:
            dirs[:] = [x for x in dirs if x != ".git"]
    return found


@pytest.fixture
def fsck_after(tmp_path):
    yield
    for store in stores_under(tmp_path):
        fsck(store)


def tc(*args, cwd=None, env=None, check: bool = False, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run the `tc` CLI and return the completed process."""
    r = subprocess.run([*TC, *map(str, args)], cwd=cwd, env=env or clean_env(), capture_output=True,
                       timeout=timeout)
    if check and r.returncode != 0:
        raise AssertionError(f"tc {' '.join(map(str, args))} failed ({r.returncode}):\n"
                             f"{r.stdout.decode(errors='replace')}\n{r.stderr.decode(errors='replace')}")
    return r


def tc_json(*args, cwd=None, env=None):
    import json

    r = tc("--json", *args, cwd=cwd, env=env, check=True)
    return json.loads(r.stdout)


def tree_state(root, skip=(b".checkpoints",), with_mtime: bool = False) -> dict:
    """{rel bytes: (kind, content-or-link-target, perm bits[, mtime_ns])} for files and links.

    `skip` names top-level entries (bytes) to leave out. Directories themselves are not listed
    (git does not record empty ones).
    """
    root = os.fsencode(root)
    out = {}
    for dirpath, dirs, files in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        if rel_dir == b".":
            dirs[:] = [d for d in dirs if d not in skip]
            files = [f for f in files if f not in skip]
        for name in dirs + files:
            full = os.path.join(dirpath, name)
            rel = os.path.normpath(os.path.join(rel_dir, name))
            st = os.lstat(full)
            if stat.S_ISLNK(st.st_mode):
                val = ("link", os.readlink(full), 0)
            elif stat.S_ISREG(st.st_mode):
                with open(full, "rb") as f:
                    val = ("file", f.read(), stat.S_IMODE(st.st_mode))
            else:
                continue
            if with_mtime:
                val = (*val, st.st_mtime_ns)
            out[rel] = val
    return out


def dir_fingerprint(path) -> dict:
    """Content + mtime + mode of every file, link and directory under `path` (for `.git` identity)."""
    path = os.fsencode(path)
    out = {}
    for dirpath, dirs, files in os.walk(path):
        for name in dirs + files:
            full = os.path.join(dirpath, name)
            st = os.lstat(full)
            rel = os.path.relpath(full, path)
            if stat.S_ISREG(st.st_mode):
                with open(full, "rb") as f:
                    data = f.read()
            elif stat.S_ISLNK(st.st_mode):
                data = os.readlink(full)
            else:
                data = None
            out[rel] = (stat.S_IFMT(st.st_mode), stat.S_IMODE(st.st_mode), st.st_mtime_ns, data)
    return out


def diff_fingerprints(a: dict, b: dict) -> list[bytes]:
    return sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))


def write(root, rel, data=b"", mode: int | None = None) -> Path:
    p = Path(os.fsdecode(os.path.join(os.fsencode(root), os.fsencode(rel))))
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(data if isinstance(data, bytes) else data.encode())
    if mode is not None:
        os.chmod(p, mode)
    return p


@pytest.fixture
def ws(tmp_path) -> Path:
    """An empty workspace directory."""
    w = tmp_path / "ws"
    w.mkdir()
    return w


@pytest.fixture
def engine(ws):
    from tc_git.engine import Engine

    return Engine(ws)


@pytest.fixture(autouse=False)
def no_git_export(monkeypatch):
    """TC_GIT=off: no export of refs into the user's repository (handoff layer)."""
    monkeypatch.setenv("TC_GIT", "off")


@pytest.fixture(scope="session")
def seed_tc():
    """task-checkpoint-mcp 0.1.7's core module `tc`, installed into a private directory (never
    into the test environment: its `tc-mcp` script would replace ours)."""
    import importlib

    target = Path(os.path.expanduser("~/.cache/tc-git-test/task-checkpoint-mcp-0.1.7"))
    if not (target / "tc.py").exists():
        r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target),
                            "task-checkpoint-mcp==0.1.7"], capture_output=True, text=True)
        if r.returncode != 0:
            pytest.skip(f"task-checkpoint-mcp 0.1.7 could not be installed: {r.stderr.strip()[-300:]}")
    sys.path.insert(0, str(target))
    try:
        sys.modules.pop("tc", None)
        return importlib.import_module("tc")
    finally:
        sys.path.remove(str(target))


@pytest.fixture
def anyio_backend():
    return "asyncio"  # the MCP SDK's tests run on asyncio; no trio in this suite


@pytest.fixture
def tc_env_clean(monkeypatch):
    """The caller's TC_* and GIT_* variables removed, and TC_GIT=off."""
    for k in list(os.environ):
        if k.startswith(("TC_", "GIT_")):
            monkeypatch.delenv(k)
    monkeypatch.setenv("TC_GIT", "off")


NPM_CACHE = Path(os.path.expanduser(os.environ.get("TC_TEST_CACHE", "~/.cache/tc-git-test")))
NPM_OFFLINE = ("ENOTFOUND", "EAI_AGAIN", "ECONNREFUSED", "ETIMEDOUT", "ECONNRESET", "ENETUNREACH", "network")


def npm_cli(env_var: str, cache: str, package: str, binary: str, why: str) -> Path:
    """A client we did not write, from npm: `$env_var` if set, else installed once into
    ~/.cache/tc-git-test/<cache>/prefix. No npm, or an unreachable registry, skips with `why`
    in the reason; any other install failure fails the test."""
    import shutil
    explicit = os.environ.get(env_var)
    if explicit:
        return Path(explicit)
    prefix = NPM_CACHE / cache / "prefix"
    path = prefix / "bin" / binary
    if path.exists():
        return path
    npm = shutil.which("npm")
    if not npm:
        pytest.skip(f"npm is not available: cannot install {package}, {why} (or set {env_var})")
    prefix.parent.mkdir(parents=True, exist_ok=True)
    r = subprocess.run([npm, "install", "-g", "--prefix", str(prefix), "--no-audit", "--no-fund", package],
                       capture_output=True, text=True, timeout=600)
    if r.returncode != 0 or not path.exists():
        out = r.stdout[-2000:] + r.stderr[-2000:]
        if any(x in out for x in NPM_OFFLINE):
            pytest.skip(f"the npm registry is unreachable: cannot install {package}, {why}:\n{out[-600:]}")
        pytest.fail(f"npm install {package} failed (rc={r.returncode}):\n{out}")
    return path
