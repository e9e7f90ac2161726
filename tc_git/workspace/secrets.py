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
(the `secrets_engine` setting `builtin`, for benchmarks, or no wheel for the platform) the built-in rules below run alone
and `engine_name()` says so.

Allowing a finding: an inline `tc:allow-secret` on its line, or a fingerprint line
`<path>:<rule>:<line>` (gitleaks' `.gitleaksignore` shape; `<path>:<rule>` for any line) in
`.tcsecretsignore` at the workspace root.
"""
from __future__ import annotations

import fnmatch
import functools
import importlib.util
import math
import os
import re
import time
from collections import Counter
from typing import Any, NamedTuple

from ..base.settings import current

# Directory names whose whole content is private (casefolded exact names; the seed also
# matched *token* / *secret* globs here, which blacklisted source trees like tokenizer/).
SENSITIVE_DIRS = frozenset(
    {".ssh", ".aws", ".gnupg", ".docker", ".kube", ".secrets", ".tokens", ".envdir", ".password-store"}
)

# File-name globs (casefolded). Taken from task-checkpoint-mcp 0.1.7 minus its false
# positives (`*.pem` is decided by content: CA bundles such as certifi's cacert.pem and public
# keys/certificates are ordinary files, a PEM private key is caught by the content scan): settings.py, local_settings.py, firebase*, service_account*.py, secret.py,
# credentials.py and any *token* source file are ordinary code and are checked by content.
SENSITIVE_NAMES = (
    ".env", ".env.*", "*.env", ".envrc", "*.key", "*.p12", "*.pfx", "*.p8", "*.jks",
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


@functools.lru_cache(maxsize=8192)
def name_secret(name: str) -> str | None:
    """The rule of a credential held in one path component (a file named after its token,
    `token-ghp_....json`, or a per-token cache directory), or None. The provider formats only
    (distinctive prefixes, checked at C speed first): a name is no place for the generic rules,
    and a snapshot asks this of every new name without loading the engine."""
    for rule, _s, _e in _builtin(name.encode("utf-8", "surrogateescape")):
        return rule
    return None


def path_secret(rel: str) -> str | None:
    """Why a path is left out because a component of it holds a credential (it would become part
    of tree objects, the user's mirrored refs and bundles as surely as a file's content), or None."""
    names = rel.split("/")
    for i, part in enumerate(names):
        rule = name_secret(part)
        if rule:
            return f"its {'name' if i == len(names) - 1 else 'directory name'} holds a credential ({rule}); rename it"
    return None


def sensitive_path(rel: str) -> str | None:
    """Return why a workspace-relative path is sensitive by its name, or None (`path_secret`
    included)."""
    why = path_secret(rel)
    if why:
        return why
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
_PEM_BEGIN = re.compile(rb"-----BEGIN[ A-Z0-9_-]{0,100}PRIVATE KEY(?: BLOCK)?-----")
_PEM_END = re.compile(rb"-----END[ A-Z0-9_-]{0,100}PRIVATE KEY(?: BLOCK)?-----")
_KEY_MATERIAL = re.compile(rb"[A-Za-z0-9+/]{40,}")  # one base64 line of a key body
# Fallback rules when the engine is unavailable: the common provider formats, precise enough
# that a hit in source is a real credential.
_FALLBACK_GATES = {"aws-access-token": (b"AKIA", b"ASIA", b"ABIA", b"ACCA"), "github-token": (b"ghp_", b"gho_", b"ghu_", b"ghs_", b"ghr_", b"github_pat_"),
                   "gitlab-pat": (b"glpat-",), "slack-token": (b"xox",), "slack-webhook-url": (b"hooks.slack.com",),
                   "anthropic-api-key": (b"sk-ant-",), "openai-api-key": (b"T3BlbkFJ",), "gcp-api-key": (b"AIza",),
                   "stripe-access-token": (b"_live_",), "npm-access-token": (b"npm_",), "pypi-upload-token": (b"pypi-",),
                   "huggingface-access-token": (b"hf_",), "jwt": (b"eyJ",), "generic-credential-uri": (b"://",)}
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
    ("generic-credential-uri",  # literal first: Python's re then skips ahead with a fast search
     rb"://[^\s:/@'\"`$]{1,64}:[^\s:/@'\"`${}<>]{6,128}@[A-Za-z0-9.\-]+"),
]]

# `password = "..."`-style assignments. The key is an identifier whose *words* (split on
# `_ - .` and camelCase) include a credential word; the value is a literal that looks random.
_ASSIGN = re.compile(
    rb"""(?xm)
    (?:(?P<bol>^[ \t]*(?:export[ \t]+|set[ \t]+)?)|(?<![A-Za-z0-9_.\-]))
    (?P<key>[A-Za-z_][A-Za-z0-9_.\-]{0,80})
    ["']?[ \t]*(?::=|=>|=|:)[ \t]*
    (?P<q>["'`]?)(?P<val>[!#-&*+\--:<-Z\\^-z|~]{8,200})(?P=q)(?P<after>.?)
    """
)
# The key must *name* a credential: its last word (split on `_ - .` and camelCase) is one of
# these, or a (word, key|token) pair below. `TOKEN_URL`, `PasswordLastUsed`, `nextToken`,
# `__author_email__` name something else.
_CRED_LAST = frozenset({"password", "passwd", "pwd", "pass", "passphrase", "secret", "apikey", "secretkey"})
_KEY_PREV = frozenset({"api", "access", "secret", "private", "signing", "master", "encryption", "client"})
_TOKEN_PREV = frozenset({"access", "auth", "api", "bearer", "refresh", "bot", "oauth", "personal", "private",
                         "secret", "session", "github", "gitlab", "slack", "npm", "pypi", "hf", "service", "app"})
_WORD_SPLIT = re.compile(r"[_.\-]+|(?<=[a-z0-9])(?=[A-Z])")
_PLACEHOLDER = re.compile(
    rb"(?i)^(?:\$|<|%\(|%s|\{|os\.|process\.env|env\(|getenv|settings\.|config\.|xxx|\*\*\*|changeme|"
    rb"change[_\-]?me|your[_\-]|my[_\-]|dummy|placeholder|redacted|fake|test|sample|secret|password|"
    rb"pbkdf2_|argon2|bcrypt|sha1\$|md5\$|urn:|none$|null$|true$|false$)"
    rb"|\$\{|\{\{|%\(|<[a-z_]+>|\[REDACTED|example|password|://|\.\.\.|^\$2[aby]?\$|^@|abc|123|qwerty|asdf"
)
# kebab/snake words with small numeric suffixes: bad-token-causes-400, FROM_CREDS_FILE_2, key_personal1
_WORDY = re.compile(rb"^(?:[A-Za-z]{1,}[0-9]{0,2}|[0-9]+)(?:[\-_.](?:[A-Za-z]{1,}[0-9]{0,2}|[0-9]+))+$")


def _key_is_credential(key: bytes) -> bool:
    words = [w.lower() for w in _WORD_SPLIT.split(key.decode("ascii", "replace")) if w]
    if not words:
        return False
    last, prev = words[-1], (words[-2] if len(words) > 1 else "")
    if last in _CRED_LAST:
        return True
    if last == "key":
        return prev in _KEY_PREV
    if last == "token":
        return prev == "" or prev in _TOKEN_PREV
    return False


def _entropy(s: bytes) -> float:
    n = len(s)
    return -sum(c / n * math.log2(c / n) for c in Counter(s).values())


_IDENT = re.compile(rb"^[A-Za-z_]+(?:[.:/][A-Za-z_][A-Za-z0-9_]*)+$|^[A-Za-z_]+$")


def _looks_random(val: bytes, after: bytes) -> bool:
    """A literal secret, not code (`self.token = get_token()`), a path, a hash, kebab-case
    words or a placeholder: 10+ chars, a digit, 3 character classes, some entropy."""
    if len(val) < 10 or _PLACEHOLDER.search(val) or _IDENT.match(val) or _WORDY.match(val) \
            or after in (b"(", b"[", b"."):
        return False
    classes = sum(bool(re.search(p, val)) for p in (rb"[a-z]", rb"[A-Z]", rb"[0-9]", rb"[^A-Za-z0-9]"))
    return classes >= 3 and bool(re.search(rb"[0-9]", val)) and _entropy(val) >= 3.3




# Where a generic assignment can be: right after a credential word, a separator. Found with
# bytes.find in a lowercased copy (same offsets), then the whole key and the value are read
# around the hit: a Python regex that starts at every identifier (or a case-insensitive
# alternation) costs ~80 s (~25 s) on 400 MB of source, this ~2 s.
_WORDS_FIND = (b"pass", b"pwd", b"secret", b"key", b"token")
_SEP = re.compile(rb"[\"']?[ \t]*(?::=|=>|=|:)")
_KEY_BEFORE = re.compile(rb"([A-Za-z_][A-Za-z0-9_.\-]{0,80})\Z")
_VALUE_AFTER = re.compile(rb"[\"']?[ \t]*(?::=|=>|=|:)[ \t]*(?P<q>[\"'`]?)"
                          rb"(?P<val>[!#-&*+\--:<-Z\\^-z|~]{8,200})(?P=q)(?P<after>.?)")
_ALNUM_RUN = re.compile(rb"[a-z0-9]*")


def _anchors(low: bytes):
    seen = set()
    for w in _WORDS_FIND:
        i = low.find(w)
        while i >= 0:
            run = _ALNUM_RUN.match(low, i + len(w))  # a `*` run: always matches
            j = run.end() if run else i + len(w)
            if j not in seen and _SEP.match(low, j):
                seen.add(j)
                yield j
            i = low.find(w, i + len(w))


def _generic(data: bytes):
    low = data.lower()
    for word_end in _anchors(low):
        km = _KEY_BEFORE.search(data, max(0, word_end - 81), word_end)
        if km is None:
            continue
        kstart = km.start(1)
        prev = data[kstart - 1:kstart] if kstart else b""
        if prev and (prev.isalnum() or prev in b"_.-"):
            continue
        m = _VALUE_AFTER.match(data, word_end)
        if m is None:
            continue
        # an unquoted value counts only as a config line (`KEY=value` at the start of a line)
        if not m.group("q"):
            ls = data.rfind(b"\n", 0, kstart) + 1
            lead = data[ls:kstart].strip()
            if lead not in (b"", b"export", b"set"):
                continue
        if _key_is_credential(km.group(1)) and _looks_random(m.group("val"), m.group("after")):
            yield "generic-password", m.start("val"), m.end("val")


def _pem_spans(data: bytes):
    """Whole private-key blocks, BEGIN..END (or BEGIN to the end when clipped). A header with
    no key material after it (`"-----BEGIN RSA PRIVATE KEY-----" marker` in docs and parsers,
    `<key bytes>` placeholders) is not a key."""
    pos = 0
    while True:
        m = _PEM_BEGIN.search(data, pos)
        if not m:
            return
        end = _PEM_END.search(data, m.end(), m.end() + (256 << 10))
        stop = end.end() if end else len(data)
        body = data[m.end():end.start() if end else min(len(data), m.end() + (16 << 10))]
        if _KEY_MATERIAL.search(body.replace(b"\\n", b"\n")):
            yield m.start(), stop
        pos = stop if end else m.end()


def _pem(data: bytes):
    if b"-----BEGIN" in data:
        for s, e in _pem_spans(data):
            yield "private-key", s, e


_ANY_GATE = re.compile(b"|".join(re.escape(g) for gates in _FALLBACK_GATES.values() for g in gates))


def _builtin(data: bytes):
    if _ANY_GATE.search(data) is None:  # (the common text: no provider's prefix at all)
        return
    for kind, rx in _FALLBACK:
        if not any([g in data for g in _FALLBACK_GATES[kind]]):  # bytes.find is C-fast; the regex is not
            continue
        for m in rx.finditer(data):
            yield kind, m.start(), m.end()


# --------------------------------------------------------------------------- the engine

_engine = None          # the loaded scanner, False when unavailable
_engine_error = ""


_used = 0.0             # time.monotonic() of the last _load_engine() (a scan about to run)
_idle_after: float | None = None  # release_when_idle's setting (long-lived processes only)


def release_when_idle(seconds: float) -> None:
    """For a long-lived process (the MCP server): drop the loaded engine once it has not been
    asked for in `seconds` (it holds ~45 MiB: the compiled rule database; ~20 MiB of it goes back
    to the OS, the rest is the library itself). The next text with a credential-shaped token loads
    it again (0.3 s from its disk cache); texts without one never need it (the start-up guard)."""
    global _idle_after
    started = _idle_after is not None
    _idle_after = seconds
    if not started:
        _watch_idle()


def _watch_idle() -> None:
    import threading

    def run():
        global _engine
        import gc

        while (idle := _idle_after) is not None:
            time.sleep(max(1.0, idle / 4))
            idle = _idle_after  # (read again: a setting changed during the sleep applies at once)
            if _engine and idle is not None and time.monotonic() - _used >= idle:
                _engine = None  # a scan in flight keeps its own reference until it is done
                gc.collect()

    threading.Thread(target=run, name="tc-secrets-idle", daemon=True).start()


def _load_engine():
    global _engine, _engine_error, _used
    if _idle_after is not None:
        _used = time.monotonic()
    if _engine is None:
        if current().secrets_engine == "builtin":
            _engine, _engine_error = False, "secrets_engine=builtin"
        else:
            try:
                import kingfisher_sdk as kf
                # medium+high confidence rules; inline `tc:allow-secret` markers honoured by the
                # engine too; no base64 decoding (it flags random binary data, see the runbook).
                rules = kf.Rules(confidence="medium")
                _engine = kf.Scanner(rules, base64=False)
            except Exception as e:  # noqa: BLE001 - any failure means: built-in rules only
                _engine, _engine_error = False, f"{type(e).__name__}: {e}"
        if _idle_after is not None:  # idle counts from the end of a load (~0.3 s, more under load)
            _used = time.monotonic()
    return _engine or None


def rule_cache_dir() -> str:
    """Where the engine keeps its compiled rules: KF_RULE_CACHE_DIR, else the XDG cache directory."""
    s = current()
    return s.kf_rule_cache or os.path.join(s.cache_home or os.path.join(os.path.expanduser("~"), ".cache"),
                                           "kingfisher", "rule-cache")


def rule_cache_missing() -> bool:
    """True when the engine's compiled rules are not in its disk cache yet (a fresh HOME): the
    first scan would compile them (~5 s of CPU). False with the `secrets_engine` setting builtin,
    and where there is no engine to compile them (else every hook on such a machine would hand its
    capture to a worker that cannot build them either)."""
    if current().secrets_engine == "builtin" or _engine is False:
        return False
    try:
        if importlib.util.find_spec("kingfisher_sdk") is None:
            return False
    except (ImportError, ValueError):  # (ValueError: a module set to None in sys.modules)
        return False
    try:
        return not any(n.endswith(".vscdb") for n in os.listdir(rule_cache_dir()))
    except OSError:
        return True


def build_rule_cache() -> bool:
    """Compile the engine's rules into its disk cache now if they are not there: `tc-git setup`,
    the MCP server's start-up (a background thread) and the hook worker a PostToolUse hook hands
    its capture to while they are missing, so no hook compiles them (~5 s of CPU). One builder at
    a time (a lock file in the cache directory: the others wait, then find it built). True if it
    compiled here."""
    if not rule_cache_missing():
        return False
    try:
        import fcntl
    except ImportError:  # (Windows: no lock; a second builder compiles too)
        return _load_engine() is not None
    d = rule_cache_dir()
    os.makedirs(d, mode=0o700, exist_ok=True)
    fd = os.open(os.path.join(d, ".tc-git-build.lock"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        if not rule_cache_missing():  # another process built it while this one waited
            return False
        return _load_engine() is not None
    finally:
        os.close(fd)


def engine_name() -> str:
    eng = _load_engine()
    if eng is None:
        return f"builtin ({_engine_error})"
    import kingfisher_sdk as kf
    return f"kingfisher {kf.__version__}"


def _rule_id(rule_id: str) -> str:
    return rule_id.rsplit(".", 1)[-1].rsplit("/", 1)[-1]


# Start-up guard for short texts (a hook's shell command, a title, a note record): loading the
# engine costs 0.3-2 s (rules from its disk cache; more on a loaded machine), so while it is not
# loaded yet, a text with no credential-shaped token is not handed to it. Provider formats are
# runs of 16+ token characters with digits and letters or mixed case (or a URL with userinfo,
# or a PEM header); runs of hex digits and dashes (commit ids, sha256, UUIDs) count only next
# to a credential word. Timestamps, paths and task ids do not load the engine.
_CANDIDATE = re.compile(rb"[A-Za-z0-9+=_\-~:]{16,}")
_HEXISH = re.compile(rb"[0-9a-fA-F\-]+")
_CRED_HINT = re.compile(rb"(?i)key|token|secret|pass|auth|cred|bearer")
# A run that can count is 16+ token characters other than `=` (runs are split on it below): a
# text without one is let through at C speed (translate + find) before the Python regex walks
# it. A first snapshot asks this of every file until something loads the engine: the regex
# was ~10 % of a 10k-file first save's CPU on source text.
_RUN_CHARS = bytes(1 if chr(c).isascii() and (chr(c).isalnum() or chr(c) in "+_-~:") else 0 for c in range(256))
_RUN16 = b"\1" * 16
_LETTERS = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
_DIGITS = b"0123456789"


def _worth_loading(data: bytes) -> bool:
    if _engine is not None or len(data) > (1 << 20):
        return True
    if b"-----BEGIN" in data or (b"://" in data and b"@" in data):
        return True
    if _RUN16 not in data.translate(_RUN_CHARS):
        return False
    hint = None
    # `key=value` is judged by its value: the note records serialize as `created=<timestamp>`,
    # and the key's letters must not make a timestamp look like a token (0.3 s per CLI save).
    runs = (r for m in _CANDIDATE.finditer(data) for r in m.group(0).split(b"=") if len(r) >= 16)
    for run in runs:
        if _HEXISH.fullmatch(run):
            if hint is None:
                hint = bool(_CRED_HINT.search(data))
            if hint:
                return True
            continue
        letters = len(run) - len(run.translate(None, _LETTERS))
        digits = len(run) - len(run.translate(None, _DIGITS))
        mixed = run.lower() != run and run.upper() != run
        if (digits and letters >= 4) or (mixed and letters >= 16):
            return True
    return False


def _engine_spans(data: bytes, eng):
    """The engine's findings in `data` (`eng`: the loaded engine, None: nothing to do)."""
    if eng is None:
        return
    for f in eng.scan(data):
        if not f.visible:  # components of a composite rule (e.g. an AWS secret without its id)
            continue
        rule, loc = _rule_id(f.rule_id), f.location
        if not _plausible(rule, f, data[loc["start_offset"]:loc["end_offset"]]):
            continue
        yield rule, loc["start_offset"], loc["end_offset"]


_URI_PW = re.compile(rb"://[^:/@\s]*:([^@\s]*)@")
_ADC_VALUES = re.compile(rb'"(?:client_secret|refresh_token|private_key)"\s*:\s*"([^"]*)"')


def _secretish(v: bytes) -> bool:
    """A password that could be real: not a word, a placeholder or kebab-case words."""
    v = re.sub(rb"%([0-9A-Fa-f]{2})", lambda m: bytes([int(m.group(1), 16)]), v)  # p%C3%A4ssword
    if len(v) < 8 or _PLACEHOLDER.search(v) or _WORDY.match(v) or v.isalpha() and len(v) < 20:
        return False
    classes = sum(bool(re.search(p, v)) for p in (rb"[a-z]", rb"[A-Z]", rb"[0-9]", rb"[^A-Za-z0-9]"))
    return classes >= 2 and _entropy(v) >= 3.0


def _plausible(rule: str, f, span: bytes) -> bool:
    """Second look at the engine's generic rules, whose documentation examples
    (`postgres://scott:tiger@localhost`, `amqp://guest:guest@`, ADC files with
    `"client_secret": "secret"`, `-----BEGIN ... KEY-----<key string>-----END`) are not
    credentials. Provider-specific rules are taken as the engine rates them."""
    if rule in ("generic-credential-uri", "mongodb-connection-string") or rule.endswith("-connection-string"):
        pw = (f.captures or {}).get("password") if f is not None else None
        if pw is None:
            m = _URI_PW.search(span)
            pw = m.group(1) if m else span
        return _secretish(pw.encode("utf-8", "surrogatepass") if isinstance(pw, str) else pw)
    if rule == "gcp-application-default-credentials":
        return any(_secretish(v) for v in _ADC_VALUES.findall(span))
    if rule == "private-key":
        return bool(_KEY_MATERIAL.search(span.replace(b"\\n", b"\n")))
    return True


def _line_of(data: bytes, pos: int) -> int:
    return data.count(b"\n", 0, pos) + 1


def _allowed_inline(data: bytes, start: int, end: int) -> bool:
    ls = data.rfind(b"\n", 0, start) + 1
    le = data.find(b"\n", end)
    return ALLOW_MARKER in data[ls:le if le >= 0 else len(data)]


# An AWS access key id is half a credential: its secret key (40 base64 characters) is the other
# half, and in free text (a save title, a prompt: `key AKIA... <secret>`) nothing names it. When a
# key id is found, a secret-shaped token within PAIR_WINDOW bytes of it is a finding too.
_AWS_KEY_ID = re.compile(rb"(?:AKIA|ASIA|ABIA|ACCA)[A-Z2-7]{16}")
_AWS_SECRET = re.compile(rb"(?<![A-Za-z0-9/+])[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=])")
PAIR_WINDOW = 200


def _pairs(data: bytes, spans):
    for _rule, s, e in list(spans):
        if not _AWS_KEY_ID.search(data, s, e):
            continue
        lo = max(0, s - PAIR_WINDOW)
        for m in _AWS_SECRET.finditer(data, lo, min(len(data), e + PAIR_WINDOW)):
            v = m.group()
            # secret-shaped: upper, lower and digits (a git object id or a word run is not)
            if any(c.isupper() for c in v.decode()) and any(c.islower() for c in v.decode()) \
                    and any(c.isdigit() for c in v.decode()):
                yield "aws-secret-access-key", m.start(), m.end()


def find(data: bytes, path: str | None = None, allow=None, wide: bool = False, load: bool = True) -> list[Finding]:
    """Every credential in `data` (all of it: binary or text, any size), engine rules first.
    `allow` is an `Allowlist` (fingerprints from `.tcsecretsignore`) or None. `wide` adds the
    built-in provider rules to the engine's (redaction: a replaced word costs little, while a
    file is left out only for what the engine rates a credential)."""
    if not data:
        return []
    spans = []
    seen = set()
    # the start-up guard once per text (it ran twice: 1 s of a 50k-file first save)
    worth = _worth_loading(data)
    # (load=False: the engine only if this process has it already; else the built-in rules)
    eng = (_load_engine() if load or _engine is not None else None) if worth else True  # True: not needed
    for gen in (_engine_spans(data, eng if worth else None) if eng else (), _builtin(data) if wide or not eng else (),
                _pem(data), _generic(data)):
        for rule, s, e in gen:
            if (s, e) in seen:
                continue
            seen.add((s, e))
            spans.append((rule, s, e))
    if b"A" in data and spans:  # (every AWS key id holds one)
        for rule, s, e in list(_pairs(data, spans)):
            if (s, e) not in seen:
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
    def load(cls, root: str | os.PathLike | None) -> Allowlist:
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


def store_log(store, name: str, line: str) -> None:
    """Append one line to a store's log (`<store>/tc/<name>`: server.log, hooks.log, run.log),
    redacted like a note: a message may echo what the agent passed (a task id, a path, a
    command), and that may be a credential."""
    from ..base.fsutil import store_log as append

    append(store, name, redact_count(line, load=False)[0])  # (a hook must not wait for the engine)


# Texts found clean lately, by every rule (`load`): not scanned again. A save's fields are
# scanned when it starts (`redact_fields`, to say what was replaced) and were scanned again in
# the record its note becomes (`redact_obj`), and the task's name, goal and constraints ride in
# every record. Only texts without a credential are kept: at most CLEAN_KEPT of CLEAN_CHARS each,
# and only while the scanner that judged them is the one loaded (another engine, or none: anew).
_CLEAN: dict[str, None] = {}
_clean_by: Any = None  # the `_engine` the texts of _CLEAN were scanned with
CLEAN_KEPT, CLEAN_CHARS = 512, 4096


def _clean() -> dict[str, None]:
    global _CLEAN, _clean_by
    if _clean_by is not _engine:
        _CLEAN, _clean_by = {}, _engine
    return _CLEAN


def _all_clean(texts: list[str]) -> bool:
    """True when no credential is in `texts`: one scan of those not known clean, which then are."""
    known = _clean()
    new = [t for t in texts if t not in known]
    if new and find("\n".join(new).encode("utf-8", "surrogatepass"), wide=True):
        return False
    known = _clean()  # (the scan may have loaded the engine)
    if len(known) + len(new) > CLEAN_KEPT:
        known.clear()
    for t in new:
        if len(t) <= CLEAN_CHARS:
            known[t] = None
    return True


def redact_count(text: str, load: bool = True) -> tuple[str, list[str]]:
    """`redact_text` plus the rules that fired (for reporting). `load=False`: the engine only if
    it is loaded already, else the built-in rules (provider formats, PEM, assignments)."""
    if not text or not isinstance(text, str) or text in _clean():
        return text, []
    data = text.encode("utf-8", "surrogatepass")
    fs = find(data, wide=True, load=load)
    if not fs:
        if load:
            _all_clean([text])  # (a dict lookup: found clean just now)
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
    known = _clean()

    todo: list[tuple[Any, Any]] = [(value, None)]  # (a value, its key): every string, keys included
    while todo:
        v, key = todo.pop()
        if isinstance(v, str):
            # `KEY=value`, judged as a config line: a value found clean already is so again
            # unless its key names a credential
            keyed = isinstance(key, str) and (v not in known or _key_is_credential(key.encode("utf-8", "replace")))
            strings.append(f"{key}={v}" if keyed else v)
        elif isinstance(v, (list, tuple)):
            todo.extend([(x, None) for x in v])
        elif isinstance(v, dict):
            for k, x in v.items():
                todo.append((k, None))
                todo.append((x, k))
    # one scan of everything first (of what was not found clean lately): most records hold no credential
    if _all_clean(strings):
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
    if _all_clean([x for v in fields.values() for x in (v if isinstance(v, list) else [v]) if isinstance(x, str) and x]):
        return dict(fields), []  # (one scan of them all: most fields hold no credential)
    out, report = {}, []
    for k, v in fields.items():
        red: Any
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
