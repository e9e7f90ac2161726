"""Errors an agent or a person can act on. Each message says what to do next.

Front ends map every `TcError` to a clean error result (MCP `isError`, CLI exit 2); anything
else is a bug and is logged with its traceback.
"""
from __future__ import annotations


class TcError(Exception):
    """Base of every expected failure. `code` is a stable machine-readable name."""

    code = "error"

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


class BadInput(TcError):
    code = "bad_input"


class NotFound(TcError):
    code = "not_found"


class TaskClosed(TcError):
    code = "task_closed"


class UnsafeRoot(BadInput):
    """A workspace root or store location refused by the trust rules (a kind of bad input)."""

    code = "unsafe_root"


class UntrustedStore(UnsafeRoot):
    """A store or pointer file another user owns, or that others can write (discover.untrusted):
    never read or written unless the user lists it in TC_SAFE_STORES."""

    code = "untrusted_store"

    def __init__(self, message: str, path: str = "", workspace: str | None = None):
        super().__init__(message)
        self.path, self.workspace = path, workspace


class StoreBusy(TcError):
    code = "store_busy"


class Conflict(TcError):
    code = "conflict"


class Unavailable(TcError):
    code = "unavailable"
