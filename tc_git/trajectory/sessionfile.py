"""Write a recorded conversation back as a session file the agent's own `resume` opens.

`tc resume-session <milestone|event> --client claude|codex` takes the first-parent chain from
the session's root to that point (nothing after it) and writes:

- Claude Code: `<config>/projects/<project-slug>/<new-id>.jsonl` (`<config>` = $CLAUDE_CONFIG_DIR
  or ~/.claude; slug = the project path with every non-alphanumeric character as `-`), then
  `claude --resume <new-id>` in the project directory.
- Codex: `<codex home>/sessions/YYYY/MM/DD/rollout-<time>-<new-id>.jsonl` ($CODEX_HOME or
  ~/.codex), then `codex resume <new-id>`.

The lines carry exactly what the events recorded (uuids, parent uuids, message ids, timestamps,
call ids, outputs, images), so reading the file back with our own reader gives the same events
and therefore, content addressing, the same commit ids. A parent uuid whose line held no event
(a progress or hook line, an abandoned branch) is written as a bookkeeping line (`system`,
`turn_duration`) so the chain Claude Code walks stays connected; a compaction boundary keeps
`parentUuid: null` + `logicalParentUuid`, so Claude Code resumes from the summary as it would.

Crossing agents (`for_client`): what the target's API cannot take back is changed into what it
can. Thinking/reasoning the target cannot verify (Claude's API checks a thinking block's
signature; the Responses API reasoning's encrypted content, which only Codex's own items can
carry) is left out unless `thinking="keep"`, a short "earlier reasoning" note in its place; a
Codex web search (the provider ran it: no call for Claude to pair) becomes text; a Claude
tool error keeps its flag in the text Codex's model reads. Same-agent chains are unchanged.
"""
from __future__ import annotations

import datetime as _dt
import json
import re
import uuid as _uuid
from pathlib import Path
from typing import Any

from ..base.settings import current

__all__ = ["CLIENTS", "THINKING", "for_client", "claude_lines", "codex_lines", "claude_path", "codex_path", "write_session"]

CLIENTS = ("claude", "codex")
THINKING = ("auto", "keep", "drop")  # unverifiable thinking left out (a note kept) | all kept | all left out
NOTE_CHARS = 400  # an "earlier reasoning" note: enough to say where the thought was going
VERSION = "2.1.0"  # the Claude Code transcript format written (fields of 2.0/2.1)


def _iso(ts: float) -> str:
    return _dt.datetime.fromtimestamp(float(ts), _dt.UTC).isoformat(timespec="microseconds") \
        .replace("+00:00", "Z")


def _blocks(text: str, images: list[dict], *, placeholder: bool = True) -> list[dict]:
    """Text and image blocks whose flattening (text lines, `[image]` per image) is `text`."""
    out: list[dict] = []
    pending = list(images)
    buf: list[str] = []
    for line in text.split("\n") if text else []:
        if placeholder and line == "[image]" and pending:
            if buf:
                out.append({"type": "text", "text": "\n".join(buf)})
                buf = []
            out.append(_image(pending.pop(0)))
        else:
            buf.append(line)
    if buf:
        out.append({"type": "text", "text": "\n".join(buf)})
    out.extend(_image(i) for i in pending)
    return out


def _split(text: str, parts: Any, images: list[dict]) -> list[dict] | None:
    """A tool result's blocks again, from its flattened text and the reader's `blocks` entries
    (see claude._result_parts): pieces joined by one newline, empty text pieces left out. None
    when they do not add up (a redaction changed the text's length): then the plain text."""
    if not isinstance(parts, list) or not parts:
        return None
    out: list[dict] = []
    pos, pending, first = 0, list(images), True
    for p in parts:
        if not isinstance(p, list) or not p:
            return None
        kind, arg = p[0], (p[1] if len(p) > 1 else None)
        piece = None  # what the flattened text holds for a block that is not text
        if kind == "text" and isinstance(arg, int) and not isinstance(arg, bool) and arg >= 0:
            size = arg
        elif kind == "image":
            piece = "[image]"
        elif kind == "tool_reference" and isinstance(arg, str):
            piece = f"[tool {arg}]"
        else:
            return None
        size = len(piece) if piece is not None else size
        if size:
            if not first:
                if text[pos:pos + 1] != "\n":
                    return None
                pos += 1
            first = False
        chunk, pos = text[pos:pos + size], pos + size
        if len(chunk) != size or (piece is not None and chunk != piece):
            return None
        if kind == "text":
            if chunk:  # an empty text block says nothing, and the API refuses one
                out.append({"type": "text", "text": chunk})
        elif kind == "image":
            if not pending:
                return None
            out.append(_image(pending.pop(0)))
        else:
            out.append({"type": "tool_reference", "tool_name": arg})
    return out if pos == len(text) else None


def _image(img: dict) -> dict:
    if img.get("url"):
        return {"type": "image", "source": {"type": "url", "url": img["url"]}}
    return {"type": "image", "source": {"type": "base64", "media_type": img.get("media_type") or "image/png",
                                        "data": img.get("data") or ""}}


# -- crossing agents ---------------------------------------------------------------------------

def _claude_made(rec: dict) -> bool:
    return bool((rec.get("source") or {}).get("uuid"))  # every Claude Code line has one; Codex items none


def _unverifiable(rec: dict, client: str) -> bool:
    """Thinking the client's API would refuse or cannot check: for Claude, one without its
    signature (Codex reasoning, recordings older than reader version 4); for Codex, any of
    Claude's (a reasoning item without Codex's encrypted content)."""
    meta = rec.get("meta") or {}
    if client == "claude":
        return not (meta.get("signature") or (meta.get("redacted") and meta.get("data")))
    return _claude_made(rec)


def _web_search_text(rec: dict) -> str:
    action = rec.get("tool_input")
    what = json.dumps(action, ensure_ascii=False, sort_keys=True) if action is not None else "(no details recorded)"
    return f"[web search run by the model provider: {what[:NOTE_CHARS]}]"


def for_client(records: list[dict], client: str, thinking: str = "auto") -> tuple[list[dict], str | None]:
    """The chain as `client`'s API takes it (see the module's docstring) and a one-line notice
    of what was left out (None: nothing). `thinking`: auto | keep | drop (every thinking
    block, no notes: the old `--drop-thinking`)."""
    out: list[dict] = []
    left = 0
    note: dict | None = None  # the note standing for the current run of thinking left out
    results = {r.get("call_id") for r in records if r.get("kind") == "tool_result"}
    for rec in records:
        kind = rec.get("kind")
        if kind == "thinking" and thinking != "keep" and (thinking == "drop" or _unverifiable(rec, client)):
            left += 1
            text = " ".join((rec.get("text") or "").split())
            if thinking == "drop" or not text:
                continue
            if note is None:
                note = {k: v for k, v in rec.items() if k not in ("meta", "text", "images")}
                note.update(kind="assistant", role="assistant", text="[earlier reasoning, not verifiable here] ")
                out.append(note)
            else:
                note["text"] += " / "
            room = NOTE_CHARS - len(note["text"])
            note["text"] += text if len(text) <= room else text[:max(0, room - 1)] + "…"
            continue
        note = None
        if client == "claude" and kind == "tool_call" and not _claude_made(rec) \
                and rec.get("tool_name") == "web_search" and rec.get("call_id") not in results:
            text = _web_search_text(rec)
            rec = {k: v for k, v in rec.items() if k not in ("tool_name", "tool_input", "call_id", "meta")}
            rec.update(kind="assistant", role="assistant", text=text)
        elif client == "codex" and kind == "tool_result" and rec.get("is_error") and _claude_made(rec) \
                and isinstance(rec.get("tool_output"), str) \
                and not rec["tool_output"].startswith(("Error", "<tool_use_error>")):
            rec = dict(rec, tool_output="Error: " + rec["tool_output"])
        out.append(rec)
    if not out:  # only thinking up to the point: its last block, so there is something to resume
        out = records[-1:]
    if not left:
        return out, None
    what = {"claude": "Claude's API verifies a signature they do not have",
            "codex": "the Responses API takes back only Codex's own (encrypted) reasoning"}[client]
    kept = "" if thinking == "drop" else " (a short note kept in their place)"
    return out, f"left out {left} thinking/reasoning block{'s' if left != 1 else ''}: {what}{kept}; --keep-thinking keeps them"


# -- Claude Code -----------------------------------------------------------------------------

def claude_lines(records: list[dict], session_id: str, cwd: str) -> list[dict]:
    """Transcript lines for the chain `records` (oldest first, as `ops.replay` gives them with
    image data)."""
    groups: list[list[dict]] = []
    for rec in records:
        src = rec.get("source") or {}
        if groups and src.get("uuid") and (groups[-1][0].get("source") or {}).get("uuid") == src["uuid"]:
            groups[-1].append(rec)
        else:
            groups.append([rec])
    lines: list[dict] = []
    written: set[str] = set()
    prev: str | None = None
    run_id: str | None = None  # the API message id of the current run of assistant lines
    # the model that signed a message's thinking: Claude Code drops signed thinking from a
    # message of any other model (seen in the real CLI), and the API refuses it unsigned
    signer = {(r.get("source") or {}).get("message_id"): r["meta"]["model"] for r in records
              if r.get("kind") == "thinking" and (r.get("meta") or {}).get("model")
              and (r.get("source") or {}).get("message_id")}
    base = {"isSidechain": False, "userType": "external", "cwd": cwd, "sessionId": session_id,
            "version": VERSION}

    for n, group in enumerate(groups):
        first = group[0]
        src = first.get("source") or {}
        uid = src.get("uuid") or str(_uuid.uuid5(_uuid.NAMESPACE_URL, f"tc-git:{first.get('id') or n}"))
        parent = src.get("parent_uuid") if src else prev
        kind = first["kind"]
        compaction = kind == "system" and (first.get("meta") or {}).get("subtype") == "compact_boundary"
        if parent and parent not in written:
            # its line held no event: a bookkeeping line keeps the chain whole for Claude Code
            lines.append(dict(base, type="system", subtype="turn_duration", durationMs=0, uuid=parent,
                              parentUuid=prev, timestamp=_iso(first["timestamp"]), isMeta=True))
            written.add(parent)
        line: dict[str, Any] = dict(base, uuid=uid, timestamp=_iso(first["timestamp"]))
        line["parentUuid"] = None if compaction else parent
        if first.get("sidechain"):
            line["isSidechain"] = True
        if first.get("agent_id"):
            line["agentId"] = first["agent_id"]
        if compaction:
            meta = first.get("meta") or {}
            line.update(type="system", subtype="compact_boundary", content="Conversation compacted",
                        level="info", logicalParentUuid=parent,
                        compactMetadata={k: meta[k] for k in ("trigger", "preTokens", "postTokens") if k in meta})
        elif kind == "system" and (first.get("meta") or {}).get("subtype"):
            line.update(type="system", subtype=first["meta"]["subtype"], content=first.get("text") or "",
                        level="info")
        elif kind in ("assistant", "thinking", "tool_call"):
            content: Any = []
            for rec in group:
                if rec["kind"] == "assistant":
                    if rec.get("images") and (rec.get("text") or "") == "[image]":
                        content.extend(_image(i) for i in rec["images"])
                    else:
                        content.append({"type": "text", "text": rec.get("text") or ""})
                elif rec["kind"] == "thinking":
                    meta = rec.get("meta") or {}
                    content.append({"type": "redacted_thinking", "data": meta.get("data") or ""} if meta.get("redacted")
                                   else {"type": "thinking", "thinking": rec.get("text") or "",
                                         "signature": meta.get("signature") or ""})
                elif rec["kind"] == "tool_call":
                    name, inp = rec.get("tool_name") or "?", rec.get("tool_input")
                    if not isinstance(inp, dict):  # the API takes an object only: Codex's freeform
                        # input (apply_patch's patch), arguments that were not JSON or not an object
                        inp = {} if inp is None else {"patch" if name == "apply_patch" else "input": inp}
                    content.append({"type": "tool_use", "id": rec.get("call_id") or f"toolu_tc{n}",
                                    "name": name, "input": inp})
            msg: dict[str, Any] = {"role": "assistant", "type": "message",
                                   "model": signer.get(src.get("message_id")) or "tc-git-replay",
                                   "content": content, "stop_reason": None}
            if src.get("message_id"):
                msg["id"] = src["message_id"]
            elif not src.get("uuid"):
                # not from a Claude Code line (a Codex rollout, recorded steps): Claude Code merges
                # the assistant lines of one API message by this id, so lines without one all
                # became a single message, the answer ahead of its tool calls, and it drops a
                # message of thinking alone (both seen in the real CLI): one id per assistant run
                run_id = run_id or "msg_tc" + _uuid.uuid5(_uuid.NAMESPACE_URL, f"tc-git:{first.get('id') or n}").hex
                msg["id"] = run_id
            line.update(type="assistant", message=msg)
        else:  # user, summary, tool_result, system without subtype (injected context)
            content = []  # (a list of blocks, or the plain text of a prompt)
            text_rec = None
            for rec in group:
                if rec["kind"] == "tool_result":
                    out = rec.get("tool_output")
                    out = out if isinstance(out, str) else json.dumps(out, ensure_ascii=False, sort_keys=True)
                    body: Any = _split(out, (rec.get("meta") or {}).get("blocks"), rec.get("images") or [])
                    if body is None:
                        body = _blocks(out, rec.get("images") or []) if rec.get("images") else out
                    block = {"type": "tool_result", "tool_use_id": rec.get("call_id"), "content": body}
                    if rec.get("is_error"):
                        block["is_error"] = True
                    content.append(block)
                    tur = (rec.get("meta") or {}).get("tool_use_result")
                    if isinstance(tur, dict):  # (a subagent's result: its agentId and usage)
                        line["toolUseResult"] = tur
                else:
                    text_rec = rec
            if text_rec is not None:
                text, imgs = text_rec.get("text") or "", text_rec.get("images") or []
                if content or imgs:
                    content.extend(_blocks(text, imgs))
                else:
                    content = text  # a plain prompt, as Claude Code writes it
                if text_rec["kind"] == "summary":
                    line["isCompactSummary"] = True
                elif text_rec["kind"] == "system":
                    line["isMeta"] = True
            line.update(type="user", message={"role": "user", "content": content})
            run_id = None
        lines.append(line)
        written.add(uid)
        prev = uid
    return lines


def project_slug(cwd: str) -> str:
    return re.sub(r"[^A-Za-z0-9]", "-", cwd)


def claude_path(cwd: str, session_id: str) -> Path:
    root = Path(current().claude_home or Path.home() / ".claude")
    return root / "projects" / project_slug(cwd) / f"{session_id}.jsonl"


# -- Codex -------------------------------------------------------------------------------------

def codex_lines(records: list[dict], session_id: str, cwd: str) -> list[dict]:
    """Rollout lines for the chain `records` (oldest first)."""
    t0 = records[0]["timestamp"] if records else 0.0
    out: list[dict] = [{"timestamp": _iso(t0), "type": "session_meta", "payload": {
        "id": session_id, "timestamp": _iso(t0), "cwd": cwd, "originator": "tc-git", "cli_version": "0.0.0",
        "source": "cli"}}]
    custom: set[str] = set()

    def item(ts, payload):
        out.append({"timestamp": _iso(ts), "type": "response_item", "payload": payload})

    def event(ts, payload):
        out.append({"timestamp": _iso(ts), "type": "event_msg", "payload": payload})

    for rec in records:
        ts, kind, text = rec["timestamp"], rec["kind"], rec.get("text") or ""
        meta = rec.get("meta") or {}
        if kind == "user":
            item(ts, {"type": "message", "role": "user", "content": _codex_content(text, rec.get("images") or [])})
            event(ts, {"type": "user_message", "message": text, "images": []})
        elif kind == "assistant":
            p: dict[str, Any] = {"type": "message", "role": "assistant",
                                 "content": [{"type": "output_text", "text": text}]}
            if meta.get("phase"):
                p["phase"] = meta["phase"]
            item(ts, p)
            event(ts, {"type": "agent_message", "message": text})
        elif kind == "thinking":
            item(ts, {"type": "reasoning", "summary": [{"type": "summary_text", "text": text}],
                      "content": None, "encrypted_content": None})
        elif kind == "tool_call":
            name, inp, cid = rec.get("tool_name") or "?", rec.get("tool_input"), rec.get("call_id")
            if not cid and name not in ("local_shell", "web_search"):  # (a call the API takes has one)
                cid = f"call_tc{len(out)}"
            ns, extra = meta.get("namespace"), {}
            if isinstance(ns, str) and name.startswith(f"{ns}__"):  # a namespaced tool: its own name again
                name, extra = name[len(ns) + 2:], {"namespace": ns}
            if name == "local_shell" and not extra:
                item(ts, {"type": "local_shell_call", "call_id": cid, "status": "completed", "action": inp})
            elif name == "web_search" and not extra:
                item(ts, {"type": "web_search_call", **({"id": cid} if cid else {}), "status": "completed",
                          **({"action": inp} if inp is not None else {})})
            elif isinstance(inp, str) and meta.get("raw_arguments"):  # a function call whose arguments were not JSON
                item(ts, {"type": "function_call", "call_id": cid, "name": name, **extra, "arguments": inp})
            elif isinstance(inp, str):  # freeform input (apply_patch): a custom tool call
                custom.add(cid or "")
                item(ts, {"type": "custom_tool_call", "call_id": cid, "name": name, **extra, "input": inp})
            else:
                item(ts, {"type": "function_call", "call_id": cid, "name": name, **extra,
                          "arguments": json.dumps(inp, ensure_ascii=False)})
        elif kind == "tool_result":
            output = rec.get("tool_output")
            if "exit_code" in meta:
                output = json.dumps({"output": output, "metadata": {"exit_code": meta["exit_code"]}},
                                    ensure_ascii=False)
            p = {"type": "custom_tool_call_output" if rec.get("call_id") in custom else "function_call_output",
                 "call_id": rec.get("call_id"), "output": output}
            if rec.get("is_error") and "exit_code" not in meta:
                p["success"] = False
            item(ts, p)
        elif kind == "summary":
            if text == "compaction (encrypted summary)" and not meta.get("compacted"):
                item(ts, {"type": "compaction", "encrypted_content": rec.get("history") or ""})
            else:  # the `compacted` line as recorded: message, window ids, replacement history
                p = {k: v for k, v in meta.items() if k != "compacted"}
                p["message"] = text
                if rec.get("history") is not None:
                    p["replacement_history"] = rec["history"]
                elif not meta.get("compacted"):  # another agent's compaction (Claude Code's summary):
                    # after it that model saw the summary and nothing before it; say so to Codex,
                    # which otherwise rebuilds the context from every earlier user message
                    p["replacement_history"] = [{"type": "message", "role": "user",
                                                 "content": [{"type": "input_text", "text": text}]}]
                out.append({"timestamp": _iso(ts), "type": "compacted", "payload": p})
        elif kind == "system" and text.startswith("turn aborted: "):
            event(ts, {"type": "turn_aborted", "reason": text[len("turn aborted: "):]})
        else:  # harness context the model saw (developer/system messages, environment context)
            role = meta.get("role") or "developer"
            item(ts, {"type": "message", "role": role, "content": [{"type": "input_text", "text": text}]})
    return out


def _codex_content(text: str, images: list[dict]) -> list[dict]:
    """`input_text`/`input_image` parts whose reading (parts joined by newlines, `[image]` for an
    image) is `text` again; an image sits where its `[image]` line is."""
    parts: list[dict] = []
    for blk in _blocks(text, [i for i in images if i.get("data") or i.get("url")]):
        if blk["type"] == "text":
            parts.append({"type": "input_text", "text": blk["text"]})
        elif blk["source"].get("type") == "url":
            parts.append({"type": "input_image", "image_url": blk["source"]["url"]})
        else:
            parts.append({"type": "input_image",
                          "image_url": f"data:{blk['source']['media_type']};base64,{blk['source']['data']}"})
    return parts or [{"type": "input_text", "text": text}]


def codex_path(session_id: str, when: float) -> Path:
    root = Path(current().codex_home or Path.home() / ".codex")
    t = _dt.datetime.fromtimestamp(when, _dt.UTC)
    return root / "sessions" / t.strftime("%Y/%m/%d") / f"rollout-{t.strftime('%Y-%m-%dT%H-%M-%S')}-{session_id}.jsonl"


# -- writing -----------------------------------------------------------------------------------

def write_session(records: list[dict], client: str, cwd: str, *, session_id: str | None = None,
                  now: float | None = None, thinking: str = "auto") -> dict:
    """Write the session file for `client` (the chain as its API takes it: `for_client`);
    returns its path, id, the command to resume it and `notice`: what was left out, or None.

    Never overwrites: a fresh id is used for every file."""
    import time

    from ..base.errors import BadInput
    from ..base.fsutil import atomic_write

    if client not in CLIENTS:
        raise BadInput(f"unknown client {client!r}: use one of {', '.join(CLIENTS)}")
    if not records:
        raise BadInput("nothing to resume: the point has no events")
    if thinking not in THINKING:
        raise BadInput(f"unknown thinking mode {thinking!r}: use one of {', '.join(THINKING)}")
    records, notice = for_client(records, client, thinking)
    sid = session_id or str(_uuid.uuid4())
    try:  # both clients name sessions by UUID; anything else could also leave the sessions directory
        if str(_uuid.UUID(sid)) != sid.lower():
            raise ValueError(sid)
    except ValueError:
        raise BadInput(f"session id {sid!r} is not a UUID (like {_uuid.uuid4()})") from None
    if client == "claude":
        lines, path, cmd = claude_lines(records, sid, cwd), claude_path(cwd, sid), f"claude --resume {sid}"
    else:
        lines, path = codex_lines(records, sid, cwd), codex_path(sid, time.time() if now is None else now)
        cmd = f"codex resume {sid}"
    if path.exists():
        raise BadInput(f"{path} exists; pick another session id")
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    data = "".join(json.dumps(line, ensure_ascii=False, separators=(",", ":")) + "\n" for line in lines)
    atomic_write(path, data.encode("utf-8", "surrogatepass"), 0o600)
    return {"client": client, "session_id": sid, "path": str(path), "events": len(records),
            "lines": len(lines), "command": cmd, "cwd": cwd, "notice": notice}
