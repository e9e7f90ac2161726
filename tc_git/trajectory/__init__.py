"""The trajectory layer: what was said and done, one git commit per event.

Pure functions over the store's `pygit2.Repository`; the caller (the engine) holds the store
lock for anything that writes. See docs/architecture.md, "Trajectory (trajectory/)".
"""
from __future__ import annotations

from .edits import VerifyResult, apply_patch, verify_edits
from .milestones import (
    MILESTONES_PREFIX,
    Milestone,
    SessionInfo,
    delete_milestone,
    event_note,
    get_milestone,
    link_code,
    linked_code,
    list_milestones,
    list_sessions,
    log,
    resolve,
    set_milestone,
)
from .model import KINDS, Event, Transcript
from .ops import (
    Checkout,
    TrajectoryDiff,
    branch,
    checkout,
    code_diff,
    code_states,
    diff,
    export_markdown,
    replay,
    verify_point,
)
from .readers import check_size, detect_format, read_steps, read_transcript
from .recorder import SESSIONS_PREFIX, RecordResult, load_event, record, record_file, session_name

__all__ = [
    "KINDS", "Event", "Transcript", "check_size", "detect_format", "read_transcript", "read_steps",
    "SESSIONS_PREFIX", "RecordResult", "record", "record_file", "session_name", "load_event",
    "MILESTONES_PREFIX", "Milestone", "SessionInfo", "set_milestone", "get_milestone",
    "list_milestones", "delete_milestone", "list_sessions", "log", "resolve", "event_note",
    "link_code", "linked_code", "Checkout", "TrajectoryDiff", "checkout", "replay", "code_states",
    "export_markdown", "branch", "diff", "code_diff", "verify_point", "verify_edits", "apply_patch", "VerifyResult",
]
