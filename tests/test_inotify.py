"""tc_git/workspace/inotify.py on its own: which paths a burst of real file-system changes delivers (the
change journal's input), read up to the barrier by `sync`. Real inotify, real directories."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tc_git.workspace import inotify

pytestmark = pytest.mark.skipif(not inotify.available(), reason="no native inotify here (Linux, TC_NATIVE on)")


class Seen:
    def __init__(self, ws: Path, store: Path | None = None):
        self.paths: set[str] = set()
        self.overflows = 0
        self.blind: list[str] = []
        self.barrier = str(store / "tc" / "journal-barrier") if store else None
        self.tree = inotify.Tree(str(ws), str(store) if store else None, self.barrier, self.paths.update,
                                 self._overflow, self.blind.append)

    def _overflow(self):
        self.overflows += 1

    def sync(self) -> set[str]:
        """Everything changed so far, then forget it."""
        def write():
            Path(self.barrier).write_text("b")

        assert self.tree.sync(write, 5.0)
        with self.tree.lock:  # (deliver runs under it, on either thread)
            out = set(self.paths)
            self.paths.clear()
        return out


@pytest.fixture
def seen(tmp_path):
    ws = tmp_path / "ws"
    (ws / ".checkpoints" / "tc").mkdir(parents=True)
    (ws / ".checkpoints" / "objects").mkdir()
    (ws / "src").mkdir()
    s = Seen(ws, ws / ".checkpoints")
    yield ws, s
    s.tree.stop(join=5)


def test_files_dirs_and_what_is_never_delivered(seen):
    ws, s = seen
    (ws / "src" / "a.py").write_text("a")
    (ws / ".checkpoints" / "objects" / "x").write_text("store")  # the store: not watched
    (ws / ".checkpoints" / "tc" / "server.log").write_text("log")  # its tc/: only the barrier counts
    (ws / ".git").mkdir()
    (ws / ".git" / "HEAD").write_text("ref")  # inside .git: not watched
    assert s.sync() == {"src/a.py"}  # (the .git directory itself is left out too)
    assert s.sync() == set()  # nothing since: an earlier barrier never ends a later wait early


def test_new_directory_noted_whole_then_watched(seen):
    ws, s = seen
    deep = ws / "new" / "a" / "b"
    deep.mkdir(parents=True)
    (deep / "f.txt").write_text("1")
    got = s.sync()
    assert "new" in got  # (the snapshot walks it: what came before its watch is found that way)
    (deep / "g.txt").write_text("2")
    assert s.sync() == {"new/a/b/g.txt"}


def test_moved_directory_keeps_its_watches_under_the_new_name(seen):
    ws, s = seen
    (ws / "src" / "pkg" / "sub").mkdir(parents=True)
    s.sync()
    os.rename(ws / "src" / "pkg", ws / "moved")
    assert {"src/pkg", "moved"} <= s.sync()
    (ws / "moved" / "sub" / "f.txt").write_text("after the move")
    assert s.sync() == {"moved/sub/f.txt"}
    shutil.rmtree(ws / "moved")
    assert "moved" in s.sync()
    assert s.tree.dirs and all(not d.startswith(b"moved") for d in s.tree.dirs.values())  # watches gone


def test_rename_both_names_and_non_utf8(seen):
    ws, s = seen
    (ws / "src" / "a.py").write_text("a")
    s.sync()
    name = os.fsdecode(b"caf\xe9.py")
    os.rename(ws / "src" / "a.py", ws / "src" / name)
    assert s.sync() == {"src/a.py", f"src/{name}"}


def test_no_barrier_watch_means_false(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    tree = inotify.Tree(str(ws), None, None, lambda p: None, lambda: None, lambda r: None)
    try:
        assert tree.sync(lambda: None, 0.1) is False  # (the journal then scans everything)
    finally:
        tree.stop(join=5)
