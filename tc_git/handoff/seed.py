"""Migration of a task-checkpoint-mcp 0.1.x handoff directory (handoff.json + files/) into one
commit of a new task: the seed's format, read once, validated whole before anything is written."""
from __future__ import annotations

import json
import os
import stat as stat_mod
import time
from pathlib import Path

import pygit2
from pygit2.enums import FileMode

from ..base.errors import BadInput, Conflict
from ..base.refs import STORE_DIRNAME
from ..storage.store import Store
from ..timeline.chain import TASK_ID_RE, Timeline, head_ref
from ..workspace import pathsafe
from ..workspace.secrets import scan_bytes, sensitive_path


def is_seed_package(p: Path) -> bool:
    return p.is_dir() and (p / "handoff.json").exists()


META_MAX_BYTES = 16 << 20  # handoff.json is read whole


def import_seed(store: Store, d: Path, rename, max_file: int | None = None) -> dict:
    """Migrate a task-checkpoint-mcp 0.1.x handoff directory (handoff.json + files/) into one
    commit. Everything is validated before the first object is written; a file over `max_file`
    bytes (TC_MAX_FILE_BYTES) refuses the package, as a bundle holding one is refused."""
    try:
        if (d / "handoff.json").stat().st_size > META_MAX_BYTES:
            raise BadInput(f"invalid handoff package {d}: handoff.json is over {META_MAX_BYTES >> 20} MiB")
        meta = json.loads((d / "handoff.json").read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as e:
        raise BadInput(f"invalid handoff package {d}: handoff.json unreadable ({e})") from None
    files = d / "files"
    if not isinstance(meta, dict) or not isinstance(meta.get("task"), dict) or not files.is_dir() or files.is_symlink():
        raise BadInput(f"invalid handoff package {d}: needs handoff.json with a task object and a files/ directory")
    task = meta["task"]
    tid = str(task.get("task_id") or "")
    if not TASK_ID_RE.match(tid):
        raise BadInput(f"invalid handoff package {d}: bad task id {tid!r}")
    target = rename or tid
    if store.exists and head_ref(target) in store.repo.references:
        raise Conflict(f"task {target} already exists in this store: import with rename=<new id> (--rename)")
    entries: list[tuple[str, Path, FileMode]] = []
    filtered: list[str] = []
    for dirpath, dirs, names in os.walk(files):
        for n in dirs + names:
            full = Path(dirpath) / n
            rel = full.relative_to(files).as_posix()
            if full.is_symlink():
                raise BadInput(f"refusing {d}: handoff contains a symlink: {rel}")
            why = pathsafe.check_path(rel) or ("holds a backslash" if "\\" in rel else None)
            if why or rel.split("/")[0] == STORE_DIRNAME:
                raise BadInput(f"refusing {d}: path escapes the workspace or is reserved: {rel} ({why or 'the store'})")
            if n in names:
                st = full.lstat()
                if not stat_mod.S_ISREG(st.st_mode):
                    raise BadInput(f"refusing {d}: not a regular file: {rel}")
                if max_file is not None and st.st_size > max_file:
                    raise BadInput(f"refusing {d}: {rel} is {st.st_size} bytes, over the {max_file}-byte limit "
                                   "(TC_MAX_FILE_BYTES). Nothing was imported")
                if sensitive_path(rel) is not None:
                    filtered.append(rel)
                    continue
                entries.append((rel, full, FileMode.BLOB_EXECUTABLE if st.st_mode & 0o111 else FileMode.BLOB))
    for rel, _full, _m in entries:
        if (store.workspace / rel).resolve() != (store.workspace.resolve() / rel):
            raise BadInput(f"refusing {d}: {rel} would be written through a symlink in the workspace")
    if not store.exists:
        store.create()
    with store.lock():
        repo = store.reopen()
        idx = pygit2.Index()
        kept = 0
        for rel, full, mode in entries:
            data = full.read_bytes()
            if scan_bytes(data) is not None:
                filtered.append(rel)
                continue
            idx.add(pygit2.IndexEntry(rel, repo.create_blob(data), mode))
            kept += 1
        tree = idx.write_tree(repo)
        resume: dict = meta["resume"] if isinstance(meta.get("resume"), dict) else {}
        last: dict = resume["last"] if isinstance(resume.get("last"), dict) else {}
        tl = Timeline(repo, target)
        rec = {
            "task": {"id": target, "name": str(task.get("name") or target), "goal": str(task.get("goal") or ""),
                     "constraints": str(task.get("constraints") or ""), "exclude": [],
                     "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())},
            "counters": {"steps": 1, "drifts": 0}, "step": 1,
            "title": "imported handoff" + (f": {last['title']}" if last.get("title") else ""),
            "conclusion": str(last.get("conclusion") or ""), "description": str(last.get("description") or ""),
            "next": str(resume.get("next") or last.get("next") or ""),
            "open_questions": [str(q) for q in resume.get("open_questions") or []][:50], "verified": [],
            "imported": {"from": "task-checkpoint-mcp", "package": str(d), "seed_task": tid,
                         "seed_head": task.get("head"), "filtered": sorted(set(filtered))[:500],
                         "seed_filtered": [str(x) for x in (meta.get("filtered") or [])][:500]},
        }
        tl.append("step", tree, rec)
        store.set_active_task(target)
    return {"task_id": target, "tasks": [tid], "source": str(d), "format": "task-checkpoint-mcp",
            "files": kept, "filtered": sorted(set(filtered))}
