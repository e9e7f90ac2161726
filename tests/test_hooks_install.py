"""`tc hooks install|uninstall`: merge into the user's settings, never clobber, remove only ours."""
from __future__ import annotations

import json
import subprocess

import pytest
from conftest import TC, clean_env

UNRELATED = {
    "model": "opus",
    "permissions": {"allow": ["Bash(npm test:*)"]},
    "hooks": {
        "PostToolUse": [{"matcher": "Edit|Write", "hooks": [{"type": "command", "command": "npx prettier --write"}]}],
        "Stop": [{"hooks": [{"type": "command", "command": "notify-send done"}]}],
        "SessionStart": [{"matcher": "startup", "hooks": [
            {"type": "command", "command": "echo hello"},
            {"type": "command", "command": "tc-hook session-start"},  # an older install of ours
        ]}],
    },
}


def tc(home, *args, cwd=None, **env):
    r = subprocess.run(TC + ["--json", *args], capture_output=True, text=True, cwd=cwd,
                       env=clean_env(HOME=str(home), **env))
    assert r.returncode == 0, r.stderr + r.stdout
    return json.loads(r.stdout)


def commands(settings: dict) -> list[str]:
    return [h["command"] for groups in settings.get("hooks", {}).values() for g in groups for h in g["hooks"]]


@pytest.fixture
def home(tmp_path):
    h = tmp_path / "home"
    (h / ".claude").mkdir(parents=True)
    return h


def test_install_merges_and_uninstall_restores(home):
    path = home / ".claude" / "settings.json"
    path.write_text(json.dumps(UNRELATED, indent=2))
    r = tc(home, "hooks", "install")
    assert r["changed"] and r["settings"] == str(path)
    s = json.loads(path.read_text())
    assert s["model"] == "opus" and s["permissions"] == UNRELATED["permissions"]
    cmds = commands(s)
    for keep in ("npx prettier --write", "notify-send done", "echo hello"):
        assert keep in cmds
    assert "tc-hook session-start" not in cmds  # the old one of ours was replaced, not duplicated
    ours = [c for c in cmds if "tc_git.hooks" in c or "tc-hook" in c]
    assert len(ours) == 5 and sum("session-start" in c for c in ours) == 1
    bash = [g for g in s["hooks"]["PostToolUse"] if g.get("matcher") == "Bash"][0]["hooks"][0]
    assert bash["async"] is True
    assert not list((home / ".claude").glob("*.bak"))  # the first version is kept in tc-git's state dir
    # idempotent
    assert tc(home, "hooks", "install")["changed"] is False
    # the installed command really is a working hook entry
    ss = [g for g in s["hooks"]["SessionStart"] if "tc_git.hooks" in json.dumps(g) or "tc-hook" in json.dumps(g)][0]
    r = subprocess.run(ss["hooks"][0]["command"], shell=True, input='{"hook_event_name":"SessionStart","cwd":"/"}',
                       capture_output=True, text=True, env=clean_env(HOME=str(home)))
    assert r.returncode == 0 and r.stdout == "" and r.stderr == ""
    # uninstall removes ours only (and the old `tc-hook` one too), in the file's own formatting
    r = tc(home, "hooks", "uninstall", "--client", "claude")
    assert r["removed"] == 5
    s = json.loads(path.read_text())
    expected = json.loads(json.dumps(UNRELATED))
    expected["hooks"]["SessionStart"][0]["hooks"].pop()
    assert s == expected
    assert path.read_text() == json.dumps(expected, indent=2)  # no final newline, as the user had it
    assert tc(home, "hooks", "uninstall")["removed"] == 0
    assert not list((home / ".claude").glob("*.bak"))


def test_install_into_a_missing_file_and_remove_leaves_no_hooks_key(home):
    path = home / ".claude" / "settings.json"
    tc(home, "hooks", "install")
    assert set(json.loads(path.read_text())["hooks"]) == {"SessionStart", "PostToolUse", "PreCompact", "SessionEnd"}
    tc(home, "hooks", "uninstall")
    assert not path.exists()  # we created it: no `{}` left behind


def test_project_and_local_scope(home, tmp_path):
    proj = tmp_path / "proj"
    proj.mkdir()
    r = tc(home, "-C", str(proj), "hooks", "install", "--scope", "project")
    assert r["settings"] == str(proj / ".claude" / "settings.json")
    r = tc(home, "-C", str(proj), "hooks", "install", "--scope", "local")
    assert r["settings"] == str(proj / ".claude" / "settings.local.json")
    assert not (home / ".claude" / "settings.json").exists()


def test_invalid_settings_are_not_overwritten(home):
    path = home / ".claude" / "settings.json"
    path.write_text('{"model": "opus",,}')
    r = subprocess.run(TC + ["hooks", "install"], capture_output=True, text=True, env=clean_env(HOME=str(home)))
    assert r.returncode == 2 and "not valid JSON" in r.stderr
    assert path.read_text() == '{"model": "opus",,}'


def test_codex_install_enables_the_feature_flag_and_keeps_the_config(home):
    codex = home / ".codex"
    codex.mkdir()
    (codex / "config.toml").write_text('model = "gpt-5-codex"\n\n[features]\nweb_search = true\n\n[tui]\nx = 1\n')
    (codex / "hooks.json").write_text(json.dumps({"hooks": {"PreToolUse": [
        {"matcher": "Bash", "hooks": [{"type": "command", "command": "guard.sh"}]}]}}))
    config_before = (codex / "config.toml").read_text()
    hooks_before = (codex / "hooks.json").read_text()
    r = tc(home, "hooks", "install", "--client", "codex")
    assert r["settings"] == str(codex / "hooks.json") and "enabled" in r["feature_flag"]
    import tomllib

    cfg = tomllib.loads((codex / "config.toml").read_text())
    assert cfg["features"] == {"web_search": True, "codex_hooks": True} and cfg["tui"] == {"x": 1}
    h = json.loads((codex / "hooks.json").read_text())["hooks"]
    assert set(h) == {"PreToolUse", "SessionStart", "PostToolUse", "PreCompact", "Stop"}
    assert all("--agent codex" in c for c in commands({"hooks": {k: v for k, v in h.items() if k != "PreToolUse"}}))
    assert tc(home, "hooks", "install", "--client", "codex")["feature_flag"] == "already enabled"
    r = tc(home, "hooks", "uninstall", "--client", "codex")
    assert r["removed"] == 4 and r["feature_flag"] == "restored"
    # both files byte for byte as they were (the flag install added is gone again)
    assert (codex / "hooks.json").read_text() == hooks_before
    assert (codex / "config.toml").read_text() == config_before


def test_codex_feature_flag_appended_when_absent_and_respected_when_false(home):
    codex = home / ".codex"
    codex.mkdir()
    tc(home, "hooks", "install", "--client", "codex")
    assert (codex / "config.toml").read_text() == "[features]\ncodex_hooks = true\n"
    r = tc(home, "hooks", "uninstall")  # no --client: Claude Code and Codex
    assert r["removed"] == 4 and not (codex / "config.toml").exists() and not (codex / "hooks.json").exists()
    tc(home, "hooks", "install", "--client", "codex")
    (codex / "config.toml").write_text("[features]\ncodex_hooks = false\n")
    r = tc(home, "hooks", "install", "--client", "codex")
    assert "left alone" in r["feature_flag"]
    assert (codex / "config.toml").read_text() == "[features]\ncodex_hooks = false\n"


def test_is_ours_recognises_only_our_commands():
    from tc_git.cli.hooks import is_ours

    mine = ["tc-hook session-start", "/usr/local/bin/tc-hook pre-compact --agent codex",
            "/opt/py/bin/python3 -P -m tc_git.hooks session-end", "tc hook post-tool-use",
            'sh "${CLAUDE_PLUGIN_ROOT}/hooks/run.sh" session-start']
    theirs = ["npx prettier --write", "etc hook thing", "my-tc-hooker run", "echo tc-hooks", "git commit",
              "sh ./hooks/run.sh lint"]
    assert all(is_ours({"command": c}) for c in mine)
    assert not any(is_ours({"command": c}) for c in theirs)
