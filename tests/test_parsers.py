"""Unit tests of the untrusted-input parsers on crafted bytes: the bundle header (bundle.py), pack
indexing and object walks (packs.py) and the import quarantine (handoff/quarantine.py).

Stock git makes every well-formed input and judges every output; the hostile ones are stock
git's bytes cut, flipped or extended. The end-to-end import tests (test_trust_*.py,
test_pack_hostile.py) go through the engine; these pin each parser's own contract: what it
accepts, the BadInput it raises otherwise, and that it reads no further than it must.
"""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pygit2
import pytest
from conftest import clean_env, git

from tc_git.base.errors import BadInput
from tc_git.handoff import quarantine as qmod
from tc_git.storage import bundle, packs
from tc_git.storage.store import Store


def _repo_with_history(root: Path, commits: int = 3) -> tuple[Path, list[str]]:
    """A bare repository made by stock git: `commits` commits on refs/heads/main, each adding a file."""
    work = root / "work"
    work.mkdir()
    env = clean_env(GIT_AUTHOR_NAME="a", GIT_AUTHOR_EMAIL="a@x", GIT_COMMITTER_NAME="a", GIT_COMMITTER_EMAIL="a@x")
    run = lambda *a: subprocess.run(["git", *a], cwd=work, env=env, check=True, capture_output=True).stdout  # noqa: E731
    run("init", "-q", "-b", "main")
    shas = []
    for i in range(commits):
        (work / f"f{i}.txt").write_text(f"content {i}\n" * (i + 1))
        run("add", "-A")
        run("commit", "-q", "-m", f"c{i}")
        shas.append(run("rev-parse", "HEAD").decode().strip())
    return work / ".git", shas


def _stock_bundle(gitdir: Path, out: Path, *revs: str, version: int | None = None) -> Path:
    extra = [f"--version={version}"] if version else []
    git(gitdir, "bundle", "create", *extra, str(out), *revs)
    return out


def _read(data: bytes, tmp_path: Path) -> bundle.Header:
    p = tmp_path / "crafted.bundle"
    p.write_bytes(data)
    with open(p, "rb") as f:
        return bundle.read_header(f, p)


# ------------------------------------------------------------------------------------ bundle.py
def test_stock_bundles_parse_as_git_lists_them(tmp_path):
    gitdir, shas = _repo_with_history(tmp_path)
    full = _stock_bundle(gitdir, tmp_path / "full.bundle", "main")
    thin = _stock_bundle(gitdir, tmp_path / "thin.bundle", f"{shas[0]}..main")
    for path in (full, thin):
        with open(path, "rb") as f:
            h = bundle.read_header(f, path)
        heads = dict(reversed(line.split(" ", 1)) for line in
                     git(gitdir, "bundle", "list-heads", str(path)).decode().splitlines())
        assert h.refs == heads and h.version == 2
        assert path.read_bytes()[h.pack_offset:h.pack_offset + 4] == b"PACK"
    with open(thin, "rb") as f:
        assert [oid for oid, _ in bundle.read_header(f).prerequisites] == [shas[0]]
    with open(full, "rb") as f:
        assert bundle.read_header(f).prerequisites == []


def test_v3_sha1_is_read_and_other_capabilities_refused(tmp_path):
    gitdir, _ = _repo_with_history(tmp_path, 1)
    v3 = _stock_bundle(gitdir, tmp_path / "v3.bundle", "main", version=3).read_bytes()
    assert v3.startswith(bundle.SIG_V3) and b"@object-format=sha1\n" in v3
    assert _read(v3, tmp_path).version == 3
    for cap in (b"@object-format=sha256\n", b"@filter=blob:none\n"):
        with pytest.raises(BadInput, match="unsupported bundle capability"):
            _read(v3.replace(b"@object-format=sha1\n", cap), tmp_path)
    v2 = _stock_bundle(gitdir, tmp_path / "v2.bundle", "main").read_bytes()
    with pytest.raises(BadInput, match="unsupported bundle capability"):  # capabilities are v3 only
        _read(v2.replace(bundle.SIG_V2, bundle.SIG_V2 + b"@object-format=sha1\n", 1), tmp_path)


@pytest.mark.parametrize("mutate, message", [
    (lambda b: b"# v4 git bundle\n" + b.split(b"\n", 1)[1], "is not a git bundle"),
    (lambda b: b"PACK" + b, "is not a git bundle"),
    (lambda b: b"", "is not a git bundle"),
    (lambda b: b.split(b"\n\n", 1)[0], "truncated"),  # the header never ends
    (lambda b: b.replace(b"\n\n", b"\nnot-an-oid refs/x\n\n", 1), "bad reference line"),
    (lambda b: b.replace(b"\n\n", b"\n" + b"A" * 40 + b" refs/x\n\n", 1), "bad reference line"),  # upper hex
    (lambda b: b.replace(b"\n\n", b"\n" + b"0" * 40 + b"\n\n", 1), "bad reference line"),  # no name
    (lambda b: b.replace(b"\n\n", b"\n-" + b"0" * 39 + b" x\n\n", 1), "bad prerequisite line"),
    (lambda b: b.replace(b"\n\n", b"\n" + b"0" * 40 + b" refs/\xff\xfe\n\n", 1), "not UTF-8"),
    (lambda b: b.split(b"\n\n", 1)[0] + b"\n\nJUNKJUNKJUNKJUNK" + b"\0" * 40, "missing or corrupt"),
    (lambda b: b.split(b"\n\n", 1)[0] + b"\n\nPACK\0\0\0\x04" + b"\0" * 40, "missing or corrupt"),  # v4 pack
    (lambda b: b.split(b"\n\n", 1)[0] + b"\n\nPACK\0\0\0\x02\0\0\0\x01", "truncated"),
])
def test_crafted_headers_are_refused_with_the_reason(tmp_path, mutate, message):
    gitdir, _ = _repo_with_history(tmp_path, 1)
    good = _stock_bundle(gitdir, tmp_path / "good.bundle", "main").read_bytes()
    with pytest.raises(BadInput, match=message):
        _read(mutate(good), tmp_path)


def test_a_ref_listed_twice_is_refused(tmp_path):
    gitdir, _ = _repo_with_history(tmp_path, 1)
    good = _stock_bundle(gitdir, tmp_path / "good.bundle", "main").read_bytes()
    head, rest = good.split(b"\n\n", 1)
    ref_line = head.split(b"\n")[1]
    with pytest.raises(BadInput, match="listed twice"):
        _read(head + b"\n" + ref_line + b"\n\n" + rest, tmp_path)


def test_an_endless_header_is_refused_after_16_mb_without_reading_the_rest(tmp_path):
    """A header of endless ref lines (a 40 MB file) stops at the 16 MB cap: what is read stays
    near the cap, not the file's size."""
    p = tmp_path / "endless.bundle"
    line = b"0" * 40 + b" refs/heads/" + b"x" * 200 + b"\n"
    with open(p, "wb") as f:
        f.write(bundle.SIG_V2)
        for i in range((40 << 20) // len(line)):
            f.write(line.replace(b"x" * 8, b"%08d" % i, 1))
    with open(p, "rb") as f, pytest.raises(BadInput, match="larger than 16 MB"):
        bundle.read_header(f, p)
    one_long = tmp_path / "one-long-line.bundle"
    with open(one_long, "wb") as f:
        f.write(bundle.SIG_V2 + b"0" * 40 + b" refs/heads/")
        f.truncate(f.tell() + (20 << 20))  # sparse: a 20 MB ref name, no newline
    with open(one_long, "rb") as f:
        with pytest.raises(BadInput):
            bundle.read_header(f, one_long)
        assert f.tell() <= bundle.MAX_HEADER + 64


def test_written_header_round_trips_and_stock_git_verifies_it(tmp_path):
    gitdir, shas = _repo_with_history(tmp_path)
    repo = pygit2.Repository(str(gitdir))
    refs = {"refs/checkpoints/tasks/t1/head": shas[2], "refs/checkpoints/tasks/t2/head": shas[1]}
    prereqs = [(shas[0], "c0 subject")]
    pack = packs.build(repo, [shas[2], shas[1]], hides=[shas[0]])
    out = tmp_path / "ours.bundle"
    with open(out, "wb") as f:
        n = bundle.write_header(f, refs, prereqs)
        pack.write_to(f.write)
    with open(out, "rb") as f:
        h = bundle.read_header(f, out)
    assert h.refs == refs and [o for o, _ in h.prerequisites] == [shas[0]] and h.pack_offset == n
    git(gitdir, "bundle", "verify", str(out))  # the prerequisite is in gitdir: stock git accepts it
    # a repository without the prerequisite is told so by stock git, as by us
    empty = tmp_path / "empty.git"
    git(empty, "init", "-q", "--bare")
    r = subprocess.run(["git", f"--git-dir={empty}", "bundle", "verify", str(out)], capture_output=True,
                       env=clean_env())
    assert r.returncode != 0 and shas[0].encode() in r.stderr


# ------------------------------------------------------------------------------------ packs.py
def _stock_pack(gitdir: Path, tmp_path: Path, revs: str = "main") -> bytes:
    listing = git(gitdir, "rev-list", "--objects", revs)
    return git(gitdir, "pack-objects", "--stdout", input=listing)


def _bare(tmp_path: Path, name: str) -> pygit2.Repository:
    return pygit2.init_repository(str(tmp_path / name), bare=True)


@pytest.mark.parametrize("native", [True, False], ids=["libgit2-indexer", "git-index-pack"])
def test_index_pack_takes_stock_packs_and_refuses_damaged_ones(tmp_path, monkeypatch, native):
    gitdir, shas = _repo_with_history(tmp_path)
    data = _stock_pack(gitdir, tmp_path)
    if not native:
        monkeypatch.setattr(packs._native, "has", lambda cap: False)
    want = len(git(gitdir, "rev-list", "--objects", "main").splitlines())
    offset = 100  # packs are read at an offset: after a bundle header
    p = tmp_path / "good.pack"
    p.write_bytes(b"h" * offset + data)
    q = _bare(tmp_path, "q-good")
    assert packs.index_pack(q, p, offset) == want
    assert git(Path(q.path), "cat-file", "-t", shas[-1]).strip() == b"commit"
    git(Path(q.path), "fsck", "--full", "--no-dangling")

    flipped = bytearray(data)
    flipped[len(data) // 2] ^= 0xFF  # inside a deflate stream (or the trailer's checksum)
    cases = {"flipped": bytes(flipped), "truncated": data[: len(data) - 25], "trailer": data[:-20] + b"\0" * 20,
             "count": data[:8] + (10 ** 6).to_bytes(4, "big") + data[12:]}
    for name, bad in cases.items():
        p = tmp_path / f"{name}.pack"
        p.write_bytes(b"h" * offset + bad)
        with pytest.raises(BadInput, match="corrupt or truncated"):
            packs.index_pack(_bare(tmp_path, f"q-{name}"), p, offset)


def test_a_thin_pack_needs_its_base_from_the_store(tmp_path):
    """A thin pack (deltas against an object the receiver must hold) indexes where the base is
    reachable through alternates, as the quarantine sets up, and is refused where it is not."""
    gitdir, shas = _repo_with_history(tmp_path, 2)
    work = gitdir.parent
    big = "\n".join(f"line {i} of a file long enough to be deltified" for i in range(400)) + "\n"
    env = clean_env(GIT_AUTHOR_NAME="a", GIT_AUTHOR_EMAIL="a@x", GIT_COMMITTER_NAME="a", GIT_COMMITTER_EMAIL="a@x")
    commit = lambda msg: subprocess.run(["git", "commit", "-qam", msg], cwd=work, env=env, check=True)  # noqa: E731
    (work / "big.txt").write_text(big)
    subprocess.run(["git", "add", "big.txt"], cwd=work, env=env, check=True)
    commit("big0")
    (work / "big.txt").write_text(big.replace("line 7 ", "line seven "))
    commit("big1")
    base = git(gitdir, "rev-parse", "HEAD~1").decode().strip()
    thin = git(gitdir, "pack-objects", "--stdout", "--thin", "--revs", input=f"HEAD\n^{base}\n".encode())
    p = tmp_path / "thin.pack"
    p.write_bytes(thin)
    alone = _bare(tmp_path, "alone")
    with pytest.raises(BadInput):
        packs.index_pack(alone, p, 0)
    holder = _bare(tmp_path, "holder")
    packs.index_pack(holder, _write(tmp_path / "base.pack", _stock_pack(gitdir, tmp_path, base)), 0)
    q = _bare(tmp_path, "q-thin")
    (Path(q.path) / "objects" / "info" / "alternates").write_text(str(Path(holder.path) / "objects") + "\n")
    q = pygit2.Repository(q.path)
    assert packs.index_pack(q, p, 0) >= 3
    head = git(gitdir, "rev-parse", "HEAD").decode().strip()
    assert git(Path(q.path), "cat-file", "-p", f"{head}:big.txt").decode().count("line seven") == 1


def _write(p: Path, data: bytes) -> Path:
    p.write_bytes(data)
    return p


def test_walks_agree_with_stock_git_and_find_missing_objects(tmp_path):
    gitdir, shas = _repo_with_history(tmp_path, 4)
    repo = pygit2.Repository(str(gitdir))
    want = {line.split()[0].decode() for line in git(gitdir, "rev-list", "--objects", "main", f"^{shas[1]}").splitlines()}
    everything = {line.split()[0].decode() for line in git(gitdir, "rev-list", "--objects", "main").splitlines()}
    got = {str(o) for o in packs.reachable(repo, [shas[3]], hides=[shas[1]])}
    # the fallback walk stops at the hidden commits and their root trees, not at every object
    # below them (git does): a blob both sides hold may be sent again, never one left out
    assert want <= got <= everything
    assert packs.check_connected(repo, [shas[3]], hides=[shas[1]]) in (len(want), len(got))
    # the same objects through the pack builder, read back by stock git
    data = bytearray()
    packs.build(repo, [shas[3]], hides=[shas[1]]).write_to(data.extend)
    q = _bare(tmp_path, "q")
    packs.index_pack(q, _write(tmp_path / "built.pack", bytes(data)), 0)
    assert {line.split()[0].decode() for line in git(Path(q.path), "cat-file", "--batch-all-objects",
                                                      "--batch-check").splitlines()} in (want, got)
    # a missing blob: the walk fails, it does not skip it
    blob = git(gitdir, "rev-parse", f"{shas[3]}:f3.txt").decode().strip()
    loose = gitdir / "objects" / blob[:2] / blob[2:]
    if not loose.exists():
        pytest.skip("the blob was packed by git gc --auto")
    loose.unlink()
    repo = pygit2.Repository(str(gitdir))
    with pytest.raises((pygit2.GitError, KeyError)):
        packs.check_connected(repo, [shas[3]], hides=[shas[1]])


# ------------------------------------------------------------------------------- quarantine.py
def _store(tmp_path: Path) -> Store:
    ws = tmp_path / "ws"
    ws.mkdir()
    s = Store(ws / ".checkpoints", ws)
    s.create()
    return s


def test_quarantine_sees_the_store_and_leaves_nothing_when_refused(tmp_path):
    s = _store(tmp_path)
    blob = s.repo.create_blob(b"already in the store\n")
    made = []
    with pytest.raises(BadInput):
        with qmod.quarantine(s) as q:
            made.append(Path(q.path))
            assert Path(q.path).parent == s.path / "tc"
            assert q.get(blob) is not None  # through its alternates
            raise BadInput("refused")
    assert made and not made[0].exists()
    assert not [p for p in (s.path / "tc").iterdir() if p.name.startswith("quarantine-")]


@pytest.mark.parametrize("name, why", [
    (b"..", None), (b".git", None), (b".GIT", None), (b".checkpoints", None),
    (b"git~1", None), (b".git\xe2\x80\x8c", None),
])
def test_hostile_tree_names_are_refused_before_anything_moves(tmp_path, name, why):
    """Trees made with stock git's mktree (which refuses none of these in a bare repository) are
    refused by the quarantine's check, with the commit and the name in the message."""
    s = _store(tmp_path)
    with qmod.quarantine(s) as q:
        qdir = Path(q.path)
        blob = git(qdir, "hash-object", "-w", "--stdin", input=b"payload\n").decode().strip()
        inner = git(qdir, "mktree", "--missing", input=f"100644 blob {blob}\tpayload\n".encode()).decode().strip()
        try:
            top = git(qdir, "mktree", "--missing", input=b"040000 tree " + inner.encode() + b"\t" + name + b"\n")
        except AssertionError:
            pytest.skip(f"stock git refuses to write a tree entry named {name!r}")
        commit = git(qdir, "commit-tree", top.decode().strip(), "-m", "crafted").decode().strip()
        q = pygit2.Repository(str(qdir))
        with pytest.raises(BadInput, match="refusing the crafted bundle"):
            qmod.refuse_hostile_trees(q, [commit], set(), "the crafted bundle")
        clean = git(qdir, "mktree", input=b"040000 tree " + inner.encode() + b"\tsrc\n").decode().strip()
        ok = git(qdir, "commit-tree", clean, "-m", "clean").decode().strip()
        qmod.refuse_hostile_trees(q, [ok], set(), "the clean bundle")  # no exception
    assert not any((s.path / "objects").glob(f"{blob[:2]}/{blob[2:]}"))  # nothing adopted


def test_adopted_packs_move_pack_before_index_and_keep_what_is_there(tmp_path):
    s = _store(tmp_path)
    gitdir, shas = _repo_with_history(tmp_path)
    with qmod.quarantine(s) as q:
        packs.index_pack(q, _write(tmp_path / "in.pack", _stock_pack(gitdir, tmp_path)), 0)
        git(Path(q.path), "hash-object", "-w", "--stdin", input=b"a loose one\n")
        qmod.adopt_packs(q, s)
        qmod.adopt_loose(q, s)
        qmod.adopt_packs(q, s)  # twice: what is in place already stays, nothing raises
    store_packs = sorted(p.suffix for p in (s.path / "objects" / "pack").iterdir())
    assert store_packs.count(".idx") == 1 and store_packs.count(".pack") == 1
    git(s.path, "cat-file", "-e", shas[-1])
    git(s.path, "cat-file", "-e", git(s.path, "hash-object", "--stdin", input=b"a loose one\n").decode().strip())
    git(s.path, "fsck", "--full", "--no-dangling")
    # the index is what makes a pack visible: moved last, so no reader saw an .idx without its .pack
    assert not list((s.path / "tc").glob("quarantine-*"))
    assert os.access(s.path / "objects" / "pack", os.W_OK)
