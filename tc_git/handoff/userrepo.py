"""The task's refs mirrored into the user's own repository (the one around the workspace): one
pack of the objects it lacks, compare-and-swap ref updates, notes merged, and a fingerprint of
everything else in its git directory taken before and after to prove nothing else changed."""
from __future__ import annotations

from pathlib import Path

import pygit2

from ..base.refs import NOTES_REF, NOTES_REFS, line_of_ref, task_of_ref
from ..base.results import GitInfo
from ..storage import packs
from ..storage.store import Store, repository_around
from ..timeline import gitguard
from ..timeline.compress import replaced_by_compress, superseded
from .notes import merge_notes
from .refsel import cas_update, line_refs, ref_target, relation, task_refs


def user_gitdir(store: Store) -> Path | None:
    """The git directory of the repository around the store's workspace (never the store itself)."""
    found = repository_around(store.workspace)
    if found is None:
        return None
    p = Path(found.path).resolve()
    own = store.path.resolve()
    if p == own or own in p.parents:
        return None
    return p


def sync_into_repo(src: pygit2.Repository, gitdir: Path, refs: dict[str, pygit2.Oid],
                   superseded: dict[str, list[str]] | None = None) -> dict:
    """Copy `refs` (and the objects they need) from the store into a repository on disk.
    `superseded`: {ref: heads compress replaced there}; a target still at one of them (or at a
    commit before one) is the old chain, replaced by the new one, not a divergence.

    Objects: ONE pack of what the target lacks (libgit2 cannot push into a non-bare repository).
    When the target holds every mirrored ref at a commit of the store (each mirror after the
    first, one writer), the pack is what the new tips reach beyond those, walked and packed
    natively (packs.build with hides; 13 objects in ~1 ms at 10k files, measured). Otherwise
    (the first mirror, a new milestone, notes merged on the user's side) the walk stops at
    anything the target already has, its own commits' blobs and subtrees included: at the first
    mirror of a committed workspace that is a handful of objects instead of the whole tree again
    (16 against 10,117 at 10k files); TC_NATIVE=off always takes this walk (the Python walk
    with hides stops only at the hidden commits and their root trees). Refs: compare-and-swap in one transaction; a
    task/milestone ref that diverged is reported, never overwritten; the notes are merged.
    """
    user = pygit2.Repository(str(gitdir), pygit2.enums.RepositoryOpenFlag.NO_SEARCH)
    odb = user.odb

    def have(oid):
        return oid in odb

    held = [ref_target(user, name) for name in refs]
    if packs.native_walk() and held and all(h is not None and h in src.odb for h in held):
        pack = packs.build(src, refs.values(), hides=held)
    else:
        pack = packs.build(src, refs.values(), have=have)
    count = pack.write_into(user, gitguard.common_dir(Path(user.path)) / "objects" / "pack")
    if count:
        user = pygit2.Repository(str(gitdir), pygit2.enums.RepositoryOpenFlag.NO_SEARCH)
    updates: dict[str, tuple] = {}
    skipped: dict[str, str] = {}
    notes_state = None
    kept = {refs[n] for n in refs if line_of_ref(n)}  # tips the lines below keep (a shared task)
    for name, new in refs.items():
        old = ref_target(user, name)
        rel = relation(user, old, new)
        if rel == "equal":
            continue
        if name in NOTES_REFS:
            merged, state = merge_notes(user, new, old)
            notes_state = state if name == NOTES_REF else notes_state
            if merged != old:
                updates[name] = (old, merged)
        elif rel in ("absent", "behind") or (rel == "diverged" and task_of_ref(name) and old in kept):
            updates[name] = (old, new)  # (a diverged head whose tip a line mirrored with it keeps)
        elif rel == "diverged" and replaced_by_compress(user, old, (superseded or {}).get(name, ())):
            updates[name] = (old, new)
        else:
            skipped[name] = f"{rel} in the target; left as it is"
    cas_update(user, updates, "tc-git: export")
    return {"objects": count, "updated": sorted(updates), "skipped": skipped, "notes": notes_state}


def mirror_task(store: Store, task_id: str, label: str | None, verify: bool = True, enabled: bool = True) -> GitInfo:
    """Mirror a task (its head, milestones and the notes) into the user's repository. Never raises."""
    return mirror(store, lambda repo: {**task_refs(repo, task_id, milestones_only=True), **line_refs(repo, task_id)},
                  label, verify, enabled)


def mirror(store: Store, pick, label: str | None, verify: bool = True, enabled: bool = True) -> GitInfo:
    """Copy the refs `pick(store_repo)` names into the user's repository. Never raises.

    `verify`: fingerprint the user's git directory before and after (what must not change there,
    gitguard.py); False when the caller already watches it as a whole (Engine._watch_user_git) or
    the user switched it off. `enabled`: False (TC_GIT=off, read by the engine) mirrors nothing."""
    out: GitInfo = {"ok": False, "ref": None, "reason": None, "unchanged": None}
    if not enabled:
        out["reason"] = "TC_GIT=off"
        return out
    before = None
    gitdir = None
    try:
        gitdir = user_gitdir(store)
        if gitdir is None:
            out["reason"] = "not a git repo"
            return out
        before = gitguard.fingerprint(gitdir) if verify else None
        res = sync_into_repo(store.repo, gitdir, pick(store.repo), superseded(store))
        out["ok"], out["ref"], out["objects"] = not res["skipped"], label, res["objects"]
        if res["skipped"]:
            out["error"] = "; ".join(f"{k}: {v}" for k, v in res["skipped"].items())
    except Exception as e:  # the operation stands whatever happens here
        out["ok"], out["error"] = False, f"{type(e).__name__}: {e}"
    if before is not None:
        try:
            changed = gitguard.diff(before, gitguard.fingerprint(gitdir))
            out["unchanged"] = not changed
            if changed:
                out["changed"] = changed
        except Exception as e:
            out["unchanged"] = None
            out.setdefault("error", f"verification failed: {e}")
    return out
