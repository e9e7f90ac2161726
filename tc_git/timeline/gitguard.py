"""`git.unchanged`: proof that an operation left the user's git repository alone.

A fingerprint of the user's git directory is taken before and after every operation that can
write (save with its export, restore, import, pull + restore, checkout with code): every file
of the git directory (and of the common directory of a linked worktree) except

* `objects/` (an export adds objects there; they change nothing the user sees), and
* our own namespaces: loose refs and reflogs under `refs/checkpoints/` and
  `refs/notes/checkpoints`, and their lines in `packed-refs`.

So HEAD, the index, config, hooks, every other ref, the stash, info/ (but for the two lines
of info/exclude that hide the store from `git status`), logs/ and anything a
future git adds are covered. Read from files only (no `git status`, which may rewrite the
index). Files are compared by sha256 (mode and type too); files above HASH_MAX by size and
mtime. Standard library only.
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import stat as stat_mod
from pathlib import Path

from ..base.fsutil import common_dir
from ..base.refs import CHECKPOINTS_PREFIX, EXCLUDE_COMMENT, NOTES_REF

OURS = (CHECKPOINTS_PREFIX, NOTES_REF)
HASH_MAX = 8 << 20


def _ours(rel: str) -> bool:
    for prefix in ("", "logs/"):
        if rel.startswith(prefix):
            r = rel[len(prefix):]
            if r.startswith(OURS[0]) or r == OURS[1] or r.startswith(OURS[1] + "/"):
                return True
    return False


def _file(p: str, st: os.stat_result):
    if stat_mod.S_ISLNK(st.st_mode):
        return ("link", os.readlink(p))
    if not stat_mod.S_ISREG(st.st_mode):
        return ("other", stat_mod.S_IFMT(st.st_mode))
    if st.st_size > HASH_MAX:
        return ("big", stat_mod.S_IMODE(st.st_mode), st.st_size, st.st_mtime_ns)
    h = hashlib.sha256()
    with open(p, "rb") as f:
        for b in iter(lambda: f.read(1 << 20), b""):
            h.update(b)
    return ("file", stat_mod.S_IMODE(st.st_mode), h.hexdigest())


def _walk(base: Path, label: str, fp: dict) -> None:
    base_s = os.fspath(base)
    for dirpath, dirs, files in os.walk(base_s):
        rel_dir = os.path.relpath(dirpath, base_s).replace(os.sep, "/")
        rel_dir = "" if rel_dir == "." else rel_dir + "/"
        if not rel_dir:
            dirs[:] = [d for d in dirs if d != "objects"]
        dirs[:] = [d for d in dirs if not _ours(rel_dir + d + "/") and rel_dir + d != OURS[1]]
        for name in files:
            rel = rel_dir + name
            if _ours(rel) or name.endswith(".lock") and rel.startswith(("refs/", "logs/refs/")):
                continue  # our refs, and the transient lock of a ref update in flight
            p = os.path.join(dirpath, name)
            try:
                st = os.lstat(p)
                value = _file(p, st)
            except FileNotFoundError:
                continue
            except OSError as e:
                value = ("unreadable", e.errno)
            if rel == "info/exclude" and value[0] == "file":
                value = _exclude(p)  # (the line that hides the store is ours: Store.protect)
            if rel == "packed-refs" and value[0] == "file":
                value = _packed(p)
                if value is None:
                    continue  # only our refs in it: as if absent
            fp[label + rel] = value


def _exclude(path: str):
    """info/exclude without our comment and the pattern line after it."""
    with open(path, "rb") as f:
        lines = f.read().decode("utf-8", "surrogateescape").splitlines()
    out, skip = [], False
    for line in lines:
        if skip:
            skip = False
        elif line == EXCLUDE_COMMENT:
            skip = True
        else:
            out.append(line)
    return ("exclude", hashlib.sha256("\n".join(out).encode("utf-8", "surrogateescape")).hexdigest())


def _packed(path: str):
    """packed-refs without our lines (a peeled `^` line follows its ref)."""
    out, skip = [], False
    with open(path, "rb") as f:
        for line in f.read().decode("utf-8", "surrogateescape").splitlines():
            if line.startswith("^"):
                if not skip:
                    out.append(line)
                continue
            name = line.split(" ", 1)[1] if " " in line and not line.startswith("#") else ""
            skip = _ours(name)
            if not skip:
                out.append(line)
    if not [x for x in out if not x.startswith("#")]:
        return None
    return ("packed-refs", hashlib.sha256("\n".join(out).encode("utf-8", "surrogateescape")).hexdigest())


def fingerprint(gitdir) -> dict:
    gitdir = Path(gitdir)
    fp: dict = {}
    _walk(gitdir, "", fp)
    common = common_dir(gitdir)
    if common != gitdir:
        _walk(common, "common:", fp)
    return fp


def diff(a: dict, b: dict) -> list[str]:
    return sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))


@contextlib.contextmanager
def watch(gitdir):
    """`with watch(gitdir) as g:` ... then g == {"unchanged": bool, "changed"?: [...]}.

    gitdir None (no user repository): g == {"unchanged": None}. Never raises on its own.
    """
    g: dict = {"unchanged": None}
    before = None
    if gitdir is not None:
        try:
            before = fingerprint(gitdir)
        except OSError as e:
            g["error"] = f"fingerprint failed: {e}"
    try:
        yield g
    finally:
        if before is not None:
            try:
                changed = diff(before, fingerprint(gitdir))
                g["unchanged"] = not changed
                if changed:
                    g["changed"] = changed[:50]
            except OSError as e:
                g["error"] = f"fingerprint failed: {e}"
