"""Retention for a task's drifts, then a repack that really frees the space.

Steps, restores, imports, closes and restore points (the drift taken before each restore) are
never dropped. Drifts are dropped when older than `keep_seconds` beyond the newest `minimum`
ones, or beyond the newest `maximum` ones. Dropping rewrites the chain (the only rewrite tc-git
ever does): commits after the first dropped drift are recreated with the same trees, messages,
dates and notes. The notes refs then hold one parentless commit each (the notes as they are
now: their history, a commit and a tree per note ever written, is most of a long task's store).
The new commits and notes go to memory, then to one pack (no loose object each). Then every
object reachable from any ref, and what the private index names, is written to one new pack
(`packs.builder`: walked by libgit2 with each object's path, so versions of a file delta each
other) and the old packs and loose objects are removed, so the bytes of dropped states are gone.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import time
from typing import cast

import pygit2

from ..base.fsutil import atomic_write
from ..base.refs import NOTES_REF, NOTES_REFS
from ..storage import _native, mempack, packs
from .chain import Timeline, note_text, notes_map, notes_tree, signature


def _dir_bytes(path: str) -> int:
    total = 0
    for dirpath, _d, files in os.walk(path):
        for f in files:
            try:
                total += os.lstat(os.path.join(dirpath, f)).st_size
            except FileNotFoundError:
                pass
    return total


def compress_task(store, tl: Timeline, keep_seconds: int, minimum: int, maximum: int, progress=None) -> dict:
    repo = tl.repo
    chain = list(tl.walk())[::-1]  # oldest first
    drifts = [e for e in chain if e.kind == "drift"]
    now = time.time()
    droppable = []
    for rank, e in enumerate(reversed(drifts)):  # rank 0 = newest drift
        rec = tl.record(e.oid)
        if rec.get("restore_point"):
            continue
        too_old = rank >= minimum and now - e.time > keep_seconds
        too_many = rank >= maximum
        if too_old or too_many:
            droppable.append(e.oid)
    drop = set(droppable)
    before = _dir_bytes(os.path.join(store.path, "objects"))
    # One pass, whatever the history's length: the commits after the first dropped drift are
    # made again and every note change goes into one map, written as one notes tree at the end
    # (a note written per commit rewrote the notes tree and made a notes commit each time:
    # ~4,000 of them at 2,000 steps, 679-1,009 s under load).
    notes = {ref: _notes_of(repo, ref) for ref in NOTES_REFS}
    gone: list[str] = []  # the old chain's commits whose notes go once the ref has moved
    # The new commits, notes and notes trees go to memory, then to one pack, before any ref names
    # them (written loose, ~0.5 ms each: 2.5 s of 15 at 2,000 steps, and as much to delete).
    with mempack.bulk_writes(repo) as (work, held_pack):
        if drop:
            head = _rewrite(tl, work, chain, drop, notes, gone)
        # the notes as they are now, as one parentless commit each: the history of the notes (a
        # commit and a tree per note ever written, the bulk of a long task's store) is then
        # unreachable and the repack below frees it. The old chain's notes stay until the task's
        # ref has moved: a crash in between leaves either chain with all its notes.
        squashed = {ref: _notes_commit(work, ref, held) for ref, held in notes.items()
                    if held or repo.references.get(ref) is not None}
        if held_pack is not None:
            held_pack.flush()
    for ref, new in squashed.items():
        if new is not None:
            repo.references.create(ref, new, force=True)
    if drop:
        _supersede(store, tl.ref, chain[-1].oid)  # (before the ref moves: a crash leaves it harmless)
        repo.references[tl.ref].set_target(head, "tc: compress")
        for ref, held in notes.items():
            for old in gone:
                held.pop(old, None)
            if repo.references.get(ref) is not None:
                _set_notes(repo, ref, held)
    freed_by_pack = repack(store, progress) if drop or any(squashed.values()) or _untidy(store) else 0
    after = _dir_bytes(os.path.join(store.path, "objects"))
    return {"converted": len(drop), "eligible": len(droppable), "already_gone": 0,
            "bytes_freed": max(0, before - after), "bytes_before": before, "bytes_after": after,
            "packed_objects": freed_by_pack}


def _rewrite(tl: Timeline, repo: pygit2.Repository, chain: list, drop: set, notes: dict, gone: list) -> pygit2.Oid:
    """The chain without the `drop`ped drifts, written through `repo` (compress's in-memory
    handle): each commit after the first dropped one made again over its parent's new id, its note
    added under the new id (`notes`, every notes ref's map, changed in place); the old commits'
    ids into `gone`. Returns the new head."""
    top = tl.record(chain[-1].oid).get("counters") or {}  # the head's: ids handed out so far
    parent = None
    rewriting = False
    made: dict = {}  # new commit -> its note's record
    for e in chain:
        old = str(e.oid)
        if e.oid in drop:
            rewriting = True
            gone.append(old)
            continue
        if not rewriting:
            parent = e.oid
            continue
        c = repo[e.oid].peel(pygit2.Commit)
        new = repo.create_commit(None, c.author, c.committer, c.message, c.tree_id, [parent] if parent else [])
        note = made[new] = dict(tl.record(e.oid), rewritten_from=old)
        notes[NOTES_REF][str(new)] = repo.create_blob(note_text(note).encode("utf-8"))
        gone.append(old)
        for ref, held in notes.items():  # (the blame notes: the same lines, the new commit)
            if ref != NOTES_REF and old in held:
                held[str(new)] = held[old]
        parent = new
    head = cast(pygit2.Oid, parent)  # (the init commit is never dropped)
    counters = _kept_counters(made[head] if head in made else tl.record(head), top)
    if counters is not None:
        notes[NOTES_REF][str(head)] = repo.create_blob(note_text(counters).encode("utf-8"))
    return head


_HEX40 = re.compile(r"[0-9a-f]{40}")
SUPERSEDED = "superseded.json"  # in the store's state directory
SUPERSEDED_KEPT = 20  # old heads kept per ref (one per compress that dropped something)


def _supersede(store, ref: str, old_head) -> None:
    """Remember that compress replaced `old_head` as the tip of `ref`: the copies of the task in
    the user's repository still hold the old chain, which the new one does not contain, and the
    mirror may replace them with the new one (`superseded`) instead of calling them diverged."""
    have = superseded(store)
    heads = [h for h in have.get(ref, []) if h != str(old_head)] + [str(old_head)]
    have[ref] = heads[-SUPERSEDED_KEPT:]
    atomic_write(store.state_dir / SUPERSEDED, json.dumps(have, sort_keys=True).encode())


def superseded(store) -> dict[str, list[str]]:
    """{ref: the heads compress replaced there, oldest first}; {} when none (or unreadable)."""
    try:
        got = json.loads((store.path / "tc" / SUPERSEDED).read_bytes())
    except (OSError, ValueError):
        return {}
    if not isinstance(got, dict):
        return {}
    return {k: [h for h in v if isinstance(h, str) and _HEX40.fullmatch(h)]
            for k, v in got.items() if isinstance(k, str) and isinstance(v, list)}


def replaced_by_compress(repo: pygit2.Repository, tip, heads) -> bool:
    """`tip` (a task's head elsewhere: the user's repository, a remote) is one of the `heads`
    compress replaced here, or a commit of such an old chain: nothing in it that this store's
    chain lacks but the drifts compress dropped on purpose."""
    for h in heads:
        old = pygit2.Oid(hex=h)
        if old == tip or (old in repo.odb and repo.descendant_of(old, tip)):
            return True
    return False


def _kept_counters(rec: dict, top: dict) -> dict | None:
    """Ids never change meaning: when the newest drifts were dropped, the new head's note still
    carries the counters of the old head, so the next capture is d0007 after d0006, never a
    second d0001 (ids are numbered from the head's counters). The head's record with them, or
    None when it has them already."""
    have = rec.get("counters") or {}
    merged = dict(have)
    for k, v in top.items():
        if isinstance(v, int) and v > int(have.get(k) or 0):
            merged[k] = v
    return None if merged == have else {**rec, "counters": merged}


def _notes_of(repo, ref: str) -> dict[str, pygit2.Oid]:
    target = repo.references.get(ref)
    return notes_map(repo, target.target) if target is not None else {}


def _set_notes(repo, ref: str, notes: dict[str, pygit2.Oid]) -> None:
    """`ref` moved to one parentless notes commit holding `notes` (unless it is that already)."""
    new = _notes_commit(repo, ref, notes)
    if new is not None:
        repo.references.create(ref, new, force=True)


def _notes_commit(repo, ref: str, notes: dict[str, pygit2.Oid]) -> pygit2.Oid | None:
    """One parentless notes commit holding `notes`; None when `ref` is that already."""
    tree = notes_tree(repo, notes)
    old = repo.references.get(ref)
    if old is not None:
        c = repo[old.target].peel(pygit2.Commit)
        if c.tree_id == tree and not c.parent_ids:
            return None
    sig = signature()
    return repo.create_commit(None, sig, sig, "Notes compressed by tc-git\n", tree, [])


def _tips(repo) -> list:
    """The commits the refs point at (a ref to anything else is not followed)."""
    tips = []
    for name in repo.references:
        try:
            tips.append(repo.references[name].peel(pygit2.Commit).id)
        except (pygit2.GitError, ValueError, KeyError):
            continue
    return list(dict.fromkeys(tips))


def _untidy(store) -> bool:
    """Loose objects, or more than one pack: a repack has something to do."""
    objects = os.path.join(store.path, "objects")
    if any(len(d) == 2 and os.listdir(os.path.join(objects, d)) for d in os.listdir(objects)
           if all(ch in "0123456789abcdef" for ch in d)):
        return True
    pack_dir = os.path.join(objects, "pack")
    return os.path.isdir(pack_dir) and sum(f.endswith(".pack") for f in os.listdir(pack_dir)) > 1


def _write_pack(repo: pygit2.Repository, pb: pygit2.PackBuilder, pack_dir: str) -> tuple[int, str | None]:
    """`pb`'s pack (with its .idx) in place in objects/pack: (objects written, its name)."""
    os.makedirs(pack_dir, exist_ok=True)
    for f in os.listdir(pack_dir):  # left by a repack that was killed
        if f.startswith("tmp_tc_pack_"):
            shutil.rmtree(os.path.join(pack_dir, f), ignore_errors=True)
    # written by libgit2 alone (pygit2's write: a callback per object into the indexer cost
    # 2.7 s of 15 at 2,000 steps). It does not say the pack's name: written into a private
    # directory, then the .pack moved before its .idx, so a reader never finds an index without
    # its pack
    tmp = tempfile.mkdtemp(prefix="tmp_tc_pack_", dir=pack_dir)
    try:
        with _native.whole_windows():  # (libgit2's indexer writes the .idx)
            pb.write(tmp)
    except BaseException:  # (a full disk: nothing of it is left behind)
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    written = sorted(os.listdir(tmp), key=lambda f: f.endswith(".idx"))
    for f in written:
        os.replace(os.path.join(tmp, f), os.path.join(pack_dir, f))
    os.rmdir(tmp)
    return pb.written_objects_count, next((f.rsplit(".", 1)[0] for f in written if f.endswith(".pack")), None)


def repack(store, progress=None) -> int:
    """Write every object a ref reaches, and those only the private index names, into one pack,
    then delete the old packs and the loose objects."""
    repo = store.repo
    # The private index (stat cache) names blobs and, in its TREE cache, subtrees that the next
    # snapshot will reuse without re-checking: they must survive, added below the refs' walk
    # (what the walk holds already is not added twice).
    idx = repo.index
    idx.read(False)
    index_tree = idx.write_tree()
    pack_dir = os.path.join(store.path, "objects", "pack")
    old_packs = [f for f in os.listdir(pack_dir) if f.startswith("pack-")] if os.path.isdir(pack_dir) else []
    # walked by libgit2 with each object's path, so versions of one file delta together: 1.4 MB
    # at 2,000 steps of 200 files, against 8.7 MB for the same objects added by id (`git repack
    # -adf`: 1.7 MB); no Python walk of every tree (most of compress's 13.6 s at 5,000 steps)
    pb = packs.builder(repo, tips=_tips(repo), trees=[index_tree])
    total = len(pb)
    if progress:
        progress(0, total, "repacking")
    keep = [_write_pack(repo, pb, pack_dir)[1]]  # (an old pack of the very same objects has its name)
    del pb  # (its object list and delta cache, before the old packs go)
    # the new packs (with their .idx) are complete on disk before anything old goes away
    for f in old_packs:
        if any(name and f.startswith(name + ".") for name in keep):
            continue
        os.unlink(os.path.join(pack_dir, f))
    objects = os.path.join(store.path, "objects")
    for d in os.listdir(objects):
        if len(d) == 2 and all(ch in "0123456789abcdef" for ch in d):
            sub = os.path.join(objects, d)
            for f in os.listdir(sub):
                os.unlink(os.path.join(sub, f))
            os.rmdir(sub)  # (an empty directory is 4 KiB on disk: up to 1 MiB for the 256)
        elif d.startswith("tmp_object_git2_"):
            os.unlink(os.path.join(objects, d))
    store.reopen()
    if progress:
        progress(total, total, "repacked")
    return total
