"""Changing a user's own configuration files so that it can be undone exactly.

Before tc-git first changes a file (an agent's settings, a skill directory), the file's exact
bytes, or the fact that it did not exist, are kept under tc-git's state directory
($XDG_STATE_HOME/tc-git, default ~/.local/state/tc-git) instead of a `.bak` next to the user's
file. Undo then writes those bytes back (or removes the file, and the directories tc-git
created for it) when nothing but tc-git's part changed since; otherwise only tc-git's part is
taken out. JSON is written back in the file's own indentation. Stdlib only.
"""
from __future__ import annotations

import base64
import hashlib
import json
import os
import re
from pathlib import Path

from ..base.fsutil import atomic_write


def state_dir() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(base) / "tc-git"


def prune_state() -> None:
    """Remove tc-git's state directories that nothing is left in (after `setup --undo`)."""
    base = state_dir()
    for d in (base / "setup", base / "pristine", base):
        try:
            d.rmdir()  # only when empty
        except OSError:
            pass


def _record_path(path: Path) -> Path:
    key = hashlib.sha1(str(path).encode("utf-8", "surrogateescape")).hexdigest()[:20]
    return state_dir() / "pristine" / f"{key}.json"


def _abs(path) -> Path:
    return Path(os.path.abspath(os.path.expanduser(str(path))))


def pristine(path) -> dict | None:
    """{"path", "existed", "data" (bytes or None), "dirs" (created directories)} or None."""
    path = _abs(path)
    try:
        rec = json.loads(_record_path(path).read_text())
    except (OSError, ValueError):
        return None
    if rec.get("path") != str(path):
        return None
    rec["data"] = base64.b64decode(rec["data"]) if rec.get("data") is not None else None
    return rec


def remember(path) -> None:
    """Keep the file's bytes as they are now, unless kept already (the first version wins)."""
    path = _abs(path)
    if pristine(path) is not None:
        return
    data = path.read_bytes() if path.is_file() else None
    dirs = []
    d = path.parent
    while not d.exists():
        dirs.append(str(d))
        d = d.parent
    rec = {"path": str(path), "existed": data is not None,
           "data": base64.b64encode(data).decode() if data is not None else None, "dirs": dirs}
    out = _record_path(path)
    out.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    atomic_write(out, json.dumps(rec).encode(), 0o600)


def forget(path) -> None:
    try:
        _record_path(_abs(path)).unlink()
    except FileNotFoundError:
        pass


def write(path, data: bytes) -> None:
    """Write a user's file atomically (keeping its mode), remembering its first version."""
    path = _abs(path)
    remember(path)
    mode = path.stat().st_mode & 0o777 if path.exists() else 0o644
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, data, mode)


def put_back(path, stripped: bytes | None = None, same=None) -> str:
    """Undo tc-git's changes to `path`.

    `stripped` is the file with only tc-git's part taken out (None: the file should go). When it
    is the pristine content (`same(a, b)` compares, default: equal bytes), the pristine bytes are
    written back exactly, or the file and the directories tc-git created are removed. Returns
    what was done: "restored", "removed", "edited" or "untouched".
    """
    path = _abs(path)
    rec = pristine(path)
    same = same or (lambda a, b: a == b)
    if rec is not None:
        orig = rec["data"]
        if (stripped is None and orig is None) or (stripped is not None and orig is not None and same(stripped, orig)):
            if orig is None:
                try:
                    path.unlink()
                except FileNotFoundError:
                    pass
                for d in rec.get("dirs") or []:
                    try:
                        os.rmdir(d)
                    except OSError:
                        break  # not empty: something else lives there now
                forget(path)
                return "removed"
            if path.read_bytes() != orig if path.exists() else True:
                mode = path.stat().st_mode & 0o777 if path.exists() else 0o644
                atomic_write(path, orig, mode)
            forget(path)
            return "restored"
    if stripped is None:
        if path.exists():
            path.unlink()
            forget(path)
            return "removed"
        return "untouched"
    if path.exists() and path.read_bytes() == stripped:
        forget(path)
        return "untouched"
    mode = path.stat().st_mode & 0o777 if path.exists() else 0o644
    atomic_write(path, stripped, mode)
    forget(path)
    return "edited"


# ------------------------------------------------------------------------------------ JSON
def load_json(path) -> tuple[dict, str | None]:
    """The object in a JSON file and its text (None when the file does not exist)."""
    from ..base.errors import BadInput

    path = _abs(path)
    if not path.exists():
        return {}, None
    text = path.read_text(encoding="utf-8")
    if not text.strip():
        return {}, text
    try:
        data = json.loads(text)
    except ValueError as e:
        raise BadInput(f"{path} is not valid JSON ({e}); fix it first, tc-git will not overwrite it") from e
    if not isinstance(data, dict):
        raise BadInput(f"{path} does not hold a JSON object; fix it first, tc-git will not overwrite it")
    return data, text


def dump_like(data: dict, original: str | None) -> bytes:
    """JSON in the original text's style: its indentation (spaces or tabs), ASCII escaping and
    final newline; two spaces for a new file."""
    indent: str | int | None = 2
    ascii_only = False
    final_nl = True
    if original:
        m = re.search(r"\n([ \t]+)\S", original)
        if m:
            indent = m.group(1)
        elif original.strip() and "\n" not in original.strip():
            indent = None  # a one-line file stays one line
        ascii_only = "\\u" in original and not any(ord(c) > 127 for c in original)
        final_nl = original.endswith("\n")
    text = json.dumps(data, indent=indent, ensure_ascii=ascii_only)
    return (text + ("\n" if final_nl else "")).encode("utf-8")


def same_json(a: bytes, b: bytes) -> bool:
    try:
        return json.loads(a or b"{}") == json.loads(b or b"{}")
    except ValueError:
        return a == b
