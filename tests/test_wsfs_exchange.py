"""wsfs puts a restored file in place of an existing one by swapping the two names
(RENAME_EXCHANGE) and removing the old file, not by renaming over it (which makes ext4 start and
wait for the new file's write-back). The swap must be as safe as the rename: the name always
holds a whole file, the old inode is what is removed (a hard link elsewhere keeps its content),
nothing is left behind, a directory that takes the file's place at the last moment is put back
and the write refused, and where the call does not exist (or the `exchange` setting off) the
rename does the same job."""
from __future__ import annotations

import os

import pytest

from tc_git.storage import _native
from tc_git.workspace import pathsafe, wsfs

needs_swap = pytest.mark.skipif(not _native.has_renameat2() or wsfs._ops().kind != "fd",
                                reason="no renameat2 here (TC_NATIVE=off; TC_WSFS=paths: Windows' route renames)")


def _write(w, rel, data, mode=pathsafe.MODE_BLOB):
    w.write(rel, data, mode, expect_id=wsfs.blob_id(data))


def _leftovers(root):
    return sorted(n for _d, _s, files in os.walk(root) for n in files if ".tc-" in n)


@needs_swap
def test_replace_swaps_names_and_removes_the_old_file(tmp_path):
    (tmp_path / "a").mkdir()
    f = tmp_path / "a" / "f.txt"
    f.write_bytes(b"old\n")
    os.link(f, tmp_path / "keep")  # another name of the old inode
    old_ino = f.stat().st_ino
    calls = []
    with wsfs.Writer(tmp_path) as w:
        real = w.ops.exchange
        w.ops.exchange = lambda *a: calls.append(a) or real(*a)
        _write(w, "a/f.txt", b"new\n")
        _write(w, "a/x.sh", b"#!/bin/sh\n", pathsafe.MODE_EXEC)  # new: a plain rename
        _write(w, "a/f.txt", b"newer\n", pathsafe.MODE_EXEC)
    assert len(calls) == 2
    assert f.read_bytes() == b"newer\n" and os.access(f, os.X_OK)
    assert f.stat().st_ino != old_ino
    assert (tmp_path / "keep").read_bytes() == b"old\n" and (tmp_path / "keep").stat().st_nlink == 1
    assert _leftovers(tmp_path) == []


@needs_swap
def test_a_link_or_a_file_where_a_link_was(tmp_path):
    os.symlink("nowhere", tmp_path / "l")
    (tmp_path / "target").write_bytes(b"t\n")
    with wsfs.Writer(tmp_path) as w:
        _write(w, "l", b"now a file\n")  # the link itself is replaced, never followed
        _write(w, "target", b"elsewhere", pathsafe.MODE_LINK)
    assert not os.path.islink(tmp_path / "l") and (tmp_path / "l").read_bytes() == b"now a file\n"
    assert os.readlink(tmp_path / "target") == "elsewhere"
    assert _leftovers(tmp_path) == []


@needs_swap
def test_a_directory_in_the_files_place_at_the_last_moment_is_put_back(tmp_path):
    f = tmp_path / "f"
    f.write_bytes(b"old\n")
    with wsfs.Writer(tmp_path) as w:
        real = w.ops.exchange

        def racing(src, dst, h):  # someone swaps the file for a directory right before the swap
            if not (tmp_path / "f").is_dir():
                os.unlink(tmp_path / "f")
                (tmp_path / "f").mkdir()
                (tmp_path / "f" / "theirs").write_bytes(b"keep me\n")
            return real(src, dst, h)

        w.ops.exchange = racing
        with pytest.raises(wsfs.Refused, match="directory"):
            _write(w, "f", b"new\n")
    assert (tmp_path / "f" / "theirs").read_bytes() == b"keep me\n"
    assert _leftovers(tmp_path) == []


@pytest.mark.parametrize("how", ["setting", "unsupported", "caller"])
def test_without_the_swap_a_rename_does_it(tmp_path, monkeypatch, tune, how):
    """(`caller`: restore.apply under the drift watcher, whose Python threads would handle two
    more notifications per swapped file)"""
    f = tmp_path / "f"
    f.write_bytes(b"old\n")
    if how == "setting":
        tune(exchange="off")
    with wsfs.Writer(tmp_path, exchange=False if how == "caller" else None) as w:
        if how == "unsupported":
            w.ops.exchange = lambda *a: False
        else:
            w.ops.exchange = lambda *a: pytest.fail("no swap asked for")
        _write(w, "f", b"new\n")
    assert f.read_bytes() == b"new\n" and _leftovers(tmp_path) == []


@needs_swap
def test_the_file_vanishing_before_the_swap_is_a_plain_rename(tmp_path):
    f = tmp_path / "f"
    f.write_bytes(b"old\n")
    with wsfs.Writer(tmp_path) as w:
        real = w.ops.exchange

        def vanish(src, dst, h):
            if (tmp_path / "f").exists():
                os.unlink(tmp_path / "f")
            return real(src, dst, h)

        w.ops.exchange = vanish
        _write(w, "f", b"new\n")
    assert f.read_bytes() == b"new\n" and _leftovers(tmp_path) == []
