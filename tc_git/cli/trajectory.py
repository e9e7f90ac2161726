"""The trajectory layer on the command line: record, sessions, milestone, events, checkout,
markdown, branch, tdiff, replay.

Sessions recorded by the hooks outside any workspace store live in the user-level store
(trajectory/userstore.py): the engine lists this project's sessions from both stores, and its
read commands (events, checkout, markdown, tdiff, replay, resume-session) look there when the
workspace store does not have the point."""
from __future__ import annotations

import json
import sys
import time

from .common import engine_for as _engine
from .common import workspace_paths as _workspace_paths


def _when(ts) -> str:
    if not isinstance(ts, (int, float)):
        return ""
    return time.strftime("%Y-%m-%d %H:%M", time.gmtime(ts))


def _h_record(r: dict) -> str:
    s = (f"recorded {r['session']}: {r['events']} events, {r['new_commits']} new, "
         f"branches {', '.join(r['branches']) or '-'}")
    if r.get("malformed") or r.get("skipped"):
        s += f"; skipped {r['skipped']} lines, {r['malformed']} malformed"
    if r.get("redactions"):
        s += f"; {r['redactions']} secrets redacted"
    if r.get("unknown_types"):
        s += "; unknown line types skipped: " + ", ".join(f"{k} x{v}" for k, v in sorted(r["unknown_types"].items()))
    if r.get("milestone"):
        m = r["milestone"]
        s += f"\nmilestone {m['name']} -> event {m['event'][:10]}" + (
            f", code {m['code_commit'][:10]}" if m.get("code_commit") else "")
    return s


def _h_sessions(r: dict) -> str:
    lines = [f"{s['session']}{' (user store)' if s.get('store') == 'user' else ''}: "
             + ", ".join(f"{b} {t[:10]}" for b, t in s["branches"].items())
             for s in r["sessions"]] or ["no sessions recorded"]
    for m in r["milestones"]:
        lines.append(f"milestone {m['name']}: {m['session'] or '-'} @ {m['event'][:10]}"
                     + (f" (code {m['code_commit'][:10]})" if m.get("code_commit") else "")
                     + (f" — {m['message']}" if m.get("message") else ""))
    return "\n".join(lines)


def _h_events(r: dict) -> str:
    lines = [f"{e['id'][:10]} {_when(e.get('timestamp'))} {e['subject']}"
             + (f"  [{', '.join(e['milestones'])}]" if e.get("milestones") else "") for e in r["events"]]
    if r.get("next_offset") is not None:
        lines.append(f"(more: --offset {r['next_offset']})")
    return "\n".join(lines)


def _h_messages(r: dict) -> str:
    lines = []
    for m in r["messages"]:
        body = m.get("text") or m.get("tool_name") or ""
        lines.append(f"[{m.get('role')}] {' '.join(str(body).split())[:200]}")
    if r.get("restore"):
        rs = r["restore"]
        lines.append(("restored code to " if rs["applied"] else "code restore preview to ") + rs["target"])
    return "\n".join(lines)


def _h_tdiff(r: dict) -> str:
    lines = [f"common: {(r['base'] or 'none')[:10]}",
             f"only in {r['a'][:10]}: {r['only_a_total']} events", f"only in {r['b'][:10]}: {r['only_b_total']} events"]
    for side in ("only_a", "only_b"):
        for e in r[side][:20]:
            text = " ".join(str(e.get("text") or e.get("tool_name") or "").split())[:100]
            lines.append(f"  {'<' if side == 'only_a' else '>'} {e.get('kind')}: {text}")
    if r.get("code"):
        lines.append(r["code"]["stat"].rstrip())
    return "\n".join(lines)


def _h_replay(r: dict) -> str:
    if r["mode"] == "verify":
        return ("edits reproduce the recorded snapshot" if r["ok"]
                else f"first difference: {r['first_difference']} ({r['reason']})") + \
            f" — {r['applied']} edits applied, {r['skipped']} skipped"
    if r["mode"] == "code":
        return "\n".join(f"{s['event'][:10]} -> {(s['code_commit'] or '-')[:10]}" for s in r["states"])
    return json.dumps(r["messages"], indent=1, ensure_ascii=False)


def _h_resume(r: dict) -> str:
    s = (f"wrote {r['path']} ({r['events']} events up to {r['event'][:10]})\n"
         f"resume it in {r['cwd']} with: {r['command']}")
    if r.get("restore"):
        rs = r["restore"]
        s += ("\nrestored code to " if rs.get("applied") else "\ncode restore preview (add --apply) to ") + str(rs.get("target"))
    return s


def _resume_session(a) -> dict:
    r = _engine(a).resume_session(a.point, a.client, a.code, a.apply, a.session_id, a.drop_thinking,
                                  a.keep_thinking)
    if r.get("notice"):  # one line on stderr, whatever the output mode (--json has it in the result too)
        print(f"tc-git resume-session: {r['notice']}", file=sys.stderr)
    return r


def setup(sub) -> None:
    p = sub.add_parser("record", help="record an agent transcript (Claude Code / Codex / JSON steps) as git history")
    p.add_argument("transcript", help="transcript file (.jsonl) or a JSON list of steps")
    p.add_argument("--milestone", default=None, help="name the recorded tip (links the code of now)")
    p.add_argument("--agent", default=None)
    p.add_argument("--session", default=None)
    p.set_defaults(func=lambda a: _engine(a).record(transcript=a.transcript, milestone=a.milestone,
                                                    agent=a.agent, session=a.session), human=_h_record)

    p = sub.add_parser("sessions", help="recorded sessions, their branches, and milestones")
    p.set_defaults(func=lambda a: _engine(a).sessions(), human=_h_sessions)

    p = sub.add_parser("milestone", help="name a moment of the conversation (and link the code of now)")
    p.add_argument("name")
    p.add_argument("--at", required=True, help="session, session/branch, milestone or event id")
    p.add_argument("-m", "--message", default="")
    p.add_argument("--force", action="store_true", help="move an existing milestone")
    p.set_defaults(func=lambda a: _engine(a).milestone(a.name, a.at, a.message, a.force),
                   human=lambda r: f"milestone {r['name']} -> event {r['event'][:10]}"
                   + (f", code {r['code_commit'][:10]}" if r.get("code_commit") else ""))

    p = sub.add_parser("events", help="the conversation of a session/branch/milestone, one line per event")
    p.add_argument("point")
    p.add_argument("-n", "--limit", type=int, default=50)
    p.add_argument("--offset", type=int, default=0)
    p.add_argument("--oldest-first", action="store_true")
    p.set_defaults(func=lambda a: _engine(a).trajectory_log(a.point, a.limit, a.offset, a.oldest_first),
                   human=_h_events)

    p = sub.add_parser("checkout", help="the conversation up to a milestone or event (--code: its code too)")
    p.add_argument("point")
    p.add_argument("--code", action="store_true", help="also restore the linked code (preview unless --apply)")
    p.add_argument("--apply", action="store_true")
    p.add_argument("--path", dest="paths", action="append", default=None, metavar="PATH",
                   help="with --code: restore only this file or directory (repeatable)")
    p.set_defaults(func=lambda a: _engine(a).checkout(a.point, restore_code=a.code, apply=a.apply,
                                                     paths=_workspace_paths(a, a.paths)),
                   human=_h_messages)

    p = sub.add_parser("markdown", help="export a conversation as readable Markdown")
    p.add_argument("point")
    p.add_argument("-o", "--output", default=None)
    p.set_defaults(func=lambda a: _engine(a).export_markdown(a.point, a.output),
                   human=lambda r: r.get("markdown") or f"wrote {r['path']} ({r['bytes']} bytes)")

    p = sub.add_parser("branch", help="a named fork of a conversation at an event")
    p.add_argument("name")
    p.add_argument("--at", required=True, help="event id, milestone or session/branch")
    p.add_argument("--session", default=None)
    p.set_defaults(func=lambda a: _engine(a).branch(a.name, a.at, a.session),
                   human=lambda r: f"{r['ref']} at {r['at'][:10]}")

    p = sub.add_parser("tdiff", help="what two conversation points said and did since they diverged, and the code diff")
    p.add_argument("a")
    p.add_argument("b")
    p.set_defaults(func=lambda a: _engine(a).trajectory_diff(a.a, a.b), human=_h_tdiff)

    p = sub.add_parser("replay", help="messages up to a point, code states, or verify the recorded edits")
    p.add_argument("point")
    p.add_argument("--mode", choices=["messages", "code", "verify"], default="messages")
    p.set_defaults(func=lambda a: _engine(a).replay(a.point, a.mode), human=_h_replay)

    p = sub.add_parser("resume-session", help="write the conversation up to a milestone/event as a session "
                                              "file Claude Code or Codex resumes (--code: its code too)")
    p.add_argument("point", help="milestone, event id or session[/branch]")
    p.add_argument("--client", required=True, choices=["claude", "codex"])
    p.add_argument("--code", action="store_true", help="also restore the linked code (preview unless --apply)")
    p.add_argument("--apply", action="store_true")
    p.add_argument("--session-id", default=None, help="id of the new session (default: a new UUID)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--keep-thinking", action="store_true",
                   help="keep thinking the client's API cannot verify (another agent's; by default left out, a note kept)")
    g.add_argument("--drop-thinking", action="store_true", help="leave out all thinking, even signed (no notes)")
    p.set_defaults(func=_resume_session, human=_h_resume)
