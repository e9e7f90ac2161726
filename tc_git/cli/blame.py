"""`tc-git blame <file>` and `tc-git why <file>:<line>`: which step or drift, which tool call
and which prompt wrote each line (tc_git/timeline/provenance.py)."""
from __future__ import annotations

from ..base.errors import BadInput
from .common import engine_for, prog, task_arg, workspace_paths


def _path(args, path: str) -> str:
    return workspace_paths(args, [path])[0]


def _blame(args) -> dict:
    e = engine_for(args)
    return e.blame(_path(args, args.file), at=args.at, task_id=task_arg(args), start=args.start,
                   limit=args.limit, text=not args.json)


def _why(args) -> dict:
    file, sep, line = args.target.rpartition(":")
    if not sep or not line.isdigit():
        raise BadInput(f"name a line as FILE:LINE (e.g. src/app.py:12), not {args.target!r}")
    e = engine_for(args)
    return e.why(_path(args, file), int(line), at=args.at, task_id=task_arg(args))


def _label(h: dict, origins: dict) -> str:
    o = origins.get(h["id"]) or {}
    call = o.get("tool_call") or {}
    if h["by"] == "agent" and call:
        return f"{h['id']} {call.get('name', '?')} {str(call.get('id', ''))[:14]}"
    return f"{h['id']} unattributed"


def _h_blame(r: dict) -> str:
    out = []
    width = max((len(_label(h, r["origins"])) for h in r["hunks"]), default=10)
    digits = len(str(r["lines_total"]))
    for h in r["hunks"]:
        label = _label(h, r["origins"])
        for i, text in enumerate(h.get("text") or []):
            out.append(f"{label:<{width}} {h['start'] + i:>{digits}}| {text}")
    s = r["shares"]
    out.append("")
    out.append(f"{r['path']} at {r['at']}: {r['lines_total']} lines, {s['agent']} by agent tool calls, "
               f"{s['other']} unattributed")
    for ident, o in r["origins"].items():
        if "tool_call" in o:
            c = o["tool_call"]
            who = f"{c.get('name')} {c.get('id')} ({c.get('agent', '?')} session {c.get('session', '?')})"
            line = f"  {ident}: {who}"
            if o.get("prompt"):
                line += f"\n      prompt: {o['prompt']}"
            elif o.get("conversation"):
                line += f"\n      conversation {o['conversation']}"
        else:
            line = f"  {ident}: unattributed: {o.get('unattributed')}"
        out.append(line)
    if r.get("next_start"):
        out.append(f"(more: {prog()} blame {r['path']} --start {r['next_start']})")
    out.append(f"why a line is there: {prog()} why {r['path']}:<line>")
    return "\n".join(out)


def _h_why(r: dict) -> str:
    out = [f"{r['path']}:{r['line']} ({r['at']}): {r['text']}",
           f"  last changed in {r['id']} ({r['kind']}{', commit ' + r['commit'][:12] if r.get('commit') else ''})"]
    if "unattributed" in r:
        out.append(f"  unattributed: {r['unattributed']}")
    c = r.get("tool_call")
    if c:
        out.append(f"  tool call: {c.get('name')} {c.get('id')} ({c.get('agent', '?')} session {c.get('session', '?')})")
    if r.get("prompt"):
        out.append(f"  prompt: {r['prompt']}")
    if r.get("said"):
        out.append(f"  assistant: {r['said']}")
    if r.get("call"):
        out.append(f"  call: {r['call']}")
    if r.get("conversation"):
        out.append(f"  conversation {r['conversation']}")
    dig = [f"{prog()} show {r['id']}"] if r["kind"] not in ("workspace", "") else []
    if r.get("event"):
        dig.append(f"{prog()} events {r['event'][:12]}")
    if dig:
        out.append("  more: " + "; ".join(dig))
    return "\n".join(out)


def setup(sub) -> None:
    p = sub.add_parser("blame", help="which step or drift, tool call and prompt wrote each line of a file")
    p.add_argument("file", help="a file of the workspace")
    p.add_argument("--at", default=None, metavar="ID", help="at a point (s0004, d0002, ...) instead of the "
                   "workspace as it is now")
    p.add_argument("--task", dest="task_id", default=None, metavar="ID", help="another task than the active one")
    p.add_argument("--start", type=int, default=1, metavar="N", help="from line N")
    p.add_argument("--limit", type=int, default=100000, metavar="N", help="at most N lines")
    p.set_defaults(func=_blame, human=_h_blame)
    p = sub.add_parser("why", help="why a line is there: its prompt, the assistant's words, the tool call")
    p.add_argument("target", metavar="FILE:LINE", help="a file of the workspace and a line number")
    p.add_argument("--at", default=None, metavar="ID", help="at a point (s0004, d0002, ...)")
    p.add_argument("--task", dest="task_id", default=None, metavar="ID", help="another task than the active one")
    p.set_defaults(func=_why, human=_h_why)
