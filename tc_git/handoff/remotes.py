"""Sync through any git remote: every task/session/milestone ref and the notes, with explicit
refspecs. What a remote sends goes through the quarantine first; notes that diverged are
merged, any other divergence is reported and never overwritten."""
from __future__ import annotations

import contextlib
import os
import random
import re
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pygit2

from ..base.errors import BadInput, Conflict, NotFound, Unavailable
from ..base.refs import (
    NOTES_REF,
    NOTES_REFS,
    SYNC_HAVE_PREFIX,
    SYNC_WANT_PREFIX,
    is_ours,
    line_of_ref,
    line_ref,
    task_of_ref,
    task_ref,
)
from ..base.results import PullResult, PushResult
from ..base.settings import child_env
from ..storage import _native
from ..storage.store import Store
from ..timeline.chain import Timeline, head_ref
from ..timeline.compress import replaced_by_compress, superseded
from .notes import merge_notes
from .quarantine import adopt_loose, adopt_packs, quarantine, refuse_hostile_trees
from .refsel import as_oid, cas_update, line_refs, ref_target, relation, valid_ref
from .userrepo import mirror, user_gitdir


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


def _local_repository(url: str) -> pygit2.Repository | None:
    """The repository a path or file:// remote names, opened read-only for checks, or None."""
    path = url[len("file://"):] if url.startswith("file://") else url
    if "://" in path or not os.path.isdir(path):
        return None
    try:
        return pygit2.Repository(path, pygit2.enums.RepositoryOpenFlag.NO_SEARCH)
    except (pygit2.GitError, KeyError):
        return None


def _fetch_verified(store: Store, url: str, refs: dict[str, pygit2.Oid], max_file: int | None = None) -> None:
    """Fetch the objects behind remote refs the store lacks into a quarantine, check every tree
    they bring (pathsafe), and only then move them into the store. A refused remote leaves no
    object behind (BadInput)."""
    _sweep_quarantines(store)
    repo = store.repo
    want = {n: o for n, o in refs.items() if o not in repo}
    if not want:
        return
    local = _local_repository(url)
    if local is not None:
        # libgit2 serves a path or file:// remote in this process, reading whole every object it
        # packs: check the remote's trees (sizes from object headers) before anything is sent
        refuse_hostile_trees(local, want.values(), repo, f"remote {url}", max_file)
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
        refuse_hostile_trees(q, want.values(), repo, f"remote {url}", max_file)
        adopt_packs(q, store)
        adopt_loose(q, store)
    store.reopen()


# a push that lost a race (the remote moved between our fetch and our push) is tried again
PUSH_BUDGET_S = 120.0
_RETRYABLE = ("fetch first", "non-fast-forward", "stale info", "cannot lock", "failed to lock", "failed to update",
              "incorrect old value", "atomic push failed", "atomic push failure", "unable to lock", "reference already exists")


def _git_env() -> dict[str, str]:
    return child_env(GIT_TERMINAL_PROMPT="0")  # never wait for a password on a terminal nobody watches


def _git_push(store: Store, url: str, refs: list[str], leases: dict[str, pygit2.Oid] | None = None) \
        -> tuple[bool, dict[str, str], str]:
    """`git push --atomic` of `refs` (name:name) from the store: git's own send and receive
    sides, so the remote's hooks and rules apply (a path remote included), and the remote takes
    every ref or none. Never forced, but for the refs in `leases` (a chain compress replaced
    here): those only while the remote still holds the old tip named (--force-with-lease).
    (accepted?, {ref: why refused}, stderr)."""
    git = shutil.which("git")
    if not git:
        raise Unavailable("push needs the git command line (git's atomic push); install git and push again")
    leases = leases or {}
    r = subprocess.run([git, f"--git-dir={store.path}", "-c", "core.hooksPath=/dev/null", "push", "--atomic",
                        "--porcelain", "--no-verify", *[f"--force-with-lease={n}:{o}" for n, o in sorted(leases.items())],
                        url, *[f"{'+' if n in leases else ''}{n}:{n}" for n in refs]],
                       capture_output=True, text=True, env=_git_env(), stdin=subprocess.DEVNULL)
    refused: dict[str, str] = {}
    for line in r.stdout.splitlines():
        parts = line.split("\t")
        if len(parts) >= 3 and parts[0] == "!":
            refused[parts[1].split(":", 1)[-1]] = parts[2].strip()
    err = (r.stderr or "").strip()
    if r.returncode and not refused:
        refused["*"] = err.splitlines()[-1] if err else f"git push exited {r.returncode}"
    return r.returncode == 0 and not refused, refused, err


def _retryable(refused: dict[str, str], err: str) -> bool:
    text = (" ".join(refused.values()) + " " + err).lower()
    if "hook declined" in text or "denied" in text or "not support" in text:
        return False
    return any(k in text for k in _RETRYABLE) or all("atomic" in v for v in refused.values())


def line_name(oid) -> str:
    """The name a local line of a shared task is kept under: this machine and the line's tip (the
    same line always gets the same name, two machines never the same one)."""
    host = re.sub(r"[^A-Za-z0-9._-]+", "-", socket.gethostname()).strip("-._")[:40] or "machine"
    return f"{host}-{str(oid)[:10]}"


def _keep_lines(repo: pygit2.Repository, theirs: dict[str, pygit2.Oid]) -> dict[str, tuple[str, str]]:
    """Tasks continued both here and on the remote: the remote's head stays `head`, the local one
    is kept as `refs/checkpoints/tasks/<id>/lines/<machine>-<tip>` (one transaction). Returns
    {task head ref: (line ref, the local tip)}."""
    updates: dict[str, tuple] = {}
    kept: dict[str, tuple[str, str]] = {}
    for name, oid in sorted(theirs.items()):
        task = task_of_ref(name)
        ours = ref_target(repo, name) if task else None
        if task is None or relation(repo, ours, oid) != "diverged":
            continue
        lref = line_ref(task, line_name(ours))
        cur = ref_target(repo, lref)
        if cur not in (None, ours):  # (10 hex digits shared by two tips: the whole id then)
            lref = line_ref(task, f"{line_name(ours)}{str(ours)[10:]}")
            cur = ref_target(repo, lref)
        if cur is None:
            updates[lref] = (None, ours)
        updates[name] = (ours, oid)
        kept[name] = (lref, str(ours))
    cas_update(repo, updates, "tc-git: keep the local line of a shared task")
    return kept


def _compressed_here(store: Store, repo: pygit2.Repository, theirs: dict[str, pygit2.Oid]) -> set[str]:
    """Task heads the remote holds as they were before a compress here rewrote them: this
    store's chain is their newer version (push replaces them, pull keeps ours), not a task
    continued on both sides."""
    sup = superseded(store)
    return {n for n, o in theirs.items() if n in sup and task_of_ref(n)
            and relation(repo, ref_target(repo, n), o) == "diverged" and replaced_by_compress(repo, o, sup[n])}


def _joined(repo: pygit2.Repository, name: str, oid) -> bool:
    """A line already joined into its task (its tip is in the head's history)."""
    line = line_of_ref(name)
    if line is None:
        return False
    head = ref_target(repo, task_ref(line[0]))
    return head is not None and (head == oid or repo.descendant_of(head, oid))


def _sweep_quarantines(store: Store) -> None:
    """Remove what killed syncs left behind (tc/quarantine-*): the caller holds the store's lock
    and every quarantine lives under it, so any one there now is dead."""
    for d in (store.path / "tc").glob("quarantine-*"):
        shutil.rmtree(d, ignore_errors=True)


def push(store: Store, remote: str | None = None, budget: float = PUSH_BUDGET_S) -> PushResult:
    """Send every task/session/milestone ref and the notes to a git remote (explicit refspecs).

    Converges by itself: fetch what the remote has, merge the notes (union), keep tasks that were
    continued on both sides as lines of one task, then push everything in one atomic push; a
    lost race (the remote moved meanwhile) starts over after a short random wait, for at most
    `budget` seconds (each lost race means another push won: the whole always progresses).
    Raises Conflict when anything asked for is not on the remote."""
    url = resolve_remote(store, remote)
    t0 = time.monotonic()
    attempt = 0
    lines: dict[str, tuple[str, str]] = {}
    while True:
        attempt += 1
        with store.lock():
            repo = store.repo
            try:
                theirs = _remote_refs(repo.remotes.create_anonymous(url))
            except pygit2.GitError as e:
                raise Unavailable(f"cannot reach remote {url}: {e}; check the URL and the network, then push again") from e
            _fetch_verified(store, url, theirs)
            repo = store.repo
            replaced = _compressed_here(store, repo, theirs)
            lines.update(_keep_lines(repo, {n: o for n, o in theirs.items() if n not in replaced}))
            ours = {n: ref_target(repo, n) for n in repo.references if is_ours(n) and valid_ref(n)}
            ours = {n: o for n, o in ours.items() if o is not None}
            to_push, behind, conflicts, notes_state = [], [], {}, None
            leases = {n: theirs[n] for n in replaced if n in ours}
            for name, oid in sorted(ours.items()):
                rel = relation(repo, theirs.get(name), oid)
                if rel == "equal":
                    continue
                if name in NOTES_REFS and rel == "diverged":
                    merged, state = merge_notes(repo, oid, theirs[name])
                    notes_state = state if name == NOTES_REF else notes_state
                    cas_update(repo, {name: (oid, merged)}, "tc-git: merge notes before push")
                    ours[name] = merged
                    to_push.append(name)
                elif rel == "absent" and _joined(repo, name, oid):
                    continue  # a line already joined into its task: nothing more to share
                elif rel in ("absent", "behind"):
                    to_push.append(name)
                elif rel == "ahead":
                    behind.append(name)
                elif name in leases:
                    to_push.append(name)
                else:
                    conflicts[name] = "diverged: the remote has commits this store lacks and vice versa"
            if not to_push:
                break
            ok, refused, err = _git_push(store, url, to_push, {n: o for n, o in leases.items() if n in to_push})
        if ok:
            break
        if "*" in refused and not _retryable(refused, err):
            raise Unavailable(f"push to {url} failed: {err or refused['*']}; check the URL and the network, then push again")
        if "not support" in err and "atomic" in err:
            raise Conflict(f"the remote {url} does not support atomic pushes (git's receive-pack too old, or a "
                           f"server that lacks it): tc-git does not push there, a partial push could leave a task "
                           f"without its notes. Use a git server that does (git 2.4 or later)")
        if not _retryable(refused, err):
            why = "; ".join(f"{k} ({v})" for k, v in sorted(refused.items()))
            raise Conflict(f"the remote {url} refused the push, so nothing of it was applied: {why}. "
                           f"Ask the remote's owner about its rules, then push again"
                           + (f" (git: {err.splitlines()[-1]})" if err and "*" not in refused else ""))
        left = budget - (time.monotonic() - t0)
        if left <= 0:
            raise Conflict(f"push to {url} kept losing races with other pushes for {budget:.0f} s ({attempt} attempts; "
                           f"last: {'; '.join(f'{k} ({v})' for k, v in sorted(refused.items()))}); nothing of the "
                           f"last attempt was applied. Push again")
        # full jitter, capped low: a push that lost several races is not left behind new ones
        time.sleep(min(left, random.uniform(0.01, min(0.5, 0.05 * 2 ** attempt))))
    if to_push:
        _verify_pushed(store, url, {n: ours[n] for n in to_push})
    if conflicts:
        raise Conflict(f"not on {url}: " + "; ".join(f"{k} ({v})" for k, v in sorted(conflicts.items()))
                       + (f"; pushed the rest ({len(to_push)} refs)" if to_push else "")
                       + ". Rename one side (it is the same name for different histories), then push again")
    return {"remote": url, "ok": True, "pushed": to_push, "remote_ahead": behind, "conflicts": {},
            "notes": notes_state or ("pushed" if NOTES_REF in to_push else "unchanged"),
            "up_to_date": len(ours) - len(to_push) - len(behind), "attempts": attempt,
            "lines": {k: v[0] for k, v in sorted(lines.items())},
            "hint": _lines_hint(lines)}


def _lines_hint(lines: dict[str, tuple[str, str]]) -> str | None:
    if not lines:
        return None
    shown = ", ".join(v[0].split("/lines/", 1)[1] for v in lines.values())
    return (f"the remote had continued {len(lines)} task(s) too: its head is now the task's head and your work is "
            f"kept as line {shown} (on the remote too once pushed); see `tc-git log`, join with `tc-git adopt <line>`")


def _verify_pushed(store: Store, url: str, pushed: dict[str, pygit2.Oid]) -> None:
    """Read the remote's refs back: each pushed ref holds what we sent or a later commit."""
    with store.lock():
        repo = store.repo
        try:
            now = _remote_refs(repo.remotes.create_anonymous(url))
        except pygit2.GitError as e:
            raise Unavailable(f"pushed to {url} but could not read it back ({e}); run `tc-git push` again to check") from e
        moved = {n: o for n, o in pushed.items() if now.get(n) != o}
        if moved:
            _fetch_verified(store, url, {n: now[n] for n in moved if n in now})
            repo = store.repo
        missing = [n for n, o in moved.items() if n not in now or not repo.descendant_of(now[n], o)]
    if missing:
        raise Conflict(f"the push to {url} was accepted but {', '.join(sorted(missing)[:5])} is not on it as sent "
                       f"(the remote or a hook changed it): push again, or ask the remote's owner")


def pull(store: Store, remote: str | None = None, verify: bool = True, mirror_git: bool = True,
         max_file: int | None = None) -> PullResult:
    """Fetch every task/session/milestone ref and the notes from a git remote and integrate them:
    new refs are created, fast-forwards applied, diverged notes merged, other divergence reported.
    Moved tasks are mirrored into the user's repository (`verify`, `mirror_git`: see userrepo.mirror)."""
    url = resolve_remote(store, remote)
    created_store = False
    if not store.exists:
        store.create()
        created_store = True
    try:
        return _pull(store, url, created_store, verify, mirror_git, max_file)
    except BadInput:
        if created_store:  # a refused remote writes nothing, not even the store this pull made
            shutil.rmtree(store.path, ignore_errors=True)
        raise


def _pull(store: Store, url: str, created_store: bool, verify: bool, mirror_git: bool,
          max_file: int | None = None) -> PullResult:
    with store.lock():
        repo = store.repo
        r = repo.remotes.create_anonymous(url)
        try:
            theirs = {n: o for n, o in _remote_refs(r).items() if valid_ref(n)}
        except pygit2.GitError as e:
            raise Unavailable(f"cannot reach remote {url}: {e}") from e
        _fetch_verified(store, url, theirs, max_file)
        repo = store.repo
        replaced = _compressed_here(store, repo, theirs)
        lines = _keep_lines(repo, {n: o for n, o in theirs.items() if n not in replaced})
        updates: dict[str, tuple] = {}
        created: list[str] = []
        fast_forwarded: list[str] = []
        local_ahead: list[str] = []
        conflicts: dict[str, str] = {}
        notes_state = None
        for name, oid in sorted(theirs.items()):
            ours = ref_target(repo, name)
            if name in NOTES_REFS:
                merged, state = merge_notes(repo, ours, oid)
                notes_state = state if name == NOTES_REF else notes_state
                if merged != ours:
                    updates[name] = (ours, merged)
                continue
            rel = relation(repo, ours, oid)
            if rel == "absent" and _joined(repo, name, oid):
                continue  # a line this store already joined into its task
            if rel == "absent":
                updates[name] = (ours, oid)
                created.append(name)
            elif rel == "behind":
                updates[name] = (ours, oid)
                fast_forwarded.append(name)
            elif rel == "ahead" or name in replaced:  # (replaced: the remote has our chain before compress)
                local_ahead.append(name)
            elif rel == "diverged":
                conflicts[name] = "diverged: kept the local ref"
        cas_update(repo, updates, "tc-git: pull")
        active = store.active_task()
        fast_forwarded += [n for n in lines if n not in fast_forwarded]
        moved_tasks = [n for n in created + fast_forwarded if task_of_ref(n)]
        git = mirror(store, lambda repo: {**{n: ref_target(repo, n) for n in moved_tasks + [NOTES_REF]
                                             if ref_target(repo, n) is not None},
                                          **{k: v for n in moved_tasks for k, v in line_refs(repo, task_of_ref(n) or "").items()}},
                     None, verify, mirror_git) if moved_tasks else None
    moved = bool(active and head_ref(active) in fast_forwarded)
    new_tasks = [t for t in (task_of_ref(n) for n in created) if t]
    hints = [h for h in (_restore_hint(store.repo, active) if moved and active else None, _lines_hint(lines),
                         _new_tasks_hint(store.repo, new_tasks)) if h]
    if conflicts:
        raise Conflict(f"pulled from {url}, but kept the local " + "; ".join(f"{k} ({v})" for k, v in sorted(conflicts.items()))
                       + ": the remote's version is not here. Rename or drop one side, then pull again"
                       + (f". Also: {'; '.join(hints)}" if hints else ""))
    return {"remote": url, "ok": True, "created": created, "fast_forwarded": fast_forwarded,
            "local_ahead": local_ahead, "conflicts": {}, "notes": notes_state or "unchanged",
            "store_created": created_store, "active_task_moved": moved, "git": git,
            "tasks": new_tasks, "lines": {k: v[0] for k, v in sorted(lines.items())},
            "hint": "; ".join(hints) if hints else None}


def _new_tasks_hint(repo: pygit2.Repository, tasks: list[str]) -> str | None:
    if not tasks:
        return None
    shown = []
    for t in tasks[:5]:
        name = Timeline(repo, t).head().record.get("task", {}).get("name")
        shown.append(f"{t} ({name})" if name and name != t else t)
    more = f" and {len(tasks) - 5} more" if len(tasks) > 5 else ""
    return f"new tasks: {', '.join(shown)}{more}; continue one with `tc-git switch <task>`"


def _restore_hint(repo: pygit2.Repository, task_id: str) -> str | None:
    head = Timeline(repo, task_id).head()
    if head.kind == "drift" and head.drift:
        return f"the active task moved: restore {head.drift} to bring its files (preview it first)"
    if head.step:
        return f"the active task moved: restore step {head.step} to bring its files (preview it first)"
    return None
