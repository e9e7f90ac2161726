"""Tree -> workspace, file by file, never touching what was not captured.

The plan is a tree-to-tree diff between a snapshot of the workspace as it is now (`pre`) and
the target. Every path the plan deletes or overwrites is therefore in `pre`, which the caller
has committed before applying: an undo can always bring it back. Paths the target wants to
create but that exist on disk uncaptured (ignored, sensitive, a credential, too large, a nested
repository) are left alone and reported. No repo-wide reset and no REMOVE_UNTRACKED anywhere:
libgit2's REMOVE_UNTRACKED deletes nested repositories, `.git` included.
"""
from __future__ import annotations

import array
import contextlib
import itertools
import json
import os
import stat as stat_mod
import threading
import time
from dataclasses import dataclass, field

import pygit2
from pygit2.enums import FileMode

from ..base import fsutil
from ..base.errors import BadInput, NotFound
from ..base.fsutil import atomic_write, fsync_setting
from ..base.refs import EMPTY_TREE
from ..base.results import PlanView, RestoreCheck, RestoreResult
from ..base.settings import current
from ..storage.trees import tree_deltas, tree_has
from ..workspace import pathsafe, wsfs
from ..workspace import scan as scan_mod
from ..workspace import snapshot as snapshot_mod
from ..workspace.snapshot import Snapshot
from .capture import MAX_LIST, Workspace, skipped
from .chain import Entry, Timeline, left_out

GITLINK = FileMode.COMMIT


class Rows:
    """A plan's (path, blob id, mode) rows, held compactly: the paths in a list, the raw ids in
    one buffer, the modes in an array; a row is built as a tuple only when read. A 50k-file
    import's plan held a tuple and a pygit2.Oid per file (~104 bytes each, ~5 MiB at the
    import's peak, issue 14). Reads as a list of rows: len, iteration, indexing, `+`."""

    __slots__ = ("paths", "_ids", "_modes")
    WIDTH = 20  # a SHA-1 id's raw bytes

    def __init__(self, rows=()) -> None:
        self.paths: list[str] = []
        self._ids = bytearray()
        self._modes = array.array("I")
        for row in rows:
            self.append(row)

    def append(self, row) -> None:
        path, oid, mode = row
        raw = oid.raw
        if len(raw) != self.WIDTH:
            raise ValueError(f"a {len(raw)}-byte object id; plans hold SHA-1 ids")
        self._ids += raw
        self._modes.append(int(mode))
        self.paths.append(path)  # (last: a failed append leaves the rows as they were)

    def __len__(self) -> int:
        return len(self.paths)

    def _row(self, i: int) -> tuple[str, pygit2.Oid, int]:
        w = self.WIDTH
        return self.paths[i], pygit2.Oid(raw=bytes(self._ids[i * w:(i + 1) * w])), self._modes[i]

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self._row(j) for j in range(*i.indices(len(self.paths)))]
        if i < 0:
            i += len(self.paths)
        if not 0 <= i < len(self.paths):
            raise IndexError("plan row index out of range")
        return self._row(i)

    def __iter__(self):
        return (self._row(i) for i in range(len(self.paths)))

    def __add__(self, other):
        return Joined(self, other)

    def __radd__(self, other):
        return Joined(other, self)

    def __eq__(self, other) -> bool:
        try:
            return len(self) == len(other) and all(a == tuple(b) for a, b in zip(self, other))
        except TypeError:
            return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Rows({list(self)!r})"


class Joined:
    """Two sequences of rows read as one (`plan.to_write + plan.to_replace`) without a list of
    both: len, iteration, indexing."""

    __slots__ = ("a", "b")

    def __init__(self, a, b):
        self.a, self.b = a, b

    def __len__(self) -> int:
        return len(self.a) + len(self.b)

    def __iter__(self):
        return itertools.chain(self.a, self.b)

    def __getitem__(self, i: int):
        n = len(self.a)
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError("plan row index out of range")
        return self.a[i] if i < n else self.b[i - n]

    def __add__(self, other):
        return Joined(self, other)


def paths_of(rows) -> list[str]:
    """The paths of a sequence of rows (Rows keeps them as a list already)."""
    return rows.paths if isinstance(rows, Rows) else [r[0] for r in rows]


def path_modes(rows):
    """(path, mode) of each row, without building its id."""
    return zip(rows.paths, rows._modes) if isinstance(rows, Rows) else ((r[0], r[2]) for r in rows)


def without(rows, drop) -> Rows | list:
    """`rows` less those whose path is in `drop`, of the same kind (Rows stays compact)."""
    if isinstance(rows, Rows):
        return Rows(r for r in rows if r[0] not in drop)
    return [r for r in rows if r[0] not in drop]


@dataclass
class Plan:
    to_delete: list[str] = field(default_factory=list)
    # (path, blob id, mode) rows: Rows from make_plan, any sequence of such tuples elsewhere
    to_write: Rows | list[tuple[str, pygit2.Oid, int]] = field(default_factory=Rows)
    to_replace: Rows | list[tuple[str, pygit2.Oid, int]] = field(default_factory=Rows)
    unrestorable: list[dict] = field(default_factory=list)
    nested: int = 0  # deltas left out because they are nested repositories (gitlinks)

    @property
    def empty(self) -> bool:
        return not (self.to_delete or len(self.to_write) or len(self.to_replace))

    def changes(self, exclude=(), cap: int | None = None) -> dict:
        """The plan as a timeline note's `changed` list (git's status letters); only the first
        `cap` entries are built as dicts (an import's 50k would be ~11 MiB of them)."""
        items = sorted([(p, 0, "D") for p in self.to_delete if p not in exclude]
                       + [(p, 1, "A") for p in paths_of(self.to_write) if p not in exclude]
                       + [(p, 2, "M") for p in paths_of(self.to_replace) if p not in exclude])
        return {"count": len(items),
                "files": [{"path": p, "status": st} for p, _k, st in (items if cap is None else items[:cap])]}

    def as_dict(self, limit: int | None = None) -> PlanView:
        def cap(items):
            return list(items) if limit is None else items[:limit]

        return {
            "to_delete": cap(self.to_delete),
            "to_write": cap(paths_of(self.to_write)),
            "to_replace": cap(paths_of(self.to_replace)),
            "unrestorable": cap(self.unrestorable),
            "counts": {"to_delete": len(self.to_delete), "to_write": len(self.to_write),
                       "to_replace": len(self.to_replace), "unrestorable": len(self.unrestorable)},
        }


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
              paths: list[str] | None = None, snap: Snapshot | None = None) -> Plan:
    """The changes that bring the workspace (`pre`) to `target`; with `paths` (a `selection`),
    only the changes at or under those paths. `snap`: the snapshot whose tree `pre` is (its
    edits spare reading the trees it built: trees.tree_deltas)."""
    root = repo.workdir
    plan = Plan()
    left = set(left_paths)
    # TYPECHANGE: a file that became a link (or back) is one replacement, not a delete + add
    # only the subtrees that differ are walked (libgit2's diff walks all)
    deltas = tree_deltas(repo, pre, target, typechange=True, patched=snap)
    # An added path that `pre` holds is a directory there (file <-> directory swap), whose
    # files are all deletions in the same list: not `d.path in pre`, as pygit2 (1.21) keeps a
    # reference to every name a Tree is asked for (an import's 50k names, for the server's life)
    swapped = snapshot_mod.dirs_of(d.path for d in deltas if d.new_id is None)
    for d in deltas:
        if GITLINK in (d.old_mode, d.new_mode):
            plan.nested += 1
            continue  # nested repositories are never touched
        if paths is not None and not in_selection(d.path, paths):
            continue
        if d.new_id is None:  # D: the target has no such path
            plan.to_delete.append(d.path)
        elif d.status == "A":
            if d.path in swapped:
                # on disk as a captured directory (file <-> directory swap): the plan deletes
                # its files first, then writes this one
                plan.to_replace.append((d.path, d.new_id, d.new_mode))
            elif d.path in left or (_present(root, d.path) and not _empty_dir(root, d.path)):
                plan.unrestorable.append({"path": d.path, "reason": "present in the workspace but not captured "
                                          "(ignored, sensitive or too large): left as it is"})
            else:
                plan.to_write.append((d.path, d.new_id, d.new_mode))
        else:  # MODIFIED, TYPECHANGE (and mode-only changes)
            plan.to_replace.append((d.path, d.new_id, d.new_mode))
    return plan


def _present(root: str, rel: str) -> bool:
    """Is `rel` in the workspace itself, lstat all the way: under a link that replaced a
    directory the name is somewhere else, not here."""
    path = root
    parts = rel.split("/")
    for i, part in enumerate(parts):
        path = os.path.join(path, part)
        try:
            st = os.lstat(path)
        except OSError:
            return False
        if i < len(parts) - 1 and not stat_mod.S_ISDIR(st.st_mode):
            return False
    return True


def _empty_dir(root: str, rel: str, limit: int = 1000) -> bool:
    """Is `rel` a directory holding no file, link or `.git` at any depth (only empty
    directories)? Then nothing uncaptured is there: writing the target's file in its place
    (wsfs removes the empty directories first) loses nothing. Lstat all the way; a large or
    unreadable tree counts as not empty."""
    stack = [os.path.join(root, rel)]
    try:
        if not stat_mod.S_ISDIR(os.lstat(stack[0]).st_mode):
            return False
        while stack:
            with os.scandir(stack.pop()) as it:
                for entry in it:
                    limit -= 1
                    if limit < 0 or entry.name == ".git" or not entry.is_dir(follow_symlinks=False):
                        return False
                    stack.append(entry.path)
    except OSError:
        return False
    return True


def screen(plan: Plan, root: str | None = None, rules: str | None = None) -> Plan:
    """Move what must not be written here out of the plan, into `unrestorable` (defence in
    depth: import and pull refuse such trees already). Names git would refuse (`..`, `.git` and
    its NTFS/HFS+ aliases, the store), names this platform cannot hold (TC_PATH_RULES=windows:
    `CON`, `aux.txt`, trailing dots; windows/macos: two names that fold to one) are reported,
    never written half-way. With `root`, paths under a nested repository of the live workspace
    (a `.git` at or above them, below the root) too; `apply_plan` checks that again through
    descriptors at the moment of each write. Idempotent."""
    rules = rules or pathsafe.rules()
    bad: dict[str, str] = {}
    nested: dict[str, bool] = {"": False}

    def in_nested(rel: str, root: str) -> str | None:
        parts = rel.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            d = "/".join(parts[:i])
            if d not in nested:
                nested[d] = os.path.lexists(os.path.join(root, d, ".git"))
            if nested[d]:
                return d
        return None

    for rel, mode in itertools.chain(path_modes(plan.to_write), path_modes(plan.to_replace)):
        why = pathsafe.check_path(rel, mode)
        if why:
            bad[rel] = f"refused name: {why}"
        elif rules != "posix":
            why = pathsafe.platform_problem(rel, rules)
            if why:
                bad[rel] = f"cannot be created under {rules} rules: {why}"
    for rel in plan.to_delete:
        why = pathsafe.check_path(rel)
        if why:
            bad[rel] = f"refused name: {why}"
    if root:
        for rel in itertools.chain(paths_of(plan.to_write), paths_of(plan.to_replace), list(plan.to_delete)):
            d = rel not in bad and in_nested(rel, root)
            if d:
                bad[rel] = f"{d}/ is a nested git repository: left as it is"
    if rules != "posix":  # two names the file system takes for one: neither is written
        groups: dict[str, list[str]] = {}
        for rel in itertools.chain(paths_of(plan.to_write), paths_of(plan.to_replace)):
            parts = rel.split("/")
            key = "/".join(pathsafe.fold_key(p, rules) or p for p in parts)
            groups.setdefault(key, []).append(rel)
        for rels in groups.values():
            if len(rels) > 1:
                for rel in rels:
                    bad.setdefault(rel, f"names {', '.join(sorted(rels))} are one file under {rules} rules "
                                        f"(case-insensitive): none of them written")
    if bad:
        plan.to_write = without(plan.to_write, bad)
        plan.to_replace = without(plan.to_replace, bad)
        plan.to_delete = [x for x in plan.to_delete if x not in bad]
        have = {u["path"] for u in plan.unrestorable}
        plan.unrestorable.extend({"path": p, "reason": r} for p, r in sorted(bad.items()) if p not in have)
    return plan


# restore.apply's choices for the apply_plan it calls (a thread-local: tests wrap apply_plan):
# .over (rename over, see there), .trust (keep what is written: .written, a snapshot.Written)
_RENAME = threading.local()


def apply_plan(repo: pygit2.Repository, plan: Plan, swap: bool | None = None) -> list[dict]:
    """Carry out a plan; returns the entries that could not be applied (and why).

    Every write and delete goes through `wsfs.Writer` (directory descriptors, no link ever
    followed, verified writes). Paths found at this moment under a nested repository (a `.git`
    at or above them, below the root) or in the store move to `plan.unrestorable`: kept,
    reported, not a failure. `swap=False`: existing files are renamed over, not swapped."""
    screen(plan, repo.workdir)
    failed: list[dict] = []
    kept: list[dict] = []
    parents: set[str] = set()
    if swap is None and getattr(_RENAME, "over", False):
        swap = False  # (restore.apply under the drift watcher, see there)
    with wsfs.Writer(repo.workdir, protect=[repo.path], exchange=swap) as ws:
        for rel in plan.to_delete:
            try:
                if ws.delete(rel):
                    parents.add(os.path.dirname(rel))
            except wsfs.Unrestorable as e:
                kept.append({"path": rel, "reason": str(e)})
            except OSError as e:
                failed.append({"path": rel, "reason": f"delete failed: {e.strerror or e}"})
        ws.prune(parents)
        creating = {x[0] for x in plan.to_write}
        rows = plan.to_write + plan.to_replace
        written = snapshot_mod.Written(rows) if getattr(_RENAME, "trust", False) else None
        shares = _shares(rows)
        if shares is None:
            results = _write_rows(ws, repo.odb.read, rows, range(len(rows)), creating, written)
        else:
            # two threads, each with its own Writer (descriptors, checks) and store handle:
            # creating a file is CPU in the kernel (ext4's inode allocation, ~0.1-0.7 ms a file
            # on this machine's ext4 without a journal), which runs without the GIL
            other: list = []
            peer = scan_mod._peer(repo)

            def second() -> None:
                try:
                    with wsfs.Writer(repo.workdir, protect=[repo.path], exchange=swap) as ws2:
                        other.append(_write_rows(ws2, peer.odb.read, rows, shares[1], creating, written))
                except BaseException as e:  # raised again on the calling thread
                    other.append(e)

            t = threading.Thread(target=second, name="tc-restore-write", daemon=True)
            t.start()
            try:
                results = _write_rows(ws, repo.odb.read, rows, shares[0], creating, written)
            finally:
                t.join()
            if isinstance(other[0], BaseException):
                raise other[0]
            results = sorted(results + other[0], key=lambda r: r[0])  # reported in plan order
        for _i, kind, entry in results:
            (kept if kind == "kept" else failed).append(entry)
    if kept:
        gone = {k["path"] for k in kept}
        plan.to_write = [x for x in plan.to_write if x[0] not in gone]
        plan.to_replace = [x for x in plan.to_replace if x[0] not in gone]
        plan.to_delete = [x for x in plan.to_delete if x not in gone]
        plan.unrestorable.extend(kept)
    if written is not None:
        _RENAME.written = written
    return failed


PARALLEL_MIN = 32  # files a plan writes before apply_plan writes them on two threads
# and at most: a larger plan (an import into an empty workspace, 50k files) stays on one thread,
# where a second thread's malloc arena would add to the import's peak (issue 14's memory bound)
PARALLEL_MAX = 4096


def _shares(rows) -> tuple[list[int], list[int]] | None:
    """The plan's writes (their positions) in two shares of whole directories, about the same
    number of files each; None: one thread (few or very many files, one core,
    the `restore_threads` setting 1). A directory's files stay on one thread, in plan order (one
    Writer holds its descriptor)."""
    if not PARALLEL_MIN <= len(rows) <= PARALLEL_MAX or (os.cpu_count() or 1) < 2 \
            or current().restore_threads == 1:
        return None
    by_dir: dict[str, list[int]] = {}
    for i, (rel, _o, _m) in enumerate(rows):
        by_dir.setdefault(rel.rpartition("/")[0], []).append(i)
    if len(by_dir) < 2:
        return None
    shares: tuple[list[int], list[int]] = ([], [])
    for group in sorted(by_dir.values(), key=len, reverse=True):
        shares[0 if len(shares[0]) <= len(shares[1]) else 1].extend(group)
    return sorted(shares[0]), sorted(shares[1])


def _write_rows(ws: wsfs.Writer, read, rows, which, creating, written) -> list[tuple[int, str, dict]]:
    """Write `rows[i]` for each i of `which` through `ws` (into `written`, a snapshot.Written or
    None, what each write placed): (i, "kept" | "failed", entry) for each path not written."""
    out: list[tuple[int, str, dict]] = []
    for i in which:
        rel, oid, mode = rows[i]
        try:
            kind, data = read(oid)[:2]  # the bytes without a pygit2 object per blob (~15 us less a file)
            if kind != pygit2.enums.ObjectType.BLOB:
                out.append((i, "failed", {"path": rel, "reason": f"write failed: {str(oid)[:12]} is not a blob"}))
                continue
            st = ws.write(rel, data, int(mode), expect_id=str(oid), create=rel in creating)
            if written is not None and st is not None:
                written.add(i, st)
        except wsfs.Unrestorable as e:
            out.append((i, "kept", {"path": rel, "reason": str(e)}))
        except OSError as e:
            out.append((i, "failed", {"path": rel, "reason": f"write failed: {e.strerror or e}"}))
        except (KeyError, pygit2.GitError) as e:
            out.append((i, "failed", {"path": rel, "reason": f"write failed: blob {str(oid)[:12]} unreadable ({e})"}))
    return out


# ---------------------------------------------------------------------------- the transaction
# A restore runs as: snapshot (pre) -> plan (`preview`) -> [restore point commit -> journal ->
# apply_plan -> refresh what the plan touched -> restore commit -> journal removed] (`apply`).
# The engine validates, takes the lock and the pre snapshot, and calls these two.
JOURNAL = "restore-journal.json"
# The restore point and the restore commit, with their notes, as one small pack each
# (Timeline.append's `packed`: 4 new inodes instead of ~9, ~2-5 ms of CPU less per commit on this
# busy ext4) is off: every pack counts towards the packs that trigger a roll-up (repack.PACKS_AUTO),
# and a restore then made 3 packs instead of 1, so the store was rolled up ~3x as often (measured
# with the older consolidation: 31 packs, 8 MB at 10k files, 121 ms of CPU): more than the packs
# saved. Worth turning on once roll-ups leave such tiny packs out of their count.
PACKED_COMMITS = False


class RestoreJournal:
    """`tc/restore-journal.json`, present only while a restore applies its plan. A crash (or a
    kill) in between leaves it behind, and `resume` of that task then says how to undo (the
    restore point, written before the first file) or to run the restore again."""

    def __init__(self, store):
        self.store = store

    @contextlib.contextmanager
    def applying(self, task_id: str, target_id: str, undo_id: str, pre_oid, plan: Plan | None = None,
                 sel: list[str] | None = None):
        # fsync'd only when the restored files are (TC_RESTORE_FSYNC=all): a SIGKILL leaves it
        # either way, and a power loss could keep it while losing the unsynced files and objects
        # it names; an fsync forces a journal commit of the file system (1-3 ms idle, far more
        # while others write), for a file removed ~50 ms later
        # the directories it writes into: where a kill can leave a temporary (sweep)
        dirs = sorted({p.rpartition("/")[0] for p in touched(plan)}) if plan is not None else None
        data = json.dumps({"task": task_id, "target": target_id, "undo": undo_id, "pre": str(pre_oid),
                           "paths": sel, "dirs": dirs if dirs is None or len(dirs) <= 10000 else None,
                           "time": time.time()}, indent=1, sort_keys=True).encode()
        atomic_write(self.store.state_dir / JOURNAL, data, sync=fsync_setting() == "all")
        yield
        os.unlink(self.store.state_dir / JOURNAL)  # only when the restore commit is written

    def pending(self, task_id: str) -> dict | None:
        """The journal of an interrupted restore of `task_id` (read under the store's lock: a
        journal is then never one of a restore in progress), or None."""
        j = self.store.read_json(JOURNAL, None)
        return j if isinstance(j, dict) and j.get("task") == task_id else None

    def sweep(self) -> list[str]:
        """Under the store's lock: remove the temporaries an interrupted restore left (once;
        the journal then records them and stays, so `resume` still warns and `undo` still
        reverses it). Returns what was removed."""
        j = self.store.read_json(JOURNAL, None)
        if not isinstance(j, dict) or "swept" in j:
            return []
        removed = wsfs.remove_temporaries(self.store.workspace, j.get("dirs"))
        j["swept"] = removed[:MAX_LIST]
        atomic_write(self.store.state_dir / JOURNAL, json.dumps(j, indent=1, sort_keys=True).encode(), sync=False)
        return removed

    def interrupted(self, task_id: str) -> str | None:
        """The warning for `task_id` if one of its restores was interrupted, else None."""
        j = self.store.read_json(JOURNAL, None)
        if not j or j.get("task") != task_id:
            return None
        return (f"a restore to {j['target']} was interrupted; the workspace may be partly "
                f"restored. Undo it (undo: back to {j['undo']}, its restore point), or run the restore again")


FENCE = "restore-fence"


def fs_fence(store) -> int | None:
    """A timestamp of the workspace's file system later than every write made there so far
    (the restore's own included): fsutil.fs_fence, through a file in the store."""
    return fsutil.fs_fence(store.state_dir, store.workspace, FENCE)


def plan_for(repo: pygit2.Repository, pre: pygit2.Tree, target: pygit2.Tree, left, sel, target_id: str,
             store_path, snap: Snapshot | None = None) -> Plan:
    """The screened plan from the snapshot `pre` to `target`; an unreadable tree is BadInput."""
    try:
        return screen(make_plan(repo, pre, target, left, sel, snap), repo.workdir)
    except pygit2.GitError as e:  # a tree libgit2 cannot parse: a corrupt or tampered store
        raise BadInput(f"{target_id} cannot be restored: its tree is unreadable ({e}); nothing was written. "
                       f"`git --git-dir={store_path} fsck` names the broken object") from None


def check_selection(repo: pygit2.Repository, sel: list[str], pre, target_tree, target_id: str, left,
                    root) -> None:
    """A selected path must name something in the target or in the workspace's snapshot."""
    def has(tree, p):
        try:
            return tree_has(repo, tree, p)
        except (UnicodeError, ValueError):
            return False

    for p in sel:
        if not has(pre, p) and not has(target_tree, p) and not in_selection(p, left):
            raise NotFound(f"path {p!r} is neither in {target_id} nor in the workspace (as captured); "
                           f"paths are relative to the workspace root {root}")


def touched(plan: Plan) -> list[str]:
    """The paths an applied plan wrote or deleted: only these can differ from the pre snapshot."""
    return plan.to_delete + [p for p, _o, _m in plan.to_write + plan.to_replace]


def expected_after(plan: Plan, failed, sel, pre_tree: pygit2.Oid, target_tree: pygit2.Oid):
    """A plan applied in full (no selection, nothing failed, unrestorable or nested left
    aside) turns the workspace's tree from `pre_tree` into `target_tree`: the snapshot after
    the writes takes that tree when its edits are exactly the plan's (snapshot.expecting), and
    builds it as usual otherwise. Not from the empty tree (an import into an empty workspace):
    the snapshot after is then a first one, which builds every tree itself and never asks;
    the plan's edits held through it were ~6 MiB of a 50k-file import's peak."""
    if sel or failed or plan.unrestorable or plan.nested or str(pre_tree) == EMPTY_TREE:
        return contextlib.nullcontext()
    edits: dict = {p: None for p in plan.to_delete}
    edits.update({p: (oid, int(mode)) for p, oid, mode in plan.to_write + plan.to_replace})
    return snapshot_mod.expecting(pre_tree, edits, target_tree)


def carry_left(after, pre, paths) -> None:
    """After refreshing only `paths`: the other uncaptured paths are as the pre snapshot found them."""
    keep = set(paths)
    after.left = sorted([x for x in pre.left if x.path not in keep] + after.left, key=lambda x: x.path)
    after.nested = pre.nested


def check_restored(repo: pygit2.Repository, sel, pre_tree, after_tree, target_tree, plan: Plan, failed,
                   cap: int) -> RestoreCheck:
    """After a selective restore: nothing outside the selection moved (else something else
    wrote meanwhile) and the selection now equals the target (except what was reported)."""
    def paths(a, b):
        return [d.path for d in tree_deltas(repo, a, b) if GITLINK not in (d.old_mode, d.new_mode)]

    outside = [p for p in paths(pre_tree, after_tree) if not in_selection(p, sel)]
    known = {f["path"] for f in failed} | {u["path"] for u in plan.unrestorable}
    differs = [p for p in paths(target_tree, after_tree) if in_selection(p, sel) and p not in known]
    return {"ok": not outside and not differs, "outside_changed": outside[:cap],
            "outside_changed_count": len(outside), "differs_from_target": differs[:cap]}


def title(target_id: str, sel, undo_of: str | None) -> str:
    """The restore commit's title: its target, the selection, what it undoes."""
    out = f"to {target_id}"
    if sel:
        out += f" ({len(sel)} path{'s' if len(sel) != 1 else ''}: {', '.join(sel[:3])}{', ...' if len(sel) > 3 else ''})"
    return f"undo {undo_of[:10]}: " + out if undo_of else out


def preview(ws: Workspace, tl: Timeline, target: Entry, snap: Snapshot, sel: list[str] | None,
            undo_of: str | None, limit: int) -> tuple[RestoreResult, Plan]:
    """The restore's result before anything is written, and its plan."""
    repo = ws.repo
    left = [x.path for x in snap.left] + list(snap.nested)
    pre_tree = repo[snap.tree].peel(pygit2.Tree)
    target_tree = repo[target.oid].peel(pygit2.Commit).tree
    if sel and not undo_of:  # an undo's paths are its restore's, even where that restore wrote nothing
        check_selection(repo, sel, pre_tree, target_tree, target.id, left, ws.store.workspace)
    plan = plan_for(repo, pre_tree, target_tree, left, sel, target.id, ws.store.path, snap)
    out: RestoreResult = {"applied": False, "recovered": None, "target": target.id, "target_commit": str(target.oid),
           "plan": plan.as_dict(limit), "skipped_paths": skipped(snap), "paths": sel,
           "not_in_target": left_out(target.record or tl.record(target.oid), limit),  # (find loaded it)
           "unstable": snap.unstable[:MAX_LIST]}
    if undo_of:
        out["undo_of"] = undo_of
    return out, plan


def apply(ws: Workspace, tl: Timeline, head: Entry, target: Entry, snap: Snapshot, plan: Plan,
          sel: list[str] | None, undo_of: str | None) -> dict:
    """The restore transaction (under the store's lock): restore point, journal, files, restore
    commit. Returns the restore commit, its ids, what failed, the snapshot after, the check."""
    repo = ws.repo
    task = head.record.get("task", {})
    # 1. the workspace as it is, unsaved work included, becomes a restore point
    pre_oid, undo_id, _ = ws.drift(tl, head, snap, title=f"before restore to {target.id}", packed=PACKED_COMMITS,
                                   restore_point=True)
    with RestoreJournal(ws.store).applying(tl.task_id, target.id, undo_id, pre_oid, plan, sel):
        # 2. files, one atomic replace at a time
        # under a drift watcher whose notifications cost Python work each (watchdog: not on
        # Linux), files are renamed over, not swapped: a swap is two more notifications per file,
        # which cost more than ext4's write-back at the rename (bench_mcp's flow at 10k, load < 1:
        # 2nd/3rd restores 103-144 ms renamed against 115-159 swapped); read natively
        # (journal.slow_notifications False) the swap wins, as without a watcher
        _RENAME.over = ws.journal is not None and ws.journal.slow_notifications
        _RENAME.trust, _RENAME.written = True, None
        try:
            failed = apply_plan(repo, plan)
            written = _RENAME.written
        finally:
            _RENAME.over = _RENAME.trust = False
            _RENAME.written = None
        # 3. what is on disk now, as the restore commit
        # only what the plan touched can differ from `snap`: a full walk again costs ~0.2 s at 50k
        moved = touched(plan)
        target_tree = repo[target.oid].peel(pygit2.Commit).tree
        # the files it wrote are not read again where they provably hold what was written
        # (snapshot.Written): an import into an empty workspace wrote every file of its tree
        with snapshot_mod.fenced(fs_fence(ws.store) if moved else None), \
                expected_after(plan, failed, sel, snap.tree, target_tree.id), snapshot_mod.trusting(written):
            if sel:  # a full walk: the check below must see paths outside the selection too
                after = ws.snapshot(task)
            else:
                # with a trusted change journal: also what it saw meanwhile (the notifications of
                # these very writes), so the next save does not read every restored file again
                after = ws.snapshot(task, paths=moved, pending=True) if moved else snap
        if after.partial:
            carry_left(after, snap, moved)
        h = tl.head()
        restore_id = tl.next_restore_id(h.record)
        counters = dict(h.record.get("counters") or {"steps": 0, "drifts": 0}, restores=int(restore_id[1:]))
        # a partial refresh changed only what the plan wrote: its list is the diff, without
        # another tree walk (~45 ms at 50k files)
        changed = (plan.changes(exclude={f["path"] for f in failed}, cap=MAX_LIST) if after.partial
                   else ws.changed(repo[h.oid].peel(pygit2.Tree), repo[after.tree].peel(pygit2.Tree), after))
        check = (check_restored(repo, sel, snap.tree, after.tree, target_tree, plan, failed, MAX_LIST)
                 if sel else None)
        # a selective restore leaves the rest of the workspace where it was: same current step
        rec = ws.record(tl, h, step=h.step if sel else target.step,
                        target={"id": target.id, "commit": str(target.oid)},
                        restore=restore_id, counters=counters,
                        undo=undo_id, failed=failed[:MAX_LIST], files=after.note(), changed=changed,
                        title=title(target.id, sel, undo_of), paths=sel, undo_of=undo_of, check=check)
        oid = tl.append("restore", after.tree, rec, packed=PACKED_COMMITS)
    return {"failed": failed, "after": after, "check": check, "undo_id": undo_id, "commit": str(oid),
            "restore_id": restore_id}
