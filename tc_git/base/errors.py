"""Errors an agent or a person can act on. Each message says what to do next.

Front ends map every `TcError` to a clean error result (MCP `isError`, CLI exit 2); anything
else is a bug and is logged with its traceback.

A message names no front end's words. What to do next, when it is another call, is a `Hint`: an
action (one of ACTIONS) with its arguments, that each front end renders in its own words (the MCP
server as a tool call, `tc_restore(at="d0003", apply=true)`; the CLI as a command,
`tc-git restore d0003 --apply`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# the actions a hint may name; both front ends render each (tests/test_mcp_tasks.py checks it)
ACTIONS = ("init", "tasks", "switch", "show", "restore", "undo", "sessions", "resume", "compress", "export",
           "import", "recover")


@dataclass(frozen=True)
class Hint:
    """`lead` (e.g. "list tasks with") then the action with `args` (a dict of the MCP argument names)."""

    action: str
    args: dict[str, Any] = field(default_factory=dict)
    lead: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"action": self.action, "arguments": dict(self.args)}


class TcError(Exception):
    """Base of every expected failure. `code` is a stable machine-readable name; `hints` the next
    calls that help, if any (each front end renders them after the message)."""

    code = "error"

    def __init__(self, message: str, hint: Hint | tuple[Hint, ...] | None = None):
        super().__init__(message)
        self.message = message
        self.hints: tuple[Hint, ...] = (hint,) if isinstance(hint, Hint) else tuple(hint or ())


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
