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
import time
from pathlib import Path

import pygit2
from pygit2.enums import Option

from . import lockfile
from .errors import BadInput, StoreBusy, UnsafeRoot
from .fsutil import atomic_write  # noqa: F401  (re-exported: engine, handoff)

STORE_DIRNAME = ".checkpoints"
POINTER_FILE = ".task-checkpoint-store.json"  # the seed's pointer name, kept for drop-in use
IDENTITY = ("tc-git", "tc-git@localhost")
ATTRIBUTES = "* -text -filter -ident -working-tree-encoding -eol\n"

# libgit2 refuses repositories owned by another uid (bind mounts, containers); the store is
# ours by construction, so the check only gets in the way.
pygit2.option(Option.SET_OWNER_VALIDATION, 0)


def check_root(root: str | os.PathLike) -> Path:
    """Resolve and validate a workspace root; never creates it."""
    if root is None or str(root).strip() == "":
        raise BadInput("root is empty: pass the workspace directory (absolute path)")
    p = Path(os.path.expanduser(str(root))).resolve()
    if not p.exists():
        raise UnsafeRoot(f"root does not exist: {p}. Create it first or pass an existing workspace directory")
    if not p.is_dir():
        raise UnsafeRoot(f"root is not a directory: {p}. Pass the workspace directory, not a file")
    if p == Path(p.anchor):
        raise UnsafeRoot("root is the filesystem root '/': refusing to checkpoint the whole disk; pass a project directory")
    if p == Path.home().resolve():
        raise UnsafeRoot(f"root is the home directory {p}: refusing; pass a project directory inside it")
    if p.name == STORE_DIRNAME or (p / "HEAD").is_file() and (p / "objects").is_dir() and (p / "tc").is_dir():
        raise UnsafeRoot(f"root {p} is a tc-git store, not a workspace")
    return p


def locate(root: Path, store: str | None = None) -> tuple[Path, bool]:
    """Where the store of `root` lives: explicit > $TC_STORE > pointer file > default.

    Returns (path, explicit) where explicit means a pointer file should record it.
    """
    if store:
        return Path(os.path.expanduser(store)).resolve(), True
    env = os.environ.get("TC_STORE")
    if env:
        return Path(os.path.expanduser(env)).resolve(), True
    pointer = root / POINTER_FILE
    if pointer.is_file():
        try:
            return Path(json.loads(pointer.read_text())["store"]).resolve(), False
        except (ValueError, KeyError, TypeError, OSError) as e:
            raise BadInput(f"pointer file {pointer} is unreadable ({e}); fix or delete it") from e
    return root / STORE_DIRNAME, False


class Store:
    """One private repository, attached to one workspace for the life of this object."""

    def __init__(self, path: Path, workspace: Path):
        self.path = path
        self.workspace = workspace
        self._repo: pygit2.Repository | None = None
        self._lock_fd: int | None = None
        self._lock_depth = 0

    # -- creation ---------------------------------------------------------------------------
    @property
    def exists(self) -> bool:
        return (self.path / "HEAD").is_file() and (self.path / "objects").is_dir()

    def create(self) -> None:
        """Create and harden the store (idempotent; repairs a half-created one)."""
        if self.path.exists() and not self.path.is_dir():
            raise UnsafeRoot(f"store path {self.path} exists and is not a directory")
        if self.path.resolve() == self.workspace.resolve():
            raise BadInput("store must not be the workspace itself; pass a separate directory")
        old_umask = os.umask(0o077)
        try:
            self.path.mkdir(mode=0o700, parents=True, exist_ok=True)
            os.chmod(self.path, 0o700)
            if not self.exists:
                pygit2.init_repository(str(self.path), bare=True)
            repo = pygit2.Repository(str(self.path))
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
            (self.path / "tc").mkdir(mode=0o700, exist_ok=True)
            (self.path / "description").write_text("tc-git private checkpoint store\n")
        finally:
            os.umask(old_umask)

    # -- access -----------------------------------------------------------------------------
    @property
    def repo(self) -> pygit2.Repository:
        if self._repo is None:
            repo = pygit2.Repository(str(self.path), pygit2.enums.RepositoryOpenFlag.NO_SEARCH)
            repo.workdir = str(self.workspace)
            self._repo = repo
        return self._repo

    def reopen(self) -> pygit2.Repository:
        """Drop cached handles (after another process may have written packs or refs)."""
        if self._repo is not None:
            self._repo.free()
        self._repo = None
        return self.repo

    @property
    def state_dir(self) -> Path:
        d = self.path / "tc"
        d.mkdir(mode=0o700, exist_ok=True)
        return d

    # -- lock -------------------------------------------------------------------------------
    @contextlib.contextmanager
    def lock(self, timeout: float | None = None):
        """Serialise writers across processes (re-entrant within this object).

        Waits up to `timeout` seconds (TC_LOCK_TIMEOUT, default 30), then fails with StoreBusy.
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
            timeout = float(os.environ.get("TC_LOCK_TIMEOUT", "30"))
        try:
            fd = lockfile.acquire(self.path / "lock", timeout)
        except lockfile.Busy:
            raise StoreBusy(
                f"store busy: another tc-git operation has held {self.path / 'lock'} for over "
                f"{timeout:.0f}s; wait for it to finish and retry"
            ) from None
        self._lock_fd, self._lock_depth = fd, 1
        try:
            self._remove_stale_git_locks()
            self.reopen()
            yield
        finally:
            self._lock_depth = 0
            self._lock_fd = None
            lockfile.release(fd)

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
        return self.read_json("active.json", {}).get(self.workspace.as_posix())

    def set_active_task(self, task_id: str | None) -> None:
        with self.lock():
            active = self.read_json("active.json", {})
            if task_id is None:
                active.pop(self.workspace.as_posix(), None)
            else:
                active[self.workspace.as_posix()] = task_id
            self.write_json("active.json", active)

    def inside_workspace(self) -> bool:
        try:
            self.path.resolve().relative_to(self.workspace.resolve())
            return True
        except ValueError:
            return False
