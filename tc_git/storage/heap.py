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

The `malloc_trim` setting (tc_git/base/settings.py) off disables both.

And libgit2's own memory, once per process (`bound_libgit2`, when the server first loads the
engine): pack files are read through mmap'd windows, and every page touched counts in the
resident size until the window is unmapped; libgit2 unmaps only past `mwindow_mapped_limit`
(8 GiB by default), so an export, import or compress that reads a whole 25 MB pack kept it
resident (measured at 50k files in-process: import peak 137 -> 123 MiB, compress 130 -> 120; an
export maps one window of its one pack and does not change). With 1 GiB windows (libgit2's size)
a pack is one window, which the limit never unmaps while it is read: the server maps 4 MiB
windows under an 8 MiB limit (settings `libgit2_window_mb`, `libgit2_mapped_mb`), so a restore,
an export or a compress that reads a whole 17 MB pack keeps ~8 MiB of it resident, not all of it
(in-process at 50k files: import 160 -> 150 MiB peak, the export after it 162 -> 149, compress
161 -> 146). libgit2 1.9.7's indexer refuses valid packs with small windows in force ("unexpected
data at the end of the pack", 16 KiB-4 MiB windows depending on where objects fall; stock git
verifies them), so every call into an indexer runs with libgit2's own size
(`_native.whole_windows`: PackSink's calls, PackBuilder.write, a fetch or a local push). The
object cache (`cache_max_size`, 256 MiB) made no measurable difference and keeps libgit2's default.
"""
from __future__ import annotations

import gc
import threading
from typing import Any

from ..base.settings import current

_trim: Any = None  # the C function once found; False where there is none
_pending: threading.Thread | None = None  # settle_soon's thread while it runs


def enabled() -> bool:
    return current().malloc_trim


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


SETTLE_PASSES = 3  # collections at most per settle


def settle() -> None:
    """Collect the cycles a call left and give the free pages back.

    Again while a collection found something, up to SETTLE_PASSES: a cycle freed by a weak
    reference's callback during a collection is only found by the next one. A kept store handle
    dropped (handles.drop_idle) is such a chain: collecting it drops scan.py's peer handle from
    its WeakKeyDictionary, and the peer, a cycle too, held ~7 MiB (a 50k-file workspace, what its
    share of the parallel scan left) until the next call's settle, i.e. through the export or
    import that dropped it to make room."""
    if enabled():
        for _ in range(SETTLE_PASSES):
            if not gc.collect():
                break
        trim()


def settle_soon() -> None:
    """`settle()` on a short-lived thread, so a tool call sends its answer without waiting for it.
    One at a time: a call that ends while one runs is covered by it or by the next."""
    global _pending
    if not enabled() or (_pending is not None and _pending.is_alive()):
        return
    _pending = threading.Thread(target=settle, name="tc-heap-settle", daemon=True)
    _pending.start()


M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter (malloc.h)
_tuned: int | None = None


def fix_mmap_threshold() -> int:
    """Keep glibc's mmap threshold at the `malloc_mmap_kb` setting (128: its initial value) for the process's life; returns
    the threshold set (bytes), 0 when glibc's own rule stays (`malloc_mmap_kb` 0, the
    MALLOC_MMAP_THRESHOLD_ tunable given, no glibc).

    glibc raises the threshold to the size of each mmap'd block freed (up to 32 MiB): after the
    first few-MB buffer of a call (an index file, a pack's object list) every later block of
    that size comes from the heap of the thread's arena, where what is freed stays resident
    unless it sits at the top or fills whole pages (malloc_trim returns only those). bench_mcp's
    flow at 50k files, loaded machine: server peak 142-147 MiB fixed (3 runs) against 146-153
    with glibc's rule (2 runs), the import the peak in each. A block
    of 128 KiB or more is then one mmap and one munmap (~10 us with its page faults, a few
    per call at 10k files)."""
    global _tuned
    if _tuned is None:
        s = current()
        kb = max(0, s.malloc_mmap_kb)
        fn = None
        if kb and not s.malloc_threshold_set:
            from . import _native

            fn = _native.mallopt_fn()
        _tuned = kb << 10 if fn is not None and fn(M_MMAP_THRESHOLD, kb << 10) == 1 else 0
    return _tuned


# libgit2's limits, settings `libgit2_mapped_mb` (mmap'd pack windows held at once, 8),
# `libgit2_window_mb` (one pack window outside an indexer, 4; libgit2's: 1 GiB) and
# `libgit2_cache_mb` (its object cache; 0 everywhere: libgit2's default, 256 MiB)
_bounded = False


def bound_libgit2() -> dict:
    """Cap what libgit2 keeps mapped and cached (process-wide; a long-lived server calls it once
    before its first repository). Returns the limits in force (bytes; 0: libgit2's default)."""
    global _bounded
    s = current()
    mapped, cache = max(0, s.libgit2_mapped_mb) << 20, max(0, s.libgit2_cache_mb) << 20
    window = max(0, s.libgit2_window_mb) << 20
    if not _bounded:
        import pygit2

        fix_mmap_threshold()  # (the server's first engine use: before the first large block)

        from . import _native

        if mapped:
            pygit2.settings.mwindow_mapped_limit = mapped
        if window:
            _native.small_windows(window)  # (libgit2's own size again while an indexer runs)
        if cache:
            pygit2.settings.cache_max_size(cache)
        _bounded = True
    return {"mwindow_mapped_limit": mapped, "mwindow_size": window, "cache_max_size": cache}
