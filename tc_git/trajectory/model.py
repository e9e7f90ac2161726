"""The normalised event: one thing said or done, whatever agent produced it.

Readers turn a source format into a `Transcript` of `Event`s; the recorder turns each event into
a commit. `Event.record()` is exactly what goes into `event.json`, so it must hold only what
the source said: no session id, no line number, no clock reading. That is what makes a copied
prefix (a Claude Code `/branch`, a Codex fork) hash to the same commits as the original.
"""
from __future__ import annotations

import base64
import binascii
import datetime as _dt
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

__all__ = ["KINDS", "Event", "Transcript", "parse_time", "short_text", "image_block", "IMAGE_MAX_BYTES",
           "count_unknown", "Malformed", "malformed_events", "MAX_LINE_BYTES", "MAX_JSON_DEPTH",
           "MAX_JSON_VALUES", "MAX_TRANSCRIPT_BYTES"]

KINDS = ("user", "assistant", "thinking", "tool_call", "tool_result", "system", "summary")
# Pasted images are kept (their bytes become a blob) up to this size; larger ones are noted
# with their size and media type only, so one screenshot cannot swell the store.
IMAGE_MAX_BYTES = 5 << 20  # a pasted image up to this size is kept as a blob
# One transcript line is read whole up to this size and parsed only if nested at most this deep;
# anything else becomes one "malformed" event (its line, the reason, a short preview) and the
# rest of the session is recorded (issue 28: one 3,000-deep line lost the whole session, one
# 100 MiB line cost 1.25 GiB of memory).
MAX_LINE_BYTES = 16 << 20
MAX_TRANSCRIPT_BYTES = 128 << 20  # a larger file is refused whole (its events would all be held at once)
MAX_JSON_DEPTH = 100
MAX_JSON_VALUES = 250_000  # arrays, objects and members in one line: a flood of `{}` costs ~100 B each
PREVIEW_CHARS = 200


class Malformed(NamedTuple):
    """A transcript line that could not be taken: its 1-based line number, why, its size."""

    line: int
    reason: str
    size: int
    preview: str
    complete: bool = True  # False: the last line, unterminated (the agent may still be writing it)


@dataclass
class Event:
    """One normalised event.

    `key` and `parent` are reader-local ids (unique within one transcript) that give the DAG;
    `lane` is `main` or `agent-<id>` (sidechains) and only decides branch names.
    """

    kind: str
    key: str
    parent: str | None = None
    text: str = ""
    tool_name: str | None = None
    tool_input: Any = None
    tool_output: Any = None
    call_id: str | None = None
    is_error: bool = False
    timestamp: float = 0.0
    uuid: str | None = None
    parent_uuid: str | None = None
    message_id: str | None = None
    sidechain: bool = False
    agent_id: str | None = None
    lane: str = "main"
    meta: dict = field(default_factory=dict)
    images: list = field(default_factory=list)  # [{"media_type", "data" (base64)} | {..., "omitted"}]
    history: Any = None  # what a compaction replaced the context with (Codex `replacement_history`)
    order: int = 0  # position in the source, for "latest leaf wins"

    def record(self) -> dict:
        """The JSON object stored as `event.json` (before redaction and blob splitting)."""
        out: dict[str, Any] = {"kind": self.kind, "timestamp": self.timestamp}
        if self.text:
            out["text"] = self.text
        if self.tool_name is not None:
            out["tool_name"] = self.tool_name
        if self.tool_input is not None:
            out["tool_input"] = self.tool_input
        if self.tool_output is not None:
            out["tool_output"] = self.tool_output
        if self.call_id:
            out["call_id"] = self.call_id
        if self.is_error:
            out["is_error"] = True
        source = {k: v for k, v in (("uuid", self.uuid), ("parent_uuid", self.parent_uuid),
                                    ("message_id", self.message_id)) if v}
        if source:
            out["source"] = source
        if self.sidechain:
            out["sidechain"] = True
        if self.agent_id:
            out["agent_id"] = self.agent_id
        if self.meta:
            out["meta"] = self.meta
        if self.images:
            out["images"] = self.images
        if self.history is not None:
            out["history"] = self.history
        return out


@dataclass
class Transcript:
    """What a reader found: events in source order plus counters and session facts."""

    agent: str  # claude | codex | generic
    session_id: str
    events: list[Event] = field(default_factory=list)
    stats: dict = field(default_factory=lambda: {"lines": 0, "skipped": 0, "malformed": 0,
                                                 "ignored": 0, "duplicates": 0, "dangling": 0,
                                                 "joined": 0, "unknown_types": {}})
    title: str | None = None
    meta: dict = field(default_factory=dict)
    malformed: list = field(default_factory=list)  # [(Malformed, timestamp)], see malformed_events


def parse_time(value: Any) -> float | None:
    """ISO-8601 or epoch seconds/milliseconds -> epoch seconds; None when unreadable."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value) / 1000.0 if value > 1e11 else float(value)
    if not isinstance(value, str) or not value.strip():
        return None
    s = value.strip()
    if s.endswith("Z"):
        s = s[:-1] + "+00:00"
    try:
        dt = _dt.datetime.fromisoformat(s)
    except ValueError:
        return None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=_dt.UTC)
    return dt.timestamp()


def short_text(value: Any, limit: int = 72) -> str:
    """One line of at most `limit` characters, for commit subjects and Markdown summaries."""
    if value is None:
        return ""
    if not isinstance(value, str):
        value = json.dumps(value, ensure_ascii=False, sort_keys=True)
    s = " ".join(value.split())
    return s if len(s) <= limit else s[: limit - 1].rstrip() + "…"


def image_block(media_type: Any, data: Any = None, url: Any = None) -> dict | None:
    """A pasted image as stored: base64 data checked and size-capped, or a URL reference."""
    mt = media_type if isinstance(media_type, str) and media_type else "application/octet-stream"
    if isinstance(url, str) and url.startswith("data:") and ";base64," in url:
        head, _, data = url.partition(";base64,")
        mt = head[5:] or mt
    elif isinstance(url, str) and url:
        return {"media_type": mt, "url": url}
    if not isinstance(data, str) or not data:
        return None
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return {"media_type": mt, "omitted": "not base64"}
    if len(raw) > IMAGE_MAX_BYTES:
        return {"media_type": mt, "bytes": len(raw), "omitted": f"larger than {IMAGE_MAX_BYTES} bytes"}
    return {"media_type": mt, "data": base64.b64encode(raw).decode("ascii")}


def count_unknown(stats: dict, kind: Any) -> None:
    """Unknown line types are counted by name (reported after recording), never fatal."""
    name = kind if isinstance(kind, str) else type(kind).__name__
    unknown = stats.setdefault("unknown_types", {})
    unknown[name[:60]] = unknown.get(name[:60], 0) + 1
    stats["skipped"] += 1


def feed(builder: Any, lines: Iterable[Any]) -> None:
    """Each parsed line that is a JSON object to `builder.line` (a reader's builder: `t` its
    Transcript, `order` the number of the line being read); None marks a malformed line, counted
    like any other that is not an object, never fatal."""
    for entry in lines:
        builder.t.stats["lines"] += 1
        builder.order += 1
        if entry is None or isinstance(entry, Malformed):
            builder.t.stats["malformed"] += 1
            if isinstance(entry, Malformed) and entry.complete:
                builder.t.malformed.append((entry, getattr(builder, "last_ts", 0.0)))
        if not isinstance(entry, dict):
            builder.t.stats["skipped"] += 1
            continue
        builder.line(entry)


def malformed_events(t: Transcript) -> None:
    """Add one "malformed" event per bad line the readers met, on a lane of their own (branch
    `malformed`, each after the previous one), so the conversation's own branches are as if the
    line were absent. A torn last line (still being written) gets none: it is read whole next time."""
    prev = None
    for n, (m, ts) in enumerate(t.malformed):
        key = f"malformed{n}"
        t.events.append(Event("malformed", key, parent=prev, text=m.preview, timestamp=ts, lane="malformed",
                              meta={"line": m.line, "reason": m.reason, "bytes": m.size}, order=m.line))
        prev = key
