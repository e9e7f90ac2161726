"""Render the benchmark block of docs/reference.md from the results files, so the README shows what the last
run measured and nothing else.

    python benchmarks/readme.py      # also run by bench_core.py / bench_mcp.py when they write
                                     # benchmarks/results/core.md / mcp.md

Between `<!-- bench: begin -->` and `<!-- bench: end -->` in docs/reference.md it writes: where the figures
come from (each file's command line, date and load), the largest workspace's table of
`results/core.md`, the save-time plot, and the goal verdicts of both files.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
README = HERE.parent / "docs" / "reference.md"
BEGIN, END = "<!-- bench: begin -->", "<!-- bench: end -->"


def _sections(text: str) -> dict[str, list[str]]:
    """heading line -> the lines under it (up to the next heading of any level)."""
    out: dict[str, list[str]] = {}
    cur = ""
    for line in text.splitlines():
        if line.startswith("#"):
            cur = line.strip()
            out[cur] = []
        else:
            out.setdefault(cur, []).append(line)
    return out


def _table(lines: list[str]) -> list[str]:
    return [ln for ln in lines if ln.startswith("|")]


def _method(text: str) -> str:
    """The first paragraph after the title: command, date, machine, load."""
    paras = [p.strip() for p in text.split("\n\n") if p.strip() and not p.lstrip().startswith(("#", "|", "*"))]
    return paras[0].replace("\n", " ") if paras else ""


def block(core: Path, mcp: Path) -> str:
    lines = [BEGIN, "<!-- written by benchmarks/readme.py from benchmarks/results/; do not edit by hand -->", ""]
    if core.is_file():
        text = core.read_text()
        sec = _sections(text)
        sizes = [h for h in sec if re.match(r"### [\d,]+ files", h)]
        lines += [f"**Core** (`benchmarks/results/{core.name}`): {_method(text)}", ""]
        if sizes:
            big = max(sizes, key=lambda h: int(re.sub(r"\D", "", h)))
            lines += [f"{big.lstrip('# ')}:", "", *_table(sec[big]), ""]
        svg = re.search(r"!\[[^\]]*\]\(([^)]+\.svg)\)", text)
        if svg:
            lines += [f"![save time against workspace size](../benchmarks/results/{svg.group(1)})", ""]
        goals = _table(sec.get("## Goals", []))
        if goals:
            lines += ["Goals (core):", "", *goals, ""]
    if mcp.is_file():
        text = mcp.read_text()
        sec = _sections(text)
        goals = _table(sec.get("## Goals (issue 14)", []))
        lines += [f"**MCP** (`benchmarks/results/{mcp.name}`): {_method(text)}", ""]
        if goals:
            lines += ["Goals (MCP):", "", *goals, ""]
    lines.append(END)
    return "\n".join(lines)


def render(core: Path | None = None, mcp: Path | None = None, readme: Path = README) -> bool:
    """Rewrite the block in README.md; False (and README untouched) if it has no markers."""
    text = readme.read_text()
    if BEGIN not in text or END not in text:
        print(f"{readme}: no {BEGIN} ... {END} block: nothing rendered", file=sys.stderr)
        return False
    a, b = text.index(BEGIN), text.index(END) + len(END)
    new = text[:a] + block(core or HERE / "results" / "core.md", mcp or HERE / "results" / "mcp.md") + text[b:]
    if new != text:
        readme.write_text(new)
    return True


if __name__ == "__main__":
    sys.exit(0 if render() else 1)
