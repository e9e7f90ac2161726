"""Issue 16: nothing in tc_git needs a POSIX-only module at import time (Windows has no
`fcntl`, `termios` or `pty`). A subprocess hides them with a meta-path blocker and imports
every module of the package."""
from __future__ import annotations

import json
import subprocess
import sys

from conftest import clean_env

BLOCKER = r"""
import importlib.abc, json, os, pkgutil, sys, traceback
BLOCKED = {"fcntl", "termios", "pty"}
TC = os.path.dirname(__import__("importlib.util").util.find_spec("tc_git").origin)
third_party = {}

def importer():
    f = sys._getframe(2)
    while f and f.f_code.co_filename.startswith("<frozen importlib"):
        f = f.f_back
    return f

class Blocker(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] not in BLOCKED:
            return None
        f = importer()
        where = f.f_code.co_filename if f else "?"
        if not where.startswith(TC):
            # a library's own platform switch (the MCP SDK imports fcntl only when
            # sys.platform != "win32"): allowed, and reported
            third_party.setdefault(name, sorted(set(third_party.get(name, [])) | {f.f_globals.get("__name__")}))
            return None
        raise ModuleNotFoundError(f"No module named {name!r} (blocked: not on Windows)", name=name)

for m in BLOCKED:
    sys.modules.pop(m, None)
sys.meta_path.insert(0, Blocker())


def import_all(failed, ok):
    import tc_git
    ok.append("tc_git")
    for info in pkgutil.walk_packages(tc_git.__path__, "tc_git."):
        if info.name.endswith("__main__"):
            continue  # runs the server
        try:
            __import__(info.name)
            ok.append(info.name)
        except BaseException as e:
            failed[info.name] = "".join(traceback.format_exception_only(type(e), e)).strip()


# Pass 1: fcntl, termios and pty blocked for tc_git. This also loads every library tc_git uses,
# each taking its own platform branch (as it would on Windows, where its Windows branch runs).
failed, ok = {}, []
import_all(failed, ok)
# Pass 2: tc_git imported afresh with what Windows' os and signal modules lack (CPython
# 3.11-3.12) removed: a module of ours that touches one at import time fails there too.
import signal
POSIX_ONLY = {os: ("O_DIRECTORY", "O_NOFOLLOW", "O_NONBLOCK", "O_CLOEXEC", "fchmod", "fchown", "lchown", "getuid",
                   "geteuid", "getgid", "getegid", "posix_spawn", "posix_spawnp", "killpg", "setsid", "getpgrp",
                   "getpgid", "setpgid", "tcgetpgrp", "WNOHANG", "fork", "sync", "statvfs", "mkfifo", "getloadavg",
                   "uname", "sched_getaffinity", "fwalk", "pipe2", "openpty", "login_tty", "wait3", "wait4"),
              signal: ("pthread_sigmask", "sigtimedwait", "sigwaitinfo", "SIGHUP", "SIGQUIT", "SIGCHLD", "SIGKILL",
                       "SIGUSR1", "SIGUSR2", "SIGALRM", "SIGPIPE", "setitimer", "alarm", "pause", "siginterrupt")}
removed = []
for mod, names in POSIX_ONLY.items():
    for n in names:
        if hasattr(mod, n):
            delattr(mod, n)
            removed.append(n)
for m in [m for m in sys.modules if m == "tc_git" or m.startswith("tc_git.") or m.split(".")[0] in BLOCKED]:
    del sys.modules[m]
ok2 = []
import_all(failed, ok2)
ok = sorted(set(ok) & set(ok2))
# control: the blocker does bite code of the package (an import from a file under tc_git/)
try:
    exec(compile("import termios", os.path.join(TC, "probe.py"), "exec"), {"__name__": "tc_git.probe"})
    control = "imported"
except ModuleNotFoundError:
    control = "blocked"
print(json.dumps({"ok": ok, "failed": failed, "third_party": third_party, "control": control, "removed": removed}))
"""


def test_every_module_imports_without_posix_only_modules():
    """fcntl, termios and pty blocked for tc_git's own imports, and the POSIX-only attributes
    of `os` and `signal` removed, then every module of the package imported."""
    r = subprocess.run([sys.executable, "-c", BLOCKER], capture_output=True, env=clean_env(), timeout=120)
    assert r.returncode == 0, r.stderr.decode(errors="replace")
    out = json.loads(r.stdout.decode().strip().splitlines()[-1])
    assert out["failed"] == {}, out["failed"]
    assert out["control"] == "blocked"
    # the walk really covered the package, the engine, the store and both front ends included
    for m in ("tc_git.storage.store", "tc_git.storage.lockfile", "tc_git.engine", "tc_git.cli", "tc_git.mcp.server",
              "tc_git.hooks", "tc_git.workspace.wsfs", "tc_git.storage._native"):
        assert m in out["ok"], (m, out["ok"])
    assert "O_DIRECTORY" in out["removed"] and "fchmod" in out["removed"]
    # every module file of the package was imported (nothing skipped by the walk)
    from pathlib import Path

    pkg = Path(__file__).resolve().parents[1] / "tc_git"
    files = {".".join(("tc_git",) + p.relative_to(pkg).with_suffix("").parts).removesuffix(".__init__")
             for p in pkg.rglob("*.py")}
    files = {f for f in files if not f.endswith("__main__")}
    assert files <= set(out["ok"]), sorted(files - set(out["ok"]))


def test_lock_waits_then_store_busy_and_releases(tmp_path):
    """The lock interface: a second holder waits, then gets Busy; a dead holder frees it."""
    from tc_git.storage import lockfile

    path = tmp_path / "lock"
    holder = subprocess.Popen([sys.executable, "-c",
                               "import sys, time; from tc_git.storage import lockfile; "
                               f"fd = lockfile.acquire({str(path)!r}, 5); print('held', flush=True); "
                               "time.sleep(30)"], stdout=subprocess.PIPE, env=clean_env())
    try:
        assert holder.stdout.readline().strip() == b"held"
        import time

        t0 = time.monotonic()
        try:
            lockfile.acquire(path, 0.3)
            raise AssertionError("the lock was taken twice")
        except lockfile.Busy:
            pass
        assert time.monotonic() - t0 >= 0.25  # it waited before giving up
    finally:
        holder.kill()
        holder.wait()
    fd = lockfile.acquire(path, 5)  # the kernel dropped the dead holder's lock
    lockfile.release(fd)
