"""One rule for strings that leave tc-git as JSON (CLI `--json`, MCP results) and come back as paths.

A file name that is not valid UTF-8 lives in Python as a surrogate-escaped str (`os.fsdecode`):
`caf\\udce9.txt`. Such a str cannot be written as UTF-8, and a JSON `\\udce9` escape is rejected by
strict parsers (I-JSON, serde_json). So such a string is shown git-style, C-quoted: in double
quotes, `\\` `"` and control characters backslash-escaped, each byte that is not UTF-8 as a
3-digit octal escape: `"caf\\351.txt"` (what `git ls-files` prints; `$'caf\\351.txt'` in bash).
Every other string, newlines and tabs included, is left alone (JSON escapes those itself).

Coming back (`path_in`), a quoted string is unquoted only when it denotes a name that is not
UTF-8, so an ordinary name is never changed; a UTF-8 name that itself looks like such a quoted
string (starts and ends with `"`, escapes inside) cannot be passed, a documented corner.
Stdlib only: the CLI and the MCP server import it before anything heavy.
"""
from __future__ import annotations

import json
from typing import Any

_NAMED = {"\a": "a", "\b": "b", "\t": "t", "\n": "n", "\v": "v", "\f": "f", "\r": "r", '"': '"', "\\": "\\"}
_UNNAMED = {v: k for k, v in _NAMED.items()}


def is_clean(s: str) -> bool:
    """True if `s` can be written as UTF-8 (no surrogates)."""
    try:
        s.encode("utf-8")
        return True
    except UnicodeEncodeError:
        return False


def quote(s: str) -> str:
    """C-style quoting; non-UTF-8 bytes (surrogate escapes) as octal. Other lone surrogates (not a
    file name: e.g. broken text in a transcript) become U+FFFD."""
    out = ['"']
    for ch in s:
        o = ord(ch)
        if ch in _NAMED:
            out.append("\\" + _NAMED[ch])
        elif 0xDC80 <= o <= 0xDCFF:
            out.append(f"\\{o - 0xDC00:03o}")
        elif 0xD800 <= o <= 0xDFFF:
            out.append("\ufffd")
        elif o < 0x20 or o == 0x7F:
            out.append(f"\\{o:03o}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def unquote(s: str) -> str | None:
    """Inverse of `quote` (a surrogate-escaped str), or None if `s` is not such a quoted string."""
    if len(s) < 2 or s[0] != '"' or s[-1] != '"':
        return None
    body, buf, i = s[1:-1], bytearray(), 0
    while i < len(body):
        ch = body[i]
        if ch == '"':
            return None
        if ch != "\\":
            buf += ch.encode("utf-8", "surrogateescape")
            i += 1
            continue
        nxt = body[i + 1: i + 2]
        if nxt in _UNNAMED:
            buf += _UNNAMED[nxt].encode()
            i += 2
        elif len(body) >= i + 4 and all(c in "01234567" for c in body[i + 1: i + 4]) and int(body[i + 1: i + 4], 8) < 256:
            buf.append(int(body[i + 1: i + 4], 8))
            i += 4
        else:
            return None
    return buf.decode("utf-8", "surrogateescape")


def text_out(s: str) -> str:
    """Free text (a message, a handoff) that may quote a non-UTF-8 name: each such byte as `\\NNN`,
    everything else, newlines included, unchanged."""
    if is_clean(s):
        return s
    return "".join(f"\\{ord(c) - 0xDC00:03o}" if 0xDC80 <= ord(c) <= 0xDCFF
                   else "\ufffd" if 0xD800 <= ord(c) <= 0xDFFF else c for c in s)


def path_out(s: str) -> str:
    """A str as it is shown in JSON: unchanged if UTF-8, else quoted."""
    return s if is_clean(s) else quote(s)


def path_in(s: str) -> str:
    """A path as given by a client back to the str the engine uses (inverse of `path_out`)."""
    u = unquote(s) if s[:1] == '"' else None
    return u if u is not None and not is_clean(u) else s


def safe(obj: Any) -> Any:
    """`obj` with every str (values and keys, at any depth) passed through `path_out`. Returns the
    same object when nothing needed changing (the common case costs one walk, no copies)."""
    if isinstance(obj, str):
        return obj if is_clean(obj) else quote(obj)
    if isinstance(obj, dict):
        new = {safe(k): safe(v) for k, v in obj.items()}
        return obj if all(a is b for a, b in zip(obj.values(), new.values())) and list(new) == list(obj) else new
    if isinstance(obj, (list, tuple)):
        items = [safe(x) for x in obj]
        return obj if all(a is b for a, b in zip(obj, items)) else items
    return obj


def dumps(obj: Any, **kw) -> str:
    """json.dumps of `safe(obj)` as UTF-8-writable text (non-ASCII kept readable)."""
    kw.setdefault("ensure_ascii", False)
    text = json.dumps(safe(obj), **kw)
    if not is_clean(text):  # a non-str object turned into text by `default=`: escape, never fail
        text = json.dumps(safe(obj), **{**kw, "ensure_ascii": True})
    return text


def one_line(s, n: int) -> str:
    """`s` as one line (runs of whitespace -> one space) of at most `n` characters, `…` when cut:
    the one clipping rule of hook logs, handoff text and error messages."""
    s = " ".join(str(s).split())
    return s if len(s) <= n else s[: n - 1] + "…"
