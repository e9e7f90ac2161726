"""What the engine accepts from any caller (MCP, CLI, hooks): text, ids, sizes, types, roots;
and how failures of the machine (full disk, permissions, read-only file system, paths too
deep) become errors that say what to do.

Every rule raises a `TcError` (errors.py), so each front end reports it the same way:
MCP `isError`, CLI exit 2. Standard library only (the CLI and hook paths import it cheaply).

Limits (documented in docs/architecture.md, "Trust boundary"):
* titles and names: at most TITLE_MAX (500) characters, one line, no control characters;
* other text fields (description, conclusion, next, goal, constraints, messages): at most
  TEXT_MAX (64 KiB of UTF-8), control characters refused except newline and tab;
* list fields (verified, open_questions, exclude): at most LIST_MAX (100) items, each at most
  ITEM_MAX (4 KiB) on one line;
* booleans must be booleans and integers integers (`"yes"`, `1` and `"3"` are refused).
"""
from __future__ import annotations

import errno
import functools
import os
import re
from pathlib import Path

from .errors import BadInput, NotFound, TcError, UnsafeRoot

TITLE_MAX = 500
TEXT_MAX = 64 * 1024
LIST_MAX = 100
ITEM_MAX = 4 * 1024

# C0 controls, DEL and C1 controls. Newline and tab are allowed in long text only.
_CTRL_LINE = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_CTRL_TEXT = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def _show(ch: str) -> str:
    return {"\x00": "NUL", "\n": "newline", "\r": "carriage return", "\x1b": "ESC"}.get(ch, f"U+{ord(ch):04X}")


def text(value, name: str, *, max_len: int = TEXT_MAX, multiline: bool = True, required: bool = False,
         none_ok: bool = True) -> str:
    """A text field: str, valid Unicode, bounded, without control characters."""
    if value is None and none_ok and not required:
        return ""
    if not isinstance(value, str):
        raise BadInput(f"{name} must be a string, got {type(value).__name__}")
    if required and not value.strip():
        raise BadInput(f"{name} is required and must not be blank")
    bad = (_CTRL_TEXT if multiline else _CTRL_LINE).search(value)
    if bad:
        what = _show(bad.group())
        hint = "" if multiline else " (this field is one line)"
        raise BadInput(f"{name} contains a control character ({what}) at position {bad.start()}: "
                       f"remove it{hint}")
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError as e:
        raise BadInput(f"{name} is not valid Unicode (an unpaired surrogate at position {e.start}): "
                       "send UTF-8 text") from None
    if multiline and size > max_len:
        raise BadInput(f"{name} is {size} bytes; the limit is {max_len} bytes ({max_len // 1024} KiB): "
                       "shorten it (put long material in a file in the workspace and refer to it)")
    if not multiline and len(value) > max_len:
        raise BadInput(f"{name} is {len(value)} characters; the limit is {max_len}: shorten it")
    return value


def title(value, name: str = "title", required: bool = True) -> str:
    return text(value, name, max_len=TITLE_MAX, multiline=False, required=required)


def strings(value, name: str, *, max_items: int = LIST_MAX, item_max: int = ITEM_MAX) -> list[str]:
    """A list of one-line strings (None = empty)."""
    if value is None:
        return []
    if isinstance(value, str) or not isinstance(value, (list, tuple)):
        raise BadInput(f"{name} must be a list of strings")
    if len(value) > max_items:
        raise BadInput(f"{name} has {len(value)} items; the limit is {max_items}: keep the important ones")
    return [text(v, f"{name}[{i}]", max_len=item_max, multiline=False, none_ok=False)
            for i, v in enumerate(value)]


def boolean(value, name: str) -> bool:
    if not isinstance(value, bool):
        raise BadInput(f"{name} must be true or false, got {value!r}")
    return value


def integer(value, name: str, lo: int | None = None, hi: int | None = None, none_ok: bool = False):
    if value is None and none_ok:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadInput(f"{name} must be an integer, got {value!r}")
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        rng = f">= {lo}" if hi is None else f"from {lo} to {hi}"
        raise BadInput(f"{name} must be an integer {rng}, got {value}")
    return value


def ident(value, name: str, pattern: re.Pattern, what: str, none_ok: bool = True):
    """An id (task id, drift id, milestone name): a string matching `pattern`."""
    if value is None and none_ok:
        return None
    if not isinstance(value, str):
        raise BadInput(f"{name} must be a string, got {type(value).__name__}")
    text(value, name, max_len=TITLE_MAX, multiline=False)
    if not pattern.fullmatch(value):
        raise BadInput(f"invalid {name} {value!r}: {what}")
    return value


# ------------------------------------------------------------------------------------- roots
SYSTEM_DIRS = ("/dev", "/proc", "/sys", "/run")


def git_dir_of(p: Path) -> Path | None:
    """The git directory `p` is, or is inside: a `.git` component (any case), or a directory
    laid out as one (HEAD file + objects/ + refs/: a bare repository or a tc-git store)."""
    for a in (p, *p.parents):
        if a.name.casefold() == ".git":
            return a
        try:
            if (a / "HEAD").is_file() and (a / "objects").is_dir() and (a / "refs").is_dir():
                return a
        except OSError:
            continue
    return None


def root(value) -> Path:
    """Resolve and validate a workspace root; never creates it."""
    if value is None or (isinstance(value, str) and value.strip() == ""):
        raise BadInput("root is empty: pass the workspace directory (absolute path)")
    if not isinstance(value, (str, os.PathLike)):
        raise BadInput(f"root must be a path string, got {type(value).__name__}")
    raw = os.fspath(value)
    if isinstance(raw, bytes):
        raw = os.fsdecode(raw)
    if "\x00" in raw:
        raise BadInput("root contains a NUL character: pass the workspace directory as a plain path")
    try:
        p = Path(os.path.expanduser(raw)).resolve()
        exists, is_dir = p.exists(), p.is_dir()
    except (OSError, RuntimeError, ValueError) as e:
        raise UnsafeRoot(f"root {raw!r} cannot be resolved ({e}): pass an existing workspace directory") from None
    if not exists:
        raise UnsafeRoot(f"root does not exist: {p}. Create it first or pass an existing workspace directory")
    if not is_dir:
        raise UnsafeRoot(f"root is not a directory: {p}. Pass the workspace directory, not a file")
    if p == Path(p.anchor):
        raise UnsafeRoot("root is the filesystem root '/': refusing to checkpoint the whole disk; pass a project directory")
    home = Path(os.path.expanduser("~")).resolve()
    if p == home:
        raise UnsafeRoot(f"root is the home directory {p}: refusing; pass a project directory inside it")
    if p in home.parents:
        raise UnsafeRoot(f"root {p} contains the home directory {home}: refusing; pass a project directory")
    for sysdir in SYSTEM_DIRS:
        s = Path(sysdir)
        if p == s or s in p.parents:
            raise UnsafeRoot(f"root {p} is under {sysdir}, a system directory (devices, kernel or runtime "
                             "state): refusing; pass a project directory")
    g = git_dir_of(p)
    if g is not None:
        kind = "a tc-git store" if (g / "tc").is_dir() else "a git directory"
        raise UnsafeRoot(f"root {p} is inside {kind} ({g}), not a workspace: pass the project directory "
                         f"that holds it")
    return p


# ------------------------------------------------------------------------------------- OS errors
_OS_ADVICE = {
    errno.ENOSPC: ("no_space", "the disk is full ({where}): free space (or compress old drifts), then retry; "
                               "nothing was recorded"),
    getattr(errno, "EDQUOT", -1): ("no_space", "the disk quota is exhausted ({where}): free space, then retry"),
    errno.EROFS: ("read_only", "the file system is read-only ({where}): remount it read-write, or keep the "
                               "store elsewhere with TC_STORE / --store"),
    errno.EACCES: ("permission", "permission denied ({where}): fix the permissions (the user running tc-git "
                                 "must be able to read the workspace and write the store), then retry"),
    errno.EPERM: ("permission", "operation not permitted ({where}): fix the permissions or attributes "
                                "(immutable file?), then retry"),
    errno.ENAMETOOLONG: ("too_deep", "a path is too long or nested too deeply ({where}): shorten it, or "
                                     "exclude that directory (init's exclude)"),
    errno.ELOOP: ("too_deep", "too many levels of symbolic links ({where}): fix or exclude that link"),
    errno.EMFILE: ("unavailable", "too many open files ({where}): close other programs or raise the limit"),
}
_GIT_MESSAGES = (("no space left", errno.ENOSPC), ("disk quota", getattr(errno, "EDQUOT", -1)),
                 ("read-only file system", errno.EROFS), ("permission denied", errno.EACCES),
                 ("file name too long", errno.ENAMETOOLONG), ("path too long", errno.ENAMETOOLONG),
                 ("nesting too deep", errno.ENAMETOOLONG))
GIT_MAX_DEPTH = 100  # libgit2's limit on directory nesting in a tree


class SystemFault(TcError):
    """The machine refused (full disk, permissions, read-only file system, depth). `code` says
    which; the message says what to do."""

    def __init__(self, message: str, code: str):
        super().__init__(message)
        self.code = code


def as_tc_error(e: BaseException) -> TcError | None:
    """The actionable error for an OSError / libgit2 error / recursion limit, or None."""
    if isinstance(e, TcError):
        return e
    if isinstance(e, RecursionError):
        return SystemFault("the workspace is nested too deeply to walk (recursion limit): exclude the deep "
                           "directory (tc-git init --exclude) or flatten it", "too_deep")
    num, where = None, ""
    if isinstance(e, OSError) and e.errno in _OS_ADVICE:
        num = e.errno
        where = e.filename if e.filename is not None else e.strerror or ""
        where = os.fsdecode(where) if isinstance(where, bytes) else str(where)
    elif isinstance(e, OSError) or type(e).__name__ in ("GitError", "GitCallError") or "pygit2" in type(e).__module__:
        # libgit2 reports I/O failures as OSError/GitError without an errno: read its message
        msg = str(e).lower()
        for needle, n in _GIT_MESSAGES:
            if needle in msg:
                num, where = n, str(e)[:200]
                break
    if num not in _OS_ADVICE:
        return None
    code, advice = _OS_ADVICE[num]
    return SystemFault(advice.format(where=where or "unknown path"), code)


SPACE_PROBE = 16 << 20  # what a write path may need at once; less than this free is "full"


def space_fault(path) -> SystemFault | None:
    """The no_space fault when the file system holding `path` (a directory) cannot take
    SPACE_PROBE more bytes (ENOSPC) or the user's quota is exhausted (EDQUOT), else None.
    libgit2 reports a full disk met while writing an object as "object not found" or "failed
    to find pack entry" (the next backend's lookup overwrites the error): a failure whose cause
    is unknown is checked here, with a probe file allocated (never written) and removed."""
    path = os.fspath(path)
    if not os.path.isdir(path):
        return None
    probe = os.path.join(path, f".tc-space-probe-{os.getpid()}")
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as e:
        return _space(e.errno, path)
    try:
        os.posix_fallocate(fd, 0, SPACE_PROBE)
    except OSError as e:
        return _space(e.errno, path)
    finally:
        os.close(fd)
        try:
            os.unlink(probe)
        except OSError:
            pass
    return None


def _space(num, where: str) -> SystemFault | None:
    if num not in (errno.ENOSPC, getattr(errno, "EDQUOT", -1)):
        return None
    code, advice = _OS_ADVICE[num]
    return SystemFault(advice.format(where=where), code)


def guard(fn):
    """Turn machine failures inside an engine call into SystemFault (never a raw traceback)."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except TcError:
            raise
        except Exception as e:  # OSError, RecursionError, pygit2.GitError
            mapped = as_tc_error(e)
            if mapped is None and (isinstance(e, OSError) or type(e).__name__ == "GitCallError"
                                   or "pygit2" in type(e).__module__):
                store = getattr(getattr(args[0], "store", None), "path", None) if args else None
                mapped = space_fault(store) if store is not None else None
            if mapped is None:
                raise
            root = getattr(args[0], "root", None) if args else None
            if mapped.code == "too_deep" and isinstance(root, Path):
                deep = too_deep(root)
                if deep:
                    mapped = SystemFault(f"{deep} goes deeper than {GIT_MAX_DEPTH} directory levels, more than "
                                         "git can record: add it (or a parent) to .gitignore, or flatten it; "
                                         "nothing was recorded", "too_deep")
            raise mapped from e
    return wrapper


def path_arg(value, name: str, required: bool = True):
    """A file-system path given by a caller (export destination, bundle, transcript)."""
    if value is None and not required:
        return None
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not isinstance(value, str) or (required and not value.strip()):
        raise BadInput(f"{name} must be a non-empty path string")
    if "\x00" in value:
        raise BadInput(f"{name} contains a NUL character: pass a plain path")
    if len(value) > 4096:
        raise BadInput(f"{name} is {len(value)} characters long; the limit is 4096")
    return value



def out_file(root: Path, value: str, name: str = "out") -> Path:
    """Where a caller wants a result file written (`~` expanded, relative to the workspace): its
    directory must exist, and never into a git directory or a store, never through a link."""
    p = Path(os.path.expanduser(path_arg(value, name)))
    p = p if p.is_absolute() else root / p
    if not p.parent.is_dir():
        raise NotFound(f"directory does not exist: {p.parent}")
    g = git_dir_of(p.parent.resolve())
    if g is not None or p.is_symlink():  # never into .git/hooks or a store, never through a link
        raise BadInput(f"{name} {p} is {'inside the git directory ' + str(g) if g else 'a symbolic link'}: "
                       "write it somewhere else")
    return p

def too_deep(root: Path, limit: int = GIT_MAX_DEPTH - 2) -> str | None:
    """The first directory (relative to root) at `limit` levels, if any; for the error message."""
    stack = [(os.fspath(root), 0)]
    while stack:
        d, depth = stack.pop()
        try:
            with os.scandir(d) as it:
                subs = [x.path for x in it if x.is_dir(follow_symlinks=False) and x.name != ".git"]
        except OSError:
            continue
        for x in subs:
            if depth + 1 >= limit:
                return os.path.relpath(x, root)
            stack.append((x, depth + 1))
    return None
