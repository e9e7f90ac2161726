"""What both MCP starts share, below both (stdlib only): the cache of the first answers
(`initialize`, `tools/list`) that the full server writes and the fast start (mcp_fast.py) reads,
and the wire: the private stdin/stdout of the JSON-RPC stream and the input screen."""
from __future__ import annotations

import hashlib
import json
import os
import re
import select
import sys
import threading
import time
from importlib.util import find_spec
from itertools import accumulate, repeat
from operator import sub
from pathlib import Path

from .. import __version__
from ..base.settings import current

CACHE_FORMAT = "3"


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
    for name in ("server.py", "../base/results.py", "../base/jsonsafe.py", "fast.py", "wire.py"):
        try:
            h.update((here / name).read_bytes())
        except OSError:
            h.update(name.encode())
    for part in (__version__, _stamp("mcp"), _stamp("mcp_types"), _stamp("pydantic"), sys.version):
        h.update(part.encode())
    s = current()
    base = s.mcp_cache or os.path.join(s.cache_home or os.path.join(os.path.expanduser("~"), ".cache"), "tc-git")
    return Path(base) / f"mcp-{h.hexdigest()[:16]}.json"


def load_cache() -> dict | None:
    p = cache_path()
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
        os.utime(p)  # in use: not pruned by another install's start
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or not {"versions", "latest", "initialize", "tools", "discover", "modern_tools"} <= data.keys():
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


class LineReader:
    """The JSON-RPC input: lines from a private descriptor. `stop()` (from a signal handler) makes
    every read return EOF, one already waiting included, so the server ends as when the client
    closes stdin: in-flight calls finish, the store is flushed, exit status 0."""

    def __init__(self, fd: int):
        self.fd, self.buf, self.stopped = fd, bytearray(), False
        self.wake_r, self.wake_w = os.pipe() if os.name != "nt" else (-1, -1)  # (select takes no pipe there)

    def readline(self, size: int = -1) -> bytes:
        """The next line with its newline; at most `size` bytes when size >= 0 (the rest of a
        longer line comes with the next calls), as a binary file's readline."""
        while True:
            if self.stopped:
                return b""
            i = self.buf.find(b"\n", 0, size if size >= 0 else len(self.buf))
            cut = i + 1 if i >= 0 else size if 0 <= size <= len(self.buf) else None
            if cut is not None:
                line = bytes(self.buf[:cut])
                del self.buf[:cut]
                return line
            if self.wake_r >= 0 and self.wake_r in select.select([self.fd, self.wake_r], [], [])[0]:
                return b""
            chunk = os.read(self.fd, 1 << 20)
            if not chunk:  # EOF: what is left (at most `size`), then b""
                cut = len(self.buf) if size < 0 else min(size, len(self.buf))
                line = bytes(self.buf[:cut])
                del self.buf[:cut]
                return line
            self.buf += chunk

    def stop(self) -> None:
        self.stopped = True
        if self.wake_w >= 0:
            try:
                os.write(self.wake_w, b"x")
            except OSError:
                pass


def stop_on_signals(wire_in: LineReader) -> None:
    """SIGINT and SIGTERM end the session cleanly (LineReader.stop); a second one ends the process
    at once, as without this handler. Main thread only (a no-op elsewhere)."""
    import signal

    def handler(signum, _frame):
        if wire_in.stopped:  # still not gone: the default action
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        wire_in.stop()

    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, handler)


def claim_wire():
    """Private copies of stdin/stdout for the JSON-RPC stream; fd 0 then reads EOF and fd 1 goes to
    stderr, so nothing printed by an import, a library or a tool can corrupt the stream. SIGINT and
    SIGTERM end the stream (stop_on_signals)."""
    wire_in = LineReader(os.dup(0))
    stop_on_signals(wire_in)
    wire_out = Wire(os.fdopen(os.dup(1), "wb"))
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)
    return wire_in, wire_out


# Bounds on one JSON-RPC line: no request tc-git serves nests deeper than a few levels, and the
# largest (a save's texts) stays far below the size. A line beyond either is answered, not parsed.
MAX_DEPTH = 64
MAX_LINE = 16 << 20

_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
_TOKEN = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}:,]|[^\s"\[\]{}:,]+')
_OPEN_CLOSE = bytes.maketrans(b"[{]}", b"\2\2\0\0")
_NOT_BRACKET = bytes(b for b in range(256) if b not in b"[{]}")


def _depth(line: bytes) -> int:
    """How deep `line` nests: strings taken out, the brackets left as +1/-1 steps, the highest
    running sum. All of it in C (re, bytes.translate, itertools): no recursion, no Python loop
    per byte, whatever the input (a line cut short or not JSON at all included)."""
    steps = _STRING.sub(b"", line).translate(_OPEN_CLOSE, _NOT_BRACKET)
    return max(accumulate(map(sub, steps, repeat(1))), default=0)


def _id_of(line: bytes) -> object:
    """The top-level "id" of a message that is not parsed (too deep, not JSON), if it can be read:
    a flat pass over the tokens of its first 64 KiB (the whole line up to 1 MiB)."""
    depth, want_key, key = 0, False, None
    for m in _TOKEN.finditer(line if len(line) <= 1 << 20 else line[:65536]):
        t = m.group()
        c = t[:1]
        if c in b"[{":
            depth += 1
            want_key, key = c == b"{" and depth == 1, None
        elif c in b"]}":
            depth -= 1
        elif depth != 1:
            continue
        elif c == b",":
            want_key, key = True, None
        elif c == b":":
            want_key = False
        elif want_key:
            key = t
        elif key == b'"id"':
            try:
                v = json.loads(t)
            except ValueError:
                return None
            return v if isinstance(v, (int, float, str)) and not isinstance(v, bool) else None
    return None


def _error(out: Wire, msg_id, code: int, message: str) -> None:
    out.send({"jsonrpc": "2.0", "id": msg_id, "error": {"code": code, "message": message}})


def read_line(wire_in, out: Wire) -> bytes:
    """The next line of the stream, at most MAX_LINE bytes: a longer one is read to its end in
    pieces, answered with -32600 (with its id when the start shows one) and skipped; b"" at EOF."""
    while True:
        line = wire_in.readline(MAX_LINE + 1)
        if len(line) <= MAX_LINE or line.endswith(b"\n"):
            return line
        head = line[:65536]
        while line and not line.endswith(b"\n"):
            line = wire_in.readline(1 << 20)
        _error(out, _id_of(head), -32600, f"invalid request: the line is over {MAX_LINE >> 20} MiB, tc-git's "
               "limit for one JSON-RPC message; pass large content as a file path")


def _lone_surrogate(msg) -> bool:
    stack = [msg]  # (flat: the message is at most MAX_DEPTH deep, but no recursion on input anyway)
    while stack:
        x = stack.pop()
        if isinstance(x, str):
            if any(0xD800 <= ord(c) <= 0xDFFF for c in x):
                return True
        elif isinstance(x, dict):
            stack.extend(x.keys())
            stack.extend(x.values())
        elif isinstance(x, list):
            stack.extend(x)
    return False


def screen(line: bytes, out: Wire) -> bytes | None:
    try:
        return _screen(line, out)
    except Exception:  # (a reader that raised would never answer again: drop the line instead)
        _error(out, None, -32603, "internal error: the request line could not be read")
        return None


def _screen(line: bytes, out: Wire) -> bytes | None:
    """Every line before anything parses it for real (the fast front, the SDK): one that is too
    deep (over MAX_DEPTH levels: Python's and pydantic's parsers recurse), not JSON, not a JSON-RPC
    message, or holds a string that is not valid Unicode (a lone UTF-16 surrogate escape such as
    `\\udce9`, which the SDK's parser rejects without an answer) is answered here (-32700 /
    -32600 / -32602, with its id where one can be read) and dropped, so its caller never waits and
    the reader never dies. Others pass unchanged."""
    if not line.strip():
        return None  # (an empty line is no message: nothing to answer)
    if line.count(b"[") + line.count(b"{") > MAX_DEPTH and _depth(line) > MAX_DEPTH:  # (fewer cannot)
        _error(out, _id_of(line), -32600, f"invalid request: nested deeper than {MAX_DEPTH} levels")
        return None
    try:
        msg = json.loads(line)
    except (ValueError, RecursionError):  # (RecursionError: not reachable under MAX_DEPTH; never fatal)
        _error(out, _id_of(line), -32700, "parse error: the line is not valid JSON (one JSON-RPC message "
               "per line)")
        return None
    if not isinstance(msg, dict) or msg.get("jsonrpc") != "2.0" or not (
            "method" in msg or "result" in msg or "error" in msg):
        _error(out, _id_of(line), -32600, "invalid request: not a JSON-RPC 2.0 message object")
        return None
    if (b"\\ud" not in line and b"\\uD" not in line) or not _lone_surrogate(msg):
        return line
    if "id" in msg and "method" in msg and not _lone_surrogate(msg["id"]):
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
