"""Which tree entry names may become files in a workspace. Standard library only.

Nothing that arrives from outside is trusted: a bundle, a remote or a tampered store can hold
trees whose entry names are `..`, contain `/`, or name `.git` (then a restore would plant
`.git/hooks/post-checkout` in the user's repository). The rules follow git's `verify_path`
(read-cache.c) with both `core.protectNTFS` and `core.protectHFS` on, whatever the platform we
run on, because a package made here may be checked out on a Mac or a Windows machine:

* one non-empty component: no `/`, no NUL, not `.` or `..`;
* not `.git` in any case, nor what HFS+ folds to it (`.g\u200cit`: HFS+ ignores some code
  points) nor what NTFS takes for it (`.git.`, `.git  `, `git~1`, `.git::$INDEX_ALLOCATION`,
  and `.git` as a `\\`-separated component);
* a symlink is never `.gitmodules` (or one of its NTFS/HFS+ aliases), as git refuses;
* at the root, never the store directory `.checkpoints` nor the pointer file
  `.task-checkpoint-store.json` (case-insensitively and with the same aliases).

A tree holding any such name is refused as a whole (`check_tree`). Names that are fine for git
but cannot be created on the platform the workspace lives on (Windows-reserved `CON`, `aux.txt`,
trailing dots and spaces, `<>:"|?*\\`, names that collide when case is folded) are a separate
question, answered by `platform_problem` and `fold_key` under `TC_PATH_RULES`
(posix|windows|macos; default from `sys.platform`): such paths are unrestorable here, never
written half-way, but the package itself is valid.
"""
from __future__ import annotations

import os
import re
import unicodedata

from ..base.refs import POINTER_FILE, STORE_DIRNAME  # stdlib-only module: no pygit2 here
from ..base.settings import current

# Directory levels a tree from outside may nest. Deeper trees are refused whole: no real project
# goes near it, a restore walks trees recursively, and a workspace that deep could never be
# saved again (issue 28: a 5,000-deep chain in a bundle made every later save fail).
MAX_TREE_DEPTH = 256
RULES = ("posix", "windows", "macos")

# git's modes for tree entries; anything else is a malformed tree
MODE_TREE, MODE_BLOB, MODE_EXEC, MODE_LINK, MODE_GITLINK = 0o040000, 0o100644, 0o100755, 0o120000, 0o160000
VALID_MODES = {MODE_TREE, MODE_BLOB, MODE_EXEC, MODE_LINK, MODE_GITLINK}

# code points HFS+ drops when comparing names (git utf8.c, next_hfs_char)
_HFS_IGNORED = frozenset([0x200C, 0x200D, 0x200E, 0x200F, 0x202A, 0x202B, 0x202C, 0x202D, 0x202E,
                          0x206A, 0x206B, 0x206C, 0x206D, 0x206E, 0x206F, 0xFEFF])

_WIN_RESERVED = frozenset(["CON", "PRN", "AUX", "NUL", "CONIN$", "CONOUT$"]
                          + [f"{p}{d}" for p in ("COM", "LPT") for d in "123456789\u00b9\u00b2\u00b3"])
_RISKY = re.compile(rb"[~\\/\x00:]")
_WIN_BAD_CHARS = frozenset('<>:"|?*\\')


def rules() -> str:
    """The file-system rules the workspace must obey: TC_PATH_RULES, else the platform's."""
    return current().path_rules_now


# ----------------------------------------------------------------------------- .git and friends
def _hfs_chars(name: bytes) -> list[int] | None:
    """The code points HFS+ compares (ignorable ones dropped); None if not UTF-8 (then HFS+
    percent-encodes it and it cannot alias an ASCII name)."""
    try:
        text = name.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return [ord(c) for c in text if ord(c) not in _HFS_IGNORED]


def _hfs_is(name: bytes, needle: str) -> bool:
    """`name` is `.<needle>` once HFS+ drops ignorable code points and folds ASCII case."""
    cps = _hfs_chars(name)
    if cps is None or len(cps) != len(needle) + 1 or cps[0] != ord("."):
        return False
    return all(c < 128 and chr(c).lower() == n for c, n in zip(cps[1:], needle))


def _only_dots_spaces_then_end(rest: bytes) -> bool:
    """NTFS ignores trailing dots and spaces; `:` starts an alternate data stream."""
    for c in rest:
        if c == ord(":"):
            return True
        if c not in b". ":
            return False
    return True


def _ntfs_is(component: bytes, needle: bytes, short: bytes | None = None) -> bool:
    """`component` is `.<needle>` to NTFS: with trailing dots/spaces or an `:stream`, or as an
    8.3 short name: `<first 6 of needle>~1..4`, or the hashed fallback `<short prefix>~N`
    (git path.c, is_ntfs_dot_generic)."""
    low = component.lower()
    if low.startswith(b"." + needle) and _only_dots_spaces_then_end(low[len(needle) + 1:]):
        return True
    if len(needle) >= 6 and low[:6] == needle[:6] and low[6:7] == b"~" and low[7:8] in (b"1", b"2", b"3", b"4") \
            and _only_dots_spaces_then_end(low[8:]):
        return True
    if short:
        m = re.match(rb"([^~]{1,6})~([1-9][0-9]*)", low[:8])
        if m and m.end() == 8 and short.startswith(m.group(1)) and _only_dots_spaces_then_end(low[8:]):
            return True
    return False


def _ntfs_components(name: bytes) -> list[bytes]:
    # on Windows `\` separates components: `.git\hooks` is `.git/hooks` there
    return name.split(b"\\")


def is_dotgit(name: bytes) -> bool:
    """`.git` as git, NTFS or HFS+ would see it (any case)."""
    if name.lower() == b".git" or _hfs_is(name, "git"):
        return True
    for comp in _ntfs_components(name):
        if comp.lower() == b".git" or _ntfs_is(comp, b"git"):
            return True
        if comp[:5].lower() == b"git~1" and _only_dots_spaces_then_end(comp[5:]):
            return True
    return False


def is_dotgitmodules(name: bytes) -> bool:
    if name.lower() == b".gitmodules" or _hfs_is(name, "gitmodules"):
        return True
    return any(_ntfs_is(c, b"gitmodules", b"gi7eba") for c in _ntfs_components(name))


def _is_reserved_root_name(name: bytes) -> str | None:
    for reserved, what in ((STORE_DIRNAME, "the tc-git store directory"), (POINTER_FILE, "the tc-git store pointer")):
        needle = reserved[1:]
        if name.lower() == reserved.encode() or _hfs_is(name, needle) \
                or any(_ntfs_is(c, needle.encode()) for c in _ntfs_components(name)):
            return what
    return None


# ----------------------------------------------------------------------------- names
def check_tree_name(name: bytes, *, at_root: bool = False, mode: int | None = None) -> str | None:
    """Why `name` (one tree entry's raw name) must never be written, or None if it is fine."""
    if isinstance(name, str):
        name = os.fsencode(name)
    # fast path: a plain ASCII name not starting with '.' and without '~', '\\', '/', NUL or
    # ':' can alias none of the names below (they all start with '.', hold '~' or '\\', or
    # hide behind non-ASCII code points)
    if name and name[0] != 46 and name.isascii() and not _RISKY.search(name):
        return None
    if not name:
        return "empty name"
    if b"\0" in name:
        return "name contains NUL"
    if b"/" in name:
        return "name contains '/' (more than one path component)"
    if name in (b".", b".."):
        return f"name is {name.decode()!r} (leaves its directory)"
    if is_dotgit(name):
        return "name is .git (or what NTFS/HFS+ read as .git): it would write into a git repository"
    if mode == MODE_LINK and is_dotgitmodules(name):
        return ".gitmodules as a symlink (git refuses it)"
    if at_root:
        what = _is_reserved_root_name(name)
        if what:
            return f"name is {what}"
    return None


def check_path(rel, mode: int | None = None) -> str | None:
    """`check_tree_name` for every component of a workspace-relative path ('/'-separated)."""
    raw = os.fsencode(rel) if isinstance(rel, str) else bytes(rel)
    if not raw:
        return "empty path"
    if raw.startswith(b"/"):
        return "absolute path"
    parts = raw.split(b"/")
    for i, part in enumerate(parts):
        why = check_tree_name(part, at_root=(i == 0), mode=mode if i == len(parts) - 1 else MODE_TREE)
        if why:
            return why if len(parts) == 1 else f"{why} (component {i + 1} of {os.fsdecode(raw)!r})"
    return None


# ----------------------------------------------------------------------------- platform rules
def platform_problem(rel, rules_name: str | None = None) -> str | None:
    """Why `rel` cannot be created faithfully under the given rules (None: it can)."""
    r = rules_name or rules()
    if r == "posix":
        return None
    raw = os.fsencode(rel) if isinstance(rel, str) else bytes(rel)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return f"name is not UTF-8: {r} cannot store it"
    for comp in text.split("/"):
        if r == "windows":
            bad = sorted({c for c in comp if c in _WIN_BAD_CHARS or ord(c) < 32})
            if bad:
                return f"{comp!r} holds characters Windows forbids: {''.join(bad)!r}"
            if comp.endswith((".", " ")):
                return f"{comp!r} ends in a dot or space (Windows drops it)"
            base = comp.split(".", 1)[0].rstrip(" ").upper()
            if base in _WIN_RESERVED:
                return f"{comp!r} is a reserved device name on Windows"
    return None


def _upper1(c: str) -> str:
    u = c.upper()
    return u if len(u) == 1 else c  # NTFS's upcase table maps one code unit to one (no 'ß'->'SS')


def fold_key(name, rules_name: str | None = None) -> str | None:
    """The key under which the file system considers two names the same (None: case-sensitive)."""
    r = rules_name or rules()
    if r == "posix":
        return None
    text = os.fsdecode(name) if isinstance(name, bytes) else name
    if r == "macos":  # APFS/HFS+: case- and normalization-insensitive
        text = unicodedata.normalize("NFD", text)
    return "".join(_upper1(c) for c in text)


# ----------------------------------------------------------------------------- whole trees
def check_tree(repo, tree_oid, seen: dict | None = None, limit: int = 20,
               max_blob: int | None = None) -> list[tuple[str, str]]:
    """Every problem in a tree and its subtrees as (path, reason), at most `limit` of them;
    a directory nested deeper than MAX_TREE_DEPTH is one (the walk stops there), and so is a
    file larger than `max_blob` bytes (its size read from the object's header, never inflated).

    `seen` (subtree id -> the deepest level it was found clean at) makes validating thousands
    of commits that share most of their trees cost one walk of what is new; it only grows when
    the whole tree is clean. A subtree clean at level n is clean at any level up to n.
    """
    seen = seen if seen is not None else {}
    visited: dict = {}
    problems: list[tuple[str, str]] = []
    stack = [(tree_oid, b"", True, 0)]
    while stack and len(problems) < limit:
        oid, prefix, at_root, depth = stack.pop()
        if not at_root and seen.get(oid, -1) >= depth:
            continue
        if depth > MAX_TREE_DEPTH:
            problems.append((os.fsdecode(prefix[:200]) + "...", f"directories nested deeper than {MAX_TREE_DEPTH} "
                             "levels (no workspace can hold it)"))
            continue
        try:
            tree = repo[oid]
            entries = list(tree)
        except Exception as e:  # a tree libgit2 cannot parse is as hostile as a bad name
            problems.append((os.fsdecode(prefix) or "/", f"unreadable tree {str(oid)[:12]}: {e}"))
            continue
        if getattr(tree, "type_str", "tree") != "tree":
            problems.append((os.fsdecode(prefix) or "/", f"{str(oid)[:12]} is not a tree"))
            continue
        names: set[bytes] = set()
        for ent in entries:
            raw = getattr(ent, "raw_name", None) or os.fsencode(ent.name)
            path = prefix + raw
            mode = ent.filemode
            why = check_tree_name(raw, at_root=at_root, mode=mode)
            if why is None and raw in names:
                why = "duplicate entry name"
            if why is None and mode not in VALID_MODES:
                why = f"invalid mode {mode:o}"
            if why is None and max_blob is not None and mode in (MODE_BLOB, MODE_EXEC, MODE_LINK):
                size = _blob_size(repo, ent.id)
                if size is None or size > max_blob:
                    why = (f"a file of {size} bytes, over the {max_blob}-byte limit (TC_MAX_FILE_BYTES)"
                           if size is not None else "unreadable file object")
            names.add(raw)
            if why:
                problems.append((os.fsdecode(path), why))
                if len(problems) >= limit:
                    break
                continue
            if mode == MODE_TREE:
                stack.append((ent.id, path + b"/", False, depth + 1))
        if not at_root:
            visited[oid] = max(depth, visited.get(oid, -1))
    if not problems:
        for oid, depth in visited.items():
            seen[oid] = max(depth, seen.get(oid, -1))
    return problems


def _blob_size(repo, oid) -> int | None:
    """A blob's size from its object header (libgit2 reads the header only, for a delta the
    size its data states), or None when it is missing or not a blob."""
    try:
        kind, size = repo.odb.read_header(oid)
    except Exception:  # noqa: BLE001 - missing or corrupt: as hostile as too big
        return None
    return size if int(kind) == 3 else None  # 3: OBJ_BLOB


def describe(problems: list[tuple[str, str]], cap: int = 5) -> str:
    return "; ".join(f"{p!r}: {why}" for p, why in problems[:cap]) + (
        f" (and {len(problems) - cap} more)" if len(problems) > cap else "")


def check_history(repo, tips, have=lambda oid: False, limit: int = 20,
                  max_blob: int | None = None) -> list[tuple[str, str, str]]:
    """Every problem in the trees of the commits reachable from `tips`, down to commits `have`
    says are already trusted: [(commit hex, path, reason)]. Tags are peeled; subtrees shared by
    many commits are walked once. `max_blob`: see check_tree."""
    seen: dict = {}
    done: set = set()
    problems: list[tuple[str, str, str]] = []
    stack = list(tips)
    while stack and len(problems) < limit:
        oid = stack.pop()
        if oid in done or have(oid):
            continue
        done.add(oid)
        try:
            obj = repo[oid]
        except Exception as e:  # missing or unparsable: hostile too
            problems.append((str(oid), "", f"unreadable object ({e})"))
            continue
        kind = getattr(obj, "type_str", "")
        if kind == "tag":
            stack.append(obj.target)
            continue
        if kind == "tree":
            found = check_tree(repo, obj.id, seen, limit - len(problems), max_blob)
        elif kind == "commit":
            found = check_tree(repo, obj.tree_id, seen, limit - len(problems), max_blob)
            stack.extend(obj.parent_ids)
        else:
            continue
        problems.extend((str(oid), p, why) for p, why in found)
    return problems
