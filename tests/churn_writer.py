"""A workspace writer for the churn tests (run as its own process: real parallelism).

`python churn_writer.py ROOT LOG SEED [tolerant]` creates, rewrites (in place and by rename), deletes and
renames files and directories under ROOT/churn as fast as it can until SIGTERM, then writes LOG:
one line per event `t0 t1 path sha1|-`, where [t0, t1] (time.monotonic, system-wide) brackets the
operation and `-` means the path stopped existing. Every content a path ever had is logged, the
empty file an in-place rewrite passes through included. A write in place is one write(2), but
not atomic for a reader: the kernel copies it in pieces and grows the file's size after each, with
one mtime for the whole call, so a reader can see a prefix of it with stat data that holds still
through its read (measured here: ~2 % of reads racing such a write, sizes from 1 KB, ext4 and
Linux 6.18). So each such write also logs its content's shape, `0 0 w<seq>x<count> path`
(the content is `"<path> <seq>\n" * count`): any prefix of it is something the path really held. `tolerant`: someone else (a restore)
writes here too, so an operation that fails resyncs the writer's model from the disk, and a
rename logs what the destination holds (read back) and what the source held just before (read
and believed: this process may be descheduled between the rename and the read back while a
snapshot reads the destination and a restore rewrites it), and a
rename whose source a restore turned into the other kind (file <-> directory) resyncs instead
(it would move content to a path under which this log never saw it).
"""
from __future__ import annotations

import hashlib
import os
import random
import re
import shutil
import signal
import stat
import sys
import time

EMPTY = hashlib.sha1(b"").hexdigest()
TEMP = re.compile(r"\..+\.tc-[0-9a-f]{12}", re.S)  # tc_git.base.refs.TEMP_RE (this runs on its own)


def main(root: str, log_path: str, seed: int, tolerant: bool = False) -> None:
    rnd = random.Random(seed)
    base = os.path.join(root, "churn")
    files: dict[str, str] = {}  # rel (from root) -> sha1 of what it holds now
    dirs: set[str] = set()
    events: list[tuple[float, float, str, str]] = []
    shapes: list[tuple[str, str]] = []  # (path written in place, its content's shape)
    stop = [False]
    signal.signal(signal.SIGTERM, lambda *_: stop.__setitem__(0, True))
    seq = 0

    def content(rel: str) -> bytes:
        """What the next write at `rel` puts there; its shape (seq, count) is logged as
        `w<seq>x<count>` (see the module docstring: a reader may see any prefix of it)."""
        nonlocal seq
        seq += 1
        k = rnd.randint(1, 120)
        shapes.append((rel, f"w{seq}x{k}"))
        return (f"{rel} {seq}\n" * k).encode()

    def new_name(parent: str) -> str:
        return f"{parent}/f{rnd.randrange(10_000)}.txt"

    def under(d: str) -> list[str]:
        return [p for p in files if p.startswith(d + "/")]

    def dst_src(q: str, dst: str, d: str) -> str:
        return d + q[len(dst):]

    def read_sha(rel: str) -> str:
        try:
            with open(os.path.join(root, rel), "rb") as f:
                return hashlib.sha1(f.read()).hexdigest()
        except OSError:
            return "-"

    def is_kind(rel: str, test) -> bool:
        try:
            return test(os.lstat(os.path.join(root, rel)).st_mode)
        except OSError:
            return False

    def on_disk(d: str) -> tuple[dict[str, str], set[str]]:
        """Every file under `d` (relative to root) with the sha it holds now ("-": gone meanwhile or
        unreadable), and every directory, `d` included: the one walk the tolerant mode logs from."""
        shas, seen = {}, set()
        for dirpath, _dn, names in os.walk(os.path.join(root, d)):
            rel_dir = os.path.relpath(dirpath, root).replace(os.sep, "/")
            seen.add(rel_dir)
            for n in names:
                # not a restore's temporaries (in no snapshot): adopted into the model, one would
                # be rewritten after the restore removed it, put back at that name by this writer
                if not TEMP.fullmatch(n):
                    shas[f"{rel_dir}/{n}"] = read_sha(f"{rel_dir}/{n}")
        return shas, seen

    def resync(t0: float) -> None:
        """The model from the disk (tolerant mode, after someone else changed it)."""
        disk, seen_dirs = on_disk("churn")
        seen_files = {rel: sha for rel, sha in disk.items() if sha != "-"}
        t1 = time.monotonic()
        for rel in set(files) - set(seen_files):
            events.append((t0, t1, rel, "-"))
        for rel, sha in seen_files.items():
            events.append((t0, t1, rel, sha))
        files.clear()
        files.update(seen_files)
        dirs.clear()
        dirs.update(d for d in seen_dirs if d != "churn")
        for i in range(4):
            d = f"churn/d{i}"
            os.makedirs(os.path.join(root, d), exist_ok=True)
            dirs.add(d)

    os.makedirs(base, exist_ok=True)
    for i in range(4):
        d = f"churn/d{i}"
        os.makedirs(os.path.join(root, d), exist_ok=True)
        dirs.add(d)
    while not stop[0]:
        op = rnd.random()
        t0 = time.monotonic()
        try:
            if op < 0.30 or len(files) < 20:  # write a file (new or existing) in place
                parent = rnd.choice(sorted(dirs))
                rel = rnd.choice(under(parent) or [new_name(parent)]) if rnd.random() < 0.6 else new_name(parent)
                if rel in dirs:
                    continue
                data = content(rel)
                with open(os.path.join(root, rel), "wb") as f:
                    f.write(data)
                sha = hashlib.sha1(data).hexdigest()
                events += [(t0, time.monotonic(), rel, EMPTY), (t0, time.monotonic(), rel, sha)]
                files[rel] = sha
            elif op < 0.45 and files:  # rewrite through a temporary file and a rename
                rel = rnd.choice(sorted(files))
                tmp = rel + ".tmp"
                data = content(tmp)  # written in place at tmp (a reader may see a prefix there)
                with open(os.path.join(root, tmp), "wb") as f:
                    f.write(data)
                os.replace(os.path.join(root, tmp), os.path.join(root, rel))
                sha = hashlib.sha1(data).hexdigest()
                t1 = time.monotonic()
                events += [(t0, t1, tmp, EMPTY), (t0, t1, tmp, sha), (t0, t1, tmp, "-"), (t0, t1, rel, sha)]
                files[rel] = sha
            elif op < 0.60 and files:  # delete a file
                rel = rnd.choice(sorted(files))
                os.unlink(os.path.join(root, rel))
                events.append((t0, time.monotonic(), rel, "-"))
                del files[rel]
            elif op < 0.72 and files:  # rename a file (maybe to another directory)
                rel = rnd.choice(sorted(files))
                dst = new_name(rnd.choice(sorted(dirs)))
                if dst in files or dst in dirs:
                    continue
                if tolerant and not is_kind(rel, stat.S_ISREG):  # a restore made it a directory: moving it
                    resync(t0)                                  # would carry files this log never saw
                    continue
                # tolerant: what moved is what src held just before, which the read back below may
                # miss: if this process is descheduled after the rename, a snapshot can read dst and
                # a restore rewrite or delete it before we look. So the model's and the disk's
                # content of src are logged for dst too.
                held = {files[rel], read_sha(rel)} if tolerant else set()
                os.rename(os.path.join(root, rel), os.path.join(root, dst))
                t1 = time.monotonic()
                if tolerant:
                    files[rel] = read_sha(dst)
                    events += [(t0, t1, dst, sha) for sha in sorted(held - {"-", files[rel]})]
                events += [(t0, t1, rel, "-"), (t0, t1, dst, files[rel])]
                files[dst] = files.pop(rel)
            elif op < 0.80:  # a new directory with a few files
                parent = rnd.choice(sorted(dirs | {"churn"}))
                d = f"{parent}/n{rnd.randrange(10_000)}"
                if d in dirs or d in files or parent.count("/") > 4:
                    continue
                os.mkdir(os.path.join(root, d))
                dirs.add(d)
                for _ in range(rnd.randint(1, 5)):
                    rel = new_name(d)
                    data = content(rel)
                    with open(os.path.join(root, rel), "wb") as f:
                        f.write(data)
                    sha = hashlib.sha1(data).hexdigest()
                    events += [(t0, time.monotonic(), rel, EMPTY), (t0, time.monotonic(), rel, sha)]
                    files[rel] = sha
            elif op < 0.87 and len(dirs) > 4:  # remove a directory tree
                d = rnd.choice(sorted(x for x in dirs if x.count("/") > 1 or x not in
                                      {"churn/d0", "churn/d1", "churn/d2", "churn/d3"}))
                shutil.rmtree(os.path.join(root, d))
                t1 = time.monotonic()
                for p in under(d):
                    events.append((t0, t1, p, "-"))
                    del files[p]
                dirs -= {x for x in dirs if x == d or x.startswith(d + "/")}
            elif op < 0.94 and len(dirs) > 4:  # rename (move) a directory tree
                d = rnd.choice(sorted(x for x in dirs if x not in
                                      {"churn/d0", "churn/d1", "churn/d2", "churn/d3"}))
                dst = f"churn/d{rnd.randrange(4)}/m{rnd.randrange(10_000)}"
                if dst in dirs or dst in files or dst.startswith(d + "/"):
                    continue
                if tolerant and not is_kind(d, stat.S_ISDIR):  # a restore put a file there: moving it would
                    resync(t0)                                # put content at `dst` this log never saw
                    continue
                # as for a file: what moved is what the tree held just before (disk and model)
                held = [on_disk(d)[0], {p: files[p] for p in under(d)}] if tolerant else []
                os.rename(os.path.join(root, d), os.path.join(root, dst))
                t1 = time.monotonic()
                events += [(t0, t1, dst + p[len(d):], sha) for h in held for p, sha in h.items() if sha != "-"]
                for p in under(d):
                    q = dst + p[len(d):]
                    if tolerant:
                        files[p] = read_sha(q)
                    events += [(t0, t1, p, "-"), (t0, t1, q, files[p])]
                    files[q] = files.pop(p)
                for x in [x for x in dirs if x == d or x.startswith(d + "/")]:
                    dirs.discard(x)
                    dirs.add(dst + x[len(d):])
                if tolerant:  # files a restore wrote into the tree moved with it, or put there since
                    disk, seen = on_disk(dst)
                    t2 = time.monotonic()
                    for q, sha in disk.items():
                        if q not in files:  # unknown to the model: it came from `d` or appeared now
                            events += [(t0, t1, dst_src(q, dst, d), "-"), (t0, t1, q, sha)]
                        if sha != "-":
                            events.append((t0, t2, q, sha))
                            files[q] = sha
                    dirs.update(seen)
            elif files:  # a file turns into a directory (and a directory into a file)
                rel = rnd.choice(sorted(files))
                os.unlink(os.path.join(root, rel))
                os.mkdir(os.path.join(root, rel))
                inner = rel + "/inner.txt"
                data = content(inner)
                with open(os.path.join(root, inner), "wb") as f:
                    f.write(data)
                sha = hashlib.sha1(data).hexdigest()
                t1 = time.monotonic()
                events += [(t0, t1, rel, "-"), (t0, t1, inner, EMPTY), (t0, t1, inner, sha)]
                del files[rel]
                files[inner] = sha
                dirs.add(rel)
            if len(files) > 400:  # keep the workspace near a few hundred files
                for rel in rnd.sample(sorted(files), 100):
                    os.unlink(os.path.join(root, rel))
                    events.append((t0, time.monotonic(), rel, "-"))
                    del files[rel]
        except (OSError, KeyError):
            if not tolerant:
                # only this process writes here, so this is a bug in the writer's model: stop loudly
                raise
            resync(t0)
    with open(log_path, "w") as f:
        for t0, t1, rel, sha in events:
            f.write(f"{t0:.6f} {t1:.6f} {sha} {rel}\n")
        for rel, shape in shapes:  # no time window: only a content check uses them
            f.write(f"0 0 {shape} {rel}\n")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:] == ["tolerant"])
