"""A corpus of real source for the secrets precision test: unpacked sdists of widely used PyPI
packages at pinned versions, downloaded once with pip into ~/.cache/tc-git-tests/sdists and
reused (never vendored). Pure-Python build backends only: pip prepares an sdist's metadata
while downloading it, and meson/maturin packages would need a compiler toolchain for that."""
from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

from netcache import PIP_NET, cache_root, looks_offline

CACHE = cache_root("tc-git-tests") / "sdists"
OFFLINE: str | None = None  # why downloading stopped: the index was unreachable (ensure)

PINNED = [
    "requests==2.32.3", "Django==5.1.4", "Flask==3.1.0", "SQLAlchemy==2.0.36", "boto3==1.35.90",
    "botocore==1.35.90", "paramiko==3.5.0", "urllib3==2.3.0", "pytest==8.3.4", "Sphinx==8.1.3",
    "Jinja2==3.1.5", "click==8.1.8", "Werkzeug==3.1.3", "PyYAML==6.0.2", "attrs==24.3.0",
    "httpx==0.28.1", "aiohttp==3.11.11", "rich==13.9.4", "Pygments==2.18.0", "tornado==6.4.2",
    "redis==5.2.1", "google-auth==2.37.0", "oauthlib==3.2.2", "PyJWT==2.10.1", "setuptools==75.6.0",
    "docutils==0.21.2", "celery==5.4.0", "pip==24.3.1", "packaging==24.2", "idna==3.10",
    "certifi==2024.12.14", "itsdangerous==2.2.0", "sqlparse==0.5.3", "asgiref==3.8.1",
    "python-dateutil==2.9.0.post0", "pytz==2024.2", "jmespath==1.0.1", "s3transfer==0.10.4",
    "rsa==4.9", "pyasn1==0.6.1", "invoke==2.2.0", "fabric==3.2.2", "Scrapy==2.12.0",
    "ansible-core==2.18.1",
]


def _norm(name: str) -> str:
    return name.lower().replace("-", "_").replace(".", "_")


def _archive(spec: str) -> Path | None:
    name, ver = spec.split("==")
    for p in CACHE.glob("*"):
        stem = p.name
        for ext in (".tar.gz", ".zip", ".tgz"):
            if stem.endswith(ext) and _norm(stem[: -len(ext)]) == _norm(f"{name}-{ver}"):
                return p
    return None


def ensure(specs=PINNED, timeout: int = 300, budget: float = 900) -> list[tuple[str, Path]]:
    """(spec, unpacked dir) for every spec that is (or can be) downloaded; skips failures.
    Downloading stops after `budget` seconds (a first run on a new machine: ~20 s per sdist,
    pip prepares each one's metadata), or at the first download that fails because the index
    is unreachable (`OFFLINE` says so: offline, the other 43 would each wait for pip's retries);
    what is cached is used."""
    import time

    global OFFLINE
    OFFLINE = None
    CACHE.mkdir(parents=True, exist_ok=True)
    out = []
    deadline = time.monotonic() + budget
    for spec in specs:
        arc = _archive(spec)
        if arc is None:
            if time.monotonic() > deadline or OFFLINE:
                continue
            name = spec.split("==")[0]
            try:
                r = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", *PIP_NET,
                                    "--no-binary", name, spec, "-d", str(CACHE)], timeout=timeout,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            except subprocess.TimeoutExpired:
                OFFLINE = f"pip download {spec} got no answer in {timeout} s"
                continue
            except (subprocess.SubprocessError, OSError):
                continue
            if r.returncode != 0:
                if looks_offline(r.stderr):
                    OFFLINE = f"the package index is unreachable (pip download {spec}: {r.stderr.strip()[-200:]})"
                continue
            arc = _archive(spec)
            if arc is None:
                continue
        dest = CACHE / "unpacked" / _norm(spec.replace("==", "-"))
        if not (dest / ".complete").exists():
            dest.mkdir(parents=True, exist_ok=True)
            if arc.name.endswith(".zip"):
                with zipfile.ZipFile(arc) as z:
                    z.extractall(dest)
            else:
                with tarfile.open(arc) as t:
                    extract_tar(t, dest)
            (dest / ".complete").write_text("")
        out.append((spec, dest))
    return out


def extract_tar(t: tarfile.TarFile, dest: Path) -> None:
    """Unpack `t` into `dest`, refusing what could write outside it. Python >= 3.11.4 has
    tarfile's `data` filter; before it (Debian 12's /usr/bin/python3 is 3.11.2) only
    directories and regular files are unpacked, by hand, each name checked: absolute names,
    `..` and anything else (links, devices, fifos) are refused."""
    if hasattr(tarfile, "data_filter"):
        t.extractall(dest, filter="data")
        return
    root = os.path.realpath(dest)
    for m in t.getmembers():
        target = os.path.realpath(os.path.join(root, m.name))
        if os.path.isabs(m.name) or ".." in m.name.replace("\\", "/").split("/") or \
                os.path.commonpath([root, target]) != root:
            raise ValueError(f"refusing tar member {m.name!r}: outside {dest}")
        if m.isdir():
            os.makedirs(target, exist_ok=True)
        elif m.isfile():
            os.makedirs(os.path.dirname(target), exist_ok=True)
            src = t.extractfile(m)
            assert src is not None
            with src, open(target, "wb") as out:
                while chunk := src.read(1 << 20):
                    out.write(chunk)
            os.chmod(target, 0o755 if m.mode & 0o100 else 0o644)
        else:
            raise ValueError(f"refusing tar member {m.name!r}: not a file or directory")


def files(root: Path):
    for dirpath, dirs, names in os.walk(root):
        dirs.sort()
        for n in sorted(names):
            if n == ".complete":
                continue
            full = os.path.join(dirpath, n)
            yield os.path.relpath(full, root).replace(os.sep, "/")
