"""`tc-mcp`: the ten task tools over MCP (stdio), thin over `Engine`.

Drop-in for task-checkpoint-mcp 0.1.7: same tool names, parameters and result keys. Better where
the seed is weak: `root` may be omitted (the client's MCP roots, else the server's cwd); every
failure the caller can act on is an `isError` tool result with a message that says what to do
(never a JSON-RPC error, never a traceback); engine calls run in worker threads so the server
keeps answering (ping, other tools) and long work reports progress; unsaved work is recorded as
drift commits in the background (`tc_git.mcp.watch`).

Logs go to stderr and to `<store>/tc/server.log`; stdout is the JSON-RPC channel.
"""
from __future__ import annotations

import contextlib
import functools
import io
import json
import logging
import operator
import os
import sys
import threading
import time
import traceback
import types
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, Union, get_args, get_origin, get_type_hints, is_typeddict
from urllib.parse import unquote, urlparse

import anyio
import anyio.from_thread
import anyio.to_thread
import typing_extensions as te
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.tools import Tool
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import Field, TypeAdapter, ValidationError

from .. import __version__
from ..base import jsonsafe, results, settings
from ..base.errors import Hint, TcError
from ..base.refs import POINTER_FILE, STORE_DIRNAME
from ..storage import handles, heap
from ..workspace.secrets import redact_count, store_log
from . import wire as mcp_wire

if TYPE_CHECKING:  # annotations only: the engine (and pygit2) load on first use
    from ..engine import Engine

log = logging.getLogger("tc_git.mcp")

INSTRUCTIONS = (
    "Checkpoints for long work. New session: tc_resume first. Long task: tc_init once, then "
    "tc_save after each completed step with conclusion and next. Other tasks: tc_tasks, tc_switch. "
    "Before tc_restore apply=true, preview it (apply=false); tc_undo reverses an applied restore. "
    "Unsaved edits are recorded as drifts automatically. root defaults to the client's root, else the cwd."
)
ERROR_META = "tc-git/code"  # error results: the error code under this `_meta` key
HINT_META = "tc-git/hint"  # and the next calls that help: [{action: tool name, arguments}]
# calls that peak high and need no other workspace's parsed index: kept handles of other stores
# are dropped first (handles.drop_idle; ~10 MiB each at 50k files)
LEAN_TOOLS = frozenset({"tc_export", "tc_import", "tc_compress"})
PROGRESS_EVERY = 0.2  # seconds between progress notifications


# arguments that name files: a quoted non-UTF-8 name (`jsonsafe`) is turned back into its bytes
PATH_ARGS = frozenset({"root", "store", "to", "package", "since", "transcript", "out", "paths"})


# ------------------------------------------------------------------------------- logging
def _store_log(store: Path | str | None, line: str) -> None:
    """Append to `<store>/tc/server.log` if that store exists (never creates a store), redacted."""
    store_log(store, "server.log", line)


class _Redacting(logging.Filter):
    """The server's stderr log (which the client keeps in its own log files) redacted like a note."""

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        red = redact_count(text, load=False)[0]
        if red != text:
            record.msg, record.args = red, None
        return True


def _error(message: str, code: str = "error", hints: tuple[Hint, ...] = ()) -> CallToolResult:
    """A tool failure: the message as plain text (what the agent reads and acts on) with its hints
    as tool calls, the code at its end and in `_meta` (the hints too, as {action, arguments}). No
    structuredContent: strict clients (the TypeScript SDK) validate it against the tool's
    outputSchema even on errors and would replace the message with -32602."""
    said = "; ".join(f"{h.lead} {hint_call(h)}".strip() for h in hints)
    text = jsonsafe.text_out(f"{message}{': ' + said if said else ''} [{code}]")  # non-UTF-8 names: escaped
    meta: dict[str, Any] = {ERROR_META: code}
    if hints:
        meta[HINT_META] = [{"action": f"tc_{h.action}", "arguments": {k: v for k, v in h.args.items() if v is not None}}
                           for h in hints]
    return CallToolResult(content=[TextContent(type="text", text=text)], is_error=True, _meta=meta)


def hint_call(h: Hint) -> str:
    """A hint as the tool call an agent makes: `tc_restore(at="d0003", apply=true)`; an argument
    the agent must choose is `…`."""
    args = ", ".join(f"{k}={'…' if v is None else json.dumps(v, ensure_ascii=False)}" for k, v in h.args.items())
    return f"tc_{h.action}({args})"


def error_code(result: CallToolResult) -> str | None:
    """The code of an error result (`_meta`), for callers and tests."""
    return (result.meta or {}).get(ERROR_META)


# ------------------------------------------------------------------------------- root
async def _client_root(ctx: Context) -> str | None:
    """The first file:// root the client offers (preferring one that already has a store)."""
    try:
        caps = ctx.client_capabilities
        if caps is None or getattr(caps, "roots", None) is None:
            return None
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with anyio.fail_after(5):
                res = await ctx.session.list_roots()
    except Exception:  # no back channel, old client, timeout: fall back to the cwd
        log.debug("roots/list failed", exc_info=True)
        return None
    paths = []
    for r in res.roots:
        u = urlparse(str(r.uri))
        if u.scheme == "file":
            paths.append(unquote(u.path))
    for p in paths:
        if (Path(p) / STORE_DIRNAME).is_dir() or (Path(p) / POINTER_FILE).is_file():
            return p
    return paths[0] if paths else None


# ------------------------------------------------------------------------------- server
class TcServer(MCPServer):
    """MCPServer whose argument errors are short, actionable `isError` results."""

    watcher: Any = None  # the drift watcher (tc_git/mcp/watch.py), None with TC_WATCH=off
    tools_by_name: dict[str, Tool] = {}  # (build_server's: the SDK keeps its own in a private manager)

    async def call_tool(self, name: str, arguments: dict[str, Any], context=None):
        tool = self.tools_by_name.get(name)
        if tool is None:
            names = ", ".join(self.tools_by_name)
            return _error(f"unknown tool {name!r}; available: {names}", "bad_input")
        props = (tool.parameters or {}).get("properties", {})
        arguments = dict(arguments or {})
        for key in HIDDEN_ARGS.get(name, ()) & arguments.keys():
            if arguments[key] not in (None, [], ""):
                return _error(f"{name}: {key} is not supported (pass nothing, or an empty list)", "bad_input")
            del arguments[key]
        extra = sorted(set(arguments) - set(props))
        if extra:
            return _error(f"{name}: unknown argument(s) {', '.join(extra)}; accepted: {', '.join(props)}",
                          "bad_input")
        if type(arguments.get("at")) is int:  # a point as a step number: `at: 2` means "2"
            arguments["at"] = str(arguments["at"])
        for key in PATH_ARGS.intersection(arguments):  # a quoted non-UTF-8 name back to its bytes
            v = arguments[key]
            arguments[key] = jsonsafe.path_in(v) if isinstance(v, str) else \
                [jsonsafe.path_in(x) if isinstance(x, str) else x for x in v] if isinstance(v, list) else v
        try:
            # strict types before the SDK's lenient parse: "yes" is not a boolean, "5" not an integer
            tool.fn_metadata.arg_model.model_validate(arguments, strict=True)
            result = await super().call_tool(name, arguments, context)
        except (ToolError, ValidationError) as e:
            cause = e if isinstance(e, ValidationError) else e.__cause__
            if isinstance(cause, ValidationError):
                return _error(f"{name}: bad arguments: {_validation_message(cause)}", "bad_input")
            log.exception("tool %s failed", name)
            return _error(f"{name} failed: {jsonsafe.one_line(str(e), 300)}", "internal")
        _settle_after_answer()  # what the call freed goes back to the OS (cycles collected, malloc trimmed)
        return _encodable(name, result)


SETTLE_DELAY = 0.005  # seconds after a tool call's result, once its answer is on the wire


def _settle_after_answer() -> None:
    """heap.settle_soon() a few ms from now: started at once, its collection (1-4 ms holding the
    GIL) ran while the SDK serialised and wrote the answer, which waited for it (bench_mcp at 10k,
    traced in the server: every tc_restore answer later by that much). Memory goes back as before,
    just after the answer; a call arriving meanwhile runs beside it, as it could already."""
    import asyncio

    try:
        asyncio.get_running_loop().call_later(SETTLE_DELAY, heap.settle_soon)
    except RuntimeError:  # no asyncio loop here (another anyio backend): at once, as before
        heap.settle_soon()


def _validation_message(err: ValidationError) -> str:
    parts = []
    for e in err.errors()[:5]:
        loc = ".".join(str(x) for x in e.get("loc", ())) or "arguments"
        got = "" if e.get("type") == "missing" else f" (got {jsonsafe.one_line(repr(e.get('input')), 60)})"
        parts.append(f"{loc}: {e.get('msg', 'invalid')}{got}")
    return "; ".join(parts)


def _encodable(name: str, result):
    """Last-resort guard: a result the stdio writer could not encode (e.g. a surrogate that escaped
    `jsonsafe`) would kill the server; it becomes an isError result instead. Its text blocks are
    what is checked: a tool's structured content is the same object as its text block (`_success`
    serialises it once, as that text), and an error has none."""
    try:
        for block in result.content:
            if isinstance(block, TextContent):
                block.text.encode("utf-8")
        return result
    except Exception as e:  # UnicodeEncodeError...
        log.error("%s: result cannot be encoded: %s", name, e)
        return _error(f"{name}: the result could not be encoded as JSON ({jsonsafe.one_line(type(e).__name__ + ': ' + str(e), 160)}); "
                      "this is a tc-git bug, please report it", "internal")


class HandoffLater:
    """The SessionStart hook's handoff cache refreshed after a tool call's answer, not inside it
    (Engine.handoff_later): a record leaves a job, one thread runs the newest job of each store
    SETTLE_DELAY later (a burst of saves: once), and the server's end runs what is left."""

    def __init__(self):
        self._jobs: dict[str, Callable[[], Any]] = {}
        self._lock = threading.Lock()
        self._running = threading.Lock()  # held while jobs run: `flush` returns with none running
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    def __call__(self, key: str, job: Callable[[], Any]) -> None:
        with self._lock:
            self._jobs[key] = job
            if self._thread is None:
                self._thread = threading.Thread(target=self._serve, name="tc-handoff", daemon=True)
                self._thread.start()
        self._wake.set()

    def _serve(self) -> None:
        while True:
            self._wake.wait()
            self._wake.clear()
            time.sleep(SETTLE_DELAY)  # (the answer goes out first)
            self.flush()

    def flush(self) -> None:
        """Run the jobs left now; returns once no job is running."""
        with self._running:
            with self._lock:
                jobs, self._jobs = list(self._jobs.values()), {}
            for job in jobs:
                try:
                    job()
                except Exception:  # noqa: BLE001 - a cache: the hook then resumes the slow way
                    log.exception("refreshing the handoff cache failed")


class Runner:
    """Runs one engine call per tool call in a worker thread, maps failures to isError."""

    def __init__(self, watcher=None):
        self.watcher = watcher
        self.handoff_later = HandoffLater()
        self._engine_cls: type[Engine] | None = None
        self.last_root: str | None = None  # the workspace of the last tool call (for tc://resume)

    def engine_cls(self) -> type[Engine]:
        if self._engine_cls is None:  # pygit2 is imported on first use: faster cold start
            from ..engine import Engine

            heap.bound_libgit2()  # before the first repository: libgit2's mapped packs and cache
            self._engine_cls = Engine
        return self._engine_cls

    async def raw(self, ctx: Context | None, root: str | None, call: Callable[[Engine], Any]):
        """The engine's own result (for resources and prompts); a TcError propagates."""
        if not root:
            root = (await _client_root(ctx) if ctx is not None else None) or os.getcwd()
        engine_cls = await anyio.to_thread.run_sync(self.engine_cls)
        return await anyio.to_thread.run_sync(lambda: call(engine_cls(root)))

    async def __call__(self, ctx: Context | None, tool: str, root: str | None, call: Callable[[Engine], Any],
                       log_call: bool = True):
        """`call(engine)` in a worker thread: each tool names its engine method and passes every
        argument by name or position, so a renamed parameter is a TypeError (a test failure),
        never an argument silently dropped."""
        t0 = time.perf_counter()
        if not root:
            root = (await _client_root(ctx) if ctx is not None else None) or os.getcwd()
        self.last_root = root
        bridge = _ProgressBridge(ctx)
        engine_cls: type[Engine] = await anyio.to_thread.run_sync(self.engine_cls) if self._engine_cls is None \
            else self._engine_cls
        holder: dict = {}

        def work():
            eng = engine_cls(root, progress=bridge)
            holder["engine"] = eng
            if tool in LEAN_TOOLS:
                # the handoff jobs of earlier calls first: one of another workspace, run during
                # this call, would open that workspace's store again (its index parsed anew)
                self.handoff_later.flush()
                if handles.drop_idle(keep=eng.store_path):
                    heap.settle()  # (their pages back before this call's peak)
            eng.handoff_later = self.handoff_later
            if self.watcher is not None:  # saves refresh only what the watcher saw change
                eng.journal = self.watcher.journal(eng.root)
            result = call(eng)
            if self.watcher is not None:
                self.watcher.watch(eng)
            return result

        eng = None
        try:
            result = await anyio.to_thread.run_sync(work)
        except TcError as e:
            eng = holder.pop("engine", None)
            _store_log(eng.store_path if eng else None, f"{tool} error {e.code}: {e.message}")
            log.info("%s: %s", tool, e.message)
            return _error(e.message, e.code, e.hints)
        except Exception as e:
            eng = holder.pop("engine", None)
            tb = traceback.format_exc()
            where = eng.store_path / "tc" / "server.log" if eng and (eng.store_path / "tc").is_dir() else None
            _store_log(eng.store_path if eng else None, f"{tool} crashed:\n{tb}")
            log.error("%s crashed:\n%s", tool, tb)
            return _error(f"{tool} failed unexpectedly: {type(e).__name__}: {jsonsafe.one_line(str(e), 200)}"
                          + (f" (traceback in {where})" if where else ""), "internal")
        eng = holder.pop("engine")  # (the worker thread keeps `work` until its next job: not the engine)
        if log_call:
            _store_log(eng.store_path, f"{tool} ok {time.perf_counter() - t0:.3f}s")
        return _success(tool, result)


def _task_list(tasks: list) -> dict:
    """The active task, then the most recently active ones, at most TASKS_SHOWN; names cut to 80."""
    tasks = sorted(sorted(tasks, key=lambda t: t["updated"], reverse=True), key=lambda t: not t["active"])
    shown = [{**t, "name": t["name"] if len(t["name"]) <= 80 else t["name"][:79] + "…"} for t in tasks[:TASKS_SHOWN]]
    out: dict[str, Any] = {"tasks": shown, "total": len(tasks)}
    if len(tasks) > len(shown):
        out["omitted"] = len(tasks) - len(shown)
        out["more"] = "older tasks left out: tc_switch takes any task's id, prefix or name; `tc-git log --all` lists all"
    return out


def _success(tool: str, result) -> CallToolResult:
    """Structured content = the engine's dict (the SDK checks it against the tool's typed dict);
    the text block is the same object as compact JSON. Both together fit WIRE_BUDGET (`_fit`).
    Serialised once: the text's UTF-8 size proves it writable; only a result holding a name that
    is not UTF-8 (a surrogate) goes through `jsonsafe.safe` and is serialised again."""
    data = result if isinstance(result, dict) else {"result": result}  # (export/import of another layer)
    text = _dumps(data)
    try:
        size = _text_wire_size(text)
    except UnicodeEncodeError:
        data = jsonsafe.safe(data)
        text = _dumps(data)
        size = _text_wire_size(text)
    if size > WIRE_BUDGET:
        data = _fit(tool, data)
        text = _dumps(data)
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=data)


def _dumps(data: dict) -> str:
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"))


def _text_wire_size(text: str) -> int:
    """Bytes on the wire of a result whose JSON is `text`: the object itself, and the text block,
    a JSON string of it (json.dumps(text)), where only `"` and `\\` gain an escape: `text`, being
    JSON, holds no raw control character. UnicodeEncodeError for a string that is not UTF-8."""
    n = len(text.encode())
    return 2 * n + 2 + text.count('"') + text.count("\\") + 96


WIRE_BUDGET = 8 * 1024  # bytes of one result on the wire, text and structuredContent together
LIST_CAPS = (20, 5, 1)  # longest list kept, tried in turn until the result fits
TEXT_CAP = 400  # then strings longer than this are cut (conclusions, handoff)
MORE = {  # how to see what `truncated` left out
    "tc_restore": "narrow with paths=[dir], or `tc-git restore <id>` lists every path",
    "tc_undo": "`tc-git undo --preview` lists every path",
    "tc_import": "`tc-git log` and `tc-git restore <id>` list every path",
    "tc_resume": "`tc-git diff --stat` lists every unsaved path",
    "tc_show": "page with limit/cursor, or one step with index",
}


def _wire_size(data: dict) -> int:
    return _text_wire_size(_dumps(data))


def _fit(tool: str, data: dict) -> dict:
    """A result within WIRE_BUDGET for any workspace: lists cut to their first few (their full
    lengths in `truncated`, keyed by where they are, and `more`: how to see the rest), then long
    strings cut. Almost every result fits as it is and is returned untouched."""
    if _wire_size(data) <= WIRE_BUDGET:
        return data
    cut: dict[str, int] = {}
    for cap in LIST_CAPS:
        data = _cap(data, cap, cut, "", None)
        if cut:
            data["truncated"], data["more"] = cut, MORE.get(tool, "the CLI (`tc-git`) prints every item")
        if _wire_size(data) <= WIRE_BUDGET:
            return data
    return _cap(data, None, cut, "", TEXT_CAP)


def _cap(node, cap: int | None, cut: dict, where: str, text: int | None):
    if isinstance(node, dict):
        return {k: node[k] if k in ("truncated", "more") else _cap(v, cap, cut, f"{where}.{k}".lstrip("."), text)
                for k, v in (node.items())}
    if isinstance(node, list):
        if cap is not None and len(node) > cap:
            cut[where] = max(cut.get(where, 0), len(node))
            node = node[:cap]
        return [_cap(x, cap, cut, where, text) for x in node]
    if text is not None and isinstance(node, str) and len(node) > text:
        return node[:text] + "…"
    return node


def _warm(run: Runner) -> None:
    try:
        run.engine_cls()
    except Exception:  # the first tool call will report it
        log.debug("engine import failed", exc_info=True)


class _ProgressBridge:
    """Engine progress callback (worker thread) -> notifications/progress (event loop)."""

    def __init__(self, ctx: Context | None):
        self.ctx = ctx
        self.last = 0.0
        self.enabled = ctx is not None and _wants_progress(ctx)

    def __call__(self, done, total=None, message=""):
        if not self.enabled:
            return
        now = time.monotonic()
        final = bool(total) and done >= total
        if now - self.last < PROGRESS_EVERY and not final:
            return
        self.last = now
        try:
            anyio.from_thread.run(self.ctx.report_progress, float(done),
                                  float(total) if total else None, jsonsafe.path_out(message) if message else None)
        except Exception:  # a closed stream must never break the engine call
            self.enabled = False


def _wants_progress(ctx: Context) -> bool:
    try:
        meta = ctx.request_context.meta
    except Exception:
        return False
    if meta is None:
        return False
    if isinstance(meta, dict):
        return meta.get("progressToken", meta.get("progress_token")) is not None
    return getattr(meta, "progress_token", None) is not None or getattr(meta, "progressToken", None) is not None


def _strip_titles(schema):
    """pydantic puts an auto "title" on every schema node; they only make tools/list bigger."""
    if isinstance(schema, dict):
        schema.pop("title", None) if isinstance(schema.get("title"), str) else None
        for key, value in schema.items():
            if key in ("properties", "$defs", "definitions", "patternProperties") and isinstance(value, dict):
                for sub in value.values():
                    _strip_titles(sub)
            elif isinstance(value, (dict, list)):
                _strip_titles(value)
    elif isinstance(schema, list):
        for x in schema:
            _strip_titles(x)
    return schema


def _compact_optional(schema: dict) -> dict:
    """Input schema: `anyOf [X, null]` with default null -> X (omitting the argument means null)."""
    for prop in (schema.get("properties") or {}).values():
        any_of = prop.get("anyOf")
        if prop.get("default", 0) is None and isinstance(any_of, list) and len(any_of) == 2 \
                and {"type": "null"} in any_of:
            prop.pop("anyOf")
            prop.pop("default")
            prop.update(next(x for x in any_of if x != {"type": "null"}))
    return schema


# What each tool's outputSchema shows of its result's typed dict (tc_git/base/results.py, the one
# declaration the CLI reads too): the top-level keys an agent acts on with their types (nested
# objects as plain `object`), a few with a word. Every byte of tools/list is paid in every session
# (16 KB cap) while no agent reads output schemas (Claude Code 2.1 sends the model each tool's name,
# description and input schema only): they are for clients that validate. Results still carry
# every key (the schemas allow more). A tool not here (free-form records, or a result read as text: tc_undo's is
# tc_restore's) has none; its JSON is still the structuredContent.
SHOWN: dict[str, tuple[Any, str]] = {
    "tc_init": (results.InitResult, "task_id store prev_suspended"),
    "tc_save": (results.SaveResult, "task_id index commit skipped_paths idempotent closed newly_left_out redacted"),
    "tc_resume": (results.ResumeResult, "task_id status goal constraints head last next open_questions drift_paths "
                                        "drift_total handoff"),
    "tc_show": (results.ShowResult, "head steps drifts next_cursor"),
    "tc_restore": (results.RestoreResult, "applied recovered target plan failed"),
    "tc_capture": (results.CaptureResult, "captured drift_id files"),
    "tc_switch": (results.SwitchResult, "task_id status"),
    "tc_export": (results.ExportResult, "task_id path handoff incremental"),
    "tc_import": (results.ImportResult, "task_id restore"),
    "tc_compress": (results.CompressResult, "converted bytes_freed"),
    "tc_tasks": (results.TaskList, "tasks total"),
    "tc_record": (results.RecordResult, "session events new_commits tip milestone"),
}
SAID = {  # a word on the keys whose name alone does not say it
    "tc_save": {"index": "step number", "skipped_paths": "not stored (ignored, sensitive, too large)",
                "newly_left_out": "newly left out (secret, too large), said once",
                "redacted": "fields with credentials redacted"},
    "tc_resume": {"drift_paths": "unsaved changes (capped)", "handoff": "summary for a new session"},
    "tc_show": {"next_cursor": "cursor of the next page"},
    "tc_restore": {"recovered": "restore point (tc_undo returns to it)"},
    "tc_import": {"restore": "the restore to the imported head; its note says what was written"},
}


@functools.cache
def _readable(tp):
    """`tp` as pydantic reads it: below Python 3.12 it takes `typing_extensions` TypedDicts only, so
    results.py's (stdlib: the CLI starts without pydantic) are rebuilt so, nested ones too."""
    if is_typeddict(tp):
        hints = {k: _readable(h) for k, h in get_type_hints(tp).items()}
        return te.TypedDict(tp.__name__, {k: h if k in tp.__required_keys__ else te.NotRequired[h]
                                          for k, h in hints.items()})
    args = get_args(tp)
    if not args:
        return tp
    if get_origin(tp) in (Union, types.UnionType):
        return functools.reduce(operator.or_, map(_readable, args))
    return get_origin(tp)[tuple(map(_readable, args))]


def _output_schema(tool: str, depth: int = 1) -> dict:
    """The outputSchema of a SHOWN tool as an agent reads it: its shown keys (and words), `$ref`s
    inlined, optional as `type: [X, "null"]`, no defaults, `required` or titles, objects below
    `depth` as plain `object`. The SDK validates each result against the typed dict itself."""
    td, keys = SHOWN[tool]
    shown, said = frozenset(keys.split()), SAID.get(tool, {})
    schema = TypeAdapter(_readable(td)).json_schema()
    defs = schema.get("$defs", {})

    def walk(node, level=0):
        if isinstance(node, list):
            return [walk(x, level) for x in node]
        if not isinstance(node, dict):
            return node
        if "$ref" in node:
            node = {**defs[node["$ref"].rsplit("/", 1)[-1]], **{k: v for k, v in node.items() if k != "$ref"}}
        any_of = node.get("anyOf")
        if isinstance(any_of, list) and len(any_of) == 2 and {"type": "null"} in any_of:
            other = walk(next(x for x in any_of if x != {"type": "null"}), level)
            if isinstance(other.get("type"), str):
                node = {**{k: v for k, v in node.items() if k != "anyOf"}, **other, "type": [other["type"], "null"]}
        out = {}
        for k, v in node.items():
            if k in ("$defs", "default", "required", "title") or (k == "additionalProperties" and v is True):
                continue
            if k == "properties":
                if level < depth:
                    out[k] = {name: walk({"description": said[name], **sub} if name in said else sub, level + 1) for name, sub in v.items() if name in shown}
            else:
                out[k] = walk(v, level)
        return out

    return walk(schema)


def _drop_trivial_defaults(schema: dict) -> dict:
    """Input schema: a default of "", false or [] says nothing a description does not; numbers stay."""
    for prop in (schema.get("properties") or {}).values():
        d = prop.get("default", 0)
        if d is False or d is None or d == "" or d == []:  # (0 == False: compare by identity)
            prop.pop("default")
    return schema


def _one_paragraph(text: str | None) -> str:
    return " ".join((text or "").split())


def _compact_tool(tool: Tool) -> None:
    """A tool as tools/list shows it (every byte is paid in every session): one-paragraph
    description, compact input schema, and the output schema of its typed result (SHOWN)."""
    tool.description = _one_paragraph(tool.description)
    for hidden in HIDDEN_ARGS.get(tool.name, ()):
        tool.parameters["properties"].pop(hidden, None)
    _strip_titles(tool.parameters)
    _compact_optional(tool.parameters)
    _drop_trivial_defaults(tool.parameters)
    if tool.name in SHOWN:  # (the SDK validates each result against output_model)
        tool.fn_metadata.output_model = _readable(SHOWN[tool.name][0])
        tool.fn_metadata.output_schema = _output_schema(tool.name)
        tool.__dict__.pop("output_schema", None)  # Tool.output_schema is a cached_property


# ------------------------------------------------------------------------------- tools
# Short shared parameter descriptions: they are paid once per tool in every session's context.
Root = Annotated[str | None, Field(description="workspace dir")]  # its default: INSTRUCTIONS
TaskId = Annotated[str | None, Field(description="id, prefix or name (default active)")]
AT_HELP = "2, s0002, d0001, r0001, a commit prefix or a milestone"
TASKS_SHOWN = 15  # tc_tasks lists at most this many (the active one always): a result stays small
Point = Annotated[str, Field(description="milestone, session[/branch] or event id")]
Remote = Annotated[str | None, Field(description="remote name, URL or path (default: origin)")]
# advertised by the seed as "reserved; must be empty": still accepted (empty) from seed clients, not listed
HIDDEN_ARGS = {"tc_save": frozenset({"paths"})}
# tc_blame: hunks and origins, free form; its JSON at most BLAME_BYTES, so that the text block and
# structuredContent together stay under 8 KB on the wire (the rest: start=next_start)
BLAME_BYTES = 3500


def _ann(title: str, read_only=False, destructive=False, idempotent=False) -> ToolAnnotations | None:
    """Only the hints clients act on (read-only, not destructive), and only where they differ from
    the spec's defaults (a destructive tool carries none): every byte of tools/list is paid in every
    session. The title repeats the name; idempotence is said in the descriptions where it matters."""
    del title, idempotent
    if read_only:
        return ToolAnnotations(read_only_hint=True)
    return None if destructive else ToolAnnotations(destructive_hint=False)


def build_server(watch: bool | None = None) -> TcServer:
    """A server instance. `watch=None` follows TC_WATCH (on unless `off`)."""
    from .watch import DriftWatcher, watch_enabled

    watcher = DriftWatcher(log_line=_store_log) if (watch_enabled() if watch is None else watch) else None
    run = Runner(watcher)

    @contextlib.asynccontextmanager
    async def lifespan(_server):
        # import the engine (pygit2) while the client is still initialising, not in the first call
        threading.Thread(target=_warm, args=(run,), name="tc-warm-import", daemon=True).start()
        handles.enable()  # while serving, indexes are written after each answer, under the store's lock
        try:
            yield {}
        finally:
            if watcher is not None:
                await anyio.to_thread.run_sync(watcher.stop)
            await anyio.to_thread.run_sync(run.handoff_later.flush)
            handles.enable(False)
            await anyio.to_thread.run_sync(handles.flush_all)  # (atexit does it too)

    tools: dict[str, Tool] = {}

    def tool(annotations: ToolAnnotations | None):
        def add(fn):
            t = tools[fn.__name__] = Tool.from_function(fn, annotations=annotations)
            _compact_tool(t)
            return fn
        return add


    @tool(annotations=_ann("Start a task"))
    async def tc_init(
        ctx: Context,
        name: Annotated[str, Field(description="short task name")],
        root: Root = None,
        goal: Annotated[str, Field(description="what done looks like")] = "",
        constraints: Annotated[str, Field(description="rules the work must keep")] = "",
        store: Annotated[str | None, Field(description="store dir (default .checkpoints)")] = None,
        exclude: Annotated[list[str] | None, Field(description="gitignore-style patterns to leave out")] = None,
    ) -> CallToolResult:
        """Start a task and make it active (the active one is suspended). Once per long task; then
        tc_save per step."""
        return await run(ctx, "tc_init", root, lambda e: e.init(name, goal, constraints, store, exclude or []))

    @tool(annotations=_ann("Save a step", idempotent=True))
    async def tc_save(
        ctx: Context,
        title: Annotated[str, Field(description="what this step did, one line")],
        root: Root = None,
        task_id: TaskId = None,
        description: Annotated[str, Field(description="details")] = "",
        conclusion: Annotated[str, Field(description="what was learned or decided")] = "",
        verified: Annotated[list[str] | None, Field(description="checks that passed")] = None,
        open_questions: Annotated[list[str] | None, Field(description="still unresolved")] = None,
        next: Annotated[str, Field(description="the next step, for whoever resumes")] = "",
        close: Annotated[bool, Field(description="then close the task")] = False,
        paths: Annotated[list[str] | None, Field(description="reserved; must be empty")] = None,
    ) -> CallToolResult:
        """Record a completed step: a workspace snapshot with title, conclusion and next. Idempotent."""
        return await run(ctx, "tc_save", root, lambda e: e.save(title, task_id=task_id, description=description,
                                                                conclusion=conclusion, verified=verified or [],
                                                                open_questions=open_questions or [], next=next,
                                                                close=close, paths=paths or []))

    @tool(annotations=_ann("Resume a task", read_only=True, idempotent=True))
    async def tc_resume(
        ctx: Context,
        root: Root = None,
        task_id: TaskId = None,
        lang: Annotated[str, Field(description="handoff language: en or zh")] = "en",
    ) -> CallToolResult:
        """Call first in a new session: goal, step, last conclusion, next, open questions, unsaved
        paths, `handoff` text."""
        return await run(ctx, "tc_resume", root, lambda e: e.resume(task_id, lang), log_call=False)

    @tool(annotations=_ann("Show steps", read_only=True, idempotent=True))
    async def tc_show(
        ctx: Context,
        root: Root = None,
        task_id: TaskId = None,
        index: Annotated[int | None, Field(ge=1, description="one step only")] = None,
        include_drift: Annotated[bool, Field(description="also list drift/restore records")] = False,
        limit: Annotated[int, Field(ge=1, le=200, description="page size")] = 50,
        cursor: Annotated[int | None, Field(ge=0, description="next_cursor of the previous page")] = None,
    ) -> CallToolResult:
        """A task's steps, oldest first, paginated by limit and cursor."""
        return await run(ctx, "tc_show", root, lambda e: e.show(task_id, index, include_drift, limit, cursor),
                         log_call=False)

    @tool(annotations=_ann("Restore the workspace", destructive=True, idempotent=True))
    async def tc_restore(
        ctx: Context,
        root: Root = None,
        at: Annotated[str | None, Field(description=AT_HELP)] = None,
        index: Annotated[int | None, Field(ge=1, description="= at (a step number)")] = None,
        drift_id: Annotated[str | None, Field(description="= at (dNNNN)")] = None,
        apply: Annotated[bool, Field(description="true: write files; false: preview")] = False,
        paths: Annotated[list[str] | None, Field(description="only these files/dirs")] = None,
    ) -> CallToolResult:
        """Bring the workspace back to a point. Preview first; apply=true keeps the current state as
        restore point `recovered`, then writes (tc_undo reverses it)."""
        return await run(ctx, "tc_restore", root, lambda e: e.restore(index, drift_id, apply, paths=paths, at=at),
                         log_call=apply)

    @tool(annotations=_ann("Capture unsaved changes", idempotent=True))
    async def tc_capture(ctx: Context, root: Root = None) -> CallToolResult:
        """Record unsaved changes now as a drift (not a step); captured=false: none."""
        return await run(ctx, "tc_capture", root, lambda e: e.capture())

    @tool(annotations=_ann("Switch task", idempotent=True))
    async def tc_switch(ctx: Context, task_id: Annotated[str, Field(description="id, unique prefix or name")],
                        root: Root = None) -> CallToolResult:
        """Make another task active (the current one is suspended). Closed tasks stay closed."""
        return await run(ctx, "tc_switch", root, lambda e: e.switch(task_id))

    @tool(annotations=_ann("Export a handoff"))
    async def tc_export(
        ctx: Context,
        to: Annotated[str, Field(description="existing dir (or .bundle path)")],
        root: Root = None,
        task_id: TaskId = None,
        since: Annotated[str | None, Field(description="earlier bundle: write only what it lacks")] = None,
    ) -> CallToolResult:
        """Write the task and its history as a git bundle + HANDOFF.md into `to` (unsaved work
        captured first), for tc_import."""
        return await run(ctx, "tc_export", root, lambda e: e.export(to, since=since, task_id=task_id))

    @tool(annotations=_ann("Import a handoff", destructive=True))
    async def tc_import(
        ctx: Context,
        package: Annotated[str, Field(description="tc_export's .bundle (or seed handoff dir)")],
        root: Root = None,
        rename: Annotated[str | None, Field(description="import under this task id")] = None,
        merge: Annotated[bool, Field(description="add to an existing task of the same id")] = False,
        apply: Annotated[bool | None, Field(description="true: write files (undoable); false: preview")] = None,
    ) -> CallToolResult:
        """Import a tc_export bundle and make its task active. Files are written if that overwrites
        nothing, else previewed (then apply=true)."""
        return await run(ctx, "tc_import", root, lambda e: e.import_(package, rename=rename, merge=merge, apply=apply))

    @tool(annotations=_ann("Compress drifts", destructive=True, idempotent=True))
    async def tc_compress(
        ctx: Context,
        root: Root = None,
        keep_seconds: Annotated[int, Field(ge=0, description="drifts younger than this are kept")] = 604800,
        minimum: Annotated[int, Field(ge=0, description="newest drifts always kept")] = 20,
        maximum: Annotated[int, Field(ge=1, description="at most this many drifts kept")] = 50,
    ) -> CallToolResult:
        """Drop old drifts of the active task (never steps or restore points) and repack the store."""
        return await run(ctx, "tc_compress", root, lambda e: e.compress(keep_seconds, minimum, maximum))

    # -- beyond the seed's ten
    @tool(annotations=_ann("List tasks", read_only=True, idempotent=True))
    async def tc_tasks(ctx: Context, root: Root = None) -> CallToolResult:
        """This store's tasks, most recent first, the active one marked."""
        return await run(ctx, "tc_tasks", root, lambda e: _task_list(e.tasks()), log_call=False)

    @tool(annotations=_ann("Undo the last restore", destructive=True))
    async def tc_undo(ctx: Context, root: Root = None,
                      apply: Annotated[bool, Field(description="true: write files; false: preview")] = False,
                      ) -> CallToolResult:
        """Reverse the last applied restore or import. Preview first; undo again to redo."""
        return await run(ctx, "tc_undo", root, lambda e: e.undo(apply=apply), log_call=apply)

    # -- git remotes (handoff layer)
    @tool(annotations=_ann("Push checkpoints", idempotent=True))
    async def tc_push(ctx: Context, root: Root = None, remote: Remote = None) -> CallToolResult:
        """Send the checkpoints and notes to a git remote (rejections are errors)."""
        return await run(ctx, "tc_push", root, lambda e: e.push(remote))

    @tool(annotations=_ann("Pull checkpoints", idempotent=True))
    async def tc_pull(ctx: Context, root: Root = None, remote: Remote = None) -> CallToolResult:
        """Fetch checkpoints and notes from a git remote (notes merged, files untouched)."""
        return await run(ctx, "tc_pull", root, lambda e: e.pull(remote))

    @tool(annotations=_ann("Recover a deleted store", idempotent=True))
    async def tc_recover(ctx: Context, root: Root = None,
                         apply: Annotated[bool, Field(description="true: write the store; false: preview")] = False,
                         ) -> CallToolResult:
        """The store was deleted (git clean -ffdx): bring its tasks back from the git repo's mirror,
        step ids kept. Preview first."""
        return await run(ctx, "tc_recover", root, lambda e: e.recover(apply=apply), log_call=apply)

    # -- trajectory layer
    @tool(annotations=_ann("Record the conversation", idempotent=True))
    async def tc_record(
        ctx: Context, root: Root = None,
        transcript: Annotated[str | None, Field(description="Claude Code/Codex .jsonl transcript")] = None,
        steps: Annotated[list[dict[str, Any]] | None, Field(description="or [{role, content}] or "
                                                                        "tool-call steps")] = None,
        milestone: Annotated[str | None, Field(description="name the tip (links the code of now)")] = None,
        session: Annotated[str | None, Field(description="session id for steps")] = None,
    ) -> CallToolResult:
        """Record a conversation as git history, one commit per event (secrets redacted); again: only
        new events."""
        return await run(ctx, "tc_record", root, lambda e: e.record(transcript=transcript, steps=steps,
                                                                    milestone=milestone, session=session))

    @tool(annotations=_ann("List sessions and milestones", read_only=True, idempotent=True))
    async def tc_sessions(ctx: Context, root: Root = None) -> CallToolResult:
        """Recorded sessions with their branches, and every milestone."""
        return await run(ctx, "tc_sessions", root, lambda e: e.sessions(), log_call=False)

    @tool(annotations=_ann("Name a milestone", idempotent=True))
    async def tc_milestone(ctx: Context, name: Annotated[str, Field(description="milestone name")], at: Point,
                           root: Root = None, message: Annotated[str, Field(description="why it matters")] = "",
                           force: Annotated[bool, Field(description="move an existing milestone")] = False) -> CallToolResult:
        """Name a moment of the conversation; it is linked to the code as it is now."""
        return await run(ctx, "tc_milestone", root, lambda e: e.milestone(name, at, message, force))

    @tool(annotations=_ann("Conversation log", read_only=True, idempotent=True))
    async def tc_events(ctx: Context, point: Point, root: Root = None,
                        limit: Annotated[int, Field(ge=1, le=200, description="page size")] = 50,
                        offset: Annotated[int, Field(ge=0, description="next_offset of the previous page")] = 0,
                        ) -> CallToolResult:
        """Events up to a point, newest first, one line each; paginated by offset."""
        return await run(ctx, "tc_events", root, lambda e: e.trajectory_log(point, limit, offset), log_call=False)

    @tool(annotations=_ann("Checkout a conversation point", destructive=True))
    async def tc_checkout(ctx: Context, point: Point, root: Root = None,
                          restore_code: Annotated[bool, Field(description="also restore the linked code")] = False,
                          apply: Annotated[bool, Field(description="with restore_code: write "
                                                                   "(undoable), else preview")] = False,
                          paths: Annotated[list[str] | None, Field(description="with restore_code: only "
                                                                               "these files/dirs")] = None,
                          ) -> CallToolResult:
        """The conversation up to a point (last 200 messages); restore_code: its code too, as
        tc_restore."""
        return await run(ctx, "tc_checkout", root, lambda e: e.checkout(point, restore_code, apply, paths=paths))

    @tool(annotations=_ann("Export a conversation as Markdown", read_only=True, idempotent=True))
    async def tc_markdown(ctx: Context, point: Point, root: Root = None,
                          out: Annotated[str | None, Field(description="write to this file, not "
                                                                       "the reply")] = None) -> CallToolResult:
        """A conversation as readable Markdown."""
        return await run(ctx, "tc_markdown", root, lambda e: e.export_markdown(point, out))

    @tool(annotations=_ann("Branch a conversation"))
    async def tc_branch(ctx: Context, name: Annotated[str, Field(description="branch name")], at: Point,
                        root: Root = None,
                        session: Annotated[str | None, Field(description="default: the session of `at`")] = None,
                        ) -> CallToolResult:
        """A named fork of a conversation at an event."""
        return await run(ctx, "tc_branch", root, lambda e: e.branch(name, at, session))

    @tool(annotations=_ann("Diff two conversation points", read_only=True, idempotent=True))
    async def tc_trajectory_diff(ctx: Context, a: Point, b: Point, root: Root = None) -> CallToolResult:
        """Common ancestor, what each side said and did since, and their code diff."""
        return await run(ctx, "tc_trajectory_diff", root, lambda e: e.trajectory_diff(a, b), log_call=False)

    @tool(annotations=_ann("Replay a conversation", read_only=True, idempotent=True))
    async def tc_replay(ctx: Context, point: Point, root: Root = None,
                        mode: Annotated[str, Field(description="messages, code (per event) or "
                                                               "verify (re-apply edits)")] = "messages") -> CallToolResult:
        """Walk a conversation from its start to a point."""
        return await run(ctx, "tc_replay", root, lambda e: e.replay(point, mode), log_call=False)

    @tool(annotations=_ann("Resume a session in its agent", destructive=True))  # code+apply writes
    async def tc_resume_session(
        ctx: Context, point: Point, client: Annotated[Literal["claude", "codex"], Field(description="agent")],
        root: Root = None,
        code: Annotated[bool, Field(description="also restore its code")] = False,
        apply: Annotated[bool, Field(description="with code: write (undoable), else preview")] = False,
        drop_thinking: Annotated[bool, Field(description="no thinking")] = False,
        keep_thinking: Annotated[bool, Field(description="keep unsigned thinking")] = False,
    ) -> CallToolResult:
        """The conversation up to a point as a file its agent resumes (`command`)."""
        return await run(ctx, "tc_resume_session", root,
                         lambda e: e.resume_session(point, client, code, apply, drop_thinking=drop_thinking,
                                                    keep_thinking=keep_thinking))

    @tool(annotations=_ann("Blame a file", read_only=True, idempotent=True))
    async def tc_blame(ctx: Context, path: Annotated[str, Field(description="file")], root: Root = None,
                       line: Annotated[int | None, Field(ge=1, description="why this line")] = None,
                       at: Annotated[str | None, Field(description="point (s0004); default now")] = None,
                       start: Annotated[int | None, Field(ge=1, description="from line")] = None) -> CallToolResult:
        """Per line: the step or drift, tool call and prompt that last changed it, or unattributed."""
        return await run(ctx, "tc_blame", root, lambda e: e.why(path, line, at) if line else
                         e.blame(path, at, start=start or 1, limit=2000, budget=BLAME_BYTES), log_call=False)

    mcp = TcServer("tc-git", version=__version__, instructions=INSTRUCTIONS, lifespan=lifespan,
                   tools=list(tools.values()),
                   log_level="WARNING")
    mcp.watcher, mcp.tools_by_name = watcher, tools

    # -- resources and prompts: where clients look without calling a tool (Claude Code: @-mentions
    # and slash commands /mcp__tc-git__resume, /mcp__tc-git__save-step)
    async def handoff(ctx: Context | None) -> str:
        try:
            info = await run.raw(ctx, run.last_root, lambda e: e.resume())
        except TcError as e:
            return f"No task to resume here: {e.message}"
        return jsonsafe.text_out(info.get("handoff") or "")

    @mcp.resource("tc://resume", name="resume", title="Task handoff", mime_type="text/plain",
                  description="The active task of this workspace: goal, step, last conclusion, next step, "
                              "open questions and unsaved changes (what tc_resume returns as `handoff`).")
    async def resume_resource() -> str:
        # a static resource gets no Context (SDK rule): the workspace of the last tool call, else cwd
        return await handoff(None)

    @mcp.prompt(name="resume", title="Resume the task",
                description="Continue this workspace's active task from its handoff.")
    async def resume_prompt(ctx: Context) -> str:
        return (f"Continue this task where it stopped. Its handoff:\n\n{await handoff(ctx)}\n\n"
                "Check the unsaved changes listed first (tc_resume has details), then do the next step. "
                "After each completed step call tc_save with title, conclusion and next.")

    @mcp.prompt(name="save-step", title="Save the step",
                description="Record the step just completed with tc_save (title, conclusion, next).")
    def save_step_prompt(note: Annotated[str, Field(description="anything the record must mention")] = "") -> str:
        return ("Record the step you just completed: call tc_save with title (one line: what was done), "
                "conclusion (what was learned or decided), verified (checks that passed), open_questions "
                "(what is still unresolved) and next (the next step, for whoever resumes)."
                + (f" Mention: {jsonsafe.text_out(note)}" if note else ""))

    return mcp


# ------------------------------------------------------------------------------- entry point
def _setup_logging() -> None:
    s = settings.current()
    level = s.log_level
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("tc-git-mcp %(levelname)s %(name)s: %(message)s"))
    handler.addFilter(_Redacting())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.WARNING)
    logging.getLogger("tc_git").setLevel(getattr(logging, level, logging.INFO))
    env_store = s.store
    if env_store:
        _store_log(Path(os.path.expanduser(env_store)), f"tc-mcp {__version__} start (cwd {os.getcwd()})")


# ------------------------------------------------------------------------------- fast start (mcp_fast.py)
_PREBUILT: list = []


def warm() -> None:
    """mcp_fast's background thread: the server object and the engine, ready for the handover."""
    if not _PREBUILT:
        _PREBUILT.append(build_server())
    try:
        from .. import engine  # noqa: F401  (pygit2)
    except Exception:  # the first tool call reports it
        log.debug("engine import failed", exc_info=True)
    heap.freeze()  # what start-up loaded is never garbage: per-call collections skip it
    _release_idle_secrets_engine()


def _release_idle_secrets_engine() -> None:
    """The credential engine (~45 MiB) is dropped after `secrets_idle` seconds (300) unused. Its
    compiled rules are built into their disk cache first if missing (a fresh HOME), in the
    background: the agent's first file edit then does not compile them in the PostToolUse hook."""
    from ..workspace import secrets

    def build() -> None:
        try:
            secrets.build_rule_cache()
        except Exception:  # only the first hook's speed depends on it
            log.debug("secret rule cache not built", exc_info=True)

    threading.Thread(target=build, name="tc-secret-rules", daemon=True).start()

    idle = settings.current().secrets_idle
    if idle > 0:
        secrets.release_when_idle(idle)


def cache_payload(server: TcServer) -> dict:
    """What mcp_fast answers before the SDK is loaded: for every handshake protocol version, the
    initialize and tools/list results exactly as this server's SDK would put them on the wire
    (cache hints, then the per-version sieve: see mcp.server.runner's `_serialize`)."""
    from mcp.types import DiscoverResult, Implementation, InitializeResult, ListToolsResult
    from mcp_types import methods as spec
    from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, LATEST_HANDSHAKE_VERSION, MODERN_PROTOCOL_VERSIONS

    low = server._lowlevel_server
    opts = low.create_initialization_options()
    tools = ListToolsResult(tools=anyio.run(server.list_tools))

    def wire(method: str, version: str, result) -> dict:
        dumped = result.model_dump(by_alias=True, mode="json", exclude_none=True)
        hint = (getattr(low, "cache_hints", None) or {}).get(method)
        if hint is not None:
            dumped = {"ttlMs": hint.ttl_ms, "cacheScope": hint.scope, **dumped}
        if method in spec.SPEC_CLIENT_METHODS:
            dumped = spec.serialize_server_result(method, version, dumped)
        if version in MODERN_PROTOCOL_VERSIONS:  # 2026-era: resultType, then the serverInfo stamp
            dumped.setdefault("resultType", "complete")
            dumped["_meta"] = {**(dumped.get("_meta") or {}), "io.modelcontextprotocol/serverInfo": low.server_info_stamp}
        return dumped

    init, listed = {}, {}
    for v in HANDSHAKE_PROTOCOL_VERSIONS:
        res = InitializeResult(protocol_version=v, capabilities=opts.capabilities,
                               server_info=Implementation(name=opts.server_name, title=opts.title,
                                                          description=opts.description, version=opts.server_version,
                                                          website_url=opts.website_url, icons=opts.icons),
                               instructions=opts.instructions)
        init[v], listed[v] = wire("initialize", v, res), wire("tools/list", v, tools)
    # the current SDK's client (mode "auto") asks server/discover first, then each request carries
    # its protocol version in `_meta`: no initialize (tc_git/mcp/fast.py answers both eras)
    discover, modern = {}, {}
    for v in MODERN_PROTOCOL_VERSIONS:
        found = DiscoverResult(supported_versions=list(MODERN_PROTOCOL_VERSIONS),
                               capabilities=low.get_capabilities(protocol_version=v), instructions=low.instructions)
        discover[v], modern[v] = wire("server/discover", v, found), wire("tools/list", v, tools)
    return {"versions": list(HANDSHAKE_PROTOCOL_VERSIONS), "latest": LATEST_HANDSHAKE_VERSION,
            "initialize": init, "tools": listed, "discover": discover, "modern_tools": modern}


def _write_fast_cache(server: TcServer) -> None:
    if mcp_wire.load_cache() is None:
        try:
            mcp_wire.write_cache(cache_payload(server))
        except Exception:  # only the next start's speed depends on it
            log.debug("fast-start cache not written", exc_info=True)


class _ReplayIn(io.TextIOBase):
    """stdin for the SDK after a handover: the requests already seen, then the wire."""

    def readable(self) -> bool:
        return True

    def __init__(self, prelude: list[bytes], wire, out):
        self.prelude, self.wire, self.out = list(prelude), wire, out

    def readline(self, size=-1) -> str:  # type: ignore[override]  # a text stream: str lines
        while True:
            raw = self.prelude.pop(0) if self.prelude else mcp_wire.read_line(self.wire, self.out)
            if not raw:
                return ""
            # too deep, too long, not JSON(-RPC), lone surrogates: answered there, never reach the SDK
            passed = mcp_wire.screen(raw, self.out)
            if passed is not None:
                return passed.decode("utf-8", "replace")


class _DropFirstAnswer(io.TextIOBase):
    """stdout for the SDK after a handover: the wire, minus the answer to the replayed initialize."""

    def __init__(self, wire, drop_id):
        self.wire, self.drop, self.dropping, self.buf = wire, drop_id, drop_id is not None, ""

    def writable(self) -> bool:
        return True

    def write(self, s: str) -> int:
        self.buf += s
        while "\n" in self.buf:
            line, self.buf = self.buf.split("\n", 1)
            if self.dropping:
                try:
                    msg = json.loads(line)
                except ValueError:
                    msg = None
                if isinstance(msg, dict) and msg.get("id") == self.drop and ("result" in msg or "error" in msg):
                    self.dropping = False
                    continue
            self.wire.write_line(line.encode("utf-8"))
        return len(s)

    def flush(self) -> None:
        pass  # every line is flushed as it is written


def run_handover(prelude: list[bytes], wire_in, wire_out, drop_id, fast: bool = True) -> None:
    """Serve the rest of a session that mcp_fast began (see its docstring)."""
    from mcp.server.stdio import stdio_server

    if fast:  # (a full start has set up logging already)
        _setup_logging()
        log.info("tc-mcp %s on stdio (pid %d, fast start)", __version__, os.getpid())
    server = _PREBUILT[0] if _PREBUILT else build_server()

    async def serve():
        stdin = anyio.wrap_file(_ReplayIn(prelude, wire_in, wire_out))
        stdout = anyio.wrap_file(_DropFirstAnswer(wire_out, drop_id))
        async with stdio_server(stdin, stdout) as (read_stream, write_stream):
            low = server._lowlevel_server
            await low.run(read_stream, write_stream, low.create_initialization_options())

    try:
        anyio.run(serve)
    except KeyboardInterrupt:
        pass


def main(argv=None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in ("-h", "--help"):
        print("tc-mcp: the tc-git MCP server on stdio (no arguments). Env: TC_STORE, TC_WATCH=off, "
              "TC_WATCH_INTERVAL, TC_DRIFT_MAX_WAIT, TC_LOCK_TIMEOUT, TC_LOG_LEVEL (docs/reference.md). "
              "Skill: `tc-git setup --client claude`.")
        return
    if argv and argv[0] == "--version":
        print(f"tc-mcp {__version__}")
        return
    if argv:
        print(f"tc-mcp: unknown arguments {argv!r} (try --help)", file=sys.stderr)
        sys.exit(2)
    settings.install(settings.Settings.from_env())  # the server process's settings, read once
    _setup_logging()
    server = build_server()
    _write_fast_cache(server)
    heap.freeze()
    _release_idle_secrets_engine()
    log.info("tc-mcp %s on stdio (pid %d)", __version__, os.getpid())
    _PREBUILT[:] = [server]
    wire_in, wire_out = mcp_wire.claim_wire()
    run_handover([], wire_in, wire_out, None, fast=False)  # the same stream guards as after a fast start


if __name__ == "__main__":
    main()
