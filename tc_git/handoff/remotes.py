"""Sync through any git remote: every task/session/milestone ref and the notes, with explicit
refspecs. What a remote sends goes through the quarantine first; notes that diverged are
merged, any other divergence is reported and never overwritten."""
from __future__ import annotations

import contextlib
import os
import re
import shutil
from pathlib import Path

import pygit2

from .. import _native
from ..errors import BadInput, Conflict, NotFound, Unavailable
from ..refs import NOTES_REF, SYNC_HAVE_PREFIX, SYNC_WANT_PREFIX, is_ours, task_of_ref
from ..results import PullResult, PushResult
from ..store import Store
from ..timeline import Timeline, head_ref
from .notes import merge_notes
from .quarantine import adopt_loose, adopt_packs, quarantine, refuse_hostile_trees
from .refsel import as_oid, cas_update, ref_target, relation, valid_ref
from .userrepo import mirror, user_gitdir


class _PushCallbacks(pygit2.RemoteCallbacks):
    def __init__(self):
        super().__init__()
        self.rejected: dict[str, str] = {}
        self.accepted: list[str] = []

    def push_update_reference(self, refname, message):
        if message:
            self.rejected[refname] = message
        else:
            self.accepted.append(refname)


def resolve_remote(store: Store, remote: str | None) -> str:
    if remote and ("://" in remote or remote.startswith(("/", "~", ".")) or re.match(r"^[^/:]+@[^:]+:", remote)
                   or Path(os.path.expanduser(remote)).exists()):
        if "://" in remote or re.match(r"^[^/:]+@[^:]+:", remote):
            return remote
        return str(Path(os.path.expanduser(remote)).resolve())
    gitdir = user_gitdir(store)
    name = remote or "origin"
    if gitdir is None:
        raise BadInput(f"no remote given and {store.workspace} is not in a git repository: pass a URL or a path")
    try:
        url = pygit2.Repository(str(gitdir)).remotes[name].url
    except (KeyError, pygit2.GitError):
        url = None
    if not url:
        raise NotFound(f"the repository {gitdir} has no remote {name!r}: pass a URL or a path")
    return url


def _remote_refs(remote) -> dict[str, pygit2.Oid]:
    out = {}
    for h in remote.list_heads():
        name = getattr(h, "name", None)
        oid = getattr(h, "oid", None) or getattr(h, "id", None)
        if name and oid is not None and is_ours(name) and not name.endswith("^{}"):
            out[name] = as_oid(oid)
    return out


def _fetch_verified(store: Store, url: str, refs: dict[str, pygit2.Oid]) -> None:
    """Fetch the objects behind remote refs the store lacks into a quarantine, check every tree
    they bring (pathsafe), and only then move them into the store. A refused remote leaves no
    object behind (BadInput)."""
    repo = store.repo
    want = {n: o for n, o in refs.items() if o not in repo}
    if not want:
        return
    with quarantine(store) as q:
        # the store's tips as refs of the quarantine (objects reached through alternates): the
        # negotiation then asks only for what is new
        for i, (_n, oid) in enumerate(sorted((n, ref_target(repo, n)) for n in repo.references if is_ours(n))):
            if oid is not None:
                with contextlib.suppress(pygit2.GitError, ValueError):
                    q.references.create(f"{SYNC_HAVE_PREFIX}{i}", oid, force=True)
        try:
            with _native.whole_windows():  # (libgit2's indexer receives the pack)
                q.remotes.create_anonymous(url).fetch([f"+{n}:{SYNC_WANT_PREFIX}{i}" for i, n in enumerate(sorted(want))],
                                                      message="tc-git: sync")
        except pygit2.GitError as e:
            raise Unavailable(f"fetch from {url} failed: {e}") from e
        q = pygit2.Repository(q.path)
        lacking = [n for n, o in want.items() if o not in q]
        if lacking:
            raise Unavailable(f"the remote {url} did not send {', '.join(sorted(lacking)[:5])}: try again")
        refuse_hostile_trees(q, want.values(), repo, f"remote {url}")
        adopt_packs(q, store)
        adopt_loose(q, store)
    store.reopen()


def push(store: Store, remote: str | None = None) -> PushResult:
    """Send every task/session/milestone ref and the notes to a git remote (explicit refspecs)."""
    url = resolve_remote(store, remote)
    with store.lock():
        repo = store.repo
        r = repo.remotes.create_anonymous(url)
        try:
            theirs = _remote_refs(r)
        except pygit2.GitError as e:
            raise Unavailable(f"cannot reach remote {url}: {e}") from e
        _fetch_verified(store, url, theirs)
        repo = store.repo
        ours = {n: ref_target(repo, n) for n in repo.references if is_ours(n) and valid_ref(n)}
        ours = {n: o for n, o in ours.items() if o is not None}
        to_push, behind, conflicts, notes_state = [], [], {}, None
        for name, oid in sorted(ours.items()):
            rel = relation(repo, theirs.get(name), oid)
            if rel == "equal":
                continue
            if name == NOTES_REF and rel == "diverged":
                merged, notes_state = merge_notes(repo, oid, theirs[name])
                cas_update(repo, {NOTES_REF: (oid, merged)}, "tc-git: merge notes before push")
                to_push.append(name)
            elif rel in ("absent", "behind"):
                to_push.append(name)
            elif rel == "ahead":
                behind.append(name)
            else:
                conflicts[name] = "diverged: the remote has commits this store lacks and vice versa"
        cb = _PushCallbacks()
        if to_push:
            try:
                # a fresh remote: the one above is connected in the fetch direction
                with _native.whole_windows():  # (a local remote: libgit2's indexer receives the pack)
                    repo.remotes.create_anonymous(url).push([f"{n}:{n}" for n in to_push], callbacks=cb)
            except pygit2.GitError as e:
                raise Conflict(f"push to {url} failed: {e}") from e
    if cb.rejected:
        raise Conflict(f"the remote {url} rejected " + "; ".join(f"{k} ({v})" for k, v in sorted(cb.rejected.items()))
                       + (f"; accepted: {', '.join(sorted(cb.accepted))}" if cb.accepted else ""))
    return {"remote": url, "ok": not conflicts, "pushed": to_push, "remote_ahead": behind, "conflicts": conflicts,
            "notes": notes_state or ("pushed" if NOTES_REF in to_push else "unchanged"),
            "up_to_date": len(ours) - len(to_push) - len(behind) - len(conflicts)}


def pull(store: Store, remote: str | None = None, verify: bool = True, mirror_git: bool = True) -> PullResult:
    """Fetch every task/session/milestone ref and the notes from a git remote and integrate them:
    new refs are created, fast-forwards applied, diverged notes merged, other divergence reported.
    Moved tasks are mirrored into the user's repository (`verify`, `mirror_git`: see userrepo.mirror)."""
    url = resolve_remote(store, remote)
    created_store = False
    if not store.exists:
        store.create()
        created_store = True
    try:
        return _pull(store, url, created_store, verify, mirror_git)
    except BadInput:
        if created_store:  # a refused remote writes nothing, not even the store this pull made
            shutil.rmtree(store.path, ignore_errors=True)
        raise


def _pull(store: Store, url: str, created_store: bool, verify: bool, mirror_git: bool) -> PullResult:
    with store.lock():
        repo = store.repo
        r = repo.remotes.create_anonymous(url)
        try:
            theirs = {n: o for n, o in _remote_refs(r).items() if valid_ref(n)}
        except pygit2.GitError as e:
            raise Unavailable(f"cannot reach remote {url}: {e}") from e
        _fetch_verified(store, url, theirs)
        repo = store.repo
        updates: dict[str, tuple] = {}
        created: list[str] = []
        fast_forwarded: list[str] = []
        local_ahead: list[str] = []
        conflicts: dict[str, str] = {}
        notes_state = None
        for name, oid in sorted(theirs.items()):
            ours = ref_target(repo, name)
            if name == NOTES_REF:
                merged, notes_state = merge_notes(repo, ours, oid)
                if merged != ours:
                    updates[name] = (ours, merged)
                continue
            rel = relation(repo, ours, oid)
            if rel == "absent":
                updates[name] = (ours, oid)
                created.append(name)
            elif rel == "behind":
                updates[name] = (ours, oid)
                fast_forwarded.append(name)
            elif rel == "ahead":
                local_ahead.append(name)
            elif rel == "diverged":
                conflicts[name] = "diverged: kept the local ref; import the remote one under a new id"
        cas_update(repo, updates, "tc-git: pull")
        active = store.active_task()
        moved_tasks = [n for n in created + fast_forwarded if task_of_ref(n)]
        git = mirror(store, lambda repo: {n: ref_target(repo, n) for n in moved_tasks + [NOTES_REF]
                                          if ref_target(repo, n) is not None}, None, verify, mirror_git) if moved_tasks else None
    moved = bool(active and head_ref(active) in fast_forwarded)
    return {"remote": url, "ok": not conflicts, "created": created, "fast_forwarded": fast_forwarded,
            "local_ahead": local_ahead, "conflicts": conflicts, "notes": notes_state or "unchanged",
            "store_created": created_store, "active_task_moved": moved, "git": git,
            "hint": _restore_hint(store.repo, active) if moved and active else None}


def _restore_hint(repo: pygit2.Repository, task_id: str) -> str | None:
    head = Timeline(repo, task_id).head()
    if head.kind == "drift" and head.drift:
        return f"the active task moved: preview the files with `tc-git restore {head.drift}` (add --apply)"
    if head.step:
        return f"the active task moved: preview the files with `tc-git restore {head.step}` (add --apply)"
    return None
