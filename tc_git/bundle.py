"""Git bundles (v2) without the git CLI: write with libgit2's pack builder, read with its indexer.

pygit2 1.21 binds neither `git_packbuilder_insert_walk` / `git_packbuilder_write_buf` nor the
indexer (`git_odb_write_pack`); `_native` reaches them on the libgit2 pygit2 loaded. Where that
path is unavailable (capability check failed, or TC_NATIVE=off) writing falls back to pygit2's
PackBuilder and reading to `git index-pack`.

Format (gitformat-bundle): `# v2 git bundle\\n`, then `-<oid> <comment>` prerequisite lines and
`<oid> <refname>` lines, a blank line, then a pack. v3 adds `@capability` lines; only
`@object-format=sha1` is accepted here.
"""
from __future__ import annotations

import contextlib
import glob
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pygit2

from . import _native
from .errors import BadInput, Unavailable

SIG_V2 = b"# v2 git bundle\n"
SIG_V3 = b"# v3 git bundle\n"
HEX40 = re.compile(rb"^[0-9a-f]{40}$")
CHUNK = 4 << 20
MAX_HEADER = 16 << 20


def pack_bytes(repo: pygit2.Repository, tips, hides=()) -> tuple[int, bytes]:
    """A self-contained pack of everything reachable from `tips` that `hides` does not reach.

    Objects reachable from the hidden commits' trees are left out too (the receiver has them),
    like `git pack-objects --revs` with `^hide` lines.
    """
    if not _native.has(_native.PACK):
        return _pack_bytes_fallback(repo, tips, hides)
    return _native.pack_walk(repo, tips, hides)


def check_connected(repo: pygit2.Repository, tips, hides=()) -> int:
    """Every object reachable from `tips` (down to the hidden commits) exists; returns the count.

    The pack builder reads each object's header while collecting, so a missing object fails
    here; nothing is written.
    """
    if not _native.has(_native.PACK):
        return len(reachable(repo, tips, hides))
    try:
        return _native.count_walk(repo, tips, hides)
    except _native.GitCallError as e:  # the same error type as the fallback's
        raise pygit2.GitError(str(e)) from None


def reachable(repo: pygit2.Repository, tips, hides=(), have=None) -> list:
    """Pure-pygit2 object walk (fallback): objects from tips, stopping at hidden commits' content
    and at objects `have(oid)` says the receiver already holds."""
    seen: set = set()
    stop: set = set()
    for h in hides:
        stop.add(h)
        c = repo.get(h)
        if c is not None and c.type == pygit2.enums.ObjectType.COMMIT:
            stop.add(c.tree_id)
    out = []

    def tree(tid):
        stack = [tid]
        while stack:
            t = stack.pop()
            if t in seen or t in stop or (have and have(t)):
                continue
            seen.add(t)
            out.append(t)
            for e in repo[t]:
                if e.type_str == "tree":
                    stack.append(e.id)
                elif e.type_str == "blob" and e.id not in seen and e.id not in stop and not (have and have(e.id)):
                    seen.add(e.id)
                    out.append(e.id)

    stack = [pygit2.Oid(hex=str(t)) for t in tips]
    while stack:
        c = stack.pop()
        if c in seen or c in stop or (have and have(c)):
            continue
        seen.add(c)
        obj = repo[c]
        out.append(c)
        if obj.type == pygit2.enums.ObjectType.COMMIT:
            tree(obj.tree_id)
            stack.extend(obj.parent_ids)
    return out


def _pack_bytes_fallback(repo, tips, hides):
    objs = reachable(repo, tips, hides)
    pb = pygit2.PackBuilder(repo)
    for o in objs:
        pb.add(o)
    with tempfile.TemporaryDirectory() as td:
        pb.write(td)
        return len(objs), Path(glob.glob(os.path.join(td, "pack-*.pack"))[0]).read_bytes()


# ---------------------------------------------------------------------------- bundle files
@dataclass
class Header:
    version: int
    prerequisites: list[tuple[str, str]] = field(default_factory=list)  # (oid hex, comment)
    refs: dict[str, str] = field(default_factory=dict)  # refname -> oid hex
    pack_offset: int = 0
    size: int = 0


def read_header(path: str | os.PathLike) -> Header:
    """Parse a bundle's header; raises BadInput with what is wrong."""
    p = Path(path)
    try:
        size = p.stat().st_size
        with open(p, "rb") as f:
            first = f.readline(64)
            if first not in (SIG_V2, SIG_V3):
                raise BadInput(f"{p} is not a git bundle (v2/v3): first line {first[:40]!r}")
            h = Header(2 if first == SIG_V2 else 3, size=size)
            while True:
                line = f.readline(MAX_HEADER)
                if not line.endswith(b"\n"):
                    raise BadInput(f"{p}: bundle header is truncated")
                if f.tell() > MAX_HEADER:
                    raise BadInput(f"{p}: bundle header is larger than 16 MB")
                line = line[:-1]
                if line == b"":
                    break
                if line.startswith(b"@"):
                    if h.version != 3 or line not in (b"@object-format=sha1",):
                        raise BadInput(f"{p}: unsupported bundle capability {line.decode('utf-8', 'replace')!r}")
                    continue
                if line.startswith(b"-"):
                    oid, _, comment = line[1:].partition(b" ")
                    if not HEX40.match(oid):
                        raise BadInput(f"{p}: bad prerequisite line {line[:80]!r}")
                    h.prerequisites.append((oid.decode(), comment.decode("utf-8", "replace")))
                    continue
                oid, sep, name = line.partition(b" ")
                if not sep or not HEX40.match(oid):
                    raise BadInput(f"{p}: bad reference line {line[:80]!r}")
                try:
                    ref = name.decode("utf-8")
                except UnicodeDecodeError:
                    raise BadInput(f"{p}: reference name is not UTF-8: {name[:80]!r}") from None
                if ref in h.refs:
                    raise BadInput(f"{p}: reference {ref} is listed twice")
                h.refs[ref] = oid.decode()
            h.pack_offset = f.tell()
            magic = f.read(12)
    except OSError as e:
        raise BadInput(f"cannot read bundle {p}: {e.strerror or e}") from e
    if len(magic) < 12 or magic[:4] != b"PACK" or int.from_bytes(magic[4:8], "big") not in (2, 3):
        raise BadInput(f"{p}: the pack after the bundle header is missing or corrupt")
    if size - h.pack_offset < 32:
        raise BadInput(f"{p}: the pack is truncated")
    return h


def write_bundle(repo: pygit2.Repository, path: Path, refs: dict[str, str], prerequisites=()) -> dict:
    """Write a v2 bundle of `refs` (name -> oid), leaving out what `prerequisites` reach."""
    prereq = [str(p) for p in prerequisites]
    n, pack = pack_bytes(repo, list(dict.fromkeys(refs.values())), prereq)
    lines = [SIG_V2]
    for p in prereq:
        subject = repo[p].message.split("\n", 1)[0] if p in repo else ""
        lines.append(f"-{p} {subject}".rstrip().encode("utf-8", "surrogateescape") + b"\n")
    for name in sorted(refs):
        lines.append(f"{refs[name]} {name}\n".encode())
    lines.append(b"\n")
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            f.writelines(lines)
            f.write(pack)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return {"objects": n, "bytes": sum(map(len, lines)) + len(pack)}


def _chunks(path: Path, offset: int):
    with open(path, "rb") as f:
        f.seek(offset)
        while True:
            b = f.read(CHUNK)
            if not b:
                return
            yield b


def index_pack(qrepo: pygit2.Repository, path: Path, offset: int) -> int:
    """Index the pack at `path[offset:]` into `qrepo`'s objects/pack (thin bases are looked up
    through its odb, alternates included). Returns the object count. Raises BadInput when the
    pack is corrupt or truncated."""
    if not _native.has(_native.INDEXER):
        return _index_pack_cli(qrepo, path, offset)
    try:
        return _native.write_pack(qrepo, _chunks(path, offset))
    except _native.GitCallError as e:
        raise BadInput(f"{path}: the pack is corrupt or truncated ({e})") from None


def _index_pack_cli(qrepo, path: Path, offset: int) -> int:
    git = shutil.which("git")
    if not git:
        raise Unavailable("reading a bundle needs libgit2's indexer (pygit2 1.21 wheel) or the git CLI; neither found")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    with open(path, "rb") as f:
        f.seek(offset)
        r = subprocess.run([git, f"--git-dir={qrepo.path}", "index-pack", "--stdin", "--fix-thin"],
                           stdin=f, capture_output=True, env=env)
    if r.returncode:
        raise BadInput(f"{path}: the pack is corrupt or truncated ({r.stderr.decode(errors='replace').strip()})")
    with open(path, "rb") as f:
        f.seek(offset + 8)
        return int.from_bytes(f.read(4), "big")


def sha1_file(path: Path) -> str:
    h = hashlib.sha1()
    for b in _chunks(path, 0):
        h.update(b)
    return h.hexdigest()
