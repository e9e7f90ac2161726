"""Shared helpers for the benchmarks: a deterministic workspace generator and small utilities.

    from common import make_workspace, edit_files, dir_bytes, ensure_seed

`make_workspace(root, n)` writes `n` small text files in nested directories (100 per directory,
two levels) plus a few MB of binaries; the same (n, seed) always gives the same bytes, so every
engine in a side-by-side run sees identical input.
"""
from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

SEED_DIR = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "tc-git-bench" / "seed-0.1.7"


def file_path(i: int) -> str:
    return f"src/pkg{i // 1000:03d}/mod{(i // 100) % 10}/file{i:06d}.py"


def make_workspace(root, n: int, binary_mb: int = 4, seed: int = 0) -> Path:
    """`n` text files (~0.2-1.5 KB, source-like) + `binary_mb` 1 MB binaries (half random, half
    compressible). Deterministic in (n, binary_mb, seed)."""
    root = Path(root)
    rng = random.Random(seed)
    words = ["def", "return", "self", "value", "import", "class", "for", "in", "if", "else", "None",
             "result", "items", "config", "path", "data", "index", "count", "name", "x", "y"]
    made = set()
    for i in range(n):
        rel = file_path(i)
        d = os.path.dirname(rel)
        if d not in made:
            (root / d).mkdir(parents=True, exist_ok=True)
            made.add(d)
        lines = [f"# module {i}"]
        for j in range(rng.randint(4, 40)):
            lines.append("    " * (j % 3) + " ".join(rng.choice(words) for _ in range(rng.randint(3, 9))))
        (root / rel).write_text("\n".join(lines) + "\n")
    (root / "assets").mkdir(parents=True, exist_ok=True)
    for k in range(binary_mb):
        data = rng.randbytes(1 << 20) if k % 2 == 0 else bytes(rng.randrange(16) for _ in range(4096)) * 256
        (root / "assets" / f"blob{k}.bin").write_bytes(data)
    (root / "README.md").write_text(f"benchmark workspace: {n} files\n")
    return root


def edit_files(root, count: int, tag: str, n: int) -> list[str]:
    """Append a line to `count` files spread over the tree (different directories)."""
    root = Path(root)
    step = max(1, n // max(count, 1))
    out = []
    for k in range(count):
        rel = file_path((k * step + 7) % n)
        with open(root / rel, "a") as f:
            f.write(f"# edit {tag}\n")
        out.append(rel)
    return out


def dir_bytes(path) -> tuple[int, int]:
    """(apparent bytes, bytes on disk) of everything under `path`."""
    apparent = disk = 0
    for dirpath, _dirs, files in os.walk(path):
        for f in files:
            try:
                st = os.lstat(os.path.join(dirpath, f))
            except FileNotFoundError:
                continue
            apparent += st.st_size
            disk += st.st_blocks * 512
    return apparent, disk


def ensure_seed() -> bool:
    """Make `import tc` give task-checkpoint-mcp 0.1.7's core (pip install into a private
    --target directory when missing: a normal install would replace tc-git's `tc-mcp` script)."""
    try:
        import tc

        if hasattr(tc, "TaskCheckpoint"):
            return True
    except ImportError:
        pass
    if not (SEED_DIR / "tc.py").is_file():
        r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(SEED_DIR),
                            "task-checkpoint-mcp==0.1.7"])
        if r.returncode:
            return False
    sys.path.insert(0, str(SEED_DIR))
    sys.modules.pop("tc", None)
    import tc

    return hasattr(tc, "TaskCheckpoint")


def clean_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GIT_", "TC_"))}
    env.update({k: str(v) for k, v in extra.items()})
    return env
