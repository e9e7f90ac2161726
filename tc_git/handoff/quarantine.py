"""Nothing from outside is trusted: a bundle's pack or a fetch lands in a temporary repository
whose object database also sees the store's, every tree it brings is checked (pathsafe) before
anything moves, and only then are its packs and loose objects moved into the store."""
from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from pathlib import Path

import pygit2

from ..base.errors import BadInput
from ..storage.store import Store
from ..workspace import pathsafe
from .refsel import as_oid


@contextlib.contextmanager
def quarantine(store: Store):
    """A temporary bare repository whose odb sees the store's objects (for thin packs and
    connectivity); removed on exit, so a refused import leaves nothing behind."""
    if store.exists:
        base = store.path / "tc"
        base.mkdir(mode=0o700, exist_ok=True)
        remove_stale(base)
        d = Path(tempfile.mkdtemp(prefix="quarantine-", dir=base))
    else:
        d = Path(tempfile.mkdtemp(prefix="tc-quarantine-"))
    try:
        q = pygit2.init_repository(str(d), bare=True)
        if store.exists:
            (d / "objects" / "info" / "alternates").write_text(str(store.path / "objects") + "\n")
            q = pygit2.Repository(str(d))
        yield q
    finally:
        shutil.rmtree(d, ignore_errors=True)


STALE_SECONDS = 3600


def remove_stale(base: Path) -> list[str]:
    """Remove the quarantines a killed import or pull left in the store's `tc/` (nothing
    written into them for an hour: a live one gains files as its pack is indexed)."""
    out = []
    now = time.time()
    for d in base.glob("quarantine-*"):
        try:
            newest = max(p.lstat().st_mtime for p in (d, d / "objects", d / "objects" / "pack") if os.path.lexists(p))
        except (OSError, ValueError):
            continue
        if now - newest > STALE_SECONDS and d.is_dir() and not d.is_symlink():
            shutil.rmtree(d, ignore_errors=True)
            out.append(d.name)
    return out


def refuse_hostile_trees(q, tips, have, source: str, max_file: int | None = None) -> None:
    """BadInput unless every tree reachable from `tips` (down to what the store already has)
    holds only names that can be written safely into a workspace (pathsafe.check_tree_name),
    nests at most pathsafe.MAX_TREE_DEPTH levels and no file over `max_file` bytes (sizes read
    from object headers: a hostile 512 MiB blob is never inflated)."""
    problems = pathsafe.check_history(q, [as_oid(t) for t in tips],
                                      (lambda oid: oid in have) if have is not None else (lambda oid: False),
                                      max_blob=max_file)
    if problems:
        shown = "; ".join(f"commit {c[:12]}: {p!r}: {why}" for c, p, why in problems[:5])
        raise BadInput(f"refusing {source}: it holds paths that cannot be written safely into a workspace "
                       f"(outside it, into a git directory or the tc-git store, nested too deep, or files over "
                       f"TC_MAX_FILE_BYTES) ({shown}"
                       f"{'; ...' if len(problems) > 5 else ''}). Nothing was imported; ask its author for a "
                       f"clean export")


def adopt_loose(qrepo: pygit2.Repository, store: Store) -> None:
    """Move loose objects a fetch left in the quarantine into the store."""
    src = Path(qrepo.path) / "objects"
    for d in src.iterdir():
        if len(d.name) != 2 or not d.is_dir():
            continue
        dst = store.path / "objects" / d.name
        dst.mkdir(exist_ok=True)
        for f in d.iterdir():
            if not (dst / f.name).exists():
                try:
                    os.rename(f, dst / f.name)
                except OSError:
                    shutil.copy2(f, dst / f".{f.name}.tmp")
                    os.replace(dst / f".{f.name}.tmp", dst / f.name)


def adopt_packs(qrepo: pygit2.Repository, store: Store) -> None:
    """Move the quarantine's pack into the store (.pack first, .idx last: a reader finds packs
    through their index)."""
    src = Path(qrepo.path) / "objects" / "pack"
    dst = store.path / "objects" / "pack"
    dst.mkdir(parents=True, exist_ok=True)
    packs = sorted(src.glob("pack-*.idx"))
    for idx in packs:
        stem = idx.stem
        if (dst / idx.name).exists():
            continue
        others = [p for p in src.glob(stem + ".*") if p.suffix != ".idx"]
        for p in sorted(others, key=lambda p: p.suffix != ".pack") + [idx]:
            try:
                os.rename(p, dst / p.name)
            except OSError:
                shutil.copy2(p, dst / f".{p.name}.tmp")
                os.replace(dst / f".{p.name}.tmp", dst / p.name)
