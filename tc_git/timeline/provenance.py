"""Line provenance: which step or drift last changed each line of a file, and the tool call
(and so the prompt) behind it.

Derived from history tc-git already keeps. The code timeline gives the line history: each
commit of a task's chain is compared with its first parent, file by file, with a line diff
(common prefix and suffix trimmed, `difflib` on the rest); a line the diff keeps keeps its
origin, a new line takes the commit as its origin. A drift whose note names a tool call (the
PostToolUse hook's capture) attributes its new lines to that call; a step, a drift without a
call (the watcher, a manual capture), a restore's or an import's own lines are *unattributed*
(the person, another process): never guessed. A restore that brings a file back as it was at
its target keeps the target's origins.

What a commit did is stored per commit as a note on `refs/notes/checkpoints-blame` (JSON, one
field a line): who made it (`by`), and for each text file it changed the lines added and
removed and the origin of every line as runs over an `origins` table, so blame at any point
reads one note per file. Notes are computed for the commits that lack one (oldest first, each
from its parent's) and are a pure function of the chain: recomputing writes the same bytes,
and a store that imported the task (the notes travel with it, or are recomputed) answers the
same.

The conversation is joined at question time: a call's id, agent and session name the recorded
session (`refs/checkpoints/sessions/<agent>-<session>/`), whose events hold the call, the
assistant's words before it and the user prompt that led to it. Where the conversation is
recorded, the lines a drift gave its call are checked against what the call wrote (a Write's
content, an Edit's replacement applied to the file before it, a patch's added lines): a line
the call did not write (a hand edit caught in the same capture) is unattributed.
"""
from __future__ import annotations

import difflib
import json
from dataclasses import dataclass, field
from typing import Any

import pygit2
from pygit2.enums import FileMode

from ..base.errors import BadInput, NotFound
from ..base.refs import BLAME_NOTES_REF, SESSIONS_PREFIX
from ..storage.trees import tree_deltas
from .chain import Entry, Notes, Timeline, entry_of, signature

VERSION = 1
TEXT_MAX = 8 << 20  # larger files are not blamed (their lines are not diffed)
EDIT_TOOLS = ("Write", "Edit", "MultiEdit", "NotebookEdit", "apply_patch")
UNATTRIBUTED = "unattributed"


# ------------------------------------------------------------------------------- lines
def split_lines(data: bytes) -> list[bytes]:
    """The lines of a file as an editor numbers them (each with its newline, the last maybe not)."""
    if not data:
        return []
    lines = data.split(b"\n")
    if lines[-1] == b"":
        lines.pop()
        return [ln + b"\n" for ln in lines]
    return [ln + b"\n" for ln in lines[:-1]] + [lines[-1]]


def is_text(data: bytes) -> bool:
    return len(data) <= TEXT_MAX and b"\0" not in data[:8000]


def carry(old: list[bytes], old_origin: list[int], new: list[bytes], origin: int) -> tuple[list[int], int, int]:
    """The origins of `new`'s lines: a line the diff keeps from `old` keeps its origin, a new one
    gets `origin`. Returns (origins, added, removed). libgit2's line diff (git's, in C); the
    pure-Python one below where it cannot say (binary-looking content)."""
    if old and new:
        got = _carry_git(old, old_origin, new, origin)
        if got is not None:
            return got
    return _carry_py(old, old_origin, new, origin)


def _carry_git(old: list[bytes], old_origin: list[int], new: list[bytes],
               origin: int) -> tuple[list[int], int, int] | None:
    patch = pygit2.Patch.create_from(b"".join(old), b"".join(new), context_lines=0)
    if patch.delta.is_binary:
        return None
    out: list[int] = []
    i = added = removed = 0
    for h in patch.hunks:
        start = h.old_start - 1 if h.old_lines else h.old_start  # a pure insertion comes after old_start
        if start < i:
            return None
        out += old_origin[i:start]
        out += [origin] * h.new_lines
        i = start + h.old_lines
        added += h.new_lines
        removed += h.old_lines
    out += old_origin[i:]
    return (out, added, removed) if len(out) == len(new) and i <= len(old) else None


def _carry_py(old: list[bytes], old_origin: list[int], new: list[bytes],
              origin: int) -> tuple[list[int], int, int]:
    n, m = len(old), len(new)
    p = 0
    while p < n and p < m and old[p] == new[p]:
        p += 1
    s = 0
    while s < n - p and s < m - p and old[n - 1 - s] == new[m - 1 - s]:
        s += 1
    out = old_origin[:p]
    added = removed = 0
    a, b = old[p:n - s], new[p:m - s]
    if a and b:
        for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
            if tag == "equal":
                out += old_origin[p + i1:p + i2]
            else:
                out += [origin] * (j2 - j1)
                added += j2 - j1
                removed += i2 - i1
    else:
        out += [origin] * len(b)
        added, removed = len(b), len(a)
    out += old_origin[n - s:]
    return out, added, removed


def runs(origins: list[int]) -> list[list[int]]:
    out: list[list[int]] = []
    for o in origins:
        if out and out[-1][1] == o:
            out[-1][0] += 1
        else:
            out.append([1, o])
    return out


def unruns(rs: list) -> list[int]:
    out: list[int] = []
    for count, o in rs:
        out += [int(o)] * int(count)
    return out


# ------------------------------------------------------------------------------- the notes
def by_of(entry: Entry, record: dict) -> dict:
    """Who made a commit's own lines: a tool call, or unattributed and why."""
    call = record.get("tool_call") if entry.kind == "drift" else None
    if isinstance(call, dict) and call.get("id"):
        keep = ("id", "name", "agent", "session", "turn", "paths", "command")
        return {"tool_call": {k: call[k] for k in keep if k in call}}
    why = {"step": "saved with no recorded tool call (the person, another process, or an agent without hooks)",
           "drift": "captured with no tool call (the watcher, a manual capture)",
           "restore": "written by a restore", "import": "imported", "init": "task start",
           "close": "task close"}.get(entry.kind, entry.kind)
    return {UNATTRIBUTED: why}


def note_bytes(note: dict) -> bytes:
    """One field a line (a file a line under `files`), keys sorted: `git notes show` reads it,
    `json.loads` too, and the same note is always the same bytes."""
    def one(v: Any) -> str:
        return json.dumps(v, ensure_ascii=False, sort_keys=True, separators=(",", ":"))

    parts = []
    for k in sorted(note):
        if k == "files" and note[k]:
            inner = ",\n".join(f"  {one(p)}: {one(note[k][p])}" for p in sorted(note[k]))
            parts.append(f' "files": {{\n{inner}\n }}')
        else:
            parts.append(f" {one(k)}: {one(note[k])}")
    return ("{\n" + ",\n".join(parts) + "\n}\n").encode("utf-8", "surrogateescape")


@dataclass
class Origin:
    commit: str
    id: str  # s0003 / d0004 / r0001 ...
    by: dict
    kind: str = ""
    time: float = 0.0


@dataclass
class Blamer:
    """Reads and completes the blame notes of one task."""

    repo: pygit2.Repository
    tl: Timeline
    notes: dict[str, pygit2.Oid] = field(default_factory=dict)  # commit hex -> blob of the note
    new: dict[str, bytes] = field(default_factory=dict)  # notes computed here, not yet written
    _parsed: dict[str, dict] = field(default_factory=dict)

    def __post_init__(self) -> None:
        ref = self.repo.references.get(BLAME_NOTES_REF)
        if ref is None:
            return
        stack = [("", self.repo[ref.target].peel(pygit2.Commit).tree)]
        while stack:  # written flat here; git fans a big notes tree out (ab/cdef...) when it rewrites one
            prefix, tree = stack.pop()
            for e in tree:
                name = prefix + (e.name or "")
                if e.type_str == "tree":
                    stack.append((name, self.repo[e.id].peel(pygit2.Tree)))
                elif e.type_str == "blob":
                    self.notes[name] = e.id

    # -------------------------------------------------------------- reading
    def has(self, commit: str) -> bool:
        return commit in self.new or commit in self.notes

    def note(self, commit: str) -> dict | None:
        if commit in self._parsed:
            return self._parsed[commit]
        if commit in self.new:
            data = self.new[commit]
        elif commit in self.notes:
            data = self.repo[self.notes[commit]].peel(pygit2.Blob).data
        else:
            return None
        try:
            parsed = json.loads(data)
        except ValueError:
            parsed = None
        if not isinstance(parsed, dict) or parsed.get("v") != VERSION:
            return None
        self._parsed[commit] = parsed
        return parsed

    def chain(self, tip: pygit2.Oid) -> list[Entry]:
        """The task's commits from the first to `tip`, oldest first."""
        out = list(self.tl.walk(tip))
        out.reverse()
        return out

    def origins_at(self, commit: str, path: str) -> tuple[list[str], list[str]] | None:
        """(origin commit of each line, origin id of each line) of `path` as it is at `commit`
        (annotated): the newest note at or before it that names the file. None: not text."""
        c: str | None = commit
        while c is not None:
            n = self.note(c)
            if n is None:
                raise NotFound(f"commit {c[:12]} has no blame note yet")
            f = (n.get("files") or {}).get(path)
            if f is not None:
                if f.get("binary"):
                    return None
                table = n.get("origins") or []
                idx = unruns(f.get("lines") or [])
                return [table[i][1] for i in idx], [table[i][0] for i in idx]
            c = n.get("parent")
        return [], []

    # -------------------------------------------------------------- computing
    def ensure(self, tip: pygit2.Oid) -> list[Entry]:
        """Compute the notes the chain up to `tip` lacks (oldest first); returns the chain."""
        chain = self.chain(tip)
        todo = [e for e in chain if not self.has(str(e.oid))]
        if not todo:
            return chain
        records = Notes(self.repo)
        ids = {str(e.oid): e for e in chain}
        for e in todo:
            self._compute(e, records.get(e.oid), ids)
        return chain

    def _compute(self, e: Entry, record: dict, ids: dict[str, Entry]) -> None:
        repo = self.repo
        me = str(e.oid)
        commit = repo[e.oid].peel(pygit2.Commit)
        parent = str(e.parent) if e.parent is not None else None
        new_tree = commit.tree
        old_tree = repo[e.parent].peel(pygit2.Commit).tree if e.parent is not None else None
        target = None
        if e.kind == "restore" and isinstance(record.get("target"), dict):
            t = str(record["target"].get("commit") or "")
            if t in ids and self.note(t) is not None:
                target = t
        files: dict[str, dict] = {}
        table: list[list[str]] = []
        index: dict[str, int] = {}

        def ix(oid_hex: str, ident: str) -> int:
            if oid_hex not in index:
                index[oid_hex] = len(table)
                table.append([ident, oid_hex])
            return index[oid_hex]

        for d in tree_deltas(repo, old_tree, new_tree):
            if d.status == "D":
                continue
            path = d.path
            try:
                blob = _blob(repo, new_tree, path)
            except KeyError:
                continue
            if blob is None:
                continue
            data = blob.data
            if not is_text(data):
                files[path] = {"binary": True}
                continue
            new_lines = split_lines(data)
            base_commit, base_tree = parent, old_tree
            if target is not None:
                ttree = repo[pygit2.Oid(hex=target)].peel(pygit2.Commit).tree
                tb = _blob(repo, ttree, path)
                if tb is not None and tb.id == blob.id:  # brought back as it was: its origins too
                    base_commit, base_tree = target, ttree
            old_lines: list[bytes] = []
            old_o: list[int] = []
            if base_commit is not None and base_tree is not None:
                ob = _blob(repo, base_tree, path)
                if ob is not None and is_text(ob.data):
                    got = self.origins_at(base_commit, path)
                    if got is not None:
                        old_lines = split_lines(ob.data)
                        commits, idents = got
                        old_o = [ix(c, i) for c, i in zip(commits, idents, strict=True)]
                        if len(old_o) != len(old_lines):  # a note that does not fit: start over
                            old_o = []
                            old_lines = []
            mine = ix(me, e.id)
            origins, added, removed = carry(old_lines, old_o, new_lines, mine)
            files[path] = {"added": added, "removed": removed, "lines": runs(origins)}
        # the table keeps only what the runs use, in first-use order (the same bytes every time)
        used: dict[int, int] = {}
        for f in files.values():
            for r in f.get("lines") or ():
                if r[1] not in used:
                    used[r[1]] = len(used)
                r[1] = used[r[1]]
        origins_table = [table[i] for i in sorted(used, key=used.__getitem__)]
        note = {"v": VERSION, "id": e.id, "kind": e.kind, "parent": parent, "by": by_of(e, record),
                "files": files, "origins": origins_table}
        self.new[me] = note_bytes(note)
        self._parsed.pop(me, None)

    def write(self) -> int:
        """Write the computed notes as one commit on the blame notes ref; returns how many."""
        if not self.new:
            return 0
        repo = self.repo
        ref = repo.references.get(BLAME_NOTES_REF)
        parent = repo[ref.target].peel(pygit2.Commit) if ref is not None else None
        tb = repo.TreeBuilder(parent.tree) if parent is not None else repo.TreeBuilder()
        for name, data in sorted(self.new.items()):
            tb.insert(name, repo.create_blob(data), FileMode.BLOB)
        sig = signature()
        oid = repo.create_commit(None, sig, sig, "Line provenance (tc-git blame)\n", tb.write(),
                                 [parent.id] if parent is not None else [])
        if ref is None:
            repo.references.create(BLAME_NOTES_REF, oid)
        else:
            ref.set_target(oid, "tc: blame notes")
        n = len(self.new)
        for name in self.new:
            self.notes[name] = repo[oid].peel(pygit2.Commit).tree[name].id
        self.new.clear()
        return n


def line_shares(repo: pygit2.Repository, tl: Timeline, only: set[str] | None = None
                ) -> tuple[dict[str, dict[str, int]], dict[str, int] | None]:
    """Lines added by agent tool calls and by others, from the blame notes that exist (nothing
    is computed): per commit (a step: with the drifts since the previous step), and for the
    whole task when every commit has its note (else None). `only`: just these commits, read
    from the head down to the step before the oldest of them (a page of `log`), no total."""
    b = Blamer(repo, tl)
    if not b.notes:
        return {}, None
    if only is not None:
        return _shares_of(b, tl, set(only)), None
    out: dict[str, dict[str, int]] = {}
    total: dict[str, int] | None = {"agent": 0, "other": 0}
    since: dict[str, int] | None = {"agent": 0, "other": 0}
    for e in reversed(list(tl.walk())):
        mine = _added(b, str(e.oid))
        total = {k: total[k] + mine[k] for k in mine} if total is not None and mine is not None else None
        since = {k: since[k] + mine[k] for k in mine} if since is not None and mine is not None else None
        if e.kind == "step":
            if since is not None:
                out[str(e.oid)] = since
            since = {"agent": 0, "other": 0}  # (a step without its note: the next step's span is whole)
        elif mine is not None:
            out[str(e.oid)] = mine
    return out, total


def _added(b: Blamer, oid: str) -> dict[str, int] | None:
    n = b.note(oid) if b.has(oid) else None
    if n is None:
        return None
    added = sum(int(f.get("added") or 0) for f in (n.get("files") or {}).values())
    return {"agent": added, "other": 0} if "tool_call" in (n.get("by") or {}) else {"agent": 0, "other": added}


def _shares_of(b: Blamer, tl: Timeline, only: set[str]) -> dict[str, dict[str, int]]:
    """line_shares for `only`, newest first: a step's share is its own lines and those of the
    commits after the step before it (unknown if one of them has no note)."""
    out: dict[str, dict[str, int]] = {}
    step: str | None = None  # the step whose span is being summed (older commits join it)
    since: dict[str, int] | None = None
    for e in tl.walk():
        oid = str(e.oid)
        if e.kind == "step":
            if step is not None and since is not None:
                out[step] = since
            step = since = None
            if not only:
                break
            if oid in only:
                only.discard(oid)
                step, since = oid, _added(b, oid)
            continue
        mine = _added(b, oid)
        if oid in only:
            only.discard(oid)
            if mine is not None:
                out[oid] = mine
        if step is not None:
            since = {k: since[k] + mine[k] for k in mine} if since is not None and mine is not None else None
    if step is not None and since is not None:  # the first step: its span runs to the task's start
        out[step] = since
    return out


def follow(repo: pygit2.Repository, tl: Timeline, oid: pygit2.Oid) -> bool:
    """Keep the notes up to date as commits are written: once a task has been blamed (its
    parent commit has a note), a new step or drift gets its note at once (one commit's diff),
    so blame stays a read. Before that, nothing (blame computes what is missing)."""
    b = Blamer(repo, tl)
    c = repo[oid].peel(pygit2.Commit)
    if not c.parent_ids or not b.has(str(c.parent_ids[0])) or b.has(str(oid)):
        return False
    for e in tl.walk(oid):
        b._compute(e, tl.record(oid), {})
        break
    b.write()
    return True


def _blob(repo: pygit2.Repository, tree: pygit2.Tree, path: str) -> pygit2.Blob | None:
    try:
        obj = tree[path]
    except KeyError:
        return None
    if obj.type_str != "blob" or obj.filemode == FileMode.LINK:
        return None
    return repo[obj.id].peel(pygit2.Blob)


# ------------------------------------------------------------------------------- the conversation
@dataclass
class CallEvent:
    """A tool call found in a recorded conversation, and what led to it."""

    event: str  # the tool_call event commit
    session: str  # <agent>-<session>
    name: str
    input: Any
    prompt: str | None = None
    prompt_event: str | None = None
    said: str | None = None  # the assistant's words before the call
    said_event: str | None = None


class Conversations:
    """Tool calls by id, read once per session from its recorded events."""

    def __init__(self, repo: pygit2.Repository):
        self.repo = repo
        self._sessions: dict[str, dict[str, str]] = {}

    def _call_events(self, sname: str) -> dict[str, str]:
        if sname in self._sessions:
            return self._sessions[sname]
        found: dict[str, str] = {}
        prefix = f"{SESSIONS_PREFIX}{sname}/"
        seen: set[pygit2.Oid] = set()
        for r in sorted(self.repo.references):
            if not r.startswith(prefix):
                continue
            oid: pygit2.Oid | None = pygit2.Oid(hex=str(self.repo.references[r].target))
            while oid is not None and oid not in seen:
                seen.add(oid)
                c = self.repo[oid].peel(pygit2.Commit)
                if c.message.startswith("tool_call "):
                    cid = _event_json(c).get("call_id")
                    if isinstance(cid, str):
                        found.setdefault(cid, str(c.id))
                oid = c.parent_ids[0] if c.parent_ids else None
        self._sessions[sname] = found
        return found

    def find(self, call: dict) -> CallEvent | None:
        cid, agent, session = call.get("id"), call.get("agent"), call.get("session")
        if not (isinstance(cid, str) and isinstance(agent, str) and isinstance(session, str)):
            return None
        from ..trajectory.recorder import load_event, session_name  # (here: `log` and `show` never load it)

        sname = session_name(agent, session)
        ev = self._call_events(sname).get(cid)
        if ev is None:
            return None
        rec = load_event(self.repo, ev)
        out = CallEvent(event=ev, session=sname, name=str(rec.get("tool_name") or call.get("name") or "?"),
                        input=rec.get("tool_input"))
        c = self.repo[pygit2.Oid(hex=ev)].peel(pygit2.Commit)
        while c.parent_ids:
            c = self.repo[c.parent_ids[0]].peel(pygit2.Commit)
            subject = c.message
            if subject.startswith("assistant: ") and out.said is None:
                r = load_event(self.repo, c)
                out.said, out.said_event = str(r.get("text") or ""), str(c.id)
            elif subject.startswith("user: "):
                r = load_event(self.repo, c)
                out.prompt, out.prompt_event = str(r.get("text") or ""), str(c.id)
                break
        return out


def _event_json(c: pygit2.Commit) -> dict:
    try:
        data = json.loads(c.tree["event.json"].peel(pygit2.Blob).data)
    except (KeyError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def written_lines(name: str, inp: Any, before: bytes | None) -> set[bytes] | None:
    """The lines (without newline) a file tool's call wrote into the file, from its recorded
    input: None when it cannot be said (an unknown tool, a Bash command)."""
    if not isinstance(inp, dict):
        return None

    def lines(text: str) -> set[bytes]:
        return {ln.rstrip(b"\r") for ln in text.encode("utf-8", "surrogateescape").split(b"\n")}

    if name == "Write" and isinstance(inp.get("content"), str):
        return lines(inp["content"])
    edits = inp.get("edits") if name == "MultiEdit" else [inp] if name == "Edit" else None
    if isinstance(edits, list):
        text = (before or b"").decode("utf-8", "surrogateescape")
        out: set[bytes] = set()
        for ed in edits:
            if not isinstance(ed, dict) or not isinstance(ed.get("new_string"), str):
                return None
            old, new = ed.get("old_string"), ed["new_string"]
            if isinstance(old, str) and old and old in text:
                text = text.replace(old, new) if ed.get("replace_all") else text.replace(old, new, 1)
            out |= lines(new)
        return out | lines(text)  # the edited text's lines: a replacement inside a line makes a new line
    patch = inp.get("command") or inp.get("input") or inp.get("patch")
    if name == "apply_patch" or (isinstance(patch, str) and "*** Begin Patch" in patch):
        if not isinstance(patch, str):
            return None
        return {ln[1:].encode("utf-8", "surrogateescape") for ln in patch.split("\n")
                if ln.startswith("+") and not ln.startswith("+++")}
    return None


# ------------------------------------------------------------------------------- blame
@dataclass
class Line:
    n: int
    text: str
    origin: Origin
    attributed: bool
    call: dict | None = None
    why: str | None = None  # when a drift's call did not write it
    raw: bytes = b""


def blame(repo: pygit2.Repository, tl: Timeline, at: Entry, path: str,
          write: bool = True) -> tuple[list[Line], Blamer, Conversations]:
    """Every line of `path` as it is at `at`, with its origin (the notes the chain lacks are
    computed, and written when `write`)."""
    b = Blamer(repo, tl)
    b.ensure(at.oid)
    if write:
        b.write()
    tree = repo[at.oid].peel(pygit2.Commit).tree
    blob = _blob(repo, tree, path)
    if blob is None:
        raise NotFound(f"{path} is not a file in {at.id} of task {tl.task_id}: name a workspace-relative "
                       "file path that the point holds")
    got = b.origins_at(str(at.oid), path)
    if got is None:
        raise BadInput(f"{path} is a binary or very large file: blame reads text files only")
    commits, _ids = got
    lines = split_lines(blob.data)
    convs = Conversations(repo)
    origins: dict[str, Origin] = {}
    records = _Records(repo)
    checks: dict[str, tuple[set[bytes] | None, dict | None]] = {}
    out = []
    for i, (ln, c) in enumerate(zip(lines, commits, strict=True)):
        o = origins.get(c)
        if o is None:
            o = origins[c] = _origin(repo, c, records)
        call = o.by.get("tool_call")
        attributed, why = call is not None, None
        if call is not None:
            if c not in checks:
                checks[c] = _check(repo, convs, call, c, path)
            wrote, _ev = checks[c]
            if wrote is not None and ln.rstrip(b"\n").rstrip(b"\r") not in wrote:
                attributed, why = False, f"captured with {call.get('name')} {call.get('id')} but not written by it"
        out.append(Line(n=i + 1, text=ln.decode("utf-8", "replace").rstrip("\n"), origin=o,
                        attributed=attributed, call=call if attributed else None, why=why, raw=ln))
    return out, b, convs


class _Records:
    """The timeline notes, read only when a drift's call is wanted."""

    def __init__(self, repo: pygit2.Repository):
        self.repo = repo
        self.notes: Notes | None = None

    def get(self, oid: pygit2.Oid) -> dict:
        if self.notes is None:
            self.notes = Notes(self.repo)
        return self.notes.get(oid)


def _origin(repo: pygit2.Repository, commit: str, records: _Records) -> Origin:
    """An origin as its commit says it (its trailers; a drift's note for its call): what the
    commit's blame note says in `by`, without parsing that note (the runs of a big file)."""
    c = repo[pygit2.Oid(hex=commit)].peel(pygit2.Commit)
    e = entry_of(c)
    if e is None:
        return Origin(commit=commit, id=commit[:12], by={UNATTRIBUTED: "not a tc-git commit"})
    rec = records.get(c.id) if e.kind == "drift" else {}
    return Origin(commit=commit, id=e.id, by=by_of(e, rec), kind=e.kind, time=float(c.commit_time))


def _check(repo: pygit2.Repository, convs: Conversations, call: dict, commit: str,
           path: str) -> tuple[set[bytes] | None, dict | None]:
    """What the call wrote into `path` (None: not known or not checkable)."""
    if call.get("name") not in EDIT_TOOLS:
        return None, None
    ev = convs.find(call)
    if ev is None:
        return None, None
    c = repo[pygit2.Oid(hex=commit)].peel(pygit2.Commit)
    before = None
    if c.parent_ids:
        pb = _blob(repo, repo[c.parent_ids[0]].peel(pygit2.Commit).tree, path)
        before = pb.data if pb is not None else b""
    return written_lines(ev.name, ev.input, before), None


def shares(b: Blamer, chain: list[Entry]) -> dict[str, dict[str, int]]:
    """Lines added per commit (by id), split into `agent` (a recorded tool call) and `other`."""
    out: dict[str, dict[str, int]] = {}
    for e in chain:
        n = b.note(str(e.oid)) or {}
        added = sum(int(f.get("added") or 0) for f in (n.get("files") or {}).values())
        agent = "tool_call" in (n.get("by") or {})
        out[str(e.oid)] = {"agent": added if agent else 0, "other": 0 if agent else added}
    return out


def with_workspace(lines: list[Line], data: bytes) -> tuple[list[Line], int]:
    """The workspace's file against its last record: a line changed since has the origin
    `workspace` (not recorded yet: unattributed). Returns (lines, how many changed)."""
    new = split_lines(data)
    origins, added, _removed = carry([ln.raw for ln in lines], list(range(len(lines))), new, -1)
    here = Origin(commit="", id="workspace", by={UNATTRIBUTED: "changed since the last record (not captured yet)"},
                  kind="workspace")
    out: list[Line] = []
    for i, (o, raw) in enumerate(zip(origins, new, strict=True)):
        if o < 0:
            out.append(Line(n=i + 1, text=raw.decode("utf-8", "replace").rstrip("\n"), origin=here,
                            attributed=False, raw=raw))
        else:
            src = lines[o]
            out.append(Line(n=i + 1, text=src.text, origin=src.origin, attributed=src.attributed,
                            call=src.call, why=src.why, raw=src.raw))
    return out, added


def short(text: Any, n: int) -> str:
    s = " ".join(str(text or "").split())
    return s if len(s) <= n else s[: n - 1] + "…"


def call_summary(name: str, inp: Any, n: int = 300) -> str:
    """A tool call in one line: its command, its file and a glimpse of what it wrote."""
    if not isinstance(inp, dict):
        return short(f"{name} {inp}", n)
    if isinstance(inp.get("command"), (str, list)) and name != "apply_patch":
        cmd = inp["command"]
        return short(f"{name}: {' '.join(cmd) if isinstance(cmd, list) else cmd}", n)
    path = next((inp[k] for k in ("file_path", "notebook_path", "path") if isinstance(inp.get(k), str)), "")
    body = inp.get("content") or inp.get("new_string") or inp.get("command") or inp.get("input") or ""
    if name == "MultiEdit" and isinstance(inp.get("edits"), list):
        body = f"{len(inp['edits'])} edits"
    return short(f"{name} {path}: {body}", n)


# ------------------------------------------------------------------------------- answers
def origin_view(o: Origin, convs: Conversations, prompt_chars: int = 160) -> dict:
    """One origin as blame lists it: the point, and its call with its prompt when recorded."""
    d: dict[str, Any] = {"kind": o.kind}
    if o.commit:
        d["commit"] = o.commit
    call = o.by.get("tool_call")
    if call is None:
        d[UNATTRIBUTED] = o.by.get(UNATTRIBUTED) or "no recorded tool call"
        return d
    d["tool_call"] = {k: call[k] for k in ("id", "name", "agent", "session", "command") if k in call}
    ev = convs.find(call)
    if ev is None:
        d["conversation"] = "not recorded yet (recorded at session end, or `tc-git record <transcript>`)"
    else:
        d["event"] = ev.event
        d["session_ref"] = ev.session
        if ev.prompt is not None:
            d["prompt"] = short(ev.prompt, prompt_chars)
    return d


def report(lines: list[Line], convs: Conversations, start: int = 1, limit: int = 200,
           text: bool = False, budget: int | None = None, head: dict | None = None) -> dict:
    """Blame as hunks (runs of lines with one origin and verdict), the origins they name, and
    the shares of the whole file; `start`/`limit` page the hunks by line number; `budget`: the
    hunks are cut (from the end) until the JSON answer (`head` and this) is at most that many
    bytes, and `next_start` says where to go on."""
    hunks: list[dict] = []
    origins: dict[str, dict] = {}
    share = {"agent": 0, "other": 0}
    for ln in lines:
        share["agent" if ln.attributed else "other"] += 1
    shown = [ln for ln in lines if ln.n >= start][:limit]
    for ln in shown:
        key = ln.origin.id
        verdict = "agent" if ln.attributed else UNATTRIBUTED
        h = hunks[-1] if hunks else None
        if h is not None and h["id"] == key and h["by"] == verdict and h["end"] == ln.n - 1 \
                and h.get("why") == ln.why:
            h["end"] = ln.n
        else:
            h = {"start": ln.n, "end": ln.n, "id": key, "by": verdict}
            if ln.why:
                h["why"] = ln.why
            if not text:
                h["first"] = short(ln.text, 60)
            hunks.append(h)
        if text:
            h.setdefault("text", []).append(ln.text)
        if key not in origins:
            origins[key] = origin_view(ln.origin, convs)
    last = shown[-1].n if shown else start - 1
    out = {**(head or {}), "lines_total": len(lines), "shares": share, "hunks": hunks, "origins": origins,
           "next_start": last + 1 if last < len(lines) else None}
    if budget is None:
        return out

    def size(v: Any) -> int:
        return len(json.dumps(v, ensure_ascii=False).encode())

    total = size(out)
    uses: dict[str, int] = {}
    for h in hunks:
        uses[h["id"]] = uses.get(h["id"], 0) + 1
    while len(hunks) > 1 and total > budget:  # estimated as it goes (one dumps, not one per hunk)
        cut = hunks.pop()
        total -= size(cut) + 2
        out["next_start"] = cut["start"]
        uses[cut["id"]] -= 1
        if not uses[cut["id"]]:
            total -= size(origins.pop(cut["id"])) + size(cut["id"]) + 2
        if total <= budget:
            total = size(out)
    return out


def explain(ln: Line, convs: Conversations, chars: int = 600) -> dict:
    """Why one line is there: its point, and the prompt, the assistant's words and the call."""
    o = ln.origin
    d: dict[str, Any] = {"line": ln.n, "text": short(ln.text, 200), "id": o.id, "kind": o.kind}
    if o.commit:
        d["commit"] = o.commit
    call = o.by.get("tool_call")
    if not ln.attributed:
        d[UNATTRIBUTED] = ln.why or o.by.get(UNATTRIBUTED) or "no recorded tool call"
    if call is None:
        return d
    d["tool_call"] = {k: call[k] for k in ("id", "name", "agent", "session", "turn", "paths", "command") if k in call}
    ev = convs.find(call)
    if ev is None:
        d["conversation"] = "not recorded yet (recorded at session end, or `tc-git record <transcript>`)"
        return d
    d["session_ref"] = ev.session
    d["event"] = ev.event
    d["call"] = call_summary(ev.name, ev.input, chars // 2)
    if ev.said is not None:
        d["said"], d["said_event"] = short(ev.said, chars), ev.said_event
    if ev.prompt is not None:
        d["prompt"], d["prompt_event"] = short(ev.prompt, chars), ev.prompt_event
    return d
