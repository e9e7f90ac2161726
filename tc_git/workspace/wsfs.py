"""Writes and deletes inside a workspace that may change under our feet. Standard library only
(and libc's renameat2 through `_native`, loaded on first use).

A path string is resolved again by the kernel on every use, so a directory swapped for a symlink
between two calls redirects a delete or a write outside the workspace. Here every parent is
opened component by component from the workspace root's descriptor with
`O_DIRECTORY | O_NOFOLLOW`, and every write, rename, unlink and rmdir is relative to the
descriptor of its parent: a link in the way is an error, never followed. Decisions use lstat
semantics (`follow_symlinks=False` on the parent's descriptor).

A write goes to a fresh temporary sibling, is checked (all bytes written, fsync'd when large or
when TC_RESTORE_FSYNC=all, size and blob id as planned) and only then renamed over the target (on
Linux the two names are swapped and the old file removed: `Writer._swap`); on any failure the
temporary is removed and the target keeps its old content.

A directory holding `.git` (at any level below the root) is a nested repository: nothing under
it is written or deleted (`Unrestorable`). Neither is anything in a protected directory (the
store), nor a name `pathsafe` refuses.

Where the OS has no descriptor-relative calls (Windows: no `dir_fd`, no `O_DIRECTORY`, no
`O_NOFOLLOW`), `_PathOps` does the same with full paths: every directory on the way is lstat'ed
and refused if it is a link or a junction, and the parent's identity is checked again right
before each rename or unlink. Between that check and the call a swap can still redirect the
operation (a window of microseconds the descriptor version does not have). `TC_WSFS=paths`
selects it here too, so the tests run it on Linux.
"""
from __future__ import annotations

import errno
import hashlib
import os
import secrets
import stat as stat_mod

from ..base.fsutil import fsync_setting
from ..base.refs import STORE_DIRNAME, TEMP_RE
from ..base.settings import current
from . import pathsafe

_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_MAX_CACHED = 512
FSYNC_MIN_BYTES = 1 << 20
_RENAME_EXCHANGE = 2  # linux/fs.h
_RENAME_NOREPLACE = 1


def _renameat2(fd, src: str, dst: str, flags: int) -> bool:
    from ..storage import _native  # (libc's renameat2: the one module below the standard library)

    return _native.renameat2(fd, src, fd, dst, flags)


class Unrestorable(Exception):
    """The path must be left as it is (nested repository, store, refused name): kept, reported."""


class Refused(OSError):
    """The file system is not as planned (a link or file where a directory should be...)."""


def blob_id(data) -> str:
    h = hashlib.sha1(b"blob %d\0" % len(data))
    h.update(data)
    return h.hexdigest()


def _umask() -> int:
    m = os.umask(0)
    os.umask(m)
    return m


class _FdOps:
    """POSIX: every call relative to the descriptor of its directory; links never followed."""

    kind = "fd"
    _DIR = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0) | _CLOEXEC

    def root(self, path: str):
        return os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | _CLOEXEC)

    def child_dir(self, part: str, h):
        return os.open(part, self._DIR, dir_fd=h)

    def mkdir(self, part: str, h) -> None:
        os.mkdir(part, 0o777, dir_fd=h)

    def stat(self, name: str, h):
        return os.stat(name, dir_fd=h, follow_symlinks=False)

    def fstat(self, h):
        return os.fstat(h)

    def listdir(self, h) -> list[str]:
        return os.listdir(h)

    def unlink(self, name: str, h) -> None:
        os.unlink(name, dir_fd=h)

    def rmdir(self, name: str, h) -> None:
        os.rmdir(name, dir_fd=h)

    def symlink(self, target, name: str, h) -> None:
        os.symlink(target, name, dir_fd=h)

    def readlink(self, name: str, h):
        return os.readlink(name, dir_fd=h)

    def create(self, name: str, h, perm: int = 0o600) -> int:
        return os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | _CLOEXEC,
                       perm, dir_fd=h)

    def chmod(self, fd: int, name: str, h, mode: int) -> None:
        os.fchmod(fd, mode)

    def replace(self, src: str, dst: str, h) -> None:
        os.replace(src, dst, src_dir_fd=h, dst_dir_fd=h)

    def exchange(self, src: str, dst: str, h) -> bool:
        """Swap the two names atomically (Linux renameat2 RENAME_EXCHANGE); False where the system
        or the file system has no such call, or TC_NATIVE=off (then `replace`)."""
        from ..storage import _native  # (libc's renameat2: the one module below the standard library)

        return _native.renameat2(h, src, h, dst, _RENAME_EXCHANGE)

    def close(self, h) -> None:
        os.close(h)

    def sync_dir(self, h) -> None:
        os.fsync(h)


def exchange_setting() -> bool:
    """The `exchange` setting (on; off only in tests): replace a file by swapping names, see
    Writer.write."""
    return current().exchange


_REPARSE_POINT = 0x400  # FILE_ATTRIBUTE_REPARSE_POINT: a symlink or a junction on Windows


class _PathOps(_FdOps):
    """No descriptor-relative calls (Windows): full paths, each directory lstat'ed on the way
    and refused if it is a link or a junction. The handle of a directory is its path."""

    kind = "paths"

    def root(self, path: str):
        if not stat_mod.S_ISDIR(os.stat(path).st_mode):
            raise NotADirectoryError(errno.ENOTDIR, "not a directory", path)
        return os.path.abspath(path)

    def child_dir(self, part: str, h):
        p = os.path.join(h, part)
        st = os.lstat(p)
        if stat_mod.S_ISLNK(st.st_mode) or getattr(st, "st_file_attributes", 0) & _REPARSE_POINT:
            raise OSError(errno.ELOOP, "a link, not followed", p)
        if not stat_mod.S_ISDIR(st.st_mode):
            raise OSError(errno.ENOTDIR, "not a directory", p)
        return p

    def mkdir(self, part: str, h) -> None:
        os.mkdir(os.path.join(h, part), 0o777)

    def stat(self, name: str, h):
        return os.lstat(os.path.join(h, name))

    def fstat(self, h):
        return os.lstat(h)

    def listdir(self, h) -> list[str]:
        return os.listdir(h)

    def unlink(self, name: str, h) -> None:
        os.unlink(os.path.join(h, name))

    def rmdir(self, name: str, h) -> None:
        os.rmdir(os.path.join(h, name))

    def symlink(self, target, name: str, h) -> None:
        os.symlink(target, os.path.join(h, name))

    def readlink(self, name: str, h):
        return os.readlink(os.path.join(h, name))

    def create(self, name: str, h, perm: int = 0o600) -> int:
        return os.open(os.path.join(h, name), os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
                       | getattr(os, "O_NOFOLLOW", 0) | _CLOEXEC, perm)

    def chmod(self, fd: int, name: str, h, mode: int) -> None:
        if hasattr(os, "fchmod"):
            os.fchmod(fd, mode)
        else:  # Windows before 3.13: only the read-only bit means anything there
            os.chmod(os.path.join(h, name), mode)

    def replace(self, src: str, dst: str, h) -> None:
        os.replace(os.path.join(h, src), os.path.join(h, dst))

    def exchange(self, src: str, dst: str, h) -> bool:
        return False

    def close(self, h) -> None:
        pass

    def sync_dir(self, h) -> None:
        if hasattr(os, "O_DIRECTORY"):  # (Windows: no directory to sync, NTFS logs names itself)
            fd = os.open(h, os.O_RDONLY | os.O_DIRECTORY | _CLOEXEC)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)


def _ops() -> _FdOps:
    """Descriptor-relative calls where the OS has them, full paths elsewhere (`TC_WSFS`:
    `fd` or `paths` forces one)."""
    forced = current().wsfs
    if forced == "paths":
        return _PathOps()
    if forced == "fd" or (os.open in os.supports_dir_fd and os.unlink in os.supports_dir_fd
                          and hasattr(os, "O_DIRECTORY") and hasattr(os, "O_NOFOLLOW")):
        return _FdOps()
    return _PathOps()


def _split(rel: str) -> tuple[str, str]:
    parent, _, name = rel.rpartition("/")
    return parent, name


class Writer:
    """One workspace root, opened once; use as a context manager."""

    def __init__(self, root, protect=(), rules: str | None = None, fsync: bool | str | None = None,
                 exchange: bool | None = None):
        self.root = os.fspath(root)
        self.ops = _ops()
        self.root_fd = self.ops.root(self.root)
        self._fds: dict = {"": self.root_fd}
        self._nested: dict[str, bool] = {"": False}  # the root's own .git is the user's repository
        self._ids: dict[str, tuple[int, int]] = {}  # dir -> (st_dev, st_ino) when opened
        self._protect = set()
        for p in protect:
            try:
                st = os.stat(p)
                self._protect.add((st.st_dev, st.st_ino))
            except OSError:
                pass
        self.rules = rules or pathsafe.rules()
        self._names: dict[str, dict[str, str]] = {}  # dir -> fold key -> name (case-insensitive rules)
        self.umask = _umask()
        # fsync costs ~5 ms per file on a busy ext4 (a 2000-file restore: 12 s instead of 1.4 s),
        # so by default only large files are synced, where a late write-back error (delayed
        # allocation, quotas) is likeliest and the cost is small beside the write itself; small
        # files rely on write()/close() errors. TC_RESTORE_FSYNC=all|off changes that.
        self.exchange = exchange_setting() and exchange is not False  # (False: the caller's choice, see _swap)
        if fsync is None:
            self.fsync = fsync_setting()
        elif isinstance(fsync, bool):
            self.fsync = "all" if fsync else "off"
        else:
            self.fsync = fsync
        # with `all`, the directories whose entries changed (a name placed, removed or made): a
        # rename is durable only once its directory is synced (`sync_dirs`, at the end)
        self._changed_dirs: set[str] | None = set() if self.fsync == "all" else None

    # ------------------------------------------------------------------ descriptors
    def close(self) -> None:
        for fd in self._fds.values():
            try:
                self.ops.close(fd)
            except OSError:
                pass
        self._fds.clear()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        try:
            if exc[0] is None:
                self.sync_dirs()
        finally:
            self.close()

    def sync_dirs(self) -> None:
        """fsync each directory whose entries this workspace changed (TC_RESTORE_FSYNC=all only):
        the files were synced before their rename, and without this a power loss could still take
        the renames back (old content under the name, the restore reported done). Deepest first,
        so a new directory's own entries are on disk before its name in its parent. A directory
        moved away or gone meanwhile is skipped (it is no longer where the restore wrote);
        EINVAL (a file system without directory fsync) proves nothing either way."""
        if not self._changed_dirs:
            return
        todo, self._changed_dirs = self._changed_dirs, set()
        for rel_dir in sorted(todo, key=lambda d: (-d.count("/"), d) if d else (1, "")):
            try:
                fd = self.open_dir(rel_dir)
            except (OSError, Unrestorable):
                continue
            try:
                self.ops.sync_dir(fd)
            except OSError as e:
                if e.errno != errno.EINVAL:
                    raise

    def _forget(self, rel_dir: str) -> None:
        """Drop cached descriptors of `rel_dir` and everything below it."""
        for k in [k for k in self._fds if k and (k == rel_dir or k.startswith(rel_dir + "/"))]:
            try:
                self.ops.close(self._fds.pop(k))
            except OSError:
                pass
            self._nested.pop(k, None)
            self._ids.pop(k, None)
            self._names.pop(k, None)

    def _trim(self) -> None:
        if len(self._fds) > _MAX_CACHED:
            for k in [k for k in self._fds if k]:
                self.ops.close(self._fds.pop(k))
                self._nested.pop(k, None)

    def _has_git(self, fd) -> bool:
        try:
            self.ops.stat(".git", fd)
            return True
        except FileNotFoundError:
            return False
        except NotADirectoryError:
            return False

    def open_dir(self, rel_dir: str, create: bool = False):
        """The descriptor of a directory of the workspace, reached without following any link.

        Raises FileNotFoundError (absent and not `create`), Refused (a link or a file in the
        way), Unrestorable (a nested repository or the store on the way)."""
        if rel_dir in self._fds:
            if not rel_dir or self._still_at(rel_dir):
                return self._fds[rel_dir]
            self._forget(rel_dir)  # renamed or replaced meanwhile: resolve the path again
        self._trim()
        parts = rel_dir.split("/")
        # start from the deepest cached ancestor that is still where it was
        i = len(parts)
        while i > 0:
            k = "/".join(parts[:i])
            if k in self._fds:
                if self._still_at(k):
                    break
                self._forget(k)
            i -= 1
        cur = "/".join(parts[:i])
        fd = self._fds[cur]
        for part in parts[i:]:
            nxt = f"{cur}/{part}" if cur else part
            if self._nested[cur]:
                raise Unrestorable(f"{cur}/ is a nested git repository: left as it is")
            try:
                child = self.ops.child_dir(part, fd)
            except FileNotFoundError:
                if not create:
                    raise
                try:
                    self.ops.mkdir(part, fd)
                    if self._changed_dirs is not None:
                        self._changed_dirs.add(cur)
                except FileExistsError:
                    pass  # made by someone else meanwhile: the O_NOFOLLOW open below judges it
                child = self._open_child(part, fd, nxt)
            except OSError as e:
                raise self._refused(e, nxt) from None
            st = self.ops.fstat(child)
            if (st.st_dev, st.st_ino) in self._protect:
                self.ops.close(child)
                raise Unrestorable(f"{nxt}/ is the tc-git store: never written by a restore")
            self._fds[nxt] = child
            self._ids[nxt] = (st.st_dev, st.st_ino)
            self._nested[nxt] = self._has_git(child)
            cur, fd = nxt, child
        return fd

    def _still_at(self, rel_dir: str) -> bool:
        """Is the directory we hold for `rel_dir` still the one at that path? A directory
        renamed by someone else keeps its descriptor: without this check later writes would
        follow it to its new name instead of going where the plan says (one lstat)."""
        try:
            st = os.stat(os.path.join(self.root, rel_dir), follow_symlinks=False)
        except OSError:
            return False
        return (st.st_dev, st.st_ino) == self._ids.get(rel_dir) and stat_mod.S_ISDIR(st.st_mode)

    def _unmoved(self, rel_dir: str) -> None:
        """Right before a rename or unlink: the parent must still be at its path, or the change
        would land where someone else moved the directory (Refused, nothing changed). The
        caller forgets the parent's descriptor once it is done with it (a write first removes
        its temporary through it: closed here, the temporary stayed in the moved directory, and
        on two threads the other could reuse the number for a directory of its own)."""
        if rel_dir and not self._still_at(rel_dir):
            raise Refused(errno.ESTALE, f"{rel_dir}/ was moved or replaced while the restore ran: left as it is")

    def _open_child(self, part: str, fd, nxt: str):
        try:
            return self.ops.child_dir(part, fd)
        except OSError as e:
            raise self._refused(e, nxt) from None

    @staticmethod
    def _refused(e: OSError, rel: str) -> OSError:
        if e.errno == errno.ELOOP:
            return Refused(errno.ELOOP, f"{rel} is a symlink now, not a directory: not followed")
        if e.errno == errno.ENOTDIR:
            return Refused(errno.ENOTDIR, f"{rel} is a file now, not a directory")
        return e

    def nested(self, rel_dir: str) -> bool:
        return self._nested.get(rel_dir, False)

    # ------------------------------------------------------------------ case-insensitive rules
    def _fold(self, name: str) -> str:
        """The name's key under the case-insensitive rules in use (only they list directories)."""
        key = pathsafe.fold_key(name, self.rules)
        return name if key is None else key

    def _listing(self, rel_dir: str, fd) -> dict[str, str]:
        names = self._names.get(rel_dir)
        if names is None:
            names = {}
            for n in self.ops.listdir(fd):
                names.setdefault(self._fold(n), n)
            self._names[rel_dir] = names
        return names

    def _collides(self, rel_dir: str, fd, name: str) -> str | None:
        if self.rules == "posix":
            return None
        other = self._listing(rel_dir, fd).get(self._fold(name))
        return other if other is not None and other != name else None

    def _note(self, rel_dir: str, name: str, present: bool) -> None:
        if self._changed_dirs is not None:
            self._changed_dirs.add(rel_dir)
        names = self._names.get(rel_dir)
        if names is None:
            return
        key = self._fold(name)
        if present:
            names[key] = name
        elif names.get(key) == name:
            del names[key]

    # ------------------------------------------------------------------ operations
    def check(self, rel: str, mode: int | None = None) -> None:
        why = pathsafe.check_path(rel, mode)
        if why:
            raise Unrestorable(f"refused name: {why}")

    def lstat(self, rel: str):
        """lstat of a workspace path through descriptors; None when absent or unreachable."""
        parent, name = _split(rel)
        try:
            fd = self.open_dir(parent)
            return self.ops.stat(name, fd)
        except (OSError, Unrestorable):
            return None

    def delete(self, rel: str) -> bool:
        """Unlink one file or link. False when it was already gone."""
        self.check(rel)
        parent, name = _split(rel)
        try:
            fd = self.open_dir(parent)
        except FileNotFoundError:
            return False
        if self._nested[parent]:
            raise Unrestorable(f"{parent}/ is a nested git repository: left as it is")
        try:
            st = self.ops.stat(name, fd)
        except FileNotFoundError:
            return False
        if stat_mod.S_ISDIR(st.st_mode):
            raise Refused(errno.EISDIR, "is now a directory: left as it is")
        try:
            self._unmoved(parent)
        except Refused:
            self._forget(parent)
            raise
        # as for a write (_moved): renamed aside first, so that a file in a directory another
        # process moved meanwhile (its newest work, perhaps) is put back, not deleted there
        gone = f".{name[:80]}.tc-{secrets.token_hex(6)}"
        self.ops.replace(name, gone, fd)
        moved = self._moved(parent)
        why = moved
        if moved is None:
            try:
                self.ops.unlink(gone, fd)
            except IsADirectoryError:  # (a directory took the name between the lstat and the rename)
                why = "became a directory while the restore deleted it"
        if why is not None:
            try:  # back under its name (never over one that appeared meanwhile, where it can)
                if not (self.ops.kind == "fd" and _renameat2(fd, gone, name, _RENAME_NOREPLACE)):
                    self.ops.replace(gone, name, fd)
            except OSError:
                why += f" (kept as {gone})"
            if moved is not None:
                self._forget(parent)
            raise Refused(errno.ESTALE, f"{why}: not deleted, left as it is")
        self._note(parent, name, False)
        return True

    def prune(self, rel_dirs) -> None:
        """Remove directories the deletions emptied, deepest first; stops at the first that is
        not empty (or not a directory any more)."""
        for d in sorted(set(rel_dirs), key=lambda p: -p.count("/")):
            while d:
                parent, name = _split(d)
                try:
                    fd = self.open_dir(parent)
                    if self._nested[parent]:
                        break
                    self._forget(d)
                    self.ops.rmdir(name, fd)
                    self._note(parent, name, False)
                except (OSError, Unrestorable):
                    break
                d = parent

    def _rmdir_empty(self, parent, name: str, depth: int = 0) -> None:
        """Remove directory `name` of `parent` and the empty directories inside it, through
        descriptors (no link followed). Anything else in it (a file, a link, `.git`, or one that
        appears meanwhile: rmdir refuses a non-empty directory) leaves it in place: Refused."""
        uncaptured = Refused(errno.ENOTEMPTY, "a directory with uncaptured content is there: left as it is")
        try:
            self.ops.rmdir(name, parent)
            return
        except OSError as e:
            if e.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                raise
        if depth >= 64:
            raise uncaptured from None
        try:
            h = self.ops.child_dir(name, parent)
        except OSError as e:
            raise self._refused(e, name) from None
        try:
            for child in self.ops.listdir(h):
                try:
                    st = self.ops.stat(child, h)
                except FileNotFoundError:
                    continue  # gone meanwhile
                if child == ".git" or not stat_mod.S_ISDIR(st.st_mode):
                    raise uncaptured
                self._rmdir_empty(h, child, depth + 1)
        finally:
            self.ops.close(h)
        try:
            self.ops.rmdir(name, parent)
        except OSError as e:
            if e.errno in (errno.ENOTEMPTY, errno.EEXIST):
                raise uncaptured from None
            raise

    def write(self, rel: str, data: bytes, mode: int, expect_id: str | None = None, create: bool = False):
        """Put `data` at `rel` (a regular file, executable or not, or a symlink to `data`),
        atomically, verified before the rename. `create`: the plan found nothing there, so
        whatever appeared since (not captured, not in the restore point) is not replaced
        (Unrestorable), checked just before the rename. Returns the lstat of a regular file
        right after it was put in place, when it is still the inode written, with the size and
        mtime of the write (the restore's snapshot after trusts it: snapshot.Written); else
        None (a link, or a file someone else wrote already)."""
        self.check(rel, mode)
        if expect_id is not None and blob_id(data) != str(expect_id):
            raise Refused(errno.EIO, f"the store's blob {str(expect_id)[:12]} does not hash to its id: not written")
        parent, name = _split(rel)
        fd = self.open_dir(parent, create=True)
        if self._nested[parent]:
            raise Unrestorable(f"{parent}/ is a nested git repository: left as it is")
        other = self._collides(parent, fd, name)
        if other:
            raise Unrestorable(f"collides with {other!r} on a case-insensitive file system ({self.rules} rules)")
        try:
            st = self.ops.stat(name, fd)
        except FileNotFoundError:
            st = None
        if create and st is not None and not stat_mod.S_ISDIR(st.st_mode):
            raise Unrestorable(_APPEARED)
        if st is not None and stat_mod.S_ISDIR(st.st_mode):
            # a directory where the file goes: replaced only when it holds nothing but empty
            # directories (a file in it was not captured, so it stays)
            sub = f"{parent}/{name}" if parent else name
            self.open_dir(sub)
            if self._fds.get(parent) != fd:
                # resolving `sub` closed the parent's descriptor (moved meanwhile, or the cache
                # trimmed): `fd` is not to be used again (another thread may hold its number)
                raise Refused(errno.ESTALE, f"{parent}/ was moved or replaced while the restore ran: left as it is")
            if self._nested[sub]:
                raise Unrestorable(f"{sub}/ is a nested git repository: left as it is")
            self._forget(sub)
            self._rmdir_empty(fd, name)
        # a unique sibling: a user file called `<name>.tmp` is never clobbered
        tmp = f".{name[:80]}.tc-{secrets.token_hex(6)}"
        made = stale = False
        try:
            if mode == pathsafe.MODE_LINK:
                self.ops.symlink(data, tmp, fd)
                made = True
                if os.fsencode(self.ops.readlink(tmp, fd)) != bytes(data):
                    raise Refused(errno.EIO, "the symlink reads back differently: not written")
            else:
                # created with its final permissions, as git checkout does (the umask, or the
                # directory's default ACL, applies): no fchmod, one syscall and one inotify event
                # less per file for the drift watcher
                perm = 0o777 if mode == pathsafe.MODE_EXEC else 0o666
                wfd = self.ops.create(tmp, fd, perm)
                made = True
                try:
                    _write_all(wfd, data)
                    if self.ops.kind != "fd":  # (Windows: only the read-only bit; set as before)
                        self.ops.chmod(wfd, tmp, fd, perm & ~self.umask)
                    if self.fsync == "all" or (self.fsync == "large" and len(data) >= FSYNC_MIN_BYTES):
                        os.fsync(wfd)
                    wst = os.fstat(wfd)
                    size = wst.st_size
                finally:
                    os.close(wfd)
                if size != len(data):
                    raise Refused(errno.EIO, f"short write: {size} of {len(data)} bytes: not written")
            try:
                self._unmoved(parent)
            except Refused:
                stale = True  # (its descriptor is forgotten after the temporary is removed)
                raise
            if mode != pathsafe.MODE_LINK:
                # a process that rewrites every file it finds (a formatter, `sed -i` over a tree)
                # may have rewritten or replaced the temporary: then its bytes are not the plan's
                now = self.ops.stat(tmp, fd)
                if (now.st_ino, now.st_size, now.st_mtime_ns, now.st_ctime_ns) != \
                        (wst.st_ino, wst.st_size, wst.st_mtime_ns, wst.st_ctime_ns):
                    made = now.st_ino == wst.st_ino  # not ours any more: left where it is
                    raise Refused(errno.EBUSY, "another process changed the temporary file while it was written: "
                                               "not written")
            if create:  # checked again as late as possible: the window left is a few microseconds
                try:
                    self.ops.stat(name, fd)
                    raise Unrestorable(_APPEARED)
                except FileNotFoundError:
                    pass
            ours = wst.st_ino if mode != pathsafe.MODE_LINK else self.ops.stat(tmp, fd).st_ino
            try:
                swap = (self.exchange and mode != pathsafe.MODE_LINK and st is not None
                        and not stat_mod.S_ISDIR(st.st_mode))
                if not (swap and self._swap(tmp, name, fd, parent, ours)):
                    # nothing at the name (gone since the plan, or since the lstat above: the swap
                    # found none): placed as a creation is, never over what appears meanwhile and
                    # taken back if the parent moved (a plain rename left it in the moved directory,
                    # at a path it never had: test_race_moved)
                    vacant = st is None or (swap and self._absent(name, fd))
                    self._rename(tmp, name, fd, parent, create, ours, vacant=vacant)
            except Refused as e:
                stale = e.errno == errno.ESTALE
                made = made and not getattr(e, "keep", False)  # `tmp` is someone else's file then
                raise
            made = False
            self._note(parent, name, True)
            if mode == pathsafe.MODE_LINK:
                return None
            # the file as placed: still our inode, size and mtime (else someone wrote it already,
            # or removed it: the write was done, what they did after it is theirs)
            try:
                placed = self.ops.stat(name, fd)
            except FileNotFoundError:
                return None
            same = (placed.st_ino, placed.st_size, placed.st_mtime_ns) == (wst.st_ino, wst.st_size, wst.st_mtime_ns)
            return placed if same and stat_mod.S_ISREG(placed.st_mode) else None
        finally:
            if made:
                try:
                    self.ops.unlink(tmp, fd)
                except OSError:
                    pass
            if stale:
                self._forget(parent)  # (closes `fd`: after the temporary is gone)


    # The rename goes through the parent's descriptor: if another process renamed a directory on
    # the way after the last check (_unmoved), the file would land in the moved directory, at a
    # path the plan never named, over that process's newest work (in no restore point), and the
    # restore would say applied (the churn failure of record: 'content it never had' under a
    # moved directory). So the parent is checked again after the swap or the rename, before
    # anything is removed, and a move takes the file back (tests/test_race_moved.py).
    def _moved(self, parent: str) -> str | None:
        """Why the file just placed or moved aside under `parent` must not stay (another process
        moved `parent` after the last check), or None."""
        if not parent or self._still_at(parent):
            return None
        return f"{parent}/ was moved or replaced while the restore wrote into it"

    def _absent(self, name: str, fd) -> bool:
        try:
            self.ops.stat(name, fd)
            return False
        except FileNotFoundError:
            return True

    def _rename(self, tmp: str, name: str, fd, parent: str, create: bool, ours: int, vacant: bool = False) -> None:
        """The rename into place (a new file, a link, or no exchange). A creation, or a file whose
        name was found `vacant`, never replaces what appeared meanwhile (RENAME_NOREPLACE where
        there is one: Unrestorable) and is taken back if the parent moved; a rename over a file
        can only report that. Raises Refused."""
        from ..storage import _native

        try:
            excl = (create or vacant) and self.ops.kind == "fd" and \
                _native.renameat2(fd, tmp, fd, name, _RENAME_NOREPLACE)
        except FileExistsError:
            raise Unrestorable(_APPEARED) from None
        if not excl:
            self.ops.replace(tmp, name, fd)
        where = self._moved(parent)
        if where is None:
            return
        if excl and self.ops.stat(name, fd).st_ino == ours and _native.renameat2(fd, name, fd, tmp, _RENAME_NOREPLACE):
            raise Refused(errno.ESTALE, f"{where}: not written there, left as it is")
        raise Refused(errno.ESTALE, f"{where}: {name} went with it")

    def _swap(self, tmp: str, name: str, fd, parent: str, ours: int | None = None) -> bool:
        """Put the verified temporary `tmp` in place of the file `name` by swapping the two names
        (RENAME_EXCHANGE: atomic, as a rename over it), then remove the old file now called
        `tmp`. A rename over a file makes ext4 start the new file's write-back at once
        (auto_da_alloc) and wait for the device (10-30 ms per 100 files, far more while others
        write: a restore's largest kernel cost); a swap leaves it to the flusher, as a first write
        would. False when nothing was swapped (no such call, or `name` vanished): the caller
        renames. Power-loss durability of small files stays TC_RESTORE_FSYNC=all's (fsync before
        the swap). A directory that took the file's place meanwhile is swapped back: Refused."""
        try:
            if not self.ops.exchange(tmp, name, fd):
                return False
        except FileNotFoundError:
            return False  # gone meanwhile: a plain rename puts the file there
        try:
            old = self.ops.stat(tmp, fd)
        except FileNotFoundError:
            return True  # (someone removed the old file already)
        if stat_mod.S_ISDIR(old.st_mode):
            self.ops.exchange(tmp, name, fd)  # the directory back where it was, our file at `tmp`
            raise Refused(errno.EISDIR, "is now a directory: left as it is")
        where = self._moved(parent)
        if where is not None:  # swapped into a moved directory: back, before the old file goes
            if self.ops.stat(name, fd).st_ino == ours:
                self.ops.exchange(tmp, name, fd)  # theirs at `name` again, ours at `tmp`
                raise Refused(errno.ESTALE, f"{where}: not written there, left as it is")
            e = Refused(errno.ESTALE, f"{where}: {name} could not be taken back (its old file is {tmp})")
            e.keep = True  # type: ignore[attr-defined]
            raise e
        try:
            self.ops.unlink(tmp, fd)
        except FileNotFoundError:
            pass
        return True


_APPEARED = "appeared in the workspace after the plan (not captured, so not in the restore point): left as it is"


def _write_all(fd: int, data) -> None:
    """os.write may write less than asked (a full disk, a signal): loop until all is written;
    0 bytes written without an error is a full disk too."""
    view = memoryview(data)
    while view:
        n = os.write(fd, view[: 1 << 24])
        if n <= 0:
            raise OSError(errno.ENOSPC, "no progress writing: disk full?")
        view = view[n:]


def remove_temporaries(root, dirs) -> list[str]:
    """Remove the temporaries (`.<name>.tc-<hex>`, refs.TEMP_RE) a killed restore left in the
    workspace directories `dirs` (relative; None: every directory but `.git`s and the store).
    Only files and links of exactly that form, in directories reached without following a link.
    Returns the relative paths removed."""
    root = os.path.realpath(os.fspath(root))
    if dirs is None:
        dirs = []
        for dirpath, subdirs, _files in os.walk(root):
            subdirs[:] = [d for d in subdirs if d != ".git" and not (dirpath == root and d == STORE_DIRNAME)]
            rel = os.path.relpath(dirpath, root)
            dirs.append("" if rel == "." else rel.replace(os.sep, "/"))
    out = []
    for d in dirs:
        path = os.path.join(root, *d.split("/")) if d else root
        if os.path.realpath(path) != os.path.normpath(path):
            continue  # a link on the way: not a directory the restore wrote into
        try:
            entries = list(os.scandir(path))
        except OSError:
            continue
        for e in entries:
            if TEMP_RE.fullmatch(e.name) and not e.is_dir(follow_symlinks=False):
                try:
                    os.unlink(e.path)
                    out.append(f"{d}/{e.name}" if d else e.name)
                except OSError:
                    pass
    return sorted(out)
