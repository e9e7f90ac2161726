"""Trust boundary, workspace side: tree entry names, race-safe writes and deletes, verified writes.

Hostile trees are crafted with stock git (`git hash-object -t tree --literally` takes any raw
entry), put into a store as a step, and restored. Nothing may be written outside the workspace,
into the user's `.git`, into the store's own directory, or under a nested repository; no hook
may run. Races swap directories for links to an outside directory while restores run; a full
tmpfs makes writes fail; a forced TC_PATH_RULES simulates Windows and macOS file systems.
"""
from __future__ import annotations

import hashlib
import os
import random
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest
from conftest import clean_env, fsck, git, tc, tree_state, write

from tc_git.base import fsutil
from tc_git.engine import Engine
from tc_git.workspace import pathsafe, wsfs


# ----------------------------------------------------------------------------- helpers
def g(*args, cwd=None, input=None) -> str:
    r = subprocess.run(["git", *map(str, args)], cwd=cwd, capture_output=True, env=clean_env(), input=input)
    assert r.returncode == 0, f"git {args}: {r.stderr.decode(errors='replace')}"
    return r.stdout.decode(errors="replace")


def blob(store, data: bytes) -> str:
    return git(store, "hash-object", "-w", "--stdin", input=data).decode().strip()


def raw_tree(store, entries) -> str:
    """A tree object from raw (mode, name, oid-hex) entries, any name at all, sorted like git."""
    def key(e):
        return e[1] + (b"/" if e[0] == b"40000" else b"")
    raw = b"".join(m + b" " + n + b"\0" + bytes.fromhex(o) for m, n, o in sorted(entries, key=key))
    return git(store, "hash-object", "-w", "--stdin", "-t", "tree", "--literally", input=raw).decode().strip()


def ls_tree(store, treeish) -> list[tuple[bytes, bytes, str]]:
    out = []
    for line in git(store, "ls-tree", "-z", treeish).split(b"\0"):
        if line:
            meta, name = line.split(b"\t", 1)
            mode, _typ, oid = meta.split()
            out.append((mode.lstrip(b"0") if mode != b"040000" else b"40000", name, oid.decode()))
    return out


def chain_tree(store, components: list[bytes], leaf_mode: bytes, leaf_oid: str) -> tuple[bytes, bytes, str]:
    """Root entry for components[0]/.../components[-1] (each component raw, possibly hostile)."""
    mode, oid = leaf_mode, leaf_oid
    for comp in reversed(components[1:]):
        oid, mode = raw_tree(store, [(mode, comp, oid)]), b"40000"
    return (mode, components[0], oid)


def add_step(store: Path, tid: str, extra_entries, title="hostile") -> int:
    """Append a step to the task whose tree is the head's tree plus raw `extra_entries`
    (what a tampered store, bundle or remote could hold). Returns its step number."""
    ref = f"refs/checkpoints/tasks/{tid}/head"
    head = git(store, "rev-parse", ref).decode().strip()
    msg = git(store, "log", "-1", "--format=%B", head).decode()
    step = max(int(line.split(":")[1]) for line in msg.splitlines() if line.startswith("Tc-Step:")) + 1
    lines = [f"step {step}: {title}"] + msg.splitlines()[1:]
    lines = [f"Tc-Step: {step}" if ln.startswith("Tc-Step:") else
             "Tc-Kind: step" if ln.startswith("Tc-Kind:") else ln for ln in lines]
    tree = raw_tree(store, ls_tree(store, head + "^{tree}") + list(extra_entries))
    env = clean_env(GIT_AUTHOR_NAME="x", GIT_AUTHOR_EMAIL="x@x", GIT_COMMITTER_NAME="x", GIT_COMMITTER_EMAIL="x@x")
    c = subprocess.run(["git", f"--git-dir={store}", "commit-tree", tree, "-p", head], input="\n".join(lines).encode(),
                       capture_output=True, env=env, check=True).stdout.decode().strip()
    git(store, "update-ref", ref, c, head)
    return step


def outside_state(root: Path) -> dict:
    """Every file and link under `root` (bytes and link targets), directories included."""
    out = {}
    for dirpath, dirs, files in os.walk(root):
        for n in dirs + files:
            p = Path(dirpath) / n
            rel = p.relative_to(root).as_posix()
            if p.is_symlink():
                out[rel] = ("link", os.readlink(p))
            elif p.is_file():
                out[rel] = ("file", hashlib.sha256(p.read_bytes()).hexdigest())
            else:
                out[rel] = ("dir",)
    return out


# ----------------------------------------------------------------------------- names
@pytest.mark.parametrize("name", [
    b"", b".", b"..", b"a/b", b"/etc/passwd", b"a\0b", b".git", b".GIT", b".Git", b".git.", b".git  ",
    b".git. .", b"git~1", b"GIT~1", b"git~1..", b".git::$INDEX_ALLOCATION", b".git:x", b".git\\hooks",
    b"x\\.git", ".g\u200cit".encode(), ".\u200dGIT".encode(), "\ufeff.git".encode(), ".gi\u206ft".encode(),
])
def test_refused_names(name):
    assert pathsafe.check_tree_name(name) is not None, name
    assert pathsafe.check_tree_name(name, at_root=True) is not None, name


@pytest.mark.parametrize("name", [
    b"a", b".gitignore", b".gitattributes", b".github", b".gitx", b"git", b"git~2", b"x.git", b"..a", b"...",
    b"caf\xe9", "caf\u00e9".encode(), b".g\xc5\x87it", b"CON", b"aux.txt", b"with space ", b"a:b", b".checkpoints",
])
def test_accepted_names(name):
    assert pathsafe.check_tree_name(name) is None, name


def test_root_only_and_symlink_only_rules():
    for name in (b".checkpoints", b".CHECKPOINTS", b".checkpoints.", b".task-checkpoint-store.json",
                 b".Task-Checkpoint-Store.JSON", ".checkpoint\u200cs".encode()):
        assert pathsafe.check_tree_name(name) is None
        assert pathsafe.check_tree_name(name, at_root=True), name
    for name in (b".gitmodules", b".GITMODULES", b".gitmodules.", b"gitmod~1", b"GI7EBA~1", b"gi7eb~12"):
        assert pathsafe.check_tree_name(name, mode=pathsafe.MODE_LINK), name
        assert pathsafe.check_tree_name(name, mode=pathsafe.MODE_BLOB) is None, name
    assert pathsafe.check_path("sub/dir/.git/hooks/post-checkout")
    assert pathsafe.check_path(".checkpoints/tc/x") and pathsafe.check_path("/abs") and pathsafe.check_path("a//b")
    assert pathsafe.check_path("deep/.checkpoints/x") is None  # only the root's is the store


def test_platform_rules():
    win = {"CON": True, "con": True, "aux.txt": True, "Com1.log": True, "LPT9": True, "nul .txt": True,
           "COM\u00b9": True, "conin$": True, "trail.": True, "trail ": True, "a:b": True, "q?": True, "p|q": True,
           "b\\c": True, "ctl\x01": True, 'q"': True, "CONSOLE": False, "NULL.txt": False, "ok.txt": False,
           "dir/CON/x": True, "caf\u00e9": False}
    for name, bad in win.items():
        assert bool(pathsafe.platform_problem(name, "windows")) is bad, name
        assert pathsafe.platform_problem(name, "posix") is None
    assert pathsafe.platform_problem(b"caf\xe9", "macos")  # not UTF-8: APFS cannot hold it
    assert pathsafe.fold_key("A.txt", "windows") == pathsafe.fold_key("a.TXT", "windows")
    assert pathsafe.fold_key("Stra\u00dfe", "windows") != pathsafe.fold_key("STRASSE", "windows")
    assert pathsafe.fold_key("caf\u00e9", "macos") == pathsafe.fold_key("CAFE\u0301", "macos")
    assert pathsafe.fold_key("caf\u00e9", "windows") != pathsafe.fold_key("cafe\u0301", "windows")
    assert pathsafe.fold_key("A", "posix") is None


def test_check_tree_walks_every_level_and_stock_git_agrees(tmp_path):
    store = tmp_path / "s.git"
    g("init", "-q", "--bare", store)
    b = blob(store, b"x\n")
    import pygit2
    repo = pygit2.Repository(str(store))
    good = raw_tree(store, [(b"100644", b"a.txt", b), chain_tree(store, [b"src", b"lib", b"m.py"], b"100644", b)])
    assert pathsafe.check_tree(repo, good) == []
    for comps in ([b"sub", b".git", b"hooks", b"post-checkout"], [b"a", b"b", b".."], [b"d", b"GIT~1", b"config"],
                  [b"x", ".g\u200cit".encode(), b"config"]):
        bad = raw_tree(store, [(b"100644", b"a.txt", b), chain_tree(store, comps, b"100644", b)])
        probs = pathsafe.check_tree(repo, bad)
        assert len(probs) == 1, probs
        # git's own fsck flags the same tree (hasDotgit / hasDotdot): we are at least as strict
        fs = subprocess.run(["git", f"--git-dir={store}", "fsck", "--full"], capture_output=True, env=clean_env())
        assert fs.returncode != 0 or b"warning" in fs.stderr
    dup = raw_tree(store, [(b"100644", b"lnk", b), (b"40000", b"lnk", good)])
    assert "duplicate" in pathsafe.check_tree(repo, dup)[0][1]
    seen: dict = {}
    assert pathsafe.check_tree(repo, good, seen) == [] and seen
    assert pathsafe.check_tree(repo, good, seen) == []


# ----------------------------------------------------------------------------- restore of hostile trees
@pytest.fixture
def victim(tmp_path):
    """A user's repository (with a planted-hook marker) whose workspace has a task of one step."""
    parent = tmp_path / "parent"
    ws = parent / "ws"
    ws.mkdir(parents=True)
    g("init", "-q", "-b", "main", cwd=ws)
    write(ws, "README.md", "# project\n")
    g("-c", "user.name=u", "-c", "user.email=u@x", "add", "-A", cwd=ws)
    g("-c", "user.name=u", "-c", "user.email=u@x", "commit", "-qm", "init", cwd=ws)
    write(ws, ".git/hooks/pre-commit", "#!/bin/sh\nexit 0\n", 0o755)
    # a nested repository inside the workspace: never written
    (ws / "vendor" / "lib").mkdir(parents=True)
    g("init", "-q", ws / "vendor" / "lib")
    write(ws, "vendor/lib/keep.c", "int x;\n")
    write(ws, "src/app.py", "print(1)\n")
    e = Engine(ws)
    tid = e.init("victim")["task_id"]
    e.save("one")
    abs_dir = tmp_path / "abs"
    abs_dir.mkdir()
    return {"tmp": tmp_path, "parent": parent, "ws": ws, "engine": e, "tid": tid, "store": ws / ".checkpoints",
            "abs": abs_dir, "marker": tmp_path / "HOOK-RAN"}


def hostile_entries(store: Path, marker: Path, abs_dir: Path) -> list:
    hook = blob(store, f"#!/bin/sh\ntouch {marker}\n".encode())
    b = blob(store, b"pwned\n")
    ex = b"100755"
    return [
        chain_tree(store, [b"..", b"escaped.txt"], b"100644", b),
        (b"100644", b"../escaped2.txt", b),
        (b"100644", os.fsencode(abs_dir / "abs.txt"), b),
        chain_tree(store, [b".", b"dot.txt"], b"100644", b),
        (b"100644", b"a/b", b),
        chain_tree(store, [b".git", b"hooks", b"post-checkout"], ex, hook),
        chain_tree(store, [b".GIT", b"hooks", b"post-merge"], ex, hook),
        chain_tree(store, [b"git~1", b"hooks", b"post-commit"], ex, hook),
        chain_tree(store, [b".git.", b"hooks", b"pre-push"], ex, hook),
        chain_tree(store, [".g\u200cit".encode(), b"hooks", b"pre-rebase"], ex, hook),
        chain_tree(store, [b"sub", b".git", b"hooks", b"post-checkout"], ex, hook),
        chain_tree(store, [b".checkpoints", b"hooks", b"post-update"], ex, hook),
        chain_tree(store, [b".checkpoints", b"tc", b"active-task"], b"100644", b),
        (b"100644", b".task-checkpoint-store.json", blob(store, b'{"store": ".git"}')),
        chain_tree(store, [b"vendor", b"lib", b"planted.c"], b"100644", b),
        (b"120000", b".gitmodules", blob(store, b"/etc/passwd")),
        (b"100644", b"fine.txt", blob(store, b"fine\n")),
    ]


def hook_check(ws: Path, marker: Path) -> None:
    """Run the operations whose hooks a planted file would trigger; none may run."""
    g("-c", "user.name=u", "-c", "user.email=u@x", "checkout", "-q", "-b", "probe", cwd=ws)
    g("-c", "user.name=u", "-c", "user.email=u@x", "commit", "-q", "--allow-empty", "-m", "probe", cwd=ws)
    assert not marker.exists(), "a planted hook ran"


def test_restore_of_a_tampered_store_writes_only_inside_the_workspace(victim):
    v = victim
    ws, store, e = v["ws"], v["store"], v["engine"]
    step = add_step(store, v["tid"], hostile_entries(store, v["marker"], v["abs"]))
    before_git = outside_state(ws / ".git")
    before_vendor = outside_state(ws / "vendor")
    before_store_files = {p for p in outside_state(store) if p.startswith(("hooks", "tc/"))}
    before_tmp = {k: x for k, x in outside_state(v["tmp"]).items() if not k.startswith("parent/ws/")}
    pv = e.restore(step)
    bad = {u["path"] for u in pv["plan"]["unrestorable"]}
    # `a/b` as one entry name cannot be told from a/b once flattened: it lands inside the
    # workspace (import and pull refuse such a tree before that)
    assert pv["plan"]["to_write"] == ["a/b", "fine.txt"], pv["plan"]
    assert {"../escaped.txt", "../escaped2.txt", ".git/hooks/post-checkout", "sub/.git/hooks/post-checkout",
            ".checkpoints/hooks/post-update", ".task-checkpoint-store.json", "vendor/lib/planted.c", ".gitmodules"} <= bad, bad
    r = e.restore(step, apply=True)
    assert r["applied"] and r["failed"] == [], r
    assert (ws / "fine.txt").read_text() == "fine\n"
    assert {k: x for k, x in outside_state(v["tmp"]).items() if not k.startswith("parent/ws/")} == before_tmp
    assert outside_state(ws / ".git") == before_git and outside_state(ws / "vendor") == before_vendor
    assert not (ws / "sub").exists() and not (ws / ".gitmodules").exists()
    assert not (ws / ".task-checkpoint-store.json").exists() and not (ws / "GIT~1").exists()
    assert {p for p in outside_state(store) if p.startswith(("hooks", "tc/"))} <= before_store_files | {
        "tc/restore-journal.json"} and not (store / "hooks" / "post-update").exists()
    hook_check(ws, v["marker"])
    # the vendor repository appeared after the step (live detection): the restore commit records
    # what is on disk and undo brings back the pre-restore tree
    u = e.restore(drift_id=r["recovered"], apply=True)
    assert u["applied"] and not (ws / "fine.txt").exists()


def test_nested_repository_that_appears_after_a_step_is_never_touched(tmp_path):
    ws = tmp_path / "ws"
    write(ws, "lib/a.c", "int a;\n")
    write(ws, "lib/sub/b.c", "int b;\n")
    e = Engine(ws)
    e.init("nested")
    e.save("one")
    write(ws, "lib/a.c", "int a2;\n")
    e.save("two")
    os.unlink(ws / "lib/sub/b.c")
    g("init", "-q", ws / "lib")  # lib/ became a repository of its own after step two
    write(ws, "lib/new.c", "int n;\n")
    before = tree_state(ws / "lib")
    r = e.restore(1, apply=True)
    assert r["failed"] == [] and tree_state(ws / "lib") == before, r
    assert {u["path"] for u in r["plan"]["unrestorable"]} >= {"lib/a.c"} or r["plan"]["counts"]["to_replace"] == 0


def test_writes_never_follow_a_link_planted_in_place_of_a_directory(tmp_path):
    ws, out = tmp_path / "ws", tmp_path / "outside"
    write(ws, "d/f.txt", "mine\n")
    write(out, "f.txt", "outside\n")
    e = Engine(ws)
    e.init("links")
    e.save("one")
    shutil.rmtree(ws / "d")
    os.symlink(out, ws / "d")  # planned as "d is a link now", restore must not write through it
    before = outside_state(out)
    r = e.restore(1, apply=True)
    assert outside_state(out) == before
    assert (ws / "d").is_dir() and not (ws / "d").is_symlink() and (ws / "d/f.txt").read_text() == "mine\n" \
        or r["failed"], r
    # and a layer-level check: the descriptor walk refuses a link it meets
    os.makedirs(ws / "x")
    os.symlink(out, ws / "x" / "y")
    with wsfs.Writer(ws) as w:
        with pytest.raises(OSError):
            w.write("x/y/f.txt", b"evil\n", pathsafe.MODE_BLOB)
        with pytest.raises(OSError):
            w.delete("x/y/f.txt")
    assert outside_state(out) == before and not list(ws.glob("x/.*.tc-*"))


# ----------------------------------------------------------------------------- races
def _swap_dirs(ws: Path, out: Path, ndirs: int, stop: threading.Event, seed: int) -> None:
    order = list(range(ndirs))
    random.Random(seed).shuffle(order)
    for d in order:
        if stop.is_set():
            return
        src = ws / f"d{d}"
        try:
            os.rename(src, ws / f"d{d}.moved")
            os.symlink(out / f"d{d}", src)
        except OSError:
            pass
        time.sleep(0.0005)


def _unswap(ws: Path, ndirs: int) -> None:
    for d in range(ndirs):
        p = ws / f"d{d}"
        if p.is_symlink():
            os.unlink(p)
        if (ws / f"d{d}.moved").exists():
            if p.exists():
                shutil.rmtree(p)
            os.rename(ws / f"d{d}.moved", p)


def test_race_dirs_swapped_for_links_to_outside_while_restores_run(tmp_path, monkeypatch):
    """Directories are replaced by links to an outside tree holding the same names while a
    restore deletes them (even trials) or writes them back (odd trials): no outside file is ever
    deleted or written, whatever the interleaving. 20 trials run the restore's apply step
    (plan + apply_plan, where the race lives), two more the whole engine restore."""
    from tc_git.timeline import restore as restore_mod

    monkeypatch.setenv(fsutil.FSYNC_ENV, "off")  # the race is about paths, not durability: keep it fast
    ws, out = tmp_path / "ws", tmp_path / "outside"
    ndirs, per = 40, 50  # 2000 files
    for d in range(ndirs):
        for i in range(per):
            write(ws, f"d{d}/f{i}.txt", f"ws {d} {i}\n")
            write(out, f"d{d}/f{i}.txt", f"outside {d} {i}\n")
    e = Engine(ws)
    e.init("race")
    full = e.repo[e.save("full")["commit"]].tree
    for d in range(ndirs):
        shutil.rmtree(ws / f"d{d}")
    write(ws, "keep.txt", "k\n")
    empty = e.repo[e.save("empty")["commit"]].tree
    before = outside_state(out)
    started = time.monotonic()
    for trial in range(22):
        deleting = trial % 2 == 1  # the workspace starts empty: write first
        stop = threading.Event()
        t = threading.Thread(target=_swap_dirs, args=(ws, out, ndirs, stop, trial))
        t.start()
        try:
            if trial < 20:
                src, dst = (full, empty) if deleting else (empty, full)
                failed = restore_mod.apply_plan(e.repo, restore_mod.make_plan(e.repo, src, dst))
                assert all(f["reason"] for f in failed)
            else:
                r = e.restore(2 if deleting else 1, apply=True)
                assert r["applied"] is (not r["failed"]), r
        finally:
            stop.set()
            t.join()
        assert outside_state(out) == before, f"trial {trial}: an outside file changed"
        _unswap(ws, ndirs)
    assert outside_state(out) == before
    assert time.monotonic() - started < 240, "far slower than the ~60 s budget"


# ----------------------------------------------------------------------------- full disk
@pytest.fixture
def tiny_fs(tmp_path):
    mnt = tmp_path / "tiny"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)], capture_output=True)
    if r.returncode:
        pytest.skip(f"cannot mount a 2 MB tmpfs here ({r.stderr.decode(errors='replace').strip()}): "
                    "the full-disk test needs root or CAP_SYS_ADMIN")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def test_full_disk_restore_fails_cleanly_and_undo_is_exact(tiny_fs, tmp_path):
    ws = tiny_fs / "ws"
    big = os.urandom(1_200_000)
    write(ws, "big.bin", big)
    write(ws, "small.txt", "s1\n")
    e = Engine(ws, store=str(tmp_path / "store"))  # the store lives on a disk with room
    e.init("full disk")
    e.save("big")
    write(ws, "big.bin", b"small now\n" * 1000)
    write(ws, "small.txt", "s2\n")
    write(ws, "other.txt", "o\n")
    e.save("small")
    with open(tiny_fs / "filler", "wb") as f:  # leave ~600 KB: big.bin cannot be written back
        free = shutil.disk_usage(tiny_fs).free
        f.write(b"\0" * max(0, free - 600_000))
    pre = tree_state(ws)
    r = e.restore(1, apply=True)
    assert r["applied"] is False, r
    assert [f["path"] for f in r["failed"]] == ["big.bin"] and "space" in r["failed"][0]["reason"].lower(), r
    assert (ws / "big.bin").read_bytes() == b"small now\n" * 1000  # never truncated, old content kept
    assert not [p for p in os.listdir(ws) if ".tc-" in p], os.listdir(ws)
    # what the restore commit recorded is what is on disk (not the planned content)
    rec = git(tmp_path / "store", "show", f"{r['commit']}:big.bin")
    assert rec == b"small now\n" * 1000
    u = e.restore(drift_id=r["recovered"], apply=True)
    assert u["applied"] and u["failed"] == [] and tree_state(ws) == pre
    # the CLI says so too (never "preview"), and its undo is exact as well
    out = tc("restore", "1", "--apply", cwd=ws, env=clean_env(TC_STORE=tmp_path / "store"))
    text = out.stdout.decode()
    assert "INCOMPLETE" in text and "failed   big.bin" in text, text
    assert not [p for p in os.listdir(ws) if ".tc-" in p]
    tc("undo", cwd=ws, env=clean_env(TC_STORE=tmp_path / "store"), check=True)
    assert tree_state(ws) == pre
    fsck(tmp_path / "store")


def test_layer_write_is_verified_and_leaves_no_temporary(tiny_fs):
    d = tiny_fs / "w"
    d.mkdir()
    (d / "f").write_bytes(b"old")
    with wsfs.Writer(d) as w:
        with pytest.raises(OSError):
            w.write("f", os.urandom(3_000_000), pathsafe.MODE_BLOB)
        with pytest.raises(OSError, match="does not hash"):
            w.write("f", b"new", pathsafe.MODE_BLOB, expect_id="0" * 40)
        w.write("f", b"new", pathsafe.MODE_BLOB, expect_id=wsfs.blob_id(b"new"))
    with wsfs.Writer(d, fsync="all") as w:  # TC_RESTORE_FSYNC=all: every file synced
        w.write("g", b"synced", pathsafe.MODE_EXEC, expect_id=wsfs.blob_id(b"synced"))
    assert (d / "f").read_bytes() == b"new" and sorted(os.listdir(d)) == ["f", "g"]
    assert os.stat(d / "g").st_mode & 0o111


# ----------------------------------------------------------------------------- other file systems
def test_windows_and_case_insensitive_names_are_reported_never_half_written(tmp_path, monkeypatch):
    ws = tmp_path / "ws"
    names = ["CON", "aux.txt", "trail.", "sp ", "colon:x", "A.txt", "a.txt", "ok.txt", "fine.txt", "dir/LPT1"]
    write(ws, ".gitignore", "Ok.TXT\n")
    for n in names:
        write(ws, n, f"{n}\n")
    e = Engine(ws)
    e.init("windows")
    e.save("all names")
    for n in names:
        os.unlink(ws / n)
    e.save("none")
    write(ws, "Ok.TXT", "ignored, on disk\n")  # not captured: ok.txt would overwrite it on NTFS
    monkeypatch.setenv("TC_PATH_RULES", "windows")
    refused = {"CON", "aux.txt", "trail.", "sp ", "colon:x", "A.txt", "a.txt", "dir/LPT1"}
    pv = e.restore(1)
    bad = {u["path"]: u["reason"] for u in pv["plan"]["unrestorable"]}
    assert refused <= set(bad) and "case-insensitive" in bad["A.txt"] and "reserved" in bad["CON"], bad
    r = e.restore(1, apply=True)
    after = tree_state(ws)
    assert not {os.fsencode(n) for n in refused} & set(after), after.keys()
    assert r["failed"] == [] and r["applied"], r
    assert after[b"fine.txt"][1] == b"fine.txt\n" and after[b"Ok.TXT"][1] == b"ignored, on disk\n"
    assert b"ok.txt" not in after
    assert any(u["path"] == "ok.txt" and "collides" in u["reason"] for u in r["plan"]["unrestorable"]), r["plan"]


def test_macos_rules_fold_unicode_normalization(tmp_path, monkeypatch):
    ws = tmp_path / "ws"
    write(ws, "caf\u00e9.txt", "nfc\n")
    write(ws, "cafe\u0301.txt", "nfd\n")
    write(ws, "plain.txt", "p\n")
    e = Engine(ws)
    e.init("mac")
    e.save("both")
    for n in ("caf\u00e9.txt", "cafe\u0301.txt", "plain.txt"):
        os.unlink(ws / n)
    e.save("none")
    monkeypatch.setenv("TC_PATH_RULES", "macos")
    r = e.restore(1, apply=True)
    assert sorted(os.listdir(ws)) == [".checkpoints", "plain.txt"], os.listdir(ws)
    assert len(r["plan"]["unrestorable"]) == 2 and r["applied"], r


def test_trajectory_checkout_with_code_goes_through_the_same_checks(victim):
    v = victim
    ws, store, e = v["ws"], v["store"], v["engine"]
    step = add_step(store, v["tid"], hostile_entries(store, v["marker"], v["abs"]))
    e.restore(step, apply=True)  # the milestone's code moment is the tampered step
    rec = e.record(steps=[{"role": "user", "content": "go"}, {"role": "assistant", "content": "ok"}],
                   session="s1", milestone="tampered")
    assert rec["milestone"]["code_commit"]
    e.restore(1, apply=True)
    before_git = outside_state(ws / ".git")
    before_tmp = {k: x for k, x in outside_state(v["tmp"]).items() if not k.startswith("parent/ws/")}
    co = e.checkout("tampered", restore_code=True, apply=True)
    r = co["restore"]
    assert r["applied"] and r["failed"] == [], r
    assert ".git/hooks/post-checkout" in {u["path"] for u in r["plan"]["unrestorable"]}
    assert outside_state(ws / ".git") == before_git
    assert {k: x for k, x in outside_state(v["tmp"]).items() if not k.startswith("parent/ws/")} == before_tmp
    hook_check(ws, v["marker"])


def test_unparsable_tree_is_a_clear_error_with_nothing_written(tmp_path):
    """A raw tree entry whose name holds a NUL cannot even be parsed: a clear error, not a crash."""
    from tc_git.base.errors import BadInput

    ws = tmp_path / "ws"
    write(ws, "a.txt", "a\n")
    e = Engine(ws)
    e.init("nul")
    e.save("one")
    store = ws / ".checkpoints"
    b = bytes.fromhex(blob(store, b"z\n"))
    bad = git(store, "hash-object", "-w", "--stdin", "-t", "tree", "--literally",
              input=b"100644 a\0b\0" + b).decode().strip()
    import pygit2
    assert "unreadable" in pathsafe.check_tree(pygit2.Repository(str(store)), bad)[0][1]
    step = add_step(store, e.store.active_task(), [(b"40000", b"nul", bad)])
    before = tree_state(ws)
    with pytest.raises(BadInput, match="unreadable"):
        e.restore(step, apply=True)
    assert tree_state(ws) == before


def test_a_file_that_appears_between_plan_and_write_is_never_replaced(tmp_path):
    from tc_git.timeline import restore as restore_mod

    ws = tmp_path / "ws"
    write(ws, "new.txt", "from the step\n")
    write(ws, "link", "x")
    e = Engine(ws)
    e.init("appear")
    full = e.repo[e.save("one")["commit"]].tree
    os.unlink(ws / "new.txt")
    os.unlink(ws / "link")
    empty = e.repo[e.save("two")["commit"]].tree
    plan = restore_mod.make_plan(e.repo, empty, full)
    assert sorted(p for p, _o, _m in plan.to_write) == ["link", "new.txt"]
    write(ws, "new.txt", "written by someone else meanwhile\n")  # after the plan, before the write
    failed = restore_mod.apply_plan(e.repo, plan)
    assert failed == [] and (ws / "new.txt").read_text() == "written by someone else meanwhile\n"
    assert [u["path"] for u in plan.unrestorable] == ["new.txt"] and (ws / "link").read_text() == "x"
    assert not [p for p in os.listdir(ws) if ".tc-" in p]
