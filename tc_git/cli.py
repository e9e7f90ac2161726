"""`tc`: the engine for people. Human output by default, `--json` for scripts.

Never imports `mcp` (0.75 s of start-up): this module is also what hooks run.
Every command returns a dict (printed as JSON with --json); the core commands are dispatched in
`run_core`, and other layers (handoff, trajectory, view, hooks) add theirs through a `setup(sub)`
function whose parsers set `func` (and optionally `human`) defaults.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

from . import __version__, jsonsafe
from .errors import TcError

class Progress:
    """A one-line progress bar on stderr, only when stderr is a terminal."""

    def __init__(self, enabled: bool):
        self.enabled = enabled and sys.stderr.isatty()
        self.last = 0.0
        self.shown = False

    def __call__(self, done, total=None, message=""):
        if not self.enabled or time.monotonic() - self.last < 0.1:
            return
        self.last = time.monotonic()
        if total:
            width = 30
            filled = int(width * min(done, total) / total)
            bar = f"[{'#' * filled}{'.' * (width - filled)}] {done}/{total}"
        else:
            bar = f"{done}"
        sys.stderr.write(f"\r{message or 'working'}: {bar}\033[K")
        sys.stderr.flush()
        self.shown = True

    def close(self):
        if self.shown:
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()


def engine_for(args):
    from .engine import Engine

    return Engine(args.root, progress=args.progress)


# ---------------------------------------------------------------------------------- commands
def _setup_core(sub):
    p = sub.add_parser("init", help="start a task (suspends the active one)")
    p.add_argument("name")
    p.add_argument("--goal", default="")
    p.add_argument("--constraints", default="")
    p.add_argument("--store", default=None, help="keep the store outside the workspace")
    p.add_argument("--exclude", action="append", default=[], help="pattern to leave out (repeatable)")

    p = sub.add_parser("save", help="record a completed step")
    p.add_argument("title")
    p.add_argument("-c", "--conclusion", default="")
    p.add_argument("-d", "--description", default="")
    p.add_argument("-n", "--next", default="")
    p.add_argument("--verified", action="append", default=[])
    p.add_argument("--question", dest="open_questions", action="append", default=[])
    p.add_argument("--task", dest="task_id", default=None)
    p.add_argument("--close", action="store_true", help="record this step and close the task")

    p = sub.add_parser("resume", help="print the handoff text of the active task")
    p.add_argument("--task", dest="task_id", default=None)
    p.add_argument("--lang", default="en", choices=["en", "zh"])

    p = sub.add_parser("log", help="the task's timeline, newest first")
    p.add_argument("--task", dest="task_id", default=None)
    p.add_argument("-n", "--limit", type=int, default=30)
    p.add_argument("--all", action="store_true", help="list every task in the store")

    p = sub.add_parser("show", help="steps of the task (paginated)")
    p.add_argument("index", nargs="?", type=int)
    p.add_argument("--task", dest="task_id", default=None)
    p.add_argument("--drift", dest="include_drift", action="store_true")
    p.add_argument("--limit", type=int, default=50)
    p.add_argument("--cursor", type=int, default=None)

    p = sub.add_parser("diff", help="patch between two steps/drifts, or a step and the workspace")
    p.add_argument("a", nargs="?", help="step number or drift id (default: head)")
    p.add_argument("b", nargs="?", help="step number or drift id (default: the workspace now)")
    p.add_argument("--stat", action="store_true")

    p = sub.add_parser("restore", help="preview (default) or apply a restore to a step or drift")
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("index", nargs="?", type=int)
    g.add_argument("--drift", dest="drift_id")
    p.add_argument("--apply", action="store_true", help="write the workspace (undoable)")
    p.add_argument("--path", dest="paths", action="append", default=None, metavar="PATH",
                   help="restore only this file or directory (repeatable); the rest stays as it is")

    p = sub.add_parser("undo", help="reverse the last applied restore or import (undo again to redo)")
    p.add_argument("--preview", action="store_true", help="show what undo would write, write nothing")

    sub.add_parser("capture", help="record unsaved changes as a drift now")

    p = sub.add_parser("switch", help="make another task active")
    p.add_argument("task_id")

    p = sub.add_parser("compress", help="drop old drifts (never steps or restore points) and repack")
    p.add_argument("--keep-seconds", type=int, default=604800)
    p.add_argument("--minimum", type=int, default=20)
    p.add_argument("--maximum", type=int, default=50)

    p = sub.add_parser("demo", help="walk through a short task in a scratch workspace")
    p.add_argument("--keep", action="store_true", help="keep the scratch workspace")


def run_core(args) -> dict:
    c = args.cmd
    if c == "demo":
        from .demo import run_demo

        return run_demo(keep=args.keep)
    e = engine_for(args)
    if c == "init":
        store = os.path.abspath(args.store) if args.store else None  # a person's path: from the cwd
        return e.init(args.name, args.goal, args.constraints, store, args.exclude)
    if c == "save":
        return e.save(args.title, task_id=args.task_id, description=args.description,
                      conclusion=args.conclusion, verified=args.verified,
                      open_questions=args.open_questions, next=args.next, close=args.close)
    if c == "resume":
        return e.resume(args.task_id, args.lang)
    if c == "log":
        if args.all:
            return {"tasks": e.tasks()}
        return {"entries": e.log(args.task_id, args.limit)}
    if c == "show":
        return e.show(args.task_id, args.index, args.include_drift, args.limit, args.cursor)
    if c == "diff":
        return {"patch": e.diff(args.a, args.b, stat=args.stat)}
    if c == "restore":
        return e.restore(args.index, args.drift_id, args.apply, paths=workspace_paths(args, args.paths))
    if c == "undo":  # applies at once: it is itself undone by another undo, nothing is lost
        return e.undo(apply=not args.preview)
    if c == "capture":
        return e.capture()
    if c == "switch":
        return e.switch(args.task_id)
    if c == "compress":
        return e.compress(args.keep_seconds, args.minimum, args.maximum)
    raise AssertionError(c)


def workspace_paths(args, paths):
    """`--path` values as the engine wants them: relative to the workspace root. A relative path
    typed in a subdirectory of the workspace is taken from there, as git does; anything that
    leaves the workspace keeps its `..` and is refused by the engine."""
    if not paths:
        return paths
    import posixpath

    root = os.path.realpath(args.root)
    cwd = os.path.realpath(os.getcwd())
    prefix = os.path.relpath(cwd, root) if (cwd + os.sep).startswith(root + os.sep) else "."
    out = []
    for p in paths:
        if os.path.isabs(p):
            rel = os.path.relpath(os.path.realpath(p), root)
            out.append(p if rel.startswith("..") else rel)  # outside: the engine names the problem
        elif prefix != ".":
            out.append(posixpath.normpath(posixpath.join(prefix.replace(os.sep, "/"), p)))
        else:
            out.append(p)
    return out


# ---------------------------------------------------------------------------------- output
def _human(cmd: str, r: dict) -> str:
    if cmd == "init":
        return f"started task {r['task_id']} ({r['name']}); store: {r['store']}" + (
            f"; suspended {r['prev_suspended']}" if r.get("prev_suspended") else "")
    if cmd == "save":
        if r["idempotent"]:
            s = f"step {r['index']} unchanged (same title, fields and files)"
        else:
            s = f"saved step {r['index']}: {r['title']} [{r['commit'][:10]}]"
        if r.get("closed"):
            s += "; task closed"
        for p in r.get("skipped_paths", [])[:10]:
            s += f"\n  not stored: {p}"
        return s
    if cmd == "resume":
        return r["handoff"]
    if cmd == "log":
        if "tasks" in r:
            return "\n".join(f"{'*' if t['active'] else ' '} {t['task_id']}  {t['status']:<9} "
                             f"step {t['head']:<4} {t['name']}" for t in r["tasks"]) or "no tasks"
        return "\n".join(f"{e['commit'][:10]} {e['timestamp']} {e['kind']:<7} {e['id']:<6} {e['title']}"
                         for e in r["entries"])
    if cmd == "show":
        out = []
        for s in r["steps"]:
            out.append(f"step {s['index']}: {s['title']}  ({s['timestamp']}, {s['files_changed']} files)")
            for k in ("conclusion", "next"):
                if s.get(k):
                    out.append(f"    {k}: {s[k]}")
        for d in r.get("drifts", []):
            out.append(f"  {d['kind']} {d['id']}: {d['title']} ({d['timestamp']})")
        if r.get("next_cursor"):
            out.append(f"(more: --cursor {r['next_cursor']})")
        return "\n".join(out) or "no steps yet"
    if cmd == "diff":
        return r["patch"].rstrip("\n") or "no differences"
    if cmd in ("restore", "undo"):
        p = r["plan"]
        what = r["target"] + (f" ({', '.join(r['paths'])})" if r.get("paths") else "")
        if r.get("recovered") and not r["applied"]:  # applied with failures: say so, never "preview"
            head = (f"{'undo' if r.get('undo_of') else 'restore'} to {what} INCOMPLETE: "
                    f"{len(r.get('failed') or [])} path(s) failed (below), none half-written; undo with: tc undo")
        elif r.get("undo_of"):
            head = (f"undid restore {r['undo_of'][:10]}: back to {what}; redo with: tc undo" if r["applied"]
                    else f"preview of undoing restore {r['undo_of'][:10]} (nothing written)")
        else:
            head = (f"restored {what}; undo with: tc undo" if r["applied"]
                    else f"preview of restore to {what} (nothing written; add --apply)")
        lines = [head]
        for k, label in (("to_write", "create"), ("to_replace", "replace"), ("to_delete", "delete")):
            for path in p[k]:
                lines.append(f"  {label:<8} {path}")
        for u in p["unrestorable"]:
            lines.append(f"  keep     {u['path']} ({u['reason']})")
        for f in r.get("failed") or []:
            lines.append(f"  failed   {f['path']} ({f['reason']})")
        chk = r.get("check")
        if chk and chk.get("outside_changed_count"):
            lines.append(f"  warning: {chk['outside_changed_count']} paths outside the selection changed meanwhile "
                         f"(not by this restore): {', '.join(chk['outside_changed'][:5])}")
        if chk and chk.get("differs_from_target"):
            lines.append(f"  warning: still differs from {r['target']}: {', '.join(chk['differs_from_target'][:5])}")
        return "\n".join(lines)
    if cmd == "capture":
        return f"captured drift {r['drift_id']} ({r['reads']} files)" if r["captured"] else "no changes"
    if cmd == "switch":
        return f"active task: {r['task_id']}"
    if cmd == "compress":
        return (f"dropped {r['converted']} drifts; {r['bytes_freed']} bytes freed "
                f"({r['bytes_before']} -> {r['bytes_after']})")
    if cmd == "demo":
        return r["text"]
    return json.dumps(r, indent=2, ensure_ascii=False)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="tc", description="tc-git: checkpoints for long agent work, on git")
    ap.add_argument("--version", action="version", version=f"tc-git {__version__}")
    ap.add_argument("-C", "--root", default=None, help="workspace directory (default: current directory)")
    ap.add_argument("--json", action="store_true", help="machine-readable output")
    sub = ap.add_subparsers(dest="cmd", required=True, metavar="command")
    _setup_core(sub)
    for setup in EXTENSIONS:
        setup(sub)
    return ap


EXTENSIONS: list = []  # setup(sub) functions of other layers; their parsers set `func`


def _load_extensions() -> None:
    """Optional layers add sub-commands; a missing or broken one never breaks the core CLI."""
    import importlib

    if EXTENSIONS:
        return  # already loaded (main() may run more than once in one process)
    for mod in ("tc_git.handoff_cli", "tc_git.trajectory_cli", "tc_git.view_cli", "tc_git.hooks_cli",
                "tc_git.skill_cli", "tc_git.run"):
        try:
            m = importlib.import_module(mod)
        except ImportError:
            continue
        EXTENSIONS.append(m.setup)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["hook"]:  # hooks have a start-up budget: skip loading the other layers
        from .hooks import main as hook_main

        return hook_main(argv[1:])
    _load_extensions()
    args = build_parser().parse_args(argv)
    args.root = args.root or os.getcwd()
    progress = Progress(enabled=not args.json)
    args.progress = progress
    try:
        result = args.func(args) if hasattr(args, "func") else run_core(args)
    except TcError as e:
        progress.close()
        if args.json:
            print(jsonsafe.dumps({"error": e.message, "code": e.code, "isError": True}))
        else:
            print(f"tc: {e.message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        progress.close()
        print("tc: interrupted", file=sys.stderr)
        return 130
    progress.close()
    if args.json:
        # a non-UTF-8 file name is shown git-quoted, the same rule as the MCP results (jsonsafe)
        print(jsonsafe.dumps(result, indent=2, default=str))
    else:
        human = getattr(args, "human", None)
        text = human(result) if human else _human(args.cmd, result)
        if text:
            try:
                print(text)
            except BrokenPipeError:  # `tc ... | head`
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    if getattr(args, "exit_code_from_result", False):  # `run -- cmd` exits with the command's code
        return int(result.get("exit_code", 0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
