"""A tracked directory that becomes a symbolic link: the files indexed under its name are gone
from the workspace, whatever the link points at.

`os.lstat` follows links before the last name, so a refresh of `e/deep/f` through a link `e`
found a file (the link's target's) and kept it under `e/deep/f`: the saved tree held a path the
workspace no longer has (beside, or instead of, the link), restores of it failed and undo was not
exact (test_restore_property's falsifying example: write e/deep/f, save, rename e to d/y.py,
link e -> d/y.py, save), and a link to a directory outside the workspace had its files read and
stored. Stock git is the judge of the tree.
"""
from __future__ import annotations

import os
import subprocess

from conftest import clean_env, fsck, git_tree, write

from tc_git.engine import Engine


def _names(repo, tree, prefix=""):
    for e in tree:
        if e.type_str == "tree":
            yield from _names(repo, repo[e.id], prefix + e.name + "/")
        else:
            yield prefix + e.name


def test_directory_turned_link_inside_the_workspace(tmp_path):
    ws = tmp_path / "ws"
    write(ws, "e/deep/f", b"")
    write(ws, "keep.txt", b"k\n")
    eng = Engine(ws)
    eng.init("links")
    eng.save("one")
    os.makedirs(ws / "d")
    os.rename(ws / "e", ws / "d/y.py")
    os.symlink("d/y.py", ws / "e")
    r = eng.save("two")
    repo = eng.repo
    tree = repo[r["commit"]].tree
    assert sorted(_names(repo, tree)) == ["d/y.py/deep/f", "e", "keep.txt"]
    assert str(tree.id) == git_tree(ws, eng.store.path)
    back = eng.restore(index=1, apply=True)
    assert back["applied"] and back["failed"] == [], back
    assert (ws / "e/deep/f").is_file() and not (ws / "e").is_symlink() and not (ws / "d").exists()
    u = eng.undo(apply=True)
    assert u["applied"] and u["failed"] == [], u
    assert os.readlink(ws / "e") == "d/y.py" and (ws / "d/y.py/deep/f").is_file()
    fsck(eng.store.path)


def test_directory_turned_link_to_outside_is_never_read(tmp_path):
    ws = tmp_path / "ws"
    outside = tmp_path / "outside"
    write(ws, "conf/settings.txt", b"inside\n")
    write(outside, "settings.txt", b"a file outside the workspace\n")
    eng = Engine(ws)
    eng.init("outside")
    eng.save("one")
    os.unlink(ws / "conf/settings.txt")
    os.rmdir(ws / "conf")
    os.symlink(outside, ws / "conf")
    r = eng.save("two")
    tree = eng.repo[r["commit"]].tree
    assert sorted(_names(eng.repo, tree)) == ["conf"]
    # a hook's refresh of the path an edit tool named: nothing new (the link is recorded)
    assert eng.capture(paths=["conf/settings.txt"])["captured"] is False
    blob = subprocess.run(["git", "hash-object", "--stdin"], input=b"a file outside the workspace\n",
                          capture_output=True, check=True).stdout.decode().strip()
    assert subprocess.run(["git", f"--git-dir={eng.store.path}", "cat-file", "-e", blob],
                          env=clean_env()).returncode != 0, "a file outside the workspace was stored"
    assert str(tree.id) == git_tree(ws, eng.store.path)
    fsck(eng.store.path)
