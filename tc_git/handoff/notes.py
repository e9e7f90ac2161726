"""The notes ref (one JSON record per commit) across stores: the part of it a bundle carries,
and the union merge when two notes histories diverged (never an overwrite)."""
from __future__ import annotations

import json

import pygit2

from ..storage.store import signature
from ..timeline.chain import note_text, notes_map, notes_tree
from .refsel import as_oid, relation


def notes_for(repo: pygit2.Repository, tips, notes_tip) -> pygit2.Oid:
    """A parentless notes commit holding only the notes of commits reachable from `tips`.

    A bundle carries it as refs/notes/checkpoints; importing merges it (union) into the notes
    there, so nothing is lost, and nothing of other tasks leaves the store.
    """
    want: set[str] = set()
    stack = [as_oid(t) for t in tips]
    while stack:
        oid = stack.pop()
        h = str(oid)
        if h in want:
            continue
        want.add(h)
        stack.extend(repo[oid].peel(pygit2.Commit).parent_ids)
    tree = notes_tree(repo, {name: blob for name, blob in notes_map(repo, notes_tip).items() if name in want})
    sig = signature()
    return repo.create_commit(None, sig, sig, "Notes of the exported history (tc-git)\n", tree, [])


def _same_object(repo, a: pygit2.Oid, b: pygit2.Oid) -> pygit2.Oid:
    """Two different notes on one commit: the same result whichever store merges them (so two
    machines converge): JSON records are joined key by key, the note with the greater blob id
    winning a key both hold; anything else is the note with the greater blob id."""
    lo, hi = sorted((a, b), key=str)
    try:
        x, y = (json.loads(repo[o].peel(pygit2.Blob).data) for o in (lo, hi))
    except (ValueError, KeyError):
        return hi
    if not (isinstance(x, dict) and isinstance(y, dict)):
        return hi
    return repo.create_blob(note_text({**x, **y}).encode())


def merge_notes(repo: pygit2.Repository, ours, theirs) -> tuple[pygit2.Oid, str]:
    """Integrate two notes tips: fast-forward when one contains the other, else a merge commit
    whose tree is the union of both (two notes on the same object: `_same_object`)."""
    if theirs is None:
        return ours, "unchanged"
    if ours is None:
        return theirs, "fast-forward"
    rel = relation(repo, ours, theirs)
    if rel == "equal" or rel == "ahead":
        return ours, "unchanged"
    if rel == "behind":
        return theirs, "fast-forward"
    union = notes_map(repo, theirs)
    for name, blob in notes_map(repo, ours).items():
        other = union.get(name)
        union[name] = blob if other is None or other == blob else _same_object(repo, blob, other)
    sig = signature()
    oid = repo.create_commit(None, sig, sig, "Notes merged by tc-git (union)\n", notes_tree(repo, union), [ours, theirs])
    return oid, "merged"
