"""The MCP server gives back what a tool call freed (issue 14: < 150 MiB at 50k files).

Each call opens the store (a `pygit2.Repository`, a reference cycle holding the index and object
caches) and allocates in a worker thread's malloc arena; without `heap.settle` both stayed until
Python's next full collection, and the server's resident size climbed with every call."""
from __future__ import annotations

import gc
import os
import sys
import weakref

import anyio
import pygit2
import pytest
from conftest import clean_env, knobs
from mcp import Client, StdioServerParameters

from tc_git.storage import heap

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc; malloc_trim is glibc's")


def test_settle_collects_a_dropped_repository(tmp_path):
    pygit2.init_repository(str(tmp_path / "r.git"), bare=True)
    gc.collect()
    gc.disable()  # no automatic collection in between: only settle() may free it
    try:
        repo = pygit2.Repository(str(tmp_path / "r.git"))
        ref = weakref.ref(repo)
        del repo
        assert ref() is not None, "a Repository is a reference cycle: refcounting alone keeps it"
        heap.settle()
        assert ref() is None
    finally:
        gc.enable()


def test_one_settle_frees_a_dropped_handle_and_its_scan_peer(tmp_path, monkeypatch):
    """A kept store handle that ran the parallel scan has a peer handle (scan.py), held in a
    WeakKeyDictionary: collecting the handle drops the peer, itself a cycle, which only the next
    collection finds. One settle (what the server runs after dropping idle handles, before an
    export, import or compress) must free both."""
    from conftest import saved_task, write

    from tc_git.engine import Engine
    from tc_git.storage import handles
    from tc_git.workspace import scan

    monkeypatch.setenv("TC_GIT", "off")
    monkeypatch.setattr(scan, "MIN_ENTRIES", 1)  # the parallel scan on a small workspace
    if not scan.parallel_ok(100):
        pytest.skip("no parallel scan here (one core or no native diff)")
    ws = tmp_path / "ws"
    saved_task(ws, {f"d{i % 4}/f{i}.txt": f"{i}\n".encode() for i in range(40)})
    handles.enable()
    try:
        write(ws, "d0/f0.txt", b"changed\n")
        Engine(ws).save("two")  # a full scan on two threads: the kept handle gets its peer
        heap.settle()
        handles.flush_all()
        kept = handles._idle.get((handles.key(Engine(ws).store_path), handles.key(ws)), (None,))[0]
        assert kept is not None and kept in scan._PEERS
        peer = weakref.ref(scan._PEERS[kept])
        kept = None
        gc.collect()
        gc.disable()  # no automatic collection in between: only settle() may free them
        try:
            assert handles.drop_idle() >= 1
            assert peer() is not None
            heap.settle()
            assert peer() is None, "the scan's peer handle outlived the settle that freed its handle"
        finally:
            gc.enable()
    finally:
        handles.enable(False)


def test_drop_idle_waits_for_a_deferred_index_write_and_drops_that_handle(tmp_path, monkeypatch, tune):
    """The call before an import is often a save or an export of another workspace whose index
    write is deferred (handles.later): its handle is checked in only after the write. drop_idle
    must wait for it and drop it, not leave it to come back during the import's peak."""
    from conftest import saved_task, write

    from tc_git.engine import Engine
    from tc_git.storage import handles

    monkeypatch.setenv("TC_GIT", "off")
    tune(index_delay=0.5)  # the write still pending when drop_idle runs
    a, b = tmp_path / "a", tmp_path / "b"
    saved_task(a, {f"f{i}.txt": f"{i}\n".encode() for i in range(20)})
    handles.enable()
    try:
        write(a, "f0.txt", b"changed\n")
        store_a = Engine(a).store_path
        Engine(a).save("two")
        assert handles.key(store_a) in handles._pending, "the save's index write was not deferred"
        assert handles.drop_idle(keep=b) >= 1
        assert handles.key(store_a) not in handles._pending
        assert not [ik for ik in handles._idle if ik[0] == handles.key(store_a)]
        assert not (store_a / handles.MARKER).exists(), "the deferred index was not written"
        write(a, "f1.txt", b"changed too\n")
        assert Engine(a).save("three")["index"] == 3  # the store as usual afterwards
    finally:
        handles.enable(False)


def test_settle_is_off_with_the_switch(tmp_path, monkeypatch, tune):
    tune(malloc_trim="off")
    pygit2.init_repository(str(tmp_path / "r.git"), bare=True)
    gc.collect()
    gc.disable()
    try:
        repo = pygit2.Repository(str(tmp_path / "r.git"))
        ref = weakref.ref(repo)
        del repo
        heap.settle()
        assert ref() is not None
    finally:
        gc.enable()
        gc.collect()


@linux
def test_trim_finds_glibc_malloc_trim():
    if os.confstr("CS_GNU_LIBC_VERSION") is None:
        pytest.skip("not glibc")
    heap.trim()
    assert heap._trim, "malloc_trim not found in a glibc process"


def _live_repositories() -> int:
    return sum(isinstance(o, pygit2.Repository) for o in gc.get_objects())


@pytest.mark.anyio
@pytest.mark.filterwarnings("ignore:.*(deprecated|removed as of):Warning")
async def test_tool_calls_leave_no_store_handle_behind(tmp_path):
    """With Python's automatic collection off, every call's store handle (a reference cycle)
    would stay; the server's settle after each call frees them."""
    from tc_git.mcp.server import SETTLE_DELAY, build_server

    ws = tmp_path / "ws"
    (ws / "src").mkdir(parents=True)
    for i in range(50):
        (ws / "src" / f"f{i}.txt").write_text(f"{i}\n")
    root = str(ws)
    async with Client(build_server(watch=False), mode="legacy") as c:
        async def call(tool, **args):
            r = await c.call_tool(tool, {"root": root, **args})
            assert not r.is_error, r.content[0].text
            await anyio.sleep(2 * SETTLE_DELAY)  # the settle starts just after the answer (mcp_server)
            if heap._pending is not None:
                heap._pending.join()  # and runs beside what follows: wait for it here

        await call("tc_init", name="mem", goal="flat")
        await call("tc_save", title="first")
        gc.collect()
        gc.disable()
        try:
            start = _live_repositories()
            for i in range(8):
                await call("tc_save", title=f"again {i}")
                await call("tc_show")
                await call("tc_resume")
            assert _live_repositories() <= start, "store handles of finished calls are still alive"
        finally:
            gc.enable()


def _children_rss() -> dict[int, int]:
    """pid -> resident bytes of this process's direct children (/proc)."""
    me, out = os.getpid(), {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            if ppid == me:
                with open(f"/proc/{pid}/status") as f:
                    out[int(pid)] = int(f.read().split("VmRSS:")[1].split()[0]) * 1024
        except (OSError, IndexError, ValueError):
            continue
    return out


@linux
@pytest.mark.anyio
@pytest.mark.filterwarnings("ignore:.*(deprecated|removed as of):Warning")
async def test_server_memory_stays_flat_over_calls(tmp_path):
    """The real server over stdio: 30 calls after the first save add at most a few MiB to its
    resident size (each kind of call was made before, so first-use imports and caches are in)."""
    ws = tmp_path / "ws"
    for i in range(4000):
        d = ws / f"d{i // 100:03d}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"f{i:05d}.txt").write_text(f"{i}\n" + "x" * (i % 700))
    root = str(ws)
    before = set(_children_rss())
    params = StdioServerParameters(command=sys.executable, args=["-m", "tc_git"],
                                   env=clean_env(TC_WATCH="off", TC_GIT="off"), cwd=root)
    async with Client(params, mode="legacy") as c:
        server = (set(_children_rss()) - before).pop()

        async def call(tool, **args):
            r = await c.call_tool(tool, {"root": root, **args})
            assert not r.is_error, r.content[0].text

        await call("tc_init", name="mem", goal="flat")
        await call("tc_save", title="first")
        for i in range(3):  # the lazily imported modules and first-use caches of each call kind
            await call("tc_save", title=f"warm {i}")
            await call("tc_show")
            await call("tc_resume")
        heap_settled = _children_rss()[server]
        for i in range(10):
            await call("tc_save", title=f"again {i}")
            await call("tc_show")
            await call("tc_resume")
        grown = _children_rss()[server] - heap_settled
    assert grown < 12 << 20, f"the server grew by {grown / 2**20:.1f} MiB over 30 calls"


def test_idle_secrets_engine_is_released_and_comes_back(monkeypatch):
    """The MCP server drops the credential engine (~45 MiB) once unused for `secrets_idle`
    seconds; the next credential-shaped text loads it again and is still caught."""
    import time

    from tc_git.workspace import secrets

    monkeypatch.delenv("TC_TEST_SETTINGS", raising=False)  # the engine, not only the built-in rules
    from secret_samples import SAMPLES

    token = next(t for k, t, _n in SAMPLES if "github" in k).encode()  # generated, not a real credential
    if secrets._load_engine() is None:
        pytest.skip(f"secrets engine unavailable: {secrets.engine_name()}")
    try:
        secrets.release_when_idle(0.2)
        assert secrets.find(token)
        deadline = time.monotonic() + 10
        while secrets._engine and time.monotonic() < deadline:
            time.sleep(0.1)
        assert secrets._engine is None, "the idle engine was not released"
        secrets.release_when_idle(60)  # (not released again before the next assert on a loaded machine)
        assert secrets.find(token), "a credential after the release is still found"
        assert secrets._engine, "and the engine is loaded again for it"
    finally:
        secrets._idle_after = None  # the watcher thread ends


_BOUNDED_ROUND_TRIP = r"""
import os, sys
from tc_git.storage import _native, heap
import pygit2
own = pygit2.settings.mwindow_size
limits = heap.bound_libgit2()
assert pygit2.settings.mwindow_mapped_limit == limits["mwindow_mapped_limit"] == 1 << 20, limits
assert pygit2.settings.mwindow_size == limits["mwindow_size"] == 1 << 20, limits
_native.small_windows(16 << 10)  # (below the `libgit2_window_mb` setting's unit: every pack spans many windows)
with _native.whole_windows():
    assert pygit2.settings.mwindow_size == own  # libgit2's own size while an indexer runs
assert pygit2.settings.mwindow_size == 16 << 10
seen = []  # the window size in force wherever libgit2 indexes a pack: PackSink's calls into the
# indexer (each checked by _native.check, inside the guard), pygit2's PackBuilder.write
check, builder_write = _native.check, pygit2.PackBuilder.write
def checked(rc):
    if sys._getframe(1).f_code.co_qualname in ("PackSink.append", "PackSink.commit"):
        seen.append(pygit2.settings.mwindow_size)
    return check(rc)
_native.check = checked
pygit2.PackBuilder.write = lambda self, *a: seen.append(pygit2.settings.mwindow_size) or builder_write(self, *a)
from tc_git.engine import Engine
src, dst, out = sys.argv[1:4]
e = Engine(src)
e.init("bounded", goal="g")
e.save("one")
for i in range(0, 100, 7):
    with open(os.path.join(src, f"d{i % 9}", f"f{i}.bin"), "ab") as f:
        f.write(b"more")
e.save("two")
e.compress()  # a repack under the same limits
path = e.export(out)["path"]
r = Engine(dst).import_(path, apply=True)
assert r["restore"]["applied"], r["restore"]
assert pygit2.settings.mwindow_size == 16 << 10
assert seen and set(seen) == {own}, seen
print(path)
"""


def test_bounded_libgit2_keeps_bundles_and_imports_valid(tmp_path):
    """libgit2's mapped-pack limit (heap.bound_libgit2, set once in the MCP server) squeezed to
    1 MiB and its pack windows to 16 KiB against packs of several MiB: a save, a repack, an export
    and an import into an empty workspace still give what stock git accepts (bundle verify, fsck of
    both stores) and the imported workspace is the exported step, byte for byte (stock git's tree).
    libgit2 1.9.7's indexer refused valid packs of bench_mcp's files with windows of 16 KiB-4 MiB in
    force ("unexpected data at the end of the pack"; which packs depends on where objects fall): every
    indexer runs under `_native.whole_windows` (libgit2's own size), checked at each one here."""
    import random
    import subprocess

    from conftest import fsck, git_tree

    src, dst, out = tmp_path / "src", tmp_path / "dst", tmp_path / "out"
    for p in (dst, out):
        p.mkdir()
    rng = random.Random(7)
    words = [f"w{i}" for i in range(500)]
    for i in range(100):
        d = src / f"d{i % 9}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"f{i}.bin").write_bytes(os.urandom(48 << 10))  # ~5 MiB of pack, incompressible
    for i in range(1000):  # and text, deltified against each other (bench_mcp's files: what the indexer refused)
        d = src / "text" / f"mod{i // 100:02d}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"file{i:06d}.py").write_text(f"# {i}\n" + " ".join(rng.choice(words) for _ in range(rng.randint(30, 300))) + "\n")
    env = clean_env(**knobs(libgit2_mapped_mb=1, libgit2_window_mb=1), TC_GIT="off")
    r = subprocess.run([sys.executable, "-c", _BOUNDED_ROUND_TRIP, str(src), str(dst), str(out)], env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    bundle = r.stdout.strip().splitlines()[-1]
    v = subprocess.run(["git", "--git-dir", str(src / ".checkpoints"), "bundle", "verify", bundle],
                       capture_output=True, text=True, env=clean_env())
    assert v.returncode == 0, v.stderr
    fsck(src / ".checkpoints")
    fsck(dst / ".checkpoints")
    assert git_tree(dst, dst / ".checkpoints") == git_tree(src, src / ".checkpoints")


@pytest.mark.anyio
@pytest.mark.filterwarnings("ignore:.*(deprecated|removed as of):Warning")
async def test_heavy_calls_drop_other_workspaces_handles(tmp_path):
    """Export, import and compress peak high and need no other workspace's parsed index: the
    server drops the handles kept for other stores first (handles.drop_idle), keeps the call's
    own, and the other workspace's next save opens its store again as usual."""
    from tc_git.mcp.server import build_server
    from tc_git.storage import handles

    roots = []
    for name in ("a", "b"):
        ws = tmp_path / name
        (ws / "src").mkdir(parents=True)
        for i in range(30):
            (ws / "src" / f"f{i}.txt").write_text(f"{name} {i}\n")
        roots.append(str(ws))
    a, b = roots
    kept = lambda: {w for _s, w in handles._idle}  # noqa: E731 - the workspaces whose handles are kept
    async with Client(build_server(watch=False), mode="legacy") as c:
        async def call(tool, root, **args):
            r = await c.call_tool(tool, {"root": root, **args})
            assert not r.is_error, r.content[0].text
            handles.flush_all()  # (the deferred index writes: the handles go back to the idle set)
            return r.structured_content

        async def eventually(cond) -> bool:
            # a save's handoff cache is refreshed on the server's own thread after the answer,
            # and holds that store's handle (out of the idle set) while it runs
            for _ in range(2400):  # (up to 120 s on a loaded machine)
                handles.flush_all()
                if cond():
                    return True
                await anyio.sleep(0.05)
            return cond()

        for root in (a, b):
            await call("tc_init", root, name="h", goal="drop")
            await call("tc_save", root, title="first")
        assert await eventually(lambda: {a, b} <= kept()), kept()
        await call("tc_compress", a)  # (a heavy call: the pending handoff jobs run first)
        assert a in kept() and b not in kept()
        (tmp_path / "b" / "src" / "f0.txt").write_text("changed\n")
        saved = await call("tc_save", b, title="second")
        assert saved["changed"] == 1 and not saved["idempotent"]
        assert await eventually(lambda: b in kept()), kept()
        await call("tc_export", b, to=str(tmp_path))
        assert b in kept() and a not in kept()


def test_tree_has_answers_as_pygit2_without_keeping_the_name(tmp_path):
    """`trees.tree_has` (raw trees) answers what `path in tree` answers; pygit2 1.21's own
    lookups keep a reference to every name asked for (an import's restore asked for 50k)."""
    from conftest import saved_task

    from tc_git.storage import trees

    e = saved_task(tmp_path, {"a/b/c.txt": b"1", "a/d.txt": b"2", "top": b"3", "l/x": b"4"})
    repo = e.repo
    tree = repo[e.head_commit()].peel(pygit2.Tree)
    asked = ["a", "a/b", "a/b/c.txt", "a/d.txt", "top", "l", "l/x", "nope", "a/nope", "top/below",
             "a/d.txt/x", "a/b/c.txt/y", "A", "a/B", "x/y/z"]
    for p in asked:
        assert trees.tree_has(repo, tree, p) == (p in tree), p
    names = ["".join([p, ""]) for p in asked]  # fresh objects, held only by this list
    before = [sys.getrefcount(p) for p in names]
    for name in names:
        trees.tree_has(repo, tree, name)
    del name
    assert [sys.getrefcount(p) for p in names] == before


def test_a_restore_keeps_no_reference_to_the_names_it_planned(tmp_path, monkeypatch):
    """An import into an empty workspace plans every file of the task, once (apply=None: the
    preview's plan is the one applied, no second 50k-delta plan at a 50k-file import's peak):
    once the call is over no name of that plan may still be referenced (each one held its
    string and pinned the allocator's pages: +16 MiB anonymous left by a 50k-file import in the
    MCP server, for its whole life)."""
    from conftest import saved_task

    from tc_git.engine import Engine
    from tc_git.timeline import restore

    monkeypatch.setenv("TC_GIT", "off")
    src, dst, out = tmp_path / "src", tmp_path / "dst", tmp_path / "out"
    for p in (dst, out):
        p.mkdir()
    e = saved_task(src, {f"d{i % 7}/s{i % 3}/f{i}.txt": f"{i}\n".encode() for i in range(120)})
    path = e.export(str(out))["path"]
    seen: list[str] = []
    plans: list[int] = []
    real = restore.tree_deltas

    def spy(*a, **k):
        deltas = real(*a, **k)
        seen.extend(d.path for d in deltas)
        plans.append(len(deltas))
        return deltas

    monkeypatch.setattr(restore, "tree_deltas", spy)
    r = Engine(dst).import_(path, apply=None)
    assert r["restore"]["auto"] == "applied" and r["restore"]["applied"], r["restore"]
    assert plans == [120], plans  # planned once: the preview's plan applied
    assert sorted(p.relative_to(dst).as_posix() for p in dst.rglob("*.txt")) == sorted(seen)
    del r
    # a file <-> directory swap (the plan's other use of "is it in the snapshot")
    (dst / "d1").rename(tmp_path / "gone")
    (dst / "d1").write_text("a file where a directory was\n")
    Engine(dst).save("swapped")
    back = Engine(dst).restore(index=1, apply=True)
    assert back["applied"] and (dst / "d1" / "s1" / "f1.txt").read_text() == "1\n"
    assert back["plan"]["counts"]["to_replace"] == 0 and "d1" in back["plan"]["to_delete"], back["plan"]
    del back
    gc.collect()
    assert len(seen) >= 120 + 1
    control = "".join(["d0/", "s0"])
    seen.append(control)  # held by the list alone: the count every planned name must have
    held = {p for p in seen if sys.getrefcount(p) > sys.getrefcount(control)}
    assert not held, f"{len(held)} planned names still referenced, e.g. {sorted(held)[:3]}"


def test_the_handle_a_repack_or_an_import_opened_is_kept_by_the_next_call(tmp_path, monkeypatch):
    """A repack (compress) and an import replace the store's packs and reopen its handle
    (Store.reopen); that handle knows the packs as they are after it, so the next call (the
    first save after them) takes it as it is instead of reopening and parsing the index again."""
    from conftest import saved_task, write

    from tc_git.engine import Engine
    from tc_git.storage import handles

    monkeypatch.setenv("TC_GIT", "off")
    src, dst, out = tmp_path / "src", tmp_path / "dst", tmp_path / "out"
    for p in (dst, out):
        p.mkdir()
    e = saved_task(src, {f"d{i % 4}/f{i}.txt": f"{i}\n".encode() for i in range(40)})
    write(src, "d0/f0.txt", b"changed\n")
    e.save("two")

    def kept(ws):
        return handles._idle.get((handles.key(Engine(ws).store_path), handles.key(ws)), (None,))[0]

    def reopens(ws, call) -> int:
        from tc_git.storage import store as store_mod

        n = [0]
        real = store_mod.Store.reopen

        def counting(self):
            n[0] += 1
            return real(self)

        monkeypatch.setattr(store_mod.Store, "reopen", counting)
        try:
            call(Engine(ws))
        finally:
            monkeypatch.setattr(store_mod.Store, "reopen", real)
        return n[0]

    assert reopens(src, lambda eng: eng.compress(minimum=0, maximum=1, keep_seconds=0)) >= 1  # the repack's own
    after_repack = kept(src)
    assert after_repack is not None
    write(src, "d1/f1.txt", b"changed too\n")
    assert reopens(src, lambda eng: eng.save("three")) == 0
    assert kept(src) is after_repack, "the first save after a repack opened the store again"

    path = Engine(src).export(str(out))["path"]
    assert reopens(dst, lambda eng: eng.import_(path, apply=True)) >= 1  # the import's own
    after_import = kept(dst)
    write(dst, "d2/f2.txt", b"edited after the import\n")
    assert reopens(dst, lambda eng: eng.save("edited")) == 0
    assert kept(dst) is after_import, "the first save after an import opened the store again"


_MMAP_PROBE = r"""
import ctypes, json, sys
from tc_git.storage import heap
libc = ctypes.CDLL(None)
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]

def mmapped(size):
    p = libc.malloc(size)
    try:  # glibc's chunk header, just below the block: bit 1 of its size = IS_MMAPPED
        return bool(ctypes.c_size_t.from_address(p - ctypes.sizeof(ctypes.c_size_t)).value & 2)
    finally:
        libc.free(p)

set_to = heap.bound_libgit2() and heap.fix_mmap_threshold()
libc.free(libc.malloc(8 << 20))  # an 8 MiB block freed: glibc's own rule raises its threshold to 8 MiB
print(json.dumps({"set": set_to, "one_mib_mmapped": mmapped(1 << 20), "small_mmapped": mmapped(64 << 10)}))
"""


@linux
@pytest.mark.parametrize("env, expect_set, expect_mmapped", [
    ({}, 128 << 10, True),  # the server's setting: a 1 MiB block is its own mapping, given back at free
    (knobs(malloc_mmap_kb=0), 0, False),  # glibc's rule: after an 8 MiB free, 1 MiB comes from the heap
    ({"MALLOC_MMAP_THRESHOLD_": "16777216"}, 0, False),  # the user's own tunable wins
])
def test_the_server_keeps_glibcs_mmap_threshold_fixed(env, expect_set, expect_mmapped):
    """glibc raises its mmap threshold to the size of each mmap'd block freed, so after one large
    buffer the next ones of that size come from a heap that keeps them resident; the server
    (heap.bound_libgit2) fixes it at 128 KiB unless told otherwise. Judged by glibc itself: the
    IS_MMAPPED bit of the blocks it hands out."""
    import json
    import subprocess

    if os.confstr("CS_GNU_LIBC_VERSION") is None:
        pytest.skip("not glibc")
    base = {k: v for k, v in os.environ.items() if not k.startswith(("TC_", "MALLOC_"))}
    out = subprocess.run([sys.executable, "-c", _MMAP_PROBE], env={**base, **env}, capture_output=True,
                         text=True, timeout=60, check=True).stdout
    got = json.loads(out)
    assert got["set"] == expect_set
    assert got["one_mib_mmapped"] is expect_mmapped
    assert got["small_mmapped"] is False
