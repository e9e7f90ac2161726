"""Where a task stands (`resume`) and the handoff text: what a new session needs to pick the
work up, in under 2 KB. The text renderer below needs the standard library only; the state is
read from the task's timeline (its head, last step, drifts since) and the workspace."""
from __future__ import annotations

from typing import Any

import pygit2

from ..base.jsonsafe import one_line, path_out, text_out
from ..base.refs import MILESTONES_PREFIX
from ..base.results import DriftStamp, ResumeResult
from ..storage.trees import tree_deltas
from ..workspace import snapshot as snapshot_mod
from . import handoff_cache
from .capture import MAX_LIST, Workspace, last_step
from .chain import Entry, Timeline, iso, left_out, status
from .restore import RestoreJournal

LABELS = {
    "en": {"task": "Task", "goal": "Goal", "constraints": "Constraints", "step": "Current step",
           "conclusion": "Last conclusion", "next": "Next", "questions": "Open questions",
           "unsaved": "Unsaved changes", "none": "none", "unknown": "not recorded",
           "milestone": "Latest milestone", "status": "Status", "more": "more",
           "warn": "Warning", "left": "Not in the snapshot", "since": "Recorded since step {n}", "drifts": ("drift", "drifts"),
           "vs": ("{files} file differs from step {n} now", "{files} files differ from step {n} now"), "last": "last"},
    "zh": {"task": "任务", "goal": "目标", "constraints": "约束", "step": "当前步骤",
           "conclusion": "上一步结论", "next": "下一步", "questions": "待解决问题",
           "unsaved": "未落档", "none": "无", "unknown": "未记录", "milestone": "最近里程碑",
           "status": "状态", "more": "更多", "warn": "警告", "left": "未存入快照", "since": "步骤 {n} 之后记录",
           "drifts": ("个漂移", "个漂移"), "vs": ("{files} 个文件与步骤 {n} 不同", "{files} 个文件与步骤 {n} 不同"), "last": "最近"},
}
MAX_BYTES = 2000


def _clip(s: str, n: int) -> str:
    # a non-UTF-8 file name arrives surrogate-escaped: shown by the rule of every JSON result (jsonsafe)
    return one_line(text_out(s or ""), n)


def handoff_text(info: dict, lang: str = "en") -> str:
    """Render the resume info as a short text; every field is clipped so the whole fits 2 KB."""
    L: dict[str, Any] = LABELS.get(lang, LABELS["en"])
    last = info.get("last") or {}
    step = info.get("head") or 0
    step_line = f"{step} — {_clip(last.get('title', ''), 120)}" if step else L["none"]
    lines = [
        f"{L['task']}: {_clip(info.get('name', ''), 120)} ({info.get('task_id')}, {info.get('status')})",
        f"{L['goal']}: {_clip(info.get('goal', ''), 300) or L['unknown']}",
    ]
    if info.get("constraints"):
        lines.append(f"{L['constraints']}: {_clip(info['constraints'], 250)}")
    lines.append(f"{L['step']}: {step_line}")
    if last.get("conclusion"):
        lines.append(f"{L['conclusion']}: {_clip(last['conclusion'], 300)}")
    lines.append(f"{L['next']}: {_clip(info.get('next', ''), 300) or L['unknown']}")
    qs = info.get("open_questions") or []
    if qs:
        lines.append(f"{L['questions']}: " + "; ".join(_clip(q, 100) for q in qs[:3])
                     + (f" (+{len(qs) - 3} {L['more']})" if len(qs) > 3 else ""))
    paths, total = info.get("drift_paths") or [], info.get("drift_total", 0)
    shown = ", ".join(_clip(path_out(p), 80) for p in paths[:8]) or L["none"]
    if total > min(len(paths), 8):
        shown += f" (+{total - min(len(paths), 8)} {L['more']})"
    drifts, nd = info.get("drifts_since") or [], info.get("drifts_since_total", 0)
    if nd:
        ids = ", ".join(d["id"] for d in drifts[-3:])
        lines.append(f"{L['since'].format(n=step)}: {nd} {L['drifts'][nd != 1]} ({'…, ' if nd > 3 else ''}{ids}; "
                     f"{L['last']} {drifts[-1]['timestamp']})")
    if total and step:
        shown = f"{L['vs'][total != 1].format(n=step, files=total)}: {shown}"
    lines.append(f"{L['unsaved']}: {shown}")
    left = info.get("left_out") or []
    if left:  # never silent: the next session must know which files it has to supply itself
        shown = ", ".join(f"{_clip(path_out(x.get('path', '')), 60)} ({x.get('why')})" for x in left[:5])
        if len(left) > 5:
            shown += f" (+{len(left) - 5} {L['more']})"
        lines.append(f"{L['left']}: {shown}")
    if info.get("milestone"):
        lines.append(f"{L['milestone']}: {_clip(info['milestone'], 120)}")
    for w in (info.get("warnings") or [])[:2]:
        lines.append(f"{L['warn']}: {_clip(w, 200)}")
    text = "\n".join(lines)
    while len(text.encode()) > MAX_BYTES:  # only reachable with very long multibyte fields
        lines = [_clip(x, max(40, len(x) // 2)) for x in lines]
        text = "\n".join(lines)
    return text


def received_left_out(tl: Timeline, head: Entry) -> list:
    """What the workspace's snapshot does not hold, and why: the head's own list and, when the
    head is a restore (an import's included), the target's (what the sender left out: after an
    import the head describes this workspace, where those files are simply absent)."""
    out = left_out(head.record)
    target = (head.record.get("target") or {}).get("commit") if head.kind == "restore" else None
    if target:
        seen = {x["path"] for x in out}
        try:
            out += [x for x in left_out(tl.record(target)) if x["path"] not in seen]
        except (KeyError, ValueError, pygit2.GitError):
            pass
    return out[:200]


# ---------------------------------------------------------------------------- the state
def resume_info(ws: Workspace, tl: Timeline, lang: str = "en",
                unsaved: tuple[list[str], int] | None = None) -> ResumeResult:
    """The task's state for a new session, `handoff` (the text) included. `unsaved`: what differs
    from the head, when the caller knows it (right after a snapshot); else the workspace is read."""
    repo = ws.repo
    head = tl.head()
    task = head.record.get("task", {})
    last = last_step(tl)
    lr = last.record if last else {}
    cur: Entry | None = None
    if last and head.step != last.step:  # after a restore the current step is an older one
        cur = tl.find(str(head.step)) if head.step else None
        lr = cur.record if cur else {}
    left = {x["path"] for x in (head.record.get("files") or {}).get("left", [])}
    # Where the work stands: the commit that set the current step (a step, or a restore to
    # it), the drifts recorded since, and what differs from that step NOW (a capture moves
    # the head, not the step: comparing with the head alone would report `none`).
    since: list[Entry] = []
    base: Entry | None = None
    for e in tl.walk():
        if e.kind in ("step", "restore", "init", "import"):
            base = e
            break
        if e.kind == "drift":
            since.append(e)
    if base is not None and base.kind == "restore" and head.step:
        # (the walk to that step again, unless it was just found above)
        base = cur if cur is not None and cur.step == head.step else tl.find(str(head.step))
    if unsaved is None:
        paths, total = _unsaved(repo, base or head, left)
    else:  # right after a snapshot (the hook's cache): what differs is what the drifts since changed
        paths, total = unsaved
        if base is not None and base.oid != head.oid:
            d = tree_deltas(repo, base.oid, head.oid)
            every = sorted({x.path for x in d} - left | set(paths))
            paths, total = every[:MAX_LIST], len(every)
    warnings = []
    interrupted = RestoreJournal(ws.store).interrupted(tl.task_id)
    if interrupted:
        warnings.append(interrupted)
    active = ws.store.active_task()
    drifts: list[DriftStamp] = [{"id": e.drift, "timestamp": iso(e.time)} for e in reversed(since)]
    info: ResumeResult = {
        "task_id": tl.task_id, "name": task.get("name", ""), "status": status(tl, head, active),
        "goal": task.get("goal", ""), "constraints": task.get("constraints", ""), "head": head.step,
        "last": {"title": lr.get("title", ""), "conclusion": lr.get("conclusion", ""),
                 "description": lr.get("description", ""), "next": lr.get("next", "")},
        "open_questions": lr.get("open_questions", []), "drift_paths": paths, "drift_total": total,
        "next": lr.get("next", ""), "store": str(ws.store.path),
        "active_task": active, "skipped": sorted(left)[:MAX_LIST],
        "left_out": received_left_out(tl, head),
        "health": {"ok": not warnings, "errors": warnings},
        "milestone": latest_milestone(repo, tl.task_id),
        "drifts_since": drifts[-MAX_LIST:],
        "drifts_since_total": len(since),
        "commit": str(head.oid), "handoff": "", "lines": [name for name, _tip in tl.lines()],
    }
    info["handoff"] = handoff_text({**info, "warnings": warnings}, lang if lang in ("en", "zh") else "en")
    if info["lines"]:  # the task was continued on another machine too (push/pull kept both)
        info["handoff"] = (info["handoff"].rstrip("\n") + f"\n\nOther lines of this task, not in its head yet: "
                           f"{', '.join(info['lines'])}. Join one with `tc-git adopt <line>`.\n")
    return info


def cache_handoff(ws: Workspace, tl: Timeline, unstable: list[str]) -> None:
    """The handoff as of this record, for the SessionStart hook (tc_git/timeline/handoff_cache.py).
    Right after a snapshot nothing is unsaved but what did not hold still (`unstable`, sorted)."""
    try:
        info = resume_info(ws, tl, unsaved=(unstable[:MAX_LIST], len(unstable)))
        handoff_cache.write(ws.store.path, tl.task_id, info["commit"], info["handoff"], info["status"])
    except Exception:  # noqa: BLE001 - a cache: a save never fails over it (the hook then resumes the slow way)
        pass


def _unsaved(repo: pygit2.Repository, head: Entry, left: set[str]) -> tuple[list[str], int]:
    try:
        tree = repo[head.oid].peel(pygit2.Tree)
        return snapshot_mod.unsaved_paths(repo, tree, left, limit=MAX_LIST)
    except (pygit2.GitError, OSError):
        return [], 0


def latest_milestone(repo: pygit2.Repository, task_id: str) -> str | None:
    """The newest milestone whose linked code commit is in this task's timeline."""
    if not any(r.startswith(MILESTONES_PREFIX) for r in repo.references):
        return None  # keeps resume free of the trajectory import when there are none
    from .. import trajectory as T

    chain = {str(e.oid) for e in Timeline(repo, task_id).walk()}
    for m in reversed(T.list_milestones(repo)):
        if m.code_commit in chain:
            return f"{m.name}" + (f" ({m.message})" if m.message else "")
    return None
