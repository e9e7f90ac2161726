"""Milestones, sessions, logs, and the links from events to the code timeline.

A milestone is a ref `refs/checkpoints/milestones/<name>` on an event commit. What the ref
cannot say (which session, which code commit, when it was named) is a JSON note on that event
in `refs/notes/checkpoints`, under the key `trajectory`; the same note carries `code_commit`
for events the engine links to a code step without naming them.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

import pygit2

from ..base.errors import BadInput, Conflict, Hint, NotFound
from ..base.refs import MILESTONES_PREFIX, NOTES_REF, SESSIONS_PREFIX
from ..storage.store import read_note, signature

__all__ = ["MILESTONES_PREFIX", "Milestone", "check_name", "SessionInfo", "resolve", "set_milestone",
           "get_milestone", "list_milestones", "delete_milestone", "list_sessions", "log",
           "event_note", "link_code", "linked_code", "milestone_map"]


@dataclass(frozen=True)
class Milestone:
    name: str
    event: str  # event commit (hex)
    session: str | None = None
    code_commit: str | None = None
    message: str = ""
    created: float = 0.0


@dataclass(frozen=True)
class SessionInfo:
    session: str  # "<agent>-<session id>"
    branches: dict[str, str] = field(default_factory=dict)  # branch -> tip commit


def check_name(name: str, what: str) -> str:
    if not name or name.startswith("-") or not pygit2.reference_is_valid_name(f"refs/x/{name}"):
        raise BadInput(f"invalid {what} name {name!r}: use letters, digits, '-', '_', '.', '/'")
    return name


def resolve(repo: pygit2.Repository, point: str) -> pygit2.Commit:
    """An event commit from a milestone name, `<session>[/<branch>]`, a full ref or a commit id.

    Raises:
        NotFound: nothing by that name.
    """
    point = (point or "").strip()
    candidates = [point] if point.startswith("refs/") else [
        MILESTONES_PREFIX + point, SESSIONS_PREFIX + point, SESSIONS_PREFIX + point + "/main"]
    for name in candidates:
        ref = repo.references.get(name) if pygit2.reference_is_valid_name(name) else None
        if ref is not None:
            return repo[ref.target].peel(pygit2.Commit)
    if point and "/" not in point and not point.startswith(("-", "refs/")):
        tip = session_tip(repo, point)
        if tip is not None:
            return tip
    if point and not point.startswith("-"):
        try:
            return repo.revparse_single(point).peel(pygit2.Commit)
        except (KeyError, ValueError, pygit2.GitError):
            pass
    raise NotFound(f"no milestone, session or event {point!r}", Hint("sessions", {}, "list them with"))


def session_tip(repo: pygit2.Repository, session: str) -> pygit2.Commit | None:
    """A session without `main` (a subagent file recorded alone, a session whose main line was
    renamed): its only branch, or the branch whose tip is the most recent event."""
    prefix = f"{SESSIONS_PREFIX}{session}/"
    tips = [repo[repo.references[r].target].peel(pygit2.Commit) for r in repo.references if r.startswith(prefix)]
    if not tips:
        return None
    return max(tips, key=lambda c: (c.commit_time, str(c.id)))


# -- notes -------------------------------------------------------------------------------------

def event_note(repo: pygit2.Repository, event: str | pygit2.Oid) -> dict:
    """The `trajectory` part of an event's note ({} when none)."""
    return read_note(repo, event).get("trajectory", {})


def _write_note(repo: pygit2.Repository, event: str, part: dict, when: float | None) -> None:
    note = read_note(repo, event)
    note["trajectory"] = part
    from ..workspace.secrets import redact_obj  # a milestone message is agent text: it passes the engine too
    note = redact_obj(note)
    sig = signature(time.time() if when is None else when)
    repo.create_note(json.dumps(note, ensure_ascii=False, sort_keys=True), sig, sig, event, NOTES_REF, True)


def link_code(repo: pygit2.Repository, event: str, code_commit: str, *, when: float | None = None) -> None:
    """Note on an event which code-timeline commit shows the workspace at that moment."""
    ev = str(resolve(repo, event).id)
    part = event_note(repo, ev)
    part["code_commit"] = code_commit
    _write_note(repo, ev, part, when)


def linked_code(repo: pygit2.Repository, event: str | pygit2.Oid) -> str | None:
    """The code commit linked to an event or, failing that, to its nearest linked ancestor."""
    c = repo[event].peel(pygit2.Commit) if isinstance(event, pygit2.Oid) else resolve(repo, event)
    while True:
        code = event_note(repo, c.id).get("code_commit")
        if code:
            return code
        if not c.parent_ids:
            return None
        c = repo[c.parent_ids[0]].peel(pygit2.Commit)


# -- milestones --------------------------------------------------------------------------------

def set_milestone(repo: pygit2.Repository, name: str, event: str, *, session: str | None = None,
                  code_commit: str | None = None, message: str = "", when: float | None = None,
                  force: bool = False) -> Milestone:
    """Name an event. `code_commit` links the code timeline; `session` says whose event it is.

    Raises:
        BadInput: invalid name.
        Conflict: the name exists on another event and `force` is false.
    """
    check_name(name, "milestone")
    ev = str(resolve(repo, event).id)
    refname = MILESTONES_PREFIX + name
    old = repo.references.get(refname)
    if old is not None and str(old.target) != ev and not force:
        raise Conflict(f"milestone {name!r} already names event {str(old.target)[:12]}; pick another name or pass force")
    created = time.time() if when is None else when
    part = event_note(repo, ev)
    info = {"session": session, "code_commit": code_commit, "message": message, "created": created}
    part.setdefault("milestones", {})[name] = {k: v for k, v in info.items() if v not in (None, "")}
    if code_commit:
        part["code_commit"] = code_commit
    _write_note(repo, ev, part, created)
    repo.references.create(refname, ev, force=True)
    return Milestone(name, ev, session, code_commit, message, created)


def get_milestone(repo: pygit2.Repository, name: str) -> Milestone:
    ref = repo.references.get(MILESTONES_PREFIX + name) if pygit2.reference_is_valid_name(
        MILESTONES_PREFIX + name) else None
    if ref is None:
        raise NotFound(f"milestone {name!r} not found", Hint("sessions", {}, "list them with"))
    ev = str(ref.target)
    info: dict[str, Any] = event_note(repo, ev).get("milestones", {}).get(name, {})
    return Milestone(name, ev, info.get("session"), info.get("code_commit"), info.get("message", ""),
                     float(info.get("created", 0.0)))


def list_milestones(repo: pygit2.Repository, session: str | None = None) -> list[Milestone]:
    """Every milestone (optionally of one session), oldest first."""
    out = [get_milestone(repo, r[len(MILESTONES_PREFIX):]) for r in repo.references
           if r.startswith(MILESTONES_PREFIX)]
    if session is not None:
        out = [m for m in out if m.session == session]
    return sorted(out, key=lambda m: (m.created, m.name))


def delete_milestone(repo: pygit2.Repository, name: str) -> None:
    m = get_milestone(repo, name)
    part = event_note(repo, m.event)
    part.get("milestones", {}).pop(name, None)
    _write_note(repo, m.event, part, None)
    repo.references.delete(MILESTONES_PREFIX + name)


def milestone_map(repo: pygit2.Repository) -> dict[str, list[str]]:
    """Event commit (hex) -> milestone names on it."""
    out: dict[str, list[str]] = {}
    for r in repo.references:
        if r.startswith(MILESTONES_PREFIX):
            out.setdefault(str(repo.references[r].target), []).append(r[len(MILESTONES_PREFIX):])
    return out


# -- sessions and logs -------------------------------------------------------------------------

def list_sessions(repo: pygit2.Repository) -> list[SessionInfo]:
    """Every recorded session with its branch tips, by name."""
    found: dict[str, dict[str, str]] = {}
    for r in repo.references:
        if r.startswith(SESSIONS_PREFIX):
            session, _, branch = r[len(SESSIONS_PREFIX):].partition("/")
            found.setdefault(session, {})[branch] = str(repo.references[r].target)
    return [SessionInfo(s, dict(sorted(b.items()))) for s, b in sorted(found.items())]


def log(repo: pygit2.Repository, point: str, *, newest_first: bool = True, offset: int = 0,
        limit: int | None = 50) -> tuple[list[dict], int]:
    """Events from the root to `point` (a branch, milestone or event), one page of them.

    Returns:
        (entries, total): entries hold `id`, `kind`, `subject`, `timestamp`, `milestones`.
    """
    c = resolve(repo, point)
    chain = []
    while True:
        chain.append(c)
        if not c.parent_ids:
            break
        c = repo[c.parent_ids[0]].peel(pygit2.Commit)
    if not newest_first:
        chain.reverse()
    total = len(chain)
    page = chain[offset: None if limit is None else offset + limit]
    names = milestone_map(repo)
    return [{"id": str(c.id), "kind": c.message.split(":", 1)[0].split(" ", 1)[0],
             "subject": c.message.strip().split("\n", 1)[0], "timestamp": c.commit_time,
             "milestones": names.get(str(c.id), [])} for c in page], total


def precompact_name(repo: pygit2.Repository, session: str | None) -> str:
    """`precompact-<session>-<n>`: the n-th compaction of that session recorded in `repo` (the
    PreCompact hook names one milestone per compaction)."""
    from .recorder import session_name

    prefix = f"precompact-{session_name('x', session or 'unknown')[2:]}-"
    return f"{prefix}{1 + sum(1 for r in repo.references if r.startswith(MILESTONES_PREFIX + prefix))}"
