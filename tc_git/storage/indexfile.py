"""A first snapshot's index written as one file (gitformat-index, version 2), not entry by entry.

A first snapshot knows every entry at once: its blob (the pack writer's id) and the stat data
taken before the file was read. Adding them one by one through libgit2 (`_native.index_add`:
a cffi entry filled field by field, a path copy, a map insert) cost ~20-50 us a file, 1-2.5 s of
a 50k-100k-file first save; the same entries packed here cost ~2 us. libgit2 then reads the file
(`Index.read(True)`: its checksum and every entry are checked) and writes the tree from it.

The entries are what `_native.index_add` would have stored, field for field (32-bit stat fields
as git keeps them, an mtime of zero for a file changed within `racy_ns`: read again next time).
Names are not judged here: libgit2 refuses to write a tree with a name it would not have added
(`.git`, `..`, NTFS/HFS aliases where configured), and the caller then adds the entries one by
one, leaving out what libgit2 refuses (snapshot._finish_first).
"""
from __future__ import annotations

import hashlib
import os
import struct
import tempfile
import time
from collections.abc import Callable, Iterable
from typing import Any

_HEAD = struct.Struct(">4sII")
_ENTRY = struct.Struct(">10I20sH")  # ctime s/ns, mtime s/ns, dev, ino, mode, uid, gid, size, id, flags
_M32 = 0xFFFFFFFF
_NS = 1_000_000_000


def _seconds(ns: int) -> int:
    """A file time as an index entry stores its seconds (32-bit signed, clamped), as raw bits."""
    return max(-(1 << 31), min((1 << 31) - 1, ns // _NS)) & _M32


def entry(path: bytes, raw_id: bytes, mode: int, st, racy_before: int) -> bytes:
    """One entry's bytes, padded (1-8 NULs) to a multiple of 8. `st` has st_mtime_ns,
    st_ctime_ns, st_dev, st_ino, st_uid, st_gid, st_size; `racy_before`: an entry whose file
    changed at or after this time (ns) gets a zero mtime."""
    m, c = st.st_mtime_ns, st.st_ctime_ns
    ms, mns = (_seconds(m), m % _NS) if max(m, c) < racy_before else (0, 0)
    head = _ENTRY.pack(_seconds(c), c % _NS, ms, mns, st.st_dev & _M32, st.st_ino & _M32, mode,
                       st.st_uid & _M32, st.st_gid & _M32, st.st_size & _M32, raw_id, min(len(path), 0xFFF))
    return head + path + b"\0" * (8 - (62 + len(path)) % 8)


def write(index_path: str, count: int, entries: Iterable[tuple[bytes, bytes, int, Any]], racy_ns: int,
          fence_ns: int | None = None, tree_sink: Callable[[bytes], bytes] | None = None,
          before_replace: Callable[[], Any] | None = None) -> bytes | None:
    """Replace the index file with `count` entries ((raw path, raw id, git mode, stat), sorted by
    path, paths unique) atomically (a sibling file renamed over it). The entries are taken one at
    a time and written as they come: at 50k files, holding them all with their stat objects and
    the file's bytes was ~20 MiB of the peak of an import's restore. An entry whose file changed
    at or after `fence_ns`, or without one within `racy_ns` of now, gets a zero mtime.

    With `tree_sink` the trees of those entries are built on the way (`Trees`), each handed to
    `tree_sink` (a tree object's body -> its raw id), and the file gets git's TREE extension
    (the cache-tree: a later `write_tree` reads the ids instead of rebuilding them); the root
    tree's raw id is returned. `before_replace` runs once the file is complete, just before it
    replaces the index (the pack holding its objects is put in place there)."""
    # racy: changed within racy_ns of now, or with a fence (a file-system timestamp taken before
    # any file was read: snapshot.fenced), at or after it
    racy_before = fence_ns if fence_ns is not None else time.time_ns() - racy_ns
    d = os.path.dirname(index_path)
    fd, tmp = tempfile.mkstemp(prefix="index.tc-", dir=d)
    trees = Trees(tree_sink) if tree_sink is not None else None
    root = None
    try:
        digest = hashlib.sha1()
        with os.fdopen(fd, "wb", buffering=1 << 16) as f:
            head = _HEAD.pack(b"DIRC", 2, count)
            f.write(head)
            digest.update(head)
            written, last = 0, None
            for p, i, m, st in entries:
                if last is not None and p <= last:
                    raise ValueError("index entries out of order or repeated")
                e = entry(p, i, m, st, racy_before)
                f.write(e)
                digest.update(e)
                if trees is not None:
                    trees.add(p, i, m)
                written, last = written + 1, p
            if written != count:
                raise ValueError(f"{written} index entries for a header of {count}")
            if trees is not None:
                root, ext = trees.finish()
                f.write(ext)
                digest.update(ext)
            f.write(digest.digest())
        if before_replace is not None:
            before_replace()
        try:
            mode = os.stat(index_path).st_mode & 0o7777
        except OSError:
            mode = 0o644  # what libgit2 creates under the usual umask
        os.chmod(tmp, mode)
        os.replace(tmp, index_path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return root


class Trees:
    """The trees of index entries that arrive sorted by path, built as they come (only the
    directories on the current path are open) the way git's `write-tree` builds them: entries of
    a tree sorted by name with a directory's name compared as `name/`, modes in octal without
    leading zeros, one object per distinct tree. Each closed tree goes to `sink` (body -> raw
    id). `finish()` gives the root's raw id and the index's TREE extension: for each tree in
    pre-order its path component, the number of index entries below it, its number of subtrees
    and its id; subtrees ordered as git writes them (shorter name first, then bytewise).

    Names are not judged here (the caller sends a path libgit2 or git might refuse elsewhere);
    a name that is a file and a directory at once, or an empty component, is a ValueError."""

    def __init__(self, sink: Callable[[bytes], bytes]):
        self.sink = sink
        self.dirs: list[bytes] = []  # the open directories' names, below the root
        # per open tree: [entries (sort key, mode, name, raw id), names, entry count, subtree nodes]
        self.open: list[list] = [[[], set(), 0, []]]

    def add(self, path: bytes, raw: bytes, mode: int) -> None:
        *parts, name = path.split(b"/")
        dirs, k = self.dirs, 0
        while k < len(parts) and k < len(dirs) and parts[k] == dirs[k]:
            k += 1
        while len(dirs) > k:
            self._close()
        for part in parts[k:]:
            self._claim(part)
            dirs.append(part)
            self.open.append([[], set(), 0, []])
        self._claim(name)
        top = self.open[-1]
        top[0].append((name, mode, name, raw))
        top[2] += 1

    def _claim(self, name: bytes) -> None:
        names = self.open[-1][1]
        if not name or name in names:
            raise ValueError(f"tree entry {name!r} is empty or named twice")
        names.add(name)

    def _close(self) -> tuple[bytes, int, list, bytes]:
        entries, _names, count, subs = self.open.pop()
        entries.sort()
        raw = self.sink(b"".join(b"%o %s\0%s" % (mode, name, rid) for _k, mode, name, rid in entries))
        name = self.dirs.pop() if self.dirs else b""
        node = (name, count, subs, raw)
        if self.open:
            parent = self.open[-1]
            parent[0].append((name + b"/", 0o40000, name, raw))
            parent[2] += count
            parent[3].append(node)
        return node

    def finish(self) -> tuple[bytes, bytes]:
        while self.dirs:
            self._close()
        root = self._close()
        out: list[bytes] = []
        stack = [root]  # pre-order without recursion (a path may be ~2000 directories deep)
        while stack:
            name, count, subs, raw = stack.pop()
            out.append(b"%s\0%d %d\n%s" % (name, count, len(subs), raw))
            stack += sorted(subs, key=lambda n: (len(n[0]), n[0]), reverse=True)
        body = b"".join(out)
        return root[3], b"TREE" + struct.pack(">I", len(body)) + body
