"""The inotify watch limit for real: the change journal under a kernel that refuses watches
(ENOSPC), and back once watches can be had again.

The limit is the user namespace's own (`/proc/sys/user/max_inotify_watches`, counted per user
per namespace since Linux 5.11): the test runs its workspace in a child process inside a new user
namespace (`unshare -Ur`) and lowers the limit there, so no other process on the machine loses a
watch. Stock git judges every tree. Skipped where unprivileged user namespaces are not allowed.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import clean_env

from tc_git.workspace import inotify

pytestmark = pytest.mark.skipif(not inotify.available(), reason="no native inotify here (Linux, TC_NATIVE on)")

LIMIT = "/proc/sys/user/max_inotify_watches"

CHILD = r"""
import json, sys
from pathlib import Path
sys.path.insert(0, sys.argv[2])
from conftest import git_tree, write
from tc_git.workspace import journal
from tc_git.engine import Engine
from tc_git.mcp.watch import DriftWatcher

LIMIT = "/proc/sys/user/max_inotify_watches"
ws = Path(sys.argv[1])
for i in range(8):
    write(ws, f"src/m{i % 4}/f{i}.py", f"v = {i}\n".encode())
eng = Engine(ws)
eng.init("limit")
watcher = DriftWatcher(interval=3600, max_wait=3600)
watcher.watch(eng)
assert watcher.mode == "inotify", watcher.mode
tree_obj = watcher.roots[eng.root].handle
j = watcher.journal(eng.root)
journal.REWATCH_AFTER = 3600.0  # (each step below sets it: no timing under load)
out = []
attempts = []
real_rewatch = j.rewatch
j.rewatch = lambda restored: attempts.append(1) or real_rewatch(restored)

def save(title):
    e = Engine(ws)
    e.journal = j
    before = j.refreshes
    r = e.save(title)
    commit = e.repo[r["commit"]]
    tree = str(commit.tree_id)
    changed = [d.new_file.path for d in commit.parents[0].tree.diff_to_tree(commit.tree).deltas] \
        if commit.parents else []
    st = j.status()
    out.append({"title": title, "how": "journal" if j.refreshes > before else "full",
                "same_as_git": tree == git_tree(ws, e.store.path), "reason": st["reason"],
                "trusted": st["trusted"], "broken": j.broken, "attempts": len(attempts), "blind": tree_obj.blind,
                "paths": sorted(changed)})

save("first")
save("trusted")
used = len(tree_obj.dirs)  # root, the store's tc/, src, src/m0..m3
Path(LIMIT).write_text(str(used))  # not one watch more for this user
write(ws, "new/deep/a.txt", b"one\n")  # new/ gets no watch: neither does new/deep
save("refused")
write(ws, "new/deep/b.txt", b"two\n")  # no notification of this one
save("still refused")
journal.REWATCH_AFTER = 0.0
save("tried again")  # REWATCH_AFTER passed, the limit still holds
Path(LIMIT).write_text(str(used + 16))  # watches to be had again (as when another process frees some)
journal.REWATCH_AFTER = 3600.0
save("too soon")  # the last attempt is less than REWATCH_AFTER ago
journal.REWATCH_AFTER = 0.0
write(ws, "new/deep/c.txt", b"three\n")
save("watched again")
write(ws, "new/deep/d.txt", b"four\n")
save("journal again")
watcher.stop()
print(json.dumps({"used": used, "steps": out}))
"""


def _userns() -> bool:
    if shutil.which("unshare") is None:
        return False
    r = subprocess.run(["unshare", "-Ur", "sh", "-c", f"echo 7 > {LIMIT}"], capture_output=True, timeout=30)
    return r.returncode == 0


def test_real_watch_limit_then_journal_back(tmp_path):
    """A workspace whose new directory the kernel refuses to watch: saves are full scans equal to
    stock git's tree (the file written with no notification included), an attempt while the limit
    holds changes nothing, an attempt sooner than REWATCH_AFTER is not made, and once watches
    can be had the journal comes back after one full scan and sees the directory that had none."""
    if not _userns():
        pytest.skip("no user namespace with its own inotify limit here (unshare -Ur)")
    tests = str(Path(__file__).parent)
    r = subprocess.run(["unshare", "-Ur", sys.executable, "-c", CHILD, str(tmp_path / "ws"), tests],
                       capture_output=True, timeout=240, env=clean_env())
    assert r.returncode == 0, r.stderr.decode(errors="replace")[-3000:]
    steps = {s["title"]: s for s in json.loads(r.stdout.decode().strip().splitlines()[-1])["steps"]}
    assert all(s["same_as_git"] for s in steps.values()), steps
    assert steps["trusted"]["how"] == "journal"
    for t in ("refused", "still refused", "tried again", "too soon"):
        assert steps[t]["how"] == "full" and steps[t]["broken"] and steps[t]["blind"], (t, steps[t])
        assert "no inotify watch left for new" in steps[t]["reason"], (t, steps[t])
    assert "new/deep/b.txt" in steps["still refused"]["paths"]
    assert [steps[t]["attempts"] for t in ("still refused", "tried again", "too soon", "watched again")] == [0, 1, 1, 2]
    back = steps["watched again"]
    assert back["how"] == "full" and not back["broken"] and not back["blind"] and back["trusted"], back
    assert "new/deep/c.txt" in back["paths"]
    again = steps["journal again"]
    assert again["how"] == "journal" and again["paths"] == ["new/deep/d.txt"], again
