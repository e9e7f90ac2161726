"""Issue 9 items 6 and 7: hostile or odd input through the engine, the CLI and the real MCP
server over stdio. Each case: a clear error (MCP isError with its code, CLI exit 2, never a
traceback), nothing changed (store and workspace fingerprints), and the task still works
afterwards (a save succeeds, the task is still open).

A NUL cannot travel in a command-line argument (the OS cuts argv there), so the CLI cases use
other control characters; the NUL cases go through the engine and MCP."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest
from conftest import clean_env, diff_fingerprints, dir_fingerprint, fsck, tc, write
from mcp import Client, StdioServerParameters

from tc_git.base.errors import BadInput, TcError, UnsafeRoot
from tc_git.engine import Engine

pytestmark = [pytest.mark.usefixtures("fsck_after"),
              pytest.mark.filterwarnings("ignore:.*(deprecated|removed as of):Warning")]

BIG = 64 * 1024 + 1


def stdio(cmd=None, cwd=None, **env):
    base = clean_env(TC_WATCH="off", TC_GIT="off")
    base.update({k: str(v) for k, v in env.items()})
    cmd = cmd or [sys.executable, "-m", "tc_git"]
    return Client(StdioServerParameters(command=cmd[0], args=cmd[1:], env=base,
                                        cwd=str(cwd) if cwd else None), mode="legacy")


def is_err(r, code=None, text=None):
    assert r.is_error, r.content[0].text
    msg = r.content[0].text
    assert "Traceback" not in msg, msg
    if code:
        assert code in msg, msg
    if text:
        assert text in msg, msg
    return msg


def ok(r):
    assert not r.is_error, r.content[0].text
    return json.loads(r.content[0].text)


@pytest.fixture
def task(tmp_path, monkeypatch):
    monkeypatch.setenv("TC_GIT", "off")
    ws = tmp_path / "ws"
    ws.mkdir()
    write(ws, "a.txt", "a\n")
    e = Engine(ws)
    e.init("t")
    e.save("one")
    write(ws, "a.txt", "unsaved\n")
    return e


def state(e: Engine):
    return dir_fingerprint(e.store.path), dir_fingerprint(e.root)


# (save arguments, words the message must hold)
BAD_SAVES = [
    ({"title": "a\x00b"}, "control character (NUL)"),
    ({"title": "a\x1b[31mred"}, "control character (ESC)"),
    ({"title": "two\nlines"}, "control character (newline)"),
    ({"title": "x" * 501}, "limit is 500"),
    ({"title": "s", "conclusion": "c" * BIG}, "limit is 65536 bytes"),
    ({"title": "s", "description": "bell\x07"}, "control character"),
    ({"title": "s", "next": "nul\x00"}, "control character (NUL)"),
    ({"title": "s", "verified": ["ok"] * 101}, "limit is 100"),
    ({"title": "s", "verified": ["a\x00"]}, "control character (NUL)"),
    ({"title": "s", "open_questions": ["q" * 5000]}, "limit is 4096"),
    ({"title": "s", "next": "\ud800"}, "not valid Unicode"),
    ({"title": "s", "close": "yes"}, "close must be true or false"),
    ({"title": "s", "close": 1}, "close must be true or false"),
    ({"title": "s", "task_id": "t1\n"}, "invalid task id"),
]


@pytest.mark.parametrize("kwargs,words", BAD_SAVES, ids=[str(i) for i in range(len(BAD_SAVES))])
def test_bad_saves_engine(task, kwargs, words):
    before = state(task)
    with pytest.raises(BadInput) as ei:
        task.save(**kwargs)
    assert words in ei.value.message
    assert state(task) == before
    r = task.save("two", conclusion="multi\nline\tok")  # newline and tab are fine in long text
    assert r["index"] == 2 and r["status"] == "open"
    assert task.show()["steps"][-1]["conclusion"] == "multi\nline\tok"


def test_bad_init_and_trajectory_text(task):
    before = state(task)
    for call, words in ((lambda: task.init("n\x00"), "NUL"), (lambda: task.init("n" * 501), "limit is 500"),
                        (lambda: task.init("n", goal="g" * BIG), "limit is 65536"),
                        (lambda: task.init("n", exclude=["x"] * 101), "limit is 100"),
                        (lambda: task.milestone("m\x00", "x"), "NUL"),
                        (lambda: task.milestone("m", "x", message="m" * BIG), "limit"),
                        (lambda: task.milestone("m", "x", force="yes"), "force must be"),
                        (lambda: task.restore(1, apply="yes"), "apply must be"),
                        (lambda: task.show(include_drift="true"), "include_drift must be"),
                        (lambda: task.show(limit=True), "limit must be"),
                        (lambda: task.export("/tmp/x\x00y"), "NUL"),
                        (lambda: task.import_("/tmp/x\x00y"), "NUL"),
                        (lambda: task.import_("/tmp/x", apply="yes"), "apply must be")):
        with pytest.raises(BadInput) as ei:
            call()
        assert words in ei.value.message, ei.value.message
    assert state(task) == before
    assert task.resume()["status"] == "open"


def test_bad_saves_cli(task):
    ws = task.root
    before = state(task)
    for args, words in ((["save", "a\x01b"], b"control character (U+0001)"),
                        (["save", "a\x1bb"], b"control character (ESC)"),
                        (["save", "x" * 501], b"limit is 500"),
                        (["save", "s", "-c", "c" * BIG], b"limit is 65536 bytes"),
                        (["save", "s", *sum((["--verified", "v"] for _ in range(101)), [])], b"limit is 100"),
                        (["save", "s", "--verified", "a\x7fb"], b"control character"),
                        (["init", "n", "--goal", "\x02"], b"control character")):
        r = tc("-C", ws, *args)
        assert r.returncode == 2 and words in r.stderr and b"Traceback" not in r.stderr, (args[:2], r.stderr)
        r = tc("--json", "-C", ws, *args)
        assert r.returncode == 2 and json.loads(r.stdout)["code"] == "bad_input"
    assert state(task) == before
    r = tc("--json", "-C", ws, "save", "two")
    assert r.returncode == 0 and json.loads(r.stdout)["index"] == 2


# ------------------------------------------------------------------------------------- roots
def unsafe_roots(tmp_path: Path, home: Path) -> dict:
    repo = tmp_path / "repo"
    (repo / ".git" / "hooks").mkdir(parents=True, exist_ok=True)
    subprocess.run(["git", "init", "-q", str(repo)], check=True, env=clean_env())
    bare = tmp_path / "bare.git"
    subprocess.run(["git", "init", "-q", "--bare", str(bare)], check=True, env=clean_env())
    return {
        "slash": ("/", "filesystem root"),
        "home": (str(home), "home directory"),
        "home parent": (str(home.parent), "contains the home directory"),
        "dev": ("/dev", "system directory"),
        "proc/self": ("/proc/self", "system directory"),
        "sys": ("/sys/kernel", "system directory"),
        "run": ("/run", "system directory"),
        ".git": (str(repo / ".git"), "inside a git directory"),
        "in .git": (str(repo / ".git" / "hooks"), "inside a git directory"),
        "bare": (str(bare / "refs"), "inside a git directory"),
    }


@pytest.fixture
def fake_home(tmp_path, monkeypatch):
    home = tmp_path / "users" / "me"
    home.mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    return home


SYSTEM_STORES = [Path(p) / ".checkpoints" for p in ("/", "/dev", "/proc/self", "/sys/kernel", "/run")]


def test_unsafe_roots_engine_and_cli(tmp_path, fake_home):
    cases = unsafe_roots(tmp_path, fake_home)
    assert not any(p.exists() for p in SYSTEM_STORES)
    before = dir_fingerprint(tmp_path)
    env = clean_env(HOME=str(fake_home), TC_GIT="off")
    for name, (root, words) in cases.items():
        with pytest.raises(UnsafeRoot) as ei:
            Engine(root).init("t")
        assert words in ei.value.message, (name, ei.value.message)
        assert ei.value.code == "unsafe_root" and isinstance(ei.value, BadInput)
        for args in (["init", "t"], ["save", "s"]):
            r = tc("--json", "-C", root, *args, env=env)
            body = json.loads(r.stdout)
            assert r.returncode == 2 and body["code"] == "unsafe_root" and words in body["error"], (name, body)
    with pytest.raises(BadInput) as ei:
        Engine(str(tmp_path) + "/a\x00b")
    assert "NUL" in ei.value.message and ei.value.code == "bad_input"
    assert dir_fingerprint(tmp_path) == before
    assert not any(p.exists() for p in SYSTEM_STORES)


async def handoff_settled(store: Path, timeout: float = 30.0) -> None:
    """The server writes a save's handoff cache after its answer (HandoffLater); on a loaded
    machine that can be seconds later. Wait until it exists and has stopped changing."""
    last, deadline = None, time.monotonic() + timeout
    while time.monotonic() < deadline:
        now = dir_fingerprint(store / "tc" / "handoff") if (store / "tc" / "handoff").is_dir() else None
        if now and now == last:
            return
        last = now
        await anyio.sleep(0.5)
    raise AssertionError(f"no handoff cache under {store} after {timeout} s")


@pytest.mark.anyio
async def test_bad_input_over_mcp(tmp_path, fake_home):
    """Every item through the real stdio server: isError with the code, nothing changed, and
    the same task goes on working in the same server session."""
    ws = tmp_path / "ws"
    ws.mkdir()
    write(ws, "a.txt", "a\n")
    cases = unsafe_roots(tmp_path, fake_home)
    async with stdio(HOME=fake_home) as c:
        root = str(ws)
        ok(await c.call_tool("tc_init", {"root": root, "name": "t"}))
        assert ok(await c.call_tool("tc_save", {"root": root, "title": "one"}))["index"] == 1
        write(ws, "a.txt", "unsaved\n")
        store = ws / ".checkpoints"
        await handoff_settled(store)
        before = dir_fingerprint(store), dir_fingerprint(ws)
        for kwargs, words in BAD_SAVES:
            if "\ud800" in kwargs.get("next", ""):
                continue  # the client cannot encode a lone surrogate; the engine test covers it
            # strict argument types are the MCP layer's (pydantic strict mode), the rest the engine's
            words = "close" if "close" in kwargs else words.split(" (")[0]
            is_err(await c.call_tool("tc_save", {"root": root, **kwargs}), "bad_input", words)
        for tool, args, words in (
                ("tc_restore", {"index": "1"}, "index: Input should be a valid integer"),
                ("tc_restore", {"index": 1, "apply": "yes"}, "apply: Input should be a valid boolean"),
                ("tc_restore", {"index": True}, "index: Input should be a valid integer"),
                ("tc_show", {"include_drift": 1}, "include_drift: Input should be a valid boolean"),
                ("tc_show", {"limit": 2.5}, "limit: Input should be a valid integer"),
                ("tc_init", {"name": "n", "goal": "g" * BIG}, "limit is 65536"),
                ("tc_init", {"name": "n\x00"}, "NUL"),
                ("tc_export", {"to": "/tmp/a\x00b"}, "NUL"),
                ("tc_import", {"package": str(ws), "merge": "no"}, "merge: Input should be a valid boolean"),
                ("tc_milestone", {"name": "m\x1b", "at": "x"}, "ESC")):
            is_err(await c.call_tool(tool, {"root": root, **args}), "bad_input", words)
        for name, (bad_root, words) in cases.items():
            for tool, args in (("tc_init", {"name": "t"}), ("tc_save", {"title": "s"})):
                is_err(await c.call_tool(tool, {"root": bad_root, **args}), "unsafe_root", words)
        is_err(await c.call_tool("tc_init", {"root": root + "\x00x", "name": "t"}), "bad_input", "NUL")
        after = dir_fingerprint(store), dir_fingerprint(ws)
        changed = diff_fingerprints(before[0], after[0]) + diff_fingerprints(before[1], after[1])
        # the log of each refusal
        assert set(changed) <= {b"tc", b"tc/server.log", b".checkpoints/tc/server.log"}, changed
        # the task goes on
        r = ok(await c.call_tool("tc_save", {"root": root, "title": "two", "close": False}))
        assert r["index"] == 2 and r["status"] == "open"
        shown = ok(await c.call_tool("tc_show", {"root": root}))
        assert [s["title"] for s in shown["steps"]] == ["one", "two"]
    assert not any(p.exists() for p in SYSTEM_STORES)


# ------------------------------------------------------------------------------ machine faults
def test_deep_nesting_cli_and_engine(task):
    """100 directory levels (libgit2's index refused them: a raw GitError before the snapshot
    layer walked them itself): saved, restored and round-tripped, through engine and CLI."""
    ws = task.root
    deep = ws / Path(*[f"d{i:02d}" for i in range(100)])
    deep.mkdir(parents=True)
    (deep / "f.txt").write_text("deep\n")
    assert task.save("deep")["index"] == 2
    shutil.rmtree(ws / "d00")
    r = tc("--json", "-C", ws, "restore", "2", "--apply")
    assert r.returncode == 0 and b"Traceback" not in r.stderr, r.stderr
    assert (deep / "f.txt").read_text() == "deep\n"
    r = tc("--json", "-C", ws, "save", "deep again", "-c", "x")
    assert r.returncode == 0 and json.loads(r.stdout)["index"] == 3


def test_too_deep_error_names_the_directory(tmp_path):
    """Where the machine still refuses depth (libgit2's nesting limit, ENAMETOOLONG, ELOOP), the
    error names the directory and says what to do."""
    from tc_git.base import validate

    class Eng:  # what validate.guard reads: the engine's root
        root = tmp_path

    (tmp_path / Path(*[f"d{i:02d}" for i in range(100)])).mkdir(parents=True)

    @validate.guard
    def op(self):
        raise OSError(36, "File name too long", str(tmp_path / "x"))

    with pytest.raises(TcError) as ei:
        op(Eng())
    assert ei.value.code == "too_deep" and "d00/d01/d02" in ei.value.message and ".gitignore" in ei.value.message


def _userns(args: list[str]) -> list[str] | None:
    if not shutil.which("unshare"):
        return None
    probe = subprocess.run(["unshare", *args, "true"], capture_output=True)
    return ["unshare", *args] if probe.returncode == 0 else None


TC_SH = f'tc() {{ "{sys.executable}" -c "import sys; from tc_git.cli import main; sys.exit(main(sys.argv[1:]))" "$@"; }}'


def _ns_script(tmp_path, prefix: list[str], script: str) -> str:
    r = subprocess.run([*prefix, "sh", "-c", TC_SH + "\n" + script], capture_output=True, cwd=tmp_path,
                       env=clean_env(TC_GIT="off", TC_WATCH="off"), timeout=300)
    out = (r.stdout + r.stderr).decode(errors="replace")
    assert r.returncode == 0, out
    assert "Traceback" not in out, out
    return out


def test_disk_full_cli(tmp_path):
    """The store on a 1 MiB tmpfs (a private mount namespace): a save that cannot fit is an
    error that says the disk is full; after freeing space the task saves again, fsck clean."""
    ns = _userns(["-rm"])
    if ns is None:
        pytest.skip("no user+mount namespaces here (unshare -rm refused): cannot mount a small tmpfs")
    (tmp_path / "ws").mkdir()
    (tmp_path / "small").mkdir()
    (tmp_path / "big.bin").write_bytes(os.urandom(3 << 20))
    (tmp_path / "ws" / ".task-checkpoint-store.json").write_text('{"store": "../small/store"}')
    out = _ns_script(tmp_path, ns, """
        set -u
        mount -t tmpfs -o size=1m tmpfs small
        tc -C ws init t >/dev/null || exit 9
        mv big.bin ws/  # after init (its baseline would not fit either)
        tc --json -C ws save s1 > fail.json; echo "save1=$?"
        echo "packdir: $(ls -A small/store/objects/pack | tr '\n' ' ')"
        rm ws/big.bin
        tc --json -C ws save s2 > ok.json; echo "save2=$?"
        git --git-dir=small/store fsck --full --no-progress && echo fsck-ok
        cp fail.json ok.json .. 2>/dev/null; cat fail.json ok.json
    """)
    assert "save1=2" in out and "save2=0" in out and "fsck-ok" in out, out
    assert '"code": "no_space"' in out and "disk is full" in out, out
    packdir = next(ln for ln in out.splitlines() if ln.startswith("packdir:"))
    assert "tmp" not in packdir and "pack_git2" not in packdir, packdir  # no half-written pack left behind
    assert '"index": 1' in out  # the failed save recorded nothing: the next is step 1


def _one_save_then_a_change(tmp_path):
    """A task with step 1 saved and a.txt changed since: the next save has work to write."""
    ws = tmp_path / "ws"
    ws.mkdir()
    write(ws, "a.txt", "a\n")
    env = clean_env(TC_GIT="off")
    assert tc("-C", ws, "init", "t", env=env).returncode == 0
    assert tc("-C", ws, "save", "one", env=env).returncode == 0
    write(ws, "a.txt", "changed\n")
    store = ws / ".checkpoints"
    before = dir_fingerprint(store)
    return ws, store, env, before


def test_read_only_store_and_permission_denied_cli(tmp_path):
    ws, store, env, before = _one_save_then_a_change(tmp_path)
    ran = []
    ns = _userns(["-rm"])
    if ns is not None:  # EROFS: the store bind-mounted read-only
        out = _ns_script(tmp_path, ns, f"""
            mount --bind {store} {store} && mount -o remount,bind,ro {store} || exit 9
            tc --json -C ws save two; echo "rc=$?"
        """)
        assert "rc=2" in out and '"code": "read_only"' in out and "read-only" in out, out
        ran.append("erofs")
    user = _userns(["--user", "--map-user=1000", "--map-group=1000"])
    if os.geteuid() != 0:
        user = []
    if user is not None:  # EACCES: the objects directory not writable for the (unprivileged) caller
        os.chmod(store / "objects", 0o500)
        try:
            out = _ns_script(tmp_path, user, "tc --json -C ws save two; echo \"rc=$?\"")
        finally:
            os.chmod(store / "objects", 0o700)
        assert "rc=2" in out and '"code": "permission"' in out and "permission" in out.lower(), out
        ran.append("eacces")
    if not ran:
        pytest.skip("neither a mount namespace nor an unprivileged user is available here")
    assert dir_fingerprint(store) == before
    r = tc("--json", "-C", ws, "save", "two", env=env)
    assert r.returncode == 0 and json.loads(r.stdout)["index"] == 2
    fsck(store)


@pytest.mark.anyio
async def test_disk_full_over_mcp(tmp_path):
    """The real server runs in the namespace with its store on a 1 MiB tmpfs."""
    ns = _userns(["-rm"])
    if ns is None:
        pytest.skip("no user+mount namespaces here (unshare -rm refused)")
    ws, small = tmp_path / "ws", tmp_path / "small"
    ws.mkdir()
    small.mkdir()
    (ws / ".task-checkpoint-store.json").write_text('{"store": "../small/store"}')
    cmd = [*ns, "sh", "-c", 'mount -t tmpfs -o size=1m tmpfs "$0" && exec "$@"', str(small),
           sys.executable, "-m", "tc_git"]
    async with stdio(cmd) as c:
        root = str(ws)
        ok(await c.call_tool("tc_init", {"root": root, "name": "t"}))
        (ws / "big.bin").write_bytes(os.urandom(3 << 20))
        is_err(await c.call_tool("tc_save", {"root": root, "title": "too big"}), "no_space", "disk is full")
        (ws / "big.bin").unlink()
        r = ok(await c.call_tool("tc_save", {"root": root, "title": "fits"}))
        assert r["index"] == 1
        deep = ws / Path(*[f"d{i:02d}" for i in range(100)])
        deep.mkdir(parents=True)
        (deep / "f.txt").write_text("deep\n")
        assert ok(await c.call_tool("tc_save", {"root": root, "title": "deep"}))["index"] == 2


@pytest.mark.anyio
async def test_read_only_and_permission_denied_over_mcp(tmp_path):
    """The real server started in a namespace where the store is read-only (EROFS), then as an
    unprivileged user who cannot write the objects directory (EACCES): each save is an isError
    with the code and what to do; afterwards the same task saves normally."""
    ws, store, env, before = _one_save_then_a_change(tmp_path)
    server = [sys.executable, "-m", "tc_git"]
    ran = []
    ns = _userns(["-rm"])
    if ns is not None:
        cmd = [*ns, "sh", "-c", 'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" && exec "$@"',
               str(store), *server]
        async with stdio(cmd) as c:
            is_err(await c.call_tool("tc_save", {"root": str(ws), "title": "two"}), "read_only", "read-only")
        ran.append("erofs")
    user = _userns(["--user", "--map-user=1000", "--map-group=1000"]) if os.geteuid() == 0 else []
    if user is not None:
        os.chmod(store / "objects", 0o500)
        try:
            async with stdio([*user, *server]) as c:
                is_err(await c.call_tool("tc_save", {"root": str(ws), "title": "two"}), "permission",
                       "permission denied")
        finally:
            os.chmod(store / "objects", 0o700)
        ran.append("eacces")
    if not ran:
        pytest.skip("neither a mount namespace nor an unprivileged user is available here")
    after = dir_fingerprint(store)
    assert set(diff_fingerprints(before, after)) <= {b"tc", b"tc/server.log"}, diff_fingerprints(before, after)
    async with stdio() as c:
        r = ok(await c.call_tool("tc_save", {"root": str(ws), "title": "two"}))
        assert r["index"] == 2 and r["status"] == "open"
