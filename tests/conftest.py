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
from netcache import PIP_NET, cache_root, looks_offline

os.environ["XDG_DATA_HOME"] = tempfile.mkdtemp(prefix="tc-git-tests-xdg-")
# The secret engine's compiled rules (~5 s of CPU to build) are shared by every test, also those
# run in a temporary HOME: built once per machine, where the user's own cache is.
os.environ.setdefault("KF_RULE_CACHE_DIR", os.path.join(
    os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "kingfisher", "rule-cache"))

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


def knobs(**values) -> dict:
    """Test and benchmark knobs (tc_git/base/settings.py KNOBS) for a process a test starts, as
    the one test hook carries them: `clean_env(**knobs(hook_settle=0))`."""
    from tc_git.base.settings import TEST_HOOK

    return {TEST_HOOK: ",".join(f"{k}={v}" for k, v in values.items())}


@pytest.fixture
def tune(monkeypatch):
    """`tune(field=value, ...)`: settings knobs for this test, in-process and in the processes it
    starts with the inherited environment (added to those set before in the same test)."""
    from tc_git.base.settings import TEST_HOOK

    def set_knobs(**values) -> None:
        have = dict(i.split("=", 1) for i in os.environ.get(TEST_HOOK, "").split(",") if "=" in i)
        have.update({k: str(v) for k, v in values.items()})
        monkeypatch.setenv(TEST_HOOK, ",".join(f"{k}={v}" for k, v in have.items()))

    return set_knobs


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



def sse(wfile, events: list[dict]) -> None:
    """Write `events` as server-sent events, the way the model APIs stream."""
    import json

    for ev in events:
        wfile.write(f"event: {ev['type']}\ndata: {json.dumps(ev)}\n\n".encode())


def _fake_messages_base():
    import http.server
    import json

    class FakeMessages(http.server.BaseHTTPRequestHandler):
        """A local Anthropic Messages endpoint for the real Claude Code CLI. Every request is kept
        (`path`, `key`, `body`); POST /v1/messages is answered with `answer(body)`: a message id and
        content blocks (text or tool_use), streamed when Claude Code asks for a stream. Token counts
        and anything else: 200 JSON. A subclass sets its own `requests` list and `answer`."""

        requests: list[dict] = []

        def answer(self, body: dict) -> tuple[str, list[dict]]:
            return "msg_fake", [{"type": "text", "text": "resumed fine"}]

        @classmethod
        def message_bodies(cls) -> list[dict]:
            return [r["body"] for r in cls.requests
                    if r["path"].startswith("/v1/messages") and "count_tokens" not in r["path"]]

        def do_HEAD(self):  # noqa: N802 - Claude Code's reachability check
            self.send_response(200)
            self.end_headers()

        def do_GET(self):  # noqa: N802
            self._json({})

        def do_POST(self):  # noqa: N802
            body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)) or b"{}")
            type(self).requests.append({"path": self.path, "key": self.headers.get("x-api-key"), "body": body})
            if not self.path.startswith("/v1/messages") or "count_tokens" in self.path:
                return self._json({"input_tokens": 1})
            mid, content = self.answer(body)
            stop = "tool_use" if any(b["type"] == "tool_use" for b in content) else "end_turn"
            msg = {"id": mid, "type": "message", "role": "assistant", "model": body.get("model", "claude"),
                   "content": [], "stop_reason": None, "stop_sequence": None,
                   "usage": {"input_tokens": 1, "output_tokens": 1}}
            if not body.get("stream"):
                return self._json(dict(msg, content=content, stop_reason=stop))
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.end_headers()
            evs: list[dict] = [{"type": "message_start", "message": msg}]
            for i, b in enumerate(content):
                if b["type"] == "text":
                    evs += [{"type": "content_block_start", "index": i, "content_block": {"type": "text", "text": ""}},
                            {"type": "content_block_delta", "index": i,
                             "delta": {"type": "text_delta", "text": b["text"]}}]
                else:
                    evs += [{"type": "content_block_start", "index": i,
                             "content_block": {"type": "tool_use", "id": b["id"], "name": b["name"], "input": {}}},
                            {"type": "content_block_delta", "index": i,
                             "delta": {"type": "input_json_delta", "partial_json": json.dumps(b["input"])}}]
                evs.append({"type": "content_block_stop", "index": i})
            evs += [{"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                     "usage": {"output_tokens": 2}}, {"type": "message_stop"}]
            sse(self.wfile, evs)

        def _json(self, obj):
            data = json.dumps(obj).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    return FakeMessages


FakeMessages = _fake_messages_base()


def _fake_responses_base():
    import http.server
    import json

    class FakeResponses(http.server.BaseHTTPRequestHandler):
        """A local OpenAI Responses endpoint for the real Codex CLI: POST keeps the request (`path`,
        `body`) and streams back the output items `items(body)` gives; GET (model lists): 404."""

        requests: list[dict] = []

        def items(self, body: dict) -> list[dict]:
            return [{"type": "message", "role": "assistant", "id": "msg_fake",
                     "content": [{"type": "output_text", "text": "resumed fine"}]}]

        @classmethod
        def bodies(cls) -> list[dict]:
            return [r["body"] for r in cls.requests]

        def do_POST(self):  # noqa: N802 - http.server's name
            body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)) or b"{}")
            type(self).requests.append({"path": self.path, "body": body})
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.end_headers()
            usage = {"input_tokens": 1, "input_tokens_details": None, "output_tokens": 1,
                     "output_tokens_details": None, "total_tokens": 2}
            sse(self.wfile, [{"type": "response.created", "response": {"id": "resp_1"}},
                             *({"type": "response.output_item.done", "item": it} for it in self.items(body)),
                             {"type": "response.completed", "response": {"id": "resp_1", "usage": usage}}])

        def do_GET(self):  # noqa: N802 - model lists etc.: not offered
            self.send_response(404)
            self.end_headers()

        def log_message(self, *args):
            pass

    return FakeResponses


FakeResponses = _fake_responses_base()


def first_parent_chain(repo, tip) -> list[str]:
    """Commit ids from the root to `tip` along first parents (a trajectory branch, oldest first)."""
    out, c = [], repo[tip]
    while True:
        out.append(str(c.id))
        if not c.parent_ids:
            return out[::-1]
        c = repo[c.parent_ids[0]]

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


def saved_task(ws: Path, files: dict[str, bytes], name: str = "t", title: str = "one"):
    """`files` ({path: bytes}) written into `ws`, a task `name` and its first save `title`: the engine."""
    from tc_git.engine import Engine

    for rel, data in files.items():
        write(ws, rel, data)
    e = Engine(ws)
    e.init(name)
    e.save(title)
    return e


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

    target = NPM_CACHE / "task-checkpoint-mcp-0.1.7"
    if not (target / "tc.py").exists():
        r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", *PIP_NET, "--target",
                            str(target), "task-checkpoint-mcp==0.1.7"], capture_output=True, text=True, timeout=600)
        if r.returncode != 0:
            why = "the package index is unreachable" if looks_offline(r.stderr) else "it failed"
            pytest.skip(f"task-checkpoint-mcp 0.1.7 could not be installed ({why}): {r.stderr.strip()[-300:]}")
    sys.path.insert(0, str(target))
    try:
        sys.modules.pop("tc", None)
        return importlib.import_module("tc")
    finally:
        sys.path.remove(str(target))


@pytest.fixture(scope="session", autouse=True)
def secret_rules_built():
    """The rules compiled before any test (once per machine): a PostToolUse hook that finds them
    missing hands its capture to a background worker (tests/test_rule_cache.py), which the hook
    tests would then have to wait for."""
    from tc_git.workspace import secrets

    secrets.build_rule_cache()


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


NPM_CACHE = cache_root("tc-git-test")  # (TC_TEST_CACHE: tests/netcache.py)


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
    try:
        r = subprocess.run([npm, "install", "-g", "--prefix", str(prefix), "--no-audit", "--no-fund", package],
                           capture_output=True, text=True, timeout=600)
    except subprocess.TimeoutExpired:  # (a network that drops packets: npm retries for minutes)
        pytest.skip(f"npm install {package} got no answer in 600 s (network?): cannot install {package}, {why}")
    if r.returncode != 0 or not path.exists():
        out = r.stdout[-2000:] + r.stderr[-2000:]
        if looks_offline(out):
            pytest.skip(f"the npm registry is unreachable: cannot install {package}, {why}:\n{out[-600:]}")
        pytest.fail(f"npm install {package} failed (rc={r.returncode}):\n{out}")
    return path


def random_tree(repo, rng, modes, names=("a", "a-b", "a.txt", "b", "x", "é", "z"), least=0, sub_p=0.35, depth=0):
    """A random tree of 1-byte blobs with git's tricky name orderings ('a' < 'a-b' < 'a.txt', a
    directory 'a' sorting as 'a/'), at most 3 levels deep; empty subtrees are left out."""
    from pygit2.enums import FileMode

    tb = repo.TreeBuilder()
    for name in rng.sample(list(names), rng.randint(least, 5)):
        if rng.random() < sub_p and depth < 3:
            sub = random_tree(repo, rng, modes, names, least, sub_p, depth + 1)
            if len(repo[sub]):
                tb.insert(name, sub, FileMode.TREE)
        else:
            tb.insert(name, repo.create_blob(rng.choice([b"1", b"2", b"3"])), rng.choice(modes))
    return tb.write()

