"""SKILL.md (Agent Skills format) and `tc skill install|path`."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from conftest import TC, clean_env

REPO = Path(__file__).resolve().parent.parent


def frontmatter(text: str) -> dict:
    m = re.match(r"^---\n(.*?)\n---\n", text, re.S)
    assert m, "SKILL.md must start with YAML frontmatter"
    out = {}
    for line in m.group(1).splitlines():
        k, _, v = line.partition(":")
        out[k.strip()] = v.strip()
    return out


def test_skill_md_format_and_packaged_copy():
    root = (REPO / "SKILL.md").read_text()
    assert (REPO / "tc_git" / "data" / "SKILL.md").read_text() == root, "packaged copy differs: copy SKILL.md"
    fm = frontmatter(root)
    assert fm["name"] == "tc-git" and re.fullmatch(r"[a-z0-9-]{1,64}", fm["name"])
    assert 20 < len(fm["description"]) <= 1024
    for must in ("tc_resume", "tc_init", "tc_save", "conclusion", "next", "apply", "recovered", "secret"):
        assert must in root, must
    # every tool the skill names exists on the server
    from tc_git.mcp.server import build_server

    names = {t.name for t in build_server(watch=False).tools_by_name.values()}
    assert set(re.findall(r"\btc_[a-z]+\b", root)) <= names


def run(home, *args):
    env = clean_env(HOME=str(home))
    env.pop("CLAUDE_CONFIG_DIR", None)
    env.pop("CODEX_HOME", None)
    return subprocess.run([*TC, "--json", "skill", *args], capture_output=True, env=env, timeout=60)


def test_skill_install_refuses_overwrite_without_force(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    r = run(home, "install")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    target = home / ".claude" / "skills" / "tc-git" / "SKILL.md"
    assert Path(out["path"]) == target and target.read_text() == (REPO / "SKILL.md").read_text()
    assert json.loads(run(home, "install").stdout)["unchanged"] is True
    target.write_text("my own edits\n")
    r = run(home, "install")
    assert r.returncode == 2 and b"--force" in r.stdout + r.stderr
    assert target.read_text() == "my own edits\n"
    assert run(home, "install", "--force").returncode == 0
    assert target.read_text() == (REPO / "SKILL.md").read_text()
    for client, d in (("codex", ".codex"), ("agents", ".agents")):
        r = run(home, "install", "--client", client)
        assert r.returncode == 0 and (home / d / "skills" / "tc-git" / "SKILL.md").is_file()
    ws = tmp_path / "ws"
    ws.mkdir()
    env = clean_env(HOME=str(home))
    r = subprocess.run([*TC, "-C", str(ws), "skill", "install", "--project"], capture_output=True, env=env)
    assert r.returncode == 0 and (ws / ".claude" / "skills" / "tc-git" / "SKILL.md").is_file()
    assert Path(json.loads(run(home, "path").stdout)["path"]).read_text() == target.read_text()


def test_cli_skill_does_not_import_mcp():
    code = ("import sys; from tc_git.cli import main; main(['--json', 'skill', 'path']); "
            "assert 'mcp' not in sys.modules, 'tc imported mcp'")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, env=clean_env(), timeout=60)
    assert r.returncode == 0, r.stderr
