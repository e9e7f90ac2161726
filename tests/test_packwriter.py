"""The first snapshot's pack (packwriter): written by a second thread with its own .idx, it must
be what git itself accepts (`git verify-pack -v`: every object, CRC and offset checked against
the .idx; `git fsck --full`), hold the workspace's exact bytes, and leave no temporary file;
one a killed snapshot left behind goes at the next first snapshot."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import pygit2
import pytest
from conftest import clean_env

from tc_git.storage import packwriter


@pytest.mark.parametrize("deflate", ["isal", "zlib"])
def test_pack_is_what_git_accepts(tmp_path, monkeypatch, deflate):
    """With ISA-L's deflate (the `isal` dependency) and with zlib's (where it has no wheel)."""
    import zlib

    if deflate == "zlib":
        monkeypatch.setattr(packwriter, "_compress", zlib.compress)
    else:
        from isal import isal_zlib
        assert packwriter._compress is isal_zlib.compress
    repo = pygit2.init_repository(str(tmp_path / "s.git"), bare=True)
    pack_dir = os.path.join(repo.path, "objects", "pack")
    os.makedirs(pack_dir, exist_ok=True)
    stale = os.path.join(pack_dir, "tmp-tc-dead.pack")
    fresh = os.path.join(pack_dir, "tmp-tc-live.pack")
    for p in (stale, fresh):
        open(p, "wb").close()
    old = time.time() - packwriter.STALE - 60
    os.utime(stale, (old, old))
    blobs = [os.urandom(n) for n in (0, 1, 15, 16, 127, 128, 5000, 70000)] + [b"same"] * 3
    blobs += [(b"line %d\n" % i) * (i % 50) for i in range(3000)]  # many small ones: the queue turns over
    blobs.append(os.urandom(packwriter.QUEUE_BYTES + 1))  # one above the queue's budget
    w = packwriter.PackWriter(repo)
    ids = [w.add_blob(b) for b in blobs]
    assert w.finish() == len(set(blobs))
    assert not os.path.exists(stale) and os.path.exists(fresh)  # a live writer's file is left alone
    os.unlink(fresh)
    names = sorted(os.listdir(pack_dir))
    assert len(names) == 2 and names[0].endswith(".idx") and names[1].endswith(".pack"), names
    env = clean_env(GIT_DIR=repo.path)
    idx = os.path.join(pack_dir, names[0])
    out = subprocess.run(["git", "verify-pack", "-v", idx], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert subprocess.run(["git", "fsck", "--full", "--strict"], env=env, capture_output=True).returncode == 0
    fresh_repo = pygit2.Repository(repo.path)
    for oid, data in zip(ids, blobs):
        assert oid == pygit2.hash(data)
        assert fresh_repo[oid].data == data


def _rss_mapped(prefix: str) -> int:
    """Resident bytes of this process's mappings of files under `prefix` (/proc/self/smaps)."""
    total, inside = 0, False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split(maxsplit=5)
            if len(head) >= 5 and "-" in head[0] and not line[0].isupper():
                inside = len(head) == 6 and head[5].strip().startswith(prefix)
            elif inside and line.startswith("Rss:"):
                total += int(line.split()[1]) * 1024
    return total


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_first_snapshot_does_not_page_in_its_own_pack(tmp_path, tc_env_clean):
    """libgit2 confirms each index and tree entry's object by reading its header: for a first
    snapshot that touched every page of the new pack (its whole size in the process's RSS) to
    confirm ids the writer produced. The first snapshot now builds its trees itself (into the
    same pack) and hands libgit2 a finished index, so nothing asks; the check itself stays on:
    a tree naming a missing blob is refused."""
    from tc_git.engine import Engine

    def workspace(name, n):
        ws = tmp_path / name
        for i in range(n):
            d = ws / f"d{i // 100:02d}"
            d.mkdir(parents=True, exist_ok=True)
            # incompressible: pack ~ data; never "://" (with an "@" that is credential-shaped, and
            # ~half the runs loaded the secrets engine, whose mapped rules grew RssFile by 14 MiB)
            (d / f"f{i:04d}.bin").write_bytes(os.urandom(4096).replace(b"://", b"_//"))
        return ws

    warm = workspace("warm", 50)  # code paths paged in before measuring
    e = Engine(warm)
    e.init("warm", goal="g")
    e.save("s")
    ws = workspace("ws", 2500)
    e = Engine(ws)
    e.init("mem", goal="g")
    e.save("first")
    pack_dir = ws / ".checkpoints" / "objects" / "pack"
    pack = sum(p.stat().st_size for p in pack_dir.glob("*.pack"))
    assert pack > 9 << 20
    # the resident pages of the new pack's own mappings: not the process's whole RssFile, which
    # also grows with whatever else a loaded run happens to map (the secrets engine's rules: 14 MiB)
    paged = _rss_mapped(str(pack_dir.resolve()))
    assert paged < pack // 3, f"{paged >> 20} MiB of a {pack >> 20} MiB pack paged in"
    repo = pygit2.Repository(str(ws / ".checkpoints"))
    tb = repo.TreeBuilder()
    with pytest.raises(pygit2.GitError):
        tb.insert("x", pygit2.Oid(hex="1" * 40), pygit2.enums.FileMode.BLOB)


def test_imported_blobs_are_not_packed_again(tmp_path, tc_env_clean):
    """An imported task restored into an empty workspace: the snapshot after the restore is a
    first snapshot (empty private index), and its blobs are all in the imported pack already.
    They are read and hashed (the restore is verified) but not compressed and written again:
    the store keeps one pack; git fsck and stock git's tree of the workspace agree."""
    from conftest import fsck, git_tree

    from tc_git.engine import Engine

    src = tmp_path / "src"
    for i in range(60):
        d = src / f"d{i % 6}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"f{i}.txt").write_bytes(os.urandom(64).hex().encode())
    e = Engine(src)
    e.init("moving", goal="g")
    e.save("s1")
    out = tmp_path / "out"
    out.mkdir()
    bundle = e.export(str(out))["path"]
    ws = tmp_path / "ws"
    ws.mkdir()
    r = Engine(ws).import_(bundle, apply=True)
    assert r["restore"]["applied"] and r["restore"]["plan"]["counts"]["to_write"] == 60, r["restore"]
    store = ws / ".checkpoints"
    packs = [f for f in os.listdir(store / "objects" / "pack") if f.endswith(".pack")]
    assert len(packs) == 1, packs
    fsck(store)
    assert git_tree(ws, store) == str(pygit2.Repository(str(store))[r["restore"]["commit"]].tree_id)


def _tree_cache(index: bytes) -> dict[str, tuple[int, int, str]]:
    """The index's TREE extension read independently: path -> (entries, subtrees, tree id)."""
    assert index[:4] == b"DIRC"
    n = int.from_bytes(index[8:12], "big")
    pos = 12
    for _ in range(n):  # v2 entries: 62 bytes, the path, 1-8 NULs to a multiple of 8
        end = index.index(b"\0", pos + 62)
        pos += (end - pos + 8) // 8 * 8
    assert index[pos:pos + 4] == b"TREE", "no cache-tree extension"
    size = int.from_bytes(index[pos + 4:pos + 8], "big")
    body, i, out = index[pos + 8:pos + 8 + size], 0, {}
    stack: list[list] = []  # [path, subtrees still to read]
    while i < len(body):
        nul = body.index(b"\0", i)
        nl = body.index(b"\n", nul)
        name = body[i:nul].decode("utf-8", "surrogateescape")
        count, subs = map(int, body[nul + 1:nl].split(b" "))
        oid = body[nl + 1:nl + 21].hex()
        i = nl + 21
        while stack and stack[-1][1] == 0:
            stack.pop()
        parent = stack[-1] if stack else None
        if parent is not None:
            parent[1] -= 1
        path = (parent[0] + "/" + name if parent[0] else name) if parent is not None else ""
        out[path] = (count, subs, oid)
        stack.append([path, subs])
    return out


def _first_save(tmp_path, names):
    from tc_git.engine import Engine

    ws = tmp_path / "ws"
    for rel, data in names.items():
        p = ws / os.fsdecode(rel)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
    e = Engine(ws)
    e.init("trees", goal="g")
    r = e.save("first")
    return ws, ws / ".checkpoints", str(e.repo[r["commit"]].tree_id)


TRICKY = {  # names whose index order and tree order differ ("a-b/" < "a.b" < "a/" < "a0")
    "a": b"1", "a-b/x": b"2", "a.b": b"3", "a0": b"4", "b/a/c": b"5", "b/a-c": b"6", "b/a.c/d": b"7",
    "b/a0/e": b"8", "c d/e f": b"9", "\u00fc/\u00f1.txt": b"10", "x/.hidden": b"11", ".github/w.yml": b"12",
    "same1/z": b"twin", "same2/z": b"twin", "deep/" + "/".join(f"d{i}" for i in range(60)) + "/f": b"13",
    b"caf\xe9/n".decode("utf-8", "surrogateescape"): b"latin-1",
}


def test_first_snapshot_trees_are_gits_and_packed_with_their_cache(tmp_path, tc_env_clean):
    """The first snapshot's trees are built from the index entries (not by libgit2's write_tree,
    which wrote each as a loose object and read every entry's object header): they must be the
    trees stock git builds of the same workspace, all in the snapshot's one pack, and the index's
    TREE extension must name each of them with its entry and subtree counts, so that stock git's
    `write-tree` answers from it."""
    from conftest import fsck, git, git_tree

    ws, store, tree = _first_save(tmp_path, TRICKY)
    assert tree == git_tree(ws, store)
    fsck(store)
    packed = set()
    for idx in (store / "objects" / "pack").glob("*.idx"):
        for line in git(store, "verify-pack", "-v", str(idx)).decode().splitlines():
            parts = line.split()
            if len(parts) > 2 and parts[1] == "tree":
                packed.add(parts[0])
    trees = {tree} | {ln.split()[2] for ln in git(store, "ls-tree", "-r", "-t", "-d", tree).decode(
        "utf-8", "surrogateescape").splitlines()}
    assert trees <= packed, trees - packed
    cache = _tree_cache((store / "index").read_bytes())
    files = git(store, "ls-tree", "-r", "-z", "--name-only", tree).split(b"\0")[:-1]
    assert set(cache) == {""} | {os.fsdecode(f.rsplit(b"/", 1)[0]) for f in files if b"/" in f} | {
        os.fsdecode(b"/".join(f.split(b"/")[:k])) for f in files for k in range(1, f.count(b"/"))}
    for path, (count, subs, oid) in cache.items():
        want = tree if not path else git(store, "rev-parse", f"{tree}:{path}").decode(
            "utf-8", "surrogateescape").strip()
        assert oid == want, path
        prefix = os.fsencode(path) + b"/" if path else b""
        assert count == sum(f.startswith(prefix) for f in files), path
        assert subs == sum(1 for q in cache if q and q != path and q.rsplit("/", 1)[0] == path
                           or (not path and q and "/" not in q)), path
    env = clean_env(GIT_DIR=str(store), GIT_WORK_TREE=str(ws))
    assert subprocess.run(["git", "write-tree"], env=env, capture_output=True, check=True).stdout.decode().strip() \
        == tree


def test_first_snapshot_keeps_libgit2s_object_check_on(tmp_path, tc_env_clean, monkeypatch):
    """libgit2's object check (GIT_OPT_ENABLE_STRICT_OBJECT_CREATION) is process-wide: it was
    switched off while a first snapshot named its blobs, so a second workspace's save on another
    thread of the server ran without it. Checked from inside the first snapshot's last stretch
    (the marker cleared after its index and tree are written), and on the route that leaves a
    name to libgit2 (`git~1`)."""
    from tc_git.storage import handles

    seen = []
    real = handles.clear_marker

    def check(repo):
        tb = pygit2.Repository(repo.path).TreeBuilder()
        try:
            tb.insert("x", pygit2.Oid(hex="1" * 40), pygit2.enums.FileMode.BLOB)
            seen.append("accepted")
        except pygit2.GitError:
            seen.append("refused")
        return real(repo)

    monkeypatch.setattr(handles, "clear_marker", check)
    _first_save(tmp_path / "plain", {"a/b": b"1", "c": b"2"})
    _, _, tree = _first_save(tmp_path / "refused", {"a/b": b"1", "git~1": b"an NTFS alias of .git"})
    assert seen and set(seen) == {"refused"}, seen


def test_first_snapshot_smudges_only_what_changed_after_its_fence(tmp_path, tc_env_clean):
    """A fresh workspace's files were written just before its first snapshot: judged against the
    clock's racy window every entry was smudged (mtime 0), and every later full diff hashed every
    file again (a journal save never refreshes them). Judged against a fence taken before the
    snapshot reads anything, none is; and a same-size rewrite right after the snapshot (same
    tick) is still seen by the next save, whose tree is stock git's."""
    from conftest import git_tree

    from tc_git.engine import Engine
    from tc_git.storage import _native

    ws = tmp_path / "ws"
    for i in range(120):
        d = ws / f"d{i % 6}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"f{i}.txt").write_bytes(b"version one %03d\n" % i)
    e = Engine(ws)
    e.init("fence", goal="g")
    e.save("first")
    stats = _native.index_stats(e.repo.index)
    assert len(stats) == 120 and not [p for p, st in stats.items() if st[2] == 0 and st[3] == 0], stats
    for i in range(0, 120, 6):  # same size, new bytes, at once
        (ws / f"d{i % 6}" / f"f{i}.txt").write_bytes(b"version two %03d\n" % i)
    r = Engine(ws).save("second")
    assert r["changed"] == 20, r
    assert git_tree(ws, ws / ".checkpoints") == str(Engine(ws).repo[r["commit"]].tree_id)
