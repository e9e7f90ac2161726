"""Recording a conversation into a store, as the engine does it: a transcript file whose bytes
were recorded before is not parsed again (ids depend only on the bytes and the reader, so the
earlier result stands while its refs still point there), and a long conversation recorded for
the first time goes to one pack (thousands of loose objects cost ~12 KB each on disk and most
of the time). The caller holds the store lock where it says so."""
from __future__ import annotations

import hashlib
from pathlib import Path

from ..base import results
from ..base.refs import session_ref
from ..storage import mempack
from .recorder import RecordResult, publish, record, session_name

READER_VERSION = 7  # 2: thinking, images, event_msg prompts, progress-line parents; 3: Codex compacted kept whole;
# 4: Claude thinking keeps its signature (redacted thinking its data), so a resumed session is accepted;
# 5: a Claude tool result of several text blocks or tool references keeps its block structure (meta.blocks),
# a Codex namespaced call its namespace (meta.namespace), a Codex <subagent_notification> is context, not a prompt;
# 6: a line that is not JSON, too long or too deep is one "malformed" event (branch `malformed`);
# 7: a Claude subagent result keeps its line's toolUseResult (meta.tool_use_result), written back by resume-session
CACHE = "recorded-files.json"  # in the store's tc/: file key -> {sha1, result}
CACHE_ENTRIES = 500


def file_key(path: Path, fmt, session, agent) -> tuple[str, str]:
    """(key of the file and the reading options, sha1 of its bytes)."""
    h = hashlib.sha1()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    args = f"{READER_VERSION}\0{fmt}\0{session}\0{agent}\0{path}"
    return hashlib.sha1(args.encode("utf-8", "surrogateescape")).hexdigest(), h.hexdigest()


def unchanged(store, fingerprint: tuple[str, str]) -> results.RecordResult | None:
    """The earlier result for these very bytes (what `remember` kept: the engine's record result
    without its milestone), if every branch it names is still where it was."""
    if not store.exists:
        return None
    key, digest = fingerprint
    prev = store.read_json(CACHE, {}).get(key)
    if not prev or prev.get("sha1") != digest:
        return None
    out: results.RecordResult = prev["result"]  # a fresh object, read from the cache file
    prefix = session_ref(out['session'])
    refs = store.repo.references
    if any(str(refs[prefix + b].target) != t if prefix + b in refs else True for b, t in out["branches"].items()):
        return None  # moved or deleted since: record properly
    out["new_commits"], out["milestone"], out["unchanged_file"] = 0, None, True
    return out


def remember(store, fingerprint: tuple[str, str], out: results.RecordResult) -> None:
    """Keep `out` as the result for these bytes (the newest CACHE_ENTRIES files). Takes the lock."""
    key, digest = fingerprint
    with store.lock():
        seen = store.read_json(CACHE, {})
        seen[key] = {"sha1": digest, "result": {k: v for k, v in out.items() if k != "milestone"}}
        if len(seen) > CACHE_ENTRIES:  # oldest entries first out
            seen = dict(list(seen.items())[-CACHE_ENTRIES:])
        store.write_json(CACHE, seen)


def record_in(store, tr) -> RecordResult:
    """Write the events (under the caller's lock); a first recording of 200+ events as one pack."""
    repo = store.repo
    prefix = session_ref(session_name(tr.agent, tr.session_id))
    if len(tr.events) < 200 or any(r.startswith(prefix) for r in repo.references):
        return record(repo, tr)
    with mempack.bulk_writes(repo) as (work, pack):
        res = record(work, tr, update_refs=False)
        if pack is not None and res.new_commits:
            pack.flush()  # objects durable before any ref names them
    publish(store.reopen(), res)
    return res
