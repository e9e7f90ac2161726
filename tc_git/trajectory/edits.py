"""Re-apply recorded file edits to a tree, in memory, and compare with a recorded snapshot.

Replay verification answers "do the agent's own edits explain the workspace?": start from the
base snapshot, apply every successful Write/Edit/MultiEdit/apply_patch in order, and compare
the result with the snapshot recorded afterwards. The first path that differs is where work
happened outside the agent's tools (or where a tool we do not model changed files).
"""
from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import pygit2

from .model import Event

__all__ = ["VerifyResult", "PatchError", "verify_edits", "apply_patch"]

EDIT_TOOLS = frozenset({"Write", "Edit", "MultiEdit", "apply_patch"})


class PatchError(Exception):
    def __init__(self, path: str, reason: str):
        super().__init__(f"{path}: {reason}")
        self.path, self.reason = path, reason


@dataclass
class VerifyResult:
    ok: bool
    applied: int  # edits re-applied
    skipped: int  # failed tool calls and paths outside the workspace
    path: str | None = None  # first divergence
    reason: str | None = None
    differences: list[str] = field(default_factory=list)


def _flatten(repo: pygit2.Repository, tree: pygit2.Tree, prefix: str = "") -> dict[str, pygit2.Oid]:
    out: dict[str, pygit2.Oid] = {}
    for e in tree:
        path = prefix + (e.name or "")
        if e.type_str == "tree":
            out.update(_flatten(repo, repo[e.id].peel(pygit2.Tree), path + "/"))
        elif e.type_str == "blob":
            out[path] = e.id
    return out


def _tree(repo: pygit2.Repository, x: Any) -> pygit2.Tree:
    obj = repo[x] if isinstance(x, (str, pygit2.Oid)) else x
    return obj.peel(pygit2.Tree)


def _rel(path: str, root: str | None) -> str | None:
    if not os.path.isabs(path):
        return os.path.normpath(path).replace(os.sep, "/")
    if root:
        rel = os.path.relpath(os.path.normpath(path), os.path.normpath(root))
        if not rel.startswith(".."):
            return rel.replace(os.sep, "/")
    return None


def _patch_text(name: str, inp: Any) -> str | None:
    """The apply_patch body of a call, whichever way the agent passed it."""
    values = [inp] if isinstance(inp, str) else list(inp.values()) if isinstance(inp, dict) else []
    for v in values:
        if isinstance(v, list):
            values.extend(v)
        elif isinstance(v, str) and "*** Begin Patch" in v:
            start = v.index("*** Begin Patch")
            end = v.find("*** End Patch", start)
            return v[start: len(v) if end < 0 else end + len("*** End Patch")]
    return None


def apply_patch(files: dict[str, bytes | None], patch: str, resolve=lambda p: p) -> list[str]:
    """Apply a Codex `*** Begin Patch` envelope to `files` (path -> bytes, None = deleted).

    Returns the touched paths. Raises PatchError when a hunk does not match.
    """
    lines = patch.splitlines()
    touched: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        i += 1
        if line.startswith("*** Add File: "):
            path = resolve(line[14:].strip())
            body = []
            while i < len(lines) and lines[i].startswith("+"):
                body.append(lines[i][1:])
                i += 1
            files[path] = ("\n".join(body) + "\n").encode()
            touched.append(path)
        elif line.startswith("*** Delete File: "):
            path = resolve(line[17:].strip())
            if files.get(path) is None:
                raise PatchError(path, "apply_patch deletes a file that does not exist")
            files[path] = None
            touched.append(path)
        elif line.startswith("*** Update File: "):
            path = resolve(line[17:].strip())
            hunk_lines = []
            while i < len(lines) and not (lines[i].startswith("*** ") and not lines[i].startswith("*** End of File")):
                hunk_lines.append(lines[i])
                i += 1
            dest = path
            if i < len(lines) and lines[i].startswith("*** Move to: "):
                dest = resolve(lines[i][13:].strip())
                i += 1
                while i < len(lines) and not lines[i].startswith("*** "):
                    hunk_lines.append(lines[i])
                    i += 1
            old = files.get(path)
            if old is None:
                raise PatchError(path, "apply_patch updates a file that does not exist")
            new = _apply_hunks(path, old.decode("utf-8", "surrogateescape"), hunk_lines)
            if dest != path:
                files[path] = None
            files[dest] = new.encode("utf-8", "surrogateescape")
            touched += [path] if dest == path else [path, dest]
    return touched


def _apply_hunks(path: str, text: str, hunk_lines: list[str]) -> str:
    lines = text.split("\n")
    trailing = lines and lines[-1] == ""
    if trailing:
        lines.pop()
    cursor = 0
    hunks: list[tuple[str, list[str]]] = []
    for hl in hunk_lines:
        if hl.startswith("@@"):
            hunks.append((hl[2:].strip(), []))
        elif hl.startswith("*** End of File"):
            continue
        else:
            if not hunks:
                hunks.append(("", []))
            hunks[-1][1].append(hl if hl else " ")
    for header, body in hunks:
        if header:
            at = next((k for k in range(cursor, len(lines)) if lines[k].strip() == header.strip()), None)
            cursor = cursor if at is None else at + 1
        old = [h[1:] for h in body if h[:1] in (" ", "-")]
        new = [h[1:] for h in body if h[:1] in (" ", "+")]
        at = _find(lines, old, cursor)
        if at is None:
            raise PatchError(path, "apply_patch hunk does not match the file")
        lines[at: at + len(old)] = new
        cursor = at + len(new)
    return "\n".join(lines) + ("\n" if trailing or not lines else "")


def _find(lines: list[str], seq: list[str], start: int) -> int | None:
    if not seq:
        return len(lines) if start >= len(lines) else start
    for strip in (False, True):  # exact first, then ignoring trailing blanks as Codex does
        for k in list(range(start, len(lines) - len(seq) + 1)) + list(range(0, start)):
            window = lines[k: k + len(seq)]
            if window == seq or (strip and [w.rstrip() for w in window] == [s.rstrip() for s in seq]):
                return k
    return None


def _edit(files: dict, path: str, old: str, new: str, replace_all: bool) -> None:
    cur = files.get(path)
    if cur is None:
        if old == "":
            files[path] = new.encode()  # Edit with an empty old_string creates the file
            return
        raise PatchError(path, "Edit on a file that does not exist")
    text = cur.decode("utf-8", "surrogateescape")
    if old not in text:
        raise PatchError(path, "old_string not found: the file was changed outside the agent's tools")
    text = text.replace(old, new) if replace_all else text.replace(old, new, 1)
    files[path] = text.encode("utf-8", "surrogateescape")


def _records(events: Iterable[Any]) -> list[dict]:
    return [e.record() if isinstance(e, Event) else e for e in events]


def verify_edits(repo: pygit2.Repository, events: Iterable[Any], base_tree: Any, recorded_tree: Any,
                 *, root: str | None = None, only_touched: bool = False) -> VerifyResult:
    """Re-apply the recorded file edits to `base_tree` and compare with `recorded_tree`.

    Args:
        events: event records (dicts from `replay`/`load_event`) or `Event`s, in order.
        base_tree, recorded_tree: trees, commits or their ids.
        root: the workspace path, to turn the agents' absolute paths into tree paths
            (default: the store's workdir).
        only_touched: compare only paths the edits touched (ignore e.g. build outputs).
    """
    root = root or (repo.workdir.rstrip("/") if repo.workdir else None)
    base = _flatten(repo, _tree(repo, base_tree))
    recorded = _flatten(repo, _tree(repo, recorded_tree))
    files: dict[str, bytes | None] = {}
    recs = _records(events)
    failed = {r.get("call_id") for r in recs if r.get("kind") == "tool_result" and r.get("is_error")}
    applied = skipped = 0
    touched: list[str] = []

    def load(path: str | None) -> str | None:
        if path is not None and path not in files:
            files[path] = repo[base[path]].peel(pygit2.Blob).data if path in base else None
        return path

    def resolve(p: str) -> str:
        rel = _rel(p, root)
        if rel is None:
            raise PatchError(p, "outside the workspace")
        load(rel)
        return rel

    for r in recs:
        name, inp = r.get("tool_name"), r.get("tool_input")
        if r.get("kind") != "tool_call":
            continue
        if r.get("call_id") in failed:  # the tool refused: nothing changed on disk
            skipped += name in EDIT_TOOLS
            continue
        patch = _patch_text(name or "", inp) if name not in ("Write", "Edit", "MultiEdit") else None
        if patch is None and not (isinstance(inp, dict) and name in ("Write", "Edit", "MultiEdit")):
            continue
        try:
            if patch is not None:
                touched += apply_patch(files, patch, resolve)
            elif isinstance(inp, dict):  # Write, Edit or MultiEdit (checked above)
                path = load(_rel(str(inp.get("file_path", "")), root))
                if path is None:
                    skipped += 1
                    continue
                if name == "Write":
                    files[path] = str(inp.get("content", "")).encode("utf-8", "surrogateescape")
                edits = [inp] if name == "Edit" else inp.get("edits", []) if name == "MultiEdit" else []
                for e in edits:
                    _edit(files, path, str(e.get("old_string", "")), str(e.get("new_string", "")),
                          bool(e.get("replace_all")))
                touched.append(path)
            applied += 1
        except PatchError as e:
            if e.reason == "outside the workspace":
                skipped += 1
                continue
            return VerifyResult(False, applied, skipped, e.path, e.reason, [e.path])
    return _compare(base, recorded, files, touched, applied, skipped, only_touched)


def _compare(base: dict, recorded: dict, files: dict, touched: list[str], applied: int,
             skipped: int, only_touched: bool) -> VerifyResult:
    result = dict(base)
    for path, data in files.items():
        if data is None:
            result.pop(path, None)
        else:
            result[path] = pygit2.hash(data)
    order = list(dict.fromkeys(touched))
    if not only_touched:
        order += sorted((set(result) | set(recorded)) - set(order))
    diffs = [p for p in order if result.get(p) != recorded.get(p)]
    if not diffs:
        return VerifyResult(True, applied, skipped)
    p = diffs[0]
    reason = ("missing from the recorded snapshot" if p not in recorded else
              "not produced by the recorded edits" if p not in result else
              "content differs from the recorded snapshot")
    return VerifyResult(False, applied, skipped, p, reason, diffs)
