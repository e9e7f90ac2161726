"""A task as a git bundle (v2) plus HANDOFF.md, and back: export writes the task's refs, its
linked milestones/sessions and only its notes; import reads a bundle through a quarantine
(every ref, object and tree checked) and plans every ref update before any ref moves.

Functions take the store and return data; the engine captures before an export and restores
the workspace after an import (tc_git/engine.py composes them)."""
from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pygit2
from pygit2.enums import ObjectType

from ..base import validate
from ..base.errors import BadInput, Conflict, NotFound
from ..base.refs import NOTES_REF, NOTES_REFS, task_of_ref
from ..base.results import BundleExport
from ..storage import bundle as bundle_mod
from ..storage import packs
from ..storage.store import Store
from ..timeline.chain import TASK_ID_RE, Timeline, entry_of, head_ref
from ..workspace.secrets import redact_text
from .notes import merge_notes, notes_for
from .quarantine import adopt_packs, quarantine, refuse_hostile_trees
from .refsel import as_oid, cas_update, ref_target, relation, task_refs, valid_ref

AUTO_LIMIT = 20000  # listed paths in an automatic import's preview (more: preview only, unless nothing goes)


def _bundle_path(to, task_id: str) -> Path:
    if to is None or str(to).strip() == "":
        raise BadInput("to is required: a directory (created if new), or a file path ending in .bundle")
    p = Path(os.path.expanduser(str(to))).resolve()
    g = validate.git_dir_of(p if p.is_dir() else p.parent)
    if g is not None:  # a bundle or HANDOFF.md in .git/hooks or a store is never what anyone wants
        raise BadInput(f"export destination {p} is inside the git directory {g}: choose a directory outside it")
    if not os.path.lexists(p) and p.suffix != ".bundle":
        p.mkdir(parents=True)  # a new directory, created as `mkdir -p` would
    if p.is_dir():
        p = p / f"{task_id}.bundle"
        n = 2
        while p.exists():
            p = p.with_name(f"{task_id}.{n}.bundle")
            n += 1
        return p
    if p.suffix != ".bundle":
        raise BadInput(f"export destination {p} is neither an existing directory nor a path ending in .bundle")
    if not p.parent.is_dir():
        raise BadInput(f"directory {p.parent} does not exist: create it first")
    if p.exists():
        raise BadInput(f"{p} already exists: choose another name or remove it")
    return p


def _write_handoff(dest: Path, task_id: str, data: bytes) -> tuple[Path, str | None]:
    """Write the handoff text next to the bundle under a name that does not exist yet: an
    existing HANDOFF.md (the user's, or an earlier export's) is never overwritten. Created
    with O_EXCL, so a file appearing meanwhile is not overwritten either."""
    first = dest.with_name("HANDOFF.md") if dest.name == f"{task_id}.bundle" else dest.with_suffix(".HANDOFF.md")
    stem = dest.name[: -len(".bundle")]
    names = [first, dest.with_name(f"{stem}.HANDOFF.md")] + [dest.with_name(f"{stem}.HANDOFF.{n}.md")
                                                              for n in range(2, 1000)]
    for md in dict.fromkeys(names):
        try:
            fd = os.open(md, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
        except FileExistsError:
            continue
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        except BaseException:
            os.close(fd)
            os.unlink(md)
            raise
        os.close(fd)
        note = None if md == first else f"{first.name} already exists and was left untouched; the handoff is in {md.name}"
        return md, note
    raise BadInput(f"too many handoff files next to {dest}: clean up {dest.parent}")


def handoff_markdown(info: Mapping[str, Any], bundle: Path, refs: dict, incremental: bool) -> str:
    name = bundle.name
    lines = [
        f"# Handoff: {info.get('name') or info['task_id']}", "",
        "```", info.get("handoff", "").rstrip(), "```", "",
        "## Continue from here", "",
        "With tc-git, in the workspace that should take over (any path):", "",
        "```", f"tc-git import {name}            # preview: what the workspace would become",
        f"tc-git import {name} --apply    # bring the files to the imported head (undoable)", "```", "",
        "Without tc-git, any git (2.x) can read it:", "",
        "```",
        f"git bundle verify {name}    # inside any repository",
        f"git fetch {name} 'refs/checkpoints/*:refs/checkpoints/*' 'refs/notes/*:refs/notes/*'",
        f"git log --notes=checkpoints {head_ref(info['task_id'])}",
        f"git checkout {head_ref(info['task_id'])} -- .   # the files of the latest checkpoint",
        "```", "",
    ]
    if incremental:
        lines += ["This bundle is **incremental**: the receiving repository must already hold the "
                  "earlier bundle's refs (`git bundle verify` lists them).", ""]
    left = info.get("left_out") or []
    if left:  # the receiving side must supply these itself
        lines += ["## Not in this snapshot", "",
                  "These files were left out of the checkpoint (credentials never become objects; "
                  "special or oversized files are recorded, not stored). Supply them on the receiving side:", ""]
        lines += [f"- `{x.get('path')}`: {x.get('why')} ({x.get('reason', '')})" for x in left] + [""]
    lines += ["## Refs", ""] + [f"- `{r}` {str(o)[:12]}" for r, o in sorted(refs.items())] + [""]
    return redact_text("\n".join(lines))  # names and reasons pass the secrets engine too


def export(store: Store, task_id: str, info: Mapping[str, Any], to, since=None) -> BundleExport:
    """Write `<task>.bundle` (v2) of the task's refs and HANDOFF.md (from `info`, the task's
    resume) next to it; `since`: a bundle the receiver has, so this one is incremental."""
    dest = _bundle_path(to, task_id)
    t0 = time.perf_counter()
    with store.lock():
        repo = store.repo
        refs = task_refs(repo, task_id)
        heads = [v for k, v in refs.items() if k not in NOTES_REFS]
        for name in NOTES_REFS:  # only this task's notes travel: others' titles and paths stay home
            if name in refs:
                refs[name] = notes_for(repo, heads, refs[name])
        prereqs: list[str] = []
        if since:
            sp = Path(os.path.expanduser(str(since))).resolve()
            if sp.is_dir():
                sp = find_bundle(sp)
            h = _read_header(sp)
            tips = set(h.refs.values()) | {p for p, _ in h.prerequisites}
            prereqs = sorted(t for t in tips if t in repo and repo[t].type == ObjectType.COMMIT)
        stats = _write_bundle(repo, dest, {k: str(v) for k, v in refs.items()}, prereqs)
    md, note = _write_handoff(dest, task_id, handoff_markdown(info, dest, refs, bool(prereqs)).encode())
    out: BundleExport = {
        "task_id": task_id, "path": str(dest), "handoff": str(md), "refs": {k: str(v) for k, v in refs.items()},
        "prerequisites": prereqs, "incremental": bool(prereqs),
        "objects": stats["objects"], "bytes": stats["bytes"], "seconds": round(time.perf_counter() - t0, 3),
        "continue": f"tc-git import {dest}"}
    if note:
        out["note"] = note
    return out


def _read_header(path: Path) -> bundle_mod.Header:
    try:
        with open(path, "rb") as f:
            return bundle_mod.read_header(f, path)
    except OSError as e:
        raise BadInput(f"cannot read bundle {path}: {e.strerror or e}") from e


def _write_bundle(repo: pygit2.Repository, path: Path, refs: dict[str, str], prerequisites=()) -> dict:
    """Write a v2 bundle of `refs` (name -> oid) to `path` (complete or absent: a temporary
    file renamed), leaving out what `prerequisites` reach."""
    prereq = [str(p) for p in prerequisites]
    pack = packs.build(repo, refs.values(), prereq)
    subjects = [(p, repo[p].peel(pygit2.Commit).message.split("\n", 1)[0] if p in repo else "") for p in prereq]
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            # the pack streamed behind the header: never whole in memory (issue 14)
            head = bundle_mod.write_header(f, refs, subjects)
            n, size = pack.write_to(f.write)
            size += head
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return {"objects": n, "bytes": size}


def find_bundle(d: Path) -> Path:
    found = sorted(d.glob("*.bundle"))
    if len(found) != 1:
        raise BadInput(f"{d} holds {len(found)} .bundle files; pass the bundle file itself")
    return found[0]


def package_path(package, rename) -> Path:
    """The import's package (a .bundle file, a directory holding one, or a seed handoff
    directory) as an existing absolute path; the rename checked."""
    if package is None or str(package).strip() == "":
        raise BadInput("package is required: a .bundle file, or a handoff directory")
    p = Path(os.path.expanduser(str(package))).resolve()
    if not p.exists():
        raise NotFound(f"{p} does not exist")
    if rename is not None and not TASK_ID_RE.match(str(rename)):
        raise BadInput(f"invalid rename {rename!r}: letters, digits, '.', '_' or '-' only")
    return p


def import_bundle(store: Store, path: Path, rename, merge, max_file: int | None = None) -> dict:
    """Bring a bundle's task (its whole history, linked refs, notes merged) into the store and
    make it active. Everything is checked in a quarantine first (names, depth, file sizes over
    `max_file` from object headers); a refusal writes nothing."""
    if path.is_dir():
        path = find_bundle(path)
    h = _read_header(path)
    bad = [r for r in h.refs if not valid_ref(r)]
    if bad:
        raise BadInput(f"refusing {path.name}: references outside refs/checkpoints/* and {NOTES_REF}: "
                       + ", ".join(bad[:10]))
    tasks = [t for t in (task_of_ref(r) for r in h.refs) if t]
    if not tasks:
        raise BadInput(f"refusing {path.name}: it holds no task (no refs/checkpoints/tasks/<id>/head)")
    if rename and len(tasks) != 1:
        raise BadInput(f"rename needs a bundle with one task; this one has {len(tasks)}")
    have = store.repo if store.exists else None
    missing = [oid for oid, _ in h.prerequisites if have is None or oid not in have]
    if missing:
        raise BadInput(f"refusing {path.name}: it is incremental and this store lacks its prerequisites "
                       f"{', '.join(m[:12] for m in missing[:5])}: import the earlier bundle first")
    lock = store.lock() if store.exists else contextlib.nullcontext()
    with lock:
        with quarantine(store) as q:
            count = packs.index_pack(q, path, h.pack_offset)
            q = pygit2.Repository(q.path)
            for name, oid in h.refs.items():
                obj = q.get(oid)
                if obj is None or obj.type != ObjectType.COMMIT:
                    raise BadInput(f"refusing {path.name}: {name} points to {oid[:12]}, "
                                   f"{'missing from the pack' if obj is None else 'not a commit'}")
            try:
                packs.check_connected(q, list(h.refs.values()), [o for o, _ in h.prerequisites])
            except (KeyError, pygit2.GitError) as e:
                raise BadInput(f"refusing {path.name}: incomplete history ({e})") from None
            for t in tasks:
                if entry_of(q[h.refs[head_ref(t)]].peel(pygit2.Commit)) is None:
                    raise BadInput(f"refusing {path.name}: {head_ref(t)} is not a tc-git timeline commit")
            # every tree that arrives is checked before any ref moves (nothing from a bundle is trusted)
            refuse_hostile_trees(q, h.refs.values(), have, path.name, max_file)
            # plan every ref update against the current store before writing anything
            plan, report = _plan_refs(q, store, h.refs, rename, merge)
            if not store.exists:
                store.create()
            with store.lock():
                adopt_packs(q, store)
                repo = store.reopen()
                updates = {}
                for name, (old, new) in plan.items():
                    if name in NOTES_REFS:
                        new, state = merge_notes(repo, old, new)
                        if name == NOTES_REF:
                            report["notes"] = state
                        if new == old:
                            continue
                    updates[name] = (old, new)
                cas_update(repo, updates, "tc-git: import")
                task_id = rename or tasks[0]
                if rename:
                    tl = Timeline(repo, rename)
                    head = tl.head()
                    rec = dict(head.record)
                    rec["task"] = dict(rec.get("task") or {}, id=rename)
                    rec.update(title=f"imported as {rename} from task {tasks[0]}", imported={
                        "from": str(path), "task": tasks[0], "commit": h.refs[head_ref(tasks[0])]})
                    for k in ("conclusion", "description", "changed", "undo", "target", "failed"):
                        rec.pop(k, None)
                    tl.append("import", repo[head.oid].peel(pygit2.Commit).tree_id, rec)
                store.set_active_task(task_id)
    return {"task_id": task_id, "tasks": tasks, "source": str(path), "objects": count,
            "refs": {k: v for k, v in h.refs.items()}, "prerequisites": [o for o, _ in h.prerequisites], **report}


def _plan_refs(q, store: Store, incoming: dict[str, str], rename, merge) -> tuple[dict, dict]:
    """Decide each ref: create, fast-forward, keep, or refuse (raises, nothing written yet)."""
    local = pygit2.Repository(str(store.path)) if store.exists else None
    plan: dict[str, tuple] = {}
    report: dict[str, Any] = {"created": [], "fast_forwarded": [], "up_to_date": [], "kept_local": [], "notes": None}
    for name, theirs_hex in sorted(incoming.items()):
        theirs = as_oid(theirs_hex)
        target = name
        t = task_of_ref(name)
        if t and rename:
            target = head_ref(rename)
        ours = ref_target(local, target) if local is not None else None
        if name in NOTES_REFS:
            plan[name] = (ours, theirs)
            continue
        rel = relation(q, ours, theirs)
        if t:
            if ours is not None and not merge:
                raise Conflict(f"task {rename or t} already exists in this store: pass merge=True (--merge) "
                               f"to bring it up to date, or rename=<new id> (--rename) to keep both")
            if rel == "diverged":
                raise Conflict(f"task {rename or t} has diverged here and in the bundle (both have steps the "
                               f"other lacks): import it under a new id with rename=<new id>")
            if rel == "ahead":
                report["kept_local"].append(target)
                continue
        elif rel in ("ahead", "diverged"):
            report["kept_local"].append(target)
            continue
        if rel == "equal":
            report["up_to_date"].append(target)
        else:
            plan[target] = (ours, theirs)
            report["created" if rel == "absent" else "fast_forwarded"].append(target)
    return plan, report


def auto_restore(preview: Mapping[str, Any]) -> tuple[dict | None, list | None, str]:
    """For an import with apply=None (MCP's default, what the seed's users expect), from the
    preview of the restore to the imported head: `(result, None, "")` when nothing is written
    (the preview as a normal one, `auto` and a note saying why), else `(None, paths, note)`:
    write, as an undoable restore of `paths` (None: all), because that overwrites and deletes
    nothing the workspace holds (only the new files when others would go)."""
    plan = preview.get("plan") or {}
    counts = plan.get("counts") or {}
    n = {k: counts.get(k, len(plan.get(k) or [])) for k in ("to_delete", "to_write", "to_replace", "unrestorable")}
    if "error" in preview or n["to_replace"] or n["unrestorable"] or not n["to_write"] \
            or (n["to_delete"] and len(plan.get("to_write") or []) != n["to_write"]):
        plan = {k: v[:200] if isinstance(v, list) else v for k, v in plan.items()}  # as a normal preview
        why = ", ".join(f"{k.removeprefix('to_')} {n[k]}" for k in ("to_replace", "to_delete", "unrestorable")
                        if n[k])
        note = (f"files not written: the import would {why} file(s) here; see plan, then import again "
                "with apply=true (undoable)") if why else "nothing to write: the workspace matches"
        return {**preview, "plan": plan, "auto": "preview", "note": note}, None, ""
    return None, (plan["to_write"] if n["to_delete"] else None), \
        f"wrote {n['to_write']} new file(s), overwrote and deleted nothing; undo reverses it"


def imported_point(repo: pygit2.Repository, task_id: str):
    """The timeline entry an import restores the workspace to (a renamed import: what it was
    imported from), or None."""
    tl = Timeline(repo, task_id)
    head = tl.head()
    if head.kind == "import":
        return next(tl.walk(head.parent), None) if head.parent else None
    return head
