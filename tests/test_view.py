"""`tc view`: the HTML page, judged by a real headless Chromium (DevTools protocol over a pipe,
and `--dump-dom` as a second, independent reading)."""
from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest
from test_view_support import CHROMIUM, FAKE_KEY, SCRIPT_TEXT, Browser, dump_dom, make_task, record_sessions

import tc_git.cli
from tc_git.timeline.view import Limits, build

ARTIFACTS = Path(__file__).resolve().parents[1] / "test-artifacts"
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="chromium is not installed (apt-get install -y chromium); .ci/run installs it")


def tc_main(argv) -> int:
    return tc_git.cli.main(argv)


def tc(*args, capsys) -> dict:
    rc = tc_main(["--json", *args])
    out = capsys.readouterr().out
    return {"rc": rc, **json.loads(out)}


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    ws = tmp_path_factory.mktemp("view") / "ws"
    engine, tid, commits = make_task(ws)
    facts = record_sessions(engine, commits[2])
    out = ws.parent / "view.html"
    rc = tc_main(["-C", str(ws), "--json", "view", "-o", str(out)])
    assert rc == 0
    return {"ws": ws, "engine": engine, "task": tid, "commits": commits, "html": out,
            "text": out.read_text(encoding="utf-8"), **facts}


@pytest.fixture(scope="module")
def browser():
    if CHROMIUM is None:
        pytest.skip("chromium is not installed (apt-get install -y chromium); .ci/run installs it")
    b = Browser()
    yield b
    b.close()


def until(cond, seconds: float = 30.0):
    """cond() once true, polled until a deadline (what the page does runs on Chromium's timers
    and processes: on a loaded machine a fixed pause can end before it did), else its last value."""
    end = time.monotonic() + seconds
    while not (v := cond()) and time.monotonic() < end:
        time.sleep(0.05)
    return v


def open_page(browser, url, **kw):
    p = browser.page(**kw)
    p.goto(url)
    # the script runs before `load`; this only guards against surprises
    until(lambda: p.js("document.documentElement.dataset.ready") == "1")
    return p


# ------------------------------------------------------------------------------ the file itself
def test_file_is_self_contained_and_escaped(site):
    text = site["text"]
    csp = re.search(r'<meta http-equiv="Content-Security-Policy" content="([^"]+)">', text)
    assert csp, "CSP meta tag missing"
    policy = csp.group(1).replace("&#x27;", "'")
    for part in ("default-src 'none'", "style-src 'unsafe-inline'", "img-src data:", "script-src 'unsafe-inline'"):
        assert part in policy
    assert not re.search(r"""(?:src|href|action)\s*=\s*["']?\s*(?:https?:)?//""", text, re.I)
    assert "<link rel=\"stylesheet\"" not in text and "@import" not in text
    # hostile text never appears as markup: JSON data escapes every '<'
    assert SCRIPT_TEXT not in text
    assert "</script><b>" not in text
    assert len(re.findall(r"<script\b", text)) == len(re.findall(r"</script>", text))
    # secrets are redacted in code notes and in the conversation alike
    assert FAKE_KEY not in text
    assert "[REDACTED:aws-access-token]" in text


def test_cli_defaults_and_session_selection(site, capsys, tmp_path):
    ws = str(site["ws"])
    r = tc("-C", ws, "view", capsys=capsys)
    assert r["rc"] == 0 and Path(r["path"]).is_file()
    assert Path(r["path"]).parent == site["engine"].store.path / "view"  # never inside the captured tree
    assert r["tasks"] == [site["task"]] and len(r["sessions"]) == 2
    r = tc("-C", ws, "view", "--session", "hostile-1", "-o", str(tmp_path / "s.html"), capsys=capsys)
    assert r["sessions"] == ["generic-hostile-1"] and r["tasks"] == [] and r["events"] == 5
    r = tc("-C", ws, "view", "--task", site["task"], "-o", str(tmp_path / "t.html"), capsys=capsys)
    assert r["tasks"] == [site["task"]]
    assert r["sessions"] == [site["claude"].session]  # the session its milestone links
    assert tc_main(["-C", ws, "view", "--session", "nope"]) == 2
    assert "no recorded session" in capsys.readouterr().err


def test_caps_bound_the_page(tmp_path):
    from tc_git.engine import Engine

    ws = tmp_path / "big"
    ws.mkdir()
    e = Engine(ws)
    tid = e.init("big")["task_id"]
    for i in range(3):
        (ws / "big.txt").write_text("".join(f"row {i} {n} " + "x" * 50 + "\n" for n in range(3000)))
        (ws / "long.py").write_text("s = '" + "y" * 5000 + "'\n")
        e.save(f"step {i}")
    lim = Limits(diff_chars=4000, diff_line=100, diff_budget=6000)
    text, summary = build(e.repo, [tid], [], lim=lim)
    data = [json.loads(m.replace("\\u003c", "<")) for m in
            re.findall(r'<script type="application/json" id="tc-diff-\d+">(.*?)</script>', text)]
    assert len(data) == 3
    assert data[0].get("tr") == 1 and any(f.get("x") for f in data[0]["f"])
    assert all(len(line) <= 103 for f in data[0]["f"] for line in f.get("l", []))
    assert data[2].get("budget") == 1 and "l" not in data[2]["f"][0]  # the budget is spent by then
    assert summary["truncated"]["diffs"] is True
    assert summary["bytes"] < 60_000


# ------------------------------------------------------------------------------ in Chromium
@needs_chromium
def test_dom_in_chromium(site, browser):
    url = site["html"].as_uri()
    p = open_page(browser, url + "#expand-all", width=412, height=900, mobile=True)
    try:
        assert float(p.js("document.documentElement.dataset.renderMs")) > 0
        titles = p.js("[...document.querySelectorAll('.row .title')].map(e => e.textContent)")
        for t in ("first step adds app.py", "second step handles strings", "third step: hostile text"):
            assert t in titles
        kinds = p.js("[...document.querySelectorAll('section[id^=task] .row .badge.k')].map(e => e.textContent)")
        assert {"step 1", "step 3", "drift d0001", "restore"} <= set(kinds)
        # a diff line, expanded, highlighted: the string token is its own span
        lines = p.js("[...document.querySelectorAll('.dl.a')].map(e => e.textContent)")
        assert "+print(add('x', 'y'))" in lines
        assert p.js("[...document.querySelectorAll('.dl.a .s')].some(e => e.textContent === \"'x'\")")
        assert p.js("[...document.querySelectorAll('.dl.d')].some(e => e.textContent === '-print(add(1, 2))')")
        # milestone: on the event, on the code step, and linked from one to the other
        ms = p.js("[...document.querySelectorAll('.badge.ms')].map(e => [e.textContent, e.getAttribute('href')])")
        code_link = "#c-" + site["commits"][2][:12]
        event_link = "#e-" + site["milestone_event"][:12]
        assert ["★ tests-green", event_link] in ms  # on the code step, pointing at the event
        assert p.js(f"!!document.querySelector('{event_link} a[href=\"{code_link}\"]')")
        # branches: the recorded fork and the named branch, in the tree and on their rows
        tree = p.js("[...document.querySelectorAll('.tree li')].map(e => e.textContent).join('\\n')")
        assert site["branch"] in tree
        fork = [b for b in site["claude"].branches if b.startswith("fork-")][0]
        assert fork in tree
        assert p.js(f"!!document.querySelector('.row.ind .fork') && document.querySelector('.row.ind .fork').textContent.includes('{fork}')")
        tips = p.js("[...document.querySelectorAll('.badge.tip')].map(e => e.textContent)")
        assert "⎇ " + site["branch"] in tips and "⎇ main" in tips
        # the hostile message is text, in the task and in the conversation
        hostile = p.js(f"[...document.querySelectorAll('.row .txt')].filter(e => e.textContent.includes({json.dumps(SCRIPT_TEXT)})).map(e => e.outerHTML)")
        assert len(hostile) >= 2
        assert all("&lt;script&gt;alert(1)&lt;/script&gt;" in h for h in hostile)
        assert p.js("[...document.querySelectorAll('script')].every(s => s.type === 'application/json' || s.textContent.startsWith('(function'))")
        assert not p.js("[...document.querySelectorAll('b')].length")
        # long tool output folded, then shown in full after expand-all
        assert p.js("[...document.querySelectorAll('button[data-act=out]')].some(b => b.textContent.startsWith('output: 40 lines'))")
        assert p.js("[...document.querySelectorAll('pre.out')].some(e => e.textContent.includes('line 39'))")
        # nothing left the page: one request (the file), no dialog, no error, no CSP violation
        urls = [r["request"]["url"] for r in p.mine("Network.requestWillBeSent")]
        assert urls == [url + "#expand-all"] or urls == [url], urls
        assert p.mine("Page.javascriptDialogOpening") == []
        assert p.mine("Runtime.exceptionThrown") == []
        assert p.js("document.documentElement.dataset.cspViolations") is None
        assert p.js("performance.getEntriesByType('resource').length") == 0
        ARTIFACTS.mkdir(exist_ok=True)
        p.js("window.scrollTo(0, 0)")
        p.screenshot(ARTIFACTS / "view-phone.png")
        # phone width: nothing forces horizontal scrolling of the page itself
        assert p.js("document.documentElement.scrollWidth") <= 412
    finally:
        p.close()


@needs_chromium
def test_dark_mode_screenshot(site, browser):
    p = open_page(browser, site["html"].as_uri(), width=412, height=900, mobile=True, dark=True)
    try:
        bg = p.js("getComputedStyle(document.body).backgroundColor")
        assert bg == "rgb(13, 17, 23)", bg
        p.js(f"document.getElementById('e-{site['milestone_event'][:12]}').scrollIntoView()")
        time.sleep(0.2)
        p.screenshot(ARTIFACTS / "view-phone-dark.png")
    finally:
        p.close()


@needs_chromium
def test_keyboard_search_and_fold(site, browser):
    p = open_page(browser, site["html"].as_uri())
    try:
        assert p.js("document.querySelector('.dl')") is None  # diffs are built only when opened
        p.key("j", "KeyJ", 74)
        p.key("j", "KeyJ", 74)
        first_two = p.js("[...document.querySelectorAll('.row')].slice(0, 2).map(e => e.id)")
        assert p.js("document.documentElement.dataset.sel") == first_two[1]
        p.key("ArrowUp", "ArrowUp", 38)
        assert p.js("document.documentElement.dataset.sel") == first_two[0]
        p.key("j", "KeyJ", 74)
        p.key("Enter", "Enter", 13)  # opens the selected step: files and its diff
        assert p.js("document.querySelectorAll('.row.sel .dl').length") > 0
        p.key("/", "Slash", 191)
        assert p.js("document.activeElement.id") == "q"
        assert p.js("document.getElementById('q').value") == ""  # the '/' was not typed
        p.send("Input.insertText", {"text": "hostile"})
        # matches are listed in a results panel (rows never change display: fast at 10,000 rows),
        # once the search's debounce timer ran
        third = "#c-" + site["commits"][3][:12]
        found = until(lambda: (f := p.js("[...document.querySelectorAll('.rlist li.res a')]"
                                         ".map(a => [a.textContent, a.getAttribute('href')])"))
                      and ["step 3: third step: hostile text", third] in f and f)
        assert found and ["step 3: third step: hostile text", third] in found, found
        assert "match" in p.js("document.getElementById('count').textContent")
        assert p.js("getComputedStyle(document.querySelector('section')).display") == "none"
        p.key("Enter", "Enter", 13)  # leaves the box on the first result
        p.key("j", "KeyJ", 74)
        p.key("k", "KeyK", 75)
        p.key("Enter", "Enter", 13)  # opens it: the search closes and the row is selected
        assert until(lambda: p.js("document.documentElement.dataset.sel") == found[0][1][1:]), \
            p.js("document.documentElement.dataset.sel")
        assert p.js("document.querySelector('.results').hidden") is True
        p.key("/", "Slash", 191)
        p.send("Input.insertText", {"text": "zzz-nothing"})
        time.sleep(0.3)
        p.key("Escape", "Escape", 27)
        assert p.js("document.querySelector('.results').hidden") is True
        assert p.js("getComputedStyle(document.querySelector('section')).display") == "block"
        # fold the recorded fork: its later events hide, the fork's first row stays
        before = p.js("document.querySelectorAll('.row').length")
        p.js("document.querySelector('button[data-act=fold]').click()")
        assert p.js("document.querySelectorAll('.row').length") < before
        assert p.js("document.querySelector('button[data-act=fold]').textContent").startswith("unfold")
        p.js("document.querySelector('button[data-act=fold]').click()")
        assert p.js("document.querySelectorAll('.row').length") == before
        order = p.js("[...document.querySelectorAll('section[id^=session-claude] .row .gut')].map(g => +g.textContent.slice(1))")
        assert order == sorted(order)  # unfolded rows came back in place
    finally:
        p.close()


@needs_chromium
def test_dump_dom_reading(site):
    """The simplest judge: the DOM Chromium prints after the script ran."""
    url = site["html"].as_uri()
    dom, _ = dump_dom(url, extra=["--virtual-time-budget=2000"])
    assert 'data-ready="1"' in dom
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in dom
    assert "first step adds app.py" in dom and "★ tests-green" in dom
    assert 'class="dl' not in dom  # no diff is built until asked for
    dom, _ = dump_dom(url + "#expand-all", extra=["--virtual-time-budget=2000"])
    assert '<span class="dl a">+print(add(<span class="s">\'x\'</span>' in dom


@needs_chromium
def test_request_monitor_and_csp_really_work(site, browser, tmp_path):
    """Negative controls: the same monitor sees a request when the page has no CSP, and the CSP
    turns the same request into a violation that never leaves the page."""
    text = site["text"]
    img = '<img src="http://tc-view-probe.invalid/x.png" alt="">'
    no_csp = re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", text).replace("<main", img + "<main", 1)
    with_csp = text.replace("<main", img + "<main", 1)
    (tmp_path / "no-csp.html").write_text(no_csp, encoding="utf-8")
    (tmp_path / "csp.html").write_text(with_csp, encoding="utf-8")
    p = open_page(browser, (tmp_path / "no-csp.html").as_uri())
    try:
        assert until(lambda: any("tc-view-probe.invalid" in r["request"]["url"]
                                 for r in p.mine("Network.requestWillBeSent")))
    finally:
        p.close()
    p = open_page(browser, (tmp_path / "csp.html").as_uri())
    try:
        # Chromium announces the attempt, then blocks it itself: it fails with reason "csp"
        def probe():
            return [r["requestId"] for r in p.mine("Network.requestWillBeSent")
                    if "tc-view-probe.invalid" in r["request"]["url"]]

        def failed():
            return {f["requestId"]: f.get("blockedReason") for f in p.mine("Network.loadingFailed")}

        assert until(lambda: probe() and all(r in failed() for r in probe())), (probe(), failed())
        assert all(failed()[r] == "csp" for r in probe()), failed()
        probe = probe()
        assert not [r for r in p.mine("Network.responseReceived") if r["requestId"] in probe]
        assert int(p.js("document.documentElement.dataset.cspViolations || '0'")) >= 1
    finally:
        p.close()


@needs_chromium
def test_every_fixture_transcript_renders(browser, tmp_path):
    """Each recorded fixture (Claude Code with rewinds and subagents, Codex) becomes rows, one per
    event, and the page runs without a script error."""
    from test_view_support import FIXTURES

    from tc_git.engine import Engine
    from tc_git.trajectory.recorder import record_file

    ws = tmp_path / "ws"
    ws.mkdir()
    e = Engine(ws)
    e.init("fixtures")
    counts = {}
    with e.store.lock():
        for f in sorted(FIXTURES.glob("*.jsonl")):
            r = record_file(e.repo, str(f))
            counts[r.session] = counts.get(r.session, 0) + r.events
    sessions = sorted(counts)
    text, summary = build(e.repo, [], sessions)
    path = tmp_path / "all.html"
    path.write_text(text, encoding="utf-8")
    p = open_page(browser, path.as_uri())  # no fragment: rows after the first screen come in slices
    try:
        assert p.js("document.documentElement.dataset.ready") == "1"
        assert p.mine("Runtime.exceptionThrown") == []
        per = p.js("Object.fromEntries([...document.querySelectorAll('section[id^=session-]')]"
                   ".map(s => [s.id.slice(8), s.querySelectorAll('.row').length]))")
        stored = {s["key"]: len(s["events"]) for s in json.loads(
            re.search(r'id="tc-data">(.*?)</script>', text).group(1).replace("\\u003c", "<"))["sessions"]}
        assert per == stored
        assert all(n > 0 for n in per.values())
        assert p.js("document.querySelectorAll('.row .fork').length") > 0  # rewinds and subagents branch
    finally:
        p.close()


def test_view_merges_the_user_level_store(tmp_path, capsys, monkeypatch):
    """`tc view` in a project shows its workspace store's sessions and the sessions the hooks
    recorded for it into the user-level store (marked `store: "user"`, read with that store's
    milestones), never another project's; a named session is found in either; a project with no
    store of its own shows its user-level sessions alone."""
    from conftest import TRANSCRIPTS

    from tc_git.engine import Engine
    from tc_git.trajectory.userstore import record_session

    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    proj, other, plain = tmp_path / "proj", tmp_path / "other", tmp_path / "plain"
    for d in (proj, other, plain):
        d.mkdir()
    mine = record_session(TRANSCRIPTS / "claude-daaain-1.jsonl", proj, milestone="before-init")
    theirs = record_session(TRANSCRIPTS / "claude-drmaciver-1.jsonl", other)
    alone = record_session(TRANSCRIPTS / "codex-daaain-2.jsonl", plain)
    (proj / "a.txt").write_text("1\n")
    e = Engine(proj)
    tid = e.init("merged view")["task_id"]
    own = e.record(steps=[{"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi"}],
                   session="own")

    def page(path) -> dict:
        text = Path(path).read_text(encoding="utf-8")
        raw = re.search(r'<script type="application/json" id="tc-data">(.*?)</script>', text, re.S).group(1)
        return json.loads(raw.replace("\\u003c", "<"))

    r = tc("-C", str(proj), "view", "-o", str(tmp_path / "all.html"), capsys=capsys)
    assert r["rc"] == 0 and r["tasks"] == [tid]
    assert sorted(r["sessions"]) == sorted([own["session"], mine["session"]]) and theirs["session"] not in r["sessions"]
    assert r["user_sessions"] == [mine["session"]]
    data = page(r["path"])
    stores = {s["key"]: s.get("store") for s in data["sessions"]}
    assert stores == {own["session"]: None, mine["session"]: "user"}
    user_events = next(s for s in data["sessions"] if s["key"] == mine["session"])["events"]
    assert len(user_events) == mine["events"] and len({ev["c"] for ev in user_events}) == mine["events"]
    assert [m["name"] for m in data["milestones"]] == ["before-init"]  # the user store's milestone
    assert any(ev.get("ms") == ["before-init"] for ev in user_events)
    # named: either store; another project's session is not this project's to show
    r = tc("-C", str(proj), "view", "--session", mine["session"].split("-", 1)[1], "-o",
           str(tmp_path / "one.html"), capsys=capsys)
    assert r["sessions"] == [mine["session"]] and r["tasks"] == []
    assert tc_main(["-C", str(proj), "view", "--session", theirs["session"]]) == 2
    assert "no recorded session" in capsys.readouterr().err
    # a task named: only what it links (nothing from the user-level store)
    r = tc("-C", str(proj), "view", "--task", tid, "-o", str(tmp_path / "t.html"), capsys=capsys)
    assert "user_sessions" not in r
    # no store of its own: the user-level sessions of that project alone, the page in that store
    r = tc("-C", str(plain), "view", capsys=capsys)
    assert r["rc"] == 0 and r["sessions"] == [alone["session"]] and r["store"] == "user"
    assert Path(r["path"]).is_relative_to(tmp_path / "xdg") and not any(plain.iterdir())
    empty = tmp_path / "empty"
    empty.mkdir()
    assert tc_main(["-C", str(empty), "view"]) == 2  # nothing recorded for it anywhere
    assert "nothing to view" in capsys.readouterr().err
    # a session in both stores (recorded by the hooks before `tc init`, then into the task's store)
    # is shown once, from the workspace store
    again = e.record(transcript=str(TRANSCRIPTS / "claude-daaain-1.jsonl"))
    assert again["session"] == mine["session"]
    r = tc("-C", str(proj), "view", "-o", str(tmp_path / "both.html"), capsys=capsys)
    assert sorted(r["sessions"]) == sorted([own["session"], mine["session"]]) and "user_sessions" not in r
    assert [s.get("store") for s in page(r["path"])["sessions"]] == [None, None]
