"""Read a transcript file (Claude Code or Codex, auto-detected) or a list of generic steps.

Readers never raise on content: a line that is not JSON, or has a type we do not know, is
skipped and counted in `Transcript.stats`. A torn last line (the agent is still writing) is
just a malformed line today and a complete one on the next, incremental, recording.
"""
from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from .claude import read_claude
from .codex import ENVELOPE_TYPES, ITEM_TYPES, attach_agent, history_base, read_codex, spawned_agents
from .model import Event, Transcript, parse_time

__all__ = ["read_transcript", "read_steps", "detect_format", "subagent_files", "iter_lines"]


def iter_lines(path: Path) -> Iterator[Any]:
    """Parsed JSON per non-empty line; None for a malformed one."""
    with open(path, "rb") as f:
        for raw in f:
            raw = raw.strip()
            if not raw:
                continue
            try:
                yield json.loads(raw.decode("utf-8", "replace"))
            except ValueError:
                yield None


def detect_format(entries: Iterable[Any]) -> str:
    """'claude', 'codex' or 'unknown', from the first recognisable lines."""
    for n, e in enumerate(entries):
        if n > 50:
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
    if fmt is None:
        fmt = detect_format(iter_lines(path))
        if fmt == "unknown":
            fmt = "generic" if _json_list(path) is not None else "claude"
    if fmt == "generic":
        steps = _json_list(path) or []
        return read_steps(steps, session_id=session_id or path.stem)
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
    return t


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
        data = json.loads(path.read_text("utf-8"))
    except (ValueError, OSError):
        return None
    if isinstance(data, dict):
        data = data.get("steps") or data.get("messages")
    return data if isinstance(data, list) else None


# -- generic steps ---------------------------------------------------------------------------

ROLE_KIND = {"user": "user", "human": "user", "assistant": "assistant", "ai": "assistant",
             "model": "assistant", "system": "system", "developer": "system", "tool": "tool_result"}


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
