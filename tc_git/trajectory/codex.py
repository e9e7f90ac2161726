"""Codex rollout (JSONL) -> Transcript.

A rollout has no per-line parent ids: it is one chain of `response_item`s, in file order
(parallel calls are already linear; results pair with calls by `call_id`). What was said
appears twice, as a `response_item` message (what the model saw) and as an `event_msg`
(`user_message`, `agent_message`, `agent_reasoning`: what the UI showed), but some rollouts
(subagent threads, some builds) hold only the `event_msg` copy. We take each utterance from
whichever stream shows it first and drop its copy from the other stream (matched by text).
`thread_rolled_back` is an in-file rewind: the chain continues from before the last N user
turns, so the dropped turns stay as a fork. `compacted` becomes a summary event that keeps its
message, its `replacement_history` (the context Codex resumes with) and its window ids, so a
rollout written back from it holds the same line. Forks and
subagents are separate files; their origin goes into `Transcript.meta`.
"""
from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

from .model import Event, Transcript, count_unknown, feed, image_block, parse_time

__all__ = ["read_codex", "ENVELOPE_TYPES"]

ENVELOPE_TYPES = frozenset({"session_meta", "response_item", "event_msg", "turn_context", "compacted"})
ITEM_TYPES = frozenset({"message", "reasoning", "function_call", "function_call_output",
                        "custom_tool_call", "custom_tool_call_output", "local_shell_call",
                        "web_search_call", "tool_search_call", "tool_search_output",
                        "image_generation_call", "compaction", "ghost_snapshot", "other"})
IGNORED = frozenset({"turn_context", "world_state", "inter_agent_communication_metadata"})
_THREAD_ID = re.compile(r"[0-9A-Za-z-]{8,64}")
# Harness text Codex sends as "user" messages; it is context, not the user speaking.
CONTEXT_PREFIXES = ("<environment_context>", "<user_instructions>", "# AGENTS.md instructions",
                    "<permissions instructions>", "<user_shell_command>", "<turn_aborted>",
                    "<subagent_notification>", "<user_action>")  # (Codex 0.171: an agent's status, a review's output)


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    parts = []
    for c in content:
        if isinstance(c, dict):
            if isinstance(c.get("text"), str):
                parts.append(c["text"])
            elif str(c.get("type", "")).endswith("image"):
                parts.append("[image]")
    return "\n".join(parts)


def _content_images(content: Any) -> list[dict]:
    out = []
    for c in content if isinstance(content, list) else []:
        if isinstance(c, dict) and str(c.get("type", "")).endswith("image"):
            img = image_block(None, None, c.get("image_url") or c.get("url"))
            if img:
                out.append(img)
    return out


def _json_or_str(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value  # e.g. a redaction placeholder instead of JSON arguments
    return value


class _Builder:
    def __init__(self) -> None:
        self.t = Transcript(agent="codex", session_id="")
        self.tip: str | None = None
        self.by_key: dict[str, Event] = {}
        self.names: dict[str, str] = {}
        self.last_ts = 0.0
        self.order = 0
        # utterances seen in one stream and not yet in the other, by kind and stream
        self.unpaired: dict[str, dict[str, list[str]]] = {
            k: {"item": [], "event": []} for k in ("user", "assistant", "thinking")}
        self.said: dict[str, str] = {}  # event key -> the stream it was taken from
        self.at_ordinal: dict[int, str | None] = {}  # a line's `ordinal` -> the tip after it

    def line(self, entry: dict) -> None:  # (model.feed numbers the lines and skips non-objects)
        st = self.t.stats
        kind, payload = entry.get("type"), entry.get("payload")
        if kind not in ENVELOPE_TYPES and kind in ITEM_TYPES and payload is None:
            kind, payload = "response_item", entry  # legacy rollouts: items without envelope
        if not isinstance(payload, dict):
            if "record_type" in entry:
                st["ignored"] += 1
            elif "id" in entry and ("instructions" in entry or "timestamp" in entry) and "type" not in entry:
                self._meta(entry)  # legacy first line
                st["ignored"] += 1
            else:
                count_unknown(st, kind)
            return
        ts = parse_time(entry.get("timestamp"))
        self.last_ts = self.last_ts if ts is None else ts
        ordinal = entry.get("ordinal")
        try:
            self._line(kind, payload, st)
        finally:
            if isinstance(ordinal, int) and not isinstance(ordinal, bool):
                self.at_ordinal[ordinal] = self.tip

    def rewind_to(self, end: int) -> None:
        """A history segment continues the thread's history before line `end` (its `ordinal`):
        the lines after that point become a fork, as a rollback leaves them."""
        before = [o for o in self.at_ordinal if o < end]
        self.tip = self.at_ordinal[max(before)] if before else None
        for o in [o for o in self.at_ordinal if o >= end]:
            del self.at_ordinal[o]

    def _line(self, kind: Any, payload: dict, st: dict) -> None:
        if kind == "session_meta":
            self._meta(payload)
            st["ignored"] += 1
        elif kind == "response_item":
            ev = self._item(payload)
            if ev is None:
                if payload.get("type") in ITEM_TYPES:
                    st["ignored"] += 1
                else:
                    count_unknown(st, f"response_item/{payload.get('type')}")
            elif ev.kind in self.unpaired and ev.meta.get("role") is None:
                self._said(ev, "item")
            else:
                self._append(ev)
        elif kind == "compacted":
            # kept whole: on resume Codex replaces the model's context with `replacement_history`
            # (without one it rebuilds it from the user messages and `message`)
            hist = payload.get("replacement_history")
            meta = {k: v for k, v in payload.items() if k not in ("message", "replacement_history")
                    and (v is None or isinstance(v, (str, int, float, bool)))}
            msg = payload.get("message")
            self._append(Event("summary", "", text=msg if isinstance(msg, str) else "", meta=dict(meta, compacted=True),
                               history=hist if isinstance(hist, list) else None))
        elif kind == "event_msg":
            self._event_msg(payload)
        elif kind in IGNORED:
            st["ignored"] += 1
        else:
            count_unknown(st, kind)

    def _said(self, ev: Event, stream: str) -> None:
        """Record an utterance unless the other stream already gave the same words."""
        norm = " ".join(ev.text.split())
        other = self.unpaired[ev.kind]["event" if stream == "item" else "item"]
        last = self.by_key.get(self.tip or "")
        if norm in other or (other and last is not None and last.kind == ev.kind
                             and self.said.get(last.key) not in (None, stream)):
            # the same words (or, when a sanitiser rewrote one copy, the copy written right
            # next to it) already came from the other stream
            other.remove(norm if norm in other else other[-1])
            self.t.stats["duplicates"] += 1
            return
        mine = self.unpaired[ev.kind][stream]
        mine.append(norm)
        del mine[:-50]  # a stream the rollout never writes must not grow without bound
        self._append(ev)
        self.said[ev.key] = stream

    def _meta(self, p: dict) -> None:
        if not self.t.session_id and isinstance(p.get("id"), str):
            self.t.session_id = p["id"]
            for k in ("cli_version", "originator", "cwd", "forked_from_id"):
                if isinstance(p.get(k), str):
                    self.t.meta[k] = p[k]
            src = p.get("source")
            sub = src.get("subagent") if isinstance(src, dict) else None  # {"thread_spawn": {...}}, or "review"
            spawn = sub.get("thread_spawn") if isinstance(sub, dict) else None
            parent = spawn.get("parent_thread_id") if isinstance(spawn, dict) else p.get("parent_thread_id")
            if isinstance(parent, str) and parent:  # (0.10x: in the source; 0.17x: beside it)
                self.t.meta["parent_thread_id"] = parent
        elif isinstance(p.get("forked_from_id"), str):
            self.t.meta.setdefault("forked_from_id", p["forked_from_id"])

    def _item(self, p: dict) -> Event | None:
        t = p.get("type")
        if t == "message":
            role = p.get("role")
            text = _content_text(p.get("content"))
            if not text.strip():
                return None
            if role == "assistant":
                meta = {"phase": p["phase"]} if isinstance(p.get("phase"), str) else {}
                return Event("assistant", "", text=text, meta=meta)
            if role == "user" and not text.lstrip().startswith(CONTEXT_PREFIXES):
                return Event("user", "", text=text, images=_content_images(p.get("content")))
            return Event("system", "", text=text, meta={"role": str(role)})
        if t in ("function_call", "custom_tool_call", "local_shell_call", "web_search_call",
                 "tool_search_call"):
            name = p.get("name") or {"local_shell_call": "local_shell", "web_search_call": "web_search",
                                     "tool_search_call": "tool_search"}.get(t, t)
            ns = p.get("namespace")
            if ns:
                name = f"{ns}__{name}"
            args = p.get("arguments", p.get("input", p.get("action")))
            cid = p.get("call_id") or p.get("id")
            if isinstance(cid, str):
                self.names[cid] = name
            inp = _json_or_str(args) if t == "function_call" else args
            # arguments that are not JSON (a sanitiser's placeholder) stay a string: say it was a
            # function call, or a written rollout would turn it into a freeform (custom) call
            meta = {"raw_arguments": True} if t == "function_call" and isinstance(inp, str) else {}
            if isinstance(ns, str) and ns:  # (multi_agent_v1's spawn_agent...): written back as it came
                meta["namespace"] = ns
            return Event("tool_call", "", tool_name=name, tool_input=inp, call_id=cid if isinstance(cid, str) else None,
                         meta=meta)
        if t in ("function_call_output", "custom_tool_call_output", "tool_search_output"):
            return self._output(p)
        if t == "reasoning":
            summary = p.get("summary")
            text = "\n".join(str(x.get("text") or "") for x in summary if isinstance(x, dict)) \
                if isinstance(summary, list) else ""
            return Event("thinking", "", text=text) if text.strip() else None
        if t == "compaction":  # the summary is encrypted for the model; kept so a resume can send it back
            enc = p.get("encrypted_content")
            return Event("summary", "", text="compaction (encrypted summary)",
                         history=enc if isinstance(enc, str) and enc else None)
        return None

    def _output(self, p: dict) -> Event:
        cid = p.get("call_id") if isinstance(p.get("call_id"), str) else None
        out = p.get("output", p.get("tools"))
        meta: dict = {}
        parsed = _json_or_str(out)
        if isinstance(parsed, dict) and "output" in parsed:  # older builds wrap output + metadata
            md: dict = parsed["metadata"] if isinstance(parsed.get("metadata"), dict) else {}
            if "exit_code" in md:
                meta["exit_code"] = md["exit_code"]
            out = parsed["output"]
        elif isinstance(out, list):
            out = _content_text(out)
        error = meta.get("exit_code") not in (None, 0) or p.get("success") is False
        return Event("tool_result", "", tool_name=self.names.get(cid or ""), call_id=cid,
                     tool_output=out, is_error=bool(error), meta=meta)

    def _event_msg(self, p: dict) -> None:
        t = p.get("type")
        if t == "thread_rolled_back":
            self._rollback(p.get("num_turns"))
            self.t.stats["ignored"] += 1
        elif t == "turn_aborted":
            self._append(Event("system", "", text=f"turn aborted: {p.get('reason') or '?'}"))
        elif t in ("user_message", "agent_message", "agent_reasoning"):
            text = p.get("message") if t != "agent_reasoning" else p.get("text")
            if not isinstance(text, str) or not text.strip():
                self.t.stats["ignored"] += 1
                return
            kind = {"user_message": "user", "agent_message": "assistant", "agent_reasoning": "thinking"}[t]
            imgs = [i for i in (image_block(None, None, u) for u in p.get("images") or []
                                if isinstance(u, str)) if i] if kind == "user" else []
            self._said(Event(kind, "", text=text, images=imgs), "event")
        elif t == "item_completed" and isinstance(p.get("item"), dict) \
                and p["item"].get("type") in ("UserMessage", "AgentMessage"):
            # Codex 0.17x's copy of an utterance (it writes no user_message/agent_message): the
            # event stream, paired with the response item like those; after `codex review` the
            # parent's rollout holds the user's instructions only here (and in EnteredReviewMode)
            item = p["item"]
            content = item.get("content") if isinstance(item.get("content"), list) else []
            text = "\n".join(str(c.get("text") or "") for c in content
                             if isinstance(c, dict) and str(c.get("type", "")).lower() == "text")
            if not text.strip():
                self.t.stats["ignored"] += 1
                return
            self._said(Event("user" if item["type"] == "UserMessage" else "assistant", "", text=text), "event")
        else:
            self.t.stats["ignored"] += 1  # UI copies of response items, token counts, ...

    def _rollback(self, n: Any) -> None:
        if not isinstance(n, int) or n <= 0:
            return
        key = self.tip
        while key is not None:
            ev = self.by_key[key]
            if ev.kind == "user":
                n -= 1
                if n == 0:
                    self.tip = ev.parent
                    return
            key = ev.parent
        self.tip = None  # rolled back past the first turn: the next event is a new root

    def _append(self, ev: Event) -> None:
        ev.key = f"c{self.order}"
        ev.parent, ev.timestamp, ev.order = self.tip, self.last_ts, self.order
        self.by_key[ev.key] = ev
        self.t.events.append(ev)
        self.tip = ev.key


def read_codex(lines: Iterable[Any], base: Iterable[tuple[Iterable[Any], int | None]] = ()) -> Transcript:
    """Build a Transcript from parsed rollout lines (None marks a malformed line). `base`: the
    rollouts this one continues (Codex >= 0.17x writes a segment file after `thread/revert`,
    whose `session_meta.history_base` names the line of the thread's history it follows), oldest
    first, each with the ordinal its successor continues before (None: the next one follows it)."""
    b = _Builder()
    for base_lines, end in base:
        feed(b, base_lines)
        if end is not None:
            b.rewind_to(end)
    feed(b, lines)
    return b.t


def history_base(first: Any) -> tuple[str, int] | None:
    """(thread id, end ordinal) of a segment rollout's first line, if it continues a base."""
    p = first.get("payload") if isinstance(first, dict) and first.get("type") == "session_meta" else None
    hb = p.get("history_base") if isinstance(p, dict) else None
    if not isinstance(hb, dict):
        return None
    tid, end = hb.get("thread_id"), hb.get("end_ordinal_exclusive")
    if not isinstance(tid, str) or not _THREAD_ID.fullmatch(tid) or not isinstance(end, int) or isinstance(end, bool):
        return None
    return tid, end


def spawned_agents(t: Transcript) -> list[tuple[str, str]]:
    """(key of the spawn_agent call, agent thread id) for each agent the rollout started: the id
    is in the call's result (`{"agent_id": ...}`)."""
    calls = {e.call_id: e for e in t.events if e.kind == "tool_call" and e.call_id
             and (e.tool_name or "").split("__")[-1] == "spawn_agent"}
    out = []
    for e in t.events:
        call = calls.get(e.call_id or "") if e.kind == "tool_result" else None
        parsed = _json_or_str(e.tool_output) if call is not None and isinstance(e.tool_output, str) else None
        agent = parsed.get("agent_id") if isinstance(parsed, dict) else None
        if call is not None and isinstance(agent, str) and _THREAD_ID.fullmatch(agent):
            out.append((call.key, agent))
    return out


def attach_agent(t: Transcript, spawn_key: str, agent: str, child: Transcript) -> None:
    """Hang a spawned agent's own rollout off the call that started it, on lane `agent-<id>`
    (as Claude Code subagents), when that rollout names this thread as its parent."""
    if child.meta.get("parent_thread_id") != t.session_id or not child.events:
        return
    order = max((e.order for e in t.events), default=0)
    keys = {e.key: f"a{agent}-{e.key}" for e in child.events}
    for e in child.events:
        e.key, e.parent = keys[e.key], keys.get(e.parent or "", spawn_key)
        e.lane, e.sidechain, e.agent_id, e.order = f"agent-{agent}", True, agent, order + e.order
        t.events.append(e)
