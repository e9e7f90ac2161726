"""trees.tree_deltas walks only the subtrees whose ids differ; it must list exactly what
libgit2's tree-to-tree diff lists (paths, order, statuses, modes, ids), with and without
TYPECHANGE, for random trees holding files, executables, links, gitlinks, nested directories,
files that became directories and names that sort around '/' ('a-b', 'a.txt', 'a/'); `None`
is the empty tree."""
from __future__ import annotations

import random

import pygit2
from conftest import random_tree
from pygit2.enums import DiffOption, FileMode

from tc_git.storage.trees import tree_deltas

NAMES = ["a", "a-b", "a.txt", "b", "x", "é", "z"]
MODES = [FileMode.BLOB, FileMode.BLOB, FileMode.BLOB_EXECUTABLE, FileMode.LINK, FileMode.COMMIT]


def _tree(repo, rng):
    return random_tree(repo, rng, MODES, NAMES, least=0, sub_p=0.35)


def _libgit2(repo, a, b, typechange):
    flags = DiffOption.INCLUDE_TYPECHANGE if typechange else DiffOption.NORMAL
    out = []
    for d in repo.diff(a, b, flags=flags).deltas:
        st = d.status_char()
        out.append((d.new_file.path or d.old_file.path, st, d.old_file.mode if st != "A" else 0,
                    d.new_file.mode if st != "D" else 0, str(d.new_file.id) if st != "D" else None))
    return out


def test_tree_deltas_equal_libgit2_diff(tmp_path):
    repo = pygit2.init_repository(str(tmp_path / "r.git"), bare=True)
    empty = repo[repo.TreeBuilder().write()]
    checked = 0
    for seed in range(600):
        rng = random.Random(seed)
        a, b = repo[_tree(repo, rng)], repo[_tree(repo, rng)]
        for typechange in (False, True):
            mine = [(d.path, d.status, d.old_mode, d.new_mode, str(d.new_id) if d.new_id else None)
                    for d in tree_deltas(repo, a, b, typechange)]
            assert mine == _libgit2(repo, a, b, typechange), (seed, typechange)
            checked += bool(mine)
        assert [(d.path, d.status) for d in tree_deltas(repo, None, b.id)] == \
            [(p, s) for p, s, *_ in _libgit2(repo, empty, b, False)]
    assert checked > 500  # most pairs differ: the comparison was not vacuous
