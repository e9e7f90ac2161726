"""SessionStart prints the handoff written at the last record (tc_git/timeline/handoff_cache.py) without
loading pygit2; when the task's head moved on without it, the hook resumes the slow way."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import clean_env, git

pytestmark = pytest.mark.usefixtures("fsck_after")

PROBE = ("import sys, io, json; sys.stdin = io.StringIO(json.dumps({'hook_event_name': 'SessionStart', "
         "'cwd': %r, 'session_id': 's'}));"
         "from tc_git import hooks; hooks.main(['session-start']);"
         "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in ('mcp', 'pygit2'))))")


def session_start(ws):
    r = subprocess.run([sys.executable, "-c", PROBE % str(ws)], capture_output=True, text=True, env=clean_env())
    assert r.returncode == 0, r.stderr
    lines = r.stdout.strip().splitlines()
    return json.loads(lines[0])["hookSpecificOutput"]["additionalContext"], json.loads(lines[-1])


@pytest.fixture
def ws(tmp_path):
    from tc_git.engine import Engine

    root = tmp_path / "ws"
    (root / "src").mkdir(parents=True)
    (root / "src" / "a.py").write_text("print('a')\n")
    e = Engine(root)
    e.init("cached task", goal="start fast")
    e.save("first step", conclusion="a.py prints a", next="make b.py")
    return root


def test_session_start_reads_the_cached_handoff_without_pygit2(ws):
    from tc_git.engine import Engine

    text, loaded = session_start(ws)
    assert loaded == []  # neither pygit2 nor mcp
    assert Engine(ws).resume()["handoff"] in text and "as of its last record" in text
    # every record refreshes it: a capture, then a restore
    (ws / "src" / "a.py").write_text("print('b')\n")
    Engine(ws).capture()
    text, loaded = session_start(ws)
    assert loaded == [] and Engine(ws).resume()["handoff"] in text


def test_stale_cache_falls_back_to_a_full_resume(ws):
    from tc_git.engine import Engine

    store = ws / ".checkpoints"
    e = Engine(ws)
    tid = e.store.active_task()
    ref = f"refs/checkpoints/tasks/{tid}/head"
    head = git(store, "rev-parse", ref).decode().strip()
    parent = git(store, "rev-parse", head + "^").decode().strip()
    git(store, "update-ref", ref, parent, head)  # the head moved without a new cache (another tool)
    text, loaded = session_start(ws)
    assert "pygit2" in loaded and "as of its last record" not in text
    assert Engine(ws).resume()["handoff"] in text
    git(store, "update-ref", ref, head, parent)
    git(store, "pack-refs", "--all")  # packed refs are read too
    text, loaded = session_start(ws)
    assert loaded == [] and "as of its last record" in text


def test_post_tool_use_of_an_edit_tool_refreshes_only_its_files(ws):
    """Write/Edit name the files they wrote: the drift refreshes just those (a concurrent change
    elsewhere stays unsaved); a Bash call may have written anything: the whole workspace."""
    from tc_git.engine import Engine

    (ws / "src" / "a.py").write_text("print('edited by the tool')\n")
    (ws / "other.txt").write_text("written by something else\n")

    def hook(tool, tool_input):
        ev = {"hook_event_name": "PostToolUse", "cwd": str(ws), "session_id": "s", "tool_name": tool,
              "tool_input": tool_input, "tool_use_id": f"id-{tool}"}
        r = subprocess.run([sys.executable, "-m", "tc_git.hooks", "post-tool-use"], input=json.dumps(ev),
                           capture_output=True, text=True, env=clean_env(TC_GIT="off"))
        assert r.returncode == 0 and not r.stderr, r.stderr
        e = Engine(ws)
        return e.repo[e._timeline().head_oid()].tree

    tree = hook("Write", {"file_path": str(ws / "src" / "a.py"), "content": "..."})
    assert Engine(ws).repo[tree["src/a.py"].id].data == b"print('edited by the tool')\n"
    assert "other.txt" not in tree
    tree = hook("Bash", {"command": "true"})
    assert "other.txt" in tree
