"""Claude Code transcript (JSONL) -> Transcript.

The file is a DAG through `uuid`/`parentUuid`. Three things in it look like forks but are not:
an API message streamed into several lines (same `message.id`), parallel tool calls (results
hang off each call line while the calls continue in a chain) and bookkeeping lines (progress,
attachments, hook notes). We linearise those with "groups": lines that belong to one assistant
turn share a group whose `tip` is the last event appended; a structural line joins the group of
its parent and is appended at the tip. A new turn (a user prompt, a new assistant message)
continues a group once; a second new *prompt* from the same group is a real fork (a rewind),
while a second assistant line from it (its parent is a progress or hook line of a turn that
already moved on) joins the live end of that turn's continuation instead of forking.
A line whose parent is missing from the file (compaction that kept only a logical parent, an
excerpt) joins the main line's latest event rather than starting an unconnected piece.
Sidechains (inline `isSidechain` lines and `subagents/agent-*.jsonl` files) hang off the
`Task`/`Agent` call that spawned them, on lanes named `agent-<id>`: found by the agent id in
the call's result, the `toolUseId` of the subagent's `.meta.json`, `agent_progress` lines, or
the prompt the call gave; only then by time, and never two agents on one call.
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from typing import Any

from .model import Event, Transcript, count_unknown, feed, image_block, parse_time

__all__ = ["read_claude"]

# Known line types that carry no conversation; counted as ignored, not as skipped.
IGNORED_TYPES = frozenset({
    "queue-operation", "file-history-snapshot", "permission-mode", "mode", "agent-name",
    "last-prompt", "pr-link", "worktree-state", "attachment", "progress", "tag",
})
TITLE_TYPES = {"summary": "summary", "custom-title": "customTitle", "ai-title": "aiTitle"}
# System subtypes that are timing/hook bookkeeping rather than something said.
NOISE_SUBTYPES = frozenset({"turn_duration", "stop_hook_summary", "session_start"})
SPAWN_TOOLS = frozenset({"Task", "Agent"})
TOOL_USE_RESULT_MAX = 16 << 10  # a larger toolUseResult (a subagent's whole transcript?) is not kept


def _obj(entry: dict, key: str) -> dict:
    """entry[key] when it is a JSON object, else {} (every field of a transcript line is hostile)."""
    v = entry.get(key)
    return v if isinstance(v, dict) else {}


def _images(content: Any) -> list[dict]:
    """Image blocks of a message/tool_result content, as stored image records."""
    out = []
    if isinstance(content, list):
        for b in content:
            if isinstance(b, dict) and b.get("type") == "image" and isinstance(b.get("source"), dict):
                src = b["source"]
                img = image_block(src.get("media_type"), src.get("data"), src.get("url"))
                if img:
                    out.append(img)
            elif isinstance(b, dict) and b.get("type") == "tool_result":
                out.extend(_images(b.get("content")))
    return out


def _blocks_text(content: Any) -> str:
    """Flatten a message/tool_result content (string or block list) to text."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return "" if content is None else json.dumps(content, ensure_ascii=False, sort_keys=True)
    parts = []
    for b in content:
        if isinstance(b, str):
            parts.append(b)
        elif isinstance(b, dict):
            if b.get("type") == "text":
                parts.append(str(b.get("text") or ""))
            elif b.get("type") == "image":
                parts.append("[image]")  # the data itself is kept in Event.images
            elif b.get("type") == "tool_reference":
                parts.append(f"[tool {b.get('tool_name', '?')}]")
    return "\n".join(p for p in parts if p)


def _result_parts(content: Any) -> list[list] | None:
    """The block structure of a tool result that `_blocks_text` flattens, when a plain string
    would not say the same to the model: several text blocks (an Agent result is its answer
    plus an `agentId`/usage block) or tool references. One entry per flattened piece, in order:
    ["text", length], ["image"], ["tool_reference", name]; the session writer splits the text
    back by it. None for a string, one text block, or text around images (`_blocks` rebuilds those)."""
    if not isinstance(content, list):
        return None
    parts: list[list] = []
    for b in content:
        text = b if isinstance(b, str) else str(b.get("text") or "") if isinstance(b, dict) and b.get("type") == "text" \
            else None
        if text:  # (an empty text block flattens to nothing and says nothing)
            parts.append(["text", len(text)])
        elif isinstance(b, dict) and b.get("type") == "image":
            parts.append(["image"])
        elif isinstance(b, dict) and b.get("type") == "tool_reference":
            parts.append(["tool_reference", str(b.get("tool_name", "?"))])
    if sum(p[0] == "text" for p in parts) > 1 or any(p[0] == "tool_reference" for p in parts):
        return parts
    return None


class _Builder:
    def __init__(self) -> None:
        self.t = Transcript(agent="claude", session_id="")
        self.key_of: dict[str, str] = {}  # source uuid -> key of the last event of that line
        self.alias: dict[str, str | None] = {}  # uuid of a line without events -> its parent key
        self.digest: dict[str, str] = {}
        self.group: dict[str, dict] = {}
        self.by_key: dict[str, Event] = {}
        self.calls: dict[str, Event] = {}  # tool_use id -> tool_call event
        self.spawned: dict[str, str] = {}  # agentId -> key of the Task/Agent call
        self.agent_of_call: dict[str, str] = {}
        self.progress_spawn: dict[str, str] = {}  # agentId -> tool_use id (agent_progress lines)
        self.meta_spawn: dict[str, str] = {}  # agentId -> tool_use id (subagents/*.meta.json)
        self.roots: list[Event] = []
        self.main_tip: str | None = None
        self.side_tip: dict[str, str] = {}  # latest main-lane event, for lines whose parent is missing
        self.last_ts = 0.0
        self.order = 0

    # -- per line ---------------------------------------------------------------------------
    def line(self, entry: dict) -> None:  # (model.feed numbers the lines and skips non-objects)
        st = self.t.stats
        kind = entry.get("type")
        if not self.t.session_id and isinstance(entry.get("sessionId"), str):
            self.t.session_id = entry["sessionId"]
        if kind in ("user", "assistant", "system"):
            self._conversational(entry)
            return
        if kind in TITLE_TYPES:
            title = entry.get(TITLE_TYPES[kind])
            if isinstance(title, str) and title.strip():
                self.t.title = title.strip()
            st["ignored"] += 1
        elif kind in IGNORED_TYPES:
            st["ignored"] += 1
            if kind == "progress":
                self._progress(entry)
        else:
            count_unknown(st, kind)  # the format changes between versions
        self._alias(entry)

    def _progress(self, entry: dict) -> None:
        data = _obj(entry, "data")
        agent, call = data.get("agentId"), entry.get("parentToolUseID")
        if data.get("type") == "agent_progress" and isinstance(agent, str) and isinstance(call, str):
            self.progress_spawn.setdefault(agent, call)

    def _alias(self, entry: dict) -> None:
        uuid = entry.get("uuid")
        if isinstance(uuid, str) and uuid not in self.key_of and uuid not in self.alias:
            self.alias[uuid] = self._resolve(entry.get("parentUuid"), count=False)

    def _resolve(self, uuid: Any, count: bool = True) -> str | None:
        if not isinstance(uuid, str):
            return None
        if uuid in self.key_of:
            return self.key_of[uuid]
        if uuid in self.alias:
            return self.alias[uuid]
        if count:
            self.t.stats["dangling"] += 1
        return None

    def _conversational(self, entry: dict) -> None:
        uuid = entry.get("uuid") if isinstance(entry.get("uuid"), str) else None
        base = uuid or f"line{self.order}"
        d = hashlib.sha1(json.dumps(entry, sort_keys=True, default=str).encode()).hexdigest()
        if uuid is not None and (uuid in self.key_of or uuid in self.alias):
            if self.digest.get(uuid) == d:
                self.t.stats["duplicates"] += 1  # a resumed/forked file replays lines verbatim
                return
            base = f"{uuid}~{self.order}"
        events = self._events(entry)
        if uuid is not None:
            self.digest[uuid] = d
        if not events:
            self._alias(entry)
            return
        ts = parse_time(entry.get("timestamp"))
        ts = self.last_ts if ts is None else ts
        self.last_ts = ts
        side = bool(entry.get("isSidechain"))
        agent = entry.get("agentId") if side and isinstance(entry.get("agentId"), str) else None
        for i, ev in enumerate(events):
            ev.key = base if i == 0 else f"{base}#{i}"
            ev.timestamp, ev.uuid, ev.sidechain, ev.agent_id = ts, uuid, side, agent
            ev.parent_uuid = entry.get("parentUuid") or entry.get("logicalParentUuid")
            ev.order = self.order
        self._attach(entry, events)
        for ev in events:
            self.by_key[ev.key] = ev
            self.t.events.append(ev)
            if ev.kind == "tool_call":  # a call without an id can still be a spawn
                self.calls[ev.call_id if isinstance(ev.call_id, str) else f"#{ev.key}"] = ev
            if ev.kind == "tool_result" and not side:
                self._note_spawn(entry, ev)
        if uuid is not None:
            self.key_of[uuid] = events[-1].key

    def _note_spawn(self, entry: dict, ev: Event) -> None:
        call = self.calls.get(ev.call_id or "")
        if call is None or call.tool_name not in SPAWN_TOOLS:
            return
        tur = entry.get("toolUseResult")
        agent = tur.get("agentId") if isinstance(tur, dict) else None
        agent = agent or entry.get("agentId")
        if isinstance(agent, str) and agent:
            self.spawned.setdefault(agent, call.key)
            self.agent_of_call.setdefault(call.key, agent)

    # -- linearisation ----------------------------------------------------------------------
    @staticmethod
    def _live(group: dict) -> dict:
        """The group a turn's conversation went on in: follow its continuations to the end."""
        for _ in range(1_000_000):
            nxt = group.get("next")
            if nxt is None:
                break
            group = nxt
        return group

    def _attach(self, entry: dict, events: list[Event]) -> None:
        first = events[0]
        parent_uuid = entry.get("parentUuid")
        logical = entry.get("logicalParentUuid") if parent_uuid is None else None
        anchor = self._resolve(parent_uuid if parent_uuid is not None else logical)
        if anchor is None and not first.sidechain and self.main_tip is not None and (
                isinstance(parent_uuid, str) or isinstance(logical, str)):
            # the parent is not in the file (a compaction kept only its logical parent, or
            # it was cut): join the main line where it stands, as Claude Code does on load
            anchor = self.main_tip
            self.t.stats["joined"] += 1
        elif anchor is None and first.sidechain and isinstance(parent_uuid, str):
            # the same inside a sidechain (old files name the agent on some lines only)
            anchor = self.side_tip.get(first.agent_id or "") or self.side_tip.get("*")
            self.t.stats["joined"] += anchor is not None
        structural = first.kind in ("system", "summary")
        if all(e.kind == "tool_result" for e in events):
            structural = True
            call = self.calls.get(first.call_id or "")
            if call is not None:
                anchor = call.key  # a result belongs after its call, even if its parent is lost
        elif first.kind in ("assistant", "thinking", "tool_call") and anchor is not None:
            prev = self.by_key.get(anchor)
            structural = bool(prev and first.message_id and prev.message_id == first.message_id)
        parent: str | None
        group: dict[str, Any]
        if anchor is None or anchor not in self.group:
            parent, group = None, {"tip": None, "continued": False, "next": None}
            if first.sidechain:
                self.roots.append(first)
        elif structural:
            group = self._live(self.group[anchor])
            parent = group["tip"]
        else:
            old = self.group[anchor]
            if not old["continued"]:
                parent = old["tip"]
            elif first.kind == "user":
                parent = anchor  # a second prompt from the same turn: a rewind, a real fork
            else:
                old = self._live(old)  # a reply hung off a progress line: not a fork
                parent = old["tip"]
            old["continued"] = True
            group = {"tip": None, "continued": False, "next": None}
            old["next"] = group
        for ev in events:
            ev.parent = parent
            parent = ev.key
            self.group[ev.key] = group
        group["tip"] = events[-1].key
        if not first.sidechain:
            self.main_tip = events[-1].key
        else:
            self.side_tip[first.agent_id or ""] = self.side_tip["*"] = events[-1].key

    # -- content ----------------------------------------------------------------------------
    def _events(self, entry: dict) -> list[Event]:
        kind = entry.get("type")
        msg = _obj(entry, "message")
        if kind == "system":
            return self._system(entry)
        content = msg.get("content")
        if kind == "user":
            return self._user(entry, content)
        out: list[Event] = []
        mid = msg.get("id") if isinstance(msg.get("id"), str) else None
        blocks = content if isinstance(content, list) else \
            [{"type": "text", "text": content}] if isinstance(content, str) else []
        for b in blocks:
            if not isinstance(b, dict):
                continue
            if b.get("type") == "text" and str(b.get("text") or "").strip():
                out.append(Event("assistant", "", text=str(b["text"]), message_id=mid))
            elif b.get("type") == "thinking" and str(b.get("thinking") or "").strip():
                # the signature is what lets the API take the thinking back when the session is
                # resumed (resume-session); an opaque token of the model's, not a credential
                # (with the model that signed it: Claude Code sends a signed block back only in a
                # message of a Claude model)
                sig, model = b.get("signature"), msg.get("model")
                signed = {"signature": sig, **({"model": model} if isinstance(model, str) and model else {})}
                out.append(Event("thinking", "", text=str(b["thinking"]), message_id=mid,
                                 meta=signed if isinstance(sig, str) and sig else {}))
            elif b.get("type") == "redacted_thinking":
                data = b.get("data")
                out.append(Event("thinking", "", message_id=mid,
                                 meta={"redacted": True, **({"data": data} if isinstance(data, str) and data else {})}))
            elif b.get("type") == "image":
                imgs = _images([b])
                if imgs:
                    out.append(Event("assistant", "", text="[image]", message_id=mid, images=imgs))
            elif b.get("type") == "tool_use":
                out.append(Event("tool_call", "", tool_name=str(b.get("name") or "?"),
                                 tool_input=b.get("input"), call_id=b.get("id"), message_id=mid))
            # unknown blocks: nothing a reader of the conversation needs
        return out

    def _user(self, entry: dict, content: Any) -> list[Event]:
        if entry.get("isCompactSummary"):
            kind = "summary"
        elif entry.get("isMeta"):
            kind = "system"  # hook feedback, caveats: injected, not typed by the user
        else:
            kind = "user"
        if not isinstance(content, list):
            text = _blocks_text(content)
            return [Event(kind, "", text=text)] if text.strip() else []
        images = _images([b for b in content if not (isinstance(b, dict) and b.get("type") == "tool_result")])
        out: list[Event] = []
        texts: list[Any] = []
        for b in content:
            if isinstance(b, dict) and b.get("type") == "tool_result":
                call = self.calls.get(str(b.get("tool_use_id")))
                ev = Event("tool_result", "", call_id=b.get("tool_use_id"),
                           tool_name=call.tool_name if call else None,
                           tool_output=_blocks_text(b.get("content")),
                           is_error=bool(b.get("is_error")), images=_images([b]))
                parts = _result_parts(b.get("content"))
                if parts:
                    ev.meta["blocks"] = parts
                tur = entry.get("toolUseResult")
                if call is not None and call.tool_name in SPAWN_TOOLS and isinstance(tur, dict) \
                        and sum(isinstance(x, dict) and x.get("type") == "tool_result" for x in content) == 1 \
                        and len(json.dumps(tur, default=str)) <= TOOL_USE_RESULT_MAX:
                    # a subagent's result line: its metadata (agentId, usage) is what Claude Code
                    # reads back on resume; written back by resume-session as it came
                    ev.meta["tool_use_result"] = tur
                out.append(ev)
            else:
                texts.append(b)
        text = _blocks_text(texts)
        if text.strip() or images:
            out.append(Event(kind, "", text=text, images=images))
        return out

    def _system(self, entry: dict) -> list[Event]:
        sub = entry.get("subtype") or ""
        if sub in NOISE_SUBTYPES:
            return []
        if sub == "compact_boundary":
            cm = _obj(entry, "compactMetadata")
            meta = {k: cm[k] for k in ("trigger", "preTokens", "postTokens") if k in cm}
            return [Event("system", "", text="compaction boundary", meta={"subtype": sub, **meta})]
        text = entry.get("content")
        text = text if isinstance(text, str) else _blocks_text(text)
        if not text.strip() and isinstance(entry.get("error"), (str, dict)):
            text = json.dumps(entry["error"], ensure_ascii=False, sort_keys=True) \
                if isinstance(entry["error"], dict) else entry["error"]
        if not text.strip():
            return []
        return [Event("system", "", text=text, meta={"subtype": sub} if sub else {})]

    # -- after all lines --------------------------------------------------------------------
    def finish(self) -> Transcript:
        used = set(self.spawned.values())
        for root in self.roots:
            spawn = self._spawn_of(root, used)
            if spawn is not None and not self._descends(spawn, root.key):
                root.parent = spawn
                used.add(spawn)
                if root.agent_id:
                    self.agent_of_call.setdefault(spawn, root.agent_id)
        self.t.events = toposort(self.t.events)
        for ev in self.t.events:
            parent = self.by_key.get(ev.parent or "")
            if not ev.sidechain:
                ev.lane = "main"
            elif ev.agent_id:
                ev.lane = f"agent-{ev.agent_id}"
            elif parent is not None and parent.sidechain:
                ev.lane = parent.lane
            elif parent is not None:
                ev.lane = f"agent-{self.agent_of_call.get(parent.key) or (parent.call_id or parent.key)[-8:]}"
            else:
                ev.lane = "sidechain"
        return self.t

    def _descends(self, key: str | None, ancestor: str) -> bool:
        seen = 0
        while key is not None and seen <= len(self.by_key):
            if key == ancestor:
                return True
            key, seen = self.by_key[key].parent if key in self.by_key else None, seen + 1
        return False

    def _spawn_of(self, root: Event, used: set[str]) -> str | None:
        """The call that started a sidechain root: by the agent id its result names, the
        subagent file's meta (`toolUseId`), `agent_progress` lines, the prompt it was given;
        last, the latest spawn call made before it that has no agent yet."""
        aid = root.agent_id or ""
        if aid in self.spawned:
            return self.spawned[aid]
        for tool_use in (self.meta_spawn.get(aid), self.progress_spawn.get(aid)):
            call = self.calls.get(tool_use or "")
            if call is not None:
                return call.key
        spawns = [c for c in self.calls.values() if c.tool_name in SPAWN_TOOLS and not c.sidechain
                  and (c.key not in used or not aid)]  # old inline sidechains name no agent
        if root.kind == "user" and root.text.strip():
            for call in spawns:
                inp = call.tool_input if isinstance(call.tool_input, dict) else {}
                if str(inp.get("prompt") or "").strip() == root.text.strip():
                    return call.key
        best = None
        for call in spawns:
            if call.timestamp <= root.timestamp and (best is None or call.order >= best.order):
                best = call
        return best.key if best else None

    def subagent_meta(self, meta: Any, agent_id: str | None) -> None:
        if isinstance(meta, dict) and isinstance(meta.get("toolUseId"), str) and agent_id:
            self.meta_spawn.setdefault(agent_id, meta["toolUseId"])


def toposort(events: list[Event]) -> list[Event]:
    """Parents before children, otherwise source order (a spawn may be reparented forward)."""
    keys = {e.key for e in events}
    children: dict[str | None, list[Event]] = {}
    for e in events:
        children.setdefault(e.parent if e.parent in keys else None, []).append(e)
    out: list[Event] = []
    placed: set[str] = set()
    for e in events:
        if e.key in placed or (e.parent in keys and e.parent not in placed):
            continue
        stack = [e]
        while stack:
            cur = stack.pop()
            if cur.key in placed:
                continue
            placed.add(cur.key)
            out.append(cur)
            stack.extend(reversed(children.get(cur.key, [])))
    return out if len(out) == len(events) else events


def read_claude(lines: Iterable[Any], subagent_lines: Iterable[Any] = ()) -> Transcript:
    """Build a Transcript from parsed lines (None marks a malformed line) and subagent files,
    each given as its parsed lines or as `(lines, meta, agent_id)` (meta: its `.meta.json`)."""
    b = _Builder()
    sources = [lines]
    for sub in subagent_lines:
        if isinstance(sub, tuple):
            sub_lines, meta, agent = sub
            b.subagent_meta(meta, agent)
            sources.append(sub_lines)
        else:
            sources.append(sub)
    for source in sources:
        feed(b, source)
    return b.finish()
