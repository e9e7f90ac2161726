"""Find the workspace a command run from `start` belongs to, the way git finds its repository.

Walk up from `start` to the first directory that holds a tc-git store (`.checkpoints/` that
tc-git created, or the seed's pointer file `.task-checkpoint-store.json`). Like git, the walk
stops at a filesystem boundary (unless TC_DISCOVERY_ACROSS_FILESYSTEM=1) and at any directory
named in TC_CEILING_DIRECTORIES (colon-separated; the walk does not look at or above them).
With TC_STORE set, the workspaces are the ones that store knows (its `tc/active.json`).
`store_dir` says where a workspace's store is ($TC_STORE, the pointer file, or
`.checkpoints`): the one rule `store.locate` (which then applies the trust rules) and the hooks use.
Ownership (like git's safe.directory, CVE-2022-24765): a store or pointer file is used only if
the current user owns it and neither group nor others can write it, unless TC_SAFE_STORES lists
it (`untrusted`); discovery that reaches another one stops with UntrustedStore.
Stdlib only: the hooks and the CLI call it before anything heavy is imported.
"""
from __future__ import annotations

import contextlib
import json
import os
import stat
from pathlib import Path

from ..base.errors import BadInput, UnsafeRoot, UntrustedStore
from ..base.recordrules import user_store_path
from ..base.refs import POINTER_FILE, STORE_DIRNAME
from ..base.settings import current

SAFE_STORES_ENV = "TC_SAFE_STORES"


def _user_name(uid: int) -> str:
    try:
        import pwd

        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except (ImportError, KeyError):
        return f"uid {uid}"


def _trusted(path: str, workspace: str | None) -> bool:
    """TC_SAFE_STORES: store directories (or the workspaces holding them) to use though another
    user owns them or others can write them, separated like PATH; `*` trusts every store."""
    entries = current().safe_stores
    if "*" in entries:
        return True
    wanted = {os.path.realpath(path)} | ({os.path.realpath(workspace)} if workspace else set())
    return any(os.path.realpath(os.path.expanduser(e)) in wanted for e in entries)


def untrusted(path: str | os.PathLike, what: str, workspace: str | os.PathLike | None = None) -> UntrustedStore | None:
    """Why `path` (a store directory or a pointer file; `what` names it) must not be used, or
    None: it does not exist, it is the current user's and only theirs to write, or TC_SAFE_STORES
    trusts it. Another user's store could hand the agent instructions (SessionStart injects its
    goal and next step) and read everything saved into it."""
    if not hasattr(os, "geteuid"):  # (no uids to compare: Windows)
        return None
    path, workspace = os.fspath(path), (os.fspath(workspace) if workspace is not None else None)
    try:
        st = os.stat(path)
    except OSError:
        return None
    me = os.geteuid()
    if st.st_uid != me:
        why = f"it is owned by {_user_name(st.st_uid)}, not by you ({_user_name(me)})"
        fix = (f"; or leave it alone and keep your own store: work outside {workspace} or run `tc-git init` "
               "in your project") if workspace else ""
    elif st.st_mode & 0o022:
        why = f"group or other users can write it (mode {stat.S_IMODE(st.st_mode):04o})"
        fix = f"; or make it yours alone: chmod go-w {path}"
    else:
        return None
    if _trusted(path, workspace):
        return None
    return UntrustedStore(
        f"refusing the {what} {path}: {why}. Another user's store can feed your agent instructions and read "
        f"what you save. If you trust it, add it to {SAFE_STORES_ENV} (export {SAFE_STORES_ENV}={path}; "
        f"'*' trusts every store){fix}", path, workspace)


def check_workspace(root: Path) -> None:
    """Raise UntrustedStore if the store (or pointer file) that makes `root` a workspace is not
    the current user's alone (see `untrusted`)."""
    pointer = root / POINTER_FILE
    err = untrusted(pointer, "pointer file", root) if os.path.lexists(pointer) else \
        untrusted(root / STORE_DIRNAME, "tc-git store", root)
    if err is not None:
        raise err


def check_user_store() -> None:
    """The user-level store ($XDG_DATA_HOME/tc-git/store) and its directory, checked the same way."""
    path = user_store_path()
    for p in (path.parent, path):
        err = untrusted(p, "user-level store directory" if p != path else "user-level store")
        if err is not None:
            raise err


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
    env = current().store
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
    """The nearest workspace at or above `start`, or None. Raises UntrustedStore when that
    workspace's store (or pointer file) is another user's or writable by others: discovery
    stops there, as git's does at a repository it does not consider safe."""
    here = Path(os.path.abspath(os.path.expanduser(str(start))))
    try:
        here = here.resolve()
        dev = here.stat().st_dev
    except OSError:
        return None
    s = current()
    across = s.across_filesystems
    ceilings = set()
    for c in s.ceilings:
        if c:
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
            if known is None:  # (with TC_STORE the store is the caller's; store.check_location checks it)
                check_workspace(d)
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


HERE = "."  # active.json's key for the workspace a store inside it belongs to


def store_inside(store, root) -> bool:
    """Whether the store directory lies inside the workspace `root` (both resolved paths)."""
    store, root = os.fspath(store), os.fspath(root)
    return store.startswith(root.rstrip(os.sep) + os.sep)


def active_task_of(active: dict, root, store) -> str | None:
    """The active task of workspace `root` in a store's `tc/active.json`. A store inside its
    workspace (`.checkpoints/`) belongs to it wherever it is moved or copied: its key is "."
    (then, for stores written before that, the absolute path, or the one entry there is); a
    store elsewhere (TC_STORE, a pointer) serves workspaces by absolute path."""
    root_s = Path(root).as_posix()
    if store_inside(store, root):
        task = active.get(HERE) or active.get(root_s)
        if task is None and len(active) == 1:
            task = next(iter(active.values()))
    else:
        task = active.get(root_s)
    return task if isinstance(task, str) else None


def store_dir(root: Path) -> tuple[Path, str]:
    """Where the store of workspace `root` is, and why: ("TC_STORE" | "pointer" | "default").
    $TC_STORE is the caller's, relative to the process's directory; a pointer's path is relative
    to the workspace, never to the process's directory. Nothing is checked beyond reading the
    pointer: `store.check_location` applies the trust rules."""
    env = current().store
    if env:
        return Path(os.path.abspath(user_path(env, Path.cwd(), "TC_STORE"))), "TC_STORE"
    pointer = root / POINTER_FILE
    if os.path.islink(pointer):
        raise UnsafeRoot(f"pointer file {pointer} is a symbolic link: refusing it; delete it (a pointer is a "
                         "small JSON file tc-git writes)")
    if pointer.is_file():
        err = untrusted(pointer, "pointer file", root)
        if err is not None:
            raise err
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


# ------------------------------------------------------------------ copies (issue 29)
LOCATION_FILE = "location.json"  # <store>/tc/: the directory the store was last seen as


def _location_path(store) -> str:
    return os.path.join(os.fspath(store), "tc", LOCATION_FILE)


def _write_location(store, rec: dict) -> None:
    path = _location_path(store)
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(rec, f)
        os.replace(tmp, path)
    except OSError:  # (a read-only store: nothing remembered, nothing said)
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def _here(store) -> dict | None:
    try:
        st = os.stat(store)
    except OSError:
        return None
    return {"path": os.path.realpath(store), "dev": st.st_dev, "ino": st.st_ino}


def note_location(store) -> None:
    """Record where a new store is (`tc/location.json`: its path, device and inode), unless it
    is recorded already: `copied_from` compares later sightings with it."""
    if not os.path.exists(_location_path(store)):
        here = _here(store)
        if here is not None:
            _write_location(store, here)


def copied_from(store) -> str | None:
    """The store's original path, once, when this store is a copy of it (`cp -a` of the
    project: the store is now in two places). A store seen at another path than its record's,
    while that path still holds a directory with the recorded device and inode, is a copy; one
    whose recorded path is gone (or holds something else) was moved, and is just recorded where
    it is now, as is the copy after it has said so (so the notice comes once, and the original
    never says it). Stdlib only (the SessionStart hook calls it); a few file reads."""
    here = _here(store)
    if here is None:
        return None
    try:
        with open(_location_path(store), encoding="utf-8") as f:
            rec = json.load(f)
    except (OSError, ValueError):
        rec = None
    if not isinstance(rec, dict) or not isinstance(rec.get("path"), str):
        _write_location(store, here)  # (a store made before this record: from now on)
        return None
    if rec["path"] == here["path"] and (rec.get("dev"), rec.get("ino")) == (here["dev"], here["ino"]):
        return None
    src = None
    if rec["path"] != here["path"]:
        try:
            st = os.stat(rec["path"])
            if (st.st_dev, st.st_ino) == (rec.get("dev"), rec.get("ino")) and \
                    os.path.isdir(os.path.join(rec["path"], "tc")):
                src = rec["path"]
        except OSError:
            pass
    _write_location(store, here)
    return src


def copy_notice(src: str) -> str:
    """What a copy says (resume, the SessionStart hook)."""
    orig = os.path.dirname(src) if os.path.basename(src) == STORE_DIRNAME else src
    return (f"tc-git: this project's checkpoint store was copied from {orig}; saves here are independent of "
            "the original (each copy keeps its own timeline from here on).")
