"""`tc view`: one self-contained HTML page of a task's code timeline and its conversations.

The page works offline from disk: inline CSS and JS, no external asset, and a Content Security
Policy (`default-src 'none'`) so nothing it shows can make a request. Data travels as JSON in
`<script type="application/json">` elements (every `<` escaped as `\\u003c`, so no text can close
the element) and the DOM is built with `textContent` only, so a message saying `<script>` is shown
as text. Diffs are embedded one element each and parsed only when opened, which keeps a 2,000-step
task fast to open; every diff, message and tool output is capped, and all diffs share one budget,
so the file size is bounded. Everything shown passes through `redact_text` first.
"""
from __future__ import annotations

import base64
import hashlib
import html
import json
import time
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import pygit2

from ..base.refs import EMPTY_TREE, SESSIONS_PREFIX
from ..workspace.secrets import redact_text
from .chain import Notes, Timeline, entry_of, parse_trailers, read_note

CSP = "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:"


@dataclass
class Limits:
    """Caps that bound the page's size whatever the history holds."""

    diff_chars: int = 48_000  # one entry's diff (all files)
    diff_line: int = 400  # one diff line
    diff_files: int = 200  # files listed in one diff
    diff_budget: int = 16_000_000  # all diffs of the page together
    text: int = 20_000  # one message / conclusion
    tool_io: int = 16_000  # one tool input or output
    event_budget: int = 24_000_000  # all event texts of the page together
    files_listed: int = 200  # paths in one entry's "files changed"


@dataclass
class _Budget:
    left: int
    spent_out: bool = False

    def take(self, n: int) -> bool:
        if n > self.left:
            self.spent_out = True
            return False
        self.left -= n
        return True


def _excerpt(s, limit: int) -> tuple[str, int]:
    """Redacted text cut to `limit` characters; returns (text, full length or 0 when whole)."""
    if s is None:
        return "", 0
    if not isinstance(s, str):
        s = json.dumps(s, ensure_ascii=False, indent=1, sort_keys=True)
    n = len(s)
    if n > limit:
        return redact_text(s[:limit]), n
    return redact_text(s), 0


def _red(s) -> str:
    return redact_text(s) if isinstance(s, str) and s else (s or "")


# ---------------------------------------------------------------------------------- milestones
@dataclass
class Milestone:
    name: str
    event: str  # event commit (hex)
    code: str | None = None  # code timeline commit (hex)
    task: str | None = None
    step: str | None = None  # "s0003" / "d0002"
    note: dict = field(default_factory=dict)


def _note(repo: pygit2.Repository, oid, notes: Notes | None = None) -> dict:
    return notes.get(oid) if notes is not None else read_note(repo, oid)


def _code_point(repo: pygit2.Repository, hexid: str) -> tuple[str | None, str | None]:
    """(task id, entry id) of a code timeline commit, from its trailers."""
    try:
        c = repo[hexid].peel(pygit2.Commit)
    except (KeyError, ValueError, pygit2.GitError):
        return None, None
    e = entry_of(c)
    if e is None:
        return None, None
    t = parse_trailers(c.message)
    return t.get("Tc-Task", [None])[0], e.id


def milestones(repo: pygit2.Repository) -> list[Milestone]:
    """Every milestone with the code commit it names (through the trajectory layer's notes)."""
    from ..trajectory.milestones import list_milestones

    out = []
    for tm in list_milestones(repo):
        out.append(Milestone(name=tm.name, event=tm.event, code=tm.code_commit,
                             note={"title": tm.message, "session": tm.session}))
    for m in out:
        if m.code:
            try:
                m.code = str(repo[m.code].peel(pygit2.Commit).id)
            except (KeyError, ValueError, pygit2.GitError):
                pass
            m.task, m.step = _code_point(repo, m.code)
    return out


def _event_code(repo: pygit2.Repository, oid, notes: Notes | None = None) -> str | None:
    """The code commit an event's note links (`trajectory.code_commit`), if any."""
    part = _note(repo, oid, notes).get("trajectory")
    code = part.get("code_commit") if isinstance(part, dict) else None
    return code if isinstance(code, str) else None


# ---------------------------------------------------------------------------------- diffs
_ORIGIN = {" ": " ", "+": "+", "-": "-", "=": "\\", ">": "\\", "<": "\\"}


def diff_data(repo: pygit2.Repository, old_tree, new_tree, lim: Limits, budget: _Budget) -> dict:
    """A compact, capped diff: {"f": [{"p", "o"?, "s", "b"?, "l": [lines]}], "tr"?, "om"?, "a", "d"}.
    Lines start with their origin (' ', '+', '-', '\\\\') or are hunk headers ('@@ ...')."""
    d = repo.diff(old_tree, new_tree, context_lines=3)
    if len(d) <= 200:
        d.find_similar()
    files, used, truncated = [], 0, False
    adds = dels = 0
    n = len(d)
    for i, patch in enumerate(d):
        if i >= lim.diff_files or used >= lim.diff_chars:
            truncated = True
            break
        delta = patch.delta
        f = {"p": _red(delta.new_file.path or delta.old_file.path), "s": delta.status_char()}
        if delta.old_file.path and delta.old_file.path != delta.new_file.path:
            f["o"] = _red(delta.old_file.path)
        if delta.is_binary:
            f["b"] = 1
            files.append(f)
            continue
        lines, cut = [], 0
        for h in patch.hunks:
            if used >= lim.diff_chars:
                cut += sum(1 for _ in h.lines) + 1
                continue
            hunk = [h.header.rstrip("\n")]
            for ln in h.lines:
                o = _ORIGIN.get(ln.origin)
                if o is None:
                    continue
                if o == "+":
                    adds += 1
                elif o == "-":
                    dels += 1
                text = ln.content.rstrip("\n") if o != "\\" else "No newline at end of file"
                if len(text) > lim.diff_line:
                    text = text[: lim.diff_line] + " …"
                hunk.append(o + text)
            size = sum(len(x) + 4 for x in hunk)
            if used + size > lim.diff_chars:
                keep = []
                for x in hunk:
                    if used + len(x) + 4 > lim.diff_chars:
                        break
                    keep.append(x)
                    used += len(x) + 4
                cut += len(hunk) - len(keep)
                hunk = keep
            else:
                used += size
            lines.extend(hunk)
        if lines:
            f["l"] = redact_text("\n".join(lines)).split("\n")
        if cut:
            f["x"] = cut
            truncated = True
        files.append(f)
    out = {"f": files, "a": adds, "d": dels}
    if truncated:
        out["tr"] = 1
    if n > len(files):
        out["om"] = n - len(files)
    if not budget.take(used + 64 * len(files)):
        return {"f": [{"p": f["p"], "s": f["s"]} for f in files], "budget": 1, "om": out.get("om", 0),
                "a": adds, "d": dels}
    return out


# ---------------------------------------------------------------------------------- task data
def task_data(repo: pygit2.Repository, task_id: str, lim: Limits, budget: _Budget, diffs: list,
              ms_by_code: dict[str, list[str]], active: str | None = None, notes: Notes | None = None) -> dict:
    tl = Timeline(repo, task_id)
    chain = list(tl.walk())
    chain.reverse()
    head = tl.head()
    task = head.record.get("task") or {"id": task_id}
    status = "closed" if head.kind == "close" else ("open" if active == task_id else "suspended")
    entries = []
    empty = repo[EMPTY_TREE] if EMPTY_TREE in repo else repo[repo.TreeBuilder().write()]
    prev_tree = None
    for e in chain:
        r = (notes.get(e.oid) if notes is not None else None) or tl.record(e.oid)
        c = repo[e.oid].peel(pygit2.Commit)
        hexid = str(e.oid)
        ent = {"k": e.kind, "id": e.id, "n": e.step, "ts": e.time, "cm": hexid,
               "t": _excerpt(r.get("title") or e.title, 500)[0]}
        for key, short in (("conclusion", "c"), ("description", "de"), ("next", "nx")):
            if r.get(key):
                ent[short] = _excerpt(r[key], lim.text)[0]
        if r.get("verified"):
            ent["v"] = [_excerpt(v, 2000)[0] for v in r["verified"][:100]]
        if r.get("open_questions"):
            ent["q"] = [_excerpt(v, 2000)[0] for v in r["open_questions"][:100]]
        if isinstance(r.get("target"), dict):
            ent["tg"] = r["target"].get("id")
        if r.get("undo"):
            ent["ud"] = r["undo"]
        if r.get("restore_point"):
            ent["rp"] = 1
        if r.get("trajectory"):
            ent["tr"] = str(r["trajectory"])
        if r.get("agent") or r.get("session"):
            ent["by"] = _red(" ".join(str(x) for x in (r.get("agent"), r.get("session")) if x))
        ch = r.get("changed") or {}
        if ch.get("count"):
            ent["fc"] = ch["count"]
            ent["fl"] = [[f.get("status", "?"), _red(f.get("path", ""))] for f in (ch.get("files") or [])
                         [: lim.files_listed]]
        left = (r.get("files") or {}).get("left") if isinstance(r.get("files"), dict) else None
        if left:
            ent["lf"] = [[_red(x.get("path", "")), x.get("why", "")] for x in left[:50] if isinstance(x, dict)]
        if hexid in ms_by_code:
            ent["ms"] = ms_by_code[hexid]
        if e.kind != "init":
            old = prev_tree if prev_tree is not None else empty
            if old.id != c.tree_id:
                dd = diff_data(repo, old, c.tree, lim, budget)
                if dd["f"]:
                    ent["d"] = len(diffs)
                    ent["da"], ent["dd"] = dd.get("a", 0), dd.get("d", 0)
                    diffs.append(dd)
        prev_tree = c.tree
        entries.append(ent)
    return {"id": task_id, "name": _red(task.get("name", "")), "goal": _excerpt(task.get("goal", ""), lim.text)[0],
            "constraints": _excerpt(task.get("constraints", ""), lim.text)[0], "status": status,
            "head": head.step, "entries": entries,
            "lines": [[_red(name), str(tip), _red(entry_title(repo, tip))] for name, tip in tl.lines()]}


def entry_title(repo: pygit2.Repository, oid) -> str:
    """The first line of a commit's message (a line's newest point)."""
    return repo[oid].peel(pygit2.Commit).message.split("\n", 1)[0]


# ---------------------------------------------------------------------------------- session data
def session_keys(repo: pygit2.Repository) -> list[str]:
    keys = set()
    for r in repo.references:
        if r.startswith(SESSIONS_PREFIX):
            rest = r[len(SESSIONS_PREFIX):]
            if "/" in rest:
                keys.add(rest.split("/", 1)[0])
    return sorted(keys)


def _blob(tree: pygit2.Tree, path: str) -> pygit2.Blob:
    """The blob at `path`; KeyError when it is missing or not a blob."""
    obj = tree[path]
    if not isinstance(obj, pygit2.Blob):
        raise KeyError(path)
    return obj


def _read_event(repo: pygit2.Repository, c: pygit2.Commit, lim: Limits) -> dict:
    """event.json plus capped large fields (stored as their own blobs by the recorder)."""
    tree = c.tree
    try:
        rec = json.loads(_blob(tree, "event.json").data)
    except (KeyError, ValueError):
        return {"kind": "system", "text": c.message.strip()}
    for fld, info in (rec.pop("blobs", None) or {}).items():
        try:
            data = _blob(tree, info["path"]).data
        except (KeyError, TypeError):
            continue
        cap = lim.text if fld == "text" else lim.tool_io
        text = data[: cap * 4].decode("utf-8", "replace")
        rec[fld] = text
        rec.setdefault("_full", {})[fld] = info.get("bytes", len(data))
    return rec


def _tool_summary(value) -> str:
    if isinstance(value, dict):
        for k in ("command", "cmd", "file_path", "path", "pattern", "query", "url", "description", "prompt"):
            if isinstance(value.get(k), str):
                return value[k]
        return json.dumps(value, ensure_ascii=False, sort_keys=True)
    if isinstance(value, str):
        return value
    return "" if value is None else json.dumps(value, ensure_ascii=False)


def session_data(repo: pygit2.Repository, key: str, lim: Limits, budget: _Budget,
                 ms_by_event: dict[str, list[str]], notes: Notes | None = None) -> dict:
    prefix = f"{SESSIONS_PREFIX}{key}/"
    tips: dict[str, str] = {}
    for r in sorted(repo.references):
        if r.startswith(prefix):
            try:
                tips[r[len(prefix):]] = str(repo.references[r].peel(pygit2.Commit).id)
            except (KeyError, ValueError, pygit2.GitError):
                continue
    # every event reachable from a tip (parents stay inside the session by construction)
    commits: dict[str, pygit2.Commit] = {}
    parent: dict[str, str | None] = {}
    stack = list(tips.values())
    while stack:
        h = stack.pop()
        if h in commits:
            continue
        c = repo[h].peel(pygit2.Commit)
        commits[h] = c
        p = str(c.parent_ids[0]) if c.parent_ids else None
        parent[h] = p
        if p and p not in commits:
            stack.append(p)
    children: dict[str | None, list[str]] = {}
    for h, p in parent.items():
        children.setdefault(p, []).append(h)
    tips_at: dict[str, list[str]] = {}
    for name, h in tips.items():
        tips_at.setdefault(h, []).append(name)
    # branches whose tip is in each subtree (post-order without recursion)
    order: list[str] = []
    post = [(r, False) for r in sorted(children.get(None, []), key=lambda h: commits[h].commit_time)]
    while post:
        h, done = post.pop()
        if done:
            order.append(h)
            continue
        post.append((h, True))
        post.extend((k, False) for k in children.get(h, []))
    below: dict[str, frozenset] = {}
    last: dict[str, int] = {}
    for h in order:
        s = set(tips_at.get(h, ()))
        t = commits[h].commit_time
        for k in children.get(h, ()):
            s |= below[k]
            t = max(t, last[k])
        below[h], last[h] = frozenset(s), t

    def pick(names) -> str:
        names = sorted(names, key=lambda n: (n != "main", n))
        return names[0] if names else "?"

    # depth-first order: at a fork the child carrying the current branch comes last, at the
    # same depth; the others come first, one level deeper, each as a foldable block
    rows: list[tuple[str, int, str, str | None]] = []  # (commit, depth, branch, fork label)
    ends: dict[int, int] = {}
    roots = sorted(children.get(None, []), key=lambda h: (("main" not in below[h]), commits[h].commit_time))
    work: list[tuple[Any, ...]] = [(h, 0, pick(below[h]), None) for h in reversed(roots)]
    # each work item: (commit, depth, branch, fork-label) ; ("END", row index) closes a block
    while work:
        item = work.pop()
        if item[0] == "END":
            ends[item[1]] = len(rows)
            continue
        h, depth, branch, label = item
        if label is not None:
            work.append(("END", len(rows)))
        rows.append((h, depth, branch, label))
        kids = children.get(h, [])
        if not kids:
            continue
        carrying = [k for k in kids if branch in below[k]]
        main_kid = carrying[0] if carrying else max(kids, key=lambda k: last[k])
        others = sorted((k for k in kids if k != main_kid), key=lambda k: commits[k].commit_time)
        work.append((main_kid, depth, branch, None))
        for k in reversed(others):
            work.append((k, depth + 1, pick(below[k]), pick(below[k])))
    index = {h: i for i, (h, *_r) in enumerate(rows)}
    events = []
    title = None
    code_points: dict[str, tuple] = {}
    for i, (h, depth, _branch, label) in enumerate(rows):
        c = commits[h]
        rec = _read_event(repo, c, lim)
        kind = rec.get("kind", "system")
        ev = {"k": kind, "c": h, "ts": rec.get("timestamp") or c.commit_time}
        if depth:
            ev["dp"] = depth
        p = parent[h]
        if p is not None and index.get(p, i - 1) != i - 1:
            ev["pi"] = index[p]  # parent is not the row above: say where it is
        if label is not None:
            ev["fk"] = {"br": label, "end": ends.get(i, len(rows)), "from": index.get(p) if p else None}
        if h in tips_at:
            ev["tip"] = sorted(tips_at[h])
        if h in ms_by_event:
            ev["ms"] = ms_by_event[h]
        code = _event_code(repo, h, notes)
        if code:
            if code not in code_points:
                code_points[code] = _code_point(repo, code)
            ev["cd"] = {"c": code, "t": code_points[code][0], "s": code_points[code][1]}
        full = rec.get("_full") or {}
        size = 0
        if rec.get("text"):
            ev["x"], n = _excerpt(rec["text"], lim.text)
            if n or "text" in full:
                ev["xn"] = full.get("text", n)
            size += len(ev["x"])
            if title is None and kind == "user":
                title = ev["x"][:120]
        if rec.get("tool_name"):
            ev["tn"] = _red(str(rec["tool_name"]))
        if rec.get("tool_input") is not None:
            ev["ts1"] = _excerpt(_tool_summary(rec["tool_input"]).split("\n", 1)[0], 300)[0]
            inp = rec["tool_input"]
            if isinstance(inp, dict) and len(inp) == 1 and next(iter(inp.values())) == ev["ts1"]:
                inp = None  # the one-line summary says it all
        if rec.get("tool_input") is not None and inp is not None:
            ev["ti"], n = _excerpt(inp, lim.tool_io)
            if n or "tool_input" in full:
                ev["tin"] = full.get("tool_input", n)
            size += len(ev["ti"])
        if rec.get("tool_output") is not None:
            ev["to"], n = _excerpt(rec["tool_output"], lim.tool_io)
            if n or "tool_output" in full:
                ev["ton"] = full.get("tool_output", n)
            size += len(ev["to"])
        if rec.get("is_error"):
            ev["err"] = 1
        if rec.get("sidechain") or rec.get("agent_id"):
            ev["sc"] = _red(str(rec.get("agent_id") or "sidechain"))
        if not budget.take(size):
            for k in ("x", "ti", "to"):
                if k in ev:
                    ev[k] = ev[k][:200]
                    ev[k + "n"] = -1  # cut, total unknown to the page
        events.append(ev)
    agent, _, sid = key.partition("-")
    return {"key": key, "agent": agent, "session": sid, "title": _red(title or ""),
            "branches": [{"name": n, "tip": h, "row": index.get(h)} for n, h in
                         sorted(tips.items(), key=lambda kv: (kv[0] != "main", kv[0]))],
            "events": events}


# ---------------------------------------------------------------------------------- page
def _asset(name: str) -> str:
    return resources.files("tc_git").joinpath("data", "view", name).read_text(encoding="utf-8")


def _json_script(elem_id: str, value) -> str:
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    # `<` never appears raw, so neither `</script` nor `<!--` can end or confuse the element;
    # U+2028/9 are valid JSON but some tools treat them as line ends.
    text = text.replace("<", "\\u003c").replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")
    return f'<script type="application/json" id="{elem_id}">{text}</script>\n'


# First thing in <head>: count CSP violations (a blocked request) into the DOM, for tests and
# for anyone who wonders whether the page tried to reach out.
WATCH_JS = ('(function(){var n=0;document.addEventListener("securitypolicyviolation",function(){n++;'
            'document.documentElement.setAttribute("data-csp-violations",String(n));});})();')


def render_html(page: dict, diffs: list) -> str:
    css = _asset("view.css")
    js = _asset("view.js")
    hashes = " ".join(f"'sha256-{base64.b64encode(hashlib.sha256(x.encode('utf-8')).digest()).decode()}'"
                      for x in (WATCH_JS, js))
    # The hashes pin the two scripts the page runs: browsers that know hashes then ignore
    # 'unsafe-inline', so even markup that slipped past escaping could not execute.
    csp = (f"default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline' {hashes}; "
           "img-src data:; base-uri 'none'; form-action 'none'")
    title = html.escape(page.get("title") or "tc-git view", quote=True)
    parts = [
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n",
        f'<meta http-equiv="Content-Security-Policy" content="{html.escape(csp, quote=True)}">\n',
        '<meta name="referrer" content="no-referrer">\n',
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n',
        '<meta name="color-scheme" content="light dark">\n',
        '<link rel="icon" href="data:,">\n',
        f"<title>{title}</title>\n<style>{css}</style>\n<script>{WATCH_JS}</script>\n</head>\n<body>\n",
        '<header id="top"><div class="bar"><strong class="brand">tc view</strong>'
        '<input id="q" type="search" placeholder="Search (/)" aria-label="Search" autocomplete="off">'
        '<span id="count" aria-live="polite"></span></div><nav id="nav"></nav></header>\n',
        '<main id="app"><noscript>This page builds its view with JavaScript; the data is in the '
        'script elements of its source.</noscript></main>\n',
        '<footer id="help">j/k or ↓/↑ move · Enter or o opens · / search · Esc clears · g/G first/last</footer>\n',
        _json_script("tc-data", page),
    ]
    parts += [_json_script(f"tc-diff-{i}", d) for i, d in enumerate(diffs)]
    parts.append(f"<script>{js}</script>\n</body></html>\n")
    return "".join(parts)


def build(repo: pygit2.Repository, task_ids: list[str], session_ids: list[str],
          active: str | None = None, lim: Limits | None = None,
          more: tuple[tuple[pygit2.Repository, list[str], str], ...] = ()) -> tuple[str, dict]:
    """The page for these tasks and sessions; returns (html, summary). `more`: sessions of other
    stores, (repository, session keys, store label): each is read with its own store's notes and
    milestones and marked with its label (`store`)."""
    lim = lim or Limits()
    t0 = time.monotonic()
    ms = milestones(repo)
    ms_by_code: dict[str, list[str]] = {}
    ms_by_event: dict[str, list[str]] = {}
    for m in ms:
        ms_by_event.setdefault(m.event, []).append(m.name)
        if m.code:
            ms_by_code.setdefault(m.code, []).append(m.name)
    diffs: list = []
    dbudget, ebudget = _Budget(lim.diff_budget), _Budget(lim.event_budget)
    notes = Notes(repo)
    tasks = [task_data(repo, t, lim, dbudget, diffs, ms_by_code, active, notes) for t in task_ids]
    sessions = [session_data(repo, s, lim, ebudget, ms_by_event, notes) for s in session_ids]
    for other, keys, label in more:
        if not keys:
            continue
        oms = milestones(other)
        ms += oms
        by_event: dict[str, list[str]] = {}
        for m in oms:
            by_event.setdefault(m.event, []).append(m.name)
        onotes = Notes(other)
        sessions += [dict(session_data(other, k, lim, ebudget, by_event, onotes), store=label) for k in keys]
    shown_events = {ev["c"] for s in sessions for ev in s["events"]}
    page = {
        "generated": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "tasks": tasks, "sessions": sessions,
        "milestones": [{"name": _red(m.name), "event": m.event, "code": m.code, "task": m.task,
                        "step": m.step, "shown": m.event in shown_events,
                        "title": _excerpt(m.note.get("title") or m.note.get("description") or "", 500)[0]}
                       for m in ms if m.event in shown_events or (m.task in task_ids)],
        "budget": {"diffs": dbudget.spent_out, "events": ebudget.spent_out},
    }
    names = [t["name"] or t["id"] for t in tasks] + [s["title"][:40] or s["key"] for s in sessions]
    page["title"] = "tc-git view: " + ", ".join(names[:3]) if names else "tc-git view"
    text = render_html(page, diffs)
    summary = {"tasks": [t["id"] for t in tasks], "sessions": [s["key"] for s in sessions],
               "entries": sum(len(t["entries"]) for t in tasks),
               "events": sum(len(s["events"]) for s in sessions), "diffs": len(diffs),
               "bytes": len(text.encode("utf-8", "replace")), "seconds": round(time.monotonic() - t0, 3),
               "truncated": page["budget"]}
    return text, summary


def resolve_session(repo: pygit2.Repository, ident: str, keys: list[str] | None = None) -> str:
    """The session key `ident` names among `keys` (default: every session of `repo`)."""
    from ..base.errors import NotFound

    keys = session_keys(repo) if keys is None else keys
    if ident in keys:
        return ident
    hits = [k for k in keys if k.endswith("-" + ident) or k.split("-", 1)[-1].startswith(ident)]
    if len(hits) == 1:
        return hits[0]
    if not hits:
        raise NotFound(f"no recorded session matches {ident!r}: known sessions: {', '.join(keys[:20]) or 'none'}")
    raise NotFound(f"{ident!r} matches several sessions: {', '.join(hits[:20])}; give more of the id")


def linked_sessions(repo: pygit2.Repository, task_ids: list[str]) -> list[str]:
    """Sessions a task links to: its milestones and the Tc-Trajectory of its steps."""
    want: set[str] = set()
    for m in milestones(repo):
        if m.task in task_ids:
            want.add(m.event)
    for t in task_ids:
        for e in Timeline(repo, t).walk():
            tr = parse_trailers(repo[e.oid].peel(pygit2.Commit).message).get("Tc-Trajectory")
            if tr:
                want.add(tr[0])
    if not want:
        return []
    out = []
    for key in session_keys(repo):
        prefix = f"{SESSIONS_PREFIX}{key}/"
        for r in repo.references:
            if not r.startswith(prefix):
                continue
            tip = repo.references[r].target
            if any(str(tip) == w or _reachable(repo, tip, w) for w in want):
                out.append(key)
                break
    return out


def _reachable(repo, tip, hexid: str) -> bool:
    try:
        return repo.descendant_of(tip, pygit2.Oid(hex=hexid))
    except (ValueError, KeyError, pygit2.GitError):
        return False


def write_view(repo: pygit2.Repository, tasks: list[str], session_ids: list[str], active: str | None,
               default_dir: Path, out: str | None = None, *, known: list[str] | None = None,
               user: tuple[pygit2.Repository, list[str]] | None = None) -> dict:
    """Resolve what to show, render it and write the file (Engine.view; `tasks` are task ids the
    engine checked). Nothing named: the active task (or every task) and every session.

    `known`: the sessions of `repo` that may be shown (default: all). `user`: the user-level
    store and this project's sessions there, shown beside the workspace's (`store: "user"`) when
    nothing is named, and looked up there when a named session is not in `repo`."""
    from ..base.errors import NotFound
    from ..base.fsutil import atomic_write

    all_tasks = Timeline.task_ids(repo)
    here = session_keys(repo) if known is None else known
    theirs = [k for k in user[1] if k not in set(here)] if user is not None else []
    sessions, elsewhere = [], []
    for ident in session_ids:
        try:
            sessions.append(resolve_session(repo, ident, here))
        except NotFound as first:
            if user is None or not theirs:
                raise
            try:
                elsewhere.append(resolve_session(user[0], ident, theirs))
            except NotFound:
                raise first from None
    if not tasks and not session_ids:
        tasks = [active] if active in all_tasks else all_tasks
        sessions, elsewhere = list(here), theirs
    elif tasks and not session_ids:
        sessions = linked_sessions(repo, tasks)
    more = ((user[0], elsewhere, "user"),) if user is not None and elsewhere else ()
    html_text, summary = build(repo, tasks, sessions, active, more=more)
    if elsewhere:
        summary["user_sessions"] = list(elsewhere)
    if out:
        path = Path(out).expanduser().resolve()
    else:
        shown = sessions + elsewhere
        stem = (tasks[0] if len(tasks) == 1 and not session_ids else
                shown[0] if len(shown) == 1 and not tasks else "all")
        path = default_dir / f"{stem}.html"
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, html_text.encode("utf-8", "replace"), 0o644)
    summary["path"] = str(path)
    summary["url"] = path.as_uri()
    return summary
