"""Write a Transcript into the store: one commit per event, one ref per branch tip.

Objects are serialised by hand (blob, tree, commit) and hashed before they are written, so an
event that is already stored costs a SHA-1 and an existence check, nothing else: recording the
same transcript twice writes nothing, and a grown one writes only its new events. Everything in
a commit comes from the event (dates = the event's timestamp, a fixed identity), which is what
makes the ids reproducible. The caller holds the store lock.
"""
from __future__ import annotations

import base64
import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pygit2
from pygit2.enums import ObjectType

from ..base.fsutil import atomic_write
from ..base.refs import SESSIONS_PREFIX
from ..storage.store import commit_bytes
from ..workspace import secrets as _secrets
from .model import Event, Transcript, short_text
from .readers import read_transcript

__all__ = ["SESSIONS_PREFIX", "LARGE", "RecordResult", "record", "record_file", "session_name",
           "session_prefix", "load_event", "event_subject"]

LARGE = 8 * 1024  # fields above this go to their own blob, so event.json stays readable
BLOB_NAMES = {"text": "text", "tool_input": "input", "tool_output": "output", "history": "history"}
AUTO_BRANCH = re.compile(r"^(main|fork-[0-9a-f]+|agent-.+|sidechain.*)$")


@dataclass
class RecordResult:
    """What one recording did."""

    session: str  # "<agent>-<session id>", the directory under refs/checkpoints/sessions/
    events: int
    new_commits: int
    branches: dict[str, str]  # branch name -> tip commit (hex)
    skipped: int
    ignored: int
    malformed: int
    redactions: int
    duplicates: int = 0
    dangling: int = 0
    joined: int = 0  # lines whose parent was missing, joined to the main line
    unknown_types: dict = field(default_factory=dict)  # line type -> count (skipped, reported)
    title: str | None = None
    commits: dict[str, str] = field(default_factory=dict, repr=False)  # event key -> commit

    @property
    def ref_prefix(self) -> str:
        return f"{SESSIONS_PREFIX}{self.session}/"


def session_name(agent: str, session_id: str) -> str:
    """A ref-safe `<agent>-<session>` directory name."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "-", session_id).strip("-.") or "unknown"
    return f"{re.sub(r'[^A-Za-z0-9_-]+', '-', agent)}-{safe}"


def session_prefix(agent: str, session_id: str) -> str:
    return f"{SESSIONS_PREFIX}{session_name(agent, session_id)}/"


# -- redaction ---------------------------------------------------------------------------------

def _redact(value: Any, counter: list[int]) -> Any:
    """Everything an event says goes through the secrets engine: its structure-aware
    `redact_obj_count` (keys too; a value under a credential-named key judged like KEY=value),
    or `redact_text` per string; this module has no patterns of its own."""
    structured = getattr(_secrets, "redact_obj_count", None)
    if structured is not None:
        out, n = structured(value)
        counter[0] += n
        return out
    if isinstance(value, str):
        out = _secrets.redact_text(value)
        if out != value:
            counter[0] += 1
        return out
    if isinstance(value, list):
        return [_redact(v, counter) for v in value]
    if isinstance(value, dict):
        return {_redact(k, counter) if isinstance(k, str) else k: _redact(v, counter) for k, v in value.items()}
    return value


IMAGE_EXT = {"image/png": "png", "image/jpeg": "jpg", "image/gif": "gif", "image/webp": "webp"}


# -- object serialisation ----------------------------------------------------------------------

def _obj(repo: pygit2.Repository, kind: str, data: bytes, new: dict[str, int]) -> bytes:
    """Hash an object, write it only when missing; returns the raw 20-byte id."""
    h = hashlib.sha1(f"{kind} {len(data)}\0".encode() + data)
    if not repo.odb.exists(pygit2.Oid(raw=h.digest())):
        otype = {"blob": ObjectType.BLOB, "tree": ObjectType.TREE, "commit": ObjectType.COMMIT}[kind]
        repo.odb.write(otype, data)
        new[kind] += 1
    return h.digest()


def _dumps(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, indent=1).encode("utf-8", "surrogatepass")


def _files(record: dict) -> dict[str, bytes]:
    """Split large fields into their own files; the rest is event.json."""
    files: dict[str, bytes] = {}
    blobs: dict[str, dict] = {}
    for fld, stem in BLOB_NAMES.items():
        value = record.get(fld)
        if isinstance(value, str):
            data, name = value.encode("utf-8", "surrogatepass"), f"{stem}.txt"
        elif value is not None:
            data, name = _dumps(value), f"{stem}.json"
        else:
            continue
        if len(data) > LARGE:
            files[name] = data
            blobs[fld] = {"path": name, "bytes": len(data)}
            del record[fld]
    if blobs:
        record["blobs"] = blobs
    for n, img in enumerate(record.get("images") or []):
        if isinstance(img, dict) and isinstance(img.get("data"), str):
            raw = base64.b64decode(img.pop("data"))  # checked by the reader
            img["path"] = f"image-{n}.{IMAGE_EXT.get(str(img.get('media_type')), 'bin')}"
            img["bytes"] = len(raw)
            files[img["path"]] = raw
    files["event.json"] = _dumps(record)
    return files


def event_subject(record: dict) -> str:
    """The one line `git log --oneline` shows for an event."""
    kind = record["kind"]
    name = record.get("tool_name") or "?"
    if kind == "tool_call":
        inp = record.get("tool_input")
        if isinstance(inp, dict):
            inp = next((inp[k] for k in ("command", "cmd", "file_path", "path", "pattern", "query",
                                         "url", "description", "prompt") if isinstance(inp.get(k), str)),
                       inp)
        return f"tool_call {name}: {short_text(inp, 60)}".rstrip(": ") or "tool_call"
    if kind == "tool_result":
        out = record.get("tool_output")
        body = short_text(out, 60) if out is not None else f"({record.get('blobs', {}).get('tool_output', {}).get('bytes', 0)} bytes)"
        return f"tool_result {name}{' [error]' if record.get('is_error') else ''}: {body}".rstrip(": ")
    text = record.get("text")
    if text is None and "text" in record.get("blobs", {}):
        text = f"({record['blobs']['text']['bytes']} bytes)"
    return f"{kind}: {short_text(text or '', 66)}".rstrip(": ") or kind


def _write_event(repo: pygit2.Repository, ev: Event, parent: str | None,
                 new: dict[str, int], red: list[int]) -> str:
    record = ev.record()
    images = record.pop("images", None)  # binary data: not text the credential scan reads
    record = _redact(record, red)
    if images:
        record["images"] = [dict(i) for i in images]
    subject = event_subject(record).replace("\n", " ")
    files = _files(record)
    entries = b"".join(b"100644 " + name.encode() + b"\0" + _obj(repo, "blob", data, new)
                       for name, data in sorted(files.items()))
    tree = _obj(repo, "tree", entries, new)
    return _obj(repo, "commit", commit_bytes(tree.hex(), [parent] if parent else [], int(ev.timestamp),
                                            f"{subject}\n".encode("utf-8", "surrogatepass")), new).hex()


# -- recording ---------------------------------------------------------------------------------

def record(repo: pygit2.Repository, transcript: Transcript, *, update_refs: bool = True) -> RecordResult:
    """Store every event of `transcript` as a commit and point the session's branch refs at
    its leaves. Idempotent; incremental for a grown transcript."""
    new, red = {"blob": 0, "tree": 0, "commit": 0}, [0]
    sname = session_name(transcript.agent, transcript.session_id)
    cache = _Cache(repo, sname)
    commits: dict[str, str] = {}
    for ev in transcript.events:  # readers give parents before children
        parent = commits.get(ev.parent or "")
        key = cache.key(ev, parent)
        hit = cache.get(key)
        commits[ev.key] = hit or _write_event(repo, ev, parent, new, red)
        cache.put(key, commits[ev.key])
    cache.save()
    branches = _branch_names(transcript.events, commits)
    if update_refs:
        _update_refs(repo, f"{SESSIONS_PREFIX}{sname}/", branches)
    st = transcript.stats
    return RecordResult(session=sname, events=len(transcript.events), new_commits=new["commit"],
                        branches=branches, skipped=st["skipped"], ignored=st["ignored"],
                        malformed=st["malformed"], redactions=red[0], duplicates=st["duplicates"],
                        dangling=st["dangling"], joined=st.get("joined", 0),
                        unknown_types=dict(st.get("unknown_types") or {}), title=transcript.title,
                        commits=commits)


class _Cache:
    """(event content, parent commit) -> commit, kept in the store between recordings.

    Re-recording is dominated by the credential scan; the cache skips it for events already
    stored. Losing the file costs time, never correctness (ids are recomputed identically),
    and a hit is trusted only if its commit is still in the object database.
    """

    def __init__(self, repo: pygit2.Repository, session: str):
        self.repo = repo
        self.path = Path(repo.path) / "tc" / "trajectory-cache" / f"{session}.json"
        try:
            self.old: dict[str, str] = json.loads(self.path.read_text())
        except (OSError, ValueError):
            self.old = {}
        self.new: dict[str, str] = {}

    def key(self, ev: Event, parent: str | None) -> str:
        raw = json.dumps(ev.record(), sort_keys=True, ensure_ascii=False, default=str)
        return hashlib.sha1(f"{parent}\0{raw}".encode("utf-8", "surrogatepass")).hexdigest()

    def get(self, key: str) -> str | None:
        hit = self.old.get(key)
        if hit and self.repo.odb.exists(pygit2.Oid(hex=hit)):
            return hit
        return None

    def put(self, key: str, commit: str) -> None:
        self.new[key] = commit

    def save(self) -> None:
        if self.new == self.old:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(self.path, json.dumps(self.new, separators=(",", ":")).encode())
        except OSError:
            pass  # a read-only store still records; it is just slower next time


def record_file(repo: pygit2.Repository, path: str, **read_kw: Any) -> RecordResult:
    """Read a transcript file (format auto-detected) and record it."""
    return record(repo, read_transcript(path, **read_kw))


def _branch_names(events: list[Event], commits: dict[str, str]) -> dict[str, str]:
    """Name every leaf: the latest leaf of each lane gets the lane's name (`main`,
    `agent-<id>`), other leaves `[<lane>-]fork-<first event after the divergence>`."""
    by_key = {e.key: e for e in events}
    # a leaf of a lane: no child in the same lane (a spawn call whose subagent is all that
    # follows it still ends the main line, so `main` exists)
    has_child = {e.parent for e in events if e.parent and e.parent in by_key and by_key[e.parent].lane == e.lane}
    leaves = [e for e in events if e.key not in has_child]
    primaries: dict[str, Event] = {}
    for leaf in leaves:
        if leaf.lane not in primaries or leaf.order >= primaries[leaf.lane].order:
            primaries[leaf.lane] = leaf
    covered: set[str] = set()

    def cover(key: str | None) -> None:
        while key and key not in covered:
            covered.add(key)
            key = by_key[key].parent if key in by_key else None

    names: dict[str, str] = {}
    for lane, leaf in sorted(primaries.items(), key=lambda kv: (kv[0] != "main", kv[0])):
        names[lane] = commits[leaf.key]
        cover(leaf.key)
    for leaf in sorted((lf for lf in leaves if primaries[lf.lane] is not lf), key=lambda e: -e.order):
        first = leaf
        while first.parent and first.parent in by_key and first.parent not in covered:
            first = by_key[first.parent]
        prefix = "" if leaf.lane == "main" else f"{leaf.lane}-"
        names[f"{prefix}fork-{commits[first.key][:8]}"] = commits[leaf.key]
        cover(leaf.key)
    return names


def publish(repo: pygit2.Repository, result: RecordResult) -> None:
    """Point the session's refs at a result recorded with `update_refs=False` (after the caller
    made its objects durable, e.g. flushed an in-memory pack)."""
    _update_refs(repo, result.ref_prefix, result.branches)


def _update_refs(repo: pygit2.Repository, prefix: str, branches: dict[str, str]) -> None:
    tips = [pygit2.Oid(hex=t) for t in branches.values()]
    for name, target in branches.items():
        ref = repo.references.get(prefix + name)
        if ref is None or str(ref.target) == target:
            if ref is None:
                repo.references.create(prefix + name, target)
            continue
        old = ref.target
        if not any(t == old or repo.descendant_of(t, old) for t in tips):
            # what this recording does not hold (another file of the session, e.g. the Codex
            # rollout a `thread/revert` segment continues, recorded after it) is kept, not dropped
            keep = f"{prefix}fork-{old}"[: len(prefix) + 5 + 12]
            if keep not in repo.references:
                repo.references.create(keep, old)
        repo.references.create(prefix + name, target, force=True)
    # An older recording may have named leaves that have since grown or been renamed; drop
    # those auto-named refs, but only when their commit is still reachable from a new tip.
    for refname in list(repo.references):
        if not refname.startswith(prefix) or refname[len(prefix):] in branches:
            continue
        if not AUTO_BRANCH.match(refname[len(prefix):]):
            continue
        old = repo.references[refname].target
        if any(t == old or repo.descendant_of(t, old) for t in tips):
            repo.references.delete(refname)


# -- reading back ------------------------------------------------------------------------------

def load_event(repo: pygit2.Repository, commit: str | pygit2.Oid | pygit2.Commit, *,
               image_data: bool = False) -> dict:
    """The stored record of an event commit, with large fields reassembled, plus `id` and
    `parent` (hex). Images stay references to their blobs unless `image_data` (base64)."""
    c = commit if isinstance(commit, pygit2.Commit) else repo[commit].peel(pygit2.Commit)
    tree = c.tree
    record = json.loads(tree["event.json"].peel(pygit2.Blob).data)
    for fld, info in record.pop("blobs", {}).items():
        data = tree[info["path"]].peel(pygit2.Blob).data
        record[fld] = json.loads(data) if info["path"].endswith(".json") else data.decode("utf-8", "replace")
    for img in record.get("images") or []:
        if image_data and isinstance(img, dict) and isinstance(img.get("path"), str) and img["path"] in tree:
            img["data"] = base64.b64encode(tree[img["path"]].peel(pygit2.Blob).data).decode("ascii")
    record["id"] = str(c.id)
    record["parent"] = str(c.parent_ids[0]) if c.parent_ids else None
    return record
