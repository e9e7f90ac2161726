"""Give what a tool call freed back to the operating system (a long-lived server's resident size).

Two things kept a finished call's memory in the MCP server (measured over bench_mcp.py's
workflow at 50k files: 144 MiB after the first save, 232 MiB before the export, nothing live to
show for it):

* reference cycles: a `pygit2.Repository` is one (it holds `Branches(self)`, `References(self)`...),
  so each call's store handle, with its 50k-entry index and object caches (~26 MiB), lived on
  until Python's next full collection. `settle()` collects; the server freezes what it loaded at
  start (`freeze()`: the SDK's and pydantic's ~90k objects), so that collection looks at the
  call's objects only (~1 ms instead of ~75 ms).
* glibc's malloc keeps freed memory in each thread's arena (the engine runs in worker threads);
  `malloc_trim(0)` returns every free page of every arena (glibc 2.8+: the middle of a heap too,
  not only its top), a few ms with the GIL released. Elsewhere (musl, macOS, Windows) a no-op.

`TC_MALLOC_TRIM=off` disables both.
"""
from __future__ import annotations

import gc
import os
import threading
from typing import Any

_trim: Any = None  # the C function once found; False where there is none
_pending: threading.Thread | None = None  # settle_soon's thread while it runs


def enabled() -> bool:
    return os.environ.get("TC_MALLOC_TRIM", "on").lower() not in ("0", "off", "false", "no")


def trim() -> bool:
    """Return free heap pages to the OS; True if the allocator had something to give back."""
    global _trim
    if _trim is None:
        from . import _native  # (every C call outside pygit2's API lives there)

        _trim = _native.malloc_trim_fn() or False
    return bool(_trim(0)) if _trim else False


def freeze() -> None:
    """Exempt everything alive now (modules, the server, the SDK's models) from collection."""
    if enabled():
        gc.freeze()  # (no collection first: ~75 ms the first tool call would wait for)


def settle() -> None:
    """Collect the cycles a call left and give the free pages back."""
    if enabled():
        gc.collect()
        trim()


def settle_soon() -> None:
    """`settle()` on a short-lived thread, so a tool call sends its answer without waiting for it.
    One at a time: a call that ends while one runs is covered by it or by the next."""
    global _pending
    if not enabled() or (_pending is not None and _pending.is_alive()):
        return
    _pending = threading.Thread(target=settle, name="tc-heap-settle", daemon=True)
    _pending.start()
