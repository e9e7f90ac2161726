"""The drift watcher: edits become a drift commit after the quiet period; nothing while idle;
`partial` when files keep changing; store and .git writes never wake it; TC_WATCH=off."""
from __future__ import annotations

import sys
import threading
import time

import pytest
from conftest import clean_env, write
from mcp import Client, StdioServerParameters

from tc_git.engine import Engine
from tc_git.mcp.watch import DriftWatcher, watch_enabled

pytestmark = [pytest.mark.usefixtures("fsck_after"),
              pytest.mark.filterwarnings("ignore:.*(deprecated|removed as of):Warning")]


@pytest.fixture(autouse=True)
def _env(monkeypatch):
    for k in ("TC_STORE", "TC_WATCH", "TC_WATCH_INTERVAL", "TC_DRIFT_MAX_WAIT"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("TC_GIT", "off")


def drifts(ws) -> list[dict]:
    return [d for d in Engine(ws).show(include_drift=True, limit=200)["drifts"] if d["kind"] == "drift"]


def wait_for(pred, timeout=10.0, step=0.05):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        v = pred()
        if v:
            return v
        time.sleep(step)
    return pred()


@pytest.fixture
def task(ws):
    e = Engine(ws)
    e.init("watched")
    write(ws, "a.txt", "1")
    e.save("first")
    return e


@pytest.fixture
def watcher():
    w = DriftWatcher(interval=0.5, max_wait=3.0)
    yield w
    w.stop()


def test_edit_becomes_drift_after_quiet_period_and_nothing_while_idle(ws, task, watcher):
    watcher.watch(task)
    assert watcher.mode in ("inotify", "native", "poll") and str(ws) in watcher.status()["roots"]
    time.sleep(1.5)  # idle: nothing recorded
    assert drifts(ws) == []
    write(ws, "a.txt", "2")
    write(ws, "sub/b.txt", "new")
    t0 = time.monotonic()
    got = wait_for(lambda: drifts(ws), timeout=10)
    assert got and len(got) == 1, got
    assert time.monotonic() - t0 >= 0.4  # not before the quiet period
    assert got[0]["partial"] is False and got[0]["files_changed"] == 2
    # idle again: no new drift (the capture's own reads and store writes do not wake it)
    time.sleep(2.0)
    assert len(drifts(ws)) == 1
    st = watcher.status()["roots"][str(ws)]
    assert st["captures"] == 1 and st["errors"] == 0


def test_store_and_git_writes_do_not_wake_it(ws, task, watcher):
    (ws / ".git").mkdir()
    watcher.watch(task)
    time.sleep(0.3)
    for i in range(5):
        write(ws, f".git/objects/x{i}", "y")
        (task.store.path / "tc" / f"scratch{i}").write_text("z")
    time.sleep(1.5)
    assert watcher.status()["roots"][str(ws)]["events"] == 0
    assert drifts(ws) == []


def busy_log(ws, drift: dict) -> bytes | None:
    """busy.log as the drift recorded it."""
    import pygit2

    tree = pygit2.Repository(str(ws / ".checkpoints")).get(drift["commit"]).tree
    return tree["busy.log"].data if "busy.log" in tree else None


def test_partial_when_files_keep_changing(ws, task):
    w = DriftWatcher(interval=0.6, max_wait=1.5)
    ticking = threading.Event()  # set while the watcher's thread looks at its roots or captures
    real_tick = w._tick

    def tick():
        ticking.set()
        try:
            real_tick()
        finally:
            ticking.clear()

    w._tick = tick

    def idle() -> bool:  # (dirty first: a tick that clears it is then seen running, or is over)
        return not w.status()["roots"][str(ws)]["dirty"] and not ticking.is_set()

    try:
        w.watch(task)
        time.sleep(0.3)
        # Never quiet for 0.6 s: write every 150 ms until the watcher gives up waiting and records a
        # partial drift. Writing until it happens (not for a fixed time) keeps a loaded machine,
        # where a sleep can stretch, from turning this into a quiet period.
        end = time.monotonic() + 20
        partial: list[dict] = []
        i = 0
        last = b""
        while not partial and time.monotonic() < end:
            last = f"line {i}\n".encode() * (i + 1)
            write(ws, "busy.log", last)
            i += 1
            time.sleep(0.15)
            if i % 4 == 0:
                partial = [d for d in drifts(ws) if d["partial"]]
        assert partial, drifts(ws)
        # Once quiet, the last state is recorded: by a later capture, or by the partial one itself
        # when it read busy.log after the last write (a slow capture on a loaded machine), which
        # leaves nothing for another drift to record.
        assert wait_for(lambda: (d := drifts(ws)) and busy_log(ws, d[-1]) == last and idle(), timeout=60), \
            [(d["partial"], busy_log(ws, d)[:20]) for d in drifts(ws)]
        # and a change made once the watcher is idle becomes a drift after the quiet period: not partial
        write(ws, "busy.log", b"the end\n")
        final = wait_for(lambda: [d for d in drifts(ws) if busy_log(ws, d) == b"the end\n"], timeout=60)
        assert final and final[-1]["partial"] is False, final
    finally:
        w.stop()


def test_stat_poll_fallback(ws, task):
    w = DriftWatcher(interval=0.5, max_wait=3.0, poll=True)
    try:
        w.watch(task)
        assert w.mode == "poll" and w.observer is None
        time.sleep(1.2)
        assert drifts(ws) == []
        write(ws, "a.txt", "polled")
        got = wait_for(lambda: drifts(ws), timeout=10)
        assert got and got[0]["files_changed"] == 1
        time.sleep(1.5)
        assert len(drifts(ws)) == 1
    finally:
        w.stop()


def test_closed_task_stops_watching(ws, task, watcher):
    watcher.watch(task)
    task.save("done", close=True)
    write(ws, "a.txt", "after close")
    wait_for(lambda: str(ws) not in watcher.status()["roots"], timeout=30)
    assert str(ws) not in watcher.status()["roots"]
    assert drifts(ws) == []


def test_no_active_task_is_not_watched(ws, watcher):
    watcher.watch(Engine(ws))  # no store at all
    assert watcher.status()["roots"] == {} and watcher.thread is None


def test_watch_enabled_env(monkeypatch):
    assert watch_enabled()
    for v in ("off", "OFF", "0", "false"):
        monkeypatch.setenv("TC_WATCH", v)
        assert not watch_enabled()
    monkeypatch.setenv("TC_WATCH", "on")
    assert watch_enabled()


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_server_records_drift_in_background(ws, anyio_backend):
    """The real server process: a workspace served once with an active task is watched."""
    import anyio

    env = clean_env(TC_WATCH_INTERVAL="0.5", TC_DRIFT_MAX_WAIT="3", TC_GIT="off")
    params = StdioServerParameters(command=sys.executable, args=["-m", "tc_git"], env=env)
    log = ws / ".checkpoints" / "tc" / "server.log"
    # x.txt is there before the task starts: the watcher (started by tc_init) never sees it
    # unsaved. Written after tc_init, it was a drift whenever the tc_save reached the server more
    # than the quiet period (0.5 s) after the write, as it can on a loaded machine.
    write(ws, "x.txt", "one")
    async with Client(params, mode="legacy") as c:
        r = await c.call_tool("tc_init", {"root": str(ws), "name": "bg"})
        assert not r.is_error
        assert not (await c.call_tool("tc_save", {"root": str(ws), "title": "s1"})).is_error
        await anyio.sleep(1.5)
        r = await c.call_tool("tc_show", {"root": str(ws), "include_drift": True})
        assert [d for d in r.structured_content["drifts"] if d["kind"] == "drift"] == []
        write(ws, "x.txt", "two")
        # until the drift is listed and its log line written (after the capture, on the watcher's
        # thread): a deadline, not a count of polls, so a slow machine waits longer
        got, deadline = [], time.monotonic() + 60
        while time.monotonic() < deadline:
            await anyio.sleep(0.1)
            r = await c.call_tool("tc_show", {"root": str(ws), "include_drift": True})
            got = [d for d in r.structured_content["drifts"] if d["kind"] == "drift"]
            if got and "watch: drift" in log.read_text():
                break
        assert got and got[0]["files_changed"] == 1, got
        assert len(got) == 1, got
        assert "watch: drift" in log.read_text()


@pytest.mark.parametrize("backend", ["native", "watchdog"])
def test_store_writes_are_not_watched(task, ws, monkeypatch, tune, backend):
    """A save's own objects (loose blobs and trees, new `objects/xx` directories) never reach the
    watcher: the store's directories but `tc/` (the journal's barrier) are not watched (natively,
    or with watchdog 7, whose watch group is patched); the barrier still arrives, so the save is
    served by the journal."""
    from tc_git.mcp import watch as watch_mod

    seen: list[str] = []
    if backend == "native":
        from tc_git.workspace import inotify

        if not inotify.available():
            pytest.skip("no native inotify here")
        real_paths = DriftWatcher.on_paths

        def paths(self, st, rels):
            seen.extend(str(st.root / r) for r in rels)
            return real_paths(self, st, rels)

        monkeypatch.setattr(DriftWatcher, "on_paths", paths)
    else:
        pytest.importorskip("watchdog.observers.inotify")
        from watchdog.observers import inotify as wi

        if not hasattr(wi, "InotifyWatchGroup"):
            pytest.skip("watchdog before 7: the store is watched and its events ignored")
        tune(inotify="off")
        real = watch_mod._Handler.dispatch

        def counting(self, event):
            seen.append(str(event.src_path))
            return real(self, event)

        monkeypatch.setattr(watch_mod._Handler, "dispatch", counting)
    w = DriftWatcher(interval=3600, max_wait=3600)
    try:
        w.watch(task)
        if w.mode != "inotify":
            pytest.skip(f"no inotify here ({w.mode})")
        assert w.native == (backend == "native")
        journal = w.journal(task.root)
        e = Engine(ws)
        e.journal = journal
        e.save("full")  # (the journal's first snapshot is a full scan)
        time.sleep(0.2)
        seen.clear()  # (before the writes: the native reader may deliver some while they happen)
        for i in range(40):
            write(ws, f"d{i}/f{i}.txt", f"{i}\n")
        if backend == "watchdog":
            seen.clear()
        before = journal.refreshes
        r = e.save("forty")
        assert r["changed"] == 40 and journal.refreshes == before + 1  # served by the journal
        time.sleep(0.3)
        store = str(task.store_path)
        from_store = [p for p in seen if p.startswith(store + "/") and not p.startswith(store + "/tc/")]
        assert from_store == [], from_store[:10]
        if backend == "watchdog":
            assert any(p.endswith("journal-barrier") for p in seen)  # the barrier is watched
        else:  # the barrier is read by the save itself, never delivered as a change
            dirs = {p[len(str(ws)) + 1:].split("/")[0] for p in seen}
            assert dirs == {f"d{i}" for i in range(40)}, sorted(dirs)
    finally:
        w.stop()
