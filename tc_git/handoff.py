"""Handoff: the task's refs in the user's repository, git bundles, and sync through any git remote.

The distributed engine is git itself. Everything here moves the same refs:

    refs/checkpoints/tasks/<id>/head            the task's code timeline
    refs/checkpoints/sessions/<agent>-<s>/<b>   trajectory tips linked to it
    refs/checkpoints/milestones/<name>          milestones linked to it
    refs/notes/checkpoints                      the notes (one JSON record per commit)

* `export_after_step` mirrors them into the user's own repository after each new step (one pack
  of the objects it lacks + compare-and-swap ref updates) and proves nothing else changed.
* `export` writes a v2 bundle plus HANDOFF.md; `import_` reads one (or a seed-format handoff
  directory) through a quarantine before any ref moves; the workspace follows only through the
  engine's restore (previewed, undoable).
* `push` / `pull` move the refs to and from any git remote with explicit refspecs.

Notes never get overwritten when histories diverge: they are merged (union of both notes trees;
on the same annotated object, ours wins).
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import stat as stat_mod
import tempfile
import time
from pathlib import Path

import pygit2
from pygit2.enums import FileMode, ObjectType

from . import bundle as bundle_mod
from . import gitguard, pathsafe, validate
from .errors import BadInput, Conflict, NotFound, TaskClosed, Unavailable
from .refs import (
    CHECKPOINTS_PREFIX,
    MILESTONES_PREFIX,
    NOTES_REF,
    SESSIONS_PREFIX,
    STORE_DIRNAME,
    SYNC_HAVE_PREFIX,
    SYNC_WANT_PREFIX,
    TASKS_PREFIX,
    is_ours,
    task_of_ref,
)
from .secrets import redact_text
from .store import Store
from .timeline import TASK_ID_RE, Timeline, entry_of, head_ref, signature

CHECKPOINTS, SESSIONS, MILESTONES = CHECKPOINTS_PREFIX, SESSIONS_PREFIX, MILESTONES_PREFIX
HEX40 = re.compile(r"\b[0-9a-f]{40}\b")
OFF = ("off", "0", "false", "no")


def _off(var: str) -> bool:
    return os.environ.get(var, "on").strip().lower() in OFF


def _oid(x) -> pygit2.Oid:
    return x if isinstance(x, pygit2.Oid) else pygit2.Oid(hex=str(x))


_is_ours = is_ours


def _valid_ref(name: str) -> bool:
    """Our namespaces only, with names git accepts and task refs in their exact shape."""
    if name == NOTES_REF:
        return True
    if not name.startswith(CHECKPOINTS) or not pygit2.reference_is_valid_name(name):
        return False
    if any(part in ("", ".", "..") for part in name.split("/")):
        return False
    if name.startswith(TASKS_PREFIX):
        task = task_of_ref(name)
        return bool(task and TASK_ID_RE.match(task))
    return name.startswith(SESSIONS) or name.startswith(MILESTONES)


_task_of = task_of_ref


def _ref_target(repo: pygit2.Repository, name: str):
    ref = repo.references.get(name)
    if ref is None:
        return None
    try:
        return ref.resolve().target
    except (KeyError, pygit2.GitError):
        return None


def _relation(repo, ours, theirs) -> str:
    """equal | absent | behind (ours is an ancestor: fast-forward) | ahead | diverged."""
    if ours is None:
        return "absent"
    if ours == theirs:
        return "equal"
    if repo.descendant_of(theirs, ours):
        return "behind"
    if repo.descendant_of(ours, theirs):
        return "ahead"
    return "diverged"


# ============================================================================ linked refs
def _strings(value, out: set) -> None:
    if isinstance(value, str):
        out.update(HEX40.findall(value))
    elif isinstance(value, dict):
        for v in value.values():
            _strings(v, out)
    elif isinstance(value, (list, tuple)):
        for v in value:
            _strings(v, out)


def _note_json(repo, oid):
    try:
        msg = repo.lookup_note(str(oid), NOTES_REF).message
    except KeyError:
        return None
    try:
        return json.loads(msg)
    except ValueError:
        return msg


def linked_refs(repo: pygit2.Repository, task_id: str, milestones_only: bool = False) -> dict[str, pygit2.Oid]:
    """Milestones (and trajectory sessions) that belong to a task.

    A milestone belongs to the task when its note names one of the task's commits or the task
    id, or when a task commit's note names the milestone's event; a session belongs to it when
    it is the agent/session that made a task commit, or holds a milestone or trajectory event
    the task links to. Cheap when there are no trajectory refs at all.
    """
    names = [r for r in repo.references if r.startswith(MILESTONES) or (not milestones_only and r.startswith(SESSIONS))]
    if not names:
        return {}
    tl = Timeline(repo, task_id)
    chain: set[str] = set()
    mentioned: set[str] = set()
    pairs: set[str] = set()
    for e in tl.walk():
        chain.add(str(e.oid))
        rec = tl.record(e.oid)
        _strings(rec, mentioned)
        if rec.get("agent") and rec.get("session"):
            pairs.add(f"{rec['agent']}-{rec['session']}")
    out: dict[str, pygit2.Oid] = {}
    for name in names:
        if not name.startswith(MILESTONES) or name in out:
            continue
        t = _ref_target(repo, name)
        if t is None:
            continue
        note = _note_json(repo, t)
        found: set[str] = set()
        _strings(note, found)
        text = json.dumps(note) if note is not None else ""
        if str(t) in mentioned or found & chain or (task_id and f'"{task_id}"' in text):
            out[name] = t
    if milestones_only:
        return out
    anchors = [_oid(h) for h in (mentioned - chain) if _oid(h) in repo][:64] + list(out.values())
    for name in names:
        if not name.startswith(SESSIONS):
            continue
        t = _ref_target(repo, name)
        if t is None:
            continue
        sess = name[len(SESSIONS):].split("/", 1)[0]
        if sess in pairs or t in anchors or any(repo.descendant_of(t, a) for a in anchors):
            out[name] = t
    return out


def task_refs(repo: pygit2.Repository, task_id: str, milestones_only: bool = False) -> dict[str, pygit2.Oid]:
    refs = {head_ref(task_id): repo.references[head_ref(task_id)].target}
    refs.update(linked_refs(repo, task_id, milestones_only))
    notes = _ref_target(repo, NOTES_REF)
    if notes is not None:
        refs[NOTES_REF] = notes
    return refs


# ============================================================================ notes merge
def _notes_map(repo, commit_oid) -> dict[str, pygit2.Oid]:
    out: dict[str, pygit2.Oid] = {}
    stack = [("", repo[commit_oid].tree)]
    while stack:
        prefix, tree = stack.pop()
        for e in tree:
            name = prefix + e.name
            if e.type_str == "tree":
                stack.append((name, repo[e.id]))
            elif e.type_str == "blob" and re.fullmatch(r"[0-9a-f]{40}", name):
                out[name] = e.id
    return out


def notes_for(repo: pygit2.Repository, tips, notes_tip) -> pygit2.Oid:
    """A parentless notes commit holding only the notes of commits reachable from `tips`.

    A bundle carries it as refs/notes/checkpoints; importing merges it (union) into the notes
    there, so nothing is lost, and nothing of other tasks leaves the store.
    """
    want: set[str] = set()
    stack = [_oid(t) for t in tips]
    while stack:
        oid = stack.pop()
        h = str(oid)
        if h in want:
            continue
        want.add(h)
        stack.extend(repo[oid].parent_ids)
    tb = repo.TreeBuilder()
    for name, blob in sorted(_notes_map(repo, notes_tip).items()):
        if name in want:
            tb.insert(name, blob, FileMode.BLOB)
    sig = signature()
    return repo.create_commit(None, sig, sig, "Notes of the exported history (tc-git)\n", tb.write(), [])


def merge_notes(repo: pygit2.Repository, ours, theirs) -> tuple[pygit2.Oid, str]:
    """Integrate two notes tips: fast-forward when one contains the other, else a merge commit
    whose tree is the union of both (on the same annotated object, ours wins)."""
    if theirs is None:
        return ours, "unchanged"
    if ours is None:
        return theirs, "fast-forward"
    rel = _relation(repo, ours, theirs)
    if rel == "equal" or rel == "ahead":
        return ours, "unchanged"
    if rel == "behind":
        return theirs, "fast-forward"
    union = _notes_map(repo, theirs)
    union.update(_notes_map(repo, ours))
    tb = repo.TreeBuilder()
    for name in sorted(union):
        tb.insert(name, union[name], FileMode.BLOB)
    sig = signature()
    oid = repo.create_commit(None, sig, sig, "Notes merged by tc-git (union; ours wins on the same object)\n",
                             tb.write(), [ours, theirs])
    return oid, "merged"


def _cas_update(repo: pygit2.Repository, updates: dict[str, tuple], message: str) -> None:
    """Move several refs at once: each only if it still has the value we planned from."""
    if not updates:
        return
    try:
        with repo.transaction() as tx:
            for name, (old, new) in updates.items():
                tx.lock_ref(name)
                cur = _ref_target(repo, name)
                if cur != old:
                    raise Conflict(f"{name} moved during the operation ({old} -> {cur}); retry")
                tx.set_target(name, new, message=message)
    except (pygit2.GitError, ValueError) as e:
        raise Conflict(f"could not update refs ({e}); another process holds a ref lock, retry") from e


# ============================================================================ the user's repository
def user_gitdir(engine) -> Path | None:
    """The git directory of the repository around the workspace (never the store itself)."""
    try:
        found = pygit2.discover_repository(str(engine.root))
    except (pygit2.GitError, OSError):
        return None
    if not found:
        return None
    p = Path(found).resolve()
    store = engine.store.path.resolve()
    if p == store or store in p.parents:
        return None
    return p


def _common_dir(gitdir: Path) -> Path:
    return gitguard.common_dir(gitdir)


# What must not change in the user's repository (everything outside objects/ and our refs):
# one definition in gitguard.py, also used around every writing engine call.
def fingerprint(gitdir: Path) -> dict:
    return gitguard.fingerprint(gitdir)


def _diff_fp(a: dict, b: dict) -> list[str]:
    return gitguard.diff(a, b)


def sync_into_repo(src: pygit2.Repository, gitdir: Path, refs: dict[str, pygit2.Oid]) -> dict:
    """Copy `refs` (and the objects they need) from the store into a repository on disk.

    Objects: ONE pack of what the target lacks, found by walking from the tips and stopping at
    anything the target already has (its own commits' blobs and subtrees included), written
    with PackBuilder (libgit2 cannot push into a non-bare repository). Refs: compare-and-swap
    in one transaction; a task/milestone ref that diverged is reported, never overwritten; the
    notes are merged.
    """
    user = pygit2.Repository(str(gitdir), pygit2.enums.RepositoryOpenFlag.NO_SEARCH)
    odb = user.odb

    def have(oid):
        return oid in odb

    objs = bundle_mod.reachable(src, list(refs.values()), (), have=have)
    if objs:
        pb = pygit2.PackBuilder(src)
        for o in objs:
            pb.add(o)
        pb.write(str(_common_dir(Path(user.path)) / "objects" / "pack"))
        user = pygit2.Repository(str(gitdir), pygit2.enums.RepositoryOpenFlag.NO_SEARCH)
    updates: dict[str, tuple] = {}
    skipped: dict[str, str] = {}
    notes_state = None
    for name, new in refs.items():
        old = _ref_target(user, name)
        rel = _relation(user, old, new)
        if rel == "equal":
            continue
        if name == NOTES_REF:
            merged, notes_state = merge_notes(user, new, old)
            if merged != old:
                updates[name] = (old, merged)
        elif rel in ("absent", "behind"):
            updates[name] = (old, new)
        else:
            skipped[name] = f"{rel} in the target; left as it is"
    _cas_update(user, updates, "tc-git: export")
    return {"objects": len(objs), "updated": sorted(updates), "skipped": skipped, "notes": notes_state}


def export_after_step(engine, tl: Timeline) -> dict:
    """After a new step: mirror the task into the user's repository. Never raises."""
    return mirror(engine, lambda repo: task_refs(repo, tl.task_id, milestones_only=True), tl.ref)


def mirror(engine, pick, label: str | None) -> dict:
    """Copy the refs `pick(store_repo)` names into the user's repository, verified. Never raises."""
    out = {"ok": False, "ref": None, "reason": None, "unchanged": None}
    if _off("TC_GIT"):
        out["reason"] = "TC_GIT=off"
        return out
    before = None
    gitdir = None
    try:
        gitdir = user_gitdir(engine)
        if gitdir is None:
            out["reason"] = "not a git repo"
            return out
        # inside an engine call that watches the user's git as a whole (engine._watch_user_git),
        # that outer fingerprint is the one reported: no second pair here
        verify = not _off("TC_GIT_VERIFY") and not getattr(engine, "_git_watched", False)
        before = fingerprint(gitdir) if verify else None
        res = sync_into_repo(engine.repo, gitdir, pick(engine.repo))
        out.update(ok=not res["skipped"], ref=label, objects=res["objects"])
        if res["skipped"]:
            out["error"] = "; ".join(f"{k}: {v}" for k, v in res["skipped"].items())
    except Exception as e:  # the operation stands whatever happens here
        out.update(ok=False, error=f"{type(e).__name__}: {e}")
    if before is not None:
        try:
            changed = _diff_fp(before, fingerprint(gitdir))
            out["unchanged"] = not changed
            if changed:
                out["changed"] = changed
        except Exception as e:
            out["unchanged"] = None
            out.setdefault("error", f"verification failed: {e}")
    return out


# ============================================================================ export (bundle)
def _bundle_path(to, task_id: str) -> Path:
    if to is None or str(to).strip() == "":
        raise BadInput("to is required: an existing directory, or a file path ending in .bundle")
    p = Path(os.path.expanduser(str(to))).resolve()
    g = validate.git_dir_of(p if p.is_dir() else p.parent)
    if g is not None:  # a bundle or HANDOFF.md in .git/hooks or a store is never what anyone wants
        raise BadInput(f"export destination {p} is inside the git directory {g}: choose a directory outside it")
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


def handoff_markdown(info: dict, bundle: Path, refs: dict, incremental: bool) -> str:
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


def export(engine, to, since=None, task_id: str | None = None) -> dict:
    """Write `<task>.bundle` (v2) + HANDOFF.md; unsaved work is captured first."""
    engine._require_store()
    tl = engine._timeline(task_id)
    captured = None
    if task_id is None or task_id == engine.store.active_task():
        try:
            c = engine.capture()
            captured = c.get("drift_id")
        except TaskClosed:
            pass
    info = engine.resume(tl.task_id)
    dest = _bundle_path(to, tl.task_id)
    t0 = time.perf_counter()
    with engine.store.lock():
        repo = engine.repo
        refs = task_refs(repo, tl.task_id)
        if NOTES_REF in refs:  # only this task's notes travel: others' titles and paths stay home
            refs[NOTES_REF] = notes_for(repo, [v for k, v in refs.items() if k != NOTES_REF], refs[NOTES_REF])
        prereqs: list[str] = []
        if since:
            sp = Path(os.path.expanduser(str(since))).resolve()
            if sp.is_dir():
                sp = _find_bundle(sp)
            h = bundle_mod.read_header(sp)
            tips = set(h.refs.values()) | {p for p, _ in h.prerequisites}
            prereqs = sorted(t for t in tips if t in repo and repo[t].type == ObjectType.COMMIT)
        stats = bundle_mod.write_bundle(repo, dest, {k: str(v) for k, v in refs.items()}, prereqs)
    md, note = _write_handoff(dest, tl.task_id, handoff_markdown(info, dest, refs, bool(prereqs)).encode())
    return {"task_id": tl.task_id, "path": str(dest), "handoff": str(md), "refs": {k: str(v) for k, v in refs.items()},
            **({"note": note} if note else {}),
            "prerequisites": prereqs, "incremental": bool(prereqs), "captured": captured,
            "objects": stats["objects"], "bytes": stats["bytes"], "seconds": round(time.perf_counter() - t0, 3),
            "continue": f"tc-git import {dest}"}


# ============================================================================ import
def _find_bundle(d: Path) -> Path:
    found = sorted(d.glob("*.bundle"))
    if len(found) != 1:
        raise BadInput(f"{d} holds {len(found)} .bundle files; pass the bundle file itself")
    return found[0]


@contextlib.contextmanager
def _quarantine(engine):
    """A temporary bare repository whose odb sees the store's objects (for thin packs and
    connectivity); removed on exit, so a refused import leaves nothing behind."""
    store = engine.store
    if store.exists:
        base = store.path / "tc"
        base.mkdir(mode=0o700, exist_ok=True)
        d = Path(tempfile.mkdtemp(prefix="quarantine-", dir=base))
    else:
        d = Path(tempfile.mkdtemp(prefix="tc-quarantine-"))
    try:
        q = pygit2.init_repository(str(d), bare=True)
        if store.exists:
            (d / "objects" / "info" / "alternates").write_text(str(store.path / "objects") + "\n")
            q = pygit2.Repository(str(d))
        yield q
    finally:
        shutil.rmtree(d, ignore_errors=True)


def _refuse_hostile_trees(q, tips, have, source: str) -> None:
    """BadInput unless every tree reachable from `tips` (down to what the store already has)
    holds only names that can be written safely into a workspace (pathsafe.check_tree_name)."""
    problems = pathsafe.check_history(q, [_oid(t) for t in tips],
                                      (lambda oid: oid in have) if have is not None else (lambda oid: False))
    if problems:
        shown = "; ".join(f"commit {c[:12]}: {p!r}: {why}" for c, p, why in problems[:5])
        raise BadInput(f"refusing {source}: it holds file names that would write outside the workspace, into a "
                       f"git directory or into the tc-git store ({shown}"
                       f"{'; ...' if len(problems) > 5 else ''}). Nothing was imported; ask its author for a "
                       f"clean export")


def _adopt_loose(qrepo: pygit2.Repository, store: Store) -> None:
    """Move loose objects a fetch left in the quarantine into the store."""
    src = Path(qrepo.path) / "objects"
    for d in src.iterdir():
        if len(d.name) != 2 or not d.is_dir():
            continue
        dst = store.path / "objects" / d.name
        dst.mkdir(exist_ok=True)
        for f in d.iterdir():
            if not (dst / f.name).exists():
                try:
                    os.rename(f, dst / f.name)
                except OSError:
                    shutil.copy2(f, dst / f".{f.name}.tmp")
                    os.replace(dst / f".{f.name}.tmp", dst / f.name)


def _adopt_packs(qrepo: pygit2.Repository, store: Store) -> None:
    """Move the quarantine's pack into the store (.pack first, .idx last: a reader finds packs
    through their index)."""
    src = Path(qrepo.path) / "objects" / "pack"
    dst = store.path / "objects" / "pack"
    dst.mkdir(parents=True, exist_ok=True)
    packs = sorted(src.glob("pack-*.idx"))
    for idx in packs:
        stem = idx.stem
        if (dst / idx.name).exists():
            continue
        others = [p for p in src.glob(stem + ".*") if p.suffix != ".idx"]
        for p in sorted(others, key=lambda p: p.suffix != ".pack") + [idx]:
            try:
                os.rename(p, dst / p.name)
            except OSError:
                shutil.copy2(p, dst / f".{p.name}.tmp")
                os.replace(dst / f".{p.name}.tmp", dst / p.name)


def import_(engine, package, rename: str | None = None, merge: bool = False, apply: bool | None = False) -> dict:
    """Bring a task (with its whole history) into this workspace's store and make it active.

    The workspace files follow only through `engine.restore` (preview unless apply=True; with
    apply=None only when that overwrites and deletes nothing: see `_restore_to_head`).
    """
    if package is None or str(package).strip() == "":
        raise BadInput("package is required: a .bundle file, or a handoff directory")
    p = Path(os.path.expanduser(str(package))).resolve()
    if not p.exists():
        raise NotFound(f"{p} does not exist")
    if rename is not None and not TASK_ID_RE.match(str(rename)):
        raise BadInput(f"invalid rename {rename!r}: letters, digits, '.', '_' or '-' only")
    t0 = time.perf_counter()
    if p.is_dir() and (p / "handoff.json").exists():
        result = _import_seed(engine, p, rename)
    else:
        if p.is_dir():
            p = _find_bundle(p)
        result = _import_bundle(engine, p, rename, merge)
    tid = result["task_id"]
    t1 = time.perf_counter()
    result["git"] = mirror(engine, lambda repo: task_refs(repo, tid, milestones_only=True), head_ref(tid))
    t2 = time.perf_counter()
    try:  # never silent: the files the imported snapshot does not hold, and why (read before the
        # restore, whose own commit describes this workspace)
        result["left_out"] = engine._left_out(engine._timeline(tid).head().record)
    except Exception:  # noqa: BLE001 - a report, not a reason to fail an import that succeeded
        result["left_out"] = []
    result["restore"] = _restore_to_head(engine, tid, apply)
    result["seconds"] = {"import": round(t1 - t0, 3), "user_repo": round(t2 - t1, 3),
                         "restore": round(time.perf_counter() - t2, 3)}
    return result


def _import_bundle(engine, path: Path, rename, merge) -> dict:
    h = bundle_mod.read_header(path)
    bad = [r for r in h.refs if not _valid_ref(r)]
    if bad:
        raise BadInput(f"refusing {path.name}: references outside refs/checkpoints/* and {NOTES_REF}: "
                       + ", ".join(bad[:10]))
    tasks = [t for t in (_task_of(r) for r in h.refs) if t]
    if not tasks:
        raise BadInput(f"refusing {path.name}: it holds no task (no refs/checkpoints/tasks/<id>/head)")
    if rename and len(tasks) != 1:
        raise BadInput(f"rename needs a bundle with one task; this one has {len(tasks)}")
    store = engine.store
    have = store.repo if store.exists else None
    missing = [oid for oid, _ in h.prerequisites if have is None or oid not in have]
    if missing:
        raise BadInput(f"refusing {path.name}: it is incremental and this store lacks its prerequisites "
                       f"{', '.join(m[:12] for m in missing[:5])}: import the earlier bundle first")
    lock = store.lock() if store.exists else contextlib.nullcontext()
    with lock:
        with _quarantine(engine) as q:
            count = bundle_mod.index_pack(q, path, h.pack_offset)
            q = pygit2.Repository(q.path)
            for name, oid in h.refs.items():
                obj = q.get(oid)
                if obj is None or obj.type != ObjectType.COMMIT:
                    raise BadInput(f"refusing {path.name}: {name} points to {oid[:12]}, "
                                   f"{'missing from the pack' if obj is None else 'not a commit'}")
            try:
                bundle_mod.check_connected(q, list(h.refs.values()), [o for o, _ in h.prerequisites])
            except (bundle_mod.GitCallError, KeyError, pygit2.GitError) as e:
                raise BadInput(f"refusing {path.name}: incomplete history ({e})") from None
            for t in tasks:
                if entry_of(q[h.refs[head_ref(t)]]) is None:
                    raise BadInput(f"refusing {path.name}: {head_ref(t)} is not a tc-git timeline commit")
            # every tree that arrives is checked before any ref moves (nothing from a bundle is trusted)
            _refuse_hostile_trees(q, h.refs.values(), have, path.name)
            # plan every ref update against the current store before writing anything
            plan, report = _plan_refs(q, store, h.refs, rename, merge)
            if not store.exists:
                store.create()
            with store.lock():
                _adopt_packs(q, store)
                repo = store.reopen()
                updates = {}
                for name, (old, new) in plan.items():
                    if name == NOTES_REF:
                        new, report["notes"] = merge_notes(repo, old, new)
                        if new == old:
                            continue
                    updates[name] = (old, new)
                _cas_update(repo, updates, "tc-git: import")
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
                    tl.append("import", repo[head.oid].tree_id, rec)
                store.set_active_task(task_id)
    return {"task_id": task_id, "tasks": tasks, "source": str(path), "objects": count,
            "refs": {k: v for k, v in h.refs.items()}, "prerequisites": [o for o, _ in h.prerequisites], **report}


def _plan_refs(q, store: Store, incoming: dict[str, str], rename, merge) -> tuple[dict, dict]:
    """Decide each ref: create, fast-forward, keep, or refuse (raises, nothing written yet)."""
    local = pygit2.Repository(str(store.path)) if store.exists else None
    plan: dict[str, tuple] = {}
    report = {"created": [], "fast_forwarded": [], "up_to_date": [], "kept_local": [], "notes": None}
    for name, theirs in sorted(incoming.items()):
        theirs = _oid(theirs)
        target = name
        t = _task_of(name)
        if t and rename:
            target = head_ref(rename)
        ours = _ref_target(local, target) if local is not None else None
        if name == NOTES_REF:
            plan[name] = (ours, theirs)
            continue
        rel = _relation(q, ours, theirs)
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


def _restore_to_head(engine, task_id: str, apply: bool | None, **kw) -> dict | None:
    """Preview (or apply) a restore of the workspace to the imported head, via the engine.
    `apply=None` (MCP's default, what the seed's users expect): write the imported files when that
    overwrites and deletes nothing the workspace holds (an empty or non-conflicting workspace: only
    the new files are written, other files stay), else preview; `auto` says which happened."""
    if apply is None:
        preview = _restore_to_head(engine, task_id, False, limit=AUTO_LIMIT)
        plan = (preview or {}).get("plan") or {}
        counts = plan.get("counts") or {}
        n = {k: counts.get(k, len(plan.get(k) or [])) for k in ("to_delete", "to_write", "to_replace", "unrestorable")}
        if preview is None or "error" in preview or n["to_replace"] or n["unrestorable"] or not n["to_write"] \
                or (n["to_delete"] and len(plan.get("to_write") or []) != n["to_write"]):
            if preview is None:
                return None
            plan = {k: v[:200] if isinstance(v, list) else v for k, v in plan.items()}  # as a normal preview
            why = ", ".join(f"{k.removeprefix('to_')} {n[k]}" for k in ("to_replace", "to_delete", "unrestorable")
                            if n[k])
            note = (f"files not written: the import would {why} file(s) here; see plan, then import again "
                    "with apply=true (undoable)") if why else "nothing to write: the workspace matches"
            return {**preview, "plan": plan, "auto": "preview", "note": note}
        # only the new files when others would go; an undoable restore either way
        paths = plan["to_write"] if n["to_delete"] else None
        done = _restore_to_head(engine, task_id, True, paths=paths)
        return {**done, "auto": "applied", "note": f"wrote {n['to_write']} new file(s), overwrote and deleted "
                                                   "nothing; undo: restore undo=true apply=true"}
    tl = Timeline(engine.repo, task_id)
    head = tl.head()
    e = head
    if head.kind == "import":  # a renamed import: restore to what it was imported from
        e = next(tl.walk(head.parent), None) if head.parent else None
    if e is None:
        return None
    try:
        if e.kind == "drift" and e.drift:
            return engine.restore(drift_id=e.drift, apply=apply, **kw)
        if e.step >= 1:
            return engine.restore(index=e.step, apply=apply, **kw)
    except TaskClosed as err:
        return {"applied": False, "error": err.message}
    return None


AUTO_LIMIT = 20000  # listed paths in an automatic import's preview (more: preview only, unless nothing goes)


# ---------------------------------------------------------------------------- seed handoff dirs
def _import_seed(engine, d: Path, rename) -> dict:
    """Migrate a task-checkpoint-mcp 0.1.x handoff directory (handoff.json + files/) into one
    commit. Everything is validated before the first object is written."""
    from .secrets import scan_bytes, sensitive_path

    try:
        meta = json.loads((d / "handoff.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise BadInput(f"invalid handoff package {d}: handoff.json unreadable ({e})") from None
    files = d / "files"
    if not isinstance(meta, dict) or not isinstance(meta.get("task"), dict) or not files.is_dir() or files.is_symlink():
        raise BadInput(f"invalid handoff package {d}: needs handoff.json with a task object and a files/ directory")
    task = meta["task"]
    tid = str(task.get("task_id") or "")
    if not TASK_ID_RE.match(tid):
        raise BadInput(f"invalid handoff package {d}: bad task id {tid!r}")
    target = rename or tid
    store = engine.store
    if store.exists and head_ref(target) in store.repo.references:
        raise Conflict(f"task {target} already exists in this store: import with rename=<new id> (--rename)")
    entries: list[tuple[str, Path, int]] = []
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
                if sensitive_path(rel) is not None:
                    filtered.append(rel)
                    continue
                entries.append((rel, full, FileMode.BLOB_EXECUTABLE if st.st_mode & 0o111 else FileMode.BLOB))
    for rel, _full, _m in entries:
        if (engine.root / rel).resolve() != (engine.root.resolve() / rel):
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
        resume = meta.get("resume") if isinstance(meta.get("resume"), dict) else {}
        last = resume.get("last") if isinstance(resume.get("last"), dict) else {}
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


# ============================================================================ remotes
class _PushCallbacks(pygit2.RemoteCallbacks):
    def __init__(self):
        super().__init__()
        self.rejected: dict[str, str] = {}
        self.accepted: list[str] = []

    def push_update_reference(self, refname, message):
        if message:
            self.rejected[refname] = message
        else:
            self.accepted.append(refname)


def _resolve_remote(engine, remote: str | None) -> str:
    if remote and ("://" in remote or remote.startswith(("/", "~", ".")) or re.match(r"^[^/:]+@[^:]+:", remote)
                   or Path(os.path.expanduser(remote)).exists()):
        if "://" in remote or re.match(r"^[^/:]+@[^:]+:", remote):
            return remote
        return str(Path(os.path.expanduser(remote)).resolve())
    gitdir = user_gitdir(engine)
    name = remote or "origin"
    if gitdir is None:
        raise BadInput(f"no remote given and {engine.root} is not in a git repository: pass a URL or a path")
    try:
        url = pygit2.Repository(str(gitdir)).remotes[name].url
    except (KeyError, pygit2.GitError):
        url = None
    if not url:
        raise NotFound(f"the repository {gitdir} has no remote {name!r}: pass a URL or a path")
    return url


def _remote_refs(remote) -> dict[str, pygit2.Oid]:
    out = {}
    for h in remote.list_heads():
        name = getattr(h, "name", None)
        oid = getattr(h, "oid", None) or getattr(h, "id", None)
        if name and oid is not None and _is_ours(name) and not name.endswith("^{}"):
            out[name] = _oid(oid)
    return out


def _fetch_verified(engine, url: str, refs: dict[str, pygit2.Oid]) -> None:
    """Fetch the objects behind remote refs the store lacks into a quarantine, check every tree
    they bring (pathsafe), and only then move them into the store. A refused remote leaves no
    object behind (BadInput)."""
    repo = engine.repo
    want = {n: o for n, o in refs.items() if o not in repo}
    if not want:
        return
    with _quarantine(engine) as q:
        # the store's tips as refs of the quarantine (objects reached through alternates): the
        # negotiation then asks only for what is new
        for i, (_n, oid) in enumerate(sorted((n, _ref_target(repo, n)) for n in repo.references if _is_ours(n))):
            if oid is not None:
                with contextlib.suppress(pygit2.GitError, ValueError):
                    q.references.create(f"{SYNC_HAVE_PREFIX}{i}", oid, force=True)
        try:
            q.remotes.create_anonymous(url).fetch([f"+{n}:{SYNC_WANT_PREFIX}{i}" for i, n in enumerate(sorted(want))],
                                                  message="tc-git: sync")
        except pygit2.GitError as e:
            raise Unavailable(f"fetch from {url} failed: {e}") from e
        q = pygit2.Repository(q.path)
        lacking = [n for n, o in want.items() if o not in q]
        if lacking:
            raise Unavailable(f"the remote {url} did not send {', '.join(sorted(lacking)[:5])}: try again")
        _refuse_hostile_trees(q, want.values(), repo, f"remote {url}")
        _adopt_packs(q, engine.store)
        _adopt_loose(q, engine.store)
    engine.store.reopen()


def push(engine, remote: str | None = None) -> dict:
    """Send every task/session/milestone ref and the notes to a git remote (explicit refspecs)."""
    engine._require_store()
    url = _resolve_remote(engine, remote)
    with engine.store.lock():
        repo = engine.repo
        r = repo.remotes.create_anonymous(url)
        try:
            theirs = _remote_refs(r)
        except pygit2.GitError as e:
            raise Unavailable(f"cannot reach remote {url}: {e}") from e
        _fetch_verified(engine, url, theirs)
        repo = engine.repo
        ours = {n: _ref_target(repo, n) for n in repo.references if _is_ours(n) and _valid_ref(n)}
        ours = {n: o for n, o in ours.items() if o is not None}
        to_push, behind, conflicts, notes_state = [], [], {}, None
        for name, oid in sorted(ours.items()):
            rel = _relation(repo, theirs.get(name), oid)
            if rel == "equal":
                continue
            if name == NOTES_REF and rel == "diverged":
                merged, notes_state = merge_notes(repo, oid, theirs[name])
                _cas_update(repo, {NOTES_REF: (oid, merged)}, "tc-git: merge notes before push")
                to_push.append(name)
            elif rel in ("absent", "behind"):
                to_push.append(name)
            elif rel == "ahead":
                behind.append(name)
            else:
                conflicts[name] = "diverged: the remote has commits this store lacks and vice versa"
        cb = _PushCallbacks()
        if to_push:
            try:
                # a fresh remote: the one above is connected in the fetch direction
                repo.remotes.create_anonymous(url).push([f"{n}:{n}" for n in to_push], callbacks=cb)
            except pygit2.GitError as e:
                raise Conflict(f"push to {url} failed: {e}") from e
    if cb.rejected:
        raise Conflict(f"the remote {url} rejected " + "; ".join(f"{k} ({v})" for k, v in sorted(cb.rejected.items()))
                       + (f"; accepted: {', '.join(sorted(cb.accepted))}" if cb.accepted else ""))
    return {"remote": url, "ok": not conflicts, "pushed": to_push, "remote_ahead": behind, "conflicts": conflicts,
            "notes": notes_state or ("pushed" if NOTES_REF in to_push else "unchanged"),
            "up_to_date": len(ours) - len(to_push) - len(behind) - len(conflicts)}


def pull(engine, remote: str | None = None) -> dict:
    """Fetch every task/session/milestone ref and the notes from a git remote and integrate them:
    new refs are created, fast-forwards applied, diverged notes merged, other divergence reported."""
    url = _resolve_remote(engine, remote)
    created_store = False
    if not engine.store.exists:
        engine.store.create()
        created_store = True
    try:
        return _pull(engine, url, created_store)
    except BadInput:
        if created_store:  # a refused remote writes nothing, not even the store this pull made
            shutil.rmtree(engine.store.path, ignore_errors=True)
        raise


def _pull(engine, url: str, created_store: bool) -> dict:
    with engine.store.lock():
        repo = engine.repo
        r = repo.remotes.create_anonymous(url)
        try:
            theirs = {n: o for n, o in _remote_refs(r).items() if _valid_ref(n)}
        except pygit2.GitError as e:
            raise Unavailable(f"cannot reach remote {url}: {e}") from e
        _fetch_verified(engine, url, theirs)
        repo = engine.repo
        updates, report = {}, {"created": [], "fast_forwarded": [], "local_ahead": [], "conflicts": {}}
        notes_state = None
        for name, oid in sorted(theirs.items()):
            ours = _ref_target(repo, name)
            if name == NOTES_REF:
                merged, notes_state = merge_notes(repo, ours, oid)
                if merged != ours:
                    updates[name] = (ours, merged)
                continue
            rel = _relation(repo, ours, oid)
            if rel == "absent":
                updates[name] = (ours, oid)
                report["created"].append(name)
            elif rel == "behind":
                updates[name] = (ours, oid)
                report["fast_forwarded"].append(name)
            elif rel == "ahead":
                report["local_ahead"].append(name)
            elif rel == "diverged":
                report["conflicts"][name] = "diverged: kept the local ref; import the remote one under a new id"
        _cas_update(repo, updates, "tc-git: pull")
        active = engine.store.active_task()
        moved_tasks = [n for n in report["created"] + report["fast_forwarded"] if _task_of(n)]
        git = mirror(engine, lambda repo: {n: _ref_target(repo, n) for n in moved_tasks + [NOTES_REF]
                                           if _ref_target(repo, n) is not None}, None) if moved_tasks else None
    moved = bool(active and head_ref(active) in report["fast_forwarded"])
    return {"remote": url, "ok": not report["conflicts"], **report, "notes": notes_state or "unchanged",
            "store_created": created_store, "active_task_moved": moved, "git": git,
            "hint": _restore_hint(engine, active) if moved else None}


def _restore_hint(engine, task_id: str) -> str | None:
    head = Timeline(engine.repo, task_id).head()
    if head.kind == "drift" and head.drift:
        return f"the active task moved: preview the files with `tc-git restore {head.drift}` (add --apply)"
    if head.step:
        return f"the active task moved: preview the files with `tc-git restore {head.step}` (add --apply)"
    return None
