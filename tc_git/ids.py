"""One id grammar for the front ends.

Points of a task's timeline (Timeline.find): `2` or `s0002` (step), `d0001` (drift), `r0001`
(restore), or a commit id prefix. A task: its full id (`t1796...`), a unique prefix of it, or
its name (unique among the store's tasks).
"""
from __future__ import annotations

from .errors import BadInput, NotFound


def resolve_task(engine, text: str) -> str:
    text = str(text).strip()
    if not text:
        raise BadInput("the task is empty: give its id, a unique prefix of it, or its name")
    tasks = engine.tasks()  # [] without a store
    ids = [t["task_id"] for t in tasks]
    if text in ids:
        return text
    prefixed = [i for i in ids if i.startswith(text)]
    if len(prefixed) == 1:
        return prefixed[0]
    named = [t["task_id"] for t in tasks if t["name"] == text]
    if len(named) == 1:
        return named[0]
    if not named:  # a name is matched without regard to case when that is unambiguous
        named = [t["task_id"] for t in tasks if t["name"].casefold() == text.casefold()]
        if len(named) == 1:
            return named[0]
    candidates = prefixed or named
    if candidates:
        listed = ", ".join(f"{t['task_id']} ({t['name']})" for t in tasks if t["task_id"] in candidates[:5])
        raise BadInput(f"{text!r} matches {len(candidates)} tasks: {listed}; give more of the id")
    raise NotFound(f"no task {text!r} in this store: list them with `log --all`")
