"""`tc-git view`: write the self-contained HTML view (see tc_git/timeline/view.py)."""
from __future__ import annotations

import os
from pathlib import Path

from .common import engine_for


def _run(args) -> dict:
    e = engine_for(args)
    tasks = [e.resolve_task(t) for t in args.view_tasks]
    r = e.view(task_ids=tasks, session_ids=args.view_sessions, out=args.output)
    # The default is in a store (this one or the user-level one), which no snapshot ever reads; a
    # page written into the workspace would be recorded by the next save and travel in every bundle.
    path, root, store = Path(r["path"]), e.root, e.store_path.resolve()
    if args.output is not None and _inside(path, root) and not _inside(path, store):
        r["warning"] = (f"{path} is inside the workspace: the next save records it. Write it elsewhere "
                        f"(-o {Path(os.path.expanduser('~')) / path.name}), or leave -o out")
    return _opened(r, args)


def _opened(r: dict, args) -> dict:
    if args.open:
        import webbrowser

        r["opened"] = bool(webbrowser.open(r["url"]))
    return r


def _inside(path: Path, d: Path) -> bool:
    try:
        path.resolve().relative_to(d.resolve())
        return True
    except ValueError:
        return False


def _human(r: dict) -> str:
    what = []
    if r["tasks"]:
        what.append(f"{len(r['tasks'])} task{'s' if len(r['tasks']) != 1 else ''} ({r['entries']} entries)")
    if r["sessions"]:
        what.append(f"{len(r['sessions'])} session{'s' if len(r['sessions']) != 1 else ''} ({r['events']} events)")
    s = f"wrote {r['path']} ({r['bytes']:,} bytes; {', '.join(what) or 'nothing recorded yet'})"
    if any(r["truncated"].values()):
        s += "\n  some diffs or outputs were shortened to keep the page small; the store has them in full"
    if r.get("warning"):
        s += f"\n  note: {r['warning']}"
    if not r.get("opened", True):
        s += f"\n  could not open a browser; open {r['url']}"
    return s


def setup(sub) -> None:
    p = sub.add_parser("view", help="write a self-contained HTML view of a task and its conversations")
    p.add_argument("--task", dest="view_tasks", action="append", default=[], metavar="ID",
                   help="task id, unique prefix or name (repeatable; default: the active task, or every task)")
    p.add_argument("--session", dest="view_sessions", action="append", default=[], metavar="ID",
                   help="session <agent>-<id> or its id (repeatable; default: every session, or the "
                        "sessions linked to --task)")
    p.add_argument("-o", "--output", default=None, metavar="FILE",
                   help="HTML file to write (default: <store>/view/<task or session>.html, which no save "
                        "records)")
    p.add_argument("--open", action="store_true", help="open the page in the default browser")
    p.set_defaults(func=_run, human=_human)
