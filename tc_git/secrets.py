"""Credential detection: by path (names that hold secrets) and by content.

One module for both sides of the promise "secrets never become objects": the snapshot
policy asks `sensitive_path` / `find` before a file becomes a blob; the engine, the trajectory
recorder and the hooks call `redact_text` / `redact_obj` before a text becomes an object.

Content detection is a thin adapter over a maintained rule engine (MongoDB's Kingfisher,
`kingfisher-secret-scanner`: ~490 provider rules from the gitleaks/betterleaks families,
compiled once into a vectorscan database, cached on disk by the library) plus two rules of our
own that such engines leave out: a whole PEM private-key block (also unterminated, for clipped
tool output) and `password/secret/token = <literal>` assignments, which need entropy, a
literal value and a key that *is* such a word (`__author_email__` is not `auth`). The engine is
loaded lazily, once per process, the first time content is scanned; if it cannot be imported
(`TC_SECRETS_ENGINE=builtin` or no wheel for the platform) the built-in rules below run alone
and `engine_name()` says so.

Allowing a finding: an inline `tc:allow-secret` on its line, or a fingerprint line
`<path>:<rule>:<line>` (gitleaks' `.gitleaksignore` shape; `<path>:<rule>` for any line) in
`.tcsecretsignore` at the workspace root.
"""
from __future__ import annotations

import fnmatch
import math
import os
import re
from collections import Counter
from typing import Any, NamedTuple

# Directory names whose whole content is private (casefolded exact names; the seed also
# matched *token* / *secret* globs here, which blacklisted source trees like tokenizer/).
SENSITIVE_DIRS = frozenset(
    {".ssh", ".aws", ".gnupg", ".docker", ".kube", ".secrets", ".tokens", ".envdir", ".password-store"}
)

# File-name globs (casefolded). Taken from task-checkpoint-mcp 0.1.7 minus its false
# positives: settings.py, local_settings.py, firebase*, service_account*.py, secret.py,
# credentials.py and any *token* source file are ordinary code and are checked by content.
SENSITIVE_NAMES = (
    ".env", ".env.*", "*.env", ".envrc", "*.pem", "*.key", "*.p12", "*.pfx", "*.p8", "*.jks",
    "*.keystore", "*.kdbx", "*.ppk", "*.ovpn", "id_rsa", "id_dsa", "id_ed25519", "id_ecdsa",
    "*_rsa", "*_dsa", "*_ed25519", "*_ecdsa", ".netrc", "_netrc", ".git-credentials", ".npmrc",
    ".pypirc", ".pgpass", ".htpasswd", ".my.cnf", "shadow", "kubeconfig", ".kubeconfig",
    "*.kubeconfig", "*.tfstate", "*.tfstate.backup", "*.tfvars", ".dev.vars", "*.jwt",
    "service-account*.json", "service_account*.json", "*.serviceaccount.json",
    "credentials", "credentials.json", "credentials.yaml", "credentials.yml", "credentials.toml",
    "credentials.ini", "creds", "creds.json", "secret", "secrets.json", "secrets.yaml",
    "secrets.yml", "secrets.toml", "token", "token.json", "token.txt", "*.token", "auth.json",
)
# Names that merely *look* sensitive but are templates people keep in git.
_NOT_SENSITIVE = ("*.example", "*.sample", "*.template", "*.dist", "*.pub")


# One compiled alternation per list: a snapshot asks about every new file (a first save of 50k
# files was spending ~1 s in 65 separate fnmatch calls per name). Same globs, same answers.
_NAMES_RX = re.compile("|".join(f"(?:{fnmatch.translate(p)})" for p in SENSITIVE_NAMES))
_NOT_RX = re.compile("|".join(f"(?:{fnmatch.translate(p)})" for p in _NOT_SENSITIVE))


def sensitive_path(rel: str) -> str | None:
    """Return why a workspace-relative path is sensitive by its name, or None."""
    parts = rel.casefold().split("/")
    for d in parts[:-1]:
        if d in SENSITIVE_DIRS:
            return f"inside {d}/"
    name = parts[-1]
    if not _NAMES_RX.match(name) or _NOT_RX.match(name):
        return None
    for pat in SENSITIVE_NAMES:
        if fnmatch.fnmatchcase(name, pat):
            return f"name matches {pat}"
    return None



# --------------------------------------------------------------------------- findings

class Finding(NamedTuple):
    rule: str   # short rule id, e.g. github-pat, private-key, generic-password
    start: int  # byte offsets into the scanned buffer
    end: int
    line: int   # 1-based line of `start`


ALLOW_MARKER = b"tc:allow-secret"
IGNORE_FILE = ".tcsecretsignore"

# Our own rules (always on; the engine's private-key rule needs an END line, ours does not).
_PEM = re.compile(rb"-----BEGIN[ A-Z0-9_-]{0,100}PRIVATE KEY(?: BLOCK)?-----"
                  rb"(?:[\s\S]*?-----END[ A-Z0-9_-]{0,100}PRIVATE KEY(?: BLOCK)?-----|[\s\S]*\Z)")
# Fallback rules when the engine is unavailable: the common provider formats, precise enough
# that a hit in source is a real credential.
_FALLBACK = [(k, re.compile(rx)) for k, rx in [
    ("aws-access-token", rb"\b(?:AKIA|ASIA|ABIA|ACCA)[A-Z2-7]{16}\b"),
    ("github-token", rb"\b(?:gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{60,})"),
    ("gitlab-pat", rb"\bglpat-[A-Za-z0-9_\-]{20,}"),
    ("slack-token", rb"\bxox[abposr]-[A-Za-z0-9-]{10,}"),
    ("slack-webhook-url", rb"https://hooks\.slack\.com/services/T[A-Za-z0-9_/]{20,}"),
    ("anthropic-api-key", rb"\bsk-ant-[A-Za-z0-9_\-]{20,}"),
    ("openai-api-key", rb"\bsk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_\-]{20,}T3BlbkFJ[A-Za-z0-9_\-]{20,}"),
    ("gcp-api-key", rb"\bAIza[0-9A-Za-z_\-]{35}\b"),
    ("stripe-access-token", rb"\b(?:sk|rk)_live_[0-9a-zA-Z]{20,}"),
    ("npm-access-token", rb"\bnpm_[A-Za-z0-9]{36}\b"),
    ("pypi-upload-token", rb"\bpypi-AgE[A-Za-z0-9_\-]{50,}"),
    ("huggingface-access-token", rb"\bhf_[A-Za-z]{34,}\b"),
    ("jwt", rb"\beyJ[A-Za-z0-9_\-]{10,}\.eyJ[A-Za-z0-9_\-]{10,}\.[A-Za-z0-9_\-]{10,}"),
    ("generic-credential-uri",
     rb"\b[a-z][a-z0-9+.\-]{1,20}://[^\s:/@'\"`$]{1,64}:[^\s:/@'\"`${}<>]{6,128}@[A-Za-z0-9.\-]+"),
]]

# `password = "..."`-style assignments. The key is an identifier whose *words* (split on
# `_ - .` and camelCase) include a credential word; the value is a literal that looks random.
_ASSIGN = re.compile(
    rb"""(?x)
    (?<![A-Za-z0-9_.\-])
    (?P<key>[A-Za-z_][A-Za-z0-9_.\-]{0,80})
    ["']?[ \t]*(?::=|=>|=|:)[ \t]*
    (?P<q>["'`]?)(?P<val>[^\s"'`,;}{)(\]\[]{8,200})(?P=q)(?P<after>.?)
    """
)
_CRED_WORDS = frozenset({"password", "passwd", "pwd", "pass", "passphrase", "secret", "token",
                         "apikey", "credential", "credentials"})
_CRED_PAIRS = {("api", "key"), ("access", "key"), ("private", "key"), ("secret", "key"),
               ("client", "secret"), ("auth", "token"), ("signing", "key"), ("master", "key")}
_WORD_SPLIT = re.compile(r"[_.\-]+|(?<=[a-z0-9])(?=[A-Z])")
_PLACEHOLDER = re.compile(
    rb"(?i)^(?:\$|<|%\(|%s|\{|os\.|process\.env|env\(|getenv|settings\.|config\.|xxx|\*\*\*|changeme|"
    rb"change[_\-]?me|your[_\-]|my[_\-]?|example|dummy|placeholder|redacted|fake|test|sample|secret|"
    rb"password|none$|null$|true$|false$)|\$\{|\{\{|%\(|<[a-z_]+>|\[REDACTED"
)


def _key_is_credential(key: bytes) -> bool:
    words = [w.lower() for w in _WORD_SPLIT.split(key.decode("ascii", "replace")) if w]
    if any(w in _CRED_WORDS for w in words):
        return True
    return any(p in _CRED_PAIRS for p in zip(words, words[1:]))


def _entropy(s: bytes) -> float:
    n = len(s)
    return -sum(c / n * math.log2(c / n) for c in Counter(s).values())


_IDENT = re.compile(rb"^[A-Za-z_][A-Za-z0-9_]*(?:[.:/][A-Za-z_][A-Za-z0-9_]*)*$")


def _looks_random(val: bytes, after: bytes) -> bool:
    """A literal secret, not code (`self.token = get_token()`), a path or a placeholder."""
    if _PLACEHOLDER.search(val) or _IDENT.match(val) or after in (b"(", b"[", b"."):
        return False
    classes = sum(bool(re.search(p, val)) for p in (rb"[a-z]", rb"[A-Z]", rb"[0-9]", rb"[^A-Za-z0-9]"))
    return classes >= 3 and _entropy(val) >= 3.0


_KEY_WORDS = re.compile(rb"(?i)pass|pwd|secret|token|key|credential")


def _generic(data: bytes):
    if not _KEY_WORDS.search(data):
        return
    for m in _ASSIGN.finditer(data):
        if _key_is_credential(m.group("key")) and _looks_random(m.group("val"), m.group("after")):
            yield "generic-password", m.start("val"), m.end("val")


def _pem(data: bytes):
    if b"-----BEGIN" in data:
        for m in _PEM.finditer(data):
            yield "private-key", m.start(), m.end()


def _builtin(data: bytes):
    for kind, rx in _FALLBACK:
        for m in rx.finditer(data):
            yield kind, m.start(), m.end()


# --------------------------------------------------------------------------- the engine

_engine = None          # the loaded scanner, False when unavailable
_engine_error = ""


def _load_engine():
    global _engine, _engine_error
    if _engine is None:
        if os.environ.get("TC_SECRETS_ENGINE", "kingfisher") == "builtin":
            _engine, _engine_error = False, "TC_SECRETS_ENGINE=builtin"
        else:
            try:
                import kingfisher_sdk as kf
                # medium+high confidence rules; inline `tc:allow-secret` markers honoured by the
                # engine too; no base64 decoding (it flags random binary data, see the runbook).
                rules = kf.Rules(confidence="medium")
                _engine = kf.Scanner(rules, base64=False)
            except Exception as e:  # noqa: BLE001 - any failure means: built-in rules only
                _engine, _engine_error = False, f"{type(e).__name__}: {e}"
    return _engine or None


def engine_name() -> str:
    eng = _load_engine()
    if eng is None:
        return f"builtin ({_engine_error})"
    import kingfisher_sdk as kf
    return f"kingfisher {kf.__version__}"


def _rule_id(rule_id: str) -> str:
    return rule_id.rsplit(".", 1)[-1].rsplit("/", 1)[-1]


def _engine_spans(data: bytes):
    eng = _load_engine()
    if eng is None:
        return
    for f in eng.scan(data):
        if not f.visible:  # components of a composite rule (e.g. an AWS secret without its id)
            continue
        loc = f.location
        yield _rule_id(f.rule_id), loc["start_offset"], loc["end_offset"]


def _line_of(data: bytes, pos: int) -> int:
    return data.count(b"\n", 0, pos) + 1


def _allowed_inline(data: bytes, start: int, end: int) -> bool:
    ls = data.rfind(b"\n", 0, start) + 1
    le = data.find(b"\n", end)
    return ALLOW_MARKER in data[ls:le if le >= 0 else len(data)]


def find(data: bytes, path: str | None = None, allow=None, wide: bool = False) -> list[Finding]:
    """Every credential in `data` (all of it: binary or text, any size), engine rules first.
    `allow` is an `Allowlist` (fingerprints from `.tcsecretsignore`) or None. `wide` adds the
    built-in provider rules to the engine's (redaction: a replaced word costs little, while a
    file is left out only for what the engine rates a credential)."""
    if not data:
        return []
    spans = []
    seen = set()
    eng = _load_engine()
    for gen in (_engine_spans(data) if eng else (), _builtin(data) if wide or not eng else (),
                _pem(data), _generic(data)):
        for rule, s, e in gen:
            if (s, e) in seen:
                continue
            seen.add((s, e))
            spans.append((rule, s, e))
    out = []
    for rule, s, e in sorted(spans, key=lambda x: (x[1], -x[2])):
        if _allowed_inline(data, s, e):
            continue
        f = Finding(rule, s, e, _line_of(data, s))
        if allow is not None and path is not None and allow.allows(path, f):
            continue
        out.append(f)
    return out


def scan_bytes(data: bytes, path: str | None = None, allow=None) -> str | None:
    """The rule of the first credential in content (with its line), or None."""
    fs = find(data, path, allow)
    if not fs:
        return None
    return f"{fs[0].rule} at line {fs[0].line}"


class Allowlist:
    """Fingerprints from `.tcsecretsignore`: `<path>:<rule>:<line>` or `<path>:<rule>` lines."""

    def __init__(self, text: str = ""):
        self.exact: set[tuple[str, str, int]] = set()
        self.any_line: set[tuple[str, str]] = set()
        for raw in text.splitlines():
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            parts = line.rsplit(":", 2)
            if len(parts) == 3 and parts[2].isdigit():
                self.exact.add((parts[0], parts[1], int(parts[2])))
            else:
                p, _, r = line.rpartition(":")
                if p:
                    self.any_line.add((p, r))

    def allows(self, path: str, f: Finding) -> bool:
        return (path, f.rule, f.line) in self.exact or (path, f.rule) in self.any_line \
            or (path, "*") in self.any_line

    @classmethod
    def load(cls, root: str | os.PathLike | None) -> "Allowlist":
        if root is None:
            return cls()
        try:
            with open(os.path.join(root, IGNORE_FILE), encoding="utf-8", errors="replace") as fh:
                return cls(fh.read(1 << 20))
        except OSError:
            return cls()


def fingerprint(path: str, f: Finding) -> str:
    return f"{path}:{f.rule}:{f.line}"


# --------------------------------------------------------------------------- redaction

def redact_text(text: str) -> str:
    """Replace every credential in text with `[REDACTED:<rule>]` (transcripts, fields)."""
    return redact_count(text)[0]


def redact_count(text: str) -> tuple[str, list[str]]:
    """`redact_text` plus the rules that fired (for reporting)."""
    if not text or not isinstance(text, str):
        return text, []
    data = text.encode("utf-8", "surrogatepass")
    fs = find(data, wide=True)
    if not fs:
        return text, []
    out, pos, rules = [], 0, []
    for f in fs:
        if f.start < pos:
            if f.end > pos:  # overlapping: extend the redaction
                pos = f.end
            continue
        out.append(data[pos:f.start])
        out.append(f"[REDACTED:{f.rule}]".encode())
        rules.append(f.rule)
        pos = f.end
    out.append(data[pos:])
    return b"".join(out).decode("utf-8", "surrogatepass"), rules


def redact_obj(value: Any) -> Any:
    """Redact every string in a JSON-like value, dict keys included. Structure-aware: a value
    under a credential-named key (`{"DB_PASSWORD": "..."}`) is judged like `KEY=value`."""
    return redact_obj_count(value)[0]


def redact_obj_count(value: Any) -> tuple[Any, int]:
    """`redact_obj` plus how many strings it changed."""
    n = [0]
    strings: list[str] = []

    def collect(v, key=None):
        if isinstance(v, str):
            strings.append(f"{key}={v}" if isinstance(key, str) else v)
        elif isinstance(v, (list, tuple)):
            for x in v:
                collect(x)
        elif isinstance(v, dict):
            for k, x in v.items():
                collect(k)
                collect(x, k)

    collect(value)
    # one scan of everything first: most records hold no credential
    if not strings or not find("\n".join(strings).encode("utf-8", "surrogatepass"), wide=True):
        return value, 0

    def walk(v, key=None):
        if isinstance(v, str):
            out, rules = redact_count(v)
            if not rules and isinstance(key, str) and _key_is_credential(key.encode("utf-8", "replace")) \
                    and 8 <= len(v) <= 200 and not any(c.isspace() for c in v) \
                    and _looks_random(v.encode("utf-8", "surrogatepass"), b""):
                out, rules = "[REDACTED:generic-password]", ["generic-password"]
            n[0] += bool(rules)
            return out
        if isinstance(v, list):
            return [walk(x) for x in v]
        if isinstance(v, tuple):
            return tuple(walk(x) for x in v)
        if isinstance(v, dict):
            return {walk(k) if isinstance(k, str) else k: walk(x, k) for k, x in v.items()}
        return v

    return walk(value), n[0]


def redact_fields(fields: dict) -> tuple[dict, list[dict]]:
    """Redact agent-supplied fields (save/step, init, milestone); report what was replaced as
    `[{"field": name, "rules": [...]}]` so the caller can tell the agent."""
    out, report = {}, []
    for k, v in fields.items():
        if isinstance(v, str):
            red, rules = redact_count(v)
        elif isinstance(v, list):
            red, rules = [], []
            for x in v:
                rx, rr = redact_count(x) if isinstance(x, str) else (x, [])
                red.append(rx)
                rules += rr
        else:
            red, rules = v, []
        out[k] = red
        if rules:
            report.append({"field": k, "rules": sorted(set(rules))})
    return out, report
