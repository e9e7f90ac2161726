"""The repository as a Claude Code plugin and marketplace, judged by the Claude Code CLI itself.

The CLI comes from npm (`@anthropic-ai/claude-code`), installed once into a prefix under
~/.cache/tc-git-test/claude (or $TC_CLAUDE_CLI: a `claude` binary to use instead) and run
offline with HOME pointing at a scratch directory: `plugin validate --strict`,
`plugin marketplace add`, `plugin install`, `plugin details`, `plugin list`.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import clean_env, npm_cli

REPO = Path(__file__).resolve().parents[1]
PACKAGE = "@anthropic-ai/claude-code"


def _claude_cli() -> Path:
    return npm_cli("TC_CLAUDE_CLI", "claude", PACKAGE, "claude", "the Claude Code CLI that judges the plugin")


@pytest.fixture(scope="module")
def claude():
    return _claude_cli()


@pytest.fixture
def home(tmp_path):
    h = tmp_path / "home"
    h.mkdir()
    return h


def run(claude: Path, home: Path, *args: str, cwd=None, timeout=120) -> subprocess.CompletedProcess:
    env = clean_env(HOME=str(home), DISABLE_TELEMETRY="1", DISABLE_AUTOUPDATER="1",
                    CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1", NO_COLOR="1")
    env.pop("CLAUDE_CONFIG_DIR", None)
    env.pop("ANTHROPIC_API_KEY", None)
    r = subprocess.run([str(claude), *args], capture_output=True, text=True, env=env, cwd=cwd or home,
                       timeout=timeout, stdin=subprocess.DEVNULL)
    r.text = re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", r.stdout + r.stderr)
    return r


def published_copy(dest: Path) -> Path:
    """The repository as it would be published: tracked and untracked-not-ignored files (no
    virtualenvs, caches or stores), symlinks kept as links."""
    r = subprocess.run(["git", "-C", str(REPO), "ls-files", "-co", "--exclude-standard", "-z"],
                       capture_output=True, env=clean_env())
    if r.returncode != 0:
        shutil.copytree(REPO, dest, symlinks=True,
                        ignore=shutil.ignore_patterns(".git", "*venv*", "__pycache__", ".checkpoints", "node_modules"))
        return dest
    for rel in r.stdout.decode().split("\0"):
        if not rel or rel.split("/")[0].endswith("venv") or "/site-packages/" in rel:
            continue
        src, dst = REPO / rel, dest / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_symlink():
            os.symlink(os.readlink(src), dst)
        elif src.is_file():
            shutil.copy2(src, dst)
    return dest


# ----------------------------------------------------------------------------- static checks
def test_manifests_agree():
    plugin = json.loads((REPO / ".claude-plugin" / "plugin.json").read_text())
    market = json.loads((REPO / ".claude-plugin" / "marketplace.json").read_text())
    entry = next(p for p in market["plugins"] if p["name"] == plugin["name"])
    assert entry["source"] == "./" and entry.get("version", plugin["version"]) == plugin["version"]
    import tomllib

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert plugin["version"] == project["version"], "plugin.json version must follow pyproject.toml"
    mcp = json.loads((REPO / ".mcp.json").read_text())["mcpServers"]["tc-git"]
    assert mcp["command"] in project["scripts"], "the bundled MCP server must be a console script of the package"


def test_plugin_hooks_call_the_hook_entry():
    """The plugin's hooks start tc-hook, the console script pip wrote for the Python that
    installed tc-git (`tc-hook.exe` on Windows), with no shell script in between and no
    ${CLAUDE_PLUGIN_ROOT} path (Claude Code runs hooks with Git Bash on Windows, where that
    variable holds backslashes): the same command on every platform, and the same handlers
    `tc-git hooks install` writes, but found on PATH (a plugin cannot know where tc-git lives)."""
    from tc_git.cli.hooks import claude_config

    cfg = json.loads((REPO / "hooks" / "hooks.json").read_text())["hooks"]
    assert cfg == claude_config(["tc-hook"], "linux") == claude_config(["tc-hook"], "win32")
    for groups in cfg.values():
        for g in groups:
            for h in g["hooks"]:
                assert h["type"] == "command" and h["command"].split()[0] == "tc-hook", h
    assert not list((REPO / "hooks").glob("*.sh")) and not list((REPO / "hooks").glob("*.cmd"))


def test_snippets_match_the_installer():
    from tc_git.cli.hooks import claude_config, codex_config

    assert json.loads((REPO / "hooks" / "settings-snippet.json").read_text()) == {"hooks": claude_config(["tc-hook"])}
    assert json.loads((REPO / "hooks" / "codex-hooks.json").read_text()) == {"hooks": codex_config(["tc-hook"])}


def test_plugin_hook_runs_through_the_console_script(tmp_path):
    """The plugin's SessionStart command as the agent's shell runs it, with the venv's bin on
    PATH; iproute2's `tc` earlier on PATH is never involved."""
    import sys

    bindir = tmp_path / "bin"
    bindir.mkdir()
    shutil.copy("/bin/false", bindir / "tc")
    from tc_git.engine import Engine

    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "f").write_text("x")
    Engine(ws).init("via the console script")
    cmd = json.loads((REPO / "hooks" / "hooks.json").read_text())["hooks"]["SessionStart"][0]["hooks"][0]["command"]
    ev = json.dumps({"hook_event_name": "SessionStart", "cwd": str(ws), "source": "startup", "session_id": "s"})
    r = subprocess.run(["/bin/sh", "-c", cmd], input=ev, text=True, capture_output=True,
                       env=clean_env(PATH=f"{bindir}:{os.path.dirname(sys.executable)}:/usr/bin:/bin"))
    assert r.returncode == 0, r.stderr
    assert "via the console script" in json.loads(r.stdout)["hookSpecificOutput"]["additionalContext"]


# ----------------------------------------------------------------------------- the CLI judge
def test_validate_strict(claude, home):
    for target in (REPO, REPO / ".claude-plugin" / "plugin.json"):
        r = run(claude, home, "plugin", "validate", "--strict", str(target))
        assert r.returncode == 0 and "Validation passed" in r.text, r.text


def test_marketplace_add_install_details(claude, home, tmp_path):
    repo = published_copy(tmp_path / "tc-git")
    r = run(claude, home, "plugin", "validate", "--strict", str(repo))
    assert r.returncode == 0, r.text
    r = run(claude, home, "plugin", "marketplace", "add", str(repo))
    assert r.returncode == 0 and "tc-git" in r.text, r.text
    r = run(claude, home, "plugin", "install", "tc-git@tc-git")
    assert r.returncode == 0 and "Successfully installed" in r.text, r.text
    r = run(claude, home, "plugin", "list")
    assert r.returncode == 0 and "tc-git@tc-git" in r.text and "enabled" in r.text, r.text
    r = run(claude, home, "plugin", "details", "tc-git@tc-git")
    assert r.returncode == 0, r.text
    assert re.search(r"Hooks \(4\)\s+SessionStart, PostToolUse, PreCompact, SessionEnd", r.text), r.text
    assert re.search(r"MCP servers \(1\)\s+tc-git", r.text), r.text
    assert re.search(r"Skills \(1\)\s+tc-git", r.text), r.text  # skills/tc-git/SKILL.md -> ../../SKILL.md
    settings = json.loads((home / ".claude" / "settings.json").read_text())
    assert settings["enabledPlugins"] == {"tc-git@tc-git": True}
    installed = json.loads((home / ".claude" / "plugins" / "installed_plugins.json").read_text())
    path = Path(installed["plugins"]["tc-git@tc-git"][0]["installPath"])
    assert (path / "hooks" / "hooks.json").is_file()
    assert (path / "skills" / "tc-git" / "SKILL.md").read_text() == (REPO / "SKILL.md").read_text()
    # the installed plugin's own hook command, as Claude Code would run it
    import sys

    from tc_git.engine import Engine

    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "f.txt").write_text("x")
    Engine(ws).init("plugin-installed hook")
    hooks_cfg = json.loads((path / "hooks" / "hooks.json").read_text())["hooks"]
    cmd = hooks_cfg["SessionStart"][0]["hooks"][0]["command"]
    ev = json.dumps({"hook_event_name": "SessionStart", "cwd": str(ws), "source": "startup", "session_id": "s"})
    hr = subprocess.run(["/bin/sh", "-c", cmd], input=ev, text=True, capture_output=True,
                        env=clean_env(CLAUDE_PLUGIN_ROOT=str(path), HOME=str(home),
                                      PATH=f"{Path(sys.executable).parent}:/usr/bin:/bin"))
    assert hr.returncode == 0, hr.stderr
    assert "plugin-installed hook" in json.loads(hr.stdout)["hookSpecificOutput"]["additionalContext"]
    r = run(claude, home, "plugin", "uninstall", "tc-git@tc-git")
    assert r.returncode == 0, r.text
