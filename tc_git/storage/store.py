"""The private object database: a bare git repository owned by tc-git.

`<workspace>/.checkpoints/` (or `$TC_STORE`, or the store named by the workspace's pointer file)
holds the objects, refs and notes of both histories, the private index (the stat cache of the
snapshots), a file lock, and a few small state files under `tc/`. The workspace is attached at
run time (`repo.workdir`), never written into the config, so one store can serve several roots
and moving a workspace does not break it.
"""
from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

import pygit2
from pygit2.enums import Option

from ..base import validate
from ..base.errors import BadInput, StoreBusy, UnsafeRoot
from ..base.fsutil import atomic_write, common_dir, fsync_setting
from ..base.refs import EXCLUDE_COMMENT, NESTED_GIT_TEXT, NOTES_REF, POINTER_FILE, STORE_DIRNAME, STORE_HEAD_REF  # noqa: F401
from ..base.settings import current
from . import handles, lockfile
from .discover import HERE, active_task_of, note_location, store_dir, store_inside, untrusted, user_path

IDENTITY = ("tc-git", "tc-git@localhost")


def signature(when: float | None = None) -> pygit2.Signature:
    if when is None:
        return pygit2.Signature(*IDENTITY)
    return pygit2.Signature(*IDENTITY, int(when), 0)


def commit_bytes(tree: str, parents: list[str], when: int, message: bytes) -> bytes:
    """A commit object's bytes as libgit2 writes them, by tc-git at `when` (UTC): the commits
    serialised by hand into a small pack (timeline, notes, recorded events)."""
    who = b"%s <%s> %d +0000" % (IDENTITY[0].encode(), IDENTITY[1].encode(), when)
    head = b"tree %s\n" % tree.encode() + b"".join(b"parent %s\n" % p.encode() for p in parents)
    return head + b"author " + who + b"\ncommitter " + who + b"\n\n" + message


def read_note(repo: pygit2.Repository, oid) -> dict:
    """The JSON record a commit's note on `refs/notes/checkpoints` holds; {} when there is none
    (or it is not a JSON object). `Notes` reads them all at once."""
    try:
        data = json.loads(repo.lookup_note(str(oid), NOTES_REF).message)
    except (KeyError, ValueError, pygit2.GitError):
        return {}
    return data if isinstance(data, dict) else {}


ATTRIBUTES = "* -text -filter -ident -working-tree-encoding -eol\n"

# libgit2 refuses repositories owned by another uid (bind mounts, containers); the store is
# ours by construction, so the check only gets in the way.
pygit2.option(Option.SET_OWNER_VALIDATION, 0)

_FSYNC_GITDIR: bool | None = None  # libgit2's process-wide fsync setting as last set here


def fsync_gitdir() -> bool:
    """With TC_RESTORE_FSYNC=all libgit2 fsyncs what it writes in a store: each loose object
    (commits, trees and notes of saves and restore points) and its fan-out directory, each ref
    and its directory, the index, packs it indexes. Otherwise nothing of it is synced, as git
    does by default. The setting is libgit2's, process-wide, like the variable it follows (a
    restore's files and journal and a save's pack are synced by tc-git itself with it)."""
    global _FSYNC_GITDIR
    want = fsync_setting() == "all"
    if want != _FSYNC_GITDIR:
        pygit2.option(Option.ENABLE_FSYNC_GITDIR, want)
        _FSYNC_GITDIR = want
    return want


def repository_around(path: str | os.PathLike) -> pygit2.Repository | None:
    """The git repository `path` is in, found the way git finds it (up the parents, not across a
    filesystem boundary), opened; None if there is none. Not `pygit2.discover_repository`: when
    nothing is found, pygit2 1.21 returns None without owning a reference to it, so each miss
    takes one from None's count, and Python 3.11 aborts ("none_dealloc") once it reaches zero
    (benchmarks/results/pygit2-none-refcount.md; tests/test_refcount.py)."""
    try:
        return pygit2.Repository(os.fspath(path))
    except (pygit2.GitError, KeyError, ValueError, OSError):
        return None


def check_root(root: str | os.PathLike) -> Path:
    """Resolve and validate a workspace root; never creates it (rules in validate.root)."""
    return validate.root(root)


# A store is a directory tc-git created: it carries this marker, written before anything else,
# so a half-created store is still recognisably ours and nothing else ever is.
MARKER = "tc/store.json"
FORMAT_ID = "tc-git-store"
DESCRIPTION = "tc-git private checkpoint store\n"


def is_ours(path: Path) -> bool:
    """True if `path` is a tc-git store: our marker, or (stores made before the marker) our
    `tc/` state directory together with our description file. Neither can be planted in a
    user's `.git` by a clone, a bundle or a restore."""
    try:
        data = json.loads((path / MARKER).read_text())
        if isinstance(data, dict) and data.get("format") == FORMAT_ID:
            return True
    except (OSError, ValueError):
        pass
    try:
        return (path / "tc").is_dir() and (path / "description").read_text() == DESCRIPTION
    except OSError:
        return False


def _refuse(path: Path, why: str, source: str, fix: str) -> UnsafeRoot:
    return UnsafeRoot(f"refusing the store at {path} ({source}): {why}. A store is only a directory tc-git "
                      f"created; {fix}")


def check_location(path: Path, workspace: Path, source: str = "default") -> Path:
    """Apply the location rules; return the resolved store path or raise UnsafeRoot.

    * never a symbolic link (a planted `.checkpoints -> .git` would hand us the user's repo);
    * never a git directory that is not ours, nor anything inside one (`.git` in any case, a
      bare repository, another store's internals);
    * an existing non-empty directory must carry our marker;
    * an existing directory must be the current user's, writable by nobody else, unless
      TC_SAFE_STORES trusts it (discover.untrusted: another user's store is never used).
    """
    fix = {"default": "it is not tc-git's: move it aside (or, if it is a link, delete the link), or keep the "
                      "tc-git store elsewhere with --store / TC_STORE",
           "pointer": f"delete {workspace / POINTER_FILE} (or point it at a store tc-git made)",
           }.get(source, "pass a new or empty directory, or an existing tc-git store")
    if os.path.islink(path):
        raise _refuse(path, f"it is a symbolic link to {os.readlink(path)}", source, fix)
    real = path.resolve()
    g = validate.git_dir_of(real.parent)  # the same rule as for roots
    if g is not None:
        raise _refuse(real, f"it is inside the git directory {g}", source, fix)
    if real.name.casefold() == ".git":
        raise _refuse(real, "it is a git directory (.git)", source, fix)
    if real.exists():
        err = untrusted(real, "tc-git store", workspace)
        if err is not None:
            raise err
        if not real.is_dir():
            raise _refuse(real, "it exists and is not a directory", source, fix)
        if not is_ours(real):
            gitlike = (real / "HEAD").exists() or (real / "objects").exists()
            with contextlib.suppress(OSError):
                if gitlike or any(real.iterdir()):
                    why = "it is a git repository that tc-git did not create" if gitlike else \
                        "it is a non-empty directory without tc-git's marker"
                    if (real / "tasks").is_dir() and ((real / "payload").is_dir() or (real / "current.json").exists()):
                        why, fix = "it is a task-checkpoint-mcp store", (
                            "export its tasks with task-checkpoint-mcp (tc_export), move it aside "
                            f"(mv {real} {real}-seed) and import each handoff directory")
                    raise _refuse(real, why, source, fix)
    if real == workspace.resolve():
        raise BadInput("store must not be the workspace itself; pass a separate directory")
    return real


def locate(root: Path, store: str | None = None) -> tuple[Path, bool]:
    """Where the store of `root` lives: explicit > $TC_STORE > pointer file > default.

    Returns (path, explicit) where explicit means a pointer file should record it. The path
    has passed `check_location`.
    """
    if store:
        return check_location(user_path(store, root, "store"), root, "explicit"), True
    path, source = store_dir(root)  # the same rule the hooks read, stdlib only
    return check_location(path, root, source), source == "TC_STORE"


def _enclosing_worktree(path: Path) -> tuple[Path, str] | None:
    """(common git directory, `/path/of/store/` relative to its worktree) of the non-bare
    repository whose worktree holds the store `path`, or None."""
    repo = repository_around(path.parent)
    if repo is None:
        return None
    try:
        gitdir = Path(repo.path).resolve()
        real = path.resolve()
        if gitdir == real or real in gitdir.parents or repo.is_bare or not repo.workdir:
            return None
        rel = real.relative_to(Path(repo.workdir).resolve()).as_posix()
    finally:
        repo.free()
    return common_dir(gitdir), rel


def _exclude_line(common: Path, rel: str) -> None:
    """Our two lines in `<common>/info/exclude` (appended once; the user's lines kept as they are)."""
    pattern = "/" + "".join("\\" + c if c in "\\*?[!# " else c for c in rel) + "/"
    path = common / "info" / "exclude"
    try:
        text = path.read_text(encoding="utf-8", errors="surrogateescape")
    except FileNotFoundError:
        text = ""
    lines = text.splitlines()
    if any(line == EXCLUDE_COMMENT and nxt == pattern for line, nxt in zip(lines, lines[1:])):
        return
    path.parent.mkdir(exist_ok=True)
    sep = "" if not text or text.endswith("\n") else "\n"
    mode = path.stat().st_mode & 0o777 if path.exists() else 0o644
    atomic_write(path, (text + sep + EXCLUDE_COMMENT + "\n" + pattern + "\n").encode("utf-8", "surrogateescape"),
                 mode=mode, sync=False)


class Store:
    """One private repository, attached to one workspace for the life of this object."""

    def __init__(self, path: Path, workspace: Path):
        self.path = path
        self.workspace = workspace
        self._repo: pygit2.Repository | None = None
        self._pack_stamp: tuple | None = None  # objects/pack as of the last lock (see _refresh_handle)
        self._lock_fd: int | None = None
        self._lock_depth = 0
        self.lock_timeout: float | None = None  # None: the settings' (`lock_timeout`)
        self._held_fd: int | None = None  # the lock kept past a locked block: the index is not written yet
        self.deferrable = False  # the engine call will release() this store when it ends (handles.py)
        self._state_ok = False  # tc/ exists (state_dir)
        self._protected = False  # protect() ran for this object
        self.mirror_git = True  # False (TC_GIT=off, set by the engine): the user's .git is not written at all

    # -- creation ---------------------------------------------------------------------------
    @property
    def exists(self) -> bool:
        return (self.path / "HEAD").is_file() and (self.path / "objects").is_dir()

    def create(self) -> None:
        """Create and harden the store (idempotent; repairs a half-created one of ours).

        Only in a new or empty directory, or one that already carries our marker: an existing
        git directory that is not ours is never opened, hardened or written.
        """
        self.path = check_location(self.path, self.workspace, "explicit")
        old_umask = os.umask(0o077)
        try:
            self.path.mkdir(mode=0o700, parents=True, exist_ok=True)
            os.chmod(self.path, 0o700)
            (self.path / "tc").mkdir(mode=0o700, exist_ok=True)
            if not (self.path / MARKER).is_file():  # first, so a half-made store is still ours
                atomic_write(self.path / MARKER, json.dumps({"format": FORMAT_ID, "version": 1}).encode())
            if not self.exists:
                pygit2.init_repository(str(self.path), bare=True)
            repo = pygit2.Repository(str(self.path), pygit2.enums.RepositoryOpenFlag.NO_SEARCH)
            cfg = repo.config
            for key, value in (
                ("core.autocrlf", "false"), ("core.filemode", "true"), ("core.symlinks", "true"),
                ("core.ignorecase", "false"), ("core.precomposeunicode", "false"),
                ("core.logAllRefUpdates", "false"), ("core.hooksPath", "/dev/null"),
                ("gc.auto", "0"), ("commit.gpgSign", "false"), ("tag.gpgSign", "false"),
                ("user.name", IDENTITY[0]), ("user.email", IDENTITY[1]),
                ("core.safecrlf", "false"), ("receive.denyNonFastForwards", "false"),
            ):
                cfg[key] = value
            hooks = self.path / "hooks"
            if hooks.is_dir():
                for f in hooks.iterdir():
                    f.unlink()
            info = self.path / "info"
            info.mkdir(exist_ok=True)
            (info / "attributes").write_text(ATTRIBUTES)
            (self.path / ".gitignore").write_text("*\n")  # hides the store from the user's git status
            (self.path / "description").write_text(DESCRIPTION)
            note_location(self.path)  # (a copy of the project is told apart by it: discover.copied_from)
        finally:
            os.umask(old_umask)

    # -- access -----------------------------------------------------------------------------
    @property
    def repo(self) -> pygit2.Repository:
        if self._repo is None:
            if not is_ours(self.path):  # defence in depth: whoever built this Store, never a foreign repo
                raise UnsafeRoot(f"{self.path} is not a tc-git store (no marker {MARKER}); refusing to open it")
            # an earlier call's handle, its index parsed; inside an engine call, one whose index
            # is still to be written is taken over with the lock (released by release())
            kept = handles.checkout(self.path, self.workspace,
                                    claim=self.deferrable and self._lock_fd is None and self._held_fd is None)
            if kept is not None and (kept[2] is not None or handles.same_packs(self.path, kept[1], self._pack_dir_stamp())):
                self._repo, self._pack_stamp = kept[0], kept[1]
                if kept[2] is not None:
                    self._held_fd = kept[2]
                return kept[0]
            stamp = self._pack_dir_stamp()  # (taken first: a pack added meanwhile only reopens once more)
            repo = pygit2.Repository(str(self.path), pygit2.enums.RepositoryOpenFlag.NO_SEARCH)
            repo.workdir = str(self.workspace)
            self._repo, self._pack_stamp = repo, stamp
        return self._repo

    def reopen(self) -> pygit2.Repository:
        """Drop cached handles (after another process may have written packs or refs)."""
        if self._repo is not None:
            handles.flush(self._repo)  # a dirty index is written before its handle goes
            self._repo.free()
        self._repo = None
        handles.forget_idle(self.path)
        stamp = self._pack_dir_stamp()  # (first: a pack added meanwhile only reopens once more)
        repo = pygit2.Repository(str(self.path), pygit2.enums.RepositoryOpenFlag.NO_SEARCH) \
            if is_ours(self.path) else self.repo  # (self.repo refuses a foreign directory)
        repo.workdir = str(self.workspace)
        # the new handle sees the packs as they are now: without the stamp the next call
        # (the first save after a repack or an import) reopened it and parsed the index again
        self._repo, self._pack_stamp = repo, stamp
        return repo

    def release(self) -> None:
        """The end of an engine call: the handle goes back for the next call on this store
        (handles.py), with the lock if the index still has to be written."""
        if self._lock_depth:
            return
        repo, fd, self._repo, self._held_fd = self._repo, self._held_fd, None, None
        self.deferrable = False
        if fd is not None:
            handles.later(self.path, self.workspace, repo, fd, self._pack_stamp)
        elif repo is not None:
            handles.checkin(self.path, self.workspace, repo, self._pack_stamp)

    def _pack_dir_stamp(self) -> tuple | None:
        return handles.pack_stamp(self.path)

    def _refresh_handle(self) -> None:
        """Keep the open handle across locked calls (issue 14: reopening re-read the 5 MB index of
        a 50k-file workspace at every save, 20-60 ms) unless packs were added or removed since
        the last lock (a repack, an import: a handle keeps the old pack list mapped). The rest
        libgit2 checks by itself on use: refs and packed-refs are read from disk, a missing
        object rescans the object directories, `index.read(False)` reloads an index another
        process wrote, ignore files are re-read when their stamp changes."""
        stamp = self._pack_dir_stamp()
        if self._repo is None:
            self.repo  # noqa: B018 - the handle an earlier call left (handles.py), or a new one
        if not handles.same_packs(self.path, self._pack_stamp, stamp):  # (packs this process added: kept)
            self.reopen()
        self._pack_stamp = stamp

    @property
    def state_dir(self) -> Path:
        d = self.path / "tc"
        if not self._state_ok:  # (a mkdir per state file read cost ~0.2 ms each under load, 5+ per save)
            d.mkdir(mode=0o700, exist_ok=True)
            self._state_ok = True
        return d

    @property
    def locked(self) -> bool:
        """This object holds the store's lock now."""
        return self._lock_depth > 0

    # -- lock -------------------------------------------------------------------------------
    @contextlib.contextmanager
    def lock(self, timeout: float | None = None):
        """Serialise writers across processes (re-entrant within this object).

        Waits up to `timeout` seconds (default `lock_timeout`: TC_LOCK_TIMEOUT, 30), then fails with StoreBusy.
        libgit2's own `.lock` files fail at once instead of waiting, and a crashed process can
        leave one behind; while we hold the flock every such file is stale by construction.
        """
        if self._lock_depth:
            self._lock_depth += 1
            try:
                yield
            finally:
                self._lock_depth -= 1
            return
        if timeout is None:
            timeout = self.lock_timeout if self.lock_timeout is not None else current().lock_timeout
        fd, self._held_fd = self._held_fd, None  # still ours: the index of an earlier block is not written
        if fd is None:
            # a deferred index write of this process (handles.py): its lock and handle, taken over
            claimed = handles.claim(self.path, self._repo)
            if claimed is not None:
                fd = claimed[0]
                if claimed[1] is not None:
                    self._repo, self._pack_stamp = claimed[1], claimed[2]
        if fd is None:
            try:
                fd = lockfile.acquire(self.path / "lock", timeout)
            except lockfile.Busy:
                raise StoreBusy(
                    f"store busy: another tc-git operation has held {self.path / 'lock'} for over "
                    f"{timeout:.0f}s; wait for it to finish and retry"
                ) from None
        self._lock_fd, self._lock_depth = fd, 1
        if self.deferrable:
            handles.open_window(self.path)
        try:
            self.protect()
            self._remove_stale_git_locks()
            self._refresh_handle()
            self._sync_refs_as_set(fsync_gitdir())
            yield
        finally:
            self._lock_depth = 0
            self._lock_fd = None
            if self.deferrable:
                handles.close_window(self.path)
            if self.deferrable and handles.is_dirty(self._repo):
                self._held_fd = fd  # released by release(), after the index is written
            else:
                handles.flush(self._repo)  # (a dirty index never outlives the lock it was made under)
                lockfile.release(fd)

    def protect(self) -> None:
        """Keep the store out of the way of everyday git commands in the repository around it.

        `git clean -fdx` (build outputs away) deleted the whole store. git skips a nested
        repository unless told `-ff`, so the store names itself as one: `<store>/.git` is a
        gitfile `gitdir: .`. A nested repository shows in `git status` (and `git add -A` would
        add it as a gitlink) unless ignored, and the store's own `.gitignore` cannot ignore the
        directory itself: so first a pattern for it goes into the enclosing repository's
        `info/exclude` (after a comment naming tc-git; gitguard leaves those two lines out of
        its fingerprint), and the marker is written only once that is in place or there is no
        enclosing repository. With TC_GIT=off (`mirror_git` False) nothing is written into the
        enclosing repository, so the store stays unmarked there (git clean -fdx removes it).
        Once per Store object, under the lock; failures leave the store as it was (unprotected,
        not hidden less)."""
        if self._protected or not self.exists:
            return
        self._protected = True
        marker = self.path / ".git"
        try:
            enclosing = _enclosing_worktree(self.path)
            if enclosing is not None:
                if not self.mirror_git:
                    return
                _exclude_line(*enclosing)
            if not os.path.lexists(marker):
                atomic_write(marker, NESTED_GIT_TEXT.encode(), mode=0o600, sync=False)
        except (OSError, pygit2.GitError, ValueError):
            pass

    def _sync_refs_as_set(self, want: bool) -> None:
        """libgit2 reads its fsync setting for refs once, when a handle's ref database is
        loaded (loose objects: at each write): a handle kept from a call made under the other
        setting gets a new ref database (~20 us, only when the setting changed)."""
        repo = self._repo
        if repo is not None and getattr(repo, "_tc_refs_fsync", False) != want:
            repo.set_refdb(pygit2.Refdb.open(repo))
            repo._tc_refs_fsync = want  # type: ignore[attr-defined]

    def _remove_stale_git_locks(self) -> None:
        for name in ("index.lock", "packed-refs.lock", "config.lock", "HEAD.lock"):
            with contextlib.suppress(FileNotFoundError):
                (self.path / name).unlink()
        for dirpath, _dirs, files in os.walk(self.path / "refs"):
            for f in files:
                if f.endswith(".lock"):
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(os.path.join(dirpath, f))

    # -- small state files --------------------------------------------------------------------
    def read_json(self, name: str, default):
        try:
            return json.loads((self.state_dir / name).read_text())
        except FileNotFoundError:
            return default
        except ValueError:
            return default  # a torn file cannot happen (atomic_write); a hand-edited one is reset

    def write_json(self, name: str, value) -> None:
        atomic_write(self.state_dir / name, json.dumps(value, indent=1, sort_keys=True).encode())

    def active_task(self) -> str | None:
        """The workspace's active task (discover.active_task_of: a store inside the workspace
        keeps it under "." so moving or copying the project keeps it)."""
        active = self.read_json("active.json", {})
        return active_task_of(active, self.workspace.resolve(), self.path.resolve()) if isinstance(active, dict) else None

    def set_active_task(self, task_id: str | None) -> None:
        with self.lock():
            active = self.read_json("active.json", {})
            key = HERE if store_inside(self.path.resolve(), self.workspace.resolve()) else self.workspace.as_posix()
            if key == HERE:
                active.pop(self.workspace.as_posix(), None)  # (its key before "." was used)
            if task_id is None:
                active.pop(key, None)
            else:
                active[key] = task_id
                self.ensure_head()
            self.write_json("active.json", active)

    HEAD_REF = STORE_HEAD_REF
    HEAD_MESSAGE = ("tc-git checkpoint store\n\nThis commit only gives HEAD something to name. The work is on\n"
                    "refs/checkpoints/tasks/<task>/head (code timelines), refs/checkpoints/sessions/ (recorded\n"
                    "conversations) and refs/checkpoints/milestones/; notes on refs/notes/checkpoints.\n"
                    "Try: git log --notes=checkpoints refs/checkpoints/tasks/<task>/head\n")

    def ensure_head(self) -> None:
        """HEAD names a ref that exists (one fixed commit, the same in every store), so `git fsck`
        has no unborn branch to report and `git log` in the store says where to look."""
        try:
            if (self.path / "HEAD").read_text() == f"ref: {self.HEAD_REF}\n" and self.HEAD_REF in self.repo.references:
                return
        except OSError:
            return
        repo = self.repo
        if self.HEAD_REF not in repo.references:
            sig = pygit2.Signature(*IDENTITY, 0, 0)
            tree = repo.TreeBuilder().write()
            oid = repo.create_commit(None, sig, sig, self.HEAD_MESSAGE, tree, [])
            repo.references.create(self.HEAD_REF, oid, force=True)
        repo.references.create("HEAD", self.HEAD_REF, force=True)

    def inside_workspace(self) -> bool:
        try:
            self.path.resolve().relative_to(self.workspace.resolve())
            return True
        except ValueError:
            return False
