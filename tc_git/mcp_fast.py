"""`tc-mcp` entry point: answer `initialize`, `ping` and `tools/list` before the MCP SDK is loaded.

Importing the `mcp` SDK costs ~0.7 s on an idle machine (pydantic models of three protocol
versions), several seconds on a busy one; every session pays it before its first tools/list. The
answers to those first requests never change for one installation, so the full server writes them
to a cache (`<cache>/tc-git/mcp-<key>.json`, key = this package's server source, tc-git, mcp and
pydantic versions) and later starts answer them from it with the stdlib only, while the SDK and
the engine are imported in a background thread. The first other request (tools/call,
resources/read, prompts/get, anything unknown) hands the session over to the real server: the
initialize exchange is replayed into it (its second answer is dropped) and from then on every byte
goes through the SDK. No cache (first run, upgrade), `TC_MCP_FAST=off` or any doubt: the full
server from the start.
"""
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
    for name in ("mcp_server.py", "jsonsafe.py", "mcp_fast.py"):
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


def main(argv=None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    cache = None if argv or os.environ.get("TC_MCP_FAST", "").lower() in ("off", "0", "false", "no") \
        else load_cache()
    if cache is None:
        from .mcp_server import main as full_main

        return full_main(argv)
    FastFront(cache).run()


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


class FastFront:
    def __init__(self, cache: dict):
        self.cache = cache
        self.warm = threading.Thread(target=self._import_server, name="tc-warm-sdk", daemon=True)
        self.error: BaseException | None = None

    def _import_server(self) -> None:
        try:
            from . import mcp_server

            mcp_server._warm_engine()
        except BaseException as e:  # reported at handover
            self.error = e

    def run(self) -> None:
        self.wire_in, self.wire_out = claim_wire()
        self.warm.start()
        prelude: list[bytes] = []
        init_id = version = None
        while True:
            line = self.wire_in.readline()
            if not line:
                return  # the client went away before asking for more than the list
            if not line.strip():
                continue
            line = screen(line, self.wire_out)
            if line is None:
                continue
            try:
                msg = json.loads(line)
            except ValueError:
                msg = None
            if not isinstance(msg, dict) or msg.get("jsonrpc") != "2.0":
                return self.handover(prelude + [line], init_id)
            method, has_id = msg.get("method"), "id" in msg
            params = msg.get("params") if isinstance(msg.get("params"), dict) else {}
            if method == "initialize" and has_id and init_id is None:
                asked = params.get("protocolVersion")
                version = asked if asked in self.cache["versions"] else self.cache["latest"]
                self.send(msg["id"], self.cache["initialize"][version])
                prelude.append(line)
                init_id = msg["id"]
            elif method == "notifications/initialized" and init_id is not None and not has_id:
                prelude.append(line)
            elif method == "ping" and has_id:
                self.send(msg["id"], {})
            elif method == "tools/list" and has_id and init_id is not None and not params.get("cursor"):
                self.send(msg["id"], self.cache["tools"][version])
            else:
                return self.handover(prelude + [line], init_id)

    def send(self, msg_id, result: dict) -> None:
        self.wire_out.send({"jsonrpc": "2.0", "id": msg_id, "result": result})

    def handover(self, prelude: list[bytes], init_id) -> None:
        self.warm.join()
        if self.error is not None:
            raise self.error
        from .mcp_server import run_handover

        run_handover(prelude, self.wire_in, self.wire_out, init_id)
