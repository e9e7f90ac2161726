"""Tree -> workspace, file by file, never touching what was not captured.

The plan is a tree-to-tree diff between a snapshot of the workspace as it is now (`pre`) and
the target. Every path the plan deletes or overwrites is therefore in `pre`, which the caller
has committed before applying: an undo can always bring it back. Paths the target wants to
create but that exist on disk uncaptured (ignored, sensitive, a credential, too large, a nested
repository) are left alone and reported. No repo-wide reset and no REMOVE_UNTRACKED anywhere:
libgit2's REMOVE_UNTRACKED deletes nested repositories, `.git` included.
"""
from __future__ import annotations

import os
import secrets as _rand
import stat as stat_mod
from dataclasses import dataclass, field

import pygit2
from pygit2.enums import DeltaStatus, DiffOption, FileMode

GITLINK = FileMode.COMMIT


@dataclass
class Plan:
    to_delete: list[str] = field(default_factory=list)
    to_write: list[tuple[str, pygit2.Oid, int]] = field(default_factory=list)
    to_replace: list[tuple[str, pygit2.Oid, int]] = field(default_factory=list)
    unrestorable: list[dict] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not (self.to_delete or self.to_write or self.to_replace)

    def changes(self, exclude=(), cap: int | None = None) -> dict:
        """The plan as a timeline note's `changed` list (git's status letters)."""
        items = sorted([{"path": p, "status": "D"} for p in self.to_delete if p not in exclude]
                       + [{"path": p, "status": "A"} for p, _o, _m in self.to_write if p not in exclude]
                       + [{"path": p, "status": "M"} for p, _o, _m in self.to_replace if p not in exclude],
                       key=lambda x: x["path"])
        return {"count": len(items), "files": items if cap is None else items[:cap]}

    def as_dict(self, limit: int | None = None) -> dict:
        def cap(items):
            return items if limit is None else items[:limit]

        out = {
            "to_delete": cap(list(self.to_delete)),
            "to_write": cap([p for p, _o, _m in self.to_write]),
            "to_replace": cap([p for p, _o, _m in self.to_replace]),
            "unrestorable": cap(list(self.unrestorable)),
        }
        out["counts"] = {k: len(getattr(self, k)) for k in ("to_delete", "to_write", "to_replace", "unrestorable")}
        return out


MAX_SELECTION = 1000  # paths in one selective restore


def selection(paths) -> list[str] | None:
    """A restore selection as canonical workspace-relative paths (files or directories).

    None or an empty list selects everything. Each path is relative to the workspace root,
    `/`-separated, without `..`; `./` and trailing slashes are dropped. A path inside another
    selected directory is redundant and removed. Raises ValueError with the reason."""
    if paths is None:
        return None
    if isinstance(paths, (str, bytes)) or not isinstance(paths, (list, tuple)):
        raise ValueError("paths must be a list of workspace-relative paths")
    if len(paths) > MAX_SELECTION:
        raise ValueError(f"at most {MAX_SELECTION} paths per restore (got {len(paths)}): name their directory")
    out: list[str] = []
    for raw in paths:
        if not isinstance(raw, str) or not raw.strip():
            raise ValueError(f"each path must be a non-empty string, got {raw!r}")
        if "\0" in raw or "\\" in raw:
            raise ValueError(f"path {raw!r}: NUL and backslash are not allowed; use '/' between names")
        if raw.startswith("/"):
            raise ValueError(f"path {raw!r} is absolute: give it relative to the workspace root")
        parts = [x for x in raw.split("/") if x not in ("", ".")]
        if ".." in parts:
            raise ValueError(f"path {raw!r} contains '..': give it relative to the workspace root, inside it")
        if not parts:
            raise ValueError(f"path {raw!r} names the whole workspace: omit paths to restore everything")
        out.append("/".join(parts))
    if not out:
        return None
    keep: list[str] = []
    for p in sorted(set(out)):  # sorted: a directory comes right before what it contains
        if not (keep and in_selection(p, keep[-1:])):
            keep.append(p)
    return keep


def in_selection(path: str, sel) -> bool:
    """Whether `path` is one of the selected paths or lies under one of them."""
    return any(path == s or path.startswith(s + "/") for s in sel)


def make_plan(repo: pygit2.Repository, pre: pygit2.Tree, target: pygit2.Tree, left_paths=(),
              paths: list[str] | None = None) -> Plan:
    """The changes that bring the workspace (`pre`) to `target`; with `paths` (a `selection`),
    only the changes at or under those paths."""
    root = repo.workdir
    plan = Plan()
    left = set(left_paths)
    # TYPECHANGE: a file that became a link (or back) is one replacement, not a delete + add
    for d in repo.diff(pre, target, flags=DiffOption.INCLUDE_TYPECHANGE).deltas:
        old, new = d.old_file, d.new_file
        if GITLINK in (old.mode, new.mode):
            continue  # nested repositories are never touched
        if paths is not None and not in_selection(new.path or old.path, paths):
            continue
        if d.status == DeltaStatus.DELETED:
            plan.to_delete.append(old.path)
        elif d.status == DeltaStatus.ADDED:
            if new.path in pre:
                # on disk as a captured directory (file <-> directory swap): the plan deletes
                # its files first, then writes this one
                plan.to_replace.append((new.path, new.id, new.mode))
            elif new.path in left or os.path.lexists(os.path.join(root, new.path)):
                plan.unrestorable.append({"path": new.path, "reason": "present in the workspace but not captured "
                                          "(ignored, sensitive or too large): left as it is"})
            else:
                plan.to_write.append((new.path, new.id, new.mode))
        else:  # MODIFIED, TYPECHANGE (and mode-only changes)
            plan.to_replace.append((new.path, new.id, new.mode))
    return plan


def apply_plan(repo: pygit2.Repository, plan: Plan) -> list[dict]:
    """Carry out a plan; returns the entries that could not be applied (and why)."""
    root = repo.workdir
    failed: list[dict] = []
    parents: set[str] = set()
    for rel in plan.to_delete:
        full = os.path.join(root, rel)
        try:
            if os.path.isdir(full) and not os.path.islink(full):
                failed.append({"path": rel, "reason": "is now a directory: left as it is"})
                continue
            os.unlink(full)
            parents.add(os.path.dirname(rel))
        except FileNotFoundError:
            pass
        except OSError as e:
            failed.append({"path": rel, "reason": f"delete failed: {e.strerror}"})
    _prune_empty_dirs(root, parents)
    for rel, oid, mode in plan.to_write + plan.to_replace:
        try:
            _write_entry(repo, root, rel, oid, mode)
        except OSError as e:
            failed.append({"path": rel, "reason": f"write failed: {e.strerror or e}"})
    return failed


def _prune_empty_dirs(root: str, dirs: set[str]) -> None:
    """Remove directories the deletions emptied (rmdir only succeeds on empty ones)."""
    for d in sorted(dirs, key=lambda p: -p.count("/")):
        while d:
            try:
                os.rmdir(os.path.join(root, d))
            except OSError:
                break
            d = os.path.dirname(d)


def _write_entry(repo, root: str, rel: str, oid, mode: int) -> None:
    full = os.path.join(root, rel)
    parent = os.path.dirname(full)
    _ensure_dir(root, os.path.dirname(rel))
    if os.path.isdir(full) and not os.path.islink(full):
        os.rmdir(full)  # raises when not empty: its content was not captured, keep it
    data = repo[oid].data
    # A unique sibling name: a user file called `<name>.tmp` is never clobbered.
    tmp = os.path.join(parent, f".{os.path.basename(full)[:80]}.tc-{_rand.token_hex(6)}")
    if mode == FileMode.LINK:
        os.symlink(os.fsdecode(data), tmp)
    else:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o755 if mode == FileMode.BLOB_EXECUTABLE else 0o644)
        try:
            os.write(fd, data) if len(data) < (1 << 30) else _write_all(fd, data)
            os.fchmod(fd, _file_mode(mode))
        finally:
            os.close(fd)
    try:
        os.replace(tmp, full)
    except OSError:
        os.unlink(tmp)
        raise


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view[: 1 << 24])
        view = view[n:]


def _file_mode(mode: int) -> int:
    umask = os.umask(0)
    os.umask(umask)
    return (0o777 if mode == FileMode.BLOB_EXECUTABLE else 0o666) & ~umask


def _ensure_dir(root: str, rel_dir: str) -> None:
    """Create the parent directories of a path; a file in the way is replaced only if captured
    (the plan deleted it already), otherwise the OSError surfaces as unrestorable."""
    if not rel_dir:
        return
    path = root
    for part in rel_dir.split("/"):
        path = os.path.join(path, part)
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            os.mkdir(path)
            continue
        if not stat_mod.S_ISDIR(st.st_mode):
            raise NotADirectoryError(f"{path} is not a directory")
