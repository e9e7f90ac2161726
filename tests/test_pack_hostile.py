"""Packs someone else planted or damaged in `objects/pack`, against `repack.roll_up`.

A roll-up rewrites small packs into one (libgit2's pack builder, deltas) and then removes them.
Each planted pack here duplicates ids that a valid save pack holds and is named to sort first, so
a merge that trusted it would keep its copy under those ids and delete the valid one. Stock git
makes the packs (`pack-objects`), the test then damages them the way a bad disk or an attacker
would. The planted pack is left as it was, or removed once every id it names is in the new pack with
the content libgit2 read and hashed (from a copy that held it whole); after the merge the planted files are removed and
stock `git fsck --full` plus `cat-file` judge that every valid object is still there with its
content. A `.pack` without its `.idx` is removed only when every object in it is elsewhere, and
otherwise gets its index back.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import stat
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import pygit2
import pytest
from conftest import clean_env, fsck
from test_savepack import _packs, _store_with_small_packs

from tc_git.storage import _native, repack, savepack
from tc_git.storage.packwriter import _REC, _index_v2, object_header

FIRST = "pack-" + "0" * 40  # sorts before every real pack name


def _git(store, *args, input: bytes | None = None) -> bytes:
    return subprocess.run(["git", f"--git-dir={store}", *args], input=input, capture_output=True, check=True,
                          env=clean_env()).stdout


def _git_pack(store: Path, ids: list[str], out: Path, window: int = 0) -> Path:
    """Stock git packs `ids` of `store` into `out/pack-<sum>.{pack,idx}` (whole objects unless
    `window`); returns the stem."""
    out.mkdir(parents=True, exist_ok=True)
    name = _git(store, "pack-objects", f"--window={window}", f"--depth={50 if window else 0}", str(out / "pack"),
                input="\n".join(ids).encode() + b"\n").decode().strip()
    return out / f"pack-{name}"


def _plant(src: Path, store: Path, stem: str = FIRST, idx: bytes | None = None, pack: bytes | None = None) -> Path:
    d = store / "objects" / "pack"
    (d / f"{stem}.pack").write_bytes(pack if pack is not None else src.with_suffix(".pack").read_bytes())
    if idx is not False:
        (d / f"{stem}.idx").write_bytes(idx if idx is not None else src.with_suffix(".idx").read_bytes())
    return d / stem


def _read(idx: Path) -> tuple[list[tuple[bytes, int, int]], bytes]:
    """(raw id, crc32, offset) of each entry as stock git's `show-index` reads them, and the pack
    checksum the index names."""
    data = idx.read_bytes()
    out = subprocess.run(["git", "show-index"], input=data, capture_output=True, check=True).stdout.decode()
    recs = [(bytes.fromhex(i), int(c.strip("()"), 16), int(o)) for o, i, c in (ln.split() for ln in out.splitlines())]
    return recs, data[-40:-20]


def _idx(recs, pack_sum: bytes) -> bytes:
    return _index_v2(b"".join(_REC.pack(*r) for r in recs), pack_sum)


def _judge(store: Path, ids: list[str], planted: Path, before: bytes, may_go: bool = False) -> None:
    """The planted pack was left exactly as it was (or, `may_go`: merged and removed), and
    without it the store is whole."""
    got = planted.with_suffix(".pack").read_bytes() if planted.with_suffix(".pack").exists() else None
    assert got == before or (may_go and got is None), "the planted pack was changed, or removed though damaged"
    for ext in (".pack", ".idx"):
        planted.with_suffix(ext).unlink(missing_ok=True)
    fsck(store)
    batch = _git(store, "cat-file", "--batch-check", input="\n".join(ids).encode() + b"\n").decode()
    assert "missing" not in batch, batch
    repo = pygit2.Repository(str(store))  # and each one's bytes hash to its id (a new handle: no cache)
    for i in ids:
        obj = repo.odb.read(i)
        kind = {1: b"commit", 2: b"tree", 3: b"blob", 4: b"tag"}[int(obj[0])]
        assert hashlib.sha1(b"%s %d\0" % (kind, len(obj[1])) + obj[1]).hexdigest() == i


@pytest.fixture
def store(tmp_path):
    s = tmp_path / "s"
    ids = _store_with_small_packs(s, 4)
    return s, ids


def _blob_ids(store: Path, ids: list[str]) -> list[str]:
    return [i for i in ids if _git(store, "cat-file", "-t", i).strip() == b"blob"]


@pytest.mark.parametrize("damage", ["lying-idx", "bad-crc", "truncated", "bad-zlib-size", "missing-base",
                                    "extra-bytes"])
def test_planted_or_damaged_pack_is_left_alone_and_nothing_valid_is_lost(store, tmp_path, damage):
    s, ids = store
    blobs = _blob_ids(s, ids)
    victim = blobs[0]  # a valid object the planted pack claims too
    good = _git_pack(s, [victim], tmp_path / "git")  # stock git's pack of it: one whole blob
    recs, pack_sum = _read(good.with_suffix(".idx"))
    pack = good.with_suffix(".pack").read_bytes()

    def resum(p: bytes) -> bytes:  # the pack's own checksum made right again, as an attacker would
        return p[:-20] + hashlib.sha1(p[:-20]).digest()

    if damage == "lying-idx":
        # other content under the victim's id: a pack of another blob whose .idx names the victim
        # (CRCs, pack checksum and the index's own checksum all consistent)
        other = _git_pack(s, [blobs[1]], tmp_path / "other")
        orecs, osum = _read(other.with_suffix(".idx"))
        pack = other.with_suffix(".pack").read_bytes()
        idx = _idx([(bytes.fromhex(victim), orecs[0][1], orecs[0][2])], osum)
    elif damage == "bad-crc":  # a flipped bit in the object's data; pack and index checksums redone
        off = recs[0][2] + 4
        pack = resum(pack[:off] + bytes([pack[off] ^ 0x01]) + pack[off + 1:])
        idx = _idx(recs, pack[-20:])
    elif damage == "truncated":
        pack = pack[:-30]
        idx = None
    elif damage == "bad-zlib-size":  # the header says one byte more than the stream holds; CRC redone
        data = subprocess.run(["git", f"--git-dir={s}", "cat-file", "blob", victim], capture_output=True,
                              check=True).stdout
        entry = object_header(3, len(data) + 1) + zlib.compress(data)
        pack = resum(pack[:12] + entry + b"\0" * 20)
        idx = _idx([(bytes.fromhex(victim), zlib.crc32(entry), 12)], pack[-20:])
    elif damage == "missing-base":  # a ref-delta to an object no one has, claiming the victim's id
        data = subprocess.run(["git", f"--git-dir={s}", "cat-file", "blob", victim], capture_output=True,
                              check=True).stdout
        delta = bytes([0, len(data)]) + bytes([len(data)]) + data  # base size 0, insert the bytes
        assert len(data) < 128
        entry = object_header(7, len(delta)) + hashlib.sha1(b"no such base").digest() + zlib.compress(delta)
        pack = resum(b"PACK" + struct.pack(">II", 2, 1) + entry + b"\0" * 20)
        idx = _idx([(bytes.fromhex(victim), zlib.crc32(entry), 12)], pack[-20:])
    else:  # extra-bytes: garbage between the header and the first entry the index names
        pack = resum(pack[:12] + b"\x30" + pack[12:])
        idx = _idx([(r[0], r[1], r[2] + 1) for r in recs], pack[-20:])
    planted = _plant(good, s, idx=idx, pack=pack)
    before = planted.with_suffix(".pack").read_bytes()
    valid_packs = [p for p in _packs(s) if not p.startswith(FIRST)]
    merged = repack.roll_up(pygit2.Repository(str(s)), packs_auto=1)
    assert merged >= len(valid_packs)  # the valid ones were merged all the same
    assert len([p for p in _packs(s) if not p.startswith(FIRST)]) == 1
    # left as it was, or removed as merged: every id it names is in the new pack with the content
    # libgit2 read and hashed (from whichever copy held it whole); never its bytes under a lie
    _judge(s, ids, planted, before, may_go=True)


def test_git_delta_pack_is_merged_and_a_fifo_left_alone(store, tmp_path):
    """A valid pack with deltas (git's own) is merged like any other; a FIFO under a pack's name
    is never opened for a blocking read (the merge would hang under the store's lock)."""
    s, ids = store
    repo = pygit2.Repository(str(s))
    base = b"".join(b"line %d of a file that changes a little\n" % i for i in range(400))
    similar = [repo.create_blob(base + b"edit %d\n" % k) for k in range(4)]
    delta = _git_pack(s, [str(x) for x in similar], tmp_path / "d", window=10)
    assert b"delta" in _git(s, "verify-pack", "-v", str(delta.with_suffix(".idx")))  # git made deltas
    for oid in similar:  # only the planted pack has them now
        os.unlink(s / "objects" / str(oid)[:2] / str(oid)[2:])
    planted = _plant(delta, s, stem="pack-" + "1" * 40)
    before = planted.with_suffix(".pack").read_bytes()
    fifo = s / "objects" / "pack" / FIRST
    shutil.copy(delta.with_suffix(".idx"), fifo.with_suffix(".idx"))
    os.mkfifo(fifo.with_suffix(".pack"))
    # in a child process: a regression would block in open() forever
    r = subprocess.run([sys.executable, "-c", "import sys, pygit2; from tc_git.storage import repack; "
                        "print(repack.roll_up(pygit2.Repository(sys.argv[1]), packs_auto=1))", str(s)],
                       capture_output=True, timeout=120, env=clean_env())
    assert r.returncode == 0 and r.stdout.strip() == b"5", r.stderr.decode()
    assert not planted.with_suffix(".pack").exists() and len(before) > 0  # merged: its objects are in the new pack
    assert stat.S_ISFIFO(os.lstat(fifo.with_suffix(".pack")).st_mode)
    os.unlink(fifo.with_suffix(".pack"))
    os.unlink(fifo.with_suffix(".idx"))
    fsck(s)
    _git(s, "cat-file", "--batch-check", input="\n".join(ids + [str(x) for x in similar]).encode() + b"\n")
    assert b"missing" not in _git(s, "cat-file", "--batch-check",
                                  input="\n".join(ids + [str(x) for x in similar]).encode() + b"\n")


def test_pack_without_idx(store, tmp_path, monkeypatch):
    """A `.pack` without its `.idx` (a save killed between its two renames, a merge killed
    between its two unlinks): left alone while it may be a live writer's; once stale, removed
    when every object in it is elsewhere, given its index back when it holds the only copy,
    left alone when it cannot be proven (deltas)."""
    s, ids = store
    d = s / "objects" / "pack"
    repo = pygit2.Repository(str(s))
    # the only copy: a save's pack whose .idx never made it
    pack = savepack.SavePack(repo, loose_max=0)
    only = [str(pack.add_blob(b"only in the orphan %d\n" % i)) for i in range(3)]
    pack.finish()
    stem = next(p[:-5] for p in _packs(s) if _git(s, "show-index", input=(d / (p[:-5] + ".idx")).read_bytes())
                .find(only[0].encode()) >= 0)
    idx_bytes = (d / f"{stem}.idx").read_bytes()
    os.unlink(d / f"{stem}.idx")
    # a duplicate: stock git's pack of objects the valid packs hold
    dup = _git_pack(s, ids, tmp_path / "dup")
    _plant(dup, s, stem=dup.name, idx=False)
    # deltas: cannot be proven without an index
    base = b"".join(b"row %d of a slowly edited file\n" % i for i in range(300))
    similar = [str(repo.create_blob(base + b"v%d\n" % k)) for k in range(3)]
    delta = _git_pack(s, similar, tmp_path / "delta", window=10)
    _plant(delta, s, stem=delta.name, idx=False)
    delta_bytes = delta.with_suffix(".pack").read_bytes()

    repack.roll_up(pygit2.Repository(str(s)), packs_auto=100)  # fresh: nothing touched
    assert not (d / f"{stem}.idx").exists() and (d / f"{dup.name}.pack").exists()

    monkeypatch.setattr(repack, "STALE", -1)  # (the files were all just written)
    repack.roll_up(pygit2.Repository(str(s)), packs_auto=100)
    assert (d / f"{stem}.idx").read_bytes() == idx_bytes  # the same index the save would have written
    assert not (d / f"{dup.name}.pack").exists()
    assert (d / f"{delta.name}.pack").read_bytes() == delta_bytes
    # deltas: libgit2's indexer gives it its index back (no native indexer: left alone)
    assert (d / f"{delta.name}.idx").exists() == _native.has(_native.INDEXER)
    _git(s, "verify-pack", str(d / f"{stem}.idx"))
    fsck(s)
    batch = _git(s, "cat-file", "--batch-check", input="\n".join(ids + only + similar).encode() + b"\n")
    assert b"missing" not in batch, batch
