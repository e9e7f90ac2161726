"""`tc-git setup --client claude|codex|cursor` and `--undo` in a temporary HOME that already has
settings of its own: afterwards every file is byte-identical and what setup created is gone.
Claude Code's own CLI (from npm, as in test_plugin.py) judges that the server connects without
the venv on PATH."""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from conftest import TC, clean_env


def snapshot(root: Path) -> dict:
    """Every file and directory under root with its bytes (directories as None)."""
    out = {}
    for dirpath, dirs, files in os.walk(root):
        for d in dirs:
            out[os.path.relpath(os.path.join(dirpath, d), root)] = None
        for f in files:
            p = os.path.join(dirpath, f)
            out[os.path.relpath(p, root)] = Path(p).read_bytes()
    return out


def tc(home, *args, cwd=None):
    env = clean_env(HOME=str(home), XDG_STATE_HOME=str(home.parent / "state"))
    env.pop("CLAUDE_CONFIG_DIR", None)
    env.pop("CODEX_HOME", None)
    r = subprocess.run(TC + ["--json", *args], capture_output=True, text=True, cwd=cwd or home, env=env)
    assert r.returncode == 0, r.stderr + r.stdout
    return json.loads(r.stdout)


@pytest.fixture
def home(tmp_path):
    """A home whose agents are already configured by their user, in the user's own formatting."""
    h = tmp_path / "home"
    (h / ".claude" / "skills" / "other").mkdir(parents=True)
    (h / ".claude" / "skills" / "other" / "SKILL.md").write_text("---\nname: other\n---\nmine\n")
    (h / ".claude" / "settings.json").write_text(
        '{\n\t"model": "opus",\n\t"hooks": {\n\t\t"Stop": [{"hooks": [{"type": "command", "command": "notify-send done"}]}]\n\t}\n}')
    (h / ".claude.json").write_text(json.dumps({"numStartups": 3, "mcpServers": {
        "fs": {"type": "stdio", "command": "npx", "args": ["-y", "fs-server"], "env": {}}}}, indent=2))
    (h / ".codex").mkdir()
    (h / ".codex" / "config.toml").write_text('# my codex\nmodel = "gpt-5-codex"\n\n[features]\nweb_search = true\n')
    (h / ".cursor").mkdir()
    (h / ".cursor" / "mcp.json").write_text('{"mcpServers": {"db": {"command": "db-mcp"}}}\n')
    return h


@pytest.mark.parametrize("client", ["claude", "codex", "cursor"])
def test_setup_then_undo_is_byte_identical(home, client):
    before = snapshot(home)
    r = tc(home, "setup", "--client", client)
    assert r["server"][0].startswith("/") and "tc-git-mcp" in r["server"][0] or r["server"][1:] == ["-m", "tc_git"]
    what = {d["what"]: d for d in r["done"]}
    assert what["MCP server"]["changed"] and what["skill"]["changed"]
    after = snapshot(home)
    assert after != before
    if client == "claude":
        cfg = json.loads((home / ".claude.json").read_text())
        assert cfg["mcpServers"]["tc-git"]["command"] == r["server"][0] and "fs" in cfg["mcpServers"]
        assert cfg["numStartups"] == 3
        settings = (home / ".claude" / "settings.json").read_text()
        assert "\n\t\"model\"" in settings  # the user's tab indentation is kept
        assert (home / ".claude" / "skills" / "tc-git" / "SKILL.md").is_file()
    elif client == "codex":
        import tomllib

        cfg = tomllib.loads((home / ".codex" / "config.toml").read_text())
        assert cfg["mcp_servers"]["tc-git"]["command"] == r["server"][0]
        assert cfg["features"] == {"web_search": True, "codex_hooks": True} and cfg["model"] == "gpt-5-codex"
        assert (home / ".codex" / "hooks.json").is_file()
    else:
        cfg = json.loads((home / ".cursor" / "mcp.json").read_text())
        assert set(cfg["mcpServers"]) == {"db", "tc-git"}
        assert (home / ".cursor" / "skills" / "tc-git" / "SKILL.md").is_file()
        assert what["hooks"]["path"] is None  # Cursor: no hooks, said so
    # idempotent
    r2 = tc(home, "setup", "--client", client)
    assert not any(d["changed"] for d in r2["done"])
    assert snapshot(home) == after
    # undo: every file as it was, every created file and directory gone, no .bak anywhere
    tc(home, "setup", "--client", client, "--undo")
    assert snapshot(home) == before
    assert not (home.parent / "state" / "tc-git").exists()  # nor empty state directories


def test_undo_after_the_user_edited_keeps_their_edit(home):
    tc(home, "setup", "--client", "claude")
    cfg_path = home / ".claude.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["numStartups"] = 4  # Claude Code rewrites this file all the time
    cfg_path.write_text(json.dumps(cfg, indent=2))
    tc(home, "setup", "--client", "claude", "--undo")
    cfg = json.loads(cfg_path.read_text())
    assert cfg["numStartups"] == 4 and set(cfg["mcpServers"]) == {"fs"}


def test_skill_uninstall(home):
    tc(home, "skill", "install")
    target = home / ".claude" / "skills" / "tc-git"
    assert (target / "SKILL.md").is_file()
    r = tc(home, "skill", "uninstall")
    assert r["removed"] and not target.exists()
    assert (home / ".claude" / "skills" / "other" / "SKILL.md").is_file()


def test_claude_mcp_list_connects_without_the_venv_on_path(home, tmp_path):
    from test_plugin import _claude_cli, run

    claude = _claude_cli()
    tc(home, "setup", "--client", "claude")
    import shutil

    node = os.path.dirname(shutil.which("node") or "/usr/bin/node")
    env_path = f"{node}:/usr/bin:/bin"  # neither the venv nor any tc-git script on PATH
    r = subprocess.run([str(claude), "mcp", "list"], capture_output=True, text=True, timeout=120, cwd=home,
                       stdin=subprocess.DEVNULL,
                       env={**clean_env(HOME=str(home), DISABLE_TELEMETRY="1", DISABLE_AUTOUPDATER="1",
                                        CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1", NO_COLOR="1"),
                            "PATH": f"{claude.parent}:{env_path}"})
    text = r.stdout + r.stderr
    assert "tc-git" in text and "Connected" in text and "Failed" not in text.split("tc-git", 1)[1].split("\n")[0], text
    assert run  # the same runner as the plugin tests (HOME-isolated, offline)


def test_project_scope_then_undo(home, tmp_path):
    proj = tmp_path / "proj"
    (proj / ".claude").mkdir(parents=True)
    (proj / ".claude" / "settings.json").write_text('{"permissions": {"allow": []}}\n')
    before, home_before = snapshot(proj), snapshot(home)
    r = tc(home, "-C", str(proj), "setup", "--client", "claude", "--scope", "project")
    assert {d["path"] for d in r["done"] if d["what"] != "secret rules"} == {str(proj / ".mcp.json"), str(proj / ".claude" / "settings.json"),
                                              str(proj / ".claude" / "skills" / "tc-git" / "SKILL.md")}
    assert snapshot(home) == home_before  # nothing of the user's home touched
    tc(home, "-C", str(proj), "setup", "--client", "claude", "--scope", "project", "--undo")
    assert snapshot(proj) == before
