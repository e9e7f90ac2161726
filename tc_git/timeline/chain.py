"""The code timeline of a task: one append-only chain of commits per task.

Every step, drift, restore, import and close is a commit on
`refs/checkpoints/tasks/<task-id>/head` whose tree is the workspace. The message is written
for people (`git log` reads like a work log: title, conclusion, trailers); the machine-readable
record of each commit (the task's metadata, counters, paths kept out of the tree) is its note
on `refs/notes/checkpoints`. A task's whole state is derived from its head commit and note, so
the refs and notes are the single source of truth and travel with a bundle or a push.
"""
from __future__ import annotations

import json
import os
import re
import stat
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import cast

import pygit2

from ..base.errors import Conflict, Hint, NotFound
from ..base.refs import NOTES_REF, TASK_HEAD_RE, TASKS_PREFIX, task_ref
from ..base.results import EntryView, LeftOut
from ..storage import savepack
from ..storage.store import commit_bytes, read_note, signature  # noqa: F401  (read_note re-exported: view, tests)
from ..storage.trees import TREE_ENTRY, TREE_RECORDS, tree_deltas
from ..workspace.secrets import redact_obj

SEE_IDS = Hint("show", {"include_drift": True}, "see the ids with")

KINDS = ("init", "step", "drift", "restore", "import", "close")
TASK_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


head_ref = task_ref  # the older name, used across the engine


class Notes:
    """Every note of `refs/notes/checkpoints`, read once from the notes tree: libgit2's
    `lookup_note` re-reads that tree per call (about 6 ms each at 2,000 notes)."""

    def __init__(self, repo: pygit2.Repository):
        self.repo = repo
        self.blobs: dict[str, pygit2.Oid] = {}
        ref = repo.references.get(NOTES_REF)
        if ref is None:
            return
        stack: list[tuple[str, pygit2.Tree]] = [("", repo[ref.target].peel(pygit2.Commit).tree)]
        while stack:  # notes trees may fan out (ab/cdef...)
            prefix, tree = stack.pop()
            for entry in tree:
                name = entry.name or ""
                if entry.type_str == "tree":
                    stack.append((prefix + name, repo[entry.id].peel(pygit2.Tree)))
                else:
                    self.blobs[prefix + name] = entry.id

    def get(self, oid) -> dict:
        blob = self.blobs.get(str(oid))
        if blob is None:
            return {}
        try:
            data = json.loads(self.repo[blob].peel(pygit2.Blob).data)
        except (ValueError, KeyError):
            return {}
        return data if isinstance(data, dict) else {}


def note_text(record: dict) -> str:
    """The note's JSON, indented so `git log --notes=checkpoints` reads one field a line (older
    stores hold one-line JSON: json.loads reads both). A non-UTF-8 file name (a surrogate-escaped
    str) cannot be written as UTF-8, so such a record is \\u-escaped instead (same str back)."""
    text = json.dumps(record, ensure_ascii=False, sort_keys=True, indent=1) + "\n"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = json.dumps(record, ensure_ascii=True, sort_keys=True, indent=1) + "\n"
    return text


def _one_line(s: str) -> str:
    return " ".join(str(s).split())


@dataclass
class Entry:
    """One commit of a timeline, as read back."""

    oid: pygit2.Oid
    kind: str
    step: int  # current step after this commit (0 before the first step)
    drift: str | None
    title: str
    time: float
    parent: pygit2.Oid | None
    record: dict = field(default_factory=dict)  # the note, loaded on demand
    restore: str | None = None  # rNNNN (Tc-Restore trailer; restores written before it have none)

    @property
    def id(self) -> str:
        if self.kind == "drift" and self.drift:
            return self.drift
        if self.kind == "restore" and self.restore:
            return self.restore
        return f"s{self.step:04d}"


def format_message(kind: str, record: dict) -> str:
    """The commit message: a subject for `git log --oneline`, the conclusion, then trailers."""
    title = _one_line(record.get("title") or "")
    if kind == "step":
        subject = f"step {record['step']}: {title}"
    elif kind == "drift":
        subject = f"drift {record['drift']}: {title}"
    elif kind == "restore":
        rid = f" {record['restore']}" if record.get("restore") else ""
        subject = f"restore{rid}: to {record['target']['id']}"
    else:
        subject = f"{kind}: {title}" if title else kind
    body = [p for p in (record.get("conclusion") or "", record.get("description") or "") if p.strip()]
    trailers = [("Tc-Task", record["task"]["id"]), ("Tc-Kind", kind), ("Tc-Step", str(record["step"]))]
    if record.get("drift"):
        trailers.append(("Tc-Drift", record["drift"]))
    if record.get("restore"):
        trailers.append(("Tc-Restore", record["restore"]))
    if record.get("next"):
        trailers.append(("Next", record["next"]))
    trailers += [("Verified", v) for v in record.get("verified") or ()]
    trailers += [("Open-Question", q) for q in record.get("open_questions") or ()]
    if record.get("trajectory"):
        trailers.append(("Tc-Trajectory", record["trajectory"]))
    if record.get("base"):
        trailers.append(("Tc-Base", record["base"]))
    lines = [subject[:200], ""]
    for para in body:
        lines += [para.rstrip(), ""]
    lines += [f"{k}: {_one_line(v)}" for k, v in trailers]
    return "\n".join(lines) + "\n"


def parse_trailers(message: str) -> dict[str, list[str]]:
    last = message.rstrip("\n").rsplit("\n\n", 1)[-1]
    out: dict[str, list[str]] = {}
    for line in last.splitlines():
        k, sep, v = line.partition(": ")
        if sep and re.fullmatch(r"[A-Za-z][A-Za-z0-9-]*", k):
            out.setdefault(k, []).append(v)
    return out


def entry_of(commit: pygit2.Commit) -> Entry | None:
    t = parse_trailers(commit.message)
    if "Tc-Kind" not in t:
        return None
    subject = commit.message.split("\n", 1)[0]
    title = subject.split(": ", 1)[1] if ": " in subject else ""
    return Entry(
        oid=commit.id, kind=t["Tc-Kind"][0], step=int(t.get("Tc-Step", ["0"])[0]),
        drift=t.get("Tc-Drift", [None])[0], title=title, time=float(commit.commit_time),
        parent=commit.parent_ids[0] if commit.parent_ids else None,
        restore=t.get("Tc-Restore", [None])[0],
    )


class Timeline:
    """Read and append the chain of one task."""

    def __init__(self, repo: pygit2.Repository, task_id: str):
        self.repo = repo
        self.task_id = task_id
        self.ref = head_ref(task_id)
        # the notes this instance read or wrote, by commit: a save reads the head's, the last
        # step's and (for the hook's handoff) the new head's once each. An instance lives for one
        # engine call, under the store's lock or reading a commit's note, which never changes.
        self._records: dict[pygit2.Oid, dict] = {}

    @staticmethod
    def task_ids(repo: pygit2.Repository) -> list[str]:
        return sorted(r[len(TASKS_PREFIX):-len("/head")] for r in repo.references
                      if r.startswith(TASKS_PREFIX) and TASK_HEAD_RE.fullmatch(r))

    def exists(self) -> bool:
        return self.ref in self.repo.references

    def lines(self) -> list[tuple[str, pygit2.Oid]]:
        """Other lines of work on this task not yet joined into its head, [(name, tip)]: kept
        when two machines continued the task (`refs/checkpoints/tasks/<id>/lines/<name>`)."""
        prefix = f"{TASKS_PREFIX}{self.task_id}/lines/"
        names = [r for r in self.repo.references if r.startswith(prefix)]
        if not names:
            return []
        head = self.head_oid()
        out = []
        for r in names:
            tip = self.repo.references[r].resolve().target
            if tip != head and not self.repo.descendant_of(head, tip):
                out.append((r[len(prefix):], cast(pygit2.Oid, tip)))
        return sorted(out)

    def head_oid(self) -> pygit2.Oid:
        try:
            return cast(pygit2.Oid, self.repo.references[self.ref].target)  # a direct ref
        except KeyError:
            raise NotFound(f"unknown task {self.task_id}", Hint("tasks", {}, "list tasks with")) from None

    def head(self) -> Entry:
        e = cast(Entry, entry_of(self.repo[self.head_oid()].peel(pygit2.Commit)))  # ours: it has Tc-Kind
        e.record = self.record(e.oid)
        return e

    _notes: tuple[pygit2.Oid, dict[bytes, tuple[bytes, bytes]]] | None = None  # (notes commit, its top level)

    def _note_blob(self, hexid: str) -> pygit2.Oid | None:
        """The note blob of a commit, from the notes tree read once per notes commit (libgit2's
        lookup_note reads and parses the whole tree again at each call: O(notes) per record,
        ~6 ms at 2,000). The ref is read at each call, so a note written since is seen. Read as
        raw trees: a pygit2 `tree[name]` keeps every name asked for until the process ends
        (~90 bytes a lookup: +2 MiB per 25,000 listed entries in a long-lived server)."""
        ref = self.repo.references.get(NOTES_REF)
        if ref is None:
            return None
        target = cast(pygit2.Oid, ref.target)
        notes = self._notes
        if notes is None or notes[0] != target:
            top = self.repo[target].peel(pygit2.Commit).tree_id.raw
            notes = self._notes = (target, _tree_records(self.repo, top, keep=False))  # (new at each record)
        key = hexid.encode("ascii")
        hit = notes[1].get(key)  # flat
        if hit is None:  # git's 2/38 fan-out
            sub = notes[1].get(key[:2])
            hit = _tree_records(self.repo, sub[1]).get(key[2:]) if sub is not None and _is_dir(sub[0]) else None
        return pygit2.Oid(raw=hit[1]) if hit is not None and not _is_dir(hit[0]) else None

    def record(self, oid) -> dict:
        """The note of commit `oid` (the same dict each time for one instance: not to be changed)."""
        got = self._records.get(oid)
        if got is not None:
            return got
        try:
            blob = self._note_blob(str(oid))
            if blob is not None:
                got = json.loads(self.repo[blob].peel(pygit2.Blob).data)
            else:
                got = json.loads(self.repo.lookup_note(str(oid), NOTES_REF).message)
            self._records[oid] = got
            return got
        except KeyError:
            # The note is written before the ref moves, so this only happens for commits made
            # by something else; fall back to what the trailers say.
            c = self.repo[oid].peel(pygit2.Commit)
            t = parse_trailers(c.message)
            return {"task": {"id": self.task_id}, "kind": t.get("Tc-Kind", ["?"])[0],
                    "step": int(t.get("Tc-Step", ["0"])[0]), "next": t.get("Next", [""])[0],
                    "verified": t.get("Verified", []), "open_questions": t.get("Open-Question", []),
                    "title": c.message.split("\n", 1)[0]}

    def walk(self, start=None):
        """Entries newest first, along first parents (fresh copies: a caller may set `record`).

        From the head, the chain is read through a per-process memo (`_chain`): a long-lived
        process parses each commit once, and a call reads only the commits made since its last
        one, so `log`, `show`, `find` and `undo` cost O(what they read), not O(history) of commit
        parsing, in the MCP server. Sound because a commit id fixes its whole first-parent
        ancestry: the memo is used only when its head is the current head or an ancestor of it."""
        if start is None:
            yield from _chain(self, _fresh)
            return
        oid = start
        while oid is not None:
            c = self.repo[oid]
            e = entry_of(c)
            if e is None:
                return
            yield e
            oid = e.parent

    def entries(self) -> list[Entry]:
        """The whole chain newest first, as the memo holds it (no copies: ~1 us an entry saved,
        10 ms at 10,000 steps): shared, so a caller reads them and never sets `record`."""
        return list(_chain(self, lambda e: e))

    def find(self, ident: str) -> Entry:
        """One point of this task, by any id: a step (`3`, `s0003`), a drift (`d0002`), a restore
        (`r0001`) or a commit id prefix (4+ hex digits)."""
        ident = str(ident).strip()
        if re.fullmatch(r"[dD]\d+", ident):
            want = f"d{int(ident[1:]):04d}"
            match = lambda e: e.kind == "drift" and e.drift == want  # noqa: E731
            what = "drift"
        elif re.fullmatch(r"[sS]?\d+", ident):
            n = int(ident.lstrip("sS"))  # 0: the task's start, its baseline (the init commit)
            start = n == 0 and len(ident.lstrip("sS")) < 7  # (7+ digits: a commit prefix, below)
            match = lambda e: (e.kind == "step" and e.step == n) or (start and e.kind == "init")  # noqa: E731
            what = "step"
        elif re.fullmatch(r"[rR]\d+", ident):
            return self._find_restore(int(ident[1:]), ident)
        elif re.fullmatch(r"[0-9a-fA-F]{4,40}", ident):
            return self._find_commit(ident)
        else:
            raise NotFound(f"{ident!r} is not an id: a step (2 or s0002), a drift (d0001), a restore "
                           "(r0001) or a commit id prefix")
        for e in self.walk():
            if match(e):
                e.record = self.record(e.oid)
                if e.kind == "init" and "files" not in e.record:  # (an empty tree, not the workspace)
                    raise NotFound(f"task {self.task_id} was started before tc-git recorded a baseline at "
                                   "init: its step 0 holds no files", SEE_IDS)
                return e
        if re.fullmatch(r"\d{7,40}", ident):
            # An abbreviated commit id can be all digits (git abbreviates to 7+); no task has a
            # million steps, so a long number that names no step is read as a commit prefix.
            return self._find_commit(ident)
        raise NotFound(f"task {self.task_id} has no {what} {ident}", SEE_IDS)

    def _find_commit(self, prefix: str) -> Entry:
        hits = [e for e in self.walk() if str(e.oid).startswith(prefix.lower())]
        if not hits:  # a commit of another line of this task (lines()) is a point of it too
            seen: set = set()
            for _name, tip in self.lines():
                for e in self.walk(tip):
                    if e.oid in seen:
                        break
                    seen.add(e.oid)
                    if str(e.oid).startswith(prefix.lower()):
                        hits.append(e)
        if len(hits) > 1:
            raise NotFound(f"commit prefix {prefix} is ambiguous in task {self.task_id}: give more digits")
        if hits:
            hits[0].record = self.record(hits[0].oid)
            return hits[0]
        raise NotFound(f"no commit {prefix} in task {self.task_id}", SEE_IDS)

    def _find_restore(self, n: int, ident: str) -> Entry:
        """Restore ids count the task's restores, oldest first; older restores carry no
        Tc-Restore trailer and get the id of their position (the same number)."""
        restores = [e for e in self.walk() if e.kind == "restore"]
        restores.reverse()
        for e in restores:
            if e.restore == f"r{n:04d}":
                break
        else:
            e = restores[n - 1] if 1 <= n <= len(restores) and not restores[n - 1].restore else None
        if e is None:
            raise NotFound(f"task {self.task_id} has no restore {ident}", SEE_IDS)
        e.record = self.record(e.oid)
        return e

    def next_restore_id(self, head_record: dict) -> str:
        n = (head_record.get("counters") or {}).get("restores")
        if n is None:  # a store from before restore ids: count the restores already made
            n = sum(1 for e in self.walk() if e.kind == "restore")
        return f"r{n + 1:04d}"

    def append(self, kind: str, tree, record: dict, expect_parent=None, packed: bool = False,
               joins=None) -> pygit2.Oid:
        """Write commit + note, then move the ref with compare-and-swap. `packed`: the commit,
        the note and the notes tree and commit go into one small pack (`packed_commit`).
        `joins`: a line's tip, the commit's second parent (the line is then part of the task)."""
        assert kind in KINDS
        repo = self.repo
        parent = expect_parent if expect_parent is not None else (
            repo.references[self.ref].target if self.exists() else None)
        record = dict(record, kind=kind, time=record.get("time") or time.time())
        record = redact_obj(record)  # every text of a note/commit passes the secrets engine
        sig = signature(record["time"])
        msg = format_message(kind, record)
        note = note_text(record)
        done = packed_commit(repo, tree, parent, msg, note, int(record["time"])) \
            if packed and joins is None and savepack.available() else None
        if done is not None:
            oid = done
        else:
            oid = repo.create_commit(None, sig, sig, msg, tree, ([parent] if parent else []) + ([joins] if joins else []))
            # Note first: a crash after this leaves a note on an unreachable commit, never a
            # reachable commit without its note.
            if not write_note(repo, str(oid), note, int(record["time"])):
                repo.create_note(note, sig, sig, str(oid), NOTES_REF, True)
        try:
            if parent is None:
                repo.references.create(self.ref, oid)
            else:
                repo.references[self.ref].set_target(oid, f"tc: {kind}")
        except (pygit2.GitError, ValueError) as e:
            raise Conflict(f"task {self.task_id} moved while writing ({e}); retry the operation") from e
        if parent is not None and repo.references[self.ref].target != oid:
            raise Conflict(f"task {self.task_id} head changed concurrently; retry")
        self._records[oid] = json.loads(note)  # (as a reader gets it back)
        return oid


_TREES: OrderedDict[tuple[str, bytes], dict[bytes, tuple[bytes, bytes]]] = OrderedDict()
TREES_KEPT = 64  # notes fan-out directories (~40 entries each at 10,000 notes: ~0.5 MiB in all)


def _is_dir(mode: bytes) -> bool:
    return int(mode, 8) & 0o170000 == 0o040000


def _tree_records(repo: pygit2.Repository, raw: bytes, keep: bool = True) -> dict[bytes, tuple[bytes, bytes]]:
    """A tree's records {name: (mode, raw id)} ({} for what is not a tree); `keep`: kept for
    the trees read last (the notes' fan-out directories: one changes per record)."""
    key = (repo.path, raw)
    with _chains_lock:
        got = _TREES.get(key)
    if got is None:
        kind, data = repo.odb.read(pygit2.Oid(raw=raw))[:2]
        got = {n: (m, i) for m, n, i in TREE_ENTRY.findall(data)} if kind == pygit2.enums.ObjectType.TREE else {}
        if not keep:
            return got
        with _chains_lock:
            _TREES[key] = got
            while len(_TREES) > TREES_KEPT:
                _TREES.popitem(last=False)
    return got


# ---------------------------------------------------------------------------- the chain memo
CHAINS_KEPT = 8  # timelines remembered per process (~0.3 KB per entry: 3 MB for a 10k-step task)
_chains: OrderedDict[tuple[str, str], tuple[pygit2.Oid, list[Entry]]] = OrderedDict()
_chains_lock = threading.Lock()


def _fresh(e: Entry) -> Entry:
    """A copy without the note (dataclasses.replace inspects the fields on every call: ~10x this)."""
    return Entry(e.oid, e.kind, e.step, e.drift, e.title, e.time, e.parent, {}, e.restore)


def _chain(tl: Timeline, copy):
    """The timeline's entries newest first (each through `copy`), read lazily: the commits made
    since the memo's head are parsed as the caller goes (a one-shot `log` of 50 reads 50), then
    the memo's entries follow. The memo is updated once the walk has joined it or reached the
    chain's start (a chain rewritten by compress or an import is read whole once). A process
    starts from the chain file the last long walk left (`_load_chain`), so a one-shot CLI `show`
    at 10,000 steps parses the commits since then, not the whole history."""
    head = tl.head_oid()
    key = (tl.repo.path, tl.ref)
    with _chains_lock:
        hit = _chains.get(key)
    if hit is None:
        hit = _load_chain(tl)
        if hit is not None:  # (a memo from now on, even if this walk stops early)
            with _chains_lock:
                _chains.setdefault(key, hit)
    if hit is not None and hit[0] == head:
        for kept in hit[1]:
            yield copy(kept)
        return
    known = hit[0] if hit is not None else None
    new: list[Entry] = []
    oid: pygit2.Oid | None = head
    while oid is not None and oid != known:
        got = entry_of(cast(pygit2.Commit, tl.repo[oid]))
        if got is None:
            break
        new.append(got)
        yield copy(got)
        oid = got.parent
    joined = hit is not None and oid is not None and oid == known
    chain = new + hit[1] if joined and hit is not None else new
    with _chains_lock:
        _chains[key] = (head, chain)
        _chains.move_to_end(key)
        while len(_chains) > CHAINS_KEPT:
            _chains.popitem(last=False)
    if len(new) >= CHAIN_FILE_AFTER:
        _save_chain(tl, chain)
    if joined and hit is not None:
        for kept in hit[1]:
            yield copy(kept)


# How many files each step changed against the step before it (`show`'s "files changed"): a
# tree difference per listed step, the same answer every time for the same two commits.
_COUNTS: OrderedDict[tuple[str, pygit2.Oid, pygit2.Oid], int] = OrderedDict()
COUNTS_KEPT = 4096


def files_changed_between(repo: pygit2.Repository, old: pygit2.Oid, new: pygit2.Oid) -> int:
    key = (repo.path, old, new)
    with _chains_lock:
        n = _COUNTS.get(key)
    if n is None:
        n = len(tree_deltas(repo, repo[old].peel(pygit2.Tree), repo[new].peel(pygit2.Tree)))
        with _chains_lock:
            _COUNTS[key] = n
            while len(_COUNTS) > COUNTS_KEPT:
                _COUNTS.popitem(last=False)
    return n


# The memo kept on disk, `<store>/tc/chain/<task>.json`: what a walk parsed, written when it parsed
# many commits (a one-shot process after a long session, a rewritten chain), read by the next
# process instead of parsing every commit again (~50-150 us each: 0.5-1.5 s at 10,000 steps).
# A cache, trusted no more than the store it lives in and checked for shape and linkage on read:
# anything else and the chain is read from the commits. Sound for the same reason as the memo:
# the file's head fixes the whole chain below it; a rewritten chain never joins it.
CHAIN_FILE_AFTER = 256  # commits parsed in one walk before the file is rewritten
CHAIN_FILE_MAX = 64 << 20  # bytes read at most (~200k entries); a larger file is ignored


def _chain_path(tl: Timeline) -> str:
    return os.path.join(tl.repo.path, "tc", "chain", f"{tl.task_id}.json")


def _save_chain(tl: Timeline, chain: list[Entry]) -> None:
    if not chain or chain[-1].parent is not None:
        return  # (a chain that stops at a commit tc-git did not write: read it from the commits)
    rows = [[str(e.oid), e.kind, e.step, e.drift, e.title, e.time, str(e.parent) if e.parent else None, e.restore]
            for e in chain]
    path = _chain_path(tl)
    tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump({"version": 1, "rows": rows}, f, separators=(",", ":"))
        os.replace(tmp, path)
    except OSError:  # a read-only or full store: the next process walks the commits
        try:
            os.unlink(tmp)
        except OSError:
            pass


def _load_chain(tl: Timeline) -> tuple[pygit2.Oid, list[Entry]] | None:
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(_chain_path(tl), flags)  # (a FIFO planted there must not block the reader)
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_size > CHAIN_FILE_MAX:
                return None
            rows = json.loads(f.read(CHAIN_FILE_MAX + 1))["rows"]
        chain = [Entry(oid=pygit2.Oid(hex=o), kind=k, step=n, drift=d, title=t, time=float(w),
                       parent=pygit2.Oid(hex=p) if p else None, restore=r)
                 for o, k, n, d, t, w, p, r in rows]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not chain or not all(type(e.step) is int and isinstance(e.kind, str) and isinstance(e.title, str)
                            and isinstance(e.drift, (str, type(None))) and isinstance(e.restore, (str, type(None)))
                            for e in chain):
        return None
    if chain[-1].parent is not None or any(a.parent != b.oid for a, b in zip(chain, chain[1:])):
        return None  # not one first-parent chain down to its start
    return chain[0].oid, chain


# ---------------------------------------------------------------------------- a commit and its note
# The notes tree fans out as git's own (2/38): a note lives in the directory named by the first
# two hex digits of its commit. A flat tree (one entry per commit) made every save rewrite an
# object of ~60 bytes per commit of the history (~23 ms of libgit2's create_note at 1,000 steps);
# fanned out a write rewrites the top level (<= 256 directories) and one directory (notes/256).
# Stock git reads both shapes and mixed ones (`git notes show`, `git log --notes`); a flat store
# (older tc-git, libgit2's create_note of a milestone, an old bundle) is fanned out by the next
# write, once. The commit and the note objects are serialised here byte for byte as libgit2
# writes them (tests/test_timeline_pack.py), loose or into one small pack (`packed`: libgit2
# wrote four loose objects, each a temporary file, a link and a rescan of objects/pack).
NOTES_MESSAGE = b"Notes added by 'git_note_create' from libgit2"  # libgit2's, so both routes look alike
_HEX = re.compile(rb"[0-9a-f]+")
_NOTE_NAME = re.compile(r"[0-9a-f]{40}")  # a note's path, its fan-out directories joined
_DIR = b"40000"  # a tree entry's mode as git writes it
# The top level of the notes tree this process wrote last, per store: (its id, its bytes, where
# each directory's id is in them). The next note rewrites one directory and that one id in place
# (a tree is named by its content: the same id is the same bytes), not 256 parsed and sorted entries.
_TOPS: dict[str, tuple[bytes, bytes, dict[bytes, int]]] = {}


def _note_tree(repo: pygit2.Repository, put, tree_raw: bytes | None, notes: dict[bytes, bytes],
               fanout: int = 0) -> bytes | None:
    """The notes tree `tree_raw` (None: none yet) with `notes` ({hex rest of the commit id at
    this depth: blob id}) set, written through `put(kind, data) -> Oid`. As git_note_create reads
    a tree, a note goes into a fan-out directory named by its next two hex digits when there is
    one, else replaces the entry named by the rest of the id; at the top level a note without
    its directory gets a new one, and the flat notes found there move into theirs. None for a
    tree it does not read that way (the caller leaves the note to libgit2)."""
    top = _TOPS.get(repo.path) if fanout == 0 and len(notes) == 1 else None
    if top is not None and top[0] == tree_raw:  # the top level this process wrote last: one id changes
        (rest, blob), = notes.items()
        at = top[2].get(rest[:2])
        if at is not None:
            new = _note_tree(repo, put, top[1][at:at + 20], {rest[2:]: blob}, 2)
            if new is None:
                return None
            data = top[1][:at] + new + top[1][at + 20:]
            raw = put(2, data).raw
            _TOPS[repo.path] = (raw, data, top[2])
            return raw
    ents: dict[bytes, tuple[bytes, bytes]] = {}
    if tree_raw is not None:
        kind, data = repo.odb.read(pygit2.Oid(raw=tree_raw))[:2]
        if kind != pygit2.enums.ObjectType.TREE or TREE_RECORDS.fullmatch(data) is None:
            return None
        recs = TREE_ENTRY.findall(data)
        ents = {n: (m, i) for m, n, i in recs}
        if len(ents) != len(recs) or any([m != _DIR and m.startswith(b"4") for m, _n, _i in recs]):
            return None  # (a directory spelt as git does not write it: "040000")
    notes = dict(notes)
    if fanout == 0:  # flat notes of the top level move into their directories (once)
        flat = {n: i for n, (m, i) in ents.items() if len(n) == 40 and m != _DIR and _HEX.fullmatch(n)}
        for n in flat:
            del ents[n]
        notes = {**flat, **notes}
    into: dict[bytes, dict[bytes, bytes]] = {}
    for rest, blob in notes.items():
        sub = rest[:2]
        here = ents.get(sub)
        if here is not None and here[0] == _DIR:  # (`sub` is hex: libgit2 looks at hex names only)
            into.setdefault(sub, {})[rest[2:]] = blob
        elif fanout == 0:
            if here is not None:  # a blob named like the directory: not a tree this writes
                return None
            into.setdefault(sub, {})[rest[2:]] = blob
        else:
            ents[rest] = (b"100644", blob)
    for sub, items in into.items():
        here = ents.get(sub)
        new = _note_tree(repo, put, here[1] if here is not None else None, items, fanout + 2)
        if new is None:
            return None
        ents[sub] = (_DIR, new)
    order = sorted([(n + b"/" if m == _DIR else n, m, n, i) for n, (m, i) in ents.items()])  # git's tree order
    parts = [m + b" " + n + b"\0" + i for _k, m, n, i in order]
    data = b"".join(parts)
    raw = put(2, data).raw
    if fanout == 0:  # where each directory's id is in it, for the next write (_TOPS)
        ids, pos = {}, 0
        for (_k, m, n, _i), part in zip(order, parts):
            pos += len(part)
            if m == _DIR:
                ids[n] = pos - 20
        if len(_TOPS) >= 8:
            _TOPS.clear()
        _TOPS[repo.path] = (raw, data, ids)
    return raw


def notes_map(repo: pygit2.Repository, commit_oid) -> dict[str, pygit2.Oid]:
    """Every note of a notes commit: {commit id: note blob}, whatever its fan-out."""
    out: dict[str, pygit2.Oid] = {}
    stack = [("", repo[commit_oid].peel(pygit2.Commit).tree)]
    while stack:
        prefix, tree = stack.pop()
        for e in tree:
            name = prefix + (e.name or "")
            if e.type_str == "tree":
                stack.append((name, repo[e.id].peel(pygit2.Tree)))
            elif e.type_str == "blob" and _NOTE_NAME.fullmatch(name):
                out[name] = e.id
    return out


def notes_tree(repo: pygit2.Repository, notes: dict[str, pygit2.Oid]) -> pygit2.Oid:
    """A notes tree of `notes` ({commit id: note blob}), fanned out as every one this writes."""
    raw = _note_tree(repo, repo.odb.write, None, {k.encode(): v.raw for k, v in notes.items()})
    assert raw is not None  # (a new tree always reads)
    return pygit2.Oid(raw=raw)


def _note_objects(repo: pygit2.Repository, put, target: str, note: str, when: int):
    """The note of commit `target`, its notes tree and the notes commit, written through
    `put(kind, data) -> Oid`: (the notes ref or None, the new notes commit), or None when the
    notes ref or its tree is not one `_note_tree` reads."""
    ref = repo.references.get(NOTES_REF)
    try:
        notes_commit = repo[ref.target].peel(pygit2.Commit) if ref is not None else None
    except (KeyError, ValueError, pygit2.GitError):
        return None
    blob = put(3, note.encode("utf-8"))
    tree = _note_tree(repo, put, notes_commit.tree_id.raw if notes_commit else None, {target.encode(): blob.raw})
    if tree is None:
        return None
    return ref, put(1, commit_bytes(tree.hex(), [str(notes_commit.id)] if notes_commit else [], when, NOTES_MESSAGE))


def _move_notes(repo: pygit2.Repository, ref, new: pygit2.Oid) -> None:
    if ref is None:
        repo.references.create(NOTES_REF, new)
    else:
        ref.set_target(new)


def write_note(repo: pygit2.Repository, target: str, note: str, when: int) -> bool:
    """The note of commit `target` written (loose objects), then the notes ref moved to it.
    False, with the ref unmoved, for a notes tree this does not read (libgit2's then)."""
    got = _note_objects(repo, repo.odb.write, target, note, when)
    if got is None:
        return False
    _move_notes(repo, *got)
    return True


def packed_commit(repo: pygit2.Repository, tree, parent, message: str, note: str, when: int) -> pygit2.Oid | None:
    """Timeline.append's commit and note as one small pack, in place, the notes ref moved to the
    new notes commit (the task's ref is the caller's: note first). None, with nothing written,
    when the notes ref or its tree is not one `_note_tree` reads."""
    pack = savepack.SavePack(repo, loose_max=0)
    try:
        commit = pack.add(1, commit_bytes(str(tree), [str(parent)] if parent else [], when, message.encode("utf-8")))
        got = _note_objects(repo, pack.add, str(commit), note, when)
        if got is None:
            return None
        pack.finish()  # all four in place before a ref names one
    finally:
        pack.close()
    _move_notes(repo, *got)
    return commit


# ---------------------------------------------------------------------------- records as results
# How the front ends see a timeline's commits and notes (the engine shapes results from these).
def iso(t: float | None = None) -> str:
    """A time as the results write it: UTC, second precision, `Z`."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t if t is not None else time.time()))


def status(tl: Timeline, head: Entry, active: str | None) -> str:
    """closed | open (the workspace's active task) | suspended."""
    if head.kind == "close":
        return "closed"
    return "open" if active == tl.task_id else "suspended"


def left_out(record: dict, cap: int = 200) -> list[LeftOut]:
    """Files a commit's snapshot does not hold, and why (from its note): the receiving side of an
    export, an import or a restore must supply them itself."""
    files = record.get("files") or {}
    out: list[LeftOut] = [{"path": x.get("path"), "why": x.get("why"), "reason": x.get("reason", "")}
                          for x in files.get("left", [])]
    out += [{"path": n.get("path"), "why": "nested", "reason": "nested repository (recorded, not stored)"}
            for n in files.get("nested", [])]
    return out[:cap]


def entry_dict(tl: Timeline, e: Entry) -> EntryView:
    """One commit of the timeline as `show` and `log` list it."""
    r = e.record or tl.record(e.oid)
    ch = r.get("changed") or {}
    d: EntryView = {"index": e.step, "id": e.id, "kind": e.kind, "title": r.get("title", e.title),
                    "timestamp": iso(e.time), "commit": str(e.oid), "files_changed": ch.get("count", 0)}
    if e.kind == "step":
        d["description"], d["conclusion"], d["next"] = r.get("description", ""), r.get("conclusion", ""), r.get("next", "")
        d["verified"], d["open_questions"] = r.get("verified", []), r.get("open_questions", [])
    else:
        d["drift_id"] = e.drift
        d["partial"] = bool(r.get("partial"))
        d["restore_point"] = bool(r.get("restore_point"))
        if r.get("target"):
            d["target"] = r["target"]
    return d
