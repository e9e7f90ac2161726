"""Read a transcript file (Claude Code or Codex, auto-detected) or a list of generic steps.

Readers never raise on content: a line that is not JSON, or has a type we do not know, is
skipped and counted in `Transcript.stats`. A torn last line (the agent is still writing) is
just a malformed line today and a complete one on the next, incremental, recording.
"""
from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from ..base.errors import BadInput
from .claude import read_claude
from .codex import ENVELOPE_TYPES, ITEM_TYPES, attach_agent, history_base, read_codex, spawned_agents
from .model import (
    MAX_JSON_DEPTH,
    MAX_JSON_VALUES,
    MAX_LINE_BYTES,
    MAX_TRANSCRIPT_BYTES,
    PREVIEW_CHARS,
    Event,
    Malformed,
    Transcript,
    malformed_events,
    parse_time,
)

__all__ = ["read_transcript", "read_steps", "detect_format", "subagent_files", "iter_lines", "check_size"]


def iter_lines(path: Path) -> Iterator[Any]:
    """Parsed JSON per non-empty line, or a `Malformed` for a line that is not JSON, is longer
    than MAX_LINE_BYTES (never read whole: the rest is skipped in chunks) or nested deeper than
    MAX_JSON_DEPTH (checked before parsing: nothing recurses on a line's structure)."""
    with open(path, "rb") as f:
        n = 0
        while True:
            raw = f.readline(MAX_LINE_BYTES + 1)
            if not raw:
                break
            n += 1
            if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
                size, preview, complete = len(raw), _preview(raw), False
                del raw
                while True:
                    chunk = f.readline(1 << 20)
                    size += len(chunk)
                    if not chunk or chunk.endswith(b"\n"):
                        complete = bool(chunk)
                        break
                yield Malformed(n, f"line of {size} bytes, longer than the {MAX_LINE_BYTES >> 20} MiB a line may "
                                   "have: left out (truncated preview kept)", size, preview, complete)
                continue
            complete = raw.endswith(b"\n")
            raw = raw.strip()
            if raw:
                yield parse_line(raw, n, complete)


_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
_NOT_STRUCTURE = bytes(c for c in range(256) if c not in b"[]{},")


def _too_big(raw: bytes, depth: int = MAX_JSON_DEPTH, values: int = MAX_JSON_VALUES) -> str | None:
    """Why the JSON text is too costly to parse (nested deeper than `depth`, or more than `values`
    arrays, objects and members), found without parsing it: string literals removed, then the
    structure counted and the innermost `[]`/`{}` pairs stripped once per level (C-speed passes)."""
    if raw.count(b"[") + raw.count(b"{") <= depth and raw.count(b",") <= values:
        return None
    s = _STRING.sub(b"", raw).translate(None, _NOT_STRUCTURE)
    if len(s) > values:
        return f"more than {values} values"
    s = s.replace(b",", b"")
    for _ in range(depth):
        t = s.replace(b"[]", b"").replace(b"{}", b"")
        if not t or t == s:  # done, or unbalanced (then json.loads says why)
            return None
        s = t
    return f"nested deeper than {depth} levels"


_CONTROL = dict.fromkeys([*range(32), 127], "\ufffd")


def _preview(raw: bytes) -> str:
    """The line's start as text a commit subject can hold (control bytes, NUL included, shown as U+FFFD)."""
    return raw[:PREVIEW_CHARS * 4].decode("utf-8", "replace")[:PREVIEW_CHARS].translate(_CONTROL)


def parse_line(raw: bytes, n: int = 0, complete: bool = True) -> Any:
    """One line's JSON value, or a `Malformed` saying why not."""
    why = _too_big(raw)
    if why:
        return Malformed(n, why, len(raw), _preview(raw), complete)
    try:
        return json.loads(raw.decode("utf-8", "replace"))
    except (ValueError, RecursionError) as e:
        return Malformed(n, f"not JSON ({str(e)[:120]})", len(raw), _preview(raw), complete)


def detect_format(entries: Iterable[Any], limit: int | None = 50) -> str:
    """'claude', 'codex' or 'unknown', from the first recognisable lines (all: limit None)."""
    for n, e in enumerate(entries):
        if limit is not None and n > limit:
            break
        if not isinstance(e, dict):
            continue
        if e.get("type") in ENVELOPE_TYPES or "record_type" in e:
            return "codex"
        if e.get("type") in ITEM_TYPES and "message" not in e and "uuid" not in e:
            return "codex"  # legacy rollout: bare items, no envelope
        if "parentUuid" in e or "sessionId" in e or (e.get("type") in ("user", "assistant")
                                                     and isinstance(e.get("message"), dict)):
            return "claude"
    return "unknown"


def subagent_files(path: Path) -> list[Path]:
    """Claude Code >= 2.1 keeps subagents in `<session>/subagents/agent-*.jsonl` next to it."""
    d = path.with_suffix("") / "subagents"
    # flat at every nesting depth; workflow agents live one level further down
    return sorted(d.rglob("agent-*.jsonl")) if d.is_dir() else []


def read_transcript(path: str | Path, *, fmt: str | None = None,
                    subagents: Iterable[str | Path] | None = None,
                    session_id: str | None = None) -> Transcript:
    """Read a transcript file.

    Args:
        path: a Claude Code session `.jsonl`, a Codex rollout `.jsonl`, or a JSON file holding
            a list of generic steps.
        fmt: force 'claude', 'codex' or 'generic' instead of detecting.
        subagents: Claude subagent files; default: those found in `<session>/subagents/`.
        session_id: override the session id (default: from the file, else the file stem).
    """
    path = Path(path)
    check_size(path)
    detected = fmt is None
    if fmt is None:
        fmt = detect_format(iter_lines(path))
        if fmt == "unknown":
            fmt = detect_format(iter_lines(path), limit=None)  # markers later in the file
        if fmt == "unknown":
            fmt = "generic" if _json_list(path) is not None else ("claude" if _blank(path) else "unknown")
    if fmt == "unknown":
        raise BadInput(_unknown(path, "its lines are neither Claude Code nor Codex records"))
    if fmt == "generic":
        steps = _json_list(path) or []
        t = read_steps(steps, session_id=session_id or path.stem)
        foreign = t.meta.pop("unknown_roles", {})
        if detected and foreign:  # another agent's messages (Gemini CLI's "gemini"): not ours to half-read
            names = ", ".join(f"{k!r} x{v}" for k, v in sorted(foreign.items())[:5])
            raise BadInput(_unknown(path, f"it holds messages of types tc-git does not know ({names})"))
        return t
    if fmt == "codex":
        t = read_codex(iter_lines(path), _codex_bases(path))
        for spawn, agent in spawned_agents(t):  # agents it started: their rollouts, on their call
            child = _codex_file(path, agent)
            if child is not None:
                attach_agent(t, spawn, agent, read_codex(iter_lines(child), _codex_bases(child)))
    else:
        subs = subagent_files(path) if subagents is None else [Path(p) for p in subagents]
        t = read_claude(iter_lines(path), [(iter_lines(p), _meta(p), _agent_id(p)) for p in subs])
    t.session_id = session_id or t.session_id or path.stem
    malformed_events(t)
    return t


def check_size(path: Path) -> None:
    """BadInput for a transcript file over MAX_TRANSCRIPT_BYTES (its size on disk as stated: a
    sparse file is refused without being read)."""
    size = path.stat().st_size
    if size > MAX_TRANSCRIPT_BYTES:
        raise BadInput(f"{path.name} is {size} bytes; tc-git records transcripts up to {MAX_TRANSCRIPT_BYTES >> 20} "
                       "MiB. Nothing was recorded: record a smaller file (a session split by /clear, or steps)")


def _blank(path: Path) -> bool:
    """No line with anything on it (a session that has not written yet)."""
    with open(path, "rb") as f:
        return all(not chunk.strip() for chunk in iter(lambda: f.read(1 << 16), b""))


def _unknown(path: Path, why: str) -> str:
    head = _json_head(path)
    hint = " (it looks like a Gemini CLI session)" if isinstance(head, dict) and "projectHash" in head else ""
    return (f"{path.name} is not a transcript format tc-git reads{hint}: {why}. tc-git reads Claude Code "
            "sessions (.jsonl), Codex rollouts (.jsonl) and JSON steps (a list, or {\"steps\": [...]} / "
            "{\"messages\": [...]}, of {role, content} or {kind, text} items; see `tc-git record --help`). "
            "Nothing was recorded")


def _json_head(path: Path) -> Any:
    try:
        if path.stat().st_size > MAX_LINE_BYTES:
            return None
        return parse_line(path.read_bytes())
    except OSError:
        return None


def _first_line(path: Path) -> Any:
    try:
        with open(path, "rb") as f:
            for raw in f:
                if raw.strip():
                    return json.loads(raw.decode("utf-8", "replace"))
    except (OSError, ValueError):
        pass
    return None


def _sessions_root(path: Path) -> Path | None:
    """`<codex home>/sessions` when `path` is in its `YYYY/MM/DD/` tree, else None."""
    return path.parents[3] if len(path.parents) > 3 and path.parents[2].parent.name == "sessions" else None


def _codex_file(path: Path, thread: str) -> Path | None:
    """The first rollout of `thread` next to `path` (the same sessions tree, or directory)."""
    root = _sessions_root(path)
    try:
        found = sorted(root.glob(f"*/*/*/rollout-*-{thread}.jsonl") if root else path.parent.glob(f"rollout-*-{thread}.jsonl"))
    except OSError:
        return None
    return found[0] if found and found[0].is_file() and found[0] != path else None


def _codex_bases(path: Path, depth: int = 0) -> list[tuple[Iterator[Any], int | None]]:
    """The rollouts a Codex history segment continues, oldest first, each with the ordinal its
    successor continues before. After `thread/revert` Codex writes the thread on in a new file,
    `rollout-<time>-<thread>_<segment>.jsonl`, whose `history_base` says which line of the
    thread's history so far it follows: its base is the thread's file written just before it
    (in the sessions tree: `sessions/YYYY/MM/DD/`). Without it on disk the segment is read alone."""
    hb = history_base(_first_line(path))
    if hb is None or depth > 50:
        return []
    thread, end = hb
    root = path.parents[3] if len(path.parents) > 3 and path.parents[2].parent.name == "sessions" else path.parent
    try:
        files = sorted(p for p in root.glob(f"*/*/*/rollout-*-{thread}*.jsonl") if p.is_file()) \
            if root != path.parent else sorted(p for p in root.glob(f"rollout-*-{thread}*.jsonl") if p.is_file())
    except OSError:
        return []
    files = [p for p in files if p.name[:-len(".jsonl")].split(f"-{thread}", 1)[-1][:1] in ("", "_")]
    earlier = [p for p in files if p.name < path.name]
    if not earlier:
        return []
    base = earlier[-1]
    first = _first_line(base)
    meta = first.get("payload") if isinstance(first, dict) and first.get("type") == "session_meta" else None
    if not isinstance(meta, dict) or meta.get("id") != thread:
        return []
    return [*_codex_bases(base, depth + 1), (iter_lines(base), end)]


def _agent_id(path: Path) -> str | None:
    stem = path.stem
    return stem[len("agent-"):] if stem.startswith("agent-") else None


def _meta(path: Path) -> dict | None:
    """`agent-<id>.meta.json` beside a subagent file names the call that spawned it."""
    try:
        data = json.loads(path.with_suffix(".meta.json").read_text("utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _json_list(path: Path) -> list | None:
    try:
        if path.stat().st_size > MAX_LINE_BYTES:  # a JSON document is read whole: the line cap holds
            return None
        data = parse_line(path.read_bytes())
    except OSError:
        return None
    if isinstance(data, Malformed):
        return None
    if isinstance(data, dict):
        data = data.get("steps") or data.get("messages")
    return data if isinstance(data, list) else None


# -- generic steps ---------------------------------------------------------------------------

ROLE_KIND = {"user": "user", "human": "user", "assistant": "assistant", "ai": "assistant",
             "model": "assistant", "system": "system", "developer": "system", "tool": "tool_result"}
_KNOWN_SAYS = frozenset(ROLE_KIND) | {"thinking", "tool_call", "tool_result", "summary"}


def read_steps(steps: Iterable[Any], *, session_id: str, agent: str = "generic",
               base_time: float = 0.0) -> Transcript:
    """Normalise steps an agent passes itself.

    Accepts, per step: our own shape (`kind`, `text`, `tool_name`, `tool_input`, `tool_output`,
    `call_id`), chat messages (`role` + `content` as a string or Anthropic blocks, OpenAI
    `tool_calls` and `tool_call_id`). Optional `id`/`parent` give a DAG; otherwise each step
    follows the previous one. Steps without a timestamp take the previous one's (or
    `base_time`), so the same steps always record to the same commits.
    """
    t = Transcript(agent=agent, session_id=session_id)
    last_ts, tip = base_time, None
    names: dict[str, str] = {}
    last_of: dict[str, str | None] = {}  # step id -> key of its last event
    for n, step in enumerate(steps):
        t.stats["lines"] += 1
        evs = _step_events(step, names) if isinstance(step, dict) else None
        if not evs:
            t.stats["skipped"] += 1
            said = step.get("kind") or step.get("type") or step.get("role") if isinstance(step, dict) else None
            if isinstance(said, str) and said.lower() not in _KNOWN_SAYS:
                foreign = t.meta.setdefault("unknown_roles", {})
                foreign[said[:40]] = foreign.get(said[:40], 0) + 1
            continue
        ts = parse_time(step.get("timestamp", step.get("time")))
        last_ts = last_ts if ts is None else ts
        sid = str(step["id"]) if isinstance(step.get("id"), (str, int)) else None
        if "parent" in step or "parent_id" in step:  # an explicit DAG (branches)
            parent = last_of.get(str(step.get("parent", step.get("parent_id"))))
        else:
            parent = tip
        for i, ev in enumerate(evs):
            ev.key = f"{sid or f's{n}'}" + (f"#{i}" if i else "")
            ev.parent, ev.timestamp, ev.order, ev.uuid = parent, last_ts, n, sid
            parent = ev.key
            t.events.append(ev)
        if sid:
            last_of[sid] = parent
        tip = parent
    return t


def _step_events(step: dict, names: dict[str, str]) -> list[Event]:
    kind = step.get("kind") or step.get("type")
    if kind in ("user", "assistant", "thinking", "tool_call", "tool_result", "system", "summary"):
        cid = step.get("call_id") or step.get("tool_call_id")
        name = step.get("tool_name") or step.get("name") or names.get(cid or "")
        if kind == "tool_call" and cid and name:
            names[cid] = name
        text = step.get("text", step.get("content", ""))
        return [Event(kind, "", text=text if isinstance(text, str) else _text(text),
                      tool_name=name if kind.startswith("tool") else None,
                      tool_input=step.get("tool_input", step.get("input")),
                      tool_output=step.get("tool_output", step.get("output")),
                      call_id=cid, is_error=bool(step.get("is_error")))]
    role = ROLE_KIND.get(str(step.get("role", "")).lower())
    if role is None:
        return []
    content = step.get("content")
    if role == "tool_result":
        cid = step.get("tool_call_id") or step.get("call_id")
        return [Event("tool_result", "", call_id=cid, tool_name=step.get("name") or names.get(cid or ""),
                      tool_output=_text(content), is_error=bool(step.get("is_error")))]
    out: list[Event] = []
    blocks = content if isinstance(content, list) else [content]
    texts = [b for b in blocks if not (isinstance(b, dict) and b.get("type") in ("tool_use", "tool_result"))]
    if _text(texts).strip():
        out.append(Event(role, "", text=_text(texts)))
    for b in blocks:
        if isinstance(b, dict) and b.get("type") == "tool_use":
            names[str(b.get("id"))] = str(b.get("name"))
            out.append(Event("tool_call", "", tool_name=str(b.get("name")), tool_input=b.get("input"),
                             call_id=b.get("id")))
        elif isinstance(b, dict) and b.get("type") == "tool_result":
            cid = b.get("tool_use_id")
            out.append(Event("tool_result", "", call_id=cid, tool_name=names.get(str(cid)),
                             tool_output=_text(b.get("content")), is_error=bool(b.get("is_error"))))
    for tc in step.get("tool_calls") or []:
        fn = tc.get("function", tc) if isinstance(tc, dict) else {}
        args = fn.get("arguments")
        try:
            args = json.loads(args) if isinstance(args, str) else args
        except ValueError:
            pass
        names[str(tc.get("id"))] = str(fn.get("name"))
        out.append(Event("tool_call", "", tool_name=str(fn.get("name")), tool_input=args, call_id=tc.get("id")))
    return out


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(_text(c.get("text") if isinstance(c, dict) and "text" in c else c)
                         for c in content if c is not None and not (isinstance(c, dict) and "text" not in c))
    return json.dumps(content, ensure_ascii=False, sort_keys=True)
