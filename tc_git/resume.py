"""The handoff text: what a new session needs to pick the work up, in under 2 KB."""
from __future__ import annotations

from typing import Any

from .jsonsafe import one_line, path_out, text_out

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
