"""Durability of a restore with TC_RESTORE_FSYNC=all, seen in the system calls (a power loss
cannot be simulated here): every loose object libgit2 writes (the restore point's and the
after-restore's commits, trees and notes) is fsync'd before it is linked into place and its
fan-out directory after; every ref update's lock file is fsync'd before the rename and its
directory after; and the restore point is synced before the first workspace file is. Without
the setting none of libgit2's writes is synced (git's own default; the cost stays as it was),
and a process that switches to `all` with a store handle kept from before syncs refs too
(libgit2 reads that setting once per ref database). strace judges; stock git fsck the store.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import clean_env, fsck

pytestmark = pytest.mark.skipif(shutil.which("strace") is None, reason="no strace here")

CHILD = r"""
import json, os, shutil, sys
sys.path.insert(0, sys.argv[2])
from conftest import write
from tc_git.engine import Engine

ws, mark = sys.argv[1], sys.argv[3]
for i in range(20):
    write(ws, f"src/f{i}.py", f"v = {i}\n".encode())
write(ws, "docs/guide/readme.md", b"read me\n")
Engine(ws).init("durable")
Engine(ws).save("one")
for i in range(5):
    write(ws, f"src/f{i}.py", f"edited {i}\n".encode())
Engine(ws).save("two")
out = {}
for phase in sys.argv[4:]:
    if phase == "all":
        os.environ["TC_RESTORE_FSYNC"] = "all"
    for i in range(5):
        write(ws, f"src/f{i}.py", f"{phase} {i}\n".encode())
    shutil.rmtree(os.path.join(ws, "docs"))  # the restore makes docs/guide/ again
    os.access(f"{mark}-{phase}-begin", 0)
    r = Engine(ws).restore(index=1, apply=True)
    os.access(f"{mark}-{phase}-end", 0)
    out[phase] = {"applied": r["applied"], "commit": r["commit"]}
print(json.dumps(out))
"""

CALLS = "fsync,fdatasync,rename,renameat,renameat2,link,linkat,mkdir,mkdirat,access,faccessat,faccessat2"


def _traced(tmp_path: Path, phases: list[str], env_all: bool) -> tuple[dict, dict[str, list[str]]]:
    """Run the child under strace; its JSON and, per phase, the traced calls of the restore."""
    ws, log, mark = tmp_path / "ws", tmp_path / "strace.txt", str(tmp_path / "mark")
    env = clean_env(TC_GIT="off", **({"TC_RESTORE_FSYNC": "all"} if env_all else {}))
    r = subprocess.run(["strace", "-f", "-qq", "-y", "-e", f"trace={CALLS}", "-o", str(log), sys.executable, "-c",
                        CHILD, str(ws), str(Path(__file__).parent), mark, *phases],
                       capture_output=True, timeout=180, env=env)
    if r.returncode != 0 and b"ptrace" in r.stderr:
        pytest.skip("strace cannot trace here: " + r.stderr.decode(errors="replace")[:200])
    assert r.returncode == 0, r.stderr.decode(errors="replace")[-3000:]
    lines = [re.sub(r"^\d+\s+", "", ln) for ln in log.read_text(errors="replace").splitlines()]
    windows = {}
    for phase in phases:
        begin = next(i for i, ln in enumerate(lines) if f"{mark}-{phase}-begin" in ln)
        end = next(i for i, ln in enumerate(lines) if f"{mark}-{phase}-end" in ln)
        windows[phase] = [ln for ln in lines[begin + 1:end] if "access" not in ln.split("(")[0]]
    fsck(ws / ".checkpoints")
    return json.loads(r.stdout.decode().strip().splitlines()[-1]), windows


def _fsynced(calls: list[str]) -> list[str]:
    return [m.group(1) for ln in calls if (m := re.match(r"f(?:data)?sync\(\d+<(.*)>\)\s+=\s+0", ln))]


def _store_writes(calls: list[str], store: str) -> tuple[list[tuple[int, str, str]], list[tuple[int, str, str]]]:
    """(index, temporary, final) of the loose objects linked into place and of the refs renamed."""
    objects, refs = [], []
    for i, ln in enumerate(calls):
        m = re.match(r'link\("([^"]+)", "([^"]+)"\)\s+=\s+0', ln)
        if m and m.group(2).startswith(store + "/objects/"):
            objects.append((i, m.group(1), m.group(2)))
        m = re.match(r'rename\("([^"]+)", "([^"]+)"\)\s+=\s+0', ln)
        if m and m.group(2).startswith(store + "/refs/"):
            refs.append((i, m.group(1), m.group(2)))
    return objects, refs


def _check_synced(calls: list[str], ws: Path) -> None:
    store = str(ws / ".checkpoints")
    objects, refs = _store_writes(calls, store)
    assert len(objects) >= 4 and len(refs) >= 4, calls  # two commits with their notes, two refs each
    for i, tmp, final in objects + refs:
        before, after = _fsynced(calls[:i]), _fsynced(calls[i + 1:])
        assert tmp in before, f"{final} put in place unsynced"
        assert str(Path(final).parent) in after, f"the directory of {final} not synced"
    # the restore point (its objects and refs) is on disk before any workspace file is replaced
    first_file = next(i for i, ln in enumerate(calls)
                      if ln.startswith("renameat2(") and f"<{ws}/src>" in ln or ln.startswith(f'rename("{ws}/src/'))
    assert any(i < first_file for i, _t, _f in objects) and sum(i < first_file for i, _t, _f in refs) >= 2, calls
    # each workspace directory the restore placed names in (the edited files' src/, the new docs/
    # and docs/guide/, the root that got docs) is synced after its last rename or mkdir
    for d in ("src", "docs/guide", "docs", ""):
        path = str(ws / d) if d else str(ws)
        last = max(i for i, ln in enumerate(calls) if _names_in(ln, path))
        assert path in _fsynced(calls[last + 1:]), f"{path} not synced after its last change"


def _names_in(line: str, path: str) -> bool:
    """Whether a traced call placed a name in directory `path` (a rename through its descriptor,
    or a mkdir of one of its entries)."""
    if line.startswith("renameat2("):
        return f"<{path}>" in line.split(",")[2]
    if line.startswith("mkdirat("):
        return f"<{path}>" in line.split(",")[0]
    m = re.match(r'(?:rename\("[^"]+", |mkdir\()"([^"]+)"', line)  # (TC_WSFS=paths: full paths)
    return m is not None and os.path.dirname(m.group(1)) == path


def test_restore_syncs_the_store_with_fsync_all(tmp_path):
    out, windows = _traced(tmp_path, ["all"], env_all=True)
    assert out["all"]["applied"] is True
    _check_synced(windows["all"], tmp_path / "ws")


def test_default_leaves_libgit2_unsynced_and_a_switch_takes_kept_handles(tmp_path):
    out, windows = _traced(tmp_path, ["default", "all"], env_all=False)
    store = str(tmp_path / "ws" / ".checkpoints")
    objects, refs = _store_writes(windows["default"], store)
    assert objects and refs
    synced = _fsynced(windows["default"])
    assert not [p for p in synced if p.startswith(store + "/objects/") and "/pack/" not in p or
                p.startswith(store + "/refs")], synced
    ws = str(tmp_path / "ws")
    assert not [p for p in synced if p == ws or p.startswith(ws + "/") and not p.startswith(store)], synced
    assert out["all"]["applied"] is True
    _check_synced(windows["all"], tmp_path / "ws")
