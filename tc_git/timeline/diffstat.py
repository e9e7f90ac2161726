"""`git diff --stat`, byte for byte: git's show_stats() (diff.c) on a pygit2 diff.

libgit2's own stat formatter differs from git's (`1 +-` where git prints `1 +`, other widths,
no `{a => b}` renames), so people comparing the two would see different numbers for the same
commits. Widths follow git: $COLUMNS, else the terminal of stdout, else 80 columns.
"""
from __future__ import annotations

import shutil
import unicodedata

import pygit2


def _width(s: str) -> int:
    """Display columns (git's utf8_strwidth: wide East Asian characters count 2)."""
    return sum(0 if unicodedata.combining(c) else 2 if unicodedata.east_asian_width(c) in "WF" else 1
               for c in s)


def _term_columns() -> int:
    return shutil.get_terminal_size((80, 24)).columns or 80  # $COLUMNS, else the terminal, else 80


def _pprint_rename(a: str, b: str) -> str:
    """git's pprint_rename: `common/{old => new}/rest`, or `old => new`."""
    pfx = 0
    # common prefix, up to and including the last '/' in it
    i = 0
    while i < len(a) and i < len(b) and a[i] == b[i]:
        if a[i] == "/":
            pfx = i + 1
        i += 1
    # common suffix, starting at a '/'
    sfx = 0
    pa, pb = len(a) - 1, len(b) - 1
    while pfx <= pa and pfx <= pb and a[pa] == b[pb]:
        if a[pa] == "/":
            sfx = len(a) - pa
        pa -= 1
        pb -= 1
    a_mid = len(a) - pfx - sfx
    b_mid = len(b) - pfx - sfx
    if a_mid < 0:
        a_mid = 0
    if b_mid < 0:
        b_mid = 0
    if pfx + sfx:
        return f"{a[:pfx]}{{{a[pfx:pfx + a_mid]} => {b[pfx:pfx + b_mid]}}}{a[len(a) - sfx:]}"
    return f"{a} => {b}"


_ESC = {0x07: "a", 0x08: "b", 0x09: "t", 0x0A: "n", 0x0B: "v", 0x0C: "f", 0x0D: "r", 0x22: '"', 0x5C: "\\"}


def _quote(path: str) -> str | None:
    """git's quote_c_style with core.quotePath on: None when the name needs no quoting."""
    raw = path.encode("utf-8", "surrogateescape")
    if not any(b < 0x20 or b >= 0x7F or b in (0x22, 0x5C) for b in raw):
        return None
    out = []
    for b in raw:
        if b in _ESC:
            out.append("\\" + _ESC[b])
        elif b < 0x20 or b >= 0x7F:
            out.append(f"\\{b:03o}")
        else:
            out.append(chr(b))
    return '"' + "".join(out) + '"'


def _print_name(old: str, new: str, renamed: bool) -> str:
    if not renamed:
        return _quote(new) or new
    qa, qb = _quote(old), _quote(new)
    if qa or qb:
        return f"{qa or old} => {qb or new}"
    return _pprint_rename(old, new)


def _decimal_width(n: int) -> int:
    return len(str(n))


def _scale_linear(it: int, width: int, max_change: int) -> int:
    if not it:
        return 0
    return 1 + (it * (width - 1) // max_change)


def stat(diff: pygit2.Diff, width: int | None = None, keep: list[str] | None = None) -> str:
    """The text `git diff --stat` prints for `diff` (renames found as git does by default);
    `keep`: only files at or under those paths (`git diff --stat -- <path>`)."""
    diff.find_similar()
    files = []
    for patch in diff:
        if patch is None:  # (pygit2 types it Optional; a diff's patches are never None)
            continue
        d = patch.delta
        old, new = d.old_file.path, d.new_file.path
        if keep is not None and not any(p == k or p.startswith(k + "/") for p in (old, new) for k in keep):
            continue
        name = _print_name(old, new or old, d.status_char() in ("R", "C") and old != new)
        if d.is_binary:
            # git's "Bin <old size> -> <new size> bytes"; same contents (a pure rename): "Bin"
            same = d.old_file.id == d.new_file.id
            files.append((name, True, 0 if same else d.new_file.size, 0 if same else d.old_file.size))
        else:
            _ctx, add, dele = patch.line_stats
            files.append((name, False, add, dele))
    if not files:
        return ""
    max_len = max_change = number_width = bin_width = 0
    for name, binary, add, dele in files:
        max_len = max(max_len, _width(name))
        if binary:
            bin_width = max(bin_width, 14 + _decimal_width(add) + _decimal_width(dele))
            number_width = 3
            continue
        max_change = max(max_change, add + dele)
    width = width or _term_columns()
    number_width = max(_decimal_width(max_change), number_width)
    if width < 16 + 6 + number_width:
        width = 16 + 6 + number_width
    graph_width = max_change if max_change + 4 > bin_width else bin_width - 4
    name_width = max_len
    if name_width + number_width + 6 + graph_width > width:
        if graph_width > width * 3 // 8 - number_width - 6:
            graph_width = width * 3 // 8 - number_width - 6
            if graph_width < 6:
                graph_width = 6
        if name_width > width - number_width - 6 - graph_width:
            name_width = width - number_width - 6 - graph_width
        else:
            graph_width = width - number_width - 6 - name_width
    out = []
    adds = dels = 0
    for name, binary, added, deleted in files:
        prefix = ""
        length = name_width
        shown = name
        if name_width < _width(name):
            prefix = "..."
            length = max(0, length - 3)
            while _width(shown) > length:
                shown = shown[1:]
            slash = shown.find("/")
            if slash >= 0:
                shown = shown[slash:]
        padding = max(0, length - _width(shown))
        if binary:
            line = f" {prefix}{shown}{' ' * padding} | {'Bin':>{number_width}}"
            if added or deleted:
                line += f" {deleted} -> {added} bytes"
            out.append(line)
            continue
        adds += added
        dels += deleted
        add, dele = added, deleted
        if graph_width <= max_change:
            total = _scale_linear(add + dele, graph_width, max_change)
            if total < 2 and add and dele:
                total = 2
            if add < dele:
                add = _scale_linear(add, graph_width, max_change)
                dele = total - add
            else:
                dele = _scale_linear(dele, graph_width, max_change)
                add = total - dele
        n = added + deleted
        out.append(f" {prefix}{shown}{' ' * padding} | {n:>{number_width}}{' ' if n else ''}{'+' * add}{'-' * dele}")
    nfiles = len(files)
    s = f" {nfiles} file{'s' if nfiles != 1 else ''} changed"
    if adds or dels == 0:
        s += f", {adds} insertion{'s' if adds != 1 else ''}(+)"
    if dels or adds == 0:
        s += f", {dels} deletion{'s' if dels != 1 else ''}(-)"
    out.append(s)
    return "\n".join(out) + "\n"
