"""Every name tc-git gives to things inside and next to a store, in one place.

Stdlib only (the hook entry and pathsafe import it without loading pygit2). The layout of a store:

    refs/checkpoints/tasks/<id>/head            a task's code timeline
    refs/checkpoints/tasks/<id>/lines/<name>    another machine's line of the same task (sync)
    refs/checkpoints/sessions/<agent>-<s>/<b>   a recorded conversation's branches
    refs/checkpoints/milestones/<name>          named events
    refs/notes/checkpoints                      one JSON note per commit (timeline and trajectory)
    refs/notes/checkpoints-blame                line provenance of each task commit (provenance.py)
    refs/heads/tc-git                           the README commit a bare `git log` shows

Refs named here are a format: bundles, mirrors and pushed remotes carry them, so a change is a
migration, not a rename.
"""
from __future__ import annotations

import re

# --- names next to the workspace --------------------------------------------------------------
STORE_DIRNAME = ".checkpoints"
POINTER_FILE = ".task-checkpoint-store.json"  # the seed's pointer name, kept for drop-in use
# `<store>/.git`, a gitfile naming the store itself: to git the store is a nested repository,
# which `git clean -fdx` skips (only `-ff` removes one); the line after this comment in the
# enclosing repository's `info/exclude` keeps it out of `git status` (store.Store.protect)
NESTED_GIT_TEXT = "gitdir: .\n"
EXCLUDE_COMMENT = "# tc-git: its checkpoint store (a nested repository, so git clean -fdx keeps it)"

# A restore's temporary sibling of a file it writes (and of one it moves aside):
# `.<name>.tc-<12 hex>` (wsfs). Never user data: left out of every snapshot, and removed by the
# next command that finds the journal of a restore killed while it had one (restore.py).
TEMP_GLOB = ".*.tc-" + "[0-9a-f]" * 12
TEMP_RE = re.compile(r"\..+\.tc-[0-9a-f]{12}", re.S)

# --- refs and notes -----------------------------------------------------------------------------
CHECKPOINTS_PREFIX = "refs/checkpoints/"
TASKS_PREFIX = CHECKPOINTS_PREFIX + "tasks/"
SESSIONS_PREFIX = CHECKPOINTS_PREFIX + "sessions/"
MILESTONES_PREFIX = CHECKPOINTS_PREFIX + "milestones/"
NOTES_REF = "refs/notes/checkpoints"
BLAME_NOTES_REF = "refs/notes/checkpoints-blame"  # line provenance, one note per task commit (provenance.py)
NOTES_REFS = (NOTES_REF, BLAME_NOTES_REF)  # the notes refs that travel (bundles, remotes)
STORE_HEAD_REF = "refs/heads/tc-git"
# private, short-lived refs in a quarantine repository while syncing with a remote
SYNC_HAVE_PREFIX = "refs/tc-have/"
SYNC_WANT_PREFIX = "refs/tc-sync/"

TASK_HEAD_RE = re.compile(r"refs/checkpoints/tasks/([^/]+)/head")
TASK_LINE_RE = re.compile(r"refs/checkpoints/tasks/([^/]+)/lines/([^/]+)")

# git's id of the tree with no entries (exists in every repository without being written)
EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"


def task_ref(task_id: str) -> str:
    """`refs/checkpoints/tasks/<id>/head`: the tip of a task's code timeline."""
    return f"{TASKS_PREFIX}{task_id}/head"


def task_of_ref(name: str) -> str | None:
    """The task id of a task head ref, or None for any other name."""
    m = TASK_HEAD_RE.fullmatch(name)
    return m.group(1) if m else None


def line_ref(task_id: str, line: str) -> str:
    """`refs/checkpoints/tasks/<id>/lines/<line>`: a line of work on the task kept when two
    machines continued it (the remote's head stayed `head`; see handoff.remotes)."""
    return f"{TASKS_PREFIX}{task_id}/lines/{line}"


def line_of_ref(name: str) -> tuple[str, str] | None:
    """(task id, line name) of a task's line ref, or None for any other name."""
    m = TASK_LINE_RE.fullmatch(name)
    return (m.group(1), m.group(2)) if m else None


def session_ref(session: str, branch: str = "") -> str:
    """`refs/checkpoints/sessions/<session>/` (the session's ref directory) or one of its branches."""
    return f"{SESSIONS_PREFIX}{session}/{branch}"


def milestone_ref(name: str) -> str:
    return MILESTONES_PREFIX + name


def is_ours(name: str) -> bool:
    """A ref tc-git owns (what bundles, mirrors and remotes may carry)."""
    return name in NOTES_REFS or name.startswith(CHECKPOINTS_PREFIX)
