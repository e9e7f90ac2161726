"""The model providers' own request schemas as the judge, offline: the official SDKs' parameter
types (`anthropic` Messages, `openai` Responses input items), validated with pydantic, strictly.

The SDK types are TypedDicts whose lists are `Iterable[...]`; pydantic validates an Iterable
lazily (a ValidatorIterator checks its items only when it is consumed), so `_force` walks the
result to make every nested item be checked. Unknown keys are refused (`extra="forbid"`). A
message's blocks are checked against the request block types only (`ContentBlockParam`): the
Messages types also accept the response models, which allow any extra field.

The schemas cannot see two things the APIs also refuse, checked here by hand: a thinking block
whose signature is empty (the Messages API verifies it), and a call left without its result
(each `tool_use` answered in the next user message; each Responses call by an output with its
call id, after it).
"""
from __future__ import annotations

import json
from typing import Any

import pydantic

_FORBID = pydantic.ConfigDict(extra="forbid")


def _adapters() -> dict[str, pydantic.TypeAdapter]:
    import anthropic.types as A
    from openai.types.responses import ResponseInputItemParam

    return {"message": pydantic.TypeAdapter(A.MessageParam, config=_FORBID),
            "block": pydantic.TypeAdapter(A.ContentBlockParam, config=_FORBID),
            "item": pydantic.TypeAdapter(ResponseInputItemParam, config=_FORBID)}


_CACHE: dict[str, pydantic.TypeAdapter] = {}


def _adapter(kind: str) -> pydantic.TypeAdapter:
    if not _CACHE:
        _CACHE.update(_adapters())
    return _CACHE[kind]


def _force(x: Any) -> None:
    if isinstance(x, dict):
        for v in x.values():
            _force(v)
    elif isinstance(x, (list, tuple)):
        for v in x:
            _force(v)
    elif isinstance(x, pydantic.BaseModel):
        _force(dict(x))
    elif type(x).__name__ == "ValidatorIterator":
        for v in x:
            _force(v)


def _validate(kind: str, value: Any, where: str) -> None:
    try:
        _force(_adapter(kind).validate_python(value, strict=True))
    except pydantic.ValidationError as e:
        first = "\n".join(str(e).splitlines()[:8])
        raise AssertionError(f"{where}: not a valid {kind} for the API ({e.error_count()} errors):\n"
                             f"{json.dumps(value)[:600]}\n{first}") from None


def check_messages(messages: list[dict], where: str = "request") -> None:
    """Every message and block valid Messages API params; thinking signed; calls paired."""
    for n, m in enumerate(messages):
        _validate("message", m, f"{where} message {n}")
        if isinstance(m.get("content"), list):
            for b in m["content"]:
                _validate("block", b, f"{where} message {n}")
                if b.get("type") == "thinking":
                    assert b["signature"], f"{where} message {n}: thinking without a signature"
    for n, m in enumerate(messages):
        if m["role"] != "assistant" or not isinstance(m["content"], list):
            continue
        calls = {b["id"] for b in m["content"] if b.get("type") == "tool_use"}
        nxt = messages[n + 1] if n + 1 < len(messages) else None
        answered = {b["tool_use_id"] for b in nxt["content"] if b.get("type") == "tool_result"} \
            if nxt is not None and nxt["role"] == "user" and isinstance(nxt["content"], list) else set()
        assert calls <= answered, f"{where} message {n}: calls without a result in the next message: {calls - answered}"
    for n, m in enumerate(messages):
        if m["role"] == "user" and isinstance(m["content"], list):
            prev = messages[n - 1] if n else {"content": []}
            ids = {b.get("id") for b in prev["content"] if isinstance(b, dict)} if isinstance(prev["content"], list) else set()
            for b in m["content"]:
                if b.get("type") == "tool_result":
                    assert b["tool_use_id"] in ids, f"{where} message {n}: a result without its call"


CALLS = {"function_call": "function_call_output", "custom_tool_call": "custom_tool_call_output",
         "local_shell_call": "local_shell_call_output", "tool_search_call": "tool_search_output"}


def check_input(items: list[dict], where: str = "request") -> None:
    """Every item a valid Responses input item; every call answered after it, every output
    after its call."""
    open_calls: dict[str, str] = {}
    seen: set[str] = set()
    for n, it in enumerate(items):
        _validate("item", it, f"{where} item {n}")
        t = it.get("type")
        if t in CALLS and it.get("call_id"):
            open_calls[it["call_id"]] = t
            seen.add(it["call_id"])
        elif t in CALLS.values() and it.get("call_id"):
            assert it["call_id"] in seen, f"{where} item {n}: an output without its call"
            open_calls.pop(it["call_id"], None)
    assert not open_calls, f"{where}: calls without an output: {sorted(open_calls)[:5]}"


def as_codex_sends(item: dict) -> dict:
    """An input item with Codex's item ids made to fit the SDK types, its own items and ours alike:
    it sends none for what the model said (it does not store responses), where the SDK types
    require `id` (and `status`, `annotations`) of output-shaped items, and an id of its own on
    some input messages, whose SDK type has none; and an image's `detail`, which the API
    documents as optional ("defaults to auto") and the SDK type requires. Nothing else is changed."""
    it = dict(item)
    if it.get("type") == "message" and it.get("role") in ("user", "developer", "system"):
        it.pop("id", None)
        if isinstance(it.get("content"), list):
            it["content"] = [dict(c, detail=c.get("detail", "auto")) if c.get("type") == "input_image" else c
                             for c in it["content"]]
    if it.get("type") in ("reasoning", "local_shell_call", "web_search_call", "image_generation_call") \
            or (it.get("type") == "message" and it.get("role") == "assistant"):
        it.setdefault("id", "codex-sends-none")
    if it.get("type") == "message" and it.get("role") == "assistant":
        it.setdefault("status", "completed")
        it["content"] = [dict(c, annotations=c.get("annotations", [])) if c.get("type") == "output_text" else c
                         for c in it.get("content") or []]
    return it
