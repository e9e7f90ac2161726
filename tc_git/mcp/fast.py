"""`tc-mcp` entry point: answer `initialize`, `ping` and `tools/list` before the MCP SDK is loaded.

Importing the `mcp` SDK costs ~0.7 s on an idle machine (pydantic models of three protocol
versions), several seconds on a busy one; every session pays it before its first tools/list. The
answers to those first requests never change for one installation, so the full server writes them
to a cache (`<cache>/tc-git/mcp-<key>.json`, key = this package's server source, tc-git, mcp and
pydantic versions) and later starts answer them from it with the stdlib only, while the SDK and
the engine are imported in a background thread. The first other request (tools/call,
resources/read, prompts/get, anything unknown) hands the session over to the real server: the
initialize exchange is replayed into it (its second answer is dropped) and from then on every byte
goes through the SDK. No cache (first run, upgrade), the `mcp_fast` setting off or any doubt: the full
server from the start.
"""
from __future__ import annotations

import json
import sys
import threading

from ..base import settings
from .wire import claim_wire, load_cache, read_line, screen

PROTOCOL_VERSION_META = "io.modelcontextprotocol/protocolVersion"


def main(argv=None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    settings.install(settings.Settings.from_env())  # the server process's settings, read once
    cache = None if argv or not settings.current().mcp_fast else load_cache()
    if cache is None:
        from .server import main as full_main

        return full_main(argv)
    FastFront(cache).run()


class FastFront:
    def __init__(self, cache: dict):
        self.cache = cache
        self.warm = threading.Thread(target=self._import_server, name="tc-warm-sdk", daemon=True)
        self.error: BaseException | None = None

    def _import_server(self) -> None:
        try:
            from . import server as mcp_server

            mcp_server.warm()
        except BaseException as e:  # reported at handover
            self.error = e

    def run(self) -> None:
        self.wire_in, self.wire_out = claim_wire()
        self.warm.start()
        prelude: list[bytes] = []
        init_id = version = None  # the handshake era: initialize's id and version
        first_id = None  # the id of the first answered request the SDK must see again (initialize or discover)
        while True:
            line = read_line(self.wire_in, self.wire_out)  # (bounded: over MAX_LINE is answered, skipped)
            if not line:
                return  # the client went away before asking for more than the list
            passed = screen(line, self.wire_out)  # too deep, not JSON, not JSON-RPC: answered here
            if passed is None:
                continue
            line = passed
            try:
                msg = json.loads(line)
            except (ValueError, RecursionError):
                msg = None
            if not isinstance(msg, dict) or msg.get("jsonrpc") != "2.0":
                return self.handover(prelude + [line], first_id)
            method, has_id = msg.get("method"), "id" in msg
            params: dict = msg["params"] if isinstance(msg.get("params"), dict) else {}
            meta = params.get("_meta")
            modern = meta.get(PROTOCOL_VERSION_META) if isinstance(meta, dict) else None  # 2026-era: every request names its version
            if modern is not None:
                if not (has_id and init_id is None and isinstance(modern, str) and modern in self.cache["discover"]):
                    return self.handover(prelude + [line], first_id)
                if method == "server/discover":
                    self.send(msg["id"], self.cache["discover"][modern])
                    if first_id is None:
                        prelude.append(line)
                        first_id = msg["id"]
                elif method == "tools/list" and not params.get("cursor"):
                    self.send(msg["id"], self.cache["modern_tools"][modern])
                else:
                    return self.handover(prelude + [line], first_id)
            elif method == "initialize" and has_id and init_id is None and first_id is None:
                asked = params.get("protocolVersion")
                version = asked if asked in self.cache["versions"] else self.cache["latest"]
                self.send(msg["id"], self.cache["initialize"][version])
                prelude.append(line)
                init_id = first_id = msg["id"]
            elif method == "notifications/initialized" and init_id is not None and not has_id:
                prelude.append(line)
            elif method == "ping" and has_id:
                self.send(msg["id"], {})
            elif method == "tools/list" and has_id and init_id is not None and not params.get("cursor"):
                self.send(msg["id"], self.cache["tools"][version])
            else:
                return self.handover(prelude + [line], first_id)

    def send(self, msg_id, result: dict) -> None:
        self.wire_out.send({"jsonrpc": "2.0", "id": msg_id, "result": result})

    def handover(self, prelude: list[bytes], init_id) -> None:
        self.warm.join()
        if self.error is not None:
            raise self.error
        from .server import run_handover

        run_handover(prelude, self.wire_in, self.wire_out, init_id)
