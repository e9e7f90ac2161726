"""The resume handoff of each task, kept as a small file in the store at every record, so the
SessionStart hook can print it without loading pygit2 or scanning the workspace (issue 14:
~340 ms -> a file read). Standard library only.

`<store>/tc/handoff/<task>.json` = {"head": <commit the text describes>, "text", "status",
"time"}. The hook uses it only while the task's head ref still points at that commit (read from
the loose ref file or packed-refs); anything else (no file, another head, unreadable) falls back
to the engine's full resume. No fsync: it is a cache that is checked before use.
"""
from __future__ import annotations

import json
import os
import time

from ..base.refs import task_ref

DIRNAME = "handoff"


def _path(store, task: str) -> str:
    return os.path.join(os.fspath(store), "tc", DIRNAME, f"{task}.json")


def write(store, task: str, head: str, text: str, status: str) -> None:
    path = _path(store, task)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump({"head": head, "text": text, "status": status, "time": time.time()}, f)
    os.replace(tmp, path)


def head_of(store, task: str) -> str | None:
    """The commit `refs/checkpoints/tasks/<task>/head` points at, read the way git stores it."""
    ref = task_ref(task)
    store = os.fspath(store)
    try:
        with open(os.path.join(store, *ref.split("/")), encoding="ascii") as f:
            value = f.read().strip()
        return value if len(value) in (40, 64) else None
    except FileNotFoundError:
        pass
    except (OSError, UnicodeDecodeError):
        return None
    try:
        with open(os.path.join(store, "packed-refs"), encoding="utf-8", errors="replace") as f:
            for line in f:
                parts = line.split()
                if len(parts) == 2 and parts[1] == ref:
                    return parts[0]
    except OSError:
        pass
    return None


def read(store, task: str) -> dict | None:
    """The cached handoff if it still describes the task's head, else None."""
    try:
        with open(_path(store, task), encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("text"), str):
        return None
    if data.get("head") is None or data.get("head") != head_of(store, task):
        return None
    return data
