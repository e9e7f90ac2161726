"""The one facade both front ends (CLI, MCP server) and the hooks call.

`Engine(root)` binds a workspace to its store. Every operation returns a plain JSON-ready dict
(the seed's field names, so agents written for task-checkpoint-mcp keep working) and raises a
`TcError` subclass for anything the caller can fix. Writers run under the store's file lock.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import stat
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar, cast

import pygit2

from .base import validate
from .base.errors import BadInput, Conflict, Hint, NotFound, TaskClosed, TcError
from .base.refs import POINTER_FILE, TASKS_PREFIX, task_of_ref
from .base.results import (
    BranchResult,
    CaptureResult,
    CheckoutResult,
    CompressResult,
    EntryView,
    EventsResult,
    ExportResult,
    GitInfo,
    InitResult,
    MarkdownResult,
    MilestoneInfo,
    PullResult,
    PushResult,
    RecordResult,
    Recovered,
    RecoverPreview,
    ReplayResult,
    RestoreResult,
    ResumeResult,
    SaveResult,
    SessionsResult,
    ShowResult,
    SwitchResult,
    TaskInfo,
    TrajectoryDiffResult,
)
from .base.settings import Settings, current
from .storage.discover import copied_from, copy_notice
from .storage.store import Store, atomic_write, check_root, locate
from .storage.trees import tree_deltas
from .timeline import capture as capture_mod
from .timeline import restore as restore_mod
from .timeline import resume as resume_mod
from .timeline.capture import MAX_LIST, Workspace
from .timeline.chain import TASK_ID_RE, Entry, Timeline, entry_dict, files_changed_between, head_ref, iso, left_out
from .timeline.chain import status as task_status
from .workspace import snapshot as snapshot_mod
from .workspace.policy import Policy, validate_excludes
from .workspace.secrets import redact_fields

# hints of the errors below (errors.Hint: each front end says them in its own words)
START_TASK = Hint("init", {"name": None}, "start a task with")
START_NEW = Hint("init", {"name": None}, "start a new task with")
LIST_TASKS = Hint("tasks", {}, "list tasks with")
REOPEN_TASK = Hint("switch", {"task_id": None}, "or reopen one with")
STEPS_BASE_TIME = 1700000000.0  # recorded steps' times count from here: the same steps get the same ids
RECOVER = Hint("recover", {"apply": True}, "bring back every mirrored step (the newest task active) with")


def _task_info(tl: Timeline, active: str | None) -> TaskInfo:
    """One task's row (tc_tasks, `log --all`, recover's list), read from any repository holding
    its timeline refs: the store, or the user's repository with its mirror."""
    h = tl.head()
    return {"task_id": tl.task_id, "name": h.record.get("task", {}).get("name", ""),
            "status": task_status(tl, h, active), "head": h.step, "active": tl.task_id == active,
            "steps": int((h.record.get("counters") or {}).get("steps", h.step)), "updated": iso(h.time)}


# ------------------------------------------------------------------ what an engine call adds
# Every public method is one engine call (`_engine_calls`, the class decorator): a machine failure
# becomes an error that says what to do, and the store goes back when the outermost call ends.
# Two decorators, on the methods they apply to, add more: `_watch_user_git` (the calls that may
# write the user's git: save, restore, undo, import_, pull, checkout) and `_or_user_store` (the
# trajectory reads the user-level store can answer).
F = TypeVar("F", bound=Callable[..., Any])
E = TypeVar("E")


def _watch_user_git(fn: F) -> F:
    """`git.unchanged` for the whole call: the user's git directory fingerprinted before and
    after (gitguard.py), so a restore or import that wrote anything there is reported, not only
    the export step. The `git_verify` setting off skips it."""
    import functools

    @functools.wraps(fn)
    def wrapper(self, *args, **kwargs):
        if not self.settings.git_verify:
            return fn(self, *args, **kwargs)
        from .handoff.userrepo import user_gitdir
        from .timeline import gitguard

        gitdir = user_gitdir(self.store)
        if self._git_watched or gitdir is None:  # nested call (import -> restore)
            return fn(self, *args, **kwargs)
        self._git_watched = True
        try:
            with gitguard.watch(gitdir) as g:
                out = fn(self, *args, **kwargs)
        finally:
            self._git_watched = False
        if gitdir is not None and isinstance(out, dict):
            git = out.get("git") if isinstance(out.get("git"), dict) else {}
            git["unchanged"] = g["unchanged"]
            if g.get("changed"):
                git["changed"] = g["changed"]
            out["git"] = git
        return out
    return cast(F, wrapper)


def _or_user_store(fn: F) -> F:
    """A trajectory read this workspace's store cannot answer (no store, no such point) is asked
    of the user-level store, where the hooks record sessions of directories without a store; the
    result then says `store: "user"`. The workspace's own error stands if neither has it."""
    import functools

    @functools.wraps(fn)
    def wrapper(self, *args, **kwargs):
        try:
            return fn(self, *args, **kwargs)
        except NotFound as first:
            user = self.user_store()
            if user is None:
                raise
            try:
                out = fn(user, *args, **kwargs)
            except NotFound:
                raise first from None
            return dict(out, store="user")
    return cast(F, wrapper)


def _releasing(fn: F) -> F:
    """At the end of an engine call (not a nested one) the store handle goes back for the next
    call, and a deferred index write starts (tc_git/storage/handles.py): an MCP tool call builds a new
    engine, and reopening the store parsed the whole private index again (30-60 ms at 50k files)."""
    import functools

    @functools.wraps(fn)
    def wrapper(self, *args, **kwargs):
        if self._in_call:
            return fn(self, *args, **kwargs)
        self._in_call = True
        store = self.store
        store.deferrable = True
        try:
            return fn(self, *args, **kwargs)
        finally:
            self._in_call = False
            store.release()
            if self.store is not store:  # (init with a new store location)
                self.store.release()
    return cast(F, wrapper)


def _engine_calls(cls: type[E]) -> type[E]:
    """Every public method of the class (and `__init__`) wrapped: `validate.guard` (machine
    failures inside any engine call, a full disk, permissions, a read-only file system, nesting
    too deep, become validate.SystemFault with what to do, never a traceback), then `_releasing`."""
    setattr(cls, "__init__", validate.guard(cls.__init__))  # noqa: B010 - mypy forbids assigning a method
    for name, fn in list(vars(cls).items()):
        if not name.startswith("_") and callable(fn) and not isinstance(fn, property):
            setattr(cls, name, _releasing(validate.guard(fn)))
    return cls



@_engine_calls
class Engine:
    def __init__(self, root, store: str | None = None, progress=None, agent: str | None = None,
                 session: str | None = None, settings: Settings | None = None):
        """`settings`: what the front end read at its start (base/settings.py); None: the
        process's current ones."""
        self.settings = settings or current()
        self.root = check_root(root)
        path, self._explicit_store = locate(self.root, store)
        self.store = self._open_store(path)
        self.progress = progress  # callable(done, total, message) or None
        self.agent, self.session = agent, session
        self.policy = Policy(max_file=self.settings.max_file_bytes, root=str(self.root))

    def _open_store(self, path: Path) -> Store:
        store = Store(path, self.root)
        store.mirror_git = self.settings.git
        store.lock_timeout = self.settings.lock_timeout
        return store

    # ------------------------------------------------------------------ helpers
    @property
    def repo(self) -> pygit2.Repository:
        return self.store.repo

    def _require_store(self, what: str | None = None) -> None:
        if not self.store.exists:
            raise self._no_store(what)

    def _no_store(self, what: str | None = None) -> NotFound:
        """No store here: and if the repository around the workspace still holds mirrored tasks
        (the store was deleted, e.g. by `git clean -ffdx`), the error says how to get them back."""
        n = len(self._mirrored_tasks())
        if n:
            return NotFound(f"no tc-git store for {self.root} (deleted? `git clean -ffdx` removes it), but its git "
                            f"repository still holds {n} mirrored task{'s' if n != 1 else ''} in refs/checkpoints/",
                            RECOVER)
        if what is None:
            return NotFound(f"no tc-git store for {self.root}", START_TASK)
        return NotFound(f"no tc-git store for {self.root}: {what}")

    def _mirrored_tasks(self) -> list[str]:
        from .handoff.userrepo import user_gitdir

        gitdir = user_gitdir(self.store)
        if gitdir is None:
            return []
        try:
            user = pygit2.Repository(str(gitdir), pygit2.enums.RepositoryOpenFlag.NO_SEARCH)
            return sorted(t for t in (task_of_ref(n) for n in user.references if n.startswith(TASKS_PREFIX)) if t)
        except (pygit2.GitError, OSError):
            return []

    def _task_id(self, task_id: str | None = None) -> str:
        if task_id is not None:
            return self.resolve_task(task_id)
        if not self.store.exists:
            raise self._no_store()
        active = self.store.active_task()
        if not active:
            raise NotFound("no active task in this workspace", (START_TASK, REOPEN_TASK))
        return active

    def resolve_task(self, text: str) -> str:
        """The task `text` names: its full id, a unique prefix of it, or its name (unique in the
        store; without regard to case when that is unambiguous). One rule for every front end."""
        if not isinstance(text, str):
            raise BadInput(f"the task must be a string (its id, a unique prefix or its name), got {type(text).__name__}")
        if re.search(r"[\x00-\x1f\x7f]", text):
            raise BadInput(f"invalid task id {text!r}: a control character; give its id, a unique prefix or its name")
        text = text.strip()
        if not text:
            raise BadInput("the task is empty: give its id, a unique prefix of it, or its name")
        if TASK_ID_RE.fullmatch(text) and self.store.exists and Timeline(self.repo, text).exists():
            return text  # (the common case: no walk over every task)
        tasks = self.tasks()  # [] without a store
        ids = [t["task_id"] for t in tasks]
        prefixed = [i for i in ids if i.startswith(text)]
        if len(prefixed) == 1:
            return prefixed[0]
        named = [t["task_id"] for t in tasks if t["name"] == text]
        if not named:
            named = [t["task_id"] for t in tasks if t["name"].casefold() == text.casefold()]
        if len(named) == 1:
            return named[0]
        candidates = prefixed or named
        if candidates:
            listed = ", ".join(f"{t['task_id']} ({t['name']})" for t in tasks if t["task_id"] in candidates[:5])
            raise BadInput(f"{text!r} matches {len(candidates)} tasks: {listed}; give more of the id")
        raise NotFound(f"no task {text!r} in this store", LIST_TASKS)

    def _timeline(self, task_id: str | None = None) -> Timeline:
        self._require_store()
        tl = Timeline(self.repo, self._task_id(task_id))
        if not tl.exists():
            raise NotFound(f"unknown task {tl.task_id}", LIST_TASKS)
        return tl

    def _status(self, tl: Timeline, head: Entry) -> str:
        return task_status(tl, head, self.store.active_task())

    def _ws(self) -> Workspace:
        """This workspace and its store as the domain modules take them (capture.py)."""
        if self.store.locked:  # (a restore killed earlier left its journal: its temporaries go first)
            restore_mod.RestoreJournal(self.store).sweep()
        return Workspace(self.store, self.policy, self.progress, self.journal, self.agent, self.session)

    def _snapshot(self, task: dict, paths=None) -> snapshot_mod.Snapshot:
        """Snapshot the workspace under the task's exclude patterns (only `paths`, if given)."""
        return self._ws().snapshot(task, paths)

    journal = None  # the MCP server's change journal for this workspace (tc_git/workspace/journal.py)
    # the MCP server's: runs `job` after the answer, the newest per `key` (a store), see _handoff
    handoff_later: Callable[[str, Callable[[], Any]], None] | None = None
    _git_watched = False  # inside a call whose user-git fingerprint is taken as a whole (_watch_user_git)
    _in_call = False  # inside a public call (_releasing: the store is released when the outer one ends)

    # ------------------------------------------------------------------ tasks
    def init(self, name: str, goal: str = "", constraints: str = "", store: str | None = None,
             exclude=None) -> InitResult:
        if not isinstance(name, str) or not name.strip():
            raise BadInput("name is required: a short name for the task")
        name = validate.title(name, "name")
        goal, constraints = validate.text(goal, "goal"), validate.text(constraints, "constraints")
        exclude = validate_excludes(validate.strings(exclude, "exclude") if exclude is not None else None)
        if store:
            self.store = self._open_store(locate(self.root, store)[0])
            self._explicit_store = True
        self.store.create()
        if self._explicit_store:
            atomic_write(self.root / POINTER_FILE, (json.dumps({"store": self.store.path.as_posix()}) + "\n").encode(),
                         0o644)
        with self.store.lock():
            prev = self.store.active_task()
            prev_suspended = None
            if prev and Timeline(self.repo, prev).exists():
                head = Timeline(self.repo, prev).head()
                if head.kind != "close":
                    prev_suspended = prev
            task_id = f"t{time.time_ns()}"
            tl = Timeline(self.repo, task_id)
            texts, redacted = redact_fields({"name": name.strip(), "goal": goal or "", "constraints": constraints or ""})
            task = {"id": task_id, **texts, "exclude": exclude, "created": iso()}
            snap = self._ws().init(tl, task)
            self.store.set_active_task(task_id)
        external = not self.store.inside_workspace()
        return {
            "task_id": task_id, "name": task["name"], "store": str(self.store.path),
            "store_is_external": external, "prev_suspended": prev_suspended, "exclude": exclude, "redacted": redacted,
            "skipped_paths": capture_mod.skipped(snap),  # the baseline's left-out files, said here once
            "note": ("store is outside the workspace" if external else
                     "store is inside the workspace (.checkpoints/, hidden from git status); deleting "
                     "the workspace deletes it: pass store to keep it elsewhere"),
        }

    def switch(self, task_id: str) -> SwitchResult:
        """Make a task active: its id, a unique prefix of it, or its name."""
        with self.store.lock() if self.store.exists else contextlib.nullcontext():
            tl = self._timeline(task_id)
            if tl.head().kind == "close":
                raise TaskClosed(f"task {tl.task_id} is closed and cannot be reopened", START_NEW)
            self.store.set_active_task(tl.task_id)
        return {"task_id": tl.task_id, "status": "open"}

    def tasks(self) -> list[TaskInfo]:
        if not self.store.exists:
            return []
        active = self.store.active_task()
        return [_task_info(Timeline(self.repo, tid), active) for tid in Timeline.task_ids(self.repo)]

    # ------------------------------------------------------------------ save / capture
    @_watch_user_git
    def save(self, title: str, task_id: str | None = None, description: str = "", conclusion: str = "",
             verified=None, open_questions=None, next: str = "", close: bool = False, paths=None,
             trajectory: str | None = None) -> SaveResult:
        if not isinstance(title, str) or not title.strip():
            raise BadInput("title is required: one line saying what this step did")
        if paths:
            raise BadInput("paths is reserved and must be empty: a step always records the whole workspace")
        title = validate.title(title)
        description, conclusion, next = (validate.text(v, k) for k, v in (
            ("description", description), ("conclusion", conclusion), ("next", next)))
        close = validate.boolean(close, "close")
        verified = validate.strings(verified, "verified")
        open_questions = validate.strings(open_questions, "open_questions")
        self._require_store()
        with self.store.lock():
            active = self.store.active_task()
            tid = self._task_id(task_id)
            tl = self._timeline(tid)
            head = tl.head()
            if head.kind == "close":
                raise TaskClosed(f"task {tid} is closed", START_NEW)
            changed_active = False
            if task_id is not None and tid != active:
                self.store.set_active_task(tid)
                changed_active = True
            ws = self._ws()
            snap = ws.snapshot(head.record.get("task", {}))
            newly_left = capture_mod.newly_left(head.record, snap)
            fields = {"title": title.strip(), "description": description or "", "conclusion": conclusion or "",
                      "verified": verified, "open_questions": open_questions, "next": next or ""}
            fields, redacted = redact_fields(fields)  # a credential in a field never becomes an object
            prev_step = capture_mod.last_step(tl)  # (the tip the mirror last copied)
            index, oid, idempotent = ws.step(tl, head, prev_step, snap, fields, trajectory)
            if not idempotent:
                self._follow_blame(tl, oid)
            git: GitInfo = (self._mirror_task(tl.task_id, tl.ref) if not idempotent else
                            {"ok": False, "ref": None, "reason": "no new step", "unchanged": None})
            if git.get("ok"):
                self._mirror_report(git, prev_step, snap.tree)
            if close:
                ws.close(tl, snap.tree, index)
            status = "closed" if close else "open"
            self._handoff(ws, tl, snap)
            _pack_loose(self.store)
        return {
            "task_id": tid, "index": index, "title": fields["title"], "commit": str(oid),
            "groups": [], "skipped_paths": capture_mod.skipped(snap), "idempotent": idempotent, "closed": bool(close),
            "status": status, "active_task_changed": changed_active, "git": git,
            "changed": snap.changed, "redacted": redacted, "newly_left_out": newly_left,
            "unstable": snap.unstable[:MAX_LIST],
        }

    LARGE_BYTES = 10 << 20

    def _mirror_report(self, git: GitInfo, prev: Entry | None, tree) -> None:
        """The mirror made visible: the first save that copies into the user's repository says
        so (once per store), and a save whose mirror copied a new file over 10 MB names it."""
        if not self.store.read_json("mirror.json", {}).get("announced"):
            git["note"] = ("this step was also copied into your git repository (refs/checkpoints/*, notes and "
                           "the objects they need, uncommitted files included; `git log --all` shows them), so "
                           "`tc-git recover` can bring it back; TC_GIT=off turns that off")
            self.store.write_json("mirror.json", {"announced": True})
        if not git.get("objects"):
            return
        base = prev.oid if prev is not None else self.repo.TreeBuilder().write()
        old, new = self.repo[base].peel(pygit2.Tree), self.repo[tree].peel(pygit2.Tree)
        large = []
        for d in tree_deltas(self.repo, old, new):
            if d.new_id is None or d.status not in "AM" or not stat.S_ISREG(d.new_mode):
                continue
            try:
                st = os.lstat(self.root / d.path)
            except OSError:
                continue
            if st.st_size > self.LARGE_BYTES:
                size = self.repo.odb.read_header(d.new_id)[1]
                if size > self.LARGE_BYTES:
                    large.append({"path": d.path, "bytes": size})
        if large:
            git["large"] = large[:MAX_LIST]

    def _mirror_task(self, task_id: str, label: str | None) -> GitInfo:
        """Export the task's refs into the user's repository (handoff layer), if there is one."""
        from .handoff import userrepo  # lazy: most calls never export

        # inside a call that watches the user's git as a whole (_watch_user_git), that outer
        # fingerprint is the one reported: no second pair here
        return userrepo.mirror_task(self.store, task_id, label, verify=not self._git_watched and self.settings.git_verify,
                                    enabled=self.settings.git)

    def capture(self, partial: bool = False, title: str | None = None, tool_call: dict | None = None,
                paths=None) -> CaptureResult:
        """Record unsaved changes as a drift (`tool_call` links it to the agent's tool call).
        `paths` (workspace-relative): refresh only those, e.g. the files an Edit tool wrote."""
        if paths is not None:
            paths = validate.strings(paths, "paths")
            if not paths or any(os.path.isabs(p) or ".." in p.split("/") for p in paths):
                raise BadInput("paths must be a non-empty list of workspace-relative paths without '..'")
        self._require_store()
        with self.store.lock():
            tl = self._timeline()
            head = tl.head()
            if head.kind == "close":
                raise TaskClosed(f"task {tl.task_id} is closed: nothing to capture", START_NEW)
            ws = self._ws()
            snap = ws.snapshot(head.record.get("task", {}), paths=paths)
            if snap.partial:  # what the refresh did not look at is as the last record found it
                snapshot_mod.carry_forward(snap, head.record.get("files") or {}, paths)
            out: CaptureResult = {"captured": False, "drift_id": None, "reads": 0, "commit": None,
                                  "partial": bool(partial), "waiting": False, "skipped_paths": capture_mod.skipped(snap),
                                  "unstable": snap.unstable[:MAX_LIST]}  # kept at their last version: never held still
            if self.repo[head.oid].peel(pygit2.Commit).tree_id == snap.tree:
                return out
            extra = {"tool_call": tool_call} if tool_call else {}
            oid, drift_id, changed = ws.drift(tl, head, snap, title=title, partial=partial, **extra)
            self._follow_blame(tl, oid)
            self._handoff(ws, tl, snap)
            _pack_loose(self.store)
        out["captured"], out["drift_id"], out["reads"], out["commit"] = True, drift_id, changed["count"], str(oid)
        out["files"] = changed
        return out

    def _handoff(self, ws: Workspace, tl: Timeline, snap: snapshot_mod.Snapshot) -> None:
        """The SessionStart hook's handoff as of this record (resume.cache_handoff, its cache in
        the store): written now, or, in the MCP server (`handoff_later`), after the answer and
        once for a burst of records: a save only saves."""
        unstable = sorted(snap.unstable)
        if self.handoff_later is None:
            resume_mod.cache_handoff(ws, tl, unstable)
            return
        root, who, settings, task, head = self.root, (self.agent, self.session), self.settings, tl.task_id, \
            str(tl.head_oid())
        self.handoff_later(str(self.store.path), lambda: Engine(root, agent=who[0], session=who[1], settings=settings)
                           .refresh_handoff(task, head, unstable))

    def refresh_handoff(self, task_id: str, head: str, unstable: list[str]) -> bool:
        """The hook's handoff of a task written, if its head is still `head` (the commit a record
        made; `unstable`: what did not hold still then). False when the head has moved on: the
        newer record asks for its own."""
        if not self.store.exists:
            return False
        with self.store.lock():
            tl = Timeline(self.repo, task_id)
            if not tl.exists() or str(tl.head_oid()) != head:
                return False
            resume_mod.cache_handoff(self._ws(), tl, unstable)
        return True

    # ------------------------------------------------------------------ read side
    def resume(self, task_id: str | None = None, lang: str = "en") -> ResumeResult:
        out = resume_mod.resume_info(self._ws(), self._timeline(task_id), lang)
        src = copied_from(self.store.path)  # said once, in the copy only (issue 29)
        if src:
            out["copied_from"] = src
            out["handoff"] = copy_notice(src) + "\n" + out["handoff"]
        return out

    def show(self, task_id: str | None = None, index: int | None = None, include_drift: bool = False,
             limit: int = 50, cursor: int | None = None) -> ShowResult:
        validate.boolean(include_drift, "include_drift")
        validate.integer(index, "index", lo=1, none_ok=True)
        validate.integer(cursor, "cursor", lo=0, none_ok=True)
        tl = self._timeline(task_id)
        head = tl.head()
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 200:
            raise BadInput("limit must be an integer from 1 to 200")
        if index is not None:
            e = tl.find(str(index))
            return self._with_shares(tl, {"steps": [entry_dict(tl, e)], "drifts": [], "head": head.step,
                                          "next_cursor": None, "task_id": tl.task_id, "status": self._status(tl, head)})
        cursor = int(cursor or 0)
        chain = tl.entries()  # newest first, shared: read only
        steps, drifts = [], []  # places in `chain`
        prev: dict = {}  # step commit -> the step (or init) before it: what its `files_changed` counts
        later = None
        for i, e in enumerate(chain):
            kind = e.kind
            if kind == "step" or kind == "init":
                if later is not None:
                    prev[later] = e.oid
                later = e.oid if kind == "step" else None
            if kind == "step":
                if e.step > cursor:
                    steps.append(i)
            elif include_drift and kind in ("drift", "restore", "import", "close", "init"):
                drifts.append(i)
        page = [chain[i] for i in reversed(steps[-limit:])] if steps else []
        more = len(steps) > limit
        seq = {chain[i].oid: len(chain) - 1 - i for i in steps[-limit:] + drifts[:limit]}  # time order

        def view(e: Entry) -> EntryView:
            d = entry_dict(tl, e)
            d["seq"] = seq[e.oid]  # time order even within one second
            return d

        def step_view(e: Entry) -> EntryView:
            d = view(e)
            if e.oid in prev:  # against the step before, not the commit before (a drift between)
                d["files_changed"] = files_changed_between(self.repo, prev[e.oid], e.oid)
            return d

        out: ShowResult = {
            "task_id": tl.task_id, "status": self._status(tl, head), "head": head.step,
            "steps": [step_view(e) for e in page],
            "drifts": [view(chain[i]) for i in reversed(drifts[:limit])],
            "drifts_omitted": max(0, len(drifts) - limit),
            "next_cursor": page[-1].step if more and page else None,
        }
        return self._with_shares(tl, out)

    def _with_shares(self, tl: Timeline, out: ShowResult) -> ShowResult:
        """Lines added by agent tool calls and by others, where the blame notes say it."""
        from .timeline import provenance

        shares, total = provenance.line_shares(self.repo, tl)
        for d in out["steps"] + out["drifts"]:
            if d["commit"] in shares:
                d["authored"] = shares[d["commit"]]
        if total is not None:
            out["authored"] = total
        return out

    def log(self, task_id: str | None = None, limit: int = 50) -> list[EntryView]:
        tl = self._timeline(task_id)
        out = []
        for e in tl.walk():
            out.append(entry_dict(tl, e))
            if len(out) >= limit:
                break
        from .timeline import provenance

        shares, _total = provenance.line_shares(self.repo, tl, only={d["commit"] for d in out})
        for d in out:
            if d["commit"] in shares:
                d["authored"] = shares[d["commit"]]
        return out

    def lines(self, task_id: str | None = None) -> list[dict]:
        """The task's other lines of work (two machines continued it; handoff.remotes keeps the
        local one when the remote's head won), not yet joined: name, tip, its newest title and
        how many commits it has that the head lacks."""
        tl = self._timeline(task_id)
        out = []
        for name, tip in tl.lines():
            own = 0
            for e in tl.walk(tip):
                if e.oid == tl.head_oid() or self.repo.descendant_of(tl.head_oid(), e.oid):
                    break
                own += 1
            e = next(tl.walk(tip))
            out.append({"line": name, "commit": str(tip), "title": e.title, "timestamp": iso(e.time),
                        "commits": own, "join": f"adopt {name}"})
        return out

    def adopt(self, line: str, task_id: str | None = None, keep: str = "line") -> dict:
        """Join a line of the task into its head: one step whose parents are the head and the
        line's tip, its files those of the line (`keep="line"`) or of the head (`keep="head"`).
        The line is then part of the task's history (no longer listed); the workspace is not
        changed (the result says how to restore the step)."""
        if keep not in ("line", "head"):
            raise BadInput("keep must be 'line' (the line's files) or 'head' (the head's files)")
        self._require_store()
        with self.store.lock():
            tl = self._timeline(task_id)
            name = str(line).rsplit("/lines/", 1)[-1]
            lines = dict(tl.lines())
            if name not in lines:
                shown = ", ".join(lines) or "none"
                raise NotFound(f"task {tl.task_id} has no line {line!r} to join (its lines: {shown})",
                               Hint("show", {"include_drift": True}, "see them with"))
            tip = lines[name]
            h = tl.head()
            if h.kind == "close":
                raise TaskClosed(f"task {tl.task_id} is closed", START_NEW)
            src = tip if keep == "line" else h.oid
            tree = self.repo[src].peel(pygit2.Tree)
            ws = self._ws()
            counters = dict(h.record.get("counters") or {"steps": 0, "drifts": 0})
            counters["steps"] += 1
            index = counters["steps"]
            rec = ws.record(tl, h, counters=counters, step=index, files=tl.record(src).get("files"),
                            changed=ws.changed(self.repo[h.oid].peel(pygit2.Tree), tree),
                            title=f"join line {name}",
                            conclusion=f"line {name} ({str(tip)[:10]}) joined; files from the {keep}",
                            joined={"line": name, "commit": str(tip), "files_from": keep})
            oid = tl.append("step", tree.id, rec, joins=tip)
        return {"task_id": tl.task_id, "line": name, "step": index, "commit": str(oid), "files_from": keep,
                "hint": f"the workspace is unchanged: preview the joined files with `tc-git restore {index}` "
                        f"(add --apply)"}

    def diff(self, a: str | None = None, b: str | None = None, task_id: str | None = None,
             stat: bool = False, paths=None) -> str:
        """Patch between two points of the timeline (`b` omitted: the workspace's current snapshot);
        `paths`: only those files or directories (workspace-relative), as `git diff -- <path>`."""
        sel = self.diff_paths(paths)
        d = self.diff_object(a, b, task_id)
        if stat:
            return d.stats.format(pygit2.enums.DiffStatsFormat.FULL, 80)
        if sel is None:
            return d.patch or ""
        return "".join(p.text or "" for p in d if p is not None and
                       any(restore_mod.in_selection(f, sel) for f in (p.delta.old_file.path, p.delta.new_file.path)))

    def diff_paths(self, paths) -> list[str] | None:
        """`paths` of a diff as a selection (None: every file); BadInput for '..' or absolute."""
        if not paths:
            return None
        try:
            return restore_mod.selection(paths)
        except ValueError as e:
            raise BadInput(str(e)) from None

    def diff_object(self, a: str | None = None, b: str | None = None, task_id: str | None = None) -> pygit2.Diff:
        tl = self._timeline(task_id)
        old = self.repo[tl.find(a).oid if a else tl.head_oid()].peel(pygit2.Tree)
        if b:
            new = self.repo[tl.find(b).oid].peel(pygit2.Tree)
        else:
            with self.store.lock():
                new = self.repo[self._snapshot(tl.head().record.get("task", {})).tree].peel(pygit2.Tree)
        return old.diff_to_tree(new)

    # ------------------------------------------------------------------ restore
    @_watch_user_git
    def restore(self, index: int | None = None, drift_id: str | None = None, apply: bool = False,
                limit: int = MAX_LIST, paths=None, undo: bool = False, at: str | None = None) -> RestoreResult:
        """Preview (or apply) bringing the workspace back to a step or drift; `paths` limits the
        change to those files or directories (the restore point still records everything).
        `undo=True` (nothing else named) reverses the last applied restore instead: see `undo`.
        `at` names the point by any id of the timeline (2, s0002, d0001, r0001, a commit prefix) or
        a milestone (the code it links)."""
        apply = validate.boolean(apply, "apply")
        if undo:
            if index is not None or drift_id is not None or at is not None or paths:
                raise BadInput("undo reverses the last applied restore: give neither index, drift_id nor paths")
            return self.undo(apply=apply, limit=limit)
        sel = _selection(paths)
        if sum(x is not None for x in (index, drift_id, at)) != 1:
            raise BadInput("pass exactly one of at (2, s0002, d0001, r0001, a commit prefix or a milestone), "
                           "index (a step number) or drift_id (dNNNN)")
        if at is not None and (isinstance(at, bool) or not isinstance(at, (str, int)) or not str(at).strip()):
            raise BadInput("at must name a point: 2, s0002, d0001, r0001, a commit prefix or a milestone")
        if index is not None and (isinstance(index, bool) or not isinstance(index, int) or index < 0):
            raise BadInput("index must be a step number (0: the task's start, its baseline)")
        if drift_id is not None and not re.fullmatch(r"d\d+", str(drift_id)):
            raise BadInput(f"drift_id must look like d0003, got {drift_id!r}")
        return self._restore(str(at) if at is not None else str(index) if index is not None else str(drift_id),
                             apply, limit, sel)

    def _restore(self, point: str, apply: bool, limit: int, sel, undo_of: str | None = None,
                 decide: Callable[[RestoreResult, Any], bool] | None = None) -> RestoreResult:
        """Restore (or preview) to `point` (any id `_point` reads) over the selection `sel`: the
        one restore behind `restore`, `undo` (`undo_of`: the restore it reverses, which must still
        be the last) and an import's (`decide`: whether to apply, from the preview's plan)."""
        self._require_store()
        with self.store.lock():
            tl = self._timeline()
            head = tl.head()
            target = self._point(tl, point)
            if undo_of and str(next((e.oid for e in tl.walk() if e.kind == "restore"), "")) != undo_of:
                raise Conflict("another restore was applied while this undo was being prepared; run undo again")
            if apply and head.kind == "close":
                raise TaskClosed(f"task {tl.task_id} is closed: restore can only be previewed")
            ws = self._ws()
            snap = ws.snapshot(head.record.get("task", {}))
            out, plan = restore_mod.preview(ws, tl, target, snap, sel, undo_of, limit)
            if decide is not None:  # (an import's apply=None) decided from this preview, and applied
                # with this very plan and snapshot, under this lock: preview == apply by construction
                apply = decide(out, plan)
                if apply and head.kind == "close":
                    raise TaskClosed(f"task {tl.task_id} is closed: restore can only be previewed")
            if not apply:
                return out
            done = restore_mod.apply(ws, tl, head, target, snap, plan, sel, undo_of)
            self._handoff(ws, tl, done["after"])
        # a restore with failures is not applied: the restore point (undo) brings back what was there
        failed, after, check = done["failed"], done.pop("after"), done.pop("check")
        out.update({"applied": not failed, "recovered": done["undo_id"], "undo": {"drift_id": done["undo_id"]},
                    "commit": done["commit"], "failed": failed[:limit], "plan": plan.as_dict(limit),
                    "unstable": sorted(set(snap.unstable) | set(after.unstable))[:limit],
                    "restore_id": done["restore_id"]})
        if check is not None:
            out["check"] = check
        return out

    def _point(self, tl: Timeline, ident: str) -> Entry:
        """A point of the task: any id `Timeline.find` reads, else a milestone (its linked code,
        which must be a commit of this task)."""
        try:
            return tl.find(ident)
        except NotFound as e:
            from .base.refs import MILESTONES_PREFIX

            ref = MILESTONES_PREFIX + ident.strip()
            try:
                known = ref in self.repo.references
            except (ValueError, pygit2.GitError):  # not a valid ref name: not a milestone either
                known = False
            if not known:
                if "is not an id" in e.message:
                    raise NotFound(f"{ident!r} is not a point: a step (2 or s0002), a drift (d0001), a restore "
                                   "(r0001), a commit id prefix or a milestone", e.hints) from None
                raise
        from . import trajectory as T

        code = T.linked_code(self.repo, self.repo.references[ref].target)
        if not code:
            raise NotFound(f"milestone {ident!r} is linked to no code commit: nothing to restore")
        try:
            return tl.find(code)
        except NotFound:
            raise NotFound(f"milestone {ident!r} links code of another task, not of {tl.task_id}",
                           Hint("switch", {"task_id": None}, "switch to that task first with")) from None

    @_watch_user_git
    def undo(self, apply: bool = False, limit: int = MAX_LIST) -> RestoreResult:
        """Reverse the most recent applied restore (or import) of the active task: a restore to
        its restore point, over the same paths. An undo is itself a restore, so a second undo
        returns to where the first one started."""
        self._require_store()
        tl = self._timeline()
        j = restore_mod.RestoreJournal(self.store).pending(tl.task_id)
        apply = validate.boolean(apply, "apply")
        if j and re.fullmatch(r"d\d+", str(j.get("undo", ""))):  # killed while it applied: back to its restore point
            return self._restore(j["undo"], apply, limit, _selection(j.get("paths")))
        for e in tl.walk():
            if e.kind != "restore":
                continue
            rec = tl.record(e.oid)
            if not re.fullmatch(r"d\d+", str(rec.get("undo", ""))):
                raise NotFound(f"the last restore of task {tl.task_id} ({str(e.oid)[:10]}) names no restore "
                               "point; restore a drift instead", (Hint("show", {"include_drift": True}, "pick one from"),
                                                                  Hint("restore", {"at": "d0003"}, "then")))
            out = self._restore(rec["undo"], apply, limit, _selection(rec.get("paths")), undo_of=str(e.oid))
            if e.restore:
                out["undo_of_id"] = e.restore
            return out
        raise NotFound(f"nothing to undo: task {tl.task_id} has no applied restore or import")

    # ------------------------------------------------------------------ compress
    def compress(self, keep_seconds: int = 604800, minimum: int = 20, maximum: int = 50) -> CompressResult:
        from .timeline.compress import compress_task

        for name, v, lo in (("keep_seconds", keep_seconds, 0), ("minimum", minimum, 0), ("maximum", maximum, 1)):
            if isinstance(v, bool) or not isinstance(v, int) or v < lo:
                raise BadInput(f"{name} must be an integer >= {lo}")
        self._require_store()
        with self.store.lock():
            tl = self._timeline()
            result = compress_task(self.store, tl, keep_seconds, minimum, maximum, self.progress)
        return {"converted": result["converted"], "eligible": result["eligible"], "already_gone": result["already_gone"],
                "bytes_freed": result["bytes_freed"], "bytes_before": result["bytes_before"],
                "bytes_after": result["bytes_after"], "packed_objects": result["packed_objects"],
                "keep_seconds": keep_seconds, "minimum": minimum, "maximum": maximum}

    # ------------------------------------------------------------------ handoff layer
    # tc_git/handoff/ takes the store and returns data; the engine composes the rest.
    def export(self, to, since=None, task_id: str | None = None) -> ExportResult:
        """Write `<task>.bundle` (v2) + HANDOFF.md; unsaved work is captured first."""
        from .handoff import bundles

        validate.path_arg(to, "to")
        validate.path_arg(since, "since", required=False)
        self._require_store()
        tl = self._timeline(task_id)
        captured = None
        if task_id is None or tl.task_id == self.store.active_task():
            with contextlib.suppress(TaskClosed):
                captured = self.capture().get("drift_id")
        out = bundles.export(self.store, tl.task_id, self.resume(tl.task_id), to, since=since)
        return {**out, "captured": captured}

    @_watch_user_git
    def import_(self, package, rename: str | None = None, merge: bool = False, apply: bool | None = False) -> dict:
        """Bring a task (with its whole history) into this workspace's store and make it active.

        The workspace files follow only through `restore` (preview unless apply=True; with
        apply=None only when that overwrites and deletes nothing: handoff.bundles.auto_restore)."""
        from .handoff import bundles, refsel, seed

        validate.path_arg(package, "package")
        validate.boolean(merge, "merge")
        if apply is not None:  # None: the seed's default (write when nothing is overwritten)
            validate.boolean(apply, "apply")
        p = bundles.package_path(package, rename)
        t0 = time.perf_counter()
        before = refsel.store_state(self.store)  # a failure below puts these back (issue 28)
        if seed.is_seed_package(p):
            result = seed.import_seed(self.store, p, rename, self.policy.max_file)
        else:
            result = bundles.import_bundle(self.store, p, rename, merge, self.policy.max_file)
        tid = result["task_id"]
        t1 = time.perf_counter()
        imported = self._timeline(tid).head_oid()
        try:
            result["git"] = self._mirror_task(tid, head_ref(tid))
            t2 = time.perf_counter()
            try:  # never silent: the files the imported snapshot does not hold, and why (read before the
                # restore, whose own commit describes this workspace)
                result["left_out"] = left_out(self._timeline(tid).head().record)
            except Exception:  # noqa: BLE001 - a report, not a reason to fail an import that succeeded
                result["left_out"] = []
            result["restore"] = self._restore_imported(tid, apply)
        except BaseException as e:
            # a failed import changes nothing: refs, notes and the active task as they were, unless
            # the restore already recorded a point (then files may have moved and its undo must stay)
            try:
                if self._timeline(tid).head_oid() == imported:
                    refsel.roll_back(self.store, before)
            except Exception as why:  # noqa: BLE001 - the import's own error is the one to report
                e.add_note(f"rolling the import back failed too: {why}")
            raise
        result["seconds"] = {"import": round(t1 - t0, 3), "user_repo": round(t2 - t1, 3),
                             "restore": round(time.perf_counter() - t2, 3)}
        return result

    def _restore_imported(self, task_id: str, apply: bool | None, paths=None,
                          decide: Callable[[RestoreResult, Any], bool] | None = None) -> Mapping[str, Any] | None:
        """Preview (or apply) a restore of the workspace to the imported head; `apply=None`:
        write when that overwrites and deletes nothing (`auto` says which happened)."""
        from .handoff import bundles

        if apply is None:
            verdict: dict = {}

            def auto(out, plan) -> bool:
                """Write everything now, from the plan just previewed (one plan: 50k deltas at a
                50k-file import, not planned again), when that overwrites and deletes nothing."""
                shown, paths, note = bundles.auto_restore({**out, "plan": plan.as_dict(bundles.AUTO_LIMIT)})
                verdict.update(shown=shown, paths=paths, note=note)
                return shown is None and paths is None

            done = self._restore_imported(task_id, False, decide=auto)  # (a closed task: its error)
            if done is None or not verdict:
                return done
            if verdict["shown"] is not None:
                return verdict["shown"]
            if verdict["paths"] is None:
                return {**done, "auto": "applied", "note": verdict["note"]}
            del done  # (a preview, not to be held through the apply's peak)
            # only the new files when others would go; an undoable restore either way
            applied = self._restore_imported(task_id, True, paths=verdict["paths"]) or {}
            return {**applied, "auto": "applied", "note": verdict["note"]}
        e = bundles.imported_point(self.repo, task_id)
        if e is None:
            return None
        try:
            if (e.kind == "drift" and e.drift) or e.step >= 1:
                return self._restore(e.drift if e.kind == "drift" and e.drift else str(e.step), bool(apply),
                                     MAX_LIST, _selection(paths), decide=decide)
        except TaskClosed as err:
            return {"applied": False, "error": err.message}
        return None

    def push(self, remote: str | None = None) -> PushResult:
        from .handoff import remotes

        self._require_store()
        return remotes.push(self.store, remote)

    @_watch_user_git
    def pull(self, remote: str | None = None) -> PullResult:
        from .handoff import remotes

        return remotes.pull(self.store, remote, verify=not self._git_watched and self.settings.git_verify,
                            mirror_git=self.settings.git, max_file=self.policy.max_file)

    def recover(self, apply: bool = True) -> RecoverPreview | Recovered:
        """Bring back what the repository around the workspace holds of its tasks (the mirror of
        every step save: each task's timeline up to its last mirrored step, drifts and restore
        points before it included, milestones, notes) after the store was lost: a pull from that
        repository, then the newest open task is made active if none is. `apply=False` only
        lists those tasks as mirrored (`mirrored`), writing nothing."""
        from .handoff.userrepo import user_gitdir

        apply = validate.boolean(apply, "apply")
        gitdir = user_gitdir(self.store)
        if gitdir is None or not self._mirrored_tasks():
            raise NotFound(f"nothing to recover for {self.root}: no git repository around it holds refs/checkpoints/tasks/")
        user = pygit2.Repository(str(gitdir), pygit2.enums.RepositoryOpenFlag.NO_SEARCH)
        mirrored = sorted((_task_info(Timeline(user, tid), None) for tid in self._mirrored_tasks()),
                          key=lambda t: t["updated"], reverse=True)
        if not apply:
            return {"applied": False, "source": str(gitdir), "store_exists": self.store.exists, "mirrored": mirrored}
        pulled = self.pull(str(gitdir))
        with self.store.lock():
            active = self.store.active_task()
            if not active or not Timeline(self.repo, active).exists():
                heads = []
                for tid in self._mirrored_tasks():
                    tl = Timeline(self.repo, tid)
                    if tl.exists() and tl.head().kind != "close":
                        heads.append((self.repo[tl.head_oid()].peel(pygit2.Commit).commit_time, tid))
                active = max(heads)[1] if heads else None
                if active:
                    self.store.set_active_task(active)
        return {**pulled, "applied": True, "source": str(gitdir), "active_task": active,
                "mirrored": [{**t, "active": t["task_id"] == active} for t in mirrored]}

    # ------------------------------------------------------------------ trajectory layer
    # Thin delegations to tc_git/trajectory/, plus the links between the two histories: a
    # milestone notes the code commit of its moment, and the code timeline notes the tip.
    def _code_head(self) -> str | None:
        try:
            return str(self._timeline().head_oid())
        except (NotFound, BadInput):
            return None

    def record(self, transcript: str | None = None, steps=None, milestone: str | None = None,
               agent: str | None = None, session: str | None = None, fmt: str | None = None) -> RecordResult:
        """Record a transcript file (Claude Code / Codex / JSON steps) or steps given inline.

        Idempotent and incremental. With `milestone`, names the recorded tip and links it to
        the code as it is now (a drift is captured first if the workspace changed).
        """
        from . import trajectory as T
        from .trajectory import recording

        if (transcript is None) == (steps is None):
            raise BadInput("pass exactly one of transcript (a file path) or steps (a list of messages)")
        validate.path_arg(transcript, "transcript", required=False)
        if milestone is not None:
            validate.title(milestone, "milestone")
        for k, v in (("agent", agent), ("session", session), ("fmt", fmt)):
            if v is not None:
                validate.title(v, k)
        if transcript is not None:
            path = Path(os.path.expanduser(str(transcript)))
            if not path.is_absolute():
                path = self.root / path
            if not path.is_file():
                raise NotFound(f"transcript not found: {path}")
            T.check_size(path)  # before hashing it: a 512 MiB (sparse) file is refused at once
            fingerprint = recording.file_key(path, fmt, session, agent)
            same = recording.unchanged(self.store, fingerprint)
            if same is not None:
                return same if not milestone else self._with_milestone(same, milestone)
            tr = T.read_transcript(str(path), fmt=fmt, session_id=session)
        else:
            if not isinstance(steps, list) or not steps:
                raise BadInput("steps must be a non-empty list of {role, content} or tool-call steps")
            sid = session or self.session or "manual"
            # a fixed base time keeps ids stable when the same steps are recorded again
            tr = T.read_steps(steps, session_id=sid, agent=agent or self.agent or "generic",
                              base_time=STEPS_BASE_TIME)
        if agent:
            tr.agent = agent
        if not self.store.exists:
            self.store.create()
        with self.store.lock():
            res = recording.record_in(self.store, tr)
            tip = res.branches.get("main") or next(iter(res.branches.values()), None)
            out: RecordResult = {"session": res.session, "events": res.events, "new_commits": res.new_commits,
                   "branches": res.branches, "tip": tip, "skipped": res.skipped,
                   "malformed": res.malformed, "redactions": res.redactions,
                   "unknown_types": res.unknown_types, "milestone": None}
            if milestone and tip:
                out["milestone"] = self._milestone_locked(milestone, tip, res.session, "")
        if transcript is not None:
            recording.remember(self.store, fingerprint, out)
        return out

    def _with_milestone(self, out: RecordResult, milestone: str) -> RecordResult:
        tip = out["tip"]
        if tip:  # as when recorded: a milestone names the recorded tip, if there is one
            with self.store.lock():
                out["milestone"] = self._milestone_locked(milestone, tip, out["session"], "")
        return out

    def _milestone_locked(self, name: str, event: str, session: str | None, message: str,
                          force: bool = False) -> MilestoneInfo:
        from . import trajectory as T

        code = None
        active = self.store.active_task()
        if active and Timeline(self.repo, active).exists():
            try:
                self.capture()  # the code of this moment, if it changed since the last commit
            except TaskClosed:
                pass
            code = self._code_head()
        texts, redacted = redact_fields({"message": message})
        message = texts["message"]
        m = T.set_milestone(self.repo, name, event, session=session, code_commit=code, message=message,
                            force=force)
        return {"name": m.name, "event": m.event, "session": m.session, "code_commit": m.code_commit,
                "message": m.message, "redacted": redacted}

    def milestone(self, name: str, at: str, message: str = "", force: bool = False) -> MilestoneInfo:
        """Name an event (a session, branch, milestone or event id) and link the code of now."""
        from . import trajectory as T

        validate.title(name, "name"), validate.title(at, "at"), validate.text(message, "message")
        validate.boolean(force, "force")
        self._require_store()
        with self.store.lock():
            ev = T.resolve(self.repo, at)
            return self._milestone_locked(name, str(ev.id), None, message, force)

    def sessions(self) -> SessionsResult:
        """This workspace's sessions and milestones, then those the hooks recorded for this
        project into the user-level store (`store: "user"`)."""
        out = self.sessions_here()
        for s in out["sessions"]:
            s["store"] = "workspace"
        user = self.user_store()
        if user is not None:
            from .trajectory.userstore import project_sessions

            mine = project_sessions(self.root)
            theirs = user.sessions_here()
            out["sessions"] += [dict(s, store="user") for s in theirs["sessions"] if s["session"] in mine]
            out["milestones"] += [dict(m, store="user") for m in theirs["milestones"] if m.get("session") in mine]
            out["user_store"] = str(user.store.path)
        return out

    def sessions_here(self) -> SessionsResult:
        """Sessions and milestones of this store only."""
        from . import trajectory as T

        if not self.store.exists:
            return {"sessions": [], "milestones": []}
        return {
            "sessions": [{"session": s.session, "branches": s.branches} for s in T.list_sessions(self.repo)],
            "milestones": [{"name": m.name, "event": m.event, "session": m.session,
                            "code_commit": m.code_commit, "message": m.message, "created": iso(m.created)}
                           for m in T.list_milestones(self.repo)],
        }

    @_or_user_store
    def trajectory_log(self, point: str, limit: int = 50, offset: int = 0, oldest_first: bool = False) -> EventsResult:
        from . import trajectory as T

        self._require_store()
        entries, total = T.log(self.repo, point, newest_first=not oldest_first, offset=offset, limit=limit)
        return {"point": point, "events": entries, "total": total,
                "next_offset": offset + len(entries) if offset + len(entries) < total else None}

    @_or_user_store
    @_watch_user_git
    def checkout(self, point: str, restore_code: bool = False, apply: bool = False, limit: int = 200,
                 paths=None) -> CheckoutResult:
        """The conversation up to a milestone or event; optionally the code of that moment,
        through the normal previewed, undoable restore."""
        from . import trajectory as T

        validate.title(point, "point")
        validate.boolean(restore_code, "restore_code"), validate.boolean(apply, "apply")
        self._require_store()
        co = T.checkout(self.repo, point)
        msgs = co.messages
        out: CheckoutResult = {"point": point, "event": co.event, "messages": msgs[-limit:], "total": len(msgs),
               "omitted": max(0, len(msgs) - limit), "code_commit": co.code_commit,
               "milestones": list(co.milestones), "restore": None}
        if restore_code:
            if not co.code_commit:
                raise NotFound(f"{point} is not linked to a code commit; nothing to restore")
            out["restore"] = self.restore_commit(co.code_commit, apply=apply, paths=paths)
        elif paths:
            raise BadInput("paths select what restore_code brings back: pass restore_code too")
        return out

    def restore_commit(self, commit: str, apply: bool = False, paths=None) -> RestoreResult:
        """Restore to a commit of the active task's timeline, named by its id."""
        tl = self._timeline()
        for e in tl.walk():
            if str(e.oid).startswith(str(commit)):
                if e.kind == "drift":
                    return self.restore(drift_id=e.drift, apply=apply, paths=paths)
                if e.kind == "step":
                    return self.restore(index=e.step, apply=apply, paths=paths)
                if e.step:
                    return self.restore(index=e.step, apply=apply, paths=paths)
                raise BadInput(f"commit {commit[:12]} is the task's {e.kind} commit; restore to a step or drift")
        raise NotFound(f"code commit {commit[:12]} is not in the active task {tl.task_id}; "
                       "switch to the task it belongs to first")

    @_or_user_store
    def export_markdown(self, point: str, out: str | None = None) -> MarkdownResult:
        from . import trajectory as T

        validate.path_arg(out, "out", required=False)
        self._require_store()
        text = T.export_markdown(self.repo, point)
        if out:
            p = validate.out_file(self.root, out)
            p.write_text(text, encoding="utf-8")
            return {"point": point, "path": str(p), "bytes": len(text.encode())}
        return {"point": point, "markdown": text, "bytes": len(text.encode())}

    def branch(self, name: str, at: str, session: str | None = None) -> BranchResult:
        from . import trajectory as T

        validate.title(name, "name"), validate.title(at, "at")
        self._require_store()
        with self.store.lock():
            ref = T.branch(self.repo, name, at, session=session)
        return {"ref": ref, "at": str(self.repo.references[ref].target)}

    @_or_user_store
    def trajectory_diff(self, a: str, b: str, limit: int = 100) -> TrajectoryDiffResult:
        from . import trajectory as T

        self._require_store()
        d = T.diff(self.repo, a, b)
        code = T.code_diff(self.repo, d, MAX_LIST)
        return {"a": d.a, "b": d.b, "base": d.base, "only_a": d.only_a[:limit], "only_b": d.only_b[:limit],
                "only_a_total": len(d.only_a), "only_b_total": len(d.only_b), "code": code}

    @_or_user_store
    def replay(self, point: str, mode: str = "messages", limit: int = 200) -> ReplayResult:
        """`messages`: the message list to seed a new session; `code`: the code state at each
        event; `verify`: re-apply the recorded file edits to the first linked code state and
        compare with the last."""
        from . import trajectory as T

        if mode not in ("messages", "code", "verify"):
            raise BadInput("mode must be messages, code or verify")
        self._require_store()
        if mode == "messages":
            msgs = T.replay(self.repo, point)
            return {"point": point, "mode": mode, "messages": msgs[-limit:], "total": len(msgs)}
        if mode == "code":
            states = T.code_states(self.repo, point)
            return {"point": point, "mode": mode, "states": [{"event": ev, "code_commit": c} for ev, c in states][-limit:],
                    "total": len(states)}
        v, base, last = T.verify_point(self.repo, point, root=str(self.root))
        return {"point": point, "mode": mode, "ok": v.ok, "applied": v.applied, "skipped": v.skipped,
                "first_difference": v.path, "reason": v.reason, "base": base, "recorded": last,
                "differences": list(v.differences)[:limit]}


    # ------------------------------------------------------------------ the user-level store
    def user_store(self) -> Engine | None:
        """The user-level store (trajectory/userstore.py) seen from this workspace: where the
        hooks record sessions whose directory has no store. None when it does not exist or is
        this engine's own store."""
        from .base.recordrules import user_store_path

        path = user_store_path()
        if not (path / "HEAD").is_file() or os.path.realpath(path) == os.path.realpath(self.store.path):
            return None
        return Engine(self.root, store=str(path), agent=self.agent, session=self.session)

    @_or_user_store
    def resume_session(self, point: str, client: str, code: bool = False, apply: bool = False,
                       session_id: str | None = None, drop_thinking: bool = False,
                       keep_thinking: bool = False) -> dict:
        """Write the conversation up to `point` as a session file `client` (claude|codex) resumes
        (trajectory/sessionfile.py); with `code`, the linked code too, through the normal
        previewed, undoable restore. Thinking the client's API cannot verify is left out (a
        note in its place, `notice` says so) unless `keep_thinking`; `drop_thinking` leaves out
        all of it."""
        from .trajectory.ops import replay
        from .trajectory.sessionfile import write_session

        validate.title(point, "point"), validate.title(client, "client")
        validate.boolean(code, "code"), validate.boolean(apply, "apply"), validate.boolean(drop_thinking, "drop_thinking")
        validate.boolean(keep_thinking, "keep_thinking")
        if drop_thinking and keep_thinking:
            raise BadInput("drop_thinking and keep_thinking contradict each other: pass one")
        if session_id is not None:
            validate.title(session_id, "session_id")
        self._require_store()
        records = replay(self.repo, point, image_data=True)
        out = write_session(records, client, str(self.root), session_id=session_id,
                            thinking="drop" if drop_thinking else "keep" if keep_thinking else "auto")
        out.update(point=point, event=records[-1]["id"], restore=None)
        if code:
            out["restore"] = self.checkout(point, restore_code=True, apply=apply, limit=1)["restore"]
        return out

    # ------------------------------------------------------------------ for the front ends
    # What the CLI, the MCP server, the hooks, the watcher and `tc-git view` need, so that none of
    # them reaches into the store, the repository or a private method (issue 15).
    @property
    def store_path(self) -> Path:
        """The store's directory (it may not exist yet)."""
        return self.store.path

    @property
    def has_store(self) -> bool:
        return self.store.exists

    def watch_entry(self) -> tuple[Path, Path] | None:
        """(workspace, store) for the drift watcher while this workspace has an active task."""
        if not self.store.exists or not self.store.active_task():
            return None
        return self.root, self.store.path

    def active_open_task(self) -> str | None:
        """The active task's id, unless there is none or it is closed."""
        active = self.store.active_task() if self.store.exists else None
        if not active:
            return None
        tl = Timeline(self.repo, active)
        return active if tl.exists() and tl.head().kind != "close" else None

    def head_commit(self, task_id: str | None = None) -> str:
        """The commit id at the head of the task's timeline."""
        return str(self._timeline(task_id).head_oid())

    def drifts_since(self, commit: str, since: float, task_id: str | None = None) -> list[str]:
        """Drift ids recorded after `commit` (and not before `since`, in case a compress rewrote
        it), oldest first."""
        out = []
        for e in self._timeline(task_id).walk():
            if str(e.oid) == commit or e.time < since - 2:
                break
            if e.kind == "drift" and e.drift:
                out.append(e.drift)
        return out[::-1]

    def show_point(self, point: str, task_id: str | None = None, include_drift: bool = False,
                   limit: int = 50, cursor: int | None = None) -> ShowResult:
        """`show` for any point of a task (a step, drift, restore or commit prefix: ids.py's
        grammar); a step shows its page as `show` does."""
        validate.title(point, "point")
        tl = self._timeline(task_id)
        ent = tl.find(point)
        if ent.kind == "step":
            return self.show(task_id, ent.step, include_drift, limit, cursor)
        head = tl.head()
        return {"task_id": tl.task_id, "status": self._status(tl, head), "head": head.step,
                "steps": [entry_dict(tl, ent)], "drifts": [], "next_cursor": None}

    # ------------------------------------------------------------------ line provenance
    def _follow_blame(self, tl: Timeline, oid: pygit2.Oid) -> None:
        """A blamed task's new commit gets its blame note now (provenance.follow); attribution is
        never worth failing a record for: a failure leaves it to the next blame."""
        from .timeline import provenance

        try:
            provenance.follow(self.repo, tl, oid)
        except (pygit2.GitError, KeyError, ValueError, TcError) as e:
            from .base.fsutil import store_log

            store_log(self.store.path, "server.log", f"blame note of {str(oid)[:12]} left for later: {e}")

    def _blame_lines(self, path: str, at: str | None, task_id: str | None):
        """(lines, conversations, point id, commit) of `path` at a point, or in the workspace."""
        from .timeline import provenance

        validate.title(path, "path")
        if at is not None:
            validate.title(at, "at")
        rel = path.replace(os.sep, "/").strip()
        if os.path.isabs(rel):
            rel = os.path.relpath(os.path.realpath(rel), os.path.realpath(self.root)).replace(os.sep, "/")
        rel = rel[2:] if rel.startswith("./") else rel
        if not rel or rel.startswith("/") or ".." in rel.split("/"):
            raise BadInput(f"path {path!r} must name a file inside the workspace {self.root}")
        tl = self._timeline(task_id)
        with self.store.lock():  # notes the chain lacks are computed and written here
            point = tl.find(at) if at is not None else tl.head()
            lines, _b, convs = provenance.blame(self.repo, tl, point, rel)
        where, commit = point.id, str(point.oid)
        if at is None:
            f = self.root / rel
            try:
                data = f.read_bytes() if f.is_file() and not f.is_symlink() else None
            except OSError:
                data = None
            if data is not None and data != b"".join(ln.raw for ln in lines):
                lines, _n = provenance.with_workspace(lines, data)
                where = "workspace"
        return rel, lines, convs, where, commit, tl.task_id

    def blame(self, path: str, at: str | None = None, task_id: str | None = None, start: int = 1,
              limit: int = 200, text: bool = False, budget: int | None = None) -> dict:
        """Who last changed each line of `path`: as the workspace holds it now (lines changed
        since the last record are `workspace`), or at a point (`at`: s0004, d0002, ...);
        `budget`: at most that many bytes of JSON (the rest from `next_start`)."""
        from .timeline import provenance

        validate.integer(start, "start", lo=1)
        validate.integer(limit, "limit", lo=1, hi=100000)
        rel, lines, convs, where, commit, task = self._blame_lines(path, at, task_id)
        head = {"task_id": task, "path": rel, "at": where, "commit": commit}
        return provenance.report(lines, convs, start, limit, text, budget, head)

    def why(self, path: str, line: int, at: str | None = None, task_id: str | None = None) -> dict:
        """Why line `line` of `path` is there: its step or drift, and the prompt, the assistant's
        words and the tool call that wrote it (when recorded)."""
        from .timeline import provenance

        validate.integer(line, "line", lo=1)
        rel, lines, convs, where, commit, task = self._blame_lines(path, at, task_id)
        if line > len(lines):
            raise BadInput(f"{rel} has {len(lines)} lines at {where}; line {line} is past its end")
        out = provenance.explain(lines[line - 1], convs)
        return {"task_id": task, "path": rel, "at": where, **out}

    def precompact_name(self, session: str | None) -> str:
        """The name of the next PreCompact milestone of `session` in this store."""
        from .trajectory.milestones import precompact_name

        self._require_store()
        return precompact_name(self.repo, session)

    def link_session_end(self, tip: str | None) -> bool:
        """Link a recorded session's tip to the code of its end (the active task's head), unless
        it is linked already; False when there is nothing to link."""
        from .trajectory import event_note, link_code

        if not tip or not self.store.exists or not self.store.active_task():
            return False
        with self.store.lock():
            if event_note(self.repo, tip).get("code_commit"):
                return False
            link_code(self.repo, tip, str(self._timeline().head_oid()))
        return True

    def view(self, task_ids=None, session_ids=None, out: str | None = None) -> dict:
        """Write the self-contained HTML view of tasks and sessions (view.py); default place:
        `<store>/view/`, which no snapshot reads."""
        from .timeline.view import write_view
        from .trajectory.userstore import project_sessions

        if out is not None:
            out = validate.path_arg(out, "out")
        # the sessions the hooks recorded for this project into the user-level store are shown too
        user = self.user_store()
        theirs = sorted(project_sessions(self.root)) if user is not None else []
        if not self.store.exists:
            if user is None or not theirs or task_ids:
                raise NotFound(f"no tc-git store for {self.root}: nothing to view yet (tc-git init starts a task)")
            r = write_view(user.repo, [], list(session_ids or []), None, user.store.path / "view", out, known=theirs)
            return dict(r, store="user", user_sessions=r["sessions"])
        tasks = [self._timeline(t).task_id for t in (task_ids or [])]
        active = self.store.active_task()
        return write_view(self.repo, tasks, list(session_ids or []), active, self.store.path / "view", out,
                          user=(user.repo, theirs) if user is not None and theirs else None)


def _selection(paths):
    """What a restore covers (restore.selection), a bad path list a BadInput."""
    try:
        return restore_mod.selection(paths)
    except ValueError as e:
        raise BadInput(str(e)) from None


def _pack_loose(store) -> None:
    """The store's upkeep after a write: loose objects packed once they pile up, small packs
    rolled up with deltas (storage/repack.py; lazy: read-only commands never import it)."""
    from .storage import repack

    repack.auto(store.repo)
