"""Import layering of tc_git, read from the source with `ast` (module-level and function-level imports).

Calls go down only: front ends -> engine -> domain -> policy -> storage/native -> base. A module may
import its own layer or any layer below, never one above; the import graph has no cycle; only
mcp_server imports `mcp`; the hook entry starts without `mcp` and `pygit2`. docs/architecture.md
shows the same table (checked below), so the diagram stays drawn from the real imports.
"""
from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "tc_git"
DOC = ROOT / "docs" / "architecture.md"

# Top to bottom. Names are relative to tc_git; "trajectory.*" is every module of that package.
LAYERS: list[tuple[str, list[str]]] = [
    ("front ends", ["__main__", "cli", "cli.*", "ids", "userfiles", "watch", "mcp_fast", "mcp_server", "mcp_models", "mcp_wire",
                    "hooks"]),
    ("engine", ["engine"]),
    ("domain", ["timeline", "capture", "snapshot", "restore", "compress", "resume", "handoff", "handoff.*", "handoff_cache",
                "view", "diffstat", "gitguard", "journal", "trajectory", "trajectory.*"]),
    ("policy", ["policy", "secrets"]),
    ("storage/native", ["store", "discover", "bundle", "packs", "mempack", "packwriter", "_native", "wsfs", "pathsafe",
                        "lockfile"]),
    ("base", ["__init__", "errors", "refs", "recordrules", "validate", "jsonsafe", "fsutil"]),
]

# Known violations, each a (importer, imported) edge with the reason it is still there. The list may
# only shrink: a new violation fails the test, and so does an entry that no longer occurs.
ALLOWED: dict[tuple[str, str], str] = {}

THIRD_PARTY_ONLY_IN = {"mcp": {"mcp_server"}}


def _modules() -> dict[str, Path]:
    out = {}
    for p in sorted(PKG.rglob("*.py")):
        parts = p.relative_to(PKG).with_suffix("").parts
        name = ".".join(parts)
        if name.endswith(".__init__"):
            name = name[: -len(".__init__")]
        out[name] = p
    return out


MODULES = _modules()


def _imports(name: str, path: Path) -> set[str]:
    """Every module `name` imports anywhere in its file: tc_git ones relative to tc_git, others by
    their top-level name prefixed with '!'."""
    is_pkg = path.name == "__init__.py"
    pkg = ("tc_git." + name if name != "__init__" else "tc_git") if is_pkg else \
        ("tc_git." + name).rpartition(".")[0]
    out: set[str] = set()

    def add(full: str) -> None:
        if full == "tc_git":
            out.add("__init__")
        elif full.startswith("tc_git."):
            out.add(full[len("tc_git."):])
        else:
            out.add("!" + full.split(".")[0])

    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            for a in node.names:
                add(a.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            subs = [f"{mod}.{a.name}" for a in node.names]
            subs = [s for s in subs if s.startswith("tc_git.") and s[len("tc_git."):] in MODULES]
            if len(subs) < len(node.names):  # `from . import core` names the module, not the package
                add(mod)
            for sub in subs:  # `from . import engine` imports the module tc_git.engine
                add(sub)
    out.discard(name)
    return out


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


def _layer_of(name: str) -> int | None:
    for i, (_title, names) in enumerate(LAYERS):
        for n in names:
            if n == name or (n.endswith(".*") and name.startswith(n[:-1])):
                return i
    return None


def _internal_edges():
    for a, deps in GRAPH.items():
        for b in deps:
            if not b.startswith("!") and b != "__init__":
                yield a, b


def test_every_module_has_a_layer():
    missing = sorted(n for n in MODULES if _layer_of(n) is None)
    assert not missing, f"put these modules in LAYERS (and in docs/architecture.md): {missing}"
    assert set(MODULES) >= {"engine", "cli", "mcp_server", "hooks", "refs", "store"}  # the walk found the code


def test_no_import_calls_up():
    up = sorted((a, b) for a, b in _internal_edges() if _layer_of(a) > _layer_of(b)
                and (a, b) not in ALLOWED)
    assert not up, "imports that call up a layer (importer -> imported): " + ", ".join(
        f"{a} ({LAYERS[_layer_of(a)][0]}) -> {b} ({LAYERS[_layer_of(b)][0]})" for a, b in up)


def test_allow_list_only_shrinks():
    edges = set(_internal_edges())
    stale = sorted(e for e in ALLOWED if e not in edges)
    assert not stale, f"fixed: remove these entries from ALLOWED: {stale}"


def test_no_import_cycle():
    graph = {a: {b for b in deps if not b.startswith("!") and b != "__init__" and (a, b) not in ALLOWED}
             for a, deps in GRAPH.items()}
    seen: dict[str, int] = {}  # 1 on the stack, 2 done
    cycles = []

    def visit(n, stack):
        seen[n] = 1
        for m in sorted(graph.get(n, ())):
            if seen.get(m) == 1:
                cycles.append(stack[stack.index(m):] + [m])
            elif m not in seen:
                visit(m, stack + [m])
        seen[n] = 2

    for n in sorted(graph):
        if n not in seen:
            visit(n, [n])
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)


def test_third_party_boundaries():
    bad = sorted(f"{a} imports {lib}" for lib, owners in THIRD_PARTY_ONLY_IN.items()
                 for a, deps in GRAPH.items() if "!" + lib in deps and a not in owners)
    assert not bad, bad
    # refs is the names everyone (the hook entry too) shares: stdlib only
    assert not {d for d in GRAPH["refs"] if d.startswith("!")} - {"!__future__", "!re"}


def test_hook_entry_starts_without_mcp_and_pygit2():
    code = ("import sys, json, tc_git.hooks, tc_git.refs, tc_git.pathsafe; "
            "print(json.dumps(sorted(m for m in ('mcp', 'pygit2', 'pydantic', 'anyio') if m in sys.modules)))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == [], f"loaded at hook start: {r.stdout}"


def _doc_table() -> list[tuple[str, list[str]]]:
    text = DOC.read_text(encoding="utf-8")
    m = re.search(r"<!-- layers: begin.*?-->\n```\n(.*?)```\n<!-- layers: end -->", text, re.S)
    assert m, "docs/architecture.md lost its layer table (between <!-- layers: begin --> and end)"
    out = []
    for line in m.group(1).splitlines():
        title, _, names = line.partition(":")
        out.append((title.strip(), names.split()))
    return out


def test_doc_layer_table_matches():
    assert _doc_table() == LAYERS, ("docs/architecture.md's layer table differs from tests/test_layering.py "
                                    "LAYERS; update the doc:\n" + doc_table_text())


def doc_table_text() -> str:
    return "\n".join(f"{title + ':':<16}{' '.join(names)}" for title, names in LAYERS) + "\n"


# The diagram in docs/architecture.md: every module (a package as one) and the modules it imports
# from the layers below base (everyone may use base), one line each, layer by layer. Regenerate
# with `python tests/test_layering.py` after an import changes.
PACKAGES = ("cli", "handoff", "trajectory")


def _unit(name: str) -> str:
    return next((p for p in PACKAGES if name == p or name.startswith(p + ".")), name)


def diagram_text() -> str:
    base = set(LAYERS[-1][1])
    deps: dict[str, set[str]] = {}
    for a, bs in GRAPH.items():
        deps.setdefault(_unit(a), set()).update(
            _unit(b) for b in bs if not b.startswith("!") and b != "__init__" and _unit(b) != _unit(a))
    lines = []
    for title, names in LAYERS[:-1]:
        lines.append(title)
        for unit in sorted({_unit(n[:-2] if n.endswith(".*") else n) for n in names}):
            if unit in deps:
                below = " ".join(sorted(d for d in deps[unit] if d not in base))
                lines.append(f"  {unit:<14} -> {below or '(base only)'}".rstrip())
    lines.append(f"{LAYERS[-1][0]} (stdlib only; every layer uses it): {' '.join(LAYERS[-1][1])}")
    return "\n".join(lines) + "\n"


def test_doc_diagram_matches_the_imports():
    text = DOC.read_text(encoding="utf-8")
    m = re.search(r"<!-- imports: begin.*?-->\n```\n(.*?)```\n<!-- imports: end -->", text, re.S)
    assert m, "docs/architecture.md lost its import diagram (between <!-- imports: begin --> and end)"
    assert m.group(1) == diagram_text(), ("docs/architecture.md's import diagram differs from the code's imports; "
                                          "replace it with (python tests/test_layering.py):\n" + diagram_text())


if __name__ == "__main__":
    print(doc_table_text())
    print(diagram_text())


# Front ends go through the engine's public methods: no private engine name, no `engine.repo` or
# `engine.store`, no Store of their own (issue 15). Read from the AST: an attribute of a name that
# holds an engine in the front ends' code (e, eng, engine, user).
ENGINE_NAMES = {"e", "eng", "engine", "user"}


def test_front_ends_use_only_the_engine_facade():
    front = [n for n in MODULES if _layer_of(n) == 0]
    bad = []
    for name in front:
        tree = ast.parse(MODULES[name].read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                    and node.value.id in ENGINE_NAMES:
                a = node.attr
                if a in ("repo", "store") or (a.startswith("_") and not a.startswith("__")):
                    bad.append(f"{name}:{node.lineno} {node.value.id}.{a}")
            elif isinstance(node, ast.ImportFrom) and (node.module or "").endswith("store") \
                    and any(x.name == "Store" for x in node.names):
                bad.append(f"{name}:{node.lineno} imports Store")
    assert not bad, "front ends reaching around the engine's public methods: " + ", ".join(bad)
