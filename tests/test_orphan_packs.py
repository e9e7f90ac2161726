"""Orphan packs larger than repack.SMALL_BYTES (8 MiB): a `.pack` without its `.idx` that a
killed writer (a first snapshot, a merge, a bundle import) or someone else left. Once stale it
goes through libgit2's indexer, streamed from the file (git index-pack's way): its objects are
visible again under its own name, or, thin, in the pack the indexer completed from the store
(the orphan then goes); damaged or truncated it is left exactly as it is, and remembered so no
later process indexes it again. Stock git makes every pack (`pack-objects`, deltas and thin
ones included); `git fsck --full`, `verify-pack` and `cat-file` judge the store after.
"""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pygit2
import pytest
from conftest import clean_env, fsck
from test_savepack import _store_with_small_packs

from tc_git.storage import _native, repack

SIG = pygit2.Signature("t", "t@example.com", 0, 0)


def _git(store, *args, input: bytes | None = None) -> bytes:
    return subprocess.run(["git", f"--git-dir={store}", *args], input=input, capture_output=True, check=True,
                          env=clean_env()).stdout


def _commit(repo, files: dict[str, bytes], parents=()) -> pygit2.Oid:
    tb = repo.TreeBuilder()
    for name, data in sorted(files.items()):
        tb.insert(name, repo.create_blob(data), pygit2.enums.FileMode.BLOB)
    return repo.create_commit(None, SIG, SIG, "c", tb.write(), list(parents))


def _big_files(seed: int) -> dict[str, bytes]:
    """> 8 MiB together: two incompressible blobs, a 1 MiB base and two near copies of it
    (stock git stores those as deltas)."""
    rnd = os.urandom  # (incompressible: the pack is as large as the data)
    base = rnd(1 << 20)
    return {"r1": rnd(4 << 20) + bytes([seed]), "r2": rnd(9 << 19), "base": base,
            "v1": base[:1000] + b"one" + base[1000:], "v2": base[:5000] + b"two" + base[5000:]}


@pytest.fixture
def store(tmp_path, monkeypatch):
    s = tmp_path / "s"
    ids = _store_with_small_packs(s, 2)
    (s / "tc").mkdir()
    monkeypatch.setattr(repack, "STALE", -1)  # (every file here was just written)
    repack._LEFT_ALONE.clear()
    return s, ids


def _orphan_of(src: Path, tip: pygit2.Oid, store: Path, thin_from: pygit2.Oid | None = None) -> Path:
    """Stock git's pack of everything reachable from `tip` in `src` (thin against `thin_from`),
    put in `store` as a `.pack` alone, named by its checksum; the ref `refs/heads/orphan` names
    `tip` (written by hand: its objects are in no visible pack yet)."""
    revs = f"{tip}\n" + (f"^{thin_from}\n" if thin_from else "")
    data = _git(src, "pack-objects", "--revs", "--stdout", "--window=10", "--depth=50",
                *(["--thin"] if thin_from else []), input=revs.encode())
    path = store / "objects" / "pack" / f"pack-{data[-20:].hex()}.pack"
    path.write_bytes(data)
    (store / "refs" / "heads" / "orphan").write_text(f"{tip}\n")
    return path


def _pack_files(store: Path) -> list[str]:
    return sorted(os.listdir(store / "objects" / "pack"))


native = pytest.mark.skipif(not _native.has(_native.INDEXER), reason="no native indexer (TC_NATIVE=off)")


@native
def test_large_orphan_with_deltas_gets_its_index(store, tmp_path):
    s, ids = store
    src = tmp_path / "src"
    repo = pygit2.init_repository(str(src), bare=True)
    tip = _commit(repo, _big_files(1))
    orphan = _orphan_of(src, tip, s)
    assert orphan.stat().st_size > repack.SMALL_BYTES
    before = orphan.read_bytes()
    repack.roll_up(pygit2.Repository(str(s)), packs_auto=100)
    assert orphan.read_bytes() == before and orphan.with_suffix(".idx").exists()
    assert b"chain length = 1" in _git(s, "verify-pack", "-v", str(orphan.with_suffix(".idx")))  # deltas in it
    fsck(s)
    want = [str(tip)] + [str(e.id) for e in repo[tip].tree]
    batch = _git(s, "cat-file", "--batch-check", input="\n".join(ids + want).encode() + b"\n")
    assert b"missing" not in batch, batch
    assert pygit2.Repository(str(s))[repo[tip].tree["v2"].id].data == repo[repo[tip].tree["v2"].id].data
    assert not [f for f in _pack_files(s) if f.startswith("tmp")]


@native
def test_large_thin_orphan_is_completed_from_the_store_and_goes(store, tmp_path):
    s, ids = store
    src = tmp_path / "src"
    repo = pygit2.init_repository(str(src), bare=True)
    files = _big_files(2)
    old = _commit(repo, {"base": files["base"]})
    # the store holds the old commit (the thin pack's bases) in a visible pack of its own
    data = _git(src, "pack-objects", "--revs", "--stdout", input=f"{old}\n".encode())
    subprocess.run(["git", f"--git-dir={s}", "index-pack", "--stdin"], input=data, check=True, capture_output=True,
                   env=clean_env())
    new = _commit(repo, {"r1": files["r1"], "r2": files["r2"], "base": files["v1"]}, [old])  # base edited: a delta
    orphan = _orphan_of(src, new, s, thin_from=old)
    assert orphan.stat().st_size > repack.SMALL_BYTES
    with pytest.raises(subprocess.CalledProcessError):  # thin: stock git cannot index it alone either
        _git(s, "index-pack", "-o", str(tmp_path / "x.idx"), str(orphan))
    packs_before = set(_pack_files(s))
    repack.roll_up(pygit2.Repository(str(s)), packs_auto=100)
    assert not orphan.exists()
    added = set(_pack_files(s)) - packs_before
    assert len(added) == 2 and all(f.startswith("pack-") for f in added), added
    fsck(s)
    want = [str(new), str(old)] + [str(e.id) for e in repo[new].tree]
    batch = _git(s, "cat-file", "--batch-check", input="\n".join(ids + want).encode() + b"\n")
    assert b"missing" not in batch, batch


@pytest.mark.parametrize("kind", ["truncated", "foreign-bytes", "over-the-limit"])
def test_large_orphan_that_cannot_be_indexed_is_left_as_it_is(store, tmp_path, monkeypatch, kind):
    s, ids = store
    src = tmp_path / "src"
    repo = pygit2.init_repository(str(src), bare=True)
    tip = _commit(repo, _big_files(3))
    orphan = _orphan_of(src, tip, s)
    (s / "refs" / "heads" / "orphan").unlink()  # (nothing may name what the orphan holds)
    if kind == "truncated":
        orphan.write_bytes(orphan.read_bytes()[:-300_000])  # (still above SMALL_BYTES)
    elif kind == "foreign-bytes":
        orphan.write_bytes(b"PACK" + os.urandom(9 << 20))
    else:
        monkeypatch.setattr(repack, "ORPHAN_INDEX_MAX", repack.SMALL_BYTES + 1)
    before, files = orphan.read_bytes(), _pack_files(s)
    repack.roll_up(pygit2.Repository(str(s)), packs_auto=100)
    assert orphan.read_bytes() == before and _pack_files(s) == files
    fsck(s)
    batch = _git(s, "cat-file", "--batch-check", input="\n".join(ids).encode() + b"\n")
    assert b"missing" not in batch, batch
    left = (s / "tc" / repack.LEFT_ALONE_FILE)
    if kind == "over-the-limit" or not _native.has(_native.INDEXER):
        return
    # remembered in the store: a later process does not feed it to the indexer again
    (s / "tc" / repack.LEFT_ALONE_FILE).write_text(left.read_text() + "pack-gone.pack 1 2 3 4\n")
    assert orphan.name in left.read_text()
    repack._LEFT_ALONE.clear()
    calls = []
    monkeypatch.setattr(_native, "PackSink", lambda *a, **k: calls.append(a) or pytest.fail("indexed again"))
    repack.roll_up(pygit2.Repository(str(s)), packs_auto=100)
    assert calls == [] and orphan.read_bytes() == before
    # another refusal rewrites the list without the orphan that is gone
    other = orphan.with_name("pack-" + "2" * 40 + ".pack")
    other.write_bytes(b"PACK" + os.urandom(9 << 20))
    monkeypatch.undo()
    monkeypatch.setattr(repack, "STALE", -1)
    repack.roll_up(pygit2.Repository(str(s)), packs_auto=100)
    names = {ln.split()[0] for ln in left.read_text().splitlines()}
    assert names == {orphan.name, other.name} and other.exists()
