"""Credential detection: by path (names that hold secrets) and by content.

One module for both sides of the promise "secrets never become objects": the snapshot
policy asks `sensitive_path` / `scan_bytes` before a file becomes a blob, and the trajectory
recorder calls `redact_text` before a message becomes a blob.
"""
from __future__ import annotations

import fnmatch
import math
import re
from collections import Counter

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


# Content rules: (kind, compiled regex). Each names a credential format precisely enough
# that a hit in source code is almost always a real secret.
_RULES = [
    ("private key", rb"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----"),
    ("aws access key", rb"\b(?:AKIA|ASIA|ABIA|ACCA)[0-9A-Z]{16}\b"),
    ("github token", rb"\b(?:gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{60,})"),
    ("gitlab token", rb"\bglpat-[A-Za-z0-9_\-]{20,}"),
    ("slack token", rb"\bxox[abposr]-[A-Za-z0-9-]{10,}"),
    ("slack webhook", rb"https://hooks\.slack\.com/services/T[A-Za-z0-9_/]{20,}"),
    ("anthropic key", rb"\bsk-ant-[A-Za-z0-9_\-]{20,}"),
    ("openai key", rb"\bsk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_\-]{32,}"),
    ("google api key", rb"\bAIza[0-9A-Za-z_\-]{35}\b"),
    ("stripe key", rb"\b(?:sk|rk)_live_[0-9a-zA-Z]{20,}"),
    ("npm token", rb"\bnpm_[A-Za-z0-9]{36}\b"),
    ("pypi token", rb"\bpypi-AgE[A-Za-z0-9_\-]{50,}"),
    ("huggingface token", rb"\bhf_[A-Za-z0-9]{34,}\b"),
    ("jwt", rb"\beyJ[A-Za-z0-9_\-]{10,}\.eyJ[A-Za-z0-9_\-]{10,}\.[A-Za-z0-9_\-]{10,}"),
    ("url credentials", rb"\b[a-z][a-z0-9+.\-]{1,20}://[^\s:/@'\"]{1,64}:[^\s:/@'\"]{6,128}@[A-Za-z0-9.\-]+"),
]
_RULES = [(kind, re.compile(rx)) for kind, rx in _RULES]

# `password = "..."`-style assignments in config and code; the value must look random.
_ASSIGN = re.compile(
    rb"""(?ix)
    (?:^|[^a-z0-9])
    (?P<key>[a-z0-9_.\-]*(?:password|passwd|pwd|secret|token|api[_\-]?key|access[_\-]?key|
        private[_\-]?key|client[_\-]?secret|auth)[a-z0-9_.\-]*)
    ["']?\s*(?:=|:|=>)\s*
    (?P<q>["']?)(?P<val>[^\s"',;}{)(\]\[]{8,200})(?P=q)(?P<after>.?)
    """
)
_PLACEHOLDER = re.compile(
    rb"(?i)^(?:\$\{?|<|%\(|\{\{|os\.|process\.env|env\(|getenv|settings\.|config\.|xxx|changeme|"
    rb"your[_\-]|example|dummy|placeholder|redacted|none$|null$|true$|false$)"
)


def _entropy(s: bytes) -> float:
    n = len(s)
    return -sum(c / n * math.log2(c / n) for c in Counter(s).values())


_IDENT = re.compile(rb"^[A-Za-z_][A-Za-z_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*$")


def _looks_random(val: bytes, quoted: bool, after: bytes) -> bool:
    """A value that is a literal secret, not code (`self.token = get_token()`) or a placeholder."""
    if _PLACEHOLDER.search(val) or _IDENT.match(val) or after in (b"(", b"[", b"."):
        return False
    classes = sum(bool(re.search(p, val)) for p in (rb"[a-z]", rb"[A-Z]", rb"[0-9]", rb"[^A-Za-z0-9]"))
    if quoted:
        return classes >= 2 and _entropy(val) >= 3.0
    return len(val) >= 16 and classes >= 3 and _entropy(val) >= 3.5


# Cheap pre-filters: every rule above contains one of these literals, and every key _ASSIGN
# accepts contains one of these words, so content without them cannot match (most source files).
_RULE_LITERALS = re.compile(rb"-----BEGIN|AKIA|ASIA|ABIA|ACCA|gh[pousr]_|github_pat_|glpat-|xox[abposr]-|sk-|"
                            rb"AIza|_live_|npm_|pypi-|hf_|eyJ|://")
_KEY_WORDS = re.compile(rb"(?i)pass|pwd|secret|token|key|auth")


def _findings(data: bytes):
    if _RULE_LITERALS.search(data):
        for kind, rx in _RULES:
            for m in rx.finditer(data):
                yield kind, m.start(), m.end()
    if not _KEY_WORDS.search(data):
        return
    for m in _ASSIGN.finditer(data):
        val = m.group("val")
        if _looks_random(val, bool(m.group("q")), m.group("after")):
            yield f"secret assigned to {m.group('key').decode('ascii', 'replace')}", m.start("val"), m.end("val")


def scan_bytes(data: bytes) -> str | None:
    """Return the kind of the first credential found in content, or None. Every byte is
    scanned, binary or text, whatever the size (a NUL byte or a large file is no excuse)."""
    for kind, _s, _e in _findings(data):
        return kind
    return None


def redact_text(text: str) -> str:
    """Replace every credential in text with `[REDACTED:<kind>]` (for transcripts)."""
    if not text:
        return text
    data = text.encode("utf-8", "surrogatepass")
    spans = sorted(_findings(data), key=lambda f: (f[1], -f[2]))
    if not spans:
        return text
    out, pos = [], 0
    for kind, s, e in spans:
        if s < pos:
            continue
        out.append(data[pos:s])
        out.append(f"[REDACTED:{kind.split(' assigned')[0]}]".encode())
        pos = e
    out.append(data[pos:])
    return b"".join(out).decode("utf-8", "surrogatepass")
