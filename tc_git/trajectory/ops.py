"""Read-side operations on recorded trajectories: checkout, replay, export, branch, diff.

Event commits have exactly one parent (or none), so "the conversation up to X" is the
first-parent chain from X to its root, and two points diverge at their merge base. Code is
never touched here: each operation returns the linked code-timeline commit and the engine
decides whether to restore or diff it.
"""
from __future__ import annotations

import datetime as _dt
import re
from dataclasses import dataclass, field

import pygit2

from ..base.errors import BadInput, NotFound
from .edits import VerifyResult, verify_edits
from .milestones import check_name, event_note, linked_code, milestone_map, resolve
from .model import short_text
from .recorder import AUTO_BRANCH, SESSIONS_PREFIX, load_event

__all__ = ["Checkout", "TrajectoryDiff", "checkout", "replay", "code_states", "export_markdown",
           "branch", "diff", "code_diff", "verify_point", "verify_edits", "VerifyResult", "ROLE"]

ROLE = {"user": "user", "assistant": "assistant", "thinking": "assistant", "tool_call": "assistant",
        "tool_result": "tool",
        "system": "system", "summary": "system"}
FOLD_LIMIT = 20_000  # characters of a tool output shown in the Markdown export


@dataclass
class Checkout:
    event: str
    messages: list[dict]
    code_commit: str | None = None  # for the engine's (previewed, undoable) restore
    milestones: list[str] = field(default_factory=list)


@dataclass
class TrajectoryDiff:
    a: str
    b: str
    base: str | None  # last common event; None when the two never met
    only_a: list[dict]  # events after the base on side a, oldest first
    only_b: list[dict]
    code_a: str | None = None
    code_b: str | None = None
    code_base: str | None = None


def _chain(repo: pygit2.Repository, tip: pygit2.Commit, stop: pygit2.Oid | None = None) -> list[pygit2.Commit]:
    out = []
    c = tip
    while c.id != stop:
        out.append(c)
        if not c.parent_ids:
            break
        c = repo[c.parent_ids[0]].peel(pygit2.Commit)
    out.reverse()
    return out


def replay(repo: pygit2.Repository, point: str, *, image_data: bool = False) -> list[dict]:
    """The conversation from the root to `point`, as message dicts to seed a new session.

    Each dict is the stored event record plus `role` (user|assistant|tool|system); with
    `image_data`, images carry their bytes (base64) as well as their blob path.
    """
    out = []
    for c in _chain(repo, resolve(repo, point)):
        rec = load_event(repo, c, image_data=image_data)
        rec["role"] = ROLE.get(rec.get("kind", ""), "system")
        out.append(rec)
    return out


def checkout(repo: pygit2.Repository, point: str) -> Checkout:
    """Messages up to a milestone or event, and the code commit linked to that moment."""
    c = resolve(repo, point)
    return Checkout(str(c.id), replay(repo, str(c.id)), linked_code(repo, c.id),
                    milestone_map(repo).get(str(c.id), []))


def code_states(repo: pygit2.Repository, point: str) -> list[tuple[str, str]]:
    """(event, code commit) for every event on the way to `point` that links a code commit."""
    out = []
    for c in _chain(repo, resolve(repo, point)):
        code = event_note(repo, c.id).get("code_commit")
        if code:
            out.append((str(c.id), code))
    return out


def branch(repo: pygit2.Repository, name: str, at_event: str, *, session: str | None = None) -> str:
    """Create `refs/checkpoints/sessions/<session>/<name>` at an event; returns the ref name.

    The session defaults to the one whose branches contain the event.

    Raises:
        BadInput: invalid or reserved name, or no session contains the event.
    """
    check_name(name, "branch")
    if AUTO_BRANCH.match(name):
        raise BadInput(f"branch name {name!r} is reserved for recorded tips (main, fork-*, agent-*); pick another")
    ev = resolve(repo, at_event)
    session = session or _session_of(repo, ev.id)
    refname = f"{SESSIONS_PREFIX}{session}/{name}"
    if refname in repo.references:
        raise BadInput(f"branch {name!r} already exists in session {session!r}; pick another name")
    repo.references.create(refname, ev.id)
    return refname


def _session_of(repo: pygit2.Repository, oid: pygit2.Oid) -> str:
    for r in sorted(repo.references):
        if r.startswith(SESSIONS_PREFIX):
            tip = repo.references[r].target
            if tip == oid or repo.descendant_of(tip, oid):
                return r[len(SESSIONS_PREFIX):].split("/", 1)[0]
    raise BadInput(f"event {str(oid)[:12]} is on no recorded session; pass session=")


def diff(repo: pygit2.Repository, a: str, b: str) -> TrajectoryDiff:
    """Where two points diverged and what each side said and did since."""
    ca, cb = resolve(repo, a), resolve(repo, b)
    base = repo.merge_base(ca.id, cb.id)
    side = [[load_event(repo, c) for c in _chain(repo, tip, base)] for tip in (ca, cb)]
    return TrajectoryDiff(str(ca.id), str(cb.id), str(base) if base else None, side[0], side[1],
                          linked_code(repo, ca.id), linked_code(repo, cb.id),
                          linked_code(repo, base) if base else None)



def code_diff(repo: pygit2.Repository, d: TrajectoryDiff, cap: int = 200) -> dict | None:
    """The code between the snapshots linked to the two sides of `d` (None when not both are
    linked, or both link the same commit): files and a `git diff --stat`-like summary."""
    if not (d.code_a and d.code_b and d.code_a != d.code_b):
        return None
    diff_ = repo[d.code_a].peel(pygit2.Tree).diff_to_tree(repo[d.code_b].peel(pygit2.Tree))
    return {"from": d.code_a, "to": d.code_b,
            "files": [{"path": x.new_file.path or x.old_file.path, "status": x.status_char()}
                      for x in diff_.deltas][:cap],
            "stat": diff_.stats.format(pygit2.enums.DiffStatsFormat.FULL, 80)}


def verify_point(repo: pygit2.Repository, point: str, root: str | None = None) -> tuple[VerifyResult, str, str]:
    """Re-apply the file edits recorded between the first and the last event on the way to
    `point` that link code, to the first one's code; (result, base commit, recorded commit).

    Raises:
        NotFound: fewer than two linked events.
    """
    linked = code_states(repo, point)
    if len(linked) < 2:
        raise NotFound(f"{point} needs at least two events linked to code commits to verify edits")
    base, last = linked[0][1], linked[-1][1]
    events = replay(repo, point)
    first = next(i for i, r in enumerate(events) if r.get("id") == linked[0][0])
    upto = next(i for i, r in enumerate(events) if r.get("id") == linked[-1][0])
    v = verify_edits(repo, events[first + 1:upto + 1], repo[base].peel(pygit2.Tree), repo[last].peel(pygit2.Tree),
                     root=root)
    return v, base, last

# -- Markdown ----------------------------------------------------------------------------------

def _fence(text: str, lang: str = "") -> str:
    ticks = "`" * max(3, max((len(m) for m in re.findall(r"`+", text)), default=0) + 1)
    return f"{ticks}{lang}\n{text}\n{ticks}"


def _when(ts: float) -> str:
    return _dt.datetime.fromtimestamp(ts, _dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _input_summary(inp: object) -> str:
    if isinstance(inp, dict):
        for k in ("command", "cmd", "file_path", "path", "pattern", "query", "url", "description"):
            if isinstance(inp.get(k), str):
                return short_text(inp[k], 120)
    return short_text(inp, 120)


def _images_md(rec: dict) -> str:
    out = []
    for img in rec.get("images") or []:
        if isinstance(img, dict):
            where = f"`{img['path']}` in the event's tree" if img.get("path") else img.get("url") or img.get("omitted")
            out.append(f"_[image {img.get('media_type', '?')}, {img.get('bytes', '?')} bytes: {where}]_")
    return ("\n\n" + "\n".join(out)) if out else ""


def _render(rec: dict) -> str:
    kind = rec.get("kind")
    text = rec.get("text") or ""
    if kind == "user":
        return f"### User · {_when(rec['timestamp'])}\n\n{text}{_images_md(rec)}"
    if kind == "assistant":
        return f"### Assistant\n\n{text}{_images_md(rec)}"
    if kind == "thinking":
        if not text:
            return "_Thinking (redacted)_"
        body = text if len(text) <= FOLD_LIMIT else text[:FOLD_LIMIT] + "\n…"
        return f"<details><summary>Thinking: {_html(short_text(text, 80))}</summary>\n\n{body}\n\n</details>"
    if kind in ("system", "summary"):
        label = "Summary (compaction)" if kind == "summary" else "System"
        if len(text) <= 100 and "\n" not in text:
            return f"_{label}: {text}_"
        body = text if len(text) <= FOLD_LIMIT else text[:FOLD_LIMIT] + "\n…"
        return f"<details><summary>{label}: {_html(short_text(text, 80))}</summary>\n\n{body}\n\n</details>"
    if kind == "tool_call":
        summary = _input_summary(rec.get("tool_input")).replace("`", "'")
        return f"**Tool call `{rec.get('tool_name')}`** — `{summary}`"
    out = rec.get("tool_output")
    out = out if isinstance(out, str) else short_text(out, 10 ** 9)
    extra = f"\n… ({len(out) - FOLD_LIMIT} more characters)" if len(out) > FOLD_LIMIT else ""
    status = "error" if rec.get("is_error") else f"{out.count(chr(10)) + 1 if out else 0} lines"
    return (f"<details><summary>Result of {_html(str(rec.get('tool_name') or 'tool'))} ({status})</summary>\n\n"
            f"{_fence(out[:FOLD_LIMIT])}{extra}{_images_md(rec)}\n\n</details>")


def _html(s: str) -> str:
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def export_markdown(repo: pygit2.Repository, point: str, *, title: str | None = None) -> str:
    """The conversation up to `point` as readable Markdown: prompts, answers, tool calls with
    short inputs, folded outputs, milestone markers."""
    c = resolve(repo, point)
    names = milestone_map(repo)
    chain = _chain(repo, c)
    if not chain:
        raise NotFound(f"{point!r} has no events")
    head = [f"# {title or 'Trajectory ' + point}", "",
            f"_{len(chain)} events, {_when(chain[0].commit_time)} → {_when(chain[-1].commit_time)}; "
            f"tip `{str(c.id)[:12]}`_", ""]
    parts = ["\n".join(head)]
    for commit in chain:
        parts.append(_render(load_event(repo, commit)))
        for m in names.get(str(commit.id), []):
            code = event_note(repo, commit.id).get("milestones", {}).get(m, {}).get("code_commit")
            parts.append(f"> **Milestone `{m}`** at event `{str(commit.id)[:12]}`"
                         + (f", code `{code[:12]}`" if code else ""))
    return "\n\n".join(parts) + "\n"
