"""Which refs travel with a task, and how refs move: the task head, the milestones and sessions
linked to it, the notes; validity of incoming names; compare-and-swap updates."""
from __future__ import annotations

import json
import re
from typing import cast

import pygit2

from ..base.errors import Conflict
from ..base.refs import (
    CHECKPOINTS_PREFIX,
    MILESTONES_PREFIX,
    NOTES_REF,
    NOTES_REFS,
    SESSIONS_PREFIX,
    TASKS_PREFIX,
    line_of_ref,
    task_of_ref,
)
from ..timeline.chain import TASK_ID_RE, Timeline, head_ref

HEX40 = re.compile(r"\b[0-9a-f]{40}\b")
def as_oid(x) -> pygit2.Oid:
    return x if isinstance(x, pygit2.Oid) else pygit2.Oid(hex=str(x))



def valid_ref(name: str) -> bool:
    """Our namespaces only, with names git accepts and task refs in their exact shape."""
    if name in NOTES_REFS:
        return True
    if not name.startswith(CHECKPOINTS_PREFIX) or not pygit2.reference_is_valid_name(name):
        return False
    if any(part in ("", ".", "..") for part in name.split("/")):
        return False
    if name.startswith(TASKS_PREFIX):
        line = line_of_ref(name)
        task = line[0] if line else task_of_ref(name)
        return bool(task and TASK_ID_RE.match(task) and (line is None or TASK_ID_RE.match(line[1])))
    return name.startswith(SESSIONS_PREFIX) or name.startswith(MILESTONES_PREFIX)



def ref_target(repo: pygit2.Repository, name: str):
    ref = repo.references.get(name)
    if ref is None:
        return None
    try:
        return ref.resolve().target
    except (KeyError, pygit2.GitError):
        return None


def relation(repo, ours, theirs) -> str:
    """equal | absent | behind (ours is an ancestor: fast-forward) | ahead | diverged."""
    if ours is None:
        return "absent"
    if ours == theirs:
        return "equal"
    if repo.descendant_of(theirs, ours):
        return "behind"
    if repo.descendant_of(ours, theirs):
        return "ahead"
    return "diverged"


def _strings(value, out: set) -> None:
    if isinstance(value, str):
        out.update(HEX40.findall(value))
    elif isinstance(value, dict):
        for v in value.values():
            _strings(v, out)
    elif isinstance(value, (list, tuple)):
        for v in value:
            _strings(v, out)


def _note_json(repo, oid):
    try:
        msg = repo.lookup_note(str(oid), NOTES_REF).message
    except KeyError:
        return None
    try:
        return json.loads(msg)
    except ValueError:
        return msg


def linked_refs(repo: pygit2.Repository, task_id: str, milestones_only: bool = False) -> dict[str, pygit2.Oid]:
    """Milestones (and trajectory sessions) that belong to a task.

    A milestone belongs to the task when its note names one of the task's commits or the task
    id, or when a task commit's note names the milestone's event; a session belongs to it when
    it is the agent/session that made a task commit, or holds a milestone or trajectory event
    the task links to. Cheap when there are no trajectory refs at all.
    """
    names = [r for r in repo.references if r.startswith(MILESTONES_PREFIX) or (not milestones_only and r.startswith(SESSIONS_PREFIX))]
    if not names:
        return {}
    tl = Timeline(repo, task_id)
    chain: set[str] = set()
    mentioned: set[str] = set()
    pairs: set[str] = set()
    for e in tl.walk():
        chain.add(str(e.oid))
        rec = tl.record(e.oid)
        _strings(rec, mentioned)
        if rec.get("agent") and rec.get("session"):
            pairs.add(f"{rec['agent']}-{rec['session']}")
    out: dict[str, pygit2.Oid] = {}
    for name in names:
        if not name.startswith(MILESTONES_PREFIX) or name in out:
            continue
        t = ref_target(repo, name)
        if t is None:
            continue
        note = _note_json(repo, t)
        found: set[str] = set()
        _strings(note, found)
        text = json.dumps(note) if note is not None else ""
        if str(t) in mentioned or found & chain or (task_id and f'"{task_id}"' in text):
            out[name] = t
    if milestones_only:
        return out
    anchors = [as_oid(h) for h in (mentioned - chain) if as_oid(h) in repo][:64] + list(out.values())
    for name in names:
        if not name.startswith(SESSIONS_PREFIX):
            continue
        t = ref_target(repo, name)
        if t is None:
            continue
        sess = name[len(SESSIONS_PREFIX):].split("/", 1)[0]
        if sess in pairs or t in anchors or any(repo.descendant_of(t, a) for a in anchors):
            out[name] = t
    return out


def line_refs(repo: pygit2.Repository, task_id: str) -> dict[str, pygit2.Oid]:
    """The task's lines (refs/checkpoints/tasks/<id>/lines/*: work kept when two machines
    continued it), joined or not."""
    prefix = f"{TASKS_PREFIX}{task_id}/lines/"
    out = {}
    for name in repo.references:
        if name.startswith(prefix):
            t = ref_target(repo, name)
            if t is not None:
                out[name] = t
    return out


def task_refs(repo: pygit2.Repository, task_id: str, milestones_only: bool = False) -> dict[str, pygit2.Oid]:
    refs = {head_ref(task_id): cast(pygit2.Oid, repo.references[head_ref(task_id)].target)}  # a direct ref
    refs.update(linked_refs(repo, task_id, milestones_only))
    for name in NOTES_REFS:
        notes = ref_target(repo, name)
        if notes is not None:
            refs[name] = notes
    return refs


def cas_update(repo: pygit2.Repository, updates: dict[str, tuple], message: str) -> None:
    """Move several refs at once: each only if it still has the value we planned from."""
    if not updates:
        return
    try:
        with repo.transaction() as tx:
            for name, (old, new) in updates.items():
                tx.lock_ref(name)
                cur = ref_target(repo, name)
                if cur != old:
                    raise Conflict(f"{name} moved during the operation ({old} -> {cur}); retry")
                tx.set_target(name, new, message=message)
    except (pygit2.GitError, ValueError) as e:
        raise Conflict(f"could not update refs ({e}); another process holds a ref lock, retry") from e


def store_state(store) -> tuple[dict, str | None]:
    """What an import may change: every checkpoint ref and the notes ref (name -> oid), and
    the workspace's active task. `roll_back` puts them back."""
    if not store.exists:
        return {}, None
    repo = store.repo
    refs = {}
    for name in repo.references:
        if name.startswith(CHECKPOINTS_PREFIX) or name in NOTES_REFS:
            t = ref_target(repo, name)
            if t is not None:
                refs[name] = t
    return refs, store.active_task()


def roll_back(store, before: tuple[dict, str | None], message: str = "tc-git: import rolled back") -> None:
    """Undo what an import wrote to refs and the active task after a later step failed: each
    ref back to its value before (created ones removed), compare-and-swap against the value
    now, in one transaction. Objects stay (unreachable; git gc removes them)."""
    if not store.exists:
        return
    refs, active = before
    now, _ = store_state(store)
    repo = store.repo
    changed = {n: (now.get(n), refs.get(n)) for n in set(refs) | set(now) if now.get(n) != refs.get(n)}
    if changed:
        with repo.transaction() as tx:
            for name, (cur, old) in changed.items():
                tx.lock_ref(name)
                if ref_target(repo, name) != cur:
                    raise Conflict(f"{name} moved while an import was rolled back; check `tc-git log`")
                if old is None:
                    tx.remove(name)
                else:
                    tx.set_target(name, old, message=message)
    if store.active_task() != active:
        store.set_active_task(active)
