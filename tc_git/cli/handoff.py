"""`tc-git export`, `import`, `push`, `pull`: the handoff layer on the command line."""
from __future__ import annotations

from .common import engine_for as _engine
from .common import prog as PROG
from .common import task_arg as _task
from .core import not_here


def _h_export(r: dict) -> str:
    s = (f"wrote {r['path']} ({r['objects']} objects, {r['bytes']} bytes"
         f"{', incremental' if r['incremental'] else ''}) and {r['handoff']}")
    if r.get("captured"):
        s += f"\n  unsaved work recorded first as drift {r['captured']}"
    if r.get("note"):
        s += f"\n  note: {r['note']}"
    return s + f"\n  continue elsewhere with: {r['continue']}"


def _h_import(r: dict) -> str:
    lines = [f"imported task {r['task_id']} from {r['source']} (now active)"]
    for k in ("created", "fast_forwarded", "up_to_date", "kept_local"):
        if r.get(k):
            lines.append(f"  {k.replace('_', ' ')}: {', '.join(r[k])}")
    if r.get("filtered"):
        more = f" (+{len(r['filtered']) - 10} more)" if len(r["filtered"]) > 10 else ""
        lines.append(f"  left out (sensitive): {', '.join(r['filtered'][:10])}{more}")
    rs = r.get("restore")
    if rs:
        c = rs["plan"]["counts"]
        if rs.get("applied"):
            lines.append(f"  workspace restored to {rs['target']}; undo with: {PROG()} restore {rs['recovered']} --apply")
        else:
            target = rs["target"]
            cmd = f"{PROG()} restore {target} --apply"
            lines.append(f"  workspace not changed: the restore to {target} would create {c['to_write']}, replace "
                         f"{c['to_replace']}, delete {c['to_delete']} files; run `{cmd}` (undoable)")
    lines += not_here(r.get("left_out"))
    return "\n".join(lines)


def _h_push(r: dict) -> str:
    lines = [f"pushed {len(r['pushed'])} refs to {r['remote']} ({r['up_to_date']} up to date"
             + (f"; {r['attempts']} attempts: other pushes won races first" if r.get("attempts", 1) > 1 else "") + ")"]
    if r["remote_ahead"]:
        lines.append(f"  remote is ahead ({PROG()} pull): {', '.join(r['remote_ahead'])}")
    if r.get("hint"):
        lines.append("  " + r["hint"])
    return "\n".join(lines)


def _h_pull(r: dict) -> str:
    lines = [f"pulled from {r['remote']}: {len(r['created'])} new, {len(r['fast_forwarded'])} updated refs; "
             f"notes {r['notes']}"]
    if r.get("hint"):
        lines.append("  " + r["hint"])
    return "\n".join(lines)


def _h_recover(r: dict) -> str:
    if not r["applied"]:
        rows = [f"  {t['task_id']}  {t['steps']:>4} step{'s' if t['steps'] != 1 else ''}  {t['updated']}  {t['name']}"
                for t in r["mirrored"]]
        return "\n".join([f"{r['source']} holds {len(rows)} mirrored task(s); `{PROG()} recover` brings them back:",
                          *rows])
    text = _h_pull(r).replace("pulled from", "recovered from", 1)
    if r.get("active_task"):
        text += f"\n  active task: {r['active_task']} ({PROG()} log shows its steps)"
    return text


def setup(sub) -> None:
    p = sub.add_parser("export", help="write a git bundle + HANDOFF.md of the task (any git can read it)")
    p.add_argument("to", help="a directory (created if new), or a file path ending in .bundle")
    p.add_argument("--since", default=None, help="an earlier bundle: write only what it lacks")
    p.add_argument("--task", dest="task_id", default=None,
                   help="task id, a unique prefix of it, or the task's name (default: the active task)")
    p.set_defaults(func=lambda a: _engine(a).export(a.to, since=a.since, task_id=_task(a)), human=_h_export)

    p = sub.add_parser("import", help="bring a task from a bundle (or a task-checkpoint-mcp handoff directory) into this workspace")
    p.add_argument("package", help="a .bundle file, a directory holding one, or a task-checkpoint-mcp handoff dir")
    p.add_argument("--rename", default=None, help="import under this task id (keeps an existing task)")
    p.add_argument("--merge", action="store_true", help="the task exists here: bring it up to date")
    p.add_argument("--apply", action="store_true", help="also restore the workspace to the imported head (undoable)")
    p.set_defaults(func=lambda a: _engine(a).import_(a.package, rename=a.rename, merge=a.merge, apply=a.apply),
                   human=_h_import)

    p = sub.add_parser("push", help="send refs/checkpoints/* and the notes to a git remote (default: origin)")
    p.add_argument("remote", nargs="?", default=None, help="remote name of the workspace's repo, URL or path")
    p.set_defaults(func=lambda a: _engine(a).push(a.remote), human=_h_push)

    p = sub.add_parser("adopt", help="join another line of the task (kept by push/pull) into its head: one step")
    p.add_argument("line", help="the line's name, as `log` shows it")
    p.add_argument("--keep", choices=["line", "head"], default="line",
                   help="whose files the joining step holds (default: the line's)")
    p.add_argument("--task", dest="task_id", default=None, help="task id, prefix or name (default: the active task)")
    p.set_defaults(func=lambda a: _engine(a).adopt(a.line, task_id=_task(a), keep=a.keep),
                   human=lambda r: f"joined line {r['line']} into task {r['task_id']} as step {r['step']} "
                                   f"(files from the {r['files_from']})\n  {r['hint']}")

    p = sub.add_parser("pull", help="fetch refs/checkpoints/* and the notes from a git remote (default: origin)")
    p.add_argument("remote", nargs="?", default=None, help="remote name of the workspace's repo, URL or path")
    p.set_defaults(func=lambda a: _engine(a).pull(a.remote), human=_h_pull)

    p = sub.add_parser("recover", help="bring the tasks back from the mirror in the workspace's git repository "
                                       "(after the store was deleted)")
    p.add_argument("--preview", action="store_true", help="only list the mirrored tasks; write nothing")
    p.set_defaults(func=lambda a: _engine(a).recover(apply=not a.preview), human=_h_recover)
