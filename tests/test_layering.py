"""Import layering of tc_git, read from the source with `ast` (module-level and function-level imports).

Calls go down only: front ends (cli/, mcp/, hooks) -> engine -> code history (timeline/,
handoff/) -> conversation (trajectory/) -> workspace/ -> storage/ -> base/. A module may
import its own layer or any layer below, never one above; the import graph has no cycle; only
mcp.server imports `mcp`; the hook entry starts without `mcp` and `pygit2`. docs/architecture.md
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
    ("front ends", ["__main__", "cli", "cli.*", "mcp", "mcp.*", "hooks"]),
    ("engine", ["engine"]),
    ("code history", ["timeline", "timeline.*", "handoff", "handoff.*"]),
    ("conversation", ["trajectory", "trajectory.*"]),
    ("workspace", ["workspace", "workspace.*"]),
    ("storage", ["storage", "storage.*"]),
    ("base", ["__init__", "base", "base.*"]),
]

# Known violations, each a (importer, imported) edge with the reason it is still there. The list may
# only shrink: a new violation fails the test, and so does an entry that no longer occurs.
ALLOWED: dict[tuple[str, str], str] = {}

THIRD_PARTY_ONLY_IN = {"mcp": {"mcp.server"}}


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
    assert set(MODULES) >= {"engine", "cli", "mcp.server", "hooks", "base.refs", "storage.store"}  # the walk found the code


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
    assert not {d for d in GRAPH["base.refs"] if d.startswith("!")} - {"!__future__", "!re"}


def test_hook_entry_starts_without_mcp_and_pygit2():
    code = ("import sys, json, tc_git.hooks, tc_git.base.refs, tc_git.workspace.pathsafe; "
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
PACKAGES = ("cli", "mcp", "handoff", "trajectory")


def _unit(name: str) -> str:
    return next((p for p in PACKAGES if name == p or name.startswith(p + ".")), name)


def _is_base(name: str) -> bool:
    return name in ("__init__", "base") or name.startswith("base.")


def diagram_text() -> str:
    """Layer by layer, each module (a front-end, handoff or trajectory package as one) and what it
    imports outside base; a package's empty __init__ is not listed."""
    deps: dict[str, set[str]] = {}
    for a, bs in GRAPH.items():
        if not _is_base(a):
            deps.setdefault(_unit(a), set()).update(
                _unit(b) for b in bs if not b.startswith("!") and not _is_base(b) and _unit(b) != _unit(a))
    lines = []
    for i, (title, _names) in enumerate(LAYERS[:-1]):
        lines.append(title)
        units = sorted({_unit(m) for m in MODULES if _layer_of(m) == i
                        and not (MODULES[m].name == "__init__.py" and _unit(m) == m and not deps.get(m))})
        for unit in units:
            below = " ".join(sorted(deps.get(unit, ())))
            lines.append(f"  {unit:<22} -> {below or '(base only)'}".rstrip())
    lines.append(f"{LAYERS[-1][0]} (stdlib only; every layer uses it): "
                 + " ".join(sorted(m for m in MODULES if _is_base(m) and m != "__init__")))
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
# `engine.store`, no Store of their own (issue 15). An engine is recognised by its type and by where
# it flows, whatever the variable is called: what `Engine(...)` returns, what a function annotated
# `-> Engine` returns (through `import ... as` too), what a `type[Engine]` value makes, a parameter
# or variable annotated `Engine`, and the parameter of a lambda passed where the callee expects a
# `Callable[[Engine], ...]`. Flow-insensitive within a function; closures see their outer names.
ENGINE_T = re.compile(r"(?<![\w\[])Engine\b")  # Engine, Engine | None, "Engine"; not type[Engine]
CLASS_T = re.compile(r"\btype\[Engine\]")
CALLBACK_T = re.compile(r"Callable\[\[Engine\b")
FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)


def _ann(node) -> str:
    return ast.unparse(node) if node is not None else ""


def _params(fn) -> list[ast.arg]:
    args = fn.args.posonlyargs + fn.args.args
    return args[1:] if args and args[0].arg in ("self", "cls") else args


def facade_violations(sources: dict[str, str]) -> list[str]:
    """`module:line expr.attr` for each front-end reach around the engine's public methods."""
    trees = {n: ast.parse(src) for n, src in sources.items()}
    makes_engine, makes_class, class_attrs = {"Engine"}, set(), set()
    callbacks: dict[str, set[int | str]] = {}  # function or Class.method -> positions/keywords of an engine callback
    for tree in trees.values():
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                for fn in node.body:
                    if isinstance(fn, FUNCS):
                        fn.qual = f"{node.name}.{fn.name}"  # type: ignore[attr-defined]
            if isinstance(node, FUNCS):
                r = _ann(node.returns)
                (makes_class if CLASS_T.search(r) else makes_engine if ENGINE_T.search(r) else set()).add(node.name)
                for i, a in enumerate(_params(node)):
                    if CALLBACK_T.search(_ann(a.annotation)):
                        for key in {node.name, getattr(node, "qual", node.name)}:
                            callbacks.setdefault(key, set()).update({i, a.arg})
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Attribute) \
                    and CLASS_T.search(_ann(node.annotation)):
                class_attrs.add(node.target.attr)
    bad: list[str] = []

    for name, tree in trees.items():
        local_engine, local_class = set(makes_engine), set(makes_class)
        instances: dict[str, str] = {}  # name -> class, for `run = Runner(...)` then `run(...)`
        classes = {n.name for n in ast.walk(tree) if isinstance(n, ast.ClassDef)}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                for al in node.names:
                    if al.asname and al.name in makes_engine:
                        local_engine.add(al.asname)
                    if al.asname and al.name in makes_class:
                        local_class.add(al.asname)
                    if (node.module or "").endswith("store") and al.name == "Store":
                        bad.append(f"{name}:{node.lineno} imports Store")
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) \
                    and isinstance(node.value.func, ast.Name) and node.value.func.id in classes:
                instances.update({t.id: node.value.func.id for t in node.targets if isinstance(t, ast.Name)})

        def is_class(x, env) -> bool:
            for v in _values(x):
                if isinstance(v, ast.Name) and (v.id in env[1] or v.id == "Engine") \
                        or isinstance(v, ast.Attribute) and v.attr in class_attrs \
                        or isinstance(v, ast.Call) and _callee(v) in local_class:
                    return True
            return False

        def is_engine(x, env) -> bool:
            for v in _values(x):
                if isinstance(v, ast.Name) and v.id in env[0] \
                        or isinstance(v, ast.Call) and (_callee(v) in local_engine or is_class(v.func, env)):
                    return True
            return False

        def callback_slots(call: ast.Call, env) -> set:
            f = call.func
            if isinstance(f, ast.Name):
                key = f"{instances[f.id]}.__call__" if f.id in instances else f.id
            elif isinstance(f, ast.Attribute):
                owner = instances.get(f.value.id) if isinstance(f.value, ast.Name) else None
                key = f"{owner}.{f.attr}" if owner else f.attr
            else:
                return set()
            return callbacks.get(key, set())

        def scope(body_nodes, env, params=()) -> None:
            """Check one function (or lambda) body with the engine names it sees."""
            engines, klasses = set(env[0]) - {p.arg for p in params}, set(env[1])
            engines |= {p.arg for p in params if ENGINE_T.search(_ann(p.annotation))}
            klasses |= {p.arg for p in params if CLASS_T.search(_ann(p.annotation))}
            own = [n for b in body_nodes for n in _walk_own(b)]
            for _ in range(2):  # assignments may build on each other
                e = (engines, klasses)
                for n in own:
                    if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name):
                        t = _ann(n.annotation)
                        (klasses if CLASS_T.search(t) else engines if ENGINE_T.search(t) else set()).add(n.target.id)
                    elif isinstance(n, (ast.Assign, ast.NamedExpr)):
                        targets = n.targets if isinstance(n, ast.Assign) else [n.target]
                        for t in targets:
                            if isinstance(t, ast.Name) and is_engine(n.value, e):
                                engines.add(t.id)
                            elif isinstance(t, ast.Name) and is_class(n.value, e):
                                klasses.add(t.id)
            e = (engines, klasses)
            for n in own:
                if isinstance(n, ast.Attribute) and is_engine(n.value, e):
                    a = n.attr
                    if a in ("repo", "store") or (a.startswith("_") and not a.startswith("__")):
                        bad.append(f"{name}:{n.lineno} {ast.unparse(n)}")
                if isinstance(n, FUNCS):
                    scope(n.body, e, _params(n) + n.args.kwonlyargs)
                elif isinstance(n, ast.Lambda):
                    scope([n.body], e, n.args.args)
                if isinstance(n, ast.Call):
                    slots = callback_slots(n, e)
                    args = [(i, a) for i, a in enumerate(n.args)] + [(k.arg, k.value) for k in n.keywords]
                    for key, arg in args:
                        if key in slots and isinstance(arg, ast.Lambda) and arg.args.args:
                            first = arg.args.args[0]
                            scope([arg.body], (e[0] | {first.arg}, e[1]), arg.args.args[1:])
        scope(tree.body, (set(), set()))
    return sorted(set(bad))


def _values(x):
    """The expressions `x` may evaluate to: through `await`, `a if c else b`, `a or b`."""
    if isinstance(x, ast.Await):
        yield from _values(x.value)
    elif isinstance(x, ast.IfExp):
        yield from _values(x.body)
        yield from _values(x.orelse)
    elif isinstance(x, ast.BoolOp):
        for v in x.values:
            yield from _values(v)
    else:
        yield x


def _callee(call: ast.Call) -> str | None:
    f = call.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None


def _walk_own(node):
    """`node` and what is under it, not descending into nested functions and lambdas (their
    bodies are their own scopes; the function or lambda node itself is yielded)."""
    yield node
    if isinstance(node, (*FUNCS, ast.Lambda)):
        return
    for child in ast.iter_child_nodes(node):
        yield from _walk_own(child)


def test_front_ends_use_only_the_engine_facade():
    front = {n: MODULES[n].read_text(encoding="utf-8") for n in MODULES if _layer_of(n) == 0}
    bad = facade_violations(front)
    assert not bad, "front ends reaching around the engine's public methods: " + ", ".join(bad)


def test_facade_check_follows_the_type_not_the_name():
    """The check above sees an engine under any name; each line here is one reach it must catch."""
    src = {
        "common": "def engine_for(args) -> Engine:\n    return Engine(args.root)\n",
        "mod": (
            "from .common import engine_for as _make\n"
            "def a(args):\n    zz = _make(args)\n    return zz.repo\n"                      # through an alias
            "def b(q: Engine | None):\n    return q._timeline()\n"                       # an annotated parameter
            "class R:\n    def __call__(self, root, call: Callable[[Engine], Any]): ...\n"
            "    def cls(self) -> type[Engine]: ...\n"
            "run = R()\n"
            "def c():\n    return run('r', lambda w: w.store)\n"                              # a callback's parameter
            "def d(r: R):\n    k = r.cls()\n    x = k('/w')\n    def inner():\n        return x._ws()\n"  # a class, a closure
            "def e(args):\n    return engine_for(args).store.path\n"                      # a call's result
            "def ok(args):\n    e = object()\n    return e.repo, engine_for(args).save('t')\n"  # not an engine
        ),
    }
    bad = facade_violations(src)
    assert sorted(b.split(" ", 1)[1] for b in bad) == ["engine_for(args).store", "q._timeline", "w.store",
                                                       "x._ws", "zz.repo"], bad


def test_handoff_takes_the_user_git_settings_from_its_caller():
    """TC_GIT and TC_GIT_VERIFY are read once, by the engine, and passed down (issue 15): a handoff
    module that read them itself would ignore what its caller decided (a nested watch, a test)."""
    readers = sorted(n for n in MODULES if n.startswith("handoff")
                     for node in ast.walk(ast.parse(MODULES[n].read_text(encoding="utf-8")))
                     if isinstance(node, ast.Constant) and node.value in ("TC_GIT", "TC_GIT_VERIFY"))
    assert not readers, f"handoff modules reading the user-git settings themselves: {readers}"


# The environment is read in one place (issue 31): base/settings.py. The front ends read it once
# (Settings.from_env) and pass the settings down; below them no module touches os.environ or
# os.getenv, and no module but settings names a TC_* variable when it reads the environment.
# ENV_ALLOWED: modules still reading it, each with its reason; the list may only shrink.
ENV_MODULE = "base.settings"
ENV_FRONT_ENDS = ("cli", "cli.*", "mcp", "mcp.*", "hooks", "__main__")
ENV_ALLOWED: dict[str, str] = {}


def _env_reads(path: Path) -> list[tuple[int, str | None]]:
    """Each read of the environment in `path`: (line, the TC_* name it reads or None)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out: list[tuple[int, str | None]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "os" and any(
                a.name in ("environ", "environb", "getenv", "getenvb") for a in node.names):
            out.append((node.lineno, None))
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "os" \
                and node.attr in ("environ", "environb", "getenv", "getenvb", "putenv", "unsetenv"):
            out.append((node.lineno, None))
    for node in ast.walk(tree):  # the TC_* names read: os.environ.get("TC_X"), os.environ["TC_X"], os.getenv("TC_X")
        src = ast.unparse(node) if isinstance(node, (ast.Call, ast.Subscript)) else ""
        if src.startswith(("os.environ", "os.getenv")):
            for c in ast.walk(node):
                if isinstance(c, ast.Constant) and isinstance(c.value, str) and re.fullmatch(r"TC_[A-Z0-9_]+", c.value):
                    out.append((node.lineno, c.value))
    return out


def _front_end(name: str) -> bool:
    return any(name == p or (p.endswith(".*") and name.startswith(p[:-1])) for p in ENV_FRONT_ENDS)


def test_only_the_settings_module_and_the_front_ends_read_the_environment():
    below = sorted(f"{n}:{line}" for n, p in MODULES.items() if n != ENV_MODULE and not _front_end(n)
                   and n not in ENV_ALLOWED for line, _var in _env_reads(p))
    assert not below, ("modules below the front ends reading the environment (take the value from "
                       f"tc_git/base/settings.py: the engine's settings or settings.current()): {below}")
    stale = sorted(n for n in ENV_ALLOWED if n not in MODULES or not _env_reads(MODULES[n]))
    assert not stale, f"fixed: remove these entries from ENV_ALLOWED: {stale}"


def test_tc_variables_are_read_only_by_the_settings_module():
    named = sorted(f"{n}:{line} {var}" for n, p in MODULES.items() if n != ENV_MODULE and n not in ENV_ALLOWED
                   for line, var in _env_reads(p) if var)
    assert not named, f"TC_* variables read outside tc_git/base/settings.py (add a field there): {named}"


def test_the_settings_rule_sees_a_read():
    """The check finds the ways a module reads the environment (a guard against a blind test)."""
    import tempfile

    src = ("import os\nfrom os import getenv\n"
           "a = os.environ.get('TC_X')\nb = os.environ['TC_Y']\nc = os.getenv('TC_Z', '1')\nd = dict(os.environ)\n")
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "m.py"
        p.write_text(src)
        reads = _env_reads(p)
    assert sorted(v for _line, v in reads if v) == ["TC_X", "TC_Y", "TC_Z"]
    assert {line for line, _v in reads} == {2, 3, 4, 5, 6}


def test_settings_fields_match_their_tables():
    """Every setting has one row (its variable, default and parser, or a knob's default and type)
    and one annotated field; the user-facing ones are each in docs/reference.md's table."""
    from tc_git.base import settings

    tables = [settings.USER, settings.PORTABLE, settings.OTHERS, settings.KNOBS]
    names = [n for t in tables for n in t]
    assert len(names) == len(set(names))
    assert set(settings.Settings.__annotations__) == set(names)
    default = settings.Settings()
    assert settings.Settings.from_env({}) == default  # an empty environment: every default
    reference = (ROOT / "docs" / "reference.md").read_text(encoding="utf-8")
    for table in (settings.USER, settings.PORTABLE):
        for _name, (var, _d, _p) in table.items():
            assert f"| `{var}` |" in reference, f"{var} is not in docs/reference.md's Environment table"
    assert len(settings.USER) <= 13, "keep the user-facing settings few (issue 31)"
