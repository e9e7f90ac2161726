"""What a snapshot captures.

Ignore rules come from git itself (the workspace's `.gitignore` files, the user's global
`core.excludesFile`, and the store's `info/exclude`, which holds the defaults below plus the
task's own patterns). Per file, `Policy.classify` then decides: stored, or recorded as metadata
only (sensitive name, credential in content, above the size cap, special file).
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import stat as stat_mod
from dataclasses import dataclass, field

from ..base.errors import BadInput
from ..base.refs import POINTER_FILE, STORE_DIRNAME, TEMP_GLOB
from . import secrets as secrets_mod
from .secrets import sensitive_path

# Always left out (gitignore syntax). Deliberately short: the seed also excluded build/, dist/,
# target/ and backup* at any depth, which silently dropped source directories with those names;
# the workspace's .gitignore says what is a build output.
DEFAULT_EXCLUDES = (
    f"/{STORE_DIRNAME}/", f"/{POINTER_FILE}", ".git/", "node_modules/", "__pycache__/",
    "*.pyc", ".venv/", "venv/", ".tox/", ".mypy_cache/", ".pytest_cache/", ".ruff_cache/",
    ".DS_Store", TEMP_GLOB,
)
DEFAULT_MAX_FILE = 100 << 20


def validate_excludes(patterns) -> list[str]:
    """Accept the seed's single-segment names and gitignore-style patterns; dedupe in order."""
    if patterns is None:
        return []
    if isinstance(patterns, str) or not isinstance(patterns, (list, tuple)):
        raise BadInput("exclude must be a list of patterns, e.g. [\"data\", \"logs/*.log\"]")
    out: list[str] = []
    for raw in patterns:
        if not isinstance(raw, str) or not raw.strip():
            raise BadInput(f"exclude pattern must be a non-empty string: {raw!r}")
        p = raw.strip()
        if "\n" in p or "\r" in p or "\0" in p:
            raise BadInput(f"exclude pattern must be one line: {raw!r}")
        if p.startswith("!"):
            raise BadInput(f"exclude pattern may not re-include ('!'): {raw!r}; remove the '!'")
        if p.startswith("~") or os.path.isabs(p) and not p.startswith("/") or "\\" in p:
            raise BadInput(f"exclude pattern must be relative to the workspace, with '/' separators: {raw!r}")
        segments = [s for s in p.strip("/").split("/")]
        if any(s in (".", "..") for s in segments) or p.strip("/") == "":
            raise BadInput(f"exclude pattern may not contain '.' or '..' segments: {raw!r}")
        if p not in out:
            out.append(p)
    return out


def exclude_file(task_excludes, store_rel: str | None) -> str:
    """The text of the store's info/exclude for a task."""
    lines = ["# written by tc-git: defaults, the store, then the task's exclude patterns"]
    lines += DEFAULT_EXCLUDES
    if store_rel:
        lines.append("/" + store_rel.strip("/") + "/")
    lines += list(task_excludes or ())
    return "\n".join(lines) + "\n"


@dataclass
class Left:
    """A path the snapshot recorded as metadata only."""

    path: str
    why: str  # sensitive | secret | large | nested | special | unreadable
    reason: str
    size: int = 0
    mtime: float = 0.0
    sha256: str | None = None

    def as_dict(self) -> dict:
        d = {"path": self.path, "why": self.why, "reason": self.reason, "size": self.size,
             "mtime": round(self.mtime, 3)}
        if self.sha256:
            d["sha256"] = self.sha256
        return d


@dataclass
class Policy:
    max_file: int = DEFAULT_MAX_FILE
    large_cache: dict = field(default_factory=dict)  # (path,size,mtime_ns,ino) -> sha256
    root: str | None = None  # where `.tcsecretsignore` is read from
    _allow: tuple = (None, None)  # (stat key of the ignore file, Allowlist)
    _held: bool = False  # inside `one_allowlist()`: no stat per scanned file

    def allowlist(self):
        """The workspace's `.tcsecretsignore`, re-read when it changes."""
        if self.root is None:
            return None
        if self._held and self._allow[1] is not None:
            return self._allow[1]
        try:
            st = os.stat(os.path.join(self.root, secrets_mod.IGNORE_FILE))
            key = (st.st_size, st.st_mtime_ns, st.st_ino)
        except OSError:
            key = None
        if self._allow[0] != key or self._allow[1] is None:
            self._allow = (key, secrets_mod.Allowlist.load(self.root) if key else secrets_mod.Allowlist())
        return self._allow[1]

    @contextlib.contextmanager
    def one_allowlist(self):
        """One snapshot checks `.tcsecretsignore` once, not once per file it scans (a stat each:
        ~7% of a first snapshot)."""
        self._held = False
        self.allowlist()
        self._held = True
        try:
            yield
        finally:
            self._held = False

    def classify_path(self, root: str, rel: str, st) -> Left | None:
        """Name, type and size rules from an lstat result; reads no content (except to hash a
        file above the size cap). None means: read the file and ask `classify_content`."""
        if stat_mod.S_ISLNK(st.st_mode):  # stored as links, never followed (the target is scanned as
            why = secrets_mod.path_secret(rel)  # content), unless the link's own name holds a credential
            return Left(rel, "sensitive", why, st.st_size, st.st_mtime) if why else None
        if not stat_mod.S_ISREG(st.st_mode):
            return Left(rel, "special", "not a regular file", st.st_size, st.st_mtime)
        why = sensitive_path(rel)
        if why:
            return Left(rel, "sensitive", why, st.st_size, st.st_mtime)
        if st.st_size > self.max_file:
            return Left(rel, "large", f"larger than {self.max_file} bytes: hashed, not stored",
                        st.st_size, st.st_mtime, self._sha256(os.path.join(root, rel), rel, st))
        return None

    def classify_content(self, rel: str, data: bytes) -> Left | None:
        """Credential scan of exactly the bytes that will be stored (every byte, any size,
        binary or text). The caller hashes/writes the blob from this same buffer."""
        found = secrets_mod.find(data, rel, self.allowlist())
        if found:
            f = found[0]
            more = f" and {len(found) - 1} more" if len(found) > 1 else ""
            return Left(rel, "secret", f"content holds a credential ({f.rule} at line {f.line}{more}); if it is "
                        f"not one, add `{secrets_mod.fingerprint(rel, f)}` to {secrets_mod.IGNORE_FILE} or mark "
                        f"the line tc:allow-secret", len(data))
        return None

    def classify(self, root: str, rel: str) -> Left | None:
        """None to store the file; a `Left` to keep it out of the object database.
        (Convenience wrapper: stat, path rules, one read, content rules.)"""
        full = os.path.join(root, rel)
        try:
            st = os.lstat(full)
        except OSError as e:
            return Left(rel, "unreadable", f"stat failed: {e.strerror}")
        verdict = self.classify_path(root, rel, st)
        if verdict is not None or stat_mod.S_ISLNK(st.st_mode):
            return verdict
        try:
            with open(full, "rb") as f:
                data = f.read()
        except OSError as e:
            return Left(rel, "unreadable", f"read failed: {e.strerror}", st.st_size, st.st_mtime)
        verdict = self.classify_content(rel, data)
        if verdict is not None:
            verdict.size, verdict.mtime = st.st_size, st.st_mtime
        return verdict

    def _sha256(self, full: str, rel: str, st) -> str:
        key = f"{rel}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ino}"
        if key not in self.large_cache:
            h = hashlib.sha256()
            with open(full, "rb") as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    h.update(chunk)
            self.large_cache[key] = h.hexdigest()
        return self.large_cache[key]
