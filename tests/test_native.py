"""The native boundary (tc_git/storage/_native.py): everything below pygit2's public API.

- found through pygit2 itself and checked by capability (symbols + a self-test of the struct
  layouts we declare), not by libgit2's version;
- a capability whose symbol is missing or whose layout is wrong is switched off with its reason,
  and the work still gets done by the fallback;
- `TC_NATIVE=off` calls nothing below the public API (ctypes audited, pygit2's cffi poisoned) and
  the result is the same trees, a bundle stock git accepts, and a store `git fsck` finds clean;
- stores written by one mode are read by the other.
`.ci/run` runs the core, restore and handoff tests a second time with TC_NATIVE=off.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import clean_env

from tc_git.storage import _native

PROBE = "import json; from tc_git.storage import _native; print(json.dumps(_native.report()))"


def _run(code: str, **env) -> str:
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=clean_env(**env),
                       timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip().splitlines()[-1]


def test_every_capability_on_here_found_through_pygit2():
    rep = json.loads(_run(PROBE, TC_NATIVE="on"))
    # this is the platform the wheels were checked on: a silent fallback would leave the fast
    # paths unexercised by the normal run
    assert rep == {c: "on" for c in _native.CAPABILITIES}, rep
    # the first place looked at is pygit2's own extension module, not a file-name pattern
    import importlib.util

    first = os.path.realpath(importlib.util.find_spec("pygit2._libgit2").origin)
    assert _native._candidates()[0] == first


def test_tc_native_off_reports_every_capability_off():
    rep = json.loads(_run(PROBE, TC_NATIVE="off"))
    assert rep == {c: "off (TC_NATIVE=off)" for c in _native.CAPABILITIES}


def test_clean_env_keeps_the_native_switch(monkeypatch):
    monkeypatch.setenv("TC_NATIVE", "off")
    assert clean_env()["TC_NATIVE"] == "off"


LAZY = r"""
import json, tempfile
from tc_git.storage import _native
made = []
real = tempfile.mkdtemp
tempfile.mkdtemp = lambda *a, **k: made.append(k.get("prefix")) or real(*a, **k)
out = {"index": _native.has(_native.INDEX_STAT)}
out["after_index"] = list(made)
out["pack"] = _native.has(_native.PACK)
out["after_pack"] = list(made)
out["report"] = _native.report()
print(json.dumps(out))
"""


def test_self_tests_run_when_their_capability_is_asked_for():
    """A first snapshot asks only for INDEX_STAT (and DIFF_SCAN from 5000 files): the pack
    builder's and the scan's self-tests (scratch repositories written and removed, ~40 ms of a
    1k-file first save's fixed cost) run when their own capability is first asked for, and each
    capability ends up judged as before."""
    out = json.loads(_run(LAZY, TC_NATIVE="on"))
    assert out["index"] is True and out["after_index"] == [], out
    assert out["pack"] is True and out["after_pack"] == ["tc-native-"], out
    assert out["report"] == {c: "on" for c in _native.CAPABILITIES}, out


BROKEN = r"""
import ctypes, json, sys
from tc_git.storage import _native
what = sys.argv[1]
if what == "symbol":
    _native._SYMBOLS[_native.MEMPACK] += ("git_no_such_function",)
elif what == "layout":
    class Buf(ctypes.Structure):  # size before ptr: what a changed git_buf would look like
        _fields_ = [("size", ctypes.c_size_t), ("reserved", ctypes.c_size_t), ("ptr", ctypes.c_void_p)]
    _native.Buf = Buf
elif what == "progress":
    class Progress(ctypes.Structure):  # a counter added in front: every later field shifts
        _fields_ = [(n, ctypes.c_uint) for n in ("new_counter", "total_objects", "indexed_objects", "received_objects",
                                                  "local_objects", "total_deltas", "indexed_deltas")] + [
            ("received_bytes", ctypes.c_size_t)]
    P = ctypes.POINTER(Progress)
    class WritePack(ctypes.Structure):
        _fields_ = [("backend", ctypes.c_void_p),
                    ("append", ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, P)),
                    ("commit", ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, P)),
                    ("free", ctypes.CFUNCTYPE(None, ctypes.c_void_p))]
    _native.Progress, _native._WritePack = Progress, WritePack
print(json.dumps(_native.report()))
"""


@pytest.mark.parametrize("what,off", [("symbol", {"mempack"}), ("layout", {"pack", "mempack"}),
                                      ("progress", {"indexer", "mempack"})])
def test_a_capability_that_fails_its_check_is_off_with_its_reason(what, off):
    r = subprocess.run([sys.executable, "-c", BROKEN, what], capture_output=True, text=True,
                       env=clean_env(TC_NATIVE="on"), timeout=120)
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout.strip().splitlines()[-1])
    assert {c for c, v in rep.items() if v != "on"} == off, rep
    for c in off:
        assert rep[c].startswith("off (") and len(rep[c]) > 8, rep
    if what == "symbol":
        assert "git_no_such_function" in rep["mempack"]


# A whole round: first snapshot, an edit, a second save, export, import elsewhere, restore. Under
# TC_NATIVE=off every ctypes call is audited and pygit2's cffi handle is poisoned, so a native call
# that escaped the gate fails the run.
ROUND = r"""
import json, os, subprocess, sys
mode, ws, other, bundle_in = sys.argv[1:5]
calls = []
def audit(ev, args):  # libgit2 reached through ctypes: its file opened or a git_* symbol looked up
    if (ev == "ctypes.dlopen" and "git2" in str(args[0])) or (ev == "ctypes.dlsym" and str(args[1]).startswith("git_")):
        calls.append(f"{ev} {args[-1]}")
sys.addaudithook(audit)
import pygit2, pygit2.ffi
if mode == "off":
    ffi_mod = sys.modules["pygit2.ffi"]
    class Poison:
        def __getattr__(self, name):
            raise AssertionError(f"pygit2 cffi used under TC_NATIVE=off: {name}")
    ffi_mod.C = Poison()
    ffi_mod.ffi = Poison()
from tc_git.engine import Engine
e = Engine(ws)
e.init(name="native round", goal="g")
first = e.save(title="first")
with open(os.path.join(ws, "a.txt"), "a") as f:
    f.write("more\n")
second = e.save(title="second")
out = {k: {"tree": str(e.repo[v["commit"]].tree_id), "changed": v["changed"]}
       for k, v in (("first", first), ("second", second))}
bundle = os.path.join(os.path.dirname(ws), f"{mode}.bundle")
out["export"] = e.export(bundle)
imp = Engine(other).import_(bundle_in or bundle, apply=True)
out["calls"] = sorted(set(calls))
print(json.dumps(out, default=str))
"""


def _tree(ws) -> dict:
    out = {}
    for dp, dns, fns in os.walk(ws):
        dns[:] = [d for d in dns if d not in (".checkpoints", ".git")]
        for fn in fns:
            p = os.path.join(dp, fn)
            rel = os.path.relpath(p, ws)
            out[os.fsencode(rel)] = os.readlink(p) if os.path.islink(p) else (open(p, "rb").read(), os.access(p, os.X_OK))
    return out


def _workspace(root):
    ws = root / "ws"
    (ws / "src" / "deep").mkdir(parents=True)
    (ws / "a.txt").write_text("hello\n")
    (ws / "src" / "deep" / "b.py").write_text("print(1)\n" * 50)
    run = ws / "run.sh"
    run.write_text("#!/bin/sh\necho hi\n")
    run.chmod(0o755)
    (ws / "link").symlink_to("a.txt")
    (ws / os.fsdecode(b"caf\xe9.txt")).write_bytes(b"latin-1 name\n")
    (ws / "empty").write_bytes(b"")
    (ws / ".gitignore").write_text("*.log\n")
    (ws / "x.log").write_text("ignored\n")
    (ws / os.fsdecode(b"caf\xe9.log")).write_bytes(b"ignored, and its name is not UTF-8\n")
    for i in range(30):
        (ws / "src" / f"f{i}.txt").write_text(f"file {i}\n" * (i + 1))
    return ws


def _round(tmp_path, mode, bundle_in=""):
    base = tmp_path / mode
    base.mkdir()
    ws = _workspace(base)
    other = base / "other"
    other.mkdir()
    r = subprocess.run([sys.executable, "-c", ROUND, mode, str(ws), str(other), bundle_in],
                       capture_output=True, text=True, env=clean_env(TC_NATIVE=mode), timeout=300)
    assert r.returncode == 0, r.stderr[-4000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    out["ws"], out["other"], out["bundle"] = ws, other, base / f"{mode}.bundle"
    return out


def _git(*args, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], capture_output=True, text=True, cwd=cwd, env=clean_env())


def test_native_off_takes_the_fallbacks_and_gives_the_same_result(tmp_path):
    on = _round(tmp_path, "on")
    off = _round(tmp_path, "off", bundle_in=str(tmp_path / "on" / "on.bundle"))  # off reads on's bundle
    assert off["calls"] == [], off["calls"]  # nothing went through ctypes
    assert any("git_odb_write_pack" in c for c in on["calls"]), on["calls"]  # the control: the native run did
    # same trees, byte for byte, whichever path wrote the objects
    for k in ("first", "second"):
        assert on[k]["tree"] == off[k]["tree"], (k, on[k], off[k])
    for r in (on, off):
        store = r["ws"] / ".checkpoints"
        fsck = _git("--git-dir", str(store), "fsck", "--full", "--strict")
        assert fsck.returncode == 0, fsck.stdout + fsck.stderr
        v = _git("bundle", "verify", str(r["bundle"]), cwd=str(store))
        assert v.returncode == 0, v.stderr
        want = {k: v for k, v in _tree(r["ws"]).items() if k not in (b"x.log", b"caf\xe9.log")}  # ignored
        assert _tree(r["other"]) == want  # the import restored every captured file exactly
    assert off["second"]["tree"] != off["first"]["tree"]  # the edit was seen without stat data
    # a store written without native paths, saved again with them: nothing changed, same tree
    third = json.loads(_run("import json; from tc_git.engine import Engine; e = Engine(%r); r = e.save(title='third'); "
                            "print(json.dumps({'tree': str(e.repo[r['commit']].tree_id), 'changed': r['changed']}))"
                            % str(off["ws"]), TC_NATIVE="on"))
    assert third == {"tree": off["second"]["tree"], "changed": 0}, third


def test_nothing_else_goes_below_pygit2s_public_api():
    """ONE boundary: no other module of tc_git imports ctypes or pygit2's cffi, or touches
    pygit2's private handles (`_pointer`, `_index`). Read from the source with ast."""
    import ast
    from pathlib import Path

    import tc_git

    found = []
    for p in sorted(Path(tc_git.__file__).parent.rglob("*.py")):
        if p.name == "_native.py":
            continue
        rel = p.relative_to(Path(tc_git.__file__).parent)
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""] + [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Attribute) and node.attr in ("_pointer", "_index"):
                found.append(f"{rel}:{node.lineno}: .{node.attr}")
                continue
            else:
                continue
            for n in names:
                if n.split(".")[0] in ("ctypes", "cffi", "_cffi_backend") or n.startswith(("pygit2.ffi", "pygit2._")):
                    found.append(f"{rel}:{node.lineno}: import {n}")
    assert found == [], "below pygit2's public API outside tc_git/storage/_native.py:\n" + "\n".join(found)


@pytest.mark.parametrize("native", ["on", "off"])
def test_ignore_rules_hold_for_names_that_are_not_utf8(tmp_path, monkeypatch, native):
    """pygit2 takes only UTF-8 paths; a name that is not (latin-1 from an old archive) is judged
    by the native call, or without it as if each stray byte were any character: `*.log`,
    `build/` and `.env*` rules still keep such files out of the store on every refresh path."""
    from tc_git.engine import Engine
    from tc_git.storage import _native

    monkeypatch.setenv("TC_NATIVE", native)
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / ".gitignore").write_text("*.log\nbuild/\n.env*\n")
    (ws / "keep.txt").write_text("kept\n")
    eng = Engine(ws)
    eng.init("latin-1 names")
    eng.save("start")
    names = (b"sub/caf\xe9.log", b"sub/.env-caf\xe9", b"sub/build/\xff.bin", b"sub/caf\xe9.txt")
    (ws / "sub" / "build").mkdir(parents=True)
    for raw in names:
        (ws / os.fsdecode(raw)).write_bytes(b"secret-ish " + raw + b"\n")
    assert _native.path_is_ignored(eng.repo, os.fsdecode(b"caf\xe9.log"))
    assert not _native.path_is_ignored(eng.repo, os.fsdecode(b"caf\xe9.txt"))
    # a partial refresh names the new directory (the PostToolUse path): its walk judges each name;
    # what it would wrongly take into the index, the full save after it would keep
    eng.capture(paths=["sub"])
    r = eng.save("after")
    got = set()

    def walk(tree, prefix=b""):
        for e in tree:
            name = prefix + e.raw_name
            if e.type_str == "tree":
                walk(eng.repo[e.id], name + b"/")
            else:
                got.add(name)
    walk(eng.repo[r["commit"]].tree)
    assert got == {b".gitignore", b"keep.txt", b"sub/caf\xe9.txt"}, got


def test_streamed_pack_holds_what_the_buffered_pack_holds(tmp_path):
    """A bundle's pack goes to its file as libgit2 produces it (never whole in memory): `git
    index-pack` accepts it and it holds exactly the buffered walk's objects (the delta choices
    may differ); a failing write stops the walk with the writer's own error."""
    import pygit2

    if not _native.has(_native.PACK):
        pytest.skip(f"native pack unavailable: {_native.report()[_native.PACK]}")
    repo = pygit2.init_repository(str(tmp_path / "r.git"), bare=True)
    tb = repo.TreeBuilder()
    for i in range(300):
        tb.insert(f"f{i}", repo.create_blob(os.urandom(64) + b"x" * i), pygit2.enums.FileMode.BLOB)
    sig = pygit2.Signature("t", "t@x", 0, 0)
    tip = repo.create_commit(None, sig, sig, "m", tb.write(), [])

    def ids(data: bytes, name: str) -> list[str]:
        (tmp_path / f"{name}.pack").write_bytes(data)
        r = subprocess.run(["git", "index-pack", str(tmp_path / f"{name}.pack")], capture_output=True,
                           env=clean_env())
        assert r.returncode == 0, r.stderr
        with open(tmp_path / f"{name}.idx", "rb") as f:
            out = subprocess.run(["git", "show-index"], stdin=f, capture_output=True, text=True, env=clean_env())
        return sorted(line.split()[1] for line in out.stdout.splitlines())

    n, whole = _native.pack_walk(repo, [str(tip)])
    chunks: list[bytes] = []
    count, size = _native.pack_walk_to(repo, [str(tip)], [], chunks.append)
    streamed = b"".join(chunks)
    assert (count, size) == (n, len(streamed)) and n == 302 and len(chunks) > 300
    assert ids(streamed, "s") == ids(whole, "w") and len(ids(whole, "w")) == 302

    def full(_b):
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match="No space"):
        _native.pack_walk_to(repo, [str(tip)], [], full)
