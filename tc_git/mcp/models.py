"""The MCP tools' results as pydantic models: what each tool's outputSchema advertises and what
the server validates every engine result against before sending it (mcp_server._success)."""
from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class _Out(BaseModel):
    # Keys the engine adds later pass through instead of being silently dropped.
    model_config = ConfigDict(extra="allow")


class GitInfo(_Out):
    ok: bool = False
    ref: str | None = None
    reason: str | None = None
    unchanged: bool | None = None


class ChangedFile(_Out):
    path: str
    status: str


class FilesChanged(_Out):
    count: int
    files: list[ChangedFile]


class InitResult(_Out):
    task_id: str
    name: str
    store: str
    store_is_external: bool
    prev_suspended: str | None = None
    exclude: list[str]
    note: str


class SaveResult(_Out):
    task_id: str
    index: int = Field(description="step number")
    title: str
    commit: str
    groups: list[dict[str, Any]] = []
    skipped_paths: list[str] = Field(description="not stored (ignored, sensitive, too large)")
    idempotent: bool
    closed: bool
    status: str
    active_task_changed: bool
    git: GitInfo
    changed: int = 0
    newly_left_out: list[str] = Field(default=[], description="newly left out (secret, "
                                      "too large), said once")
    redacted: list[dict[str, Any]] = Field(default=[], description="fields with credentials "
                                           "redacted")


class LastStep(_Out):
    title: str = ""
    conclusion: str = ""
    description: str = ""
    next: str = ""


class Health(_Out):
    ok: bool
    errors: list[str]


class ResumeResult(_Out):
    task_id: str
    name: str
    status: str
    goal: str
    constraints: str
    head: int
    last: LastStep
    open_questions: list[str]
    drift_paths: list[str] = Field(description="unsaved changes (capped)")
    drift_total: int
    next: str
    store: str
    active_task: str | None = None
    skipped: list[str]
    health: Health
    milestone: str | None = None
    commit: str
    handoff: str = Field(description="summary for a new session")


class Entry(_Out):
    index: int
    id: str
    kind: str
    title: str
    timestamp: str
    commit: str
    files_changed: int = 0


class ShowResult(_Out):
    task_id: str
    status: str
    head: int
    steps: list[Entry]
    drifts: list[Entry]
    drifts_omitted: int = 0
    next_cursor: int | None = Field(None, description="cursor of the next page")


class PathReason(_Out):
    path: str
    reason: str


class PlanCounts(_Out):
    to_delete: int
    to_write: int
    to_replace: int
    unrestorable: int


class Plan(_Out):
    to_delete: list[str]
    to_write: list[str]
    to_replace: list[str]
    unrestorable: list[PathReason]
    counts: PlanCounts


class RestoreResult(_Out):
    applied: bool
    recovered: str | None = Field(None, description="restore point (tc_undo returns to it)")
    target: str
    target_commit: str
    plan: Plan
    skipped_paths: list[str]
    commit: str | None = None
    failed: list[PathReason] = []


class CaptureResult(_Out):
    captured: bool
    drift_id: str | None = None
    reads: int = Field()
    commit: str | None = None
    partial: bool
    waiting: bool
    skipped_paths: list[str]
    files: FilesChanged | None = None


class SwitchResult(_Out):
    task_id: str
    status: str


class CompressResult(_Out):
    converted: int = Field()
    eligible: int
    already_gone: int = 0
    bytes_freed: int
    bytes_before: int | None = None
    bytes_after: int | None = None
    keep_seconds: int
    minimum: int
    maximum: int


class ExportResult(_Out):
    task_id: str
    path: str = Field()
    handoff: str | None = Field(None)
    incremental: bool = False


class ImportResult(_Out):
    task_id: str
    restore: dict[str, Any] | None = Field(None, description="the restore to the imported head; its note "
                                                            "says what was written")


class SyncResult(_Out):
    remote: str = Field()
    conflicts: dict[str, Any] = Field(default_factory=dict, description="refs left alone, why")


class Milestone(_Out):
    name: str
    event: str
    session: str | None = None
    code_commit: str | None = Field(None)


class RecordResult(_Out):
    session: str = Field()
    events: int
    new_commits: int = Field()
    branches: dict[str, str]
    tip: str | None = None
    milestone: Milestone | None = None


class SessionsResult(_Out):
    sessions: list[dict[str, Any]]
    milestones: list[Milestone]


class EventsResult(_Out):
    point: str
    events: list[dict[str, Any]]
    total: int
    next_offset: int | None = None


class CheckoutResult(_Out):
    point: str
    event: str
    messages: list[dict[str, Any]]
    total: int
    code_commit: str | None = None
    restore: dict[str, Any] | None = None


class MarkdownResult(_Out):
    point: str
    bytes: int
    markdown: str | None = None
    path: str | None = None


class BranchResult(_Out):
    ref: str
    at: str


class TrajectoryDiffResult(_Out):
    a: str
    b: str
    base: str | None = Field(None, description="last common event")
    only_a: list[dict[str, Any]]
    only_b: list[dict[str, Any]]
    code: dict[str, Any] | None = Field(None)


class ReplayResult(_Out):
    point: str
    mode: str


class ResumeSessionResult(_Out):
    client: str
    session_id: str
    path: str
    command: str = Field(description="run it in cwd to continue the session")
    cwd: str
    point: str
    event: str
    events: int
    restore: dict[str, Any] | None = None
    notice: str | None = None  # what was left out for the client's API


class BlameResult(_Out):  # blame (hunks, origins, shares, next_start) or, with `line`, why (free form)
    task_id: str
    path: str
    at: str


class TaskRow(_Out):
    task_id: str
    name: str
    status: str
    steps: int
    updated: str = Field(description="last activity")
    active: bool


class TasksResult(_Out):
    tasks: list[TaskRow]
    total: int


RESULT_MODELS: dict[str, type[_Out]] = {
    "tc_push": SyncResult, "tc_pull": SyncResult, "tc_record": RecordResult, "tc_sessions": SessionsResult,
    "tc_milestone": Milestone, "tc_events": EventsResult, "tc_checkout": CheckoutResult,
    "tc_markdown": MarkdownResult, "tc_branch": BranchResult, "tc_trajectory_diff": TrajectoryDiffResult,
    "tc_replay": ReplayResult, "tc_resume_session": ResumeSessionResult, "tc_blame": BlameResult,
    "tc_init": InitResult, "tc_save": SaveResult, "tc_resume": ResumeResult, "tc_show": ShowResult,
    "tc_restore": RestoreResult, "tc_capture": CaptureResult, "tc_switch": SwitchResult, "tc_undo": RestoreResult,
    "tc_tasks": TasksResult,
    "tc_export": ExportResult, "tc_import": ImportResult, "tc_compress": CompressResult,
}
