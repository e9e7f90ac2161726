"""A full disk on every write path (issue 28): save, capture, record, import and compress on a
small tmpfs filled to 64 KiB of free space fail with the coded `no_space` error (never a raw
libgit2 "object not found" traceback), the store stays `git fsck`-clean, and once the space is
freed the same operation succeeds.

Needs `mount -t tmpfs` (root, as in CI); skipped with the reason where mounting is not allowed.
"""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from conftest import TC, TRANSCRIPTS, clean_env, fsck, write

from tc_git.base.validate import SystemFault
from tc_git.engine import Engine

LEFT = 64 << 10


@pytest.fixture
def disk(tmp_path):
    mnt = tmp_path / "disk"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=32m,mode=0700", "tmpfs", str(mnt)],
                       capture_output=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({r.stderr.decode(errors='replace').strip()}): needs root")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def fill(mnt: Path) -> Path:
    """Leave LEFT bytes free on the file system (deterministic: statvfs, then one write)."""
    filler = mnt / "filler"
    st = os.statvfs(mnt)
    n = max(0, st.f_bavail * st.f_frsize - LEFT)
    with open(filler, "ab") as f:
        while n:
            n -= f.write(bytes(min(n, 4 << 20)))
    return filler


def junk(store: Path) -> list[str]:
    """Temporary files a failed write could leave in the store."""
    return sorted(p.name for p in store.rglob("*") if p.name.startswith(("tmp", "pack_git2_", ".tc-space", "quarantine")))


def test_every_write_path_says_disk_full_and_works_once_space_is_freed(disk, tmp_path):
    src = tmp_path / "src"
    write(src, "theirs.bin", os.urandom(1 << 20))
    es = Engine(src)
    es.init("theirs")
    es.save("their step")
    bundle = es.export(str(tmp_path))["path"]

    ws = disk / "ws"
    write(ws, "a.txt", "a\n")
    e = Engine(ws)
    e.init("mine")
    e.save("one")
    for i in range(3):  # drifts for compress to pack
        write(ws, f"d{i}.bin", os.urandom(300 << 10))
        e.capture()
    store = ws / ".checkpoints"
    transcript = str(TRANSCRIPTS / "claude-drmaciver-2.jsonl")

    def new_file(name):
        return lambda: write(ws, name, os.urandom(2 << 20))

    def nothing():
        return None

    ops = [("save", new_file("big.bin"), lambda: e.save("two")),
           ("capture", new_file("big2.bin"), e.capture),
           ("record", nothing, lambda: e.record(transcript=transcript)),
           ("import", nothing, lambda: e.import_(bundle, apply=False)),
           ("compress", nothing, lambda: e.compress(keep_seconds=0, minimum=0))]
    for name, prepare, op in ops:
        prepare()  # (the workspace shares the disk: its new files are written first)
        before = junk(store)
        filler = fill(disk)
        with pytest.raises(SystemFault) as err:
            op()
        assert err.value.code == "no_space", (name, err.value.message)
        assert "disk is full" in err.value.message, (name, err.value.message)
        filler.unlink()
        fsck(store)
        assert junk(store) == before, name
        op()  # space freed: the same operation goes through

    # the CLI says the same, with no traceback
    write(ws, "cli.bin", os.urandom(2 << 20))
    filler = fill(disk)
    r = subprocess.run([*TC, "save", "from the cli"], cwd=ws, capture_output=True, env=clean_env(TC_GIT="off"))
    out = r.stderr.decode(errors="replace")
    assert r.returncode != 0 and "disk is full" in out and "Traceback" not in out, out
    filler.unlink()
    subprocess.run([*TC, "save", "from the cli"], cwd=ws, check=True, capture_output=True, env=clean_env(TC_GIT="off"))
    fsck(store)
