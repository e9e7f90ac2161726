"""What both MCP starts share, below both (stdlib only): the cache of the first answers
(`initialize`, `tools/list`) that the full server writes and the fast start (mcp_fast.py) reads,
and the wire: the private stdin/stdout of the JSON-RPC stream and the input screen."""
from __future__ import annotations

import hashlib
import json
import os
import sys
import threading
import time
from importlib.util import find_spec
from pathlib import Path

from . import __version__

CACHE_FORMAT = "2"


def _stamp(module: str) -> str:
    """Where a module's file is and when it changed (find_spec does not import a top-level package)."""
    try:
        spec = find_spec(module)
        origin = spec.origin if spec else None
        st = os.stat(origin) if origin else None
        return f"{origin}:{st.st_mtime_ns}:{st.st_size}" if st else "-"
    except (ImportError, OSError, ValueError):
        return "-"


def cache_path() -> Path:
    here = Path(__file__).resolve().parent
    h = hashlib.sha1(CACHE_FORMAT.encode())
    for name in ("mcp_server.py", "mcp_models.py", "jsonsafe.py", "mcp_fast.py", "mcp_wire.py"):
        try:
            h.update((here / name).read_bytes())
        except OSError:
            h.update(name.encode())
    for part in (__version__, _stamp("mcp"), _stamp("mcp_types"), _stamp("pydantic"), sys.version):
        h.update(part.encode())
    base = os.environ.get("TC_MCP_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "tc-git")
    return Path(base) / f"mcp-{h.hexdigest()[:16]}.json"


def load_cache() -> dict | None:
    p = cache_path()
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
        os.utime(p)  # in use: not pruned by another install's start
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or not {"versions", "latest", "initialize", "tools"} <= data.keys():
        return None
    return data


def write_cache(data: dict) -> None:
    """Atomic; any failure only costs the next start its speed."""
    p = cache_path()
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_name(f".{p.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data, ensure_ascii=False, separators=(",", ":")), encoding="utf-8")
        os.replace(tmp, p)
        week = time.time() - 14 * 86400
        for old in p.parent.glob("mcp-*.json"):  # earlier versions' caches, unused for two weeks
            if old != p and old.stat().st_mtime < week:
                old.unlink(missing_ok=True)
    except OSError:
        pass



class Wire:
    """The JSON-RPC output: whole lines, one writer at a time (the SDK's writer and the input
    screen below may both answer)."""

    def __init__(self, raw):
        self.raw, self.lock = raw, threading.Lock()

    def write_line(self, data: bytes) -> None:
        with self.lock:
            self.raw.write(data.rstrip(b"\n") + b"\n")
            self.raw.flush()

    def send(self, msg: dict) -> None:
        self.write_line(json.dumps(msg, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))


def claim_wire():
    """Private copies of stdin/stdout for the JSON-RPC stream; fd 0 then reads EOF and fd 1 goes to
    stderr, so nothing printed by an import, a library or a tool can corrupt the stream."""
    wire_in = os.fdopen(os.dup(0), "rb")
    wire_out = Wire(os.fdopen(os.dup(1), "wb"))
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)
    return wire_in, wire_out


def screen(line: bytes, out: Wire) -> bytes | None:
    """A message whose strings are not valid Unicode (a lone UTF-16 surrogate escape such as
    `\\udce9`) is rejected by the SDK's JSON parser without an answer, so its caller would wait
    forever: answer it here with an error naming the fix, and drop it. Others pass unchanged."""
    if b"\\ud" not in line and b"\\uD" not in line:
        return line
    try:
        msg = json.loads(line)  # Python keeps a lone surrogate; a valid pair becomes one character
    except ValueError:
        return line

    def bad(x) -> bool:
        if isinstance(x, str):
            return any(0xD800 <= ord(c) <= 0xDFFF for c in x)
        if isinstance(x, dict):
            return any(bad(k) or bad(v) for k, v in x.items())
        if isinstance(x, list):
            return any(bad(v) for v in x)
        return False

    if not bad(msg):
        return line
    if isinstance(msg, dict) and "id" in msg and "method" in msg and not bad(msg["id"]):
        text = ("a string in the request holds a lone UTF-16 surrogate (not valid Unicode); pass a file "
                "name that is not UTF-8 exactly as tc-git shows it, git-quoted with octal bytes: "
                "\"caf\\351.txt\"")
        if msg["method"] == "tools/call":  # a tool result the agent sees, like every tool failure
            out.send({"jsonrpc": "2.0", "id": msg["id"], "result": {
                "content": [{"type": "text", "text": text + " [bad_input]"}], "isError": True,
                "_meta": {"tc-git/code": "bad_input"}}})
        else:
            out.send({"jsonrpc": "2.0", "id": msg["id"], "error": {"code": -32602, "message": "invalid params: " + text}})
    return None
