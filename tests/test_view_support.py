"""Helpers (no tests) for the `tc view` tests and benchmark: fixture stores and a headless Chromium driven
over the DevTools protocol on a pipe (`--remote-debugging-pipe`: fd 3 in, fd 4 out, NUL-framed
JSON), so no port, no websocket library and no network are involved."""
from __future__ import annotations

import base64
import fcntl
import json
import os
import queue
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
from conftest import TRANSCRIPTS as FIXTURES  # noqa: E402

SCRIPT_TEXT = "<script>alert(1)</script>"
FAKE_KEY = "AKIAQWERTYUIOPASDFGH"  # matches the AWS access-key rule, belongs to nobody

BROWSER_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-extensions", "--disable-default-apps", "--mute-audio", "--hide-scrollbars",
    "--host-resolver-rules=MAP * ~NOTFOUND",  # a name lookup would fail, not leave the machine
]


# ------------------------------------------------------------------------------ fixtures
def make_task(ws: Path):
    """A task with steps (diffs), a drift, a restore and a hostile conclusion. Returns
    (engine, task_id, {step number: commit})."""
    from tc_git.engine import Engine

    ws.mkdir(parents=True, exist_ok=True)
    e = Engine(ws)
    tid = e.init("fixture task", goal="render every kind of entry")["task_id"]
    commits = {}
    (ws / "app.py").write_text("def add(a, b):\n    return a + b\n\n\nprint(add(1, 2))\n")
    (ws / "README.md").write_text("# demo\n")
    commits[1] = e.save("first step adds app.py", conclusion="app.py prints a sum",
                        next="handle strings", verified=["python app.py prints 3"])["commit"]
    (ws / "app.py").write_text("def add(a, b):\n    \"\"\"Sum two things.\"\"\"\n    return a + b  # plain\n\n\n"
                               "print(add('x', 'y'))\n")
    (ws / "lib").mkdir()
    (ws / "lib" / "util.js").write_text("// helper\nconst answer = 42;\nexport function f() { return 'ok'; }\n")
    commits[2] = e.save("second step handles strings", conclusion=f"strings work; key {FAKE_KEY} was in a log",
                        open_questions=["unicode?"])["commit"]
    (ws / "notes.txt").write_text("unsaved work\n")
    e.capture()
    (ws / "README.md").write_text("# demo\n\nNow with a conclusion that tries markup.\n")
    commits[3] = e.save("third step: hostile text", conclusion=SCRIPT_TEXT, next="</script><b>bold?</b>")["commit"]
    e.restore(index=1, apply=True)
    return e, tid, commits


def record_sessions(engine, step_commit: str):
    """Record a Claude Code transcript with a rewind, a generic session with hostile and secret
    text, a named branch and a milestone linked to `step_commit`. Returns a dict of facts."""
    from tc_git.trajectory import milestones as ms
    from tc_git.trajectory import ops
    from tc_git.trajectory.readers import read_steps
    from tc_git.trajectory.recorder import record, record_file

    repo = engine.repo
    with engine.store.lock():
        claude = record_file(repo, str(FIXTURES / "claude-daaain-1.jsonl"))
        steps = [
            {"role": "user", "content": f"please print {SCRIPT_TEXT} literally"},
            {"role": "assistant", "content": "Running it.", "tool_calls": [
                {"id": "c1", "function": {"name": "Bash", "arguments": json.dumps({"command": "echo hi"})}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "\n".join(f"line {i}" for i in range(40))},
            {"role": "assistant", "content": f"done; the key was {FAKE_KEY}"},
        ]
        generic = record(repo, read_steps(steps, session_id="hostile-1", base_time=1_700_000_000))
        main_tip = claude.branches["main"]
        c = repo[main_tip]
        for _ in range(3):
            c = repo[c.parent_ids[0]]
        branch_ref = ops.branch(repo, "try-other-fix", str(c.id), session=claude.session)
        ms.set_milestone(repo, "tests-green", main_tip, session=claude.session, code_commit=step_commit,
                         message="the suite passes here")
    return {"claude": claude, "generic": generic, "branch": branch_ref.rsplit("/", 1)[-1],
            "milestone": "tests-green", "milestone_event": main_tip}


# ------------------------------------------------------------------------------ browser
class Browser:
    """One headless Chromium; `page()` opens a tab attached in flat mode."""

    def __init__(self, extra=()):
        if not CHROMIUM:
            raise RuntimeError("no chromium on PATH")
        self.profile = tempfile.mkdtemp(prefix="tc-view-chromium-")
        to_r, self._to_w = os.pipe()  # we write, chromium reads fd 3
        self._from_r, from_w = os.pipe()  # chromium writes fd 4

        def fds():  # in the child: our pipe ends become fds 3 and 4 (via high fds: no clobbering)
            a = fcntl.fcntl(to_r, fcntl.F_DUPFD, 10)
            b = fcntl.fcntl(from_w, fcntl.F_DUPFD, 10)
            os.dup2(a, 3)
            os.dup2(b, 4)

        self.proc = subprocess.Popen(
            [CHROMIUM, *BROWSER_FLAGS, *extra, "--remote-debugging-pipe", f"--user-data-dir={self.profile}",
             "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            preexec_fn=fds, pass_fds=(3, 4))
        os.close(to_r)
        os.close(from_w)
        self._id = 0
        self._waiting: dict[int, queue.Queue] = {}
        self.events: list[dict] = []
        self._cv = threading.Condition()
        self._lock = threading.Lock()
        self.stderr: list[str] = []
        threading.Thread(target=self._reader, daemon=True).start()
        threading.Thread(target=self._err, daemon=True).start()

    def _err(self):
        for line in self.proc.stderr:
            self.stderr.append(line.decode("utf-8", "replace"))

    def _reader(self):
        buf = b""
        while True:
            try:
                chunk = os.read(self._from_r, 1 << 20)
            except OSError:
                chunk = b""
            if not chunk:
                with self._cv:
                    self._closed = True
                    self._cv.notify_all()
                for q in list(self._waiting.values()):
                    q.put({"error": {"message": "browser closed"}})
                return
            buf += chunk
            while b"\0" in buf:
                raw, buf = buf.split(b"\0", 1)
                msg = json.loads(raw)
                if "id" in msg and msg["id"] in self._waiting:
                    self._waiting.pop(msg["id"]).put(msg)
                else:
                    with self._cv:
                        self.events.append(msg)
                        self._cv.notify_all()

    def send(self, method, params=None, session=None, timeout=30):
        with self._lock:
            self._id += 1
            mid = self._id
            q: queue.Queue = queue.Queue()
            self._waiting[mid] = q
            msg = {"id": mid, "method": method, "params": params or {}}
            if session:
                msg["sessionId"] = session
            os.write(self._to_w, json.dumps(msg).encode() + b"\0")
        reply = q.get(timeout=timeout)
        if "error" in reply:
            raise RuntimeError(f"{method}: {reply['error']}")
        return reply.get("result", {})

    def wait_event(self, method, session=None, timeout=30, since=0):
        end = time.monotonic() + timeout
        with self._cv:
            while True:
                for ev in self.events[since:]:
                    if ev.get("method") == method and (session is None or ev.get("sessionId") == session):
                        return ev
                left = end - time.monotonic()
                if left <= 0:
                    raise TimeoutError(method)
                self._cv.wait(left)

    def page(self, width=1200, height=900, mobile=False, dark=False):
        return Page(self, width, height, mobile, dark)

    def close(self):
        try:
            self.send("Browser.close", timeout=5)
        except Exception:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for fd in (self._to_w, self._from_r):
            try:
                os.close(fd)
            except OSError:
                pass
        shutil.rmtree(self.profile, ignore_errors=True)


class Page:
    def __init__(self, b: Browser, width, height, mobile, dark):
        self.b = b
        self.target = b.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.sid = b.send("Target.attachToTarget", {"targetId": self.target, "flatten": True})["sessionId"]
        for m in ("Page.enable", "Network.enable", "Runtime.enable"):
            self.send(m)
        self.send("Emulation.setDeviceMetricsOverride",
                  {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": mobile})
        self.send("Emulation.setEmulatedMedia",
                  {"features": [{"name": "prefers-color-scheme", "value": "dark" if dark else "light"}]})

    def send(self, method, params=None, timeout=30):
        return self.b.send(method, params, self.sid, timeout)

    def mine(self, method):
        return [e["params"] for e in self.b.events if e.get("sessionId") == self.sid and e.get("method") == method]

    def goto(self, url, timeout=30):
        since = len(self.b.events)
        t0 = time.monotonic()
        self.send("Page.navigate", {"url": url})
        self.b.wait_event("Page.loadEventFired", self.sid, timeout, since)
        return time.monotonic() - t0

    def js(self, expr, timeout=30):
        r = self.send("Runtime.evaluate", {"expression": expr, "returnByValue": True, "awaitPromise": True},
                      timeout)
        if "exceptionDetails" in r:
            raise RuntimeError(f"{expr}: {r['exceptionDetails']}")
        return r["result"].get("value")

    def key(self, key, code=None, vk=0, text=None):
        base = {"key": key, "code": code or key, "windowsVirtualKeyCode": vk, "nativeVirtualKeyCode": vk}
        self.send("Input.dispatchKeyEvent", {"type": "keyDown", **base, **({"text": text} if text else {})})
        self.send("Input.dispatchKeyEvent", {"type": "keyUp", **base})

    def screenshot(self, path: Path, full=False):
        params = {"format": "png"}
        if full:
            params["captureBeyondViewport"] = True
        data = self.send("Page.captureScreenshot", params)["data"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))
        return path

    def close(self):
        try:
            self.b.send("Target.closeTarget", {"targetId": self.target})
        except Exception:
            pass


def dump_dom(url: str, extra=(), timeout=60) -> tuple[str, float]:
    """`chromium --headless --dump-dom <url>`: the DOM after the page's script ran."""
    profile = tempfile.mkdtemp(prefix="tc-view-dump-")
    try:
        t0 = time.monotonic()
        out = subprocess.run([CHROMIUM, *BROWSER_FLAGS, *extra, f"--user-data-dir={profile}", "--dump-dom", url], capture_output=True, timeout=timeout)
        return out.stdout.decode("utf-8", "replace"), time.monotonic() - t0
    finally:
        shutil.rmtree(profile, ignore_errors=True)
