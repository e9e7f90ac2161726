"""The store stays compact by itself (repack.py; issue 33): saves write whole objects, the
roll-ups deltify them, so after many saves of files edited again and again the store's objects
stay within a small multiple of a bundle of the same history (what stock git needs). Stock git judges the
result (`fsck --strict`, `bundle verify`), and a process SIGKILLed inside a roll-up, at each of
its renames and unlinks in turn, leaves a store git accepts with every object there.
"""
from __future__ import annotations

import os
import random
import subprocess
import sys
import textwrap

import pygit2
import pytest
from conftest import clean_env, fsck, git, write
from test_savepack import _packs, _store_with_small_packs

from tc_git.engine import Engine
from tc_git.storage import repack


def _objects_bytes(store) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _dirs, files in os.walk(os.path.join(store, "objects"))
               for f in files)


def test_store_stays_within_twice_the_bundle_after_many_saves(tmp_path, monkeypatch):
    monkeypatch.setenv("TC_GIT", "off")
    monkeypatch.setattr(repack, "PACKS_AUTO", 4)  # (a short history: the same roll-ups, sooner)
    monkeypatch.setattr(repack, "LOOSE_AUTO", 32)
    ws = tmp_path / "ws"
    rng = random.Random(7)
    words = ["def", "return", "value", "items", "config", "index", "path", "data"]
    files = {f"src/m{i}.py": "".join(" ".join(rng.choice(words) for _ in range(8)) + f" {rng.random()}\n"
                                     for _ in range(600)) for i in range(6)}
    for rel, text in files.items():
        write(ws, rel, text)
    e = Engine(ws)
    e.init("compact")
    e.save("first")
    for i in range(90):
        for k in range(3):  # the same three files, each a little longer every step
            rel = f"src/m{k}.py"
            files[rel] += f"edit {i} of file {k}: {rng.random()}\n"
            write(ws, rel, files[rel])
        e.save(f"step {i}")
        if i % 10 == 9:
            write(ws, "src/m5.py", files["src/m5.py"] + f"drift {i}\n")
            e.capture()
    store = str(e.store.path)
    bundle = tmp_path / "h.bundle"
    git(store, "bundle", "create", "-q", str(bundle), "--all")
    git(store, "bundle", "verify", "-q", str(bundle))
    # rolled up with deltas, but in so short a history the newest saves (not yet rolled up: whole
    # objects, their indexes, the loose ones) weigh much, and how much depends on where the roll-up
    # cycle stands when the test ends (the loose estimate samples object ids, which hold the
    # commit times): 1.2x to 3.1x over 14 runs. Whole objects only (no roll-ups) are ~10x; the ~2x
    # claim is the longer history's test below.
    assert _objects_bytes(store) <= 4 * bundle.stat().st_size, (_objects_bytes(store), bundle.stat().st_size)
    assert len(_packs(store)) <= 2 * repack.PACKS_AUTO + 2
    git(store, "fsck", "--full", "--strict")
    assert [x["index"] for x in e.show(limit=200)["steps"]][-1] == 91


def _history(tmp_path, saves: int, files: int = 6, lines: int = 150):
    """A task of `saves` saves, each editing the same three files (a line replaced, one added now
    and then: sizes stay about the same, as an agent's edits), a drift every 10."""
    ws = tmp_path / "ws"
    rng = random.Random(7)
    words = ["def", "return", "value", "items", "config", "index", "path", "data"]

    def line() -> str:
        return " ".join(rng.choice(words) for _ in range(8)) + f" {rng.random()}\n"

    text = {f"src/m{i}.py": [line() for _ in range(lines)] for i in range(files)}
    for rel, t in text.items():
        write(ws, rel, "".join(t))
    for i in range(40):  # files never edited: trees worth deltifying
        write(ws, f"lib/d{i % 4}/f{i}.py", f"x = {i}\n")
    e = Engine(ws)
    e.init("compact")
    e.save("first")
    for i in range(saves):
        for k in range(3):
            t = text[f"src/m{k}.py"]
            t[rng.randrange(len(t))] = line()
            if i % 7 == k:
                t.insert(rng.randrange(len(t)), line())
            write(ws, f"src/m{k}.py", "".join(t))
        e.save(f"step {i}")
        if i % 10 == 9:
            t = text[f"src/m{files - 1}.py"]
            t[rng.randrange(len(t))] = line()
            write(ws, f"src/m{files - 1}.py", "".join(t))
            e.capture()
    return e


def test_a_long_history_stays_within_twice_its_bundle(tmp_path, monkeypatch):
    """300 saves of the same few files, the store's own upkeep only: its objects stay within 2x
    of a bundle of the same history (the roll-ups pack by path, so the versions of one file and
    of one tree delta each other)."""
    monkeypatch.setenv("TC_GIT", "off")
    e = _history(tmp_path, 300)
    store = str(e.store.path)
    bundle = tmp_path / "h.bundle"
    git(store, "bundle", "create", "-q", str(bundle), "--all")
    assert _objects_bytes(store) <= 2 * bundle.stat().st_size, (_objects_bytes(store), bundle.stat().st_size)
    git(store, "fsck", "--full", "--strict")


def test_compress_writes_one_pack_of_deltas_git_accepts(tmp_path, monkeypatch):
    """compress's pack: one, every object the refs and the private index name, the versions of
    each file as deltas of each other (walked by path), stock git's fsck and verify-pack happy."""
    monkeypatch.setenv("TC_GIT", "off")
    e = _history(tmp_path, 60)
    store = str(e.store.path)
    r = e.compress(keep_seconds=0, minimum=0, maximum=1)
    assert r["converted"] > 0, r
    assert len(_packs(store)) == 1
    git(store, "fsck", "--full", "--strict")
    idx = os.path.join(store, "objects", "pack", _packs(store)[0][:-5] + ".idx")
    rows = [ln.split() for ln in git(store, "verify-pack", "-v", idx).decode().splitlines()]
    blobs = [row for row in rows if len(row) >= 5 and row[1] == "blob"]
    deltas = [row for row in blobs if len(row) >= 7]  # (id, type, size, packed, offset, depth, base)
    assert len(deltas) >= 150, (len(deltas), len(blobs))  # 3 files x 60 versions, nearly all deltas
    bundle = tmp_path / "h.bundle"
    git(store, "bundle", "create", "-q", str(bundle), "--all")
    pack = os.path.getsize(idx[:-4] + ".pack")
    assert pack <= 1.3 * bundle.stat().st_size, (pack, bundle.stat().st_size)
    assert e.show(limit=5)["steps"]  # (the chain still reads)
    e.save("after compress")
    git(store, "fsck", "--full", "--strict")


def test_geometric_split_keeps_a_progression():
    def packs(*counts):
        return [repack.Pack(f"pack-{i:040d}", c, c * 100, (i,)) for i, c in enumerate(counts)]

    assert repack.geometric(packs(1000, 400, 100)) == []  # already a progression: nothing to do
    rolled = repack.geometric(packs(1000, 10, 10, 10, 45))
    assert sorted(p.count for p in rolled) == [10, 10, 10, 45]  # 75 made: 1000 stays above twice it
    assert sorted(p.count for p in repack.geometric(packs(100, 60, 10, 10))) == [10, 10, 60, 100]


KILL = textwrap.dedent("""
    import os, signal, sys
    import pygit2
    from tc_git.storage import repack
    n = int(sys.argv[2])
    calls = [0]
    def dying(real):
        def f(*a, **k):
            calls[0] += 1
            if calls[0] == n:
                os.kill(os.getpid(), signal.SIGKILL)
            return real(*a, **k)
        return f
    os.replace, os.unlink, os.fsync = dying(os.replace), dying(os.unlink), dying(os.fsync)
    print(repack.roll_up(pygit2.Repository(sys.argv[1]), packs_auto=2))
""")


def test_sigkill_at_each_step_of_a_roll_up_leaves_a_valid_store(tmp_path):
    """SIGKILL at the n-th fsync, rename or unlink of a roll-up, n = 1, 2, ... until one runs
    through; after each kill stock git accepts the store, every object is there, and a later
    roll-up (with what the killed one left: a `.pack` without `.idx`, a directory of links)
    still completes."""
    env = clean_env()
    n = 0
    while True:
        n += 1
        assert n < 60
        store = tmp_path / f"s{n}"
        ids = _store_with_small_packs(store, 4)
        r = subprocess.run([sys.executable, "-c", KILL, str(store), str(n)], env=env, capture_output=True)
        assert r.returncode in (0, -9), r.stderr.decode()
        fsck(store)
        batch = git(store, "cat-file", "--batch-check", input="\n".join(ids).encode() + b"\n").decode()
        assert "missing" not in batch, (n, batch)
        if r.returncode == 0:
            assert r.stdout.strip() == b"4" and len(_packs(store)) == 1
            break
        repack.roll_up(pygit2.Repository(str(store)), packs_auto=0)  # what the next save does
        fsck(store)
        batch = git(store, "cat-file", "--batch-check", input="\n".join(ids).encode() + b"\n").decode()
        assert "missing" not in batch, (n, batch)
    assert n >= 6  # fsyncs, two renames, two unlinks per merged pack: each was a kill point


@pytest.mark.parametrize("kind", ["fifo", "symlink"])
def test_what_is_not_a_pack_file_is_never_merged(tmp_path, kind):
    store = tmp_path / "s"
    ids = _store_with_small_packs(store, 3)
    d = store / "objects" / "pack"
    stem = _packs(store)[0][:-5]
    os.rename(d / f"{stem}.pack", tmp_path / "real.pack")
    if kind == "fifo":
        os.mkfifo(d / f"{stem}.pack")
    else:
        os.symlink(tmp_path / "real.pack", d / f"{stem}.pack")
    repack.roll_up(pygit2.Repository(str(store)), packs_auto=0)
    assert os.path.lexists(d / f"{stem}.pack") and (d / f"{stem}.idx").exists()  # left as it was
    os.unlink(d / f"{stem}.pack")
    os.rename(tmp_path / "real.pack", d / f"{stem}.pack")
    fsck(store)
    assert b"missing" not in git(store, "cat-file", "--batch-check", input="\n".join(ids).encode() + b"\n")
