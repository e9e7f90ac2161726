"""What a snapshot captures: credentials never become objects; excludes; the size cap."""
from __future__ import annotations

import os
import subprocess

import pytest
from conftest import fsck, git, write

from tc_git.engine import Engine

pytestmark = pytest.mark.usefixtures("fsck_after")

AWS = "AKIA2T7QZKXW5RMB3JPD"  # an access key id is a credential with its secret key nearby
AWS_SECRET = "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"
GHP = "ghp_" + "aB3dE5gH7jK9mN1pQ3sT5vW7yZ9bC1dF3hJ5"
PEM_BODY = "MIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gunVTLw7onLRnrq0"
PEM = f"-----BEGIN RSA PRIVATE KEY-----\n{PEM_BODY}\n-----END RSA PRIVATE KEY-----\n"
PASSWORD = "Xk9#vQ2$mL7pW4zR"
SECRETS = {  # path -> (content, the marker that must appear in no object)
    "notes.txt": (f"meeting notes\naws key {AWS} for the bucket\naws_secret_access_key = {AWS_SECRET}\n", AWS_SECRET),
    "data/blob.bin": (b"\x00\x01binary\x00" + PEM.encode() + b"\x00tail", PEM_BODY),
    "src/config.py": (f"GITHUB = '{GHP}'\n", GHP),
    ".env": ("DB_URL=postgres://u:hunter2hunter2@db/x\nPLAIN_ENV_MARKER=zz\n", "PLAIN_ENV_MARKER"),
    "id_rsa": (PEM.replace("RSA PRIVATE", "OPENSSH PRIVATE"), PEM_BODY),
    "config.yaml": (f"db:\n  host: localhost\n  password: {PASSWORD}\n", PASSWORD),
}
INNOCENT = {
    "tokenizer/vocab.json": '{"hello": 1, "world": 2}\n',
    "settings.py": "DEBUG = True\nSECRET_KEY = os.environ['SECRET_KEY']\n",
    "firebase_app.py": "import firebase_admin\napp = firebase_admin.initialize_app()\n",
    "src/app.py": "print('hi')\n",
}


def all_objects(store) -> bytes:
    return git(store, "cat-file", "--batch-all-objects", "--batch")


def _marker_bytes(m) -> bytes:
    return m if isinstance(m, bytes) else m.encode()


def test_planted_credentials_never_become_objects(ws):
    for p, (content, _m) in SECRETS.items():
        write(ws, p, content)
    for p, content in INNOCENT.items():
        write(ws, p, content)
    e = Engine(ws)
    e.init("secrets")
    r = e.save("with secrets")
    skipped = "\n".join(r["skipped_paths"])
    for p in SECRETS:
        assert p in skipped, (p, r["skipped_paths"])
    # the reason is reported: by name or by content
    assert any(s.startswith("secret: notes.txt") and "aws-access-token" in s for s in r["skipped_paths"])
    assert any(s.startswith("sensitive: .env") for s in r["skipped_paths"])
    # capture and a restore round trip too
    write(ws, "src/app.py", "print('changed')\n")
    e.capture()
    e.restore(1, apply=True)
    blob = all_objects(e.store.path)
    for p, (_c, marker) in SECRETS.items():
        assert _marker_bytes(marker) not in blob, f"{p}: credential found in the store"
    # the innocently named look-alikes are stored
    tree = git(e.store.path, "ls-tree", "-r", "--name-only", r["commit"]).decode().split("\n")
    for p in INNOCENT:
        assert p in tree, p
    for p in SECRETS:
        assert p not in tree, p
    # the restore left the credential files alone
    for p, (content, _m) in SECRETS.items():
        assert (ws / p).read_bytes() == _marker_bytes(content)


def test_file_that_gains_a_secret_leaves_the_tree(ws):
    write(ws, "app.cfg", "name = demo\n")
    write(ws, "other.txt", "x\n")
    e = Engine(ws)
    e.init("gains a secret")
    s1 = e.save("clean")
    assert "app.cfg" in git(e.store.path, "ls-tree", "--name-only", s1["commit"]).decode().split()
    write(ws, "app.cfg", f"name = demo\napi_key = {GHP}\n")
    s2 = e.save("dirty")
    assert "app.cfg" not in git(e.store.path, "ls-tree", "--name-only", s2["commit"]).decode().split()
    assert any("app.cfg" in s for s in s2["skipped_paths"])
    assert GHP.encode() not in all_objects(e.store.path)
    # a capture and a resume do not store it either, and resume does not list it as unsaved
    write(ws, "other.txt", "y\n")
    e.capture()
    assert "app.cfg" not in e.resume()["drift_paths"]
    assert GHP.encode() not in all_objects(e.store.path)
    # restoring the clean step does not overwrite the secret-bearing file (it was not captured)
    r = e.restore(1, apply=True)
    assert any(u["path"] == "app.cfg" for u in r["plan"]["unrestorable"])
    assert GHP in (ws / "app.cfg").read_text()


def test_secret_in_user_git_repo_workspace(ws):
    """A workspace that is a git repo: the scan is independent of what the user tracks."""
    write(ws, "deploy.sh", f"export AWS_ACCESS_KEY_ID={AWS}\nexport AWS_SECRET_ACCESS_KEY={AWS_SECRET}\n")
    subprocess.run(["git", "init", "-q", str(ws)], check=True)
    e = Engine(ws)
    e.init("repo")
    e.save("s")
    assert AWS_SECRET.encode() not in all_objects(e.store.path)


def test_exclude_patterns_single_segment_and_with_slash(ws):
    for p in ("data/big.csv", "src/data/keep.py", "logs/a.log", "logs/keep.txt", "src/logs/x.log",
              "tmp/x", "src/tmp/y", "main.py"):
        write(ws, p, p)
    e = Engine(ws)
    init = e.init("excludes", exclude=["tmp", "logs/*.log", "/data/"])
    assert init["exclude"] == ["tmp", "logs/*.log", "/data/"]
    r = e.save("s")
    names = set(git(e.store.path, "ls-tree", "-r", "--name-only", r["commit"]).decode().split())
    assert names == {"src/data/keep.py", "logs/keep.txt", "src/logs/x.log", "main.py"}
    # excluded files are never touched by a restore either
    write(ws, "main.py", "changed")
    write(ws, "tmp/x", "tmp changed")
    e.restore(1, apply=True)
    assert (ws / "main.py").read_text() == "main.py" and (ws / "tmp/x").read_text() == "tmp changed"


@pytest.mark.parametrize("bad", ["../x", "a/../b", "~/x", "!keep", "", "a\nb", "C:\\x"])
def test_bad_exclude_patterns_are_refused(ws, bad):
    from tc_git.base.errors import BadInput

    with pytest.raises(BadInput):
        Engine(ws).init("t", exclude=[bad])
    assert not (ws / ".checkpoints").exists()


def test_large_file_cap_hashes_not_stores(ws, monkeypatch):
    monkeypatch.setenv("TC_MAX_FILE_BYTES", "1000")
    big = os.urandom(5000)
    write(ws, "big.bin", big)
    write(ws, "small.txt", "small")
    e = Engine(ws)
    e.init("large")
    r = e.save("s")
    assert any(s.startswith("large: big.bin") for s in r["skipped_paths"])
    names = git(e.store.path, "ls-tree", "-r", "--name-only", r["commit"]).decode().split()
    assert names == ["small.txt"]
    assert big[:64] not in all_objects(e.store.path)
    note = e.show(index=1)  # metadata in the note: size and sha256
    import hashlib
    import json

    rec = json.loads(git(e.store.path, "notes", "--ref=checkpoints", "show", r["commit"]))
    left = {x["path"]: x for x in rec["files"]["left"]}
    assert left["big.bin"]["size"] == 5000 and left["big.bin"]["sha256"] == hashlib.sha256(big).hexdigest()
    assert note["steps"][0]["index"] == 1
    # growing a stored file past the cap takes it out of the next step
    write(ws, "small.txt", os.urandom(2000))
    r2 = e.save("s2")
    assert git(e.store.path, "ls-tree", "-r", "--name-only", r2["commit"]).decode().split() == []


def test_gitignore_and_global_excludes_respected(ws, tmp_path, monkeypatch):
    write(ws, ".gitignore", "*.tmp\nbuild/\n")
    write(ws, "a.tmp", "x")
    write(ws, "build/out", "x")
    write(ws, "keep.py", "x")
    write(ws, "global-ignored.xyz", "x")
    home = tmp_path / "home"
    home.mkdir()
    (home / ".gitconfig").write_text(f"[core]\n\texcludesFile = {home}/ignore\n")
    (home / "ignore").write_text("*.xyz\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    import pygit2

    level = pygit2.enums.ConfigLevel.GLOBAL
    old = pygit2.settings.search_path[level]
    pygit2.settings.search_path[level] = str(home)
    try:
        e = Engine(ws)
        e.init("ignores")
        r = e.save("s")
    finally:
        pygit2.settings.search_path[level] = old
    names = set(git(e.store.path, "ls-tree", "-r", "--name-only", r["commit"]).decode().split())
    assert names == {".gitignore", "keep.py"}


def test_first_snapshot_of_a_large_tree_does_not_hold_it_in_memory(tmp_path, tune):
    """The first snapshot streams its blobs into one pack file (packwriter: no delta search,
    memory bounded by one file). With the packwriter off: above mempack_max_bytes loose
    objects (bounded memory), below it one pack from memory. All give the same tree."""
    from tc_git.engine import Engine

    trees, counts = {}, {}
    for name, writer, budget, packed in (("packwriter", None, None, True), ("small-budget", "off", "1000", False),
                                         ("mempack", "off", None, True)):
        ws = tmp_path / name
        for i in range(30):
            write(ws, f"d{i % 3}/f{i}.txt", f"content {i}\n" * 50)
        # (savepack off too: the later saves' small pack would take that route's objects)
        tune(packwriter=writer != "off", mempack_max_bytes=budget or 64 << 20, savepack=not budget)
        e = Engine(ws)
        e.init("t")
        e.save("first")
        objects = ws / ".checkpoints" / "objects"
        packs = list((objects / "pack").glob("*.pack"))
        loose = sum(len(os.listdir(d)) for d in objects.iterdir() if len(d.name) == 2)
        # (TC_NATIVE=off, .ci/run's second pass: no mempack there, so "mempack" ends in the later
        # saves' small pack, savepack.py, pure Python like packwriter)
        assert bool(packs) == packed, (name, packs)
        assert not list((objects / "pack").glob("tmp-*")), name  # no temporary pack left behind
        counts[name] = loose
        trees[name] = e.repo[e.repo.references[f"refs/checkpoints/tasks/{e.store.active_task()}/head"].target].tree_id
        fsck(ws / ".checkpoints")
    assert trees["small-budget"] == trees["packwriter"] == trees["mempack"]
    assert counts["small-budget"] >= counts["packwriter"] + 30  # the 30 blobs went loose


def test_allow_a_known_fixture_by_fingerprint_or_inline_marker(ws):
    """The left-out reason names a fingerprint; adding it to .tcsecretsignore keeps the file,
    and so does a `tc:allow-secret` marker on the line. Other credentials stay out."""
    write(ws, "tests/fixture.py", f"TOKEN = '{GHP}'\n")
    write(ws, "tests/inline.py", f"TOKEN = '{GHP}'  # tc:allow-secret (revoked test token)\n")
    write(ws, "tests/other.py", f"x = 1\nTOKEN = '{GHP}'\n")
    e = Engine(ws)
    e.init("allow")
    r = e.save("first")
    reason = next(s for s in r["skipped_paths"] if s.startswith("secret: tests/fixture.py"))
    assert "tests/fixture.py:github-pat:1" in reason and ".tcsecretsignore" in reason
    assert not any("tests/inline.py" in s for s in r["skipped_paths"])
    write(ws, ".tcsecretsignore", "# reviewed fixtures\ntests/fixture.py:github-pat:1\n")
    r = e.save("allowed")
    left = " ".join(r["skipped_paths"])
    assert "tests/fixture.py" not in left and "tests/other.py" in left
    assert GHP.encode() in all_objects(e.store.path)  # the allowed files are stored as they are
    assert r["newly_left_out"] == []
