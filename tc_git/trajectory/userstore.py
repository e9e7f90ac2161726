"""The user-level session store: where sessions are recorded when their directory has no store.

Every session is recorded by default (`TC_RECORD=all`): into the workspace store when the
session's directory (or a parent) has one, else into one bare repository per user,
`$XDG_DATA_HOME/tc-git/store` (default `~/.local/share/tc-git/store`, mode 0700), the seed's
"one user-level database". Sessions there are the same refs as in a workspace store
(`refs/checkpoints/sessions/<agent>-<id>/<branch>`); `tc/projects.json` keys them by the
project path the session ran in, so `tc sessions` in a project lists its own.

Opting out: `TC_RECORD=off` (nothing), `TC_RECORD=tasks` (only workspaces with an active task,
the old behaviour), or a `.tc-no-record` file in the project directory or any parent.
The path rules are in `tc_git.base.recordrules` (stdlib only): the SessionEnd hook applies them before
it forks its worker.
"""
from __future__ import annotations

import os
import time
from pathlib import Path

__all__ = ["OPT_OUT_FILE", "record_mode", "user_store_path", "opted_out", "record_session",
           "project_sessions", "open_user_store"]

# The path rules are stdlib-only, shared with the hook entry (which must not load pygit2).
from ..base.recordrules import OPT_OUT_FILE, opted_out, record_mode, user_store_path  # noqa: E402


def open_user_store(project: str | os.PathLike, *, create: bool = False):
    """The user-level Store, its workspace set to `project` (None when absent and not created)."""
    from ..storage.discover import check_user_store
    from ..storage.store import Store

    check_user_store()  # another user's (or a world-writable) one is never used
    path = user_store_path()
    st = Store(path, Path(os.path.realpath(os.path.expanduser(str(project)))))
    if not st.exists:
        if not create:
            return None
        old = os.umask(0o077)
        try:
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            os.chmod(path.parent, 0o700)
        finally:
            os.umask(old)
        st.create()
    return st


def record_session(transcript: str | os.PathLike, project: str | os.PathLike, *, agent: str | None = None,
                   session: str | None = None, milestone=None) -> dict:
    """Record a transcript into the user-level store under `project`. Idempotent, incremental.

    `milestone`: a name for the recorded tip, or a function (repo, session id) -> name (the
    PreCompact hook numbers its milestones by what the store already holds)."""
    from .readers import read_transcript
    from .recorder import SESSIONS_PREFIX, publish, record, session_name

    st = open_user_store(project, create=True)
    tr = read_transcript(str(transcript), session_id=session)
    if agent:
        tr.agent = agent
    with st.lock():
        prefix = f"{SESSIONS_PREFIX}{session_name(tr.agent, tr.session_id)}/"
        if len(tr.events) < 200 or any(r.startswith(prefix) for r in st.repo.references):
            res = record(st.repo, tr)
        else:  # a long first recording goes to one pack, as Engine.record does
            from ..storage import mempack

            with mempack.bulk_writes(st.repo) as (work, pack):
                res = record(work, tr, update_refs=False)
                if pack is not None and res.new_commits:
                    pack.flush()  # objects durable before any ref names them
            st.reopen()
            publish(st.repo, res)
        m = None
        tip = res.branches.get("main") or next(iter(res.branches.values()), None)
        if milestone is not None and tip:
            from .milestones import set_milestone

            name = milestone(st.repo, session or tr.session_id) if callable(milestone) else milestone
            made = set_milestone(st.repo, name, tip, session=res.session)
            m = {"name": made.name, "event": made.event, "session": made.session}
        index = st.read_json("projects.json", {})
        key = st.workspace.as_posix()
        index.setdefault(key, {})[res.session] = {"transcript": os.fspath(transcript), "recorded": time.time(),
                                                  "events": res.events}
        st.write_json("projects.json", index)
    return {"store": str(st.path), "session": res.session, "events": res.events, "new_commits": res.new_commits,
            "branches": res.branches, "unknown_types": res.unknown_types, "milestone": m}


def project_sessions(project: str | os.PathLike) -> set[str]:
    """Sessions the user-level store holds for `project` or a directory inside it."""
    st = open_user_store(project)
    if st is None:
        return set()
    root = st.workspace.as_posix().rstrip("/") + "/"
    out: set[str] = set()
    for path, sessions in st.read_json("projects.json", {}).items():
        if (path.rstrip("/") + "/").startswith(root) and isinstance(sessions, dict):
            out.update(sessions)
    return out
