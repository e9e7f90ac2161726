"""The git bundle format (gitformat-bundle), on streams: a header naming refs and
prerequisites, then a pack. No git CLI, no repository: `packs.py` builds and indexes the pack.

`# v2 git bundle\\n`, then `-<oid> <comment>` prerequisite lines and `<oid> <refname>` lines,
a blank line, then the pack. v3 adds `@capability` lines; only `@object-format=sha1` is
accepted here.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import BinaryIO

from ..base.errors import BadInput

SIG_V2 = b"# v2 git bundle\n"
SIG_V3 = b"# v3 git bundle\n"
HEX40 = re.compile(rb"^[0-9a-f]{40}$")
MAX_HEADER = 16 << 20


@dataclass
class Header:
    version: int
    prerequisites: list[tuple[str, str]] = field(default_factory=list)  # (oid hex, comment)
    refs: dict[str, str] = field(default_factory=dict)  # refname -> oid hex
    pack_offset: int = 0
    size: int = 0


def read_header(f: BinaryIO, name: str | os.PathLike = "bundle") -> Header:
    """Parse the header of the bundle open in `f` (binary, at its start), and check that a pack
    follows; `name` is for messages. Raises BadInput with what is wrong."""
    p = name
    size = os.fstat(f.fileno()).st_size
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
        oid, sep, ref_b = line.partition(b" ")
        if not sep or not HEX40.match(oid):
            raise BadInput(f"{p}: bad reference line {line[:80]!r}")
        try:
            ref = ref_b.decode("utf-8")
        except UnicodeDecodeError:
            raise BadInput(f"{p}: reference name is not UTF-8: {ref_b[:80]!r}") from None
        if ref in h.refs:
            raise BadInput(f"{p}: reference {ref} is listed twice")
        h.refs[ref] = oid.decode()
    h.pack_offset = f.tell()
    magic = f.read(12)
    if len(magic) < 12 or magic[:4] != b"PACK" or int.from_bytes(magic[4:8], "big") not in (2, 3):
        raise BadInput(f"{p}: the pack after the bundle header is missing or corrupt")
    if size - h.pack_offset < 32:
        raise BadInput(f"{p}: the pack is truncated")
    return h


def write(f: BinaryIO, refs: dict[str, str], prerequisites: list[tuple[str, str]], pack: bytes) -> int:
    """Write a v2 bundle to `f`: `refs` (name -> oid hex), `prerequisites` ((oid hex, subject):
    what the receiver must hold already), then the pack. Returns the bytes written."""
    head = write_header(f, refs, prerequisites)
    f.write(pack)
    return head + len(pack)


def write_header(f: BinaryIO, refs: dict[str, str], prerequisites: list[tuple[str, str]]) -> int:
    """A v2 bundle's header (the pack follows it); returns its length."""
    lines = [SIG_V2]
    for oid, subject in prerequisites:
        lines.append(f"-{oid} {subject}".rstrip().encode("utf-8", "surrogateescape") + b"\n")
    for name in sorted(refs):
        lines.append(f"{refs[name]} {name}\n".encode())
    lines.append(b"\n")
    f.writelines(lines)
    return sum(map(len, lines))
