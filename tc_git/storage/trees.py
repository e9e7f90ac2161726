"""Tree algebra on raw tree records: a tree patched with edits (`patch_tree`), the one difference
of two trees (`tree_deltas`: the walk of the subtrees whose ids differ, or a snapshot's own edits
laid over it), and a path lookup (`tree_has`). Read as raw records, not pygit2 objects: an
unchanged entry is one bytes comparison, and pygit2's lookups keep every name asked for.
"""
from __future__ import annotations

import re
from typing import NamedTuple, Protocol

import pygit2
from pygit2.enums import FileMode


class TreeSink(Protocol):
    """Where patch_tree writes the trees it builds (TreeSink: into the save's pack)."""

    def add_tree(self, data: bytes) -> pygit2.Oid: ...


class Patched(Protocol):
    """How a tree was built: `base` with `edits` (path -> (blob id, mode), or None: removed) laid
    over it record for record, `base_entries` the record `base` held at each edited path
    (workspace.snapshot.Snapshot; patch_tree's `olds`). Any of them None: not known."""

    tree: pygit2.Oid
    base: pygit2.Oid | None
    edits: dict | None
    base_entries: dict | None


class _Conflict(Exception):
    """An edit that turns a file into a directory or back: write_tree() judges those."""


def patch_tree(repo: pygit2.Repository, base: pygit2.Oid, edits: dict,
               objects: TreeSink | None = None, olds: dict | None = None) -> pygit2.Oid | None:
    """The tree of an index that held `base` and then had `edits` applied (path -> (blob id,
    mode) added or replaced, None removed), writing only the trees on the edited paths; empty
    directories vanish, as in write_tree(). None when an edit changes a path's kind (a file
    where a directory was, or under a former file: libgit2's index then drops entries of its
    own accord) or a name is not UTF-8: the caller writes the index's tree instead. With
    `objects` the new trees are serialised here and go into that pack (visible once it is
    finished), byte for byte what libgit2's TreeBuilder writes. `olds` (a dict, filled with
    objects only) receives each edited path's raw record in `base` (or None), and the key
    `INEXACT` when a record it kept had its mode canonicalised (the tree is then not exactly
    `base` with `edits`)."""
    if not edits:
        return base
    root: dict = {}  # dir node: {"": {file name: edit}, dir name: node}
    for rel, v in edits.items():
        node = root
        *dirs, name = rel.split("/")
        for d in dirs:
            node = node.setdefault(d, {})
        node.setdefault("", {})[name] = v
    if olds is not None and objects is None:
        olds[INEXACT] = True  # (TreeBuilder's records are not seen here)
    if objects is not None:
        try:
            raw = _patch_raw(repo, base.raw, root, objects, olds)
            return pygit2.Oid(raw=raw) if raw is not None else objects.add_tree(b"")
        except (_Conflict, pygit2.GitError, ValueError, TypeError, UnicodeError, KeyError):
            return None

    def build(tree, node: dict):
        tb = repo.TreeBuilder(tree) if tree is not None else repo.TreeBuilder()
        for name, v in node.get("", {}).items():
            old = tb.get(name)
            if old is not None and old.filemode == FileMode.TREE or name in node:
                raise _Conflict(name)
            if v is not None:
                tb.insert(name, v[0], v[1])
            elif old is not None:
                tb.remove(name)
        for name, child in node.items():
            if not name:
                continue
            old = tb.get(name)
            if old is not None and old.filemode != FileMode.TREE:
                raise _Conflict(name)
            new = build(repo[old.id] if old is not None else None, child)
            if new is not None:
                tb.insert(name, new, FileMode.TREE)
            elif old is not None:
                tb.remove(name)
        return tb.write() if len(tb) else None

    try:
        out = build(repo[base], root)
        return out if out is not None else repo.TreeBuilder().write()
    except (_Conflict, pygit2.GitError, ValueError, TypeError, UnicodeError, KeyError):
        return None


def _patch_raw(repo: pygit2.Repository, base: bytes | None, root: dict, objects: TreeSink,
               olds: dict | None = None) -> bytes | None:
    """patch_tree's walk on raw tree records (mode, name, raw id); new trees into `objects`. A
    directory whose edits only replace or remove records, all of them already in libgit2's
    canonical modes, keeps its records' order: no sort (the records and their sort keys were
    most of a 100-file restore's patch_tree, ~80 trees of ~100 records)."""
    read = repo.odb.read

    def build(tree: bytes | None, node: dict, prefix: str) -> bytes | None:
        canon = True
        recs: list = []
        if tree is not None:
            kind, data = read(pygit2.Oid(raw=tree))[:2]
            # every byte in a record, as libgit2's parser demands, and each name once: else write_tree() judges
            if kind != pygit2.enums.ObjectType.TREE:
                raise _Conflict(tree.hex())
            canon = _CANON_RECORDS.fullmatch(data) is not None
            if not canon and TREE_RECORDS.fullmatch(data) is None:
                raise _Conflict(tree.hex())
            recs = TREE_ENTRY.findall(data)
        where = {n: k for k, (_m, n, _i) in enumerate(recs)}
        if len(where) != len(recs):
            raise _Conflict(prefix)
        added: dict[bytes, tuple[bytes, bytes]] = {}
        dropped: set[int] = set()

        def put(key: bytes, k: int | None, val: tuple[bytes, bytes] | None) -> None:
            if k is None:
                if val is not None:
                    added[key] = val
            elif val is None:
                dropped.add(k)
            else:
                recs[k] = (val[0], key, val[1])

        for name, v in node.get("", {}).items():
            key = name.encode("utf-8")
            k = where.get(key)
            old = (recs[k][0], recs[k][2]) if k is not None else None
            if old is not None and is_tree_mode(old[0]) or name in node:
                raise _Conflict(name)
            if olds is not None:
                olds[prefix + name] = old
            put(key, k, (b"%o" % int(v[1]), v[0].raw) if v is not None else None)
        for name, child in node.items():
            if not name:
                continue
            key = name.encode("utf-8")
            k = where.get(key)
            old = (recs[k][0], recs[k][2]) if k is not None else None
            if old is not None and not is_tree_mode(old[0]):
                raise _Conflict(name)
            new = build(old[1] if old is not None else None, child, prefix + name + "/")
            put(key, k, (b"40000", new) if new is not None else None)
        if not canon and olds is not None:
            olds[INEXACT] = True
        if added or not canon:
            # git's order: a tree's name sorts as if it ended in "/"; modes as libgit2 writes them
            ents = [r for k, r in enumerate(recs) if k not in dropped] + [(m, n, i) for n, (m, i) in added.items()]
            ordered = sorted((n + b"/" if is_tree_mode(m) else n, m if m in _CANON_MODES else _canon_mode(m), n, i)
                             for m, n, i in ents)
            out = [m + b" " + n + b"\0" + i for _k, m, n, i in ordered]
        elif dropped:
            out = [m + b" " + n + b"\0" + i for k, (m, n, i) in enumerate(recs) if k not in dropped]
        else:
            out = [m + b" " + n + b"\0" + i for m, n, i in recs]
        if not out:
            return None
        return objects.add_tree(b"".join(out)).raw

    return build(base, root, "")


INEXACT = "\0inexact"  # (no path holds a NUL) patch_tree canonicalised a record it kept
TREE_RECORDS = re.compile(rb"(?:[0-7]+ [^\0]*\0.{20})*", re.S)  # a whole raw tree: records only
# a whole raw tree whose every record has a mode as libgit2 writes it
_CANON_RECORDS = re.compile(rb"(?:(?:100644|100755|120000|160000|40000) [^\0]*\0.{20})*", re.S)
_CANON_MODES = frozenset((b"100644", b"100755", b"120000", b"160000", b"40000"))
# one int object per mode, not one per delta (an int above 256 is a new 28-byte object: 1.3 MiB
# of a 50k-file import's plan)
_MODE_INTS = {m: int(m, 8) for m in _CANON_MODES}


def is_tree_mode(mode: bytes) -> bool:
    """Whether a raw record's mode names a tree (a hand-made tree may write 040000)."""
    return mode == b"40000" or mode[:1] != b"1" and int(mode, 8) == 0o40000


def _canon_mode(mode: bytes) -> bytes:
    """A tree entry's mode as libgit2 writes it (a hand-made `040000` or `100664` normalised)."""
    m = int(mode, 8)
    if m & 0o170000 == 0o100000:
        m = 0o100755 if m & 0o100 else 0o100644
    return b"%o" % m


class TreeDelta(NamedTuple):
    path: str
    status: str  # A D M T, as libgit2's DeltaStatus chars
    old_id: pygit2.Oid | None
    old_mode: int
    new_id: pygit2.Oid | None
    new_mode: int


def tree_deltas(repo: pygit2.Repository, old, new, typechange: bool = False,
                patched: Patched | None = None) -> list[TreeDelta]:
    """What differs between two trees (a tree, a commit or an id; `old` None: the empty tree),
    file by file, in the order and with the statuses of libgit2's tree-to-tree diff (a change of
    kind is a D and an A, or one T with `typechange`; a file that became a directory is always
    the file's D and the directory's A's), but walking only the subtrees whose ids differ:
    libgit2 walks every entry of both trees (~60-200 ms at 50k files for a one-file change).
    `patched`: how one of the two was built (the snapshot that wrote it): then only its base and
    the other tree are walked (nothing at all for a save's note, whose other tree is the base)
    and its edits laid over that, instead of re-reading the trees it has just written (~220 at
    10k files / 100 changed: 30-90 ms under load)."""
    a, b = (_as_tree(repo, t).id if t is not None else None for t in (old, new))
    if a == b:
        return []
    known = _from_edits(repo, a, b, typechange, patched) if patched is not None and a is not None else None
    if known is not None:
        return known
    out: list[tuple] = []
    # Trees are read as raw records (name -> (mode, raw id)): an unchanged entry is one bytes
    # comparison instead of pygit2 objects with an enum per filemode (~0.5 us each, 20k per
    # restore of 100 files in 100 directories).
    read = repo.odb.read

    def entries(raw: bytes) -> dict[bytes, tuple[bytes, bytes]]:
        kind, data = read(pygit2.Oid(raw=raw))[:2]
        recs = TREE_ENTRY.findall(data)
        # every byte must belong to a record, as libgit2's parser demands: a tampered tree is an
        # error the restore reports (BadInput), never a partial list of entries; and a tree
        # entry must name a tree (libgit2: "the requested type does not match")
        if kind != pygit2.enums.ObjectType.TREE or sum(len(m) + len(n) + 22 for m, n, _i in recs) != len(data):
            raise pygit2.GitError(f"tree {raw.hex()} is corrupt: not a sequence of tree records")
        out = {n: (m, i) for m, n, i in recs}
        if len(out) != len(recs):  # a hand-made tree may name an entry twice; libgit2 lists both
            out = {}
            for m, n, i in recs:
                k, j = n, 0
                while k in out:  # NUL never occurs in a name: the key stays apart, `real` strips it
                    j += 1
                    k = n + b"\0" + str(j).encode()
                out[k] = (m, i)
        return out

    def real(n: bytes) -> bytes:
        return n.partition(b"\0")[0]

    def one(name: bytes, e, status: str) -> None:
        mode, raw = _MODE_INTS.get(e[0]) or int(e[0], 8), e[1]
        if status == "D":
            out.append((name, 0, status, pygit2.Oid(raw=raw), mode, None, 0))
        else:
            out.append((name, 1, status, None, 0, pygit2.Oid(raw=raw), mode))

    def side(e, name: bytes, status: str) -> None:
        if is_tree_mode(e[0]):
            for n, sub in entries(e[1]).items():
                side(sub, name + b"/" + real(n), status)
        else:
            one(name, e, status)

    def walk(a: dict, b: dict, prefix: bytes) -> None:
        olds = a
        for n, e in b.items():
            o = olds.pop(n, None)
            if o == e:
                continue
            name = prefix + real(n)
            if o is None:
                side(e, name, "A")
                continue
            o_tree, e_tree = is_tree_mode(o[0]), is_tree_mode(e[0])
            if o_tree and e_tree:
                walk(entries(o[1]), entries(e[1]), name + b"/")
                continue
            if o_tree != e_tree:  # a file that became a directory (or back): both sides whole
                side(o, name, "D")
                side(e, name, "A")
                continue
            om, em = int(o[0], 8), int(e[0], 8)
            if om & 0o170000 == em & 0o170000:
                out.append((name, 1, "M", pygit2.Oid(raw=o[1]), om, pygit2.Oid(raw=e[1]), em))
            elif typechange:
                out.append((name, 1, "T", pygit2.Oid(raw=o[1]), om, pygit2.Oid(raw=e[1]), em))
            else:
                one(name, o, "D")
                one(name, e, "A")
        for n, o in olds.items():
            side(o, prefix + real(n), "D")

    walk(entries(a.raw) if a is not None else {}, entries(b.raw) if b is not None else {}, b"")
    out.sort(key=lambda x: (x[0], x[1]))
    # converted in place: each raw record is freed as its delta is made (a second list held both,
    # ~20 MiB at the peak of an import's plan of 50k files instead of ~11)
    for i, (p, _k, s, oi, om, ni, nm) in enumerate(out):
        out[i] = TreeDelta(p.decode("utf-8", "surrogateescape"), s, oi, om, ni, nm)
    return out  # type: ignore[return-value]  # (every item is a TreeDelta now)


TREE_ENTRY = re.compile(rb"([0-7]+) ([^\0]*)\0(.{20})", re.S)  # a raw tree's records: mode, name, id


def tree_has(repo: pygit2.Repository, tree, path: str) -> bool:
    """Whether `tree` holds an entry at `path` (a/b/c). Read from the raw trees: pygit2's own
    lookups (`path in tree`, `tree[path]`, `tree / name`) keep a reference to the name they are
    given for ever (pygit2 1.21.0, str or bytes alike), so every name asked about stayed in
    memory with the allocator pages around it (an import's restore asked for each of 50k)."""
    raw = _as_tree(repo, tree).id.raw
    parts = path.encode("utf-8", "surrogateescape").split(b"/")
    for i, part in enumerate(parts):
        kind, data = repo.odb.read(pygit2.Oid(raw=raw))[:2]
        if kind != pygit2.enums.ObjectType.TREE:
            return False
        hit = next((m for m in TREE_ENTRY.finditer(data) if m.group(2) == part), None)
        if hit is None:
            return False
        if i < len(parts) - 1:
            if int(hit.group(1), 8) != 0o40000:
                return False
            raw = hit.group(3)
    return True


def _as_tree(repo: pygit2.Repository, t) -> pygit2.Tree:
    """A tree from a tree, a commit, or their id (what repo.diff accepts)."""
    obj = t if isinstance(t, pygit2.Object) else repo[t]
    return obj.peel(pygit2.Tree)


def _from_edits(repo: pygit2.Repository, old: pygit2.Oid, new: pygit2.Oid | None, typechange: bool,
                p: Patched) -> list[TreeDelta] | None:
    """tree_deltas(old, new) when one of them is p.tree: p.base -> the other tree (walked), the
    edits laid over it. None when that is not known exactly (then the walk)."""
    olds = p.base_entries
    if olds is None or p.base is None or p.edits is None or p.tree not in (old, new):
        return None
    flip = new == p.tree  # the patched tree is `new`: the deltas run from the other to it
    # path -> [the patched side, the other side], each (mode, id) or None
    sides: dict[str, list] = {}
    for d in tree_deltas(repo, p.base, old if flip else new, typechange=True):
        sides[d.path] = [None if d.old_id is None else (d.old_mode, d.old_id),
                         None if d.new_id is None else (d.new_mode, d.new_id)]
    for rel, v in p.edits.items():
        now = None if v is None else (int(v[1]), v[0])
        s = sides.get(rel)
        if s is not None:
            s[0] = now
            continue
        if rel not in olds:
            return None
        was = olds[rel]  # not in base -> other: the other tree holds what base held
        if was is not None and is_tree_mode(was[0]):
            return None
        sides[rel] = [now, None if was is None else (int(was[0], 8), pygit2.Oid(raw=was[1]))]
    out = []
    for rel, (a, b) in sides.items():
        if flip:
            a, b = b, a
        if a == b:
            continue
        key = rel.encode("utf-8", "surrogateescape")
        if a is not None and b is not None and (typechange or a[0] & 0o170000 == b[0] & 0o170000):
            status = "M" if a[0] & 0o170000 == b[0] & 0o170000 else "T"
            out.append((key, 1, TreeDelta(rel, status, a[1], a[0], b[1], b[0])))
            continue
        if a is not None:
            out.append((key, 0, TreeDelta(rel, "D", a[1], a[0], None, 0)))
        if b is not None:
            out.append((key, 1, TreeDelta(rel, "A", None, 0, b[1], b[0])))
    out.sort(key=lambda x: (x[0], x[1]))
    return [d for _k, _s, d in out]
