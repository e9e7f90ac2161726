"""What the engine's task operations return, as typed dicts: one shape per result, shared by the
CLI (its human output reads these keys) and the MCP adapter (each tool's outputSchema is made from
these, the keys an agent acts on: mcp/server.py SHOWN; the SDK validates every result against
them). Standard library only (the CLI starts without pydantic).

The names are the seed's (task-checkpoint-mcp), so agents written for it keep working; a rename
for MCP only (`tc_restore`'s `index`/`drift_id`) lives in the MCP adapter, never here. Keys a
result carries only sometimes are `NotRequired`. No `from __future__ import annotations` here:
TypedDict reads NotRequired only from evaluated annotations (tests/test_results.py checks it).
"""
from typing import Any, NotRequired, TypedDict


class GitWatch(TypedDict):
    """Whether the user's git directory stayed as it was over the whole call (gitguard.py; None:
    not checked), and what moved if not."""

    unchanged: bool | None
    changed: NotRequired[Any]


class GitInfo(GitWatch):
    """The mirror of the task's refs into the user's repository (handoff/userrepo.py)."""

    ok: bool
    ref: str | None
    reason: str | None
    objects: NotRequired[int]
    error: NotRequired[str]
    note: NotRequired[str]  # said once per store: the first save that mirrored into the user's repository
    large: NotRequired[list[dict[str, Any]]]  # new files over 10 MB this mirror copied: {path, bytes}


class ChangedFile(TypedDict):
    path: str
    status: str  # git's status letter


class FilesChanged(TypedDict):
    count: int
    files: list[ChangedFile]  # capped; `count` is the total


class LeftOut(TypedDict):
    path: str | None
    why: str | None
    reason: str


class InitResult(TypedDict):
    task_id: str
    name: str
    store: str
    store_is_external: bool
    prev_suspended: str | None
    exclude: list[str] | None
    redacted: list[dict[str, Any]]  # [{field, rules}]: credentials replaced before they were stored
    skipped_paths: list[str]  # what the baseline (the workspace at init) left out, and why
    note: str


class SaveResult(TypedDict):
    task_id: str
    index: int  # the step number
    title: str
    commit: str
    groups: list[dict[str, Any]]
    skipped_paths: list[str]
    idempotent: bool
    closed: bool
    status: str
    active_task_changed: bool
    git: GitInfo
    changed: int  # index entries the snapshot added, updated or removed
    redacted: list[dict[str, Any]]
    newly_left_out: list[str]
    unstable: list[str]


class CaptureResult(TypedDict):
    captured: bool
    drift_id: str | None
    reads: int
    commit: str | None
    partial: bool
    waiting: bool
    skipped_paths: list[str]
    unstable: list[str]
    files: NotRequired[FilesChanged]


class LastStep(TypedDict):
    title: str
    conclusion: str
    description: str
    next: str


class Health(TypedDict):
    ok: bool
    errors: list[str]


class DriftStamp(TypedDict):
    id: str | None
    timestamp: str


class ResumeResult(TypedDict):
    task_id: str
    name: str
    status: str
    goal: str
    constraints: str
    head: int
    last: LastStep
    open_questions: list[str]
    drift_paths: list[str]
    drift_total: int
    next: str
    store: str
    active_task: str | None
    skipped: list[str]
    left_out: list[LeftOut]
    health: Health
    milestone: str | None
    drifts_since: list[DriftStamp]
    drifts_since_total: int
    commit: str
    handoff: str
    lines: list[str]  # other lines of the task not yet joined (tc-git adopt <line>)
    copied_from: NotRequired[str]  # this store is a copy of the one there (said once: discover.copied_from)


class EntryView(TypedDict):
    """One commit of a task's timeline as `show` and `log` list it (timeline.entry_dict)."""

    index: int
    id: str
    kind: str
    title: str
    timestamp: str
    commit: str
    files_changed: int
    description: NotRequired[str]  # the five step fields: steps only
    conclusion: NotRequired[str]
    verified: NotRequired[list[str]]
    open_questions: NotRequired[list[str]]
    next: NotRequired[str]
    drift_id: NotRequired[str | None]  # the rest: every other kind
    partial: NotRequired[bool]
    restore_point: NotRequired[bool]
    target: NotRequired[dict[str, Any]]
    authored: NotRequired[dict[str, int]]  # lines added {agent, other} (a step: since the last step); once blamed
    seq: NotRequired[int]  # `show`: its place in the chain, oldest 0 (one list in time order)


class ShowResult(TypedDict):
    task_id: str
    status: str
    head: int
    steps: list[EntryView]
    drifts: list[EntryView]
    next_cursor: int | None
    drifts_omitted: NotRequired[int]
    authored: NotRequired[dict[str, int]]  # the task's lines added {agent, other}, once blamed


class TaskInfo(TypedDict):
    task_id: str
    name: str
    status: str
    head: int
    active: bool
    steps: int
    updated: str


class TaskList(TypedDict):
    """tc_tasks: the active task, then the most recently active ones (mcp/server.py _task_list)."""

    tasks: list[TaskInfo]
    total: int
    omitted: NotRequired[int]
    more: NotRequired[str]  # how to see the ones left out


class SwitchResult(TypedDict):
    task_id: str
    status: str


class PlanCounts(TypedDict):
    to_delete: int
    to_write: int
    to_replace: int
    unrestorable: int


class PathReason(TypedDict):
    path: str
    reason: str


class PlanView(TypedDict):
    to_delete: list[str]
    to_write: list[str]
    to_replace: list[str]
    unrestorable: list[dict[str, Any]]
    counts: PlanCounts


class RestoreCheck(TypedDict):
    ok: bool
    outside_changed: list[str]
    outside_changed_count: int
    differs_from_target: list[str]


class UndoPoint(TypedDict):
    drift_id: str


class RestoreResult(TypedDict):
    applied: bool
    recovered: str | None  # the restore point an undo returns to (None in a preview)
    target: str
    target_commit: str
    plan: PlanView
    skipped_paths: list[str]
    paths: list[str] | None
    not_in_target: list[LeftOut]
    unstable: list[str]
    undo_of: NotRequired[str]
    undo_of_id: NotRequired[str]  # the undone restore's rNNNN (restores made before those ids have none)
    undo: NotRequired[UndoPoint]  # applied only, from here on
    commit: NotRequired[str]
    failed: NotRequired[list[PathReason]]
    restore_id: NotRequired[str]
    check: NotRequired[RestoreCheck]
    git: NotRequired[GitWatch]  # restore and undo: the user's git directory was left alone


class CompressResult(TypedDict):
    converted: int  # drifts dropped from the timeline
    eligible: int
    already_gone: int
    bytes_freed: int
    bytes_before: int
    bytes_after: int
    packed_objects: int
    keep_seconds: int
    minimum: int
    maximum: int


# ---------------------------------------------------------------------------- trajectory
# Reads a workspace store cannot answer are asked of the user-level store; their result then
# carries `store: "user"` (Engine._or_user_store).
class MilestoneInfo(TypedDict):
    name: str
    event: str
    session: str | None
    code_commit: str | None  # the code of that moment (the active task's head), if any
    message: str
    redacted: list[dict[str, Any]]


class RecordResult(TypedDict):
    session: str
    events: int
    new_commits: int
    branches: dict[str, str]  # branch -> tip commit
    tip: str | None
    skipped: int
    malformed: int
    redactions: int
    unknown_types: dict[str, int]
    milestone: NotRequired[MilestoneInfo | None]
    unchanged_file: NotRequired[bool]  # the same bytes as last time: nothing was read again


class SessionsResult(TypedDict):
    sessions: list[dict[str, Any]]
    milestones: list[dict[str, Any]]
    user_store: NotRequired[str]


class EventsResult(TypedDict):
    point: str
    events: list[dict[str, Any]]
    total: int
    next_offset: int | None
    store: NotRequired[str]


class CheckoutResult(TypedDict):
    point: str
    event: str
    messages: list[dict[str, Any]]
    total: int
    omitted: int
    code_commit: str | None
    milestones: list[str]
    restore: RestoreResult | None
    store: NotRequired[str]
    git: NotRequired[GitWatch]


class MarkdownResult(TypedDict):
    point: str
    bytes: int
    markdown: NotRequired[str]  # without `out`
    path: NotRequired[str]  # with `out`: where it was written
    store: NotRequired[str]


class BranchResult(TypedDict):
    ref: str
    at: str


class TrajectoryDiffResult(TypedDict):
    a: str
    b: str
    base: str | None
    only_a: list[dict[str, Any]]
    only_b: list[dict[str, Any]]
    only_a_total: int
    only_b_total: int
    code: dict[str, Any] | None
    store: NotRequired[str]


class ReplayResult(TypedDict):
    point: str
    mode: str  # messages | code | verify: the keys below are those of the mode
    total: NotRequired[int]
    messages: NotRequired[list[dict[str, Any]]]
    states: NotRequired[list[dict[str, Any]]]
    ok: NotRequired[bool]
    applied: NotRequired[int]
    skipped: NotRequired[int]
    first_difference: NotRequired[str | None]
    reason: NotRequired[str | None]
    base: NotRequired[str]
    recorded: NotRequired[str]
    differences: NotRequired[list[str]]
    store: NotRequired[str]


# ---------------------------------------------------------------------------- handoff
# What handoff.bundles.export wrote (functional form: `continue`, the command that picks the work
# up, is a keyword); `prerequisites` are commits the receiver must hold (an incremental bundle).
BundleExport = TypedDict("BundleExport", {
    "task_id": str, "path": str, "handoff": str, "refs": dict[str, str], "prerequisites": list[str],
    "incremental": bool, "objects": int, "bytes": int, "seconds": float, "continue": str,
    "note": NotRequired[str],
})


class ExportResult(BundleExport):
    captured: str | None  # the drift unsaved work became first, if any


class ImportResult(TypedDict):
    """What Engine.import_ reports besides the importer's own keys (handoff/bundles.py, seed.py)."""

    task_id: str
    git: GitInfo
    left_out: list[LeftOut]
    restore: dict[str, Any] | None  # the restore to the imported head (a preview unless written)
    seconds: dict[str, float]


class PushResult(TypedDict):
    remote: str
    ok: bool
    pushed: list[str]
    remote_ahead: list[str]
    conflicts: dict[str, str]
    notes: str
    up_to_date: int
    attempts: int  # pushes made: more than 1 when another push won a race first
    lines: dict[str, str]  # task head -> the line the local work is kept as (the remote's head won)
    hint: str | None


class PullResult(TypedDict):
    remote: str
    ok: bool
    created: list[str]
    fast_forwarded: list[str]
    local_ahead: list[str]
    conflicts: dict[str, str]
    notes: str
    store_created: bool
    active_task_moved: bool
    git: GitInfo | GitWatch | None  # the mirror of the moved tasks, or only the guard's verdict
    tasks: list[str]  # tasks new here
    lines: dict[str, str]  # task head -> the line the local work is kept as (the remote's head won)
    hint: str | None


class RecoverPreview(TypedDict):
    """recover(apply=False): the tasks the user's repository mirrors; nothing written."""

    applied: bool  # False
    source: str  # the user's git directory
    store_exists: bool
    mirrored: list[TaskInfo]


class Recovered(PullResult):
    """recover(apply=True): the pull from the user's repository, the task made active, the rows."""

    applied: bool  # True
    source: str
    active_task: str | None
    mirrored: list[TaskInfo]
