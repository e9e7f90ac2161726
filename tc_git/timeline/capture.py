"""What a task writes: the workspace's snapshot under the task's rules, and the step and drift
commits that record it, each with its note (the machine record on refs/notes/checkpoints).

The engine validates, locks and calls these; restore.py (the restore point and the restore
commit) and resume.py (the handoff cache) use the same `Workspace` so every commit of a task
carries the same record shape.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pygit2

from ..base.results import ChangedFile, FilesChanged
from ..storage.store import Store, repository_around
from ..storage.trees import tree_deltas
from ..workspace import snapshot as snapshot_mod
from ..workspace.policy import Policy
from .chain import Entry, Timeline

MAX_LIST = 200  # longest path list in a result; the rest is counted


@dataclass
class Workspace:
    """A workspace bound to its store, as one engine call sees it."""

    store: Store
    policy: Policy
    progress: Callable[[int, int, str], Any] | None = None
    journal: Any = None  # the MCP server's change journal for this workspace (journal.py)
    agent: str | None = None
    session: str | None = None

    @property
    def repo(self) -> pygit2.Repository:
        return self.store.repo

    def snapshot(self, task: dict, paths: list[str] | None = None, pending: bool = False) -> snapshot_mod.Snapshot:
        """Snapshot the workspace under the task's exclude patterns (only `paths`, if given; with
        `pending`, also what the change journal names: see snapshot._take_journaled)."""
        return snapshot_mod.of_workspace(self.store, self.policy, task.get("exclude"), self.progress,
                                         self.journal, paths, pending)

    def base(self) -> str | None:
        """The user's HEAD commit, if the workspace is in a git repository (read-only)."""
        try:
            user = repository_around(self.store.workspace)
            if user is None or Path(user.path).resolve() == self.store.path.resolve():
                return None
            return None if user.head_is_unborn else str(user.head.target)
        except (pygit2.GitError, KeyError, ValueError, OSError):
            return None

    def record(self, tl: Timeline, head: Entry | None, **fields: Any) -> dict:
        """A new note record: the task's metadata carried forward, counters, who made it."""
        prev = head.record if head else {}
        rec = {
            "task": dict(prev.get("task") or {"id": tl.task_id}),
            "counters": dict(prev.get("counters") or {"steps": 0, "drifts": 0}),
            "step": head.step if head else 0,
            "agent": self.agent or None,
            "session": self.session or None,
            "base": self.base(),
        }
        rec.update(fields)
        return {k: v for k, v in rec.items() if v is not None}

    def changed(self, old_tree: pygit2.Tree | None, new_tree: pygit2.Tree,
                snap: snapshot_mod.Snapshot | None = None) -> FilesChanged:
        return files_changed(self.repo, old_tree, new_tree, snap=snap)

    def drift(self, tl: Timeline, head: Entry, snap: snapshot_mod.Snapshot, title: str | None = None,
              **extra: Any) -> tuple[pygit2.Oid, str, FilesChanged]:
        """Append a drift commit for `snap`: (commit, drift id, its `changed` list); `packed=True`
        in `extra`: the commit and its note as one small pack (Timeline.append)."""
        packed = bool(extra.pop("packed", False))
        counters = dict(head.record.get("counters") or {"steps": 0, "drifts": 0})
        counters["drifts"] += 1
        drift_id = f"d{counters['drifts']:04d}"
        changed = self.changed(self.repo[head.oid].peel(pygit2.Tree), self.repo[snap.tree].peel(pygit2.Tree), snap)
        n = changed["count"]
        rec = self.record(tl, head, counters=counters, drift=drift_id, files=snap.note(), changed=changed,
                          title=title or f"{n} file{'s' if n != 1 else ''} changed", **extra)
        return tl.append("drift", snap.tree, rec, packed=packed), drift_id, changed

    def step(self, tl: Timeline, head: Entry, last: Entry | None, snap: snapshot_mod.Snapshot, fields: dict,
             trajectory: str | None = None) -> tuple[int, pygit2.Oid, bool]:
        """Append a step commit for `snap` with `fields` (title, conclusion, ...): (step number,
        commit, idempotent). The same fields over the same tree as the last step (`last`,
        last_step's) are that step."""
        if (last is not None and head.step == last.step
                and self.repo[last.oid].peel(pygit2.Commit).tree_id == snap.tree
                and all(last.record.get(k, type(v)()) == v for k, v in fields.items())):
            return last.step, last.oid, True
        counters = dict(head.record.get("counters") or {"steps": 0, "drifts": 0})
        counters["steps"] += 1
        index = counters["steps"]
        rec = self.record(tl, head, counters=counters, step=index, files=snap.note(),
                          changed=self.changed(self.repo[head.oid].peel(pygit2.Tree),
                                               self.repo[snap.tree].peel(pygit2.Tree), snap),
                          trajectory=trajectory, **fields)
        return index, tl.append("step", snap.tree, rec), False

    def close(self, tl: Timeline, tree: pygit2.Oid, index: int) -> pygit2.Oid:
        return tl.append("close", tree, self.record(tl, tl.head(), title=f"closed after step {index}"))

    def init(self, tl: Timeline, task: dict) -> snapshot_mod.Snapshot:
        """The task's first commit (step 0, `s0000`): the workspace as it is, a baseline taken the
        way a save takes it (the first snapshot: the private index, its stat cache, one pack), so
        a new task starts with nothing unsaved and its first step records, costs and lists only
        what changed since; the task's metadata in its note. The snapshot (its left-out files are
        said here, once)."""
        snap = self.snapshot(task)
        tl.append("init", snap.tree, self.record(tl, None, task=task, title=task["name"],
                                                 conclusion=task["goal"], files=snap.note()))
        return snap


def files_changed(repo: pygit2.Repository, old_tree: pygit2.Tree | None, new_tree: pygit2.Tree,
                  cap: int = MAX_LIST, snap: snapshot_mod.Snapshot | None = None) -> FilesChanged:
    """The `changed` list of a note: {count, files: [{path, status}]} from one tree to the next
    (`snap`: the snapshot that wrote `new_tree`, whose own edits say it without a walk). Only
    `cap` of them as dicts: a restore point of an emptied workspace (an import's) lists every
    file of the task (50k dicts: ~9 MiB at a 50k-file import's peak)."""
    deltas = tree_deltas(repo, old_tree, new_tree, patched=snap)
    return {"count": len(deltas), "files": [ChangedFile(path=d.path, status=d.status) for d in deltas[:cap]]}


def skipped(snap: snapshot_mod.Snapshot) -> list[str]:
    """The `skipped_paths` of a result: what the snapshot left out, and why."""
    out = [f"{x.why}: {x.path} ({x.reason})" for x in snap.left]
    out += [f"nested repository (recorded, not stored): {p}" for p in snap.nested]
    return out[:MAX_LIST]


def newly_left(prev: dict, snap: snapshot_mod.Snapshot) -> list[str]:
    """Left-out files that are new since the previous commit's note, or changed (size/mtime/why):
    `save` says each once, not on every step."""
    seen = {(x.get("path"), x.get("why"), x.get("size"), x.get("mtime"))
            for x in (prev.get("files") or {}).get("left", [])}
    return [f"{x.why}: {x.path} ({x.reason})" for x in snap.left
            if (x.path, x.why, x.size, round(x.mtime, 3)) not in seen][:MAX_LIST]


def last_step(tl: Timeline) -> Entry | None:
    """The newest step commit of the timeline, its note loaded."""
    for e in tl.walk():
        if e.kind == "step":
            e.record = tl.record(e.oid)
            return e
    return None
