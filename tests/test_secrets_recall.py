"""Recall: 37 kinds of credentials (tests/secret_samples.py: cloud keys, VCS tokens, chat and
payment tokens, AI provider keys, private keys of every PEM type, JWTs, URL passwords, .env
lines...) planted everywhere a text can become an object: text files, a binary file (NUL in its
first 8 KB, SQLite-like), a file with one stray NUL, a 10 MB log with the key in the middle,
save/step fields, task fields, a milestone message, and a transcript (user text, tool input
with the secret as a dict *key*, tool output with a whole PEM block). Stock git then reads
every object of the store, of the user's repository (refs exported after each step) and of the
exported bundle, and finds none of them."""
from __future__ import annotations

import json
import subprocess
import sys
import uuid

import pytest
from conftest import fsck, git, write
from secret_samples import SAMPLES, one_line

from tc_git.engine import Engine
from tc_git.workspace import secrets as S

pytestmark = pytest.mark.usefixtures("tc_env_clean")

NEEDLES = [(k, n.encode()) for k, _t, n in SAMPLES]
TEXTS = [t for _k, t, _n in SAMPLES]


def _all_objects(gitdir) -> bytes:
    return git(gitdir, "cat-file", "--batch-all-objects", "--batch")


def _transcript(path, session: str):
    recs, parent = [], None

    def add(kind, content):
        nonlocal parent
        i = len(recs)
        msg = {"role": kind, "content": content}
        if kind == "assistant":
            msg.update(id=f"msg_{i:04d}", type="message", model="claude-test")
        rec = {"parentUuid": parent, "isSidechain": False, "type": kind, "sessionId": session,
               "uuid": str(uuid.UUID(int=i + 1)), "timestamp": f"2026-12-01T12:00:{i:02d}.000Z", "message": msg}
        recs.append(rec)
        parent = rec["uuid"]

    for n, text in enumerate(TEXTS):
        if n % 3 == 0:  # the user pastes it
            add("user", f"here is the config, please use it:\n{text}")
        elif n % 3 == 1:  # the agent passes it to a tool, once as a value and once as a dict key
            add("assistant", [{"type": "tool_use", "id": f"toolu_{n:04d}", "name": "Bash",
                               "input": {"command": f"deploy --cred '{one_line(text)}'",
                                         "env": {one_line(text): "1"}}}])
            add("user", [{"type": "tool_result", "tool_use_id": f"toolu_{n:04d}", "content": "ok"}])
        else:  # a tool prints it (a whole PEM block, multi-line)
            add("assistant", [{"type": "tool_use", "id": f"toolu_{n:04d}", "name": "Bash",
                               "input": {"command": "cat secrets.txt"}}])
            add("user", [{"type": "tool_result", "tool_use_id": f"toolu_{n:04d}",
                          "content": f"line before\n{text}line after"}])
    add("assistant", [{"type": "text", "text": "done"}])
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))


def test_planted_credentials_reach_no_object(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    subprocess.run(["git", "init", "-q", str(ws)], check=True)
    # files: one per kind, a binary, a stray-NUL text, a large log with a key in the middle
    for n, text in enumerate(TEXTS):
        write(ws, f"conf/s{n:02d}.txt", f"# service config\nname = demo\n{text}\n")
    write(ws, "src/app.py", "import os\n\nprint('hello')\n")
    sqlite = b"SQLite format 3\x00" + b"\x00\x10\x00\x01" + b"\x00" * 4000
    write(ws, "data/app.sqlite", sqlite + b"\x00".join(t.encode() for t in TEXTS) + b"\x00" * 1000)
    write(ws, "notes/stray.txt", b"\x00" + TEXTS[5].encode() + b"\nplain text after\n")
    line = b"2026-12-01T12:00:00Z INFO request served in 12 ms path=/api/v1/items status=200\n"
    half = line * ((5 << 20) // len(line))
    write(ws, "logs/big.log", half + TEXTS[0].encode() + half)

    e = Engine(ws)
    init = e.init("recall " + one_line(TEXTS[9])[:200], goal=TEXTS[10], constraints=one_line(TEXTS[11]))
    assert init["redacted"]
    r = e.save(one_line(TEXTS[6])[:400], description="\n".join(TEXTS), conclusion=TEXTS[12],
               next=one_line(TEXTS[13]), verified=[one_line(t)[:4000] for t in TEXTS[14:20]],
               open_questions=[one_line(t)[:4000] for t in TEXTS[20:26]])
    assert {x["field"] for x in r["redacted"]} >= {"title", "description", "conclusion", "next", "verified"}
    # the files were there at init: its baseline left them out and said so, once
    for said in (init["skipped_paths"], r["skipped_paths"]):
        left = {x.split(" (")[0] for x in said}
        for n in range(len(TEXTS)):
            assert f"secret: conf/s{n:02d}.txt" in left, (n, SAMPLES[n][0], said)
        for p in ("data/app.sqlite", "notes/stray.txt", "logs/big.log"):
            assert f"secret: {p}" in left
        assert "src/app.py" not in " ".join(left)
    assert r["newly_left_out"] == []
    # a credential written after init is new at the next save, and said once
    write(ws, "conf/late.txt", f"# late\n{TEXTS[0]}\n")
    r2 = e.save("second step")
    assert [x.split(" (")[0] for x in r2["newly_left_out"]] == ["secret: conf/late.txt"]
    assert e.save("third step")["newly_left_out"] == []

    tr = tmp_path / "session.jsonl"
    _transcript(tr, "5ec0e75e-0000-4000-8000-000000000001")
    rec = e.record(transcript=str(tr))
    assert rec.get("redactions", 1) >= 1
    m = e.milestone("planted", at=rec["tip"], message=one_line(TEXTS[30]))
    assert m["redacted"]

    res = e.resume()
    assert any(x["path"] == "logs/big.log" for x in res["left_out"])
    assert "Not in the snapshot" in res["handoff"]
    (tmp_path / "out").mkdir()
    out = e.export(to=str(tmp_path / "out"))
    handoff_md = open(out["handoff"], "rb").read()
    assert b"conf/s00.txt" in handoff_md and b"Not in this snapshot" in handoff_md

    bundle_repo = tmp_path / "from-bundle"
    subprocess.run(["git", "init", "-q", "--bare", str(bundle_repo)], check=True)
    git(bundle_repo, "bundle", "verify", out["path"])
    git(bundle_repo, "fetch", "-q", out["path"], "refs/*:refs/*")

    places = {"store": _all_objects(e.store.path), "user repo": _all_objects(ws / ".git"),
              "bundle": _all_objects(bundle_repo), "HANDOFF.md": handoff_md}
    assert b"[REDACTED:" in places["store"]  # the fields and events are there, redacted
    leaks = [(where, kind) for where, blob in places.items() for kind, needle in NEEDLES if needle in blob]
    assert not leaks, leaks
    fsck(e.store.path)

    # the receiving side is told what it must supply
    other = tmp_path / "other"
    other.mkdir()
    imp = Engine(other).import_(out["path"], apply=True)
    assert any(x["path"] == "logs/big.log" and x["why"] == "secret" for x in imp["left_out"])
    assert not (other / "logs" / "big.log").exists() and (other / "src" / "app.py").exists()


def test_racing_writer_never_gets_a_secret_stored(tmp_path):
    """A file rewritten in place while saves run: what is scanned is what is stored (the
    snapshot reads each file once and hashes the blob from that buffer), so a version holding
    the credential never becomes an object, whatever the timing."""
    import threading

    ws = tmp_path / "ws"
    ws.mkdir()
    kind, text, needle = SAMPLES[5]
    secret = f"# config\n{text}\n".encode()
    innocent = (b"# config\n" + b"x" * (len(secret) - 10) + b"\n")[: len(secret)]
    write(ws, "race.txt", innocent)
    write(ws, "src/app.py", "print(1)\n")
    e = Engine(ws)
    e.init("race")
    stop = threading.Event()

    def writer():
        i = 0
        while not stop.is_set():
            with open(ws / "race.txt", "r+b") as f:  # in place: a reader can see a torn mix
                f.write(secret if i % 2 else innocent)
            i += 1

    t = threading.Thread(target=writer)
    t.start()
    try:
        for n in range(25):
            e.capture()
    finally:
        stop.set()
        t.join()
    e.save("after the race")
    assert needle.encode() not in _all_objects(e.store.path), kind
    fsck(e.store.path)


def test_start_up_guard_judges_key_value_pairs_by_their_value(monkeypatch):
    """The guard that keeps a CLI save from loading the engine (0.3 s) for a note record: a
    `key=value` line is judged by its value, so `created=<timestamp>` and `id=<task id>` do not
    load it, while a token-shaped value behind any key still does."""
    monkeypatch.setattr(S, "_engine", None)  # as before the first load (earlier tests load it)
    note = b"created=2026-12-01T17:29:33Z\nid=t1796146173508011524\ntitle=z1\nkind=step\n"
    assert not S._worth_loading(note)
    for line in (b"api_key=ghp_4aB7cD9eF1gH3iJ5kL7mN9oP1qR3sT5uV7wX",
                 b"TOKEN=xoxb-1234567890-abcdefghij",
                 b"x=" + b"AbCdEfGhIjKlMnOpQrStUvWxYz",
                 b"Authorization: Bearer " + b"0123456789abcdef0123456789abcdef"):
        assert S._worth_loading(line), line
    # A fresh process saving nothing credential-shaped never loads the engine.
    code = ("from tc_git.workspace import secrets as S\n"
            "S.redact_obj({'created': '2026-12-01T17:29:33Z', 'id': 't1796146173508011524', 'title': 'z1'})\n"
            "print(S._engine is None)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True", out.stderr


def test_start_up_guard_prefilter_changes_no_answer(monkeypatch):
    """The guard's C-speed prefilter (no run of 16+ token characters other than `=`: no regex
    walk) answers exactly as the regex walk alone would, on texts built from the characters the
    guard cares about (runs, `=` splits, separators, URL and PEM shapes)."""
    import random

    monkeypatch.setattr(S, "_engine", None)
    rng = random.Random(14)
    alphabet = b"aZ09+=_-~: \n./@\xff"
    texts = [bytes(rng.choice(alphabet) for _ in range(rng.randint(0, 80))) for _ in range(4000)]
    texts += [b"x" * k + b"=" + b"A1" * k for k in range(4, 12)] + [b"a" * 15, b"a" * 16, b"a" * 8 + b"=" + b"a" * 8]
    fast = [S._worth_loading(t) for t in texts]
    monkeypatch.setattr(S, "_RUN16", b"")  # always "found": every text takes the regex walk
    assert fast == [S._worth_loading(t) for t in texts]
    assert any(fast) and not all(fast)
