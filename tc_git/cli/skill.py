"""`tc-git skill install|uninstall|path`: put SKILL.md where an agent runtime looks for skills.

The skill ships inside the package (`tc_git/data/SKILL.md`, identical to the repository's
`SKILL.md`). Never imports `mcp`.
"""
from __future__ import annotations

import os
from pathlib import Path

from ..base.errors import BadInput, Conflict, NotFound
from ..base.fsutil import atomic_write

SKILL_NAME = "tc-git"
CLIENTS = ("claude", "codex", "agents")


def skill_source() -> Path:
    p = Path(__file__).resolve().parents[1] / "data" / "SKILL.md"
    if not p.is_file():
        raise NotFound(f"SKILL.md is missing from the installed package ({p}); reinstall tc-git")
    return p


def skills_dir(client: str, project: Path | None = None) -> Path:
    """The skills directory of `client`, user-wide, or inside `project` when given."""
    if client not in CLIENTS:
        raise BadInput(f"unknown client {client!r}: one of {', '.join(CLIENTS)}")
    if project is not None:
        return project / {"claude": ".claude", "codex": ".codex", "agents": ".agents"}[client] / "skills"
    home = Path.home()
    if client == "claude":
        return Path(os.environ.get("CLAUDE_CONFIG_DIR") or home / ".claude") / "skills"
    if client == "codex":
        return Path(os.environ.get("CODEX_HOME") or home / ".codex") / "skills"
    return home / ".agents" / "skills"


def install(client: str = "claude", force: bool = False, project: Path | None = None,
            dest: str | None = None) -> dict:
    src = skill_source()
    data = src.read_bytes()
    base = Path(os.path.expanduser(dest)).resolve() if dest else skills_dir(client, project)
    target = base / SKILL_NAME / "SKILL.md"
    if target.is_symlink() or target.exists():
        if not target.is_symlink() and target.is_file() and target.read_bytes() == data:
            return {"path": str(target), "client": client, "installed": False, "unchanged": True}
        if not force:
            raise Conflict(f"{target} already exists and differs from this tc-git's SKILL.md; "
                           f"pass --force to overwrite it")
        if target.is_dir() and not target.is_symlink():
            raise Conflict(f"{target} is a directory; remove it first")
    target.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(target, data, 0o644)
    return {"path": str(target), "client": client, "installed": True, "unchanged": False, "source": str(src)}


def uninstall(client: str = "claude", force: bool = False, project: Path | None = None,
              dest: str | None = None) -> dict:
    """Remove the installed SKILL.md (only if it is ours, unchanged, unless forced) and its
    directory when nothing else is left in it."""
    base = Path(os.path.expanduser(dest)).resolve() if dest else skills_dir(client, project)
    target = base / SKILL_NAME / "SKILL.md"
    if not target.is_file() or target.is_symlink():
        return {"path": str(target), "client": client, "removed": False}
    if target.read_bytes() != skill_source().read_bytes() and not force:
        raise Conflict(f"{target} differs from this tc-git's SKILL.md (edited, or another version); "
                       "pass --force to remove it anyway")
    target.unlink()
    try:
        target.parent.rmdir()
    except OSError:
        pass  # other files live there: theirs
    from . import userfiles

    userfiles.forget(target)
    return {"path": str(target), "client": client, "removed": True}


def _h_install(r: dict) -> str:
    if r["unchanged"]:
        return f"{r['path']} is already up to date"
    return f"installed the tc-git skill: {r['path']}"


def setup(sub) -> None:
    p = sub.add_parser("skill", help="install or remove the agent skill (SKILL.md) for Claude Code, Codex or .agents")
    ss = p.add_subparsers(dest="skill_cmd", required=True, metavar="action")

    q = ss.add_parser("install", help="copy SKILL.md into the client's skills directory")
    q.add_argument("--client", choices=CLIENTS, default="claude",
                   help="claude: ~/.claude/skills, codex: ~/.codex/skills, agents: ~/.agents/skills")
    q.add_argument("--project", action="store_true",
                   help="install into the workspace (-C, default cwd) instead of the home directory")
    q.add_argument("--dest", default=None, help="an explicit skills directory (tc-git/SKILL.md goes inside)")
    q.add_argument("--force", action="store_true", help="overwrite a different existing SKILL.md")
    q.set_defaults(func=lambda a: install(a.client, a.force, Path(a.root).resolve() if a.project else None,
                                          a.dest),
                   human=_h_install)

    q = ss.add_parser("uninstall", help="remove the installed SKILL.md (only if unchanged, unless --force)")
    q.add_argument("--client", choices=CLIENTS, default="claude", help="whose skills directory (default: claude)")
    q.add_argument("--project", action="store_true", help="the workspace's skills directory, not the home one")
    q.add_argument("--dest", default=None, help="an explicit skills directory")
    q.add_argument("--force", action="store_true", help="remove it even if it was edited")
    q.set_defaults(func=lambda a: uninstall(a.client, a.force, Path(a.root).resolve() if a.project else None, a.dest),
                   human=lambda r: f"removed {r['path']}" if r["removed"] else f"no tc-git skill at {r['path']}")

    q = ss.add_parser("path", help="print where the packaged SKILL.md is")
    q.set_defaults(func=lambda a: {"path": str(skill_source())}, human=lambda r: r["path"])
