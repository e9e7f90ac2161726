"""Every setting of tc-git in one place: the only module that reads the environment.

A front end (the CLI, the MCP server, the hooks) reads the environment once (`Settings.from_env`)
and hands the object down: the engine takes it (`Engine(..., settings=)`), and what the engine
gives to the layers below comes from it. Process-wide choices that code far below needs without
an engine at hand (the native path, the workspace write layer, fsync, path rules, the libgit2 and
malloc limits) are read with `current()`: the settings a front end installed (`install`), else the
environment as it is now (code used as a library, and the tests).

Settings come in three kinds:
- user-facing (`USER`): an environment variable each, documented in docs/reference.md's table;
- portability (`PORTABLE`): what other platforms run, forced on this one (`.ci/run` reruns the
  core tests with `TC_NATIVE=off TC_WSFS=paths`);
- knobs for tests and benchmarks: fields only. A test in-process uses `override(field=value)`;
  a process a test spawns gets them through the one test hook, `TC_TEST_SETTINGS`
  (`"field=value,field=value"`).

Standard library only and cheap to import: the hook entry loads it before anything else.
"""
from __future__ import annotations

import contextlib
import os
import sys

TEST_HOOK = "TC_TEST_SETTINGS"


def switch(value: str | None, default: bool) -> bool:
    """The on/off parser of every switch: `off`/`0`/`false`/`no` and `on`/`1`/`true`/`yes`
    (any case, spaces ignored); anything else (unset, empty, unknown) is `default`."""
    v = (value or "").strip().lower()
    if v in ("off", "0", "false", "no"):
        return False
    if v in ("on", "1", "true", "yes"):
        return True
    return default


def _number(kind, value: str | None, default, lo=None):
    try:
        n = kind(value) if value not in (None, "") else default
    except ValueError:
        sys.stderr.write(f"tc-git: ignoring {value!r}: not a number; using {default}\n")
        n = default
    return n if lo is None else max(lo, n)


def _fsync(value: str | None) -> str:
    v = (value or "large").strip().lower()
    return "off" if v in ("0", "off", "false", "no") else "all" if v in ("all", "on", "1", "true", "yes") else "large"


def _one_of(value: str | None, allowed: tuple[str, ...], default: str) -> str:
    v = (value or "").strip().lower()
    return v if v in allowed else default


def _paths(value: str | None) -> tuple[str, ...]:
    return tuple(e.strip() for e in (value or "").split(os.pathsep) if e.strip())


# name: (environment variable or None, default, parser of the variable's text)
USER = {
    "store": ("TC_STORE", None, lambda v: v or None),
    "safe_stores": ("TC_SAFE_STORES", (), _paths),
    "git": ("TC_GIT", True, lambda v: switch(v, True)),
    "watch": ("TC_WATCH", "on", lambda v: "poll" if (v or "").strip().lower() == "poll"
              else "on" if switch(v, True) else "off"),
    "watch_interval": ("TC_WATCH_INTERVAL", 15.0, lambda v: _number(float, v, 15.0, 0.05)),
    "drift_max_wait": ("TC_DRIFT_MAX_WAIT", 60.0, lambda v: _number(float, v, 60.0, 0.05)),
    "lock_timeout": ("TC_LOCK_TIMEOUT", 30.0, lambda v: _number(float, v, 30.0, 0.0)),
    "max_file_bytes": ("TC_MAX_FILE_BYTES", 100 << 20, lambda v: _number(int, v, 100 << 20, 0)),
    "record": ("TC_RECORD", "all", lambda v: _one_of(v, ("off", "tasks", "all"), "all")),
    "fsync": ("TC_RESTORE_FSYNC", "large", _fsync),
    "log_level": ("TC_LOG_LEVEL", "INFO", lambda v: (v or "INFO").strip().upper()),
    "ceilings": ("TC_CEILING_DIRECTORIES", (), _paths),
    "across_filesystems": ("TC_DISCOVERY_ACROSS_FILESYSTEM", False, lambda v: switch(v, False)),
}
PORTABLE = {
    "native": ("TC_NATIVE", True, lambda v: switch(v, True)),
    "wsfs": ("TC_WSFS", "", lambda v: _one_of(v, ("fd", "paths"), "")),
    "path_rules": ("TC_PATH_RULES", "", lambda v: _one_of(v, ("posix", "macos", "windows"), "")),
}
# Where other tools keep their files (their own variables, read here like ours).
OTHERS = {
    "claude_home": ("CLAUDE_CONFIG_DIR", "", lambda v: v or ""),
    "codex_home": ("CODEX_HOME", "", lambda v: v or ""),
    "cache_home": ("XDG_CACHE_HOME", "", lambda v: v or ""),
    "data_home": ("XDG_DATA_HOME", "", lambda v: v or ""),
    "kf_rule_cache": ("KF_RULE_CACHE_DIR", "", lambda v: v or ""),
    "malloc_threshold_set": ("MALLOC_MMAP_THRESHOLD_", False, lambda v: v is not None),
}
# Knobs for tests and benchmarks: (default, type). Not environment variables.
KNOBS = {
    "git_verify": (True, bool),  # the before/after fingerprint of the user's git state
    "secrets_engine": ("kingfisher", str),  # "builtin": only tc-git's own rules
    "secrets_idle": (300.0, float),  # seconds the credential engine stays loaded unused (server)
    "inotify": (True, bool),  # False: watchdog reads change notifications on Linux too
    "exchange": (True, bool),  # False: a restore replaces files by rename, as without renameat2
    "restore_threads": (2, int),  # 1: a restore writes its files on one thread
    "index_delay": (0.05, float),  # seconds a deferred index write waits
    "hook_settle": (0.3, float),  # seconds the hook lets a transcript settle
    "hook_regrow": (1.0, float),  # seconds between the hook's looks at a growing transcript
    "mcp_fast": (True, bool),  # the server's fast first answers (mcp/fast.py)
    "mcp_cache": ("", str),  # its cache directory (default: $XDG_CACHE_HOME/tc-git)
    "libgit2_window_mb": (4, int),  # libgit2's pack window in the server (0: libgit2's own)
    "libgit2_mapped_mb": (8, int),  # its mapped limit
    "libgit2_cache_mb": (0, int),  # its object cache (0: libgit2's own)
    "malloc_mmap_kb": (128, int),  # glibc's mmap threshold, kept fixed in the server (0: glibc's rule)
    "malloc_trim": (True, bool),  # return freed heap to the system after large operations
    "packwriter": (True, bool),  # False: a first snapshot goes through the mempack (or loose objects)
    "savepack": (True, bool),  # False: a save's new objects are written loose
    "mempack": (True, bool),  # False: no in-memory object backend (loose objects instead)
    "mempack_max_bytes": (64 << 20, int),  # a first snapshot up to this size may be one pack from memory
}


def _knob(kind, text: str):
    if kind is bool:
        return switch(text, True)
    return kind(text)


class Settings:
    """One read of the settings. Immutable by convention: `replace` makes a changed copy."""

    __slots__ = tuple(USER) + tuple(PORTABLE) + tuple(OTHERS) + tuple(KNOBS)
    # (the tables above say what each is; a test checks these names against them)
    store: str | None
    safe_stores: tuple[str, ...]
    git: bool
    watch: str
    watch_interval: float
    drift_max_wait: float
    lock_timeout: float
    max_file_bytes: int
    record: str
    fsync: str
    log_level: str
    ceilings: tuple[str, ...]
    across_filesystems: bool
    native: bool
    wsfs: str
    path_rules: str
    claude_home: str
    codex_home: str
    cache_home: str
    data_home: str
    kf_rule_cache: str
    malloc_threshold_set: bool
    git_verify: bool
    secrets_engine: str
    secrets_idle: float
    inotify: bool
    exchange: bool
    restore_threads: int
    index_delay: float
    hook_settle: float
    hook_regrow: float
    mcp_fast: bool
    mcp_cache: str
    libgit2_window_mb: int
    libgit2_mapped_mb: int
    libgit2_cache_mb: int
    malloc_mmap_kb: int
    malloc_trim: bool
    packwriter: bool
    savepack: bool
    mempack: bool
    mempack_max_bytes: int

    def __init__(self, **values):
        for table in (USER, PORTABLE, OTHERS):
            for name, (_var, default, _parse) in table.items():
                object.__setattr__(self, name, values.pop(name, default))
        for name, (default, _kind) in KNOBS.items():
            object.__setattr__(self, name, values.pop(name, default))
        if values:
            raise TypeError(f"unknown settings: {', '.join(sorted(values))}")

    def __setattr__(self, name, value):
        raise AttributeError("Settings are read-only: use replace()")

    def __repr__(self) -> str:
        return "Settings(" + ", ".join(f"{n}={getattr(self, n)!r}" for n in self.__slots__) + ")"

    def __eq__(self, other) -> bool:
        return isinstance(other, Settings) and all(getattr(self, n) == getattr(other, n) for n in self.__slots__)

    __hash__ = None  # type: ignore[assignment]

    def replace(self, **changes) -> Settings:
        return Settings(**{**{n: getattr(self, n) for n in self.__slots__}, **changes})

    @classmethod
    def from_env(cls, env=None) -> Settings:
        """The settings the environment `env` (default: this process's) names."""
        env = os.environ if env is None else env
        values = {}
        for table in (USER, PORTABLE, OTHERS):
            for name, (var, _default, parse) in table.items():
                values[name] = parse(env.get(var))
        for item in (env.get(TEST_HOOK) or "").split(","):
            name, eq, text = item.partition("=")
            name = name.strip()
            if not eq or name not in KNOBS:
                if name:
                    sys.stderr.write(f"tc-git: {TEST_HOOK}: ignoring {item!r}\n")
                continue
            try:
                values[name] = _knob(KNOBS[name][1], text.strip())
            except ValueError:
                sys.stderr.write(f"tc-git: {TEST_HOOK}: ignoring {item!r}\n")
        return cls(**values)

    # Values derived from several settings or from the platform
    @property
    def path_rules_now(self) -> str:
        """The file-system rules the workspace must obey: `path_rules`, else the platform's."""
        if self.path_rules:
            return self.path_rules
        if sys.platform.startswith(("win", "cygwin", "msys")):
            return "windows"
        return "macos" if sys.platform == "darwin" else "posix"


_installed: Settings | None = None


def current() -> Settings:
    """The settings a front end installed, else the environment's as it is now."""
    return _installed if _installed is not None else Settings.from_env()


def install(settings: Settings | None) -> Settings | None:
    """Make `settings` this process's (None: back to reading the environment); returns the
    previous ones. A front end calls it once, with what it read at its start."""
    global _installed
    previous, _installed = _installed, settings
    return previous


@contextlib.contextmanager
def override(**changes):
    """The test hook in-process: the current settings with `changes`, for the block."""
    new = current().replace(**changes)
    previous = install(new)
    try:
        yield new
    finally:
        install(previous)


def child_env(**extra: str) -> dict[str, str]:
    """The environment for a stock git this process runs: ours without `GIT_*` (a caller's
    GIT_DIR or GIT_INDEX_FILE must not redirect it), plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(extra)
    return env


def process_env() -> dict[str, str]:
    """This process's environment as it is, for a program it starts on the user's behalf."""
    return dict(os.environ)
