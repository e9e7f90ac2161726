"""Find the workspace a command run from `start` belongs to, the way git finds its repository.

Walk up from `start` to the first directory that holds a tc-git store (`.checkpoints/` that
tc-git created, or the seed's pointer file `.task-checkpoint-store.json`). Like git, the walk
stops at a filesystem boundary (unless TC_DISCOVERY_ACROSS_FILESYSTEM=1) and at any directory
named in TC_CEILING_DIRECTORIES (colon-separated; the walk does not look at or above them).
With TC_STORE set, the workspaces are the ones that store knows (its `tc/active.json`).
`store_dir` says where a workspace's store is ($TC_STORE, the pointer file, or
`.checkpoints`): the one rule `store.locate` (which then applies the trust rules) and the hooks use.
Stdlib only: the hooks and the CLI call it before anything heavy is imported.
"""
from __future__ import annotations

import json
import os
import stat
from pathlib import Path

from .errors import BadInput, UnsafeRoot
from .refs import POINTER_FILE, STORE_DIRNAME


def _is_store(d: Path) -> bool:
    """A directory tc-git created: a bare repository with our `tc/` state directory. A symlink
    named `.checkpoints` (planted in a cloned repository) does not count."""
    try:
        st = os.lstat(d)
    except OSError:
        return False
    return (stat.S_ISDIR(st.st_mode) and (d / "HEAD").is_file() and (d / "objects").is_dir()
            and (d / "tc").is_dir())


def _known_workspaces() -> set[str] | None:
    env = os.environ.get("TC_STORE")
    if not env:
        return None
    try:
        active = json.loads((Path(os.path.expanduser(env)) / "tc" / "active.json").read_text())
    except (OSError, ValueError):
        return set()
    return {str(k) for k in active} if isinstance(active, dict) else set()


def is_workspace(d: Path, known: set[str] | None = None) -> bool:
    if known is not None:
        return d.as_posix() in known
    return _is_store(d / STORE_DIRNAME) or (d / POINTER_FILE).is_file()


def find_workspace(start: str | os.PathLike) -> Path | None:
    """The nearest workspace at or above `start`, or None."""
    here = Path(os.path.abspath(os.path.expanduser(str(start))))
    try:
        here = here.resolve()
        dev = here.stat().st_dev
    except OSError:
        return None
    across = os.environ.get("TC_DISCOVERY_ACROSS_FILESYSTEM", "").lower() in ("1", "true", "yes")
    ceilings = set()
    for c in (os.environ.get("TC_CEILING_DIRECTORIES") or "").split(os.pathsep):
        if c.strip():
            try:
                ceilings.add(Path(os.path.expanduser(c)).resolve())
            except OSError:
                pass
    known = _known_workspaces()
    d = here
    while True:
        if d in ceilings:
            return None
        if is_workspace(d, known):
            return d
        parent = d.parent
        if parent == d:
            return None
        try:
            if not across and parent.stat().st_dev != dev:
                return None  # a mount point: like git, do not look beyond the filesystem we started on
        except OSError:
            return None
        d = parent


def store_dir(root: Path) -> tuple[Path, str]:
    """Where the store of workspace `root` is, and why: ("TC_STORE" | "pointer" | "default").
    $TC_STORE is the caller's, relative to the process's directory; a pointer's path is relative
    to the workspace, never to the process's directory. Nothing is checked beyond reading the
    pointer: `store.check_location` applies the trust rules."""
    env = os.environ.get("TC_STORE")
    if env:
        return Path(os.path.abspath(user_path(env, Path.cwd(), "TC_STORE"))), "TC_STORE"
    pointer = root / POINTER_FILE
    if os.path.islink(pointer):
        raise UnsafeRoot(f"pointer file {pointer} is a symbolic link: refusing it; delete it (a pointer is a "
                         "small JSON file tc-git writes)")
    if pointer.is_file():
        try:
            value = json.loads(pointer.read_text())["store"]
            if not isinstance(value, str) or not value or "\x00" in value:
                raise ValueError("store must be a non-empty path string")
        except (ValueError, KeyError, TypeError, OSError) as e:
            raise BadInput(f"pointer file {pointer} is unreadable ({e}); fix or delete it") from e
        return root / os.path.expanduser(value), "pointer"
    return root / STORE_DIRNAME, "default"


def user_path(value, root: Path, name: str) -> Path:
    """A directory path someone gave (`--store`, $TC_STORE, a pointer), relative to `root`."""
    if not isinstance(value, (str, os.PathLike)) or "\x00" in os.fspath(value):
        raise BadInput(f"{name} must be a plain directory path")
    return root / os.path.expanduser(os.fspath(value))
