"""`tc-git setup --client claude|codex|cursor`: connect an agent in one step, and undo it.

One command installs what the agent needs: the MCP server (by the absolute path of this
install, so it starts without the venv on PATH), the skill (SKILL.md) and, for Claude Code and
Codex, the hooks. Every file it touches is first remembered byte for byte (userfiles.py);
`--undo` puts each one back as it was, removes the files and directories it created, and, if
the user changed a file since, takes out only tc-git's part. It also compiles the secret engine's
rules into their disk cache if they are not there yet. Never imports `mcp`.
"""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from ..base.errors import BadInput
from . import hooks as hooks_cli  # connect() has a `hooks` flag
from . import skill as skill_cli
from . import userfiles

CLIENTS = ("claude", "codex", "cursor")
SERVER_NAME = "tc-git"


def server_command() -> list[str]:
    """The MCP server of this very install: the `tc-git-mcp` script next to this interpreter,
    else this interpreter running the package."""
    script = Path(sys.executable).parent / "tc-git-mcp"
    if script.is_file() and os.access(script, os.X_OK):
        return [str(script)]
    return [sys.executable, "-m", "tc_git"]


def _ours(entry) -> bool:
    if not isinstance(entry, dict):
        return False
    cmd = " ".join([str(entry.get("command", ""))] + [str(a) for a in entry.get("args") or []])
    return any(k in cmd for k in ("tc-git-mcp", "tc-mcp", "tc_git"))


# ----------------------------------------------------------------------------- where
def _home() -> Path:
    return Path(os.path.expanduser("~"))


def mcp_file(client: str, scope: str, root: Path) -> Path:
    if client == "claude":
        if scope == "project":
            return root / ".mcp.json"
        base = os.environ.get("CLAUDE_CONFIG_DIR")
        return Path(base) / ".claude.json" if base else _home() / ".claude.json"
    if client == "cursor":
        return (root if scope == "project" else _home()) / ".cursor" / "mcp.json"
    return (root / ".codex" if scope == "project" else hooks_cli.codex_home()) / "config.toml"


def skill_file(client: str, scope: str, root: Path) -> Path:
    if client == "cursor":
        base = (root if scope == "project" else _home()) / ".cursor" / "skills"
    else:
        base = skill_cli.skills_dir(client, root if scope == "project" else None)
    return base / skill_cli.SKILL_NAME / "SKILL.md"


def _record_path(client: str, scope: str, root: Path) -> Path:
    import hashlib

    key = f"{client}-{scope}" + (f"-{hashlib.sha1(str(root).encode('utf-8', 'surrogateescape')).hexdigest()[:12]}"
                                 if scope == "project" else "")
    return userfiles.state_dir() / "setup" / f"{key}.json"


# ----------------------------------------------------------------------------- MCP entries
def _add_json_server(path: Path, client: str, command: list[str]) -> bool:
    data, text = userfiles.load_json(path)
    servers = data.get("mcpServers")
    if servers is not None and not isinstance(servers, dict):
        raise BadInput(f"{path}: mcpServers is not an object; fix it by hand first")
    entry: dict[str, Any] = {"command": command[0], "args": command[1:]}
    if client == "claude":
        # alwaysLoad: Claude Code (2.1.x) connects MCP servers in the background and builds its
        # first request without them; an alwaysLoad server is waited for (up to its connect
        # timeout, 5 s) and its tools are never deferred: they are in the agent's first turn
        entry = {"type": "stdio", **entry, "env": {}, "alwaysLoad": True}
    if (servers or {}).get(SERVER_NAME) == entry:
        return False
    if servers and SERVER_NAME in servers and not _ours(servers[SERVER_NAME]):
        raise BadInput(f"{path} already has an MCP server named {SERVER_NAME!r} that is not tc-git's; "
                       "rename or remove it first")
    data = dict(data)
    data["mcpServers"] = {**(servers or {}), SERVER_NAME: entry}
    userfiles.write(path, userfiles.dump_like(data, text))
    return True


def _strip_json_server(path: Path) -> bytes | None:
    data, text = userfiles.load_json(path)
    servers = data.get("mcpServers")
    if not isinstance(servers, dict) or not _ours(servers.get(SERVER_NAME)):
        return text.encode("utf-8") if text is not None else None
    data = dict(data)
    servers = {k: v for k, v in servers.items() if k != SERVER_NAME}
    rec = userfiles.pristine(path)
    had_key = False
    if rec and rec["data"]:
        try:
            had_key = "mcpServers" in json.loads(rec["data"])
        except ValueError:
            had_key = True
    if servers or had_key:
        data["mcpServers"] = servers
    else:
        data.pop("mcpServers", None)
    if not data and rec is not None and not rec["existed"]:
        return None
    return userfiles.dump_like(data, text)


def _toml_block(command: list[str]) -> list[str]:
    def q(s: str) -> str:
        return json.dumps(s)  # a TOML basic string is a JSON string for these characters

    return [f"[mcp_servers.{SERVER_NAME}]", f"command = {q(command[0])}",
            f"args = [{', '.join(q(a) for a in command[1:])}]"]


def _split_toml_block(lines: list[str]) -> tuple[int, int] | None:
    header = f"[mcp_servers.{SERVER_NAME}]"
    for i, line in enumerate(lines):
        if line.strip() in (header, f'[mcp_servers."{SERVER_NAME}"]'):
            j = i + 1
            while j < len(lines) and not lines[j].lstrip().startswith("["):
                j += 1
            while j > i + 1 and not lines[j - 1].strip():
                j -= 1
            return i, j
    return None


def _add_toml_server(path: Path, command: list[str]) -> bool:
    import tomllib

    text = path.read_text(encoding="utf-8") if path.exists() else ""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise BadInput(f"{path} is not valid TOML ({e}); fix it first, tc-git will not overwrite it") from e
    current = (data.get("mcp_servers") or {}).get(SERVER_NAME)
    if current is not None and not _ours(current):
        raise BadInput(f"{path} already has an MCP server named {SERVER_NAME!r} that is not tc-git's")
    lines = text.splitlines()
    block = _toml_block(command)
    span = _split_toml_block(lines)
    if span:
        if lines[span[0]:span[1]] == block:
            return False
        lines[span[0]:span[1]] = block
    else:
        lines += ([""] if lines and lines[-1].strip() else []) + block
    userfiles.write(path, ("\n".join(lines) + "\n").encode("utf-8"))
    return True


def _strip_toml_server(path: Path) -> bytes | None:
    if not path.exists():
        return None
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines()
    span = _split_toml_block(lines)
    if not span:
        return text.encode("utf-8")
    i, j = span
    del lines[i:j]
    if i > 0 and i <= len(lines) and not lines[i - 1].strip() and (i == len(lines) or not lines[i].strip()):
        del lines[i - 1]  # the blank line install put before the block
    out = "\n".join(lines) + ("\n" if lines else "")
    rec = userfiles.pristine(path)
    if not out.strip() and rec is not None and not rec["existed"]:
        return None
    return out.encode("utf-8")


# ----------------------------------------------------------------------------- MCP start cache
def _prime_mcp_start(command: list[str]) -> dict:
    """The MCP server's fast-start cache (mcp/wire.py), written now by one start of the server
    itself (its interpreter and SDK; stdin closed: it writes the cache and exits). Without it the
    agent's first session waits for the SDK import (1-3 s, more on a busy machine) before the
    tools are listed, and Claude Code waits at most 5 s for an alwaysLoad server. `--undo`
    removes it with the directories made for it."""
    import subprocess

    from ..mcp import wire

    path = wire.cache_path()
    if wire.load_cache() is not None:
        return {"what": "MCP start", "path": str(path), "changed": False}
    userfiles.remember(path)
    try:
        subprocess.run(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       timeout=300, check=False)
    except (OSError, subprocess.SubprocessError):
        pass  # only the first session's speed depends on it
    if not path.is_file():
        userfiles.forget(path)
    return {"what": "MCP start", "path": str(path), "changed": path.is_file()}


def _unprime_mcp_start() -> dict | None:
    from ..mcp import wire

    path = wire.cache_path()
    if userfiles.pristine(path) is None:
        return None  # not setup's
    return {"what": "MCP start", "path": str(path), "result": userfiles.put_back(path, None)}


# ----------------------------------------------------------------------------- setup / undo
def connect(client: str = "claude", scope: str = "user", root: str = ".", hooks: bool = True,
            skill: bool = True) -> dict:
    if client not in CLIENTS:
        raise BadInput(f"client must be one of {', '.join(CLIENTS)}")
    if scope not in ("user", "project"):
        raise BadInput("scope must be user or project")
    rootp = Path(root).resolve()
    command = server_command()
    done, files = [], []
    mcp = mcp_file(client, scope, rootp)
    changed = _add_toml_server(mcp, command) if client == "codex" else _add_json_server(mcp, client, command)
    done.append({"what": "MCP server", "path": str(mcp), "changed": changed})
    files.append(str(mcp))
    if skill:
        sk = skill_file(client, scope, rootp)
        data = skill_cli.skill_source().read_bytes()
        if sk.exists() and not sk.is_file():
            raise BadInput(f"{sk} exists and is not a file; remove it first")
        changed = not (sk.is_file() and sk.read_bytes() == data)
        if changed:
            userfiles.write(sk, data)
        done.append({"what": "skill", "path": str(sk), "changed": changed})
        files.append(str(sk))
    if hooks and client in ("claude", "codex"):
        r = hooks_cli.install(client, scope, str(rootp))
        done.append({"what": "hooks", "path": r["settings"], "changed": r["changed"]})
        files.append(r["settings"])
        if client == "codex" and scope == "user":
            files.append(str(hooks_cli.codex_home() / "config.toml"))
    elif hooks:
        done.append({"what": "hooks", "path": None, "changed": False,
                     "note": "Cursor's hook events differ from Claude Code's and Codex's: the MCP server's "
                             "watcher records drifts instead"})
    # compiled here, once per machine: not by the agent's first PostToolUse hook (~5 s of CPU)
    from ..workspace import secrets

    done.append({"what": "secret rules", "path": secrets.rule_cache_dir(), "changed": secrets.build_rule_cache()})
    if scope == "user":  # (a project's setup leaves the user's home alone)
        done.append(_prime_mcp_start(command))
    rec_path = _record_path(client, scope, rootp)
    old = json.loads(rec_path.read_text()) if rec_path.exists() else {"files": []}
    record = {"client": client, "scope": scope, "root": str(rootp), "time": time.time(),
              "files": sorted(set(old["files"]) | set(files)), "hooks": hooks}
    rec_path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    userfiles.atomic_write(rec_path, json.dumps(record, indent=1).encode(), 0o600)
    return {"client": client, "scope": scope, "server": command, "done": done, "undo": f"setup --client {client}"
            + (" --scope project" if scope == "project" else "") + " --undo"}


def disconnect(client: str = "claude", scope: str = "user", root: str = ".") -> dict:
    if client not in CLIENTS:
        raise BadInput(f"client must be one of {', '.join(CLIENTS)}")
    rootp = Path(root).resolve()
    done = []
    mcp = mcp_file(client, scope, rootp)
    if client == "codex":
        # one file holds the server and the hooks' feature flag: take both out, then put back once
        text = (_strip_toml_server(mcp) or b"").decode("utf-8")
        flagged = scope == "user" and userfiles.pristine(mcp) is not None
        candidates = (hooks_cli.flag_candidates(text) if flagged else []) or [text]
        if mcp.exists():
            done.append({"what": "MCP server", "path": str(mcp), "result": hooks_cli.put_back_toml(mcp, candidates)})
    elif mcp.exists():
        done.append({"what": "MCP server", "path": str(mcp),
                     "result": userfiles.put_back(mcp, _strip_json_server(mcp), same=userfiles.same_json)})
    sk = skill_file(client, scope, rootp)
    if sk.is_file():
        ours = sk.read_bytes() == skill_cli.skill_source().read_bytes()
        if ours or userfiles.pristine(sk):
            done.append({"what": "skill", "path": str(sk),
                         "result": userfiles.put_back(sk, None) if ours else "kept (changed since setup)"})
    if client in ("claude", "codex"):
        r = hooks_cli.uninstall(client, scope, str(rootp), feature_flag=False)
        done.append({"what": "hooks", "path": r["settings"], "result": r.get("file", "untouched"),
                     "removed": r["removed"]})
    cache = _unprime_mcp_start()
    if cache:
        done.append(cache)
    rec_path = _record_path(client, scope, rootp)
    try:
        rec_path.unlink()
    except FileNotFoundError:
        pass
    userfiles.prune_state()  # no empty state directories left behind
    return {"client": client, "scope": scope, "undone": done}


# ----------------------------------------------------------------------------- CLI
def _h_setup(r: dict) -> str:
    from .common import prog

    PROG = prog()
    lines = [f"connected {r['client']} to tc-git ({r['scope']} scope):"]
    for d in r["done"]:
        if d["path"] is None:
            lines.append(f"  {d['what']:<10} not installed: {d['note']}")
        else:
            lines.append(f"  {d['what']:<10} {'written' if d['changed'] else 'already there'}: {d['path']}")
    lines.append(f"  server     {' '.join(r['server'])}")
    lines.append(f"restart the agent to pick it up; undo with: {PROG} {r['undo']}")
    if r["client"] == "claude":
        lines.append("(do not also install the tc-git Claude Code plugin: every hook would run twice)")
    return "\n".join(lines)


def _h_undo(r: dict) -> str:
    lines = [f"disconnected {r['client']} from tc-git:"]
    for d in r["undone"]:
        lines.append(f"  {d['what']:<10} {d['result']}: {d['path']}")
    if len(lines) == 1:
        lines.append("  nothing of tc-git's was found")
    return "\n".join(lines)


def _run(args) -> dict:
    if args.undo:
        return disconnect(args.client, args.scope, args.root)
    return connect(args.client, args.scope, args.root, hooks=not args.no_hooks, skill=not args.no_skill)


def _human(r: dict) -> str:
    return _h_undo(r) if "undone" in r else _h_setup(r)


def setup(sub) -> None:
    p = sub.add_parser("setup", help="connect an agent: MCP server, skill and hooks in one step (--undo)",
                       description="Connect an agent to tc-git in one step: the MCP server (absolute path of "
                                   "this install), the skill and the hooks. Every file touched is remembered "
                                   "first; --undo puts each back byte for byte.")
    p.add_argument("--client", choices=CLIENTS, default="claude",
                   help="claude (Claude Code), codex (Codex CLI) or cursor (default: claude)")
    p.add_argument("--scope", choices=["user", "project"], default="user",
                   help="user: your home directory's settings (default); project: this workspace's "
                        "(.mcp.json, .claude/, .codex/, .cursor/)")
    p.add_argument("--undo", action="store_true", help="remove what setup installed, restoring every file")
    p.add_argument("--no-hooks", action="store_true", help="leave the agent's hooks alone")
    p.add_argument("--no-skill", action="store_true", help="do not install the skill")
    p.set_defaults(func=_run, human=_human)


