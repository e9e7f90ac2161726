"""Agent-runtime hooks (Claude Code, Codex): `tc-hook <event>` / `tc hook <event>`.

The agent runs this once per event with the event JSON on stdin. It dispatches on
`hook_event_name` (the command-line event name is only a fallback) and does the least work that
event needs:

- SessionStart: if the workspace (`cwd` of the event, or a parent of it) has an active task,
  print `hookSpecificOutput.additionalContext` = the resume handoff; else print nothing.
- SessionEnd (and Codex `Stop`): spawn a detached worker that records the transcript and
  returns at once (Claude Code gives every SessionEnd hook together 1.5 s). Every session is
  recorded (`TC_RECORD=all`, the default): into the workspace store when there is one (with an
  active task the worker also captures the code and links the session's tip to it), else into
  the user-level store (`$XDG_DATA_HOME/tc-git/store`, see trajectory/userstore.py).
  `TC_RECORD=tasks` records only where a task is active, `TC_RECORD=off` never; a
  `.tc-no-record` file in the project (or a parent) opts that project out.
- PostToolUse on a file-changing tool: record a drift whose note names the tool call.
- PreCompact: record the transcript so far and name a milestone `precompact-<session>-<n>` on
  its tip (linked to the code timeline when a task is active), under the same rules as
  SessionEnd: the workspace store, else the user-level store.

Rules: never fail the agent (any error -> a line on stderr, exit 0, and a line in
`<store>/tc/hooks.log` when there is a store); never create a workspace store; no active task ->
nothing, except the session recording above; a store another user owns, or others can write, is
no store (discover.untrusted): nothing of it is injected, nothing is written into it.
Start-up cost matters (every tool call pays it): this module imports only the standard library
at load time, never `mcp`, and pygit2 (through the engine) only on the paths that need it.
"""
from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .base import settings
from .base.errors import UntrustedStore
from .base.jsonsafe import one_line
from .base.recordrules import OPT_OUT_FILE, opted_out, record_mode, user_store_path  # noqa: F401  (OPT_OUT_FILE: re-exported)
from .storage.discover import (  # stdlib-only: no pygit2
    active_task_of,
    check_user_store,
    copied_from,
    copy_notice,
    find_workspace,
    store_dir,
    untrusted,
)

if TYPE_CHECKING:  # annotations only: the engine (and pygit2) load on first use
    from .engine import Engine

LOG_NAME = "hooks.log"

EVENT_NAMES = {  # command-line name -> hook_event_name
    "session-start": "SessionStart",
    "session-end": "SessionEnd",
    "post-tool-use": "PostToolUse",
    "pre-compact": "PreCompact",
    "stop": "Stop",
}
# Tools whose only job is to change files: always captured.
EDIT_TOOLS = frozenset({"Write", "Edit", "MultiEdit", "NotebookEdit", "apply_patch"})
# Shell tools may change files (sed -i, git checkout, a build); a capture after them records a
# drift only when the snapshot differs, so read-only commands cost a stat walk and no commit.
# Claude Code runs these hooks async (see hooks/hooks.json), so the agent does not wait.
SHELL_TOOLS = frozenset({"Bash", "shell", "exec_command", "local_shell", "shell_command"})
AGENTS = ("claude", "codex")
RECORDING = frozenset({"SessionEnd", "Stop", "PreCompact"})  # record the transcript, wherever there is no store
class Place:
    """Where a hook acts: the workspace root, its store, and the active task (or None)."""

    def __init__(self, root: str, store: str, task: str | None, user: bool = False):
        self.root, self.store, self.task = root, store, task
        self.user = user  # the user-level store (no workspace store here)

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        return f"Place({self.root!r}, {self.store!r}, {self.task!r})"


# ------------------------------------------------------------------------------- locating
def _active(store: str) -> dict:
    try:
        with open(os.path.join(store, "tc", "active.json"), encoding="utf-8") as f:
            data = json.load(f)
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def _is_store(path: str) -> bool:
    return os.path.isfile(os.path.join(path, "HEAD")) and os.path.isdir(os.path.join(path, "objects"))


def locate(cwd: str | None) -> Place | None:
    """The workspace of `cwd`, found as the CLI finds it (discover.py: cwd or its nearest parent
    with a store; the agent may have `cd`-ed into a subdirectory), and its store. Reads a few
    small files; never imports pygit2, never creates anything. None when there is no store (the
    home directory, its parents and `/` are never workspaces, as in `store.check_root`).
    Raises UntrustedStore for a store (or pointer file) that is another user's or writable by
    others: the caller treats that as no store and never reads or writes it."""
    if not cwd:
        return None
    d = os.path.realpath(os.path.expanduser(cwd))
    if not os.path.isdir(d):
        return None
    found = find_workspace(d)
    if found is None:
        return None
    root = str(found)
    home = os.path.realpath(os.path.expanduser("~"))
    if root == os.path.dirname(root) or (home + os.sep).startswith(root.rstrip(os.sep) + os.sep):
        return None
    store = os.path.realpath(store_dir(found)[0])
    if not _is_store(store):
        return None
    err = untrusted(store, "tc-git store", root)  # (a pointer's or TC_STORE's store)
    if err is not None:
        raise err
    return Place(root, store, active_task_of(_active(store), root, store))


# ------------------------------------------------------------------------------- logging
def log(store: str | None, line: str) -> None:
    """Append one line to `<store>/tc/hooks.log` (rotated at 1 MB); only if the store exists."""
    if store and os.path.isdir(os.path.join(store, "tc")):
        from .workspace.secrets import store_log  # loaded only when there is a store to log into (redacts)

        store_log(store, LOG_NAME, line)


# ------------------------------------------------------------------------------- helpers
def detect_agent(event: dict, hint: str | None = None) -> str:
    if hint in AGENTS:
        return hint
    tp = str(event.get("transcript_path") or "")
    if "/.codex/" in tp or os.path.basename(tp).startswith("rollout-") or "turn_id" in event:
        return "codex"
    return "claude"


def _patch_paths(text: str) -> list[str]:
    out = []
    for line in str(text).splitlines():
        for tag in ("*** Add File: ", "*** Update File: ", "*** Delete File: ", "*** Move to: "):
            if line.startswith(tag):
                out.append(line[len(tag):].strip())
    return out


def _rel(path: str, root: str | None) -> str:
    if root and os.path.isabs(path):
        try:
            rel = os.path.relpath(os.path.realpath(path), root)
        except ValueError:
            return path
        return path if rel.startswith("..") else rel
    return path


def tool_call_of(event: dict, agent: str, root: str | None = None) -> dict:
    """What the drift note says about the tool call that made it (paths relative to `root`)."""
    tool = str(event.get("tool_name") or "")
    inp = event.get("tool_input")
    inp = inp if isinstance(inp, dict) else {"input": inp} if inp is not None else {}
    paths = [str(inp[k]) for k in ("file_path", "notebook_path", "path") if isinstance(inp.get(k), str)]
    if tool == "apply_patch" or "*** Begin Patch" in str(inp.get("command") or inp.get("input") or ""):
        paths += _patch_paths(inp.get("command") or inp.get("input") or inp.get("patch") or "")
    call = {"id": event.get("tool_use_id") or event.get("call_id"), "name": tool, "agent": agent,
            "session": event.get("session_id"), "turn": event.get("turn_id"),
            "paths": [_rel(p, root) for p in paths[:50]]}
    cmd = inp.get("command")
    if tool in SHELL_TOOLS and cmd:
        from .workspace.secrets import redact_text  # a shell command may hold a credential

        call["command"] = one_line(redact_text(" ".join(cmd) if isinstance(cmd, list) else str(cmd)), 300)
    return {k: v for k, v in call.items() if v not in (None, "", [])}


def _title(call: dict) -> str:
    root_rel = call.get("paths") or []
    if root_rel:
        first = root_rel[0]
        more = f" (+{len(root_rel) - 1})" if len(root_rel) > 1 else ""
        return one_line(f"{call['name']} {first}{more}", 100)
    if call.get("command"):
        return one_line(f"{call['name']}: {call['command']}", 100)
    return f"after {call.get('name') or 'a tool call'}"


def _engine(place: Place, agent: str, session: str | None) -> Engine:
    from .engine import Engine  # pygit2 from here on

    return Engine(place.root, agent=agent, session=session, settings=settings.current())


def capture_linked(engine, call: dict, title: str, paths=None) -> dict:
    """A drift whose note names the tool call that caused it, with a readable title (`paths`:
    refresh only those, the files an edit tool wrote; None: the whole workspace)."""
    if paths is not None:
        return engine.capture(title=title, tool_call=call, paths=paths)
    return engine.capture(title=title, tool_call=call)


def lost_store_hint(cwd: str) -> str | None:
    """No store here, but the git repository around `cwd` holds mirrored tasks (the store was
    deleted, e.g. by `git clean -ffdx`): what to tell the agent. Reads a few files only."""
    d = os.path.realpath(os.path.expanduser(str(cwd)))
    while not os.path.lexists(os.path.join(d, ".git")):
        parent = os.path.dirname(d)
        if parent == d:
            return None
        d = parent
    gitdir = os.path.join(d, ".git")
    try:
        if os.path.isfile(gitdir):  # a linked worktree's gitfile, then its common directory
            with open(gitdir, encoding="utf-8") as f:
                gitdir = os.path.join(d, f.read().split("gitdir:", 1)[1].strip())
            common = os.path.join(gitdir, "commondir")
            if os.path.isfile(common):
                with open(common, encoding="utf-8") as f:
                    gitdir = os.path.join(gitdir, f.read().strip())
        found = bool(os.listdir(os.path.join(gitdir, "refs", "checkpoints", "tasks"))) \
            if os.path.isdir(os.path.join(gitdir, "refs", "checkpoints", "tasks")) else False
        if not found and os.path.isfile(os.path.join(gitdir, "packed-refs")):
            with open(os.path.join(gitdir, "packed-refs"), encoding="utf-8", errors="replace") as f:
                found = any(" refs/checkpoints/tasks/" in line for line in f)
    except (OSError, IndexError):
        return None
    if not found:
        return None
    return ("tc-git: this project has no checkpoint store (deleted? `git clean -ffdx` removes it), but its git "
            "repository still holds the mirrored tasks: `tc-git recover` brings back every mirrored step.")


# ------------------------------------------------------------------------------- events
def on_session_start(event: dict, place: Place, agent: str) -> dict | None:
    from .timeline.handoff_cache import read  # written at every record: no pygit2, no workspace scan

    cached = read(place.store, place.task) if place.task else None
    if cached is not None:
        if cached.get("status") == "closed":
            return None
        when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(cached.get("time") or 0))
        text = ("tc-git: this workspace has an active checkpointed task. Where it stands "
                f"(as of its last record, {when}; tc_resume rescans the workspace):\n" + cached["text"])
        src = copied_from(place.store)  # (the engine's resume says it itself)
        if src:
            text = copy_notice(src) + "\n" + text
        return {"hookSpecificOutput": {"hookEventName": "SessionStart", "additionalContext": text}}
    e = _engine(place, agent, event.get("session_id"))
    info = e.resume()
    if info.get("status") == "closed":
        return None
    text = ("tc-git: this workspace has an active checkpointed task. Where it stands "
            "(same as tc_resume):\n" + info["handoff"])
    return {"hookSpecificOutput": {"hookEventName": "SessionStart", "additionalContext": text}}


def on_post_tool_use(event: dict, place: Place, agent: str) -> dict | None:
    tool = str(event.get("tool_name") or "")
    if tool not in EDIT_TOOLS and tool not in SHELL_TOOLS:
        return None
    from .workspace.secrets import rule_cache_missing

    if rule_cache_missing():  # a fresh HOME: compiling the secret rules takes ~5 s of CPU, off the hook
        pid = _detach({"kind": "capture", "root": place.root, "store": place.store, "agent": agent,
                       "event": {k: event.get(k) for k in CALL_KEYS if k in event}}, place)
        log(place.store, f"PostToolUse {tool} {event.get('tool_use_id') or event.get('call_id') or '-'}: "
                         f"secret rules not compiled yet: capture handed to worker {pid}")
        return None
    _post_tool_use(event, place, agent)
    return None


CALL_KEYS = ("tool_name", "tool_input", "tool_use_id", "call_id", "session_id", "turn_id", "cwd")  # tool_call_of's


def _post_tool_use(event: dict, place: Place, agent: str) -> None:
    tool = str(event.get("tool_name") or "")
    call = tool_call_of(event, agent, place.root)
    e = _engine(place, agent, event.get("session_id"))
    from .base.errors import TaskClosed

    # an edit tool names the files it wrote: refresh just those (a shell command or an unknown
    # tool may have written anything: the whole workspace)
    paths = call.get("paths") if tool in EDIT_TOOLS else None
    cwd = event.get("cwd")
    if cwd and os.path.realpath(str(cwd)) != os.path.realpath(place.root):
        paths = None  # a relative path would be relative to a subdirectory
    if not paths or any(os.path.isabs(p) or ".." in p.split("/") for p in paths) or len(paths) >= 50:
        paths = None
    try:
        r = capture_linked(e, call, _title(call), paths)
    except TaskClosed:  # a closed task records nothing more; not an error for the agent
        return None
    log(place.store, f"PostToolUse {tool} {call.get('id', '-')}: "
                     + (f"drift {r['drift_id']} {str(r['commit'])[:10]}" if r.get("captured") else "no changes"))
    return None


def on_pre_compact(event: dict, place: Place, agent: str) -> dict | None:
    """Record the transcript as it is before the compaction and name its tip (the workspace
    store, with the code of now when a task is active; else the user-level store)."""
    tp = event.get("transcript_path")
    session = str(event.get("session_id") or "")
    if not tp or not os.path.isfile(tp):
        log(place.store, f"PreCompact: no transcript at {tp!r}; no milestone")
        return None
    if place.user:
        from .trajectory.milestones import precompact_name
        from .trajectory.userstore import record_session

        res = record_session(tp, place.root, agent=agent, session=session or None, milestone=precompact_name)
        log(place.store, f"PreCompact: recorded {res['session']} for {place.root} ({res['events']} events, "
                         f"{res['new_commits']} new); milestone {(res.get('milestone') or {}).get('name', '-')}")
        return None
    e = _engine(place, agent, session or None)
    if place.task:
        try:  # the code as it is now, so the milestone links the workspace of this moment
            capture_linked(e, {"name": "PreCompact", "agent": agent, "session": session or None},
                           f"before {event.get('trigger') or ''} compaction".replace("  ", " "))
        except Exception as exc:  # a closed task still gets its transcript recorded
            log(place.store, f"PreCompact capture skipped: {exc}")
    # Engine.record: idempotent, incremental; names the recorded tip and links the code of now
    rec = e.record(transcript=tp, milestone=e.precompact_name(session))
    m = rec.get("milestone")
    log(place.store, f"PreCompact: recorded {rec['session']} ({rec['events']} events, {rec['new_commits']} new); "
                     + (f"milestone {m['name']} at {m['event'][:10]}" if m else "no events yet, no milestone"))
    return None


def on_session_end(event: dict, place: Place, agent: str) -> dict | None:
    """Hand the recording to a detached worker and return."""
    tp = event.get("transcript_path")
    payload = {"root": place.root, "store": place.store, "agent": agent, "transcript": tp,
               "session": event.get("session_id"), "event": event.get("hook_event_name"),
               "reason": event.get("reason"), "user_store": place.user}
    pid = _detach(payload, place)
    log(place.store, f"{payload['event']}: recording {tp} in worker {pid}")
    return None


def _detach(payload: dict, place: Place) -> int:
    """Start `worker(payload)` as a detached process (its output into hooks.log); its pid."""
    import subprocess

    logf = None
    try:
        logf = open(os.path.join(place.store, "tc", LOG_NAME), "ab")
    except OSError:
        pass
    try:
        proc = subprocess.Popen(  # (the payload on stdin: a tool's input can be longer than an argument may be)
            [sys.executable, "-P", "-m", "tc_git.hooks", "_worker", "-"],
            stdin=subprocess.PIPE, stdout=logf or subprocess.DEVNULL, stderr=logf or subprocess.DEVNULL,
            cwd=place.root, start_new_session=True, close_fds=True,
            # Windows has no sessions: a detached process in its own group outlives the hook's console
            creationflags=getattr(subprocess, "DETACHED_PROCESS", 0) | getattr(subprocess, "CREATE_NEW_PROCESS_GROUP", 0))
        assert proc.stdin is not None
        with proc.stdin:
            proc.stdin.write(json.dumps(payload).encode())
    finally:
        if logf:
            logf.close()
    return proc.pid


HANDLERS = {
    "SessionStart": on_session_start,
    "PostToolUse": on_post_tool_use,
    "PreCompact": on_pre_compact,
    "SessionEnd": on_session_end,
    "Stop": on_session_end,  # Codex has no SessionEnd in most builds: record after each turn
}


# ------------------------------------------------------------------------------- worker
def worker(payload: dict) -> int:
    """The detached half of SessionEnd: capture, record, link; retried while the file grows.
    Or (kind "capture") of a PostToolUse hook in a fresh HOME: compile the secret rules, then capture."""
    store = payload.get("store")
    if payload.get("kind") == "capture":
        return _capture_worker(payload)
    try:
        place = Place(payload["root"], store or "", None)
        agent, session, tp = payload.get("agent") or "claude", payload.get("session"), payload.get("transcript")
        time.sleep(settings.current().hook_settle)  # the transcript may lag
        if payload.get("user_store"):
            return _user_worker(payload, agent, session, tp)
        e = _engine(place, agent, session)
        try:
            capture_linked(e, {"name": payload.get("event") or "SessionEnd", "agent": agent, "session": session},
                           f"end of session ({payload.get('reason') or 'exit'})")
        except Exception as exc:
            log(store, f"worker: capture skipped: {exc}")
        if not tp or not os.path.isfile(tp):
            log(store, f"worker: no transcript at {tp!r}")
            return 0
        def record_once() -> None:
            res = e.record(transcript=tp)
            e.link_session_end(res["tip"])  # the session's tip shows the code of its end
            log(store, f"worker: recorded {res['session']}: {res['events']} events, {res['new_commits']} new, "
                       f"{len(res['branches'])} branches{_unknown(res)}")

        _while_growing(tp, record_once)
    except Exception as exc:
        log(store, f"worker: failed: {type(exc).__name__}: {exc}")
        from .workspace.secrets import redact_text  # (stderr is hooks.log here too)

        print(redact_text(f"tc-git hook worker: {type(exc).__name__}: {exc}"), file=sys.stderr)
    return 0


def _capture_worker(payload: dict) -> int:
    """A PostToolUse hook's capture, handed over while the secret rules were not compiled."""
    store = payload.get("store")
    try:
        from .workspace.secrets import build_rule_cache

        if build_rule_cache():  # (waits for another builder, if one is at it)
            log(store, "worker: compiled the secret engine's rules into its disk cache")
        _post_tool_use(payload.get("event") or {}, Place(payload["root"], store or "", None),
                       payload.get("agent") or "claude")
    except Exception as exc:
        log(store, f"worker: capture failed: {type(exc).__name__}: {exc}")
    return 0


def _unknown(res: Mapping[str, Any]) -> str:
    unknown = res.get("unknown_types") or {}
    return ("; unknown line types skipped: " + ", ".join(f"{k} x{v}" for k, v in sorted(unknown.items()))
            if unknown else "")


def _user_worker(payload: dict, agent: str, session: str | None, tp: str | None) -> int:
    """Record into the user-level store (no workspace store here), again while the file grows."""
    store = payload.get("store")
    if not tp or not os.path.isfile(tp):
        log(store, f"worker: no transcript at {tp!r}")
        return 0
    from .trajectory.userstore import record_session

    def record_once() -> None:
        res = record_session(tp, payload["root"], agent=agent, session=session)
        log(store, f"worker: recorded {res['session']} for {payload['root']}: {res['events']} events, "
                   f"{res['new_commits']} new, {len(res['branches'])} branches{_unknown(res)}")

    _while_growing(tp, record_once)
    return 0


def _while_growing(path: str, record_once) -> None:
    """Record, then again while the agent is still appending to the transcript (at most 5 rounds,
    the `hook_regrow` setting's seconds apart): SessionEnd can fire before the last lines are flushed."""
    size, rounds = -1, 0
    while rounds < 5:
        st = os.stat(path)
        if st.st_size == size:
            break
        size = st.st_size
        record_once()
        rounds += 1
        time.sleep(settings.current().hook_regrow)


# ------------------------------------------------------------------------------- entry
def _read_event(stream) -> dict:
    if stream is None or stream.isatty():
        return {}
    text = stream.read()
    if not text.strip():
        return {}
    data = json.loads(text)
    if not isinstance(data, dict):
        raise ValueError("the hook event on stdin is not a JSON object")
    return data


def run(name: str | None, agent_hint: str | None = None, stdin=None) -> str:
    """Handle one hook event; returns what to print on stdout ("" for nothing). Never raises."""
    place = None
    kind = EVENT_NAMES.get(name or "", name)
    try:
        event = _read_event(sys.stdin if stdin is None else stdin)
        kind = event.get("hook_event_name") or kind
        handler = HANDLERS.get(kind or "")
        if handler is None:
            return ""
        cwd = event.get("cwd") or os.environ.get("CLAUDE_PROJECT_DIR") or os.getcwd()
        try:
            place = locate(cwd)
        except UntrustedStore as e:  # another user's store: no store here, nothing of it is read
            print(f"tc-git hook {kind}: {e.message}", file=sys.stderr)
        if kind in RECORDING:  # every session is recorded unless turned off (see the top)
            mode = record_mode()
            if mode == "off" or opted_out(cwd) or (mode == "tasks" and (place is None or not place.task)):
                return ""
            if place is None:
                d = os.path.realpath(os.path.expanduser(str(cwd)))
                if not os.path.isdir(d):
                    return ""
                check_user_store()  # (raises UntrustedStore: then nothing is recorded anywhere)
                place = Place(d, str(user_store_path()), None, user=True)
        elif place is None or not place.task:
            hint = lost_store_hint(cwd) if place is None and kind == "SessionStart" else None
            return json.dumps({"hookSpecificOutput": {"hookEventName": kind, "additionalContext": hint}}) if hint else ""
        out = handler(event, place, detect_agent(event, agent_hint))
        return json.dumps(out, ensure_ascii=False) if out else ""
    except BaseException as exc:  # never fail the agent, whatever happened
        if isinstance(exc, SystemExit) and not exc.code:
            return ""
        msg = f"{type(exc).__name__}: {exc}"
        print(f"tc-git hook {kind or '?'}: {msg}", file=sys.stderr)
        log(place.store if place else None, f"{kind}: error: {msg}")
        return ""


USAGE = "usage: tc-hook [session-start|session-end|post-tool-use|pre-compact|stop] [--agent claude|codex]"


def main(argv=None) -> int:
    """The hook entry: the environment read once into settings, installed for the event."""
    previous = settings.install(settings.Settings.from_env())
    try:
        return _main(argv)
    finally:
        settings.install(previous)


def _main(argv=None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    if args[:1] == ["_worker"]:
        try:
            return worker(json.loads(sys.stdin.read() if args[1:2] in ([], ["-"]) else args[1]))
        except Exception as exc:  # pragma: no cover - payload is ours
            print(f"tc-git hook worker: {exc}", file=sys.stderr)
            return 0
    if args[:1] in (["-h"], ["--help"]):
        print(USAGE)
        return 0
    agent = None
    if "--agent" in args:
        i = args.index("--agent")
        agent = args[i + 1] if i + 1 < len(args) else None
        del args[i:i + 2]
    out = run(args[0] if args else None, agent)
    if out:
        sys.stdout.write(out + "\n")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
