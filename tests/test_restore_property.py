"""Property: restore reproduces any step exactly, and undoing it reproduces the pre-restore tree.

Random sequences of writes (empty files included), deletes, chmod +x/-x, symlinks (dangling ones
too), renames of files and directories, file<->directory swaps and a non-UTF-8 name, with saves,
captures and restores at random points. Ignored files and a nested git repository (its own .git
and files) must never be touched: bytes and mtimes are compared.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile

from conftest import clean_env, fsck, tree_state
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tc_git.engine import Engine

POOL = [b"a", b"b.txt", b"d", b"d/x", b"d/y.py", b"d/e", b"d/e/z", b"e", b"caf\xe9.txt", b"sp ace", b"e/deep/f"]
UNTOUCHABLE = (b".checkpoints", b"nested", b"build", b"top.log")

paths = st.sampled_from(POOL)
ops = st.one_of(
    st.tuples(st.just("write"), paths, st.one_of(st.just(b""), st.binary(max_size=48))),
    st.tuples(st.just("delete"), paths),
    st.tuples(st.just("chmod"), paths, st.booleans()),
    st.tuples(st.just("symlink"), paths, st.sampled_from(POOL + [b"nowhere", b"../outside"])),
    st.tuples(st.just("rename"), paths, paths),
    st.tuples(st.just("save")),
    st.tuples(st.just("capture")),
    st.tuples(st.just("restore"), st.integers(0, 20)),
)


def _j(root: bytes, rel: bytes) -> bytes:
    return os.path.join(root, rel)


def _is_dir(p: bytes) -> bool:
    return os.path.isdir(p) and not os.path.islink(p)


def _prepare(root: bytes, rel: bytes, replace_file: bool) -> None:
    """Make room for a file/link at `rel`: ancestors that are files or links go, a directory at
    `rel` goes; an existing file stays unless `replace_file` (links are always replaced)."""
    parts = rel.split(b"/")
    for i in range(1, len(parts)):
        anc = _j(root, b"/".join(parts[:i]))
        if os.path.lexists(anc) and not _is_dir(anc):
            os.unlink(anc)
    full = _j(root, rel)
    if _is_dir(full):
        shutil.rmtree(full)
    elif os.path.islink(full) or (replace_file and os.path.lexists(full)):
        os.unlink(full)
    os.makedirs(os.path.dirname(full), exist_ok=True)


def _apply(root: bytes, op) -> None:
    kind = op[0]
    if kind == "write":
        _prepare(root, op[1], replace_file=False)
        with open(_j(root, op[1]), "wb") as f:
            f.write(op[2])
    elif kind == "delete":
        full = _j(root, op[1])
        if _is_dir(full):
            shutil.rmtree(full)
        elif os.path.lexists(full):
            os.unlink(full)
    elif kind == "chmod":
        full = _j(root, op[1])
        if os.path.isfile(full) and not os.path.islink(full):
            os.chmod(full, 0o755 if op[2] else 0o644)
    elif kind == "symlink":
        _prepare(root, op[1], replace_file=True)
        os.symlink(op[2], _j(root, op[1]))
    elif kind == "rename":
        src, dst = op[1], op[2]
        if src == dst or dst.startswith(src + b"/") or src.startswith(dst + b"/"):
            return
        if not os.path.lexists(_j(root, src)):
            return
        _prepare(root, dst, replace_file=True)
        if os.path.lexists(_j(root, src)):
            os.rename(_j(root, src), _j(root, dst))


def _state(root: bytes) -> dict:
    return tree_state(root, skip=UNTOUCHABLE)


def _untouchable(root: bytes) -> dict:
    out = {}
    for name in UNTOUCHABLE[1:]:
        p = _j(root, name)
        if os.path.isdir(p):
            for rel, v in tree_state(p, skip=(), with_mtime=True).items():
                out[name + b"/" + rel] = v
            for dirpath, _dirs, _files in os.walk(p):
                out[os.path.relpath(dirpath, root) + b"/"] = os.lstat(dirpath).st_mtime_ns
        else:
            st_ = os.lstat(p)
            with open(p, "rb") as f:
                out[name] = (f.read(), st_.st_mtime_ns)
    return out


def _setup(root: bytes) -> None:
    with open(_j(root, b".gitignore"), "wb") as f:
        f.write(b"*.log\n/build/\n")
    os.makedirs(_j(root, b"build/obj"))
    with open(_j(root, b"build/obj/out.o"), "wb") as f:
        f.write(b"\x7fELF ignored build output")
    with open(_j(root, b"top.log"), "wb") as f:
        f.write(b"ignored log\n")
    nested = _j(root, b"nested")
    env = clean_env(GIT_AUTHOR_NAME="n", GIT_AUTHOR_EMAIL="n@x", GIT_COMMITTER_NAME="n", GIT_COMMITTER_EMAIL="n@x")
    subprocess.run(["git", "init", "-q", nested], check=True, env=env)
    with open(_j(nested, b"lib.py"), "wb") as f:
        f.write(b"nested = True\n")
    subprocess.run(["git", "-C", nested, "add", "lib.py"], check=True, env=env)
    subprocess.run(["git", "-C", nested, "commit", "-qm", "nested"], check=True, env=env)
    with open(_j(nested, b"dirty.txt"), "wb") as f:
        f.write(b"uncommitted in the nested repo\n")


def _restore_and_undo(e: Engine, root: bytes, index: int, expected: dict) -> None:
    pre = _state(root)
    preview = e.restore(index=index)
    r = e.restore(index=index, apply=True)
    assert r["applied"] and r["failed"] == [], r
    assert r["plan"] == preview["plan"], "preview and apply must compute the same plan"
    assert r["plan"]["unrestorable"] == []
    got = _state(root)
    assert got == expected, _explain(got, expected)
    # the restore commit records exactly what is on disk: a full snapshot finds nothing new
    assert e.capture()["captured"] is False, "restore commit differs from the workspace"
    u = e.restore(drift_id=r["recovered"], apply=True)
    assert u["failed"] == [], u
    got = _state(root)
    assert got == pre, "undo must give back the pre-restore tree: " + _explain(got, pre)
    assert e.capture()["captured"] is False, "undo commit differs from the workspace"


def _explain(got: dict, want: dict) -> str:
    diff = sorted(k for k in set(got) | set(want) if got.get(k) != want.get(k))
    return "; ".join(f"{k!r}: got {got.get(k)!r} want {want.get(k)!r}" for k in diff[:6])


@settings(max_examples=int(os.environ.get("PROP_EXAMPLES", "25")), deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(ops, min_size=1, max_size=24))
def test_restore_any_step_and_undo(sequence):
    old_umask = os.umask(0o022)  # restore writes files with the umask, as git does
    tmp = tempfile.mkdtemp(prefix="tc-prop-")
    try:
        root = os.fsencode(os.path.join(tmp, "ws"))
        os.mkdir(root)
        _setup(root)
        fence = _untouchable(root)
        e = Engine(os.fsdecode(root))
        e.init("property")
        steps: dict[int, dict] = {}
        for n, op in enumerate(list(sequence) + [("save",)]):
            if op[0] == "save":
                r = e.save(f"save {n}")
                assert not r["idempotent"]
                steps[r["index"]] = _state(root)
            elif op[0] == "capture":
                e.capture()
            elif op[0] == "restore":
                if steps:
                    k = sorted(steps)[op[1] % len(steps)]
                    _restore_and_undo(e, root, k, steps[k])
            else:
                _apply(root, op)
        for k in sorted(steps):
            _restore_and_undo(e, root, k, steps[k])
        # finally leave the workspace at step 1 and check the chain still reads back
        e.restore(index=min(steps), apply=True)
        assert _state(root) == steps[min(steps)]
        assert _untouchable(root) == fence, "ignored files / nested repo were touched"
        fsck(e.store.path)
    finally:
        os.umask(old_umask)
        shutil.rmtree(tmp, ignore_errors=True)
