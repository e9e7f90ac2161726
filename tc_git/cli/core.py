"""The core commands (init, save, resume, log, show, diff, restore, undo, capture, switch, compress,
demo): their parsers, one engine call each, and their human output."""
from __future__ import annotations

import argparse
import json
import os
from collections.abc import Mapping
from typing import Any

from ..base.errors import BadInput
from ..base.results import EntryView, RestoreResult, SaveResult
from .common import ID_HELP, engine_for, prog, task_arg, workspace_paths

TASK_HELP = "task id, a unique prefix of it, or the task's name (default: the active task)"


CORE = ("init", "save", "resume", "log", "show", "diff", "restore", "undo", "capture", "switch", "compress", "demo")


def setup(sub) -> None:
    p = sub.add_parser("init", help="start a task here (the active one is suspended)",
                       description="Start a task in this workspace: the directory you are in, or the "
                                   "workspace it belongs to. The store is created on first use.")
    p.add_argument("name", help="a short name for the task")
    p.add_argument("--goal", default="", help="what done looks like (shown by resume)")
    p.add_argument("--constraints", default="", help="rules the work must keep (shown by resume)")
    p.add_argument("--store", default=None, metavar="DIR",
                   help="keep the store in DIR instead of <workspace>/.checkpoints")
    p.add_argument("--exclude", action="append", default=[], metavar="PATTERN",
                   help="leave out a name or gitignore-style pattern (repeatable)")
    p.add_argument("--force", action="store_true",
                   help="start a separate workspace here even though a parent directory is one")

    p = sub.add_parser("save", help="record a completed step",
                       description="Record the workspace as the next step of the task, with what was done "
                                   "and what comes next. Saving the same thing twice changes nothing.")
    p.add_argument("title", help="one line: what this step did")
    p.add_argument("-c", "--conclusion", default="", help="what was learned or decided")
    p.add_argument("-d", "--description", default="", help="longer notes on the step")
    p.add_argument("-n", "--next", default="", help="what the next step is (shown by resume)")
    p.add_argument("--verified", action="append", default=[], metavar="CHECK",
                   help="a check that passed, e.g. a test command (repeatable)")
    p.add_argument("--question", dest="open_questions", action="append", default=[], metavar="TEXT",
                   help="an open question for whoever continues (repeatable)")
    p.add_argument("--task", dest="task_id", default=None, help=TASK_HELP + "; it becomes active")
    p.add_argument("--close", action="store_true", help="record this step and close the task")

    p = sub.add_parser("resume", help="where the work stands: the handoff text for a new session")
    p.add_argument("--task", dest="task_id", default=None, help=TASK_HELP)
    p.add_argument("--lang", default="en", choices=["en", "zh"], help="language of the labels")

    p = sub.add_parser("log", help="the task's timeline, newest first (--all: every task)")
    p.add_argument("--task", dest="task_id", default=None, help=TASK_HELP)
    p.add_argument("-n", "--limit", type=int, default=30, help="at most this many entries (default 30)")
    p.add_argument("--all", action="store_true", help="list every task in the store instead")

    p = sub.add_parser("show", help="the steps of the task with their conclusions (or one point)")
    p.add_argument("id", nargs="?", help="show only this point: " + ID_HELP)
    p.add_argument("--task", dest="task_id", default=None, help=TASK_HELP)
    p.add_argument("--drift", dest="include_drift", action="store_true",
                   help="also list drifts, restores and the other commits")
    p.add_argument("--limit", type=int, default=50, help="steps per page (1-200, default 50)")
    p.add_argument("--cursor", type=int, default=None, help="the step to continue after (from a previous page)")

    p = sub.add_parser("diff", help="what changed between two points, or since a point",
                       description="Patch between two points of the timeline; with one point, between it "
                                   "and the workspace now; with none, since the last commit.")
    p.add_argument("a", nargs="?", help="from this point (default: the latest commit): " + ID_HELP)
    p.add_argument("b", nargs="?", help="to this point (default: the workspace now)")
    p.add_argument("--stat", action="store_true", help="per-file counts, as `git diff --stat` prints them")
    p.add_argument("--path", dest="paths", action="append", default=None, metavar="PATH",
                   help="only this file or directory (repeatable; also `diff 1 -- PATH...`)")
    p.add_argument("--task", dest="task_id", default=None, help=TASK_HELP)

    p = sub.add_parser("restore", help="preview (default) or apply going back to a point; undoable",
                       description="Bring the workspace back to a point of the timeline. Without --apply "
                                   "nothing is written. With it, the workspace as it is (unsaved work too) is "
                                   "recorded first, so every restore can be undone.")
    p.add_argument("id", nargs="?", help=ID_HELP)
    p.add_argument("--drift", dest="drift_id", metavar="ID", help=argparse.SUPPRESS)  # older spelling
    p.add_argument("--apply", action="store_true", help="write the workspace (undoable)")
    p.add_argument("--path", dest="paths", action="append", default=None, metavar="PATH",
                   help="restore only this file or directory (repeatable); the rest stays as it is")

    p = sub.add_parser("undo", help="reverse the last applied restore or import (undo again to redo)")
    p.add_argument("--preview", action="store_true", help="show what undo would write, write nothing")

    sub.add_parser("capture", help="record unsaved changes now, as a drift")

    p = sub.add_parser("switch", help="make another task active")
    p.add_argument("task_id", metavar="task", help="task id, a unique prefix of it, or the task's name")

    p = sub.add_parser("compress", help="drop old drifts (never steps or restore points) and repack")
    p.add_argument("--keep-seconds", type=int, default=604800,
                   help="keep every drift younger than this (default: one week)")
    p.add_argument("--minimum", type=int, default=20, help="always keep at least this many drifts (default 20)")
    p.add_argument("--maximum", type=int, default=50, help="keep at most this many drifts (default 50)")

    p = sub.add_parser("demo", help="a one-minute tour in a scratch workspace")
    p.add_argument("--keep", action="store_true", help="keep the scratch workspaces to look around")

    for name in CORE:
        sub.choices[name].set_defaults(func=run, human=lambda r, name=name: human(name, r))


def run(args) -> Mapping[str, Any]:
    c = args.cmd
    if c == "demo":
        from .demo import run_demo

        return run_demo(keep=args.keep)
    e = engine_for(args)
    if c == "init":
        store = os.path.abspath(args.store) if args.store else None  # a person's path: from the cwd
        return e.init(args.name, args.goal, args.constraints, store, args.exclude)
    if c == "switch":
        return e.switch(args.task_id)
    task = task_arg(args)
    if c == "save":
        return e.save(args.title, task_id=task, description=args.description,
                      conclusion=args.conclusion, verified=args.verified,
                      open_questions=args.open_questions, next=args.next, close=args.close)
    if c == "resume":
        return e.resume(task, args.lang)
    if c == "log":
        if args.all:
            return {"tasks": e.tasks()}
        return {"entries": e.log(task, args.limit), "lines": e.lines(task)}
    if c == "show":
        if args.id is not None:  # any id form; the engine's `index` takes step numbers only
            return e.show_point(args.id, task, args.include_drift, args.limit, args.cursor)
        return e.show(task, None, args.include_drift, args.limit, args.cursor)
    if c == "diff":
        if args.stat:
            from ..timeline.diffstat import stat

            return {"patch": stat(e.diff_object(args.a, args.b, task_id=task),
                                  keep=e.diff_paths(workspace_paths(args, args.paths)))}
        return {"patch": e.diff(args.a, args.b, task_id=task, paths=workspace_paths(args, args.paths))}
    if c == "restore":
        if (args.id is None) == (args.drift_id is None):
            raise BadInput("name the point to restore to: " + ID_HELP)
        return e.restore(at=args.id or args.drift_id, apply=args.apply, paths=workspace_paths(args, args.paths))
    if c == "undo":  # applies at once: it is itself undone by another undo, nothing is lost
        return e.undo(apply=not args.preview)
    if c == "capture":
        return e.capture()
    if c == "compress":
        return e.compress(args.keep_seconds, args.minimum, args.maximum)
    raise AssertionError(c)


# ---------------------------------------------------------------------------------- output
def plural(n: int, word: str, many: str | None = None) -> str:
    return f"{n} {word if n == 1 else many or word + 's'}"


def listing(items, limit: int = 10, indent: str = "  ", total: int | None = None) -> list[str]:
    """At most `limit` lines, then `+N more`."""
    items = list(items)
    total = len(items) if total is None else total
    out = [indent + str(x) for x in items[:limit]]
    if total > min(limit, len(items)):
        out.append(f"{indent}+{total - min(limit, len(items))} more")
    return out


def _left_out(r: Mapping[str, Any]) -> list[str]:
    """Files kept out of the store: the new ones named (once: the engine says which are new in
    `newly_left_out`), the others counted."""
    every = r.get("skipped_paths") or []
    new = r.get("newly_left_out")
    if new is None:
        new = every
    lines = []
    if new:
        lines.append(f"  left out, contents never stored ({plural(len(new), 'new file' if new is not every else 'file')}):")
        lines += listing(new, indent="    ")
    if len(every) > len(new):  # the snapshot re-reports only what it looked at again: no total here
        lines.append(f"  other files left out as before ({prog()} resume lists them)")
    return lines


def not_here(left) -> list[str]:
    """The files a received snapshot does not hold, and why (as HANDOFF.md lists them): the
    receiving side must supply them itself. Used by restore, undo and import."""
    if not left:
        return []
    rows = [f"{x.get('path')} ({x.get('why')}{': ' + x['reason'] if x.get('reason') else ''})" for x in left]
    return [f"  not in this snapshot, supply them yourself ({plural(len(left), 'file')}):"] + listing(rows, indent="    ")


def _h_save(r: SaveResult) -> str:
    if r["idempotent"]:
        s = f"step {r['index']} unchanged (same title, fields and files)"
    else:
        s = f"saved step {r['index']}: {r['title']}  [{r['commit'][:10]}]"
    if r.get("closed"):
        s += "; task closed"
    lines = [s] + _left_out(r)
    git = r.get("git") or {}
    for f in git.get("large") or []:
        lines.append(f"  large new file copied into the store and your repository's .git: {f['path']} "
                     f"({f['bytes'] / (1 << 20):.1f} MiB); to keep such files out, list them in .gitignore")
    if git.get("note"):
        lines.append(f"  note: {git['note']}")
    return "\n".join(lines)


def _h_restore(r: RestoreResult) -> str:
    p = r["plan"]
    target = r["target"]
    sel = r["paths"]
    what = target + (f" ({', '.join(sel)})" if sel else "")
    c = p.get("counts") or {k: len(p[k]) for k in ("to_write", "to_replace", "to_delete")}
    n = c["to_write"] + c["to_replace"] + c["to_delete"]
    rid = f" ({r['restore_id']})" if r.get("restore_id") else ""
    if r.get("recovered") and not r["applied"]:  # applied with failures: say so, never "preview"
        head = (f"{'undo' if r.get('undo_of') else 'restore'} to {what} INCOMPLETE: "
                f"{plural(len(r.get('failed') or []), 'path')} failed (below), none half-written; "
                f"undo with: {prog()} undo")
    elif r.get("undo_of"):
        undone = r.get("undo_of_id") or r["undo_of"][:10]
        head = (f"undid restore {undone}: back to {what}{rid}; redo with: {prog()} undo" if r["applied"]
                else f"undoing restore {undone} would change {plural(n, 'file')} (nothing written)")
    elif r["applied"]:
        head = f"restored {what}{rid}; undo with: {prog()} undo"
    elif n:
        path_args = "".join(f" --path {x}" for x in sel or [])
        head = (f"restore to {what} would change {plural(n, 'file')} (nothing written yet; "
                f"run `{prog()} restore {target}{path_args} --apply`)")
    else:
        head = f"the workspace already matches {what}"
    lines = [head]
    rows = []
    for paths, label in ((p["to_write"], "create"), (p["to_replace"], "replace"), (p["to_delete"], "delete")):
        rows += [f"{label:<8} {path}" for path in paths]
    rows += [f"keep     {u['path']} ({u['reason']})" for u in p["unrestorable"]]
    lines += listing(rows, limit=20, total=n + len(p["unrestorable"]))
    for f in r.get("failed") or []:
        lines.append(f"  failed   {f.get('path')} ({f.get('reason', f.get('error', ''))})")
    lines += not_here(r.get("not_in_target"))
    chk = r.get("check")
    if chk and chk.get("outside_changed_count"):
        lines.append(f"  warning: {plural(chk['outside_changed_count'], 'path')} outside the selection changed "
                     f"meanwhile (not by this restore): {', '.join(chk['outside_changed'][:5])}")
    if chk and chk.get("differs_from_target"):
        lines.append(f"  warning: still differs from {target}: {', '.join(chk['differs_from_target'][:5])}")
    return "\n".join(lines)


def _h_log(r: dict) -> str:
    if "tasks" in r:
        if not r["tasks"]:
            return f"no tasks yet: start one with `{prog()} init \"<name>\"`"
        return "\n".join(f"{'*' if t['active'] else ' '} {t['task_id']}  {t['status']:<9} "
                         f"step {t['head']:<4} {t['name']}" for t in r["tasks"])
    out = [f"{e['id']:<6} {e['commit'][:10]}  {e['timestamp'].replace('T', ' ').rstrip('Z')}  "
           f"{e['kind']:<7} {_log_title(e)}" for e in r["entries"]]
    for ln in r.get("lines") or []:  # the task continued elsewhere too (push/pull kept both)
        out.append(f"line   {ln['commit'][:10]}  {ln['timestamp'].replace('T', ' ').rstrip('Z')}  {ln['line']}: "
                   f"{ln['title']} ({ln['commits']} commits not in the head; join: `{prog()} {ln['join']}`)")
    return "\n".join(out)


def _log_title(e: EntryView) -> str:
    if e["kind"] == "restore" and isinstance(e.get("target"), dict):
        return f"to {e['target'].get('id')}"
    a = e.get("authored")
    return e["title"] + (f"  (+{a['agent']} agent, +{a['other']} other lines)" if a and any(a.values()) else "")


def human(cmd: str, r: Any) -> str:
    """The human output of core command `cmd` for `r`, what `run` returned for it (see results.py)."""
    if cmd == "init":
        s = f"started task {r['task_id']}: {r['name']}\n  store: {r['store']}"
        if r.get("prev_suspended"):
            s += f"\n  suspended {r['prev_suspended']} (back to it with `{prog()} switch {r['prev_suspended']}`)"
        s = "\n".join([s, *_left_out(r)])
        return s + f"\n  next: work, then `{prog()} save \"<what you did>\"`"
    if cmd == "save":
        return _h_save(r)
    if cmd == "resume":
        return r["handoff"]
    if cmd == "log":
        return _h_log(r)
    if cmd == "show":
        import heapq

        out = []
        is_step = {id(x) for x in r["steps"]}
        # one list in time order: the drifts (and restores) between the steps where they happened
        for s in heapq.merge(r.get("drifts", []), r["steps"], key=lambda x: x.get("seq", 0)):
            when = s["timestamp"].replace("T", " ").rstrip("Z")
            if id(s) in is_step:
                label = f"step {s['index']}" if s["kind"] == "step" else f"{s['kind']} {s['id']}"
                what = "file changed since the step before" if s["kind"] == "step" else "file changed"
                count = ("the baseline: the project as the task started" if s["kind"] == "init"
                         else plural(s['files_changed'], what, what.replace('file', 'files', 1)))
                out.append(f"{label}: {s['title']}  ({when}, {count})")
                for k in ("conclusion", "next"):
                    if s.get(k):
                        out.append(f"    {k}: {s[k]}")
                if s.get("authored"):
                    out.append(f"    lines added: {s['authored']['agent']} by agent tool calls, {s['authored']['other']} other")
            else:
                out.append(f"  {s['kind']} {s['id']}: {s['title']} ({when})")
        if r.get("next_cursor"):
            out.append(f"(more: --cursor {r['next_cursor']})")
        if r.get("authored"):
            out.append(f"task: {r['authored']['agent']} lines added by agent tool calls, {r['authored']['other']} other")
        return "\n".join(out) or "no steps yet"
    if cmd == "diff":
        return r["patch"].rstrip("\n") or "no differences"
    if cmd in ("restore", "undo"):
        return _h_restore(r)
    if cmd == "capture":
        if not r["captured"]:
            return "nothing changed since the last commit"
        return f"captured drift {r['drift_id']} ({plural(r['reads'], 'file')} changed)"
    if cmd == "switch":
        return f"active task: {r['task_id']}"
    if cmd == "compress":
        return (f"dropped {plural(r['converted'], 'drift')}; {r['bytes_freed']:,} bytes freed "
                f"({r['bytes_before']:,} -> {r['bytes_after']:,})")
    if cmd == "demo":
        return r["text"]
    return json.dumps(r, indent=2, ensure_ascii=False)
