"""`tc-git hook <event>` (the runtime entry the agent calls) and `tc-git hooks install|uninstall`.

Install merges tc-git's hooks into the agent's settings file without touching anything else:
our handlers are recognised by their command (`tc-hook`, `tc hook`, `tc_git.hooks`, the
plugin's former `hooks/run.sh`), re-installing replaces them in place, and uninstall removes only
them. The file is rewritten atomically in its own formatting; the version before our first edit
is kept in tc-git's state directory (userfiles.py), so uninstall can put it back byte for byte.
"""
from __future__ import annotations

import json
import os
import re
import shlex
import sys
from pathlib import Path

from ..base.errors import BadInput
from . import userfiles

CLAUDE_EVENTS = ("SessionStart", "PostToolUse", "PreCompact", "SessionEnd")
CODEX_EVENTS = ("SessionStart", "PostToolUse", "PreCompact", "Stop")
EDIT_MATCHER = "Write|Edit|MultiEdit|NotebookEdit"
CODEX_TOOL_MATCHER = "apply_patch|Edit|Write|Bash|shell|exec_command|local_shell|shell_command"

_OURS = re.compile(
    r"(^|[\s/'\"])tc-hook(['\"]?(\s|$))"      # tc-hook <event>, /path/bin/tc-hook
    r"|\btc_git\.hooks\b"                      # python -m tc_git.hooks
    r"|(^|[\s/'\"])tc['\"]?\s+hook\s"          # tc hook <event>
    r"|hooks/run\.sh['\"]?\s+(session-start|session-end|post-tool-use|pre-compact|stop)\b")


def is_ours(handler) -> bool:
    return isinstance(handler, dict) and isinstance(handler.get("command"), str) and bool(
        _OURS.search(handler["command"]))


# ----------------------------------------------------------------------------- configuration
def entry_command(platform: str = sys.platform) -> list[str]:
    """How the agent should start the hook: the `tc-hook` console script of the Python that
    runs this (`tc-hook.exe` on Windows; pip writes that interpreter's absolute path into it),
    by absolute path: no PATH lookup, no version-manager shim, no shell script in between.
    Looked for beside the interpreter (venv, pipx), then in the install scheme's scripts
    directory and the user scheme's (`pip install --user`). Else the interpreter with `-m`."""
    import sysconfig

    name = "tc-hook.exe" if platform == "win32" else "tc-hook"
    dirs = [Path(sys.executable).parent]
    for scheme in (None, f"{'nt' if platform == 'win32' else 'posix'}_user"):
        try:
            d = sysconfig.get_path("scripts", scheme) if scheme else sysconfig.get_path("scripts")
        except KeyError:
            continue
        if d and Path(d) not in dirs:
            dirs.append(Path(d))
    for bindir in dirs:
        script = bindir / name
        if script.is_file() and (platform == "win32" or (os.access(script, os.X_OK) and _runs_this_python(script))):
            return [str(script)]
    return [sys.executable, "-P", "-m", "tc_git.hooks"]


def _runs_this_python(script: Path) -> bool:
    """A POSIX console script names its interpreter in its `#!` line: only ours will do (the
    user scheme's bin directory is shared by every Python of the user)."""
    try:
        with open(script, "rb") as f:
            first = f.readline(4096)
    except OSError:
        return False
    if not first.startswith(b"#!"):
        return True  # a binary launcher: nothing to compare
    interp = first[2:].strip().split(b" ")[0].decode("utf-8", "surrogateescape")
    # the same interpreter in the same directory (`python3` beside `python` in one venv), not
    # only the same file: a venv's python is a link to the base interpreter, with other packages
    same_dir = os.path.dirname(os.path.abspath(interp)) == os.path.dirname(os.path.abspath(sys.executable))
    return same_dir and os.path.realpath(interp) == os.path.realpath(sys.executable)


def _cmd(base: list[str], event: str, agent: str | None = None, shell: str = "sh") -> str:
    """One command line for the agent's shell: `sh` (POSIX shells, and Git Bash, which Claude
    Code runs hooks with on Windows) or `cmd` (Codex on Windows runs them with %COMSPEC% /C)."""
    argv = base + [event] + (["--agent", agent] if agent else [])
    if shell == "cmd":
        import subprocess

        return subprocess.list2cmdline(argv)
    return shlex.join(argv)


def claude_config(base: list[str] | None = None, platform: str = sys.platform) -> dict:
    """The `hooks` object for a Claude Code settings file. On Windows Claude Code runs hooks
    with Git Bash: forward slashes there (a backslash path is mangled by the shell)."""
    base = base or entry_command(platform)
    if platform == "win32":
        from pathlib import PureWindowsPath

        base = [PureWindowsPath(base[0]).as_posix(), *base[1:]]
    c = lambda ev: _cmd(base, ev)  # noqa: E731
    return {
        "SessionStart": [{"matcher": "startup|resume|compact|clear",
                          "hooks": [{"type": "command", "command": c("session-start"), "timeout": 30}]}],
        "PostToolUse": [
            {"matcher": EDIT_MATCHER, "hooks": [{"type": "command", "command": c("post-tool-use"), "timeout": 60}]},
            {"matcher": "Bash", "hooks": [{"type": "command", "command": c("post-tool-use"), "timeout": 60,
                                           "async": True}]},
        ],
        "PreCompact": [{"matcher": "manual|auto",
                        "hooks": [{"type": "command", "command": c("pre-compact"), "timeout": 120}]}],
        "SessionEnd": [{"hooks": [{"type": "command", "command": c("session-end")}]}],
    }


def codex_config(base: list[str] | None = None, platform: str = sys.platform) -> dict:
    """The `hooks` object for Codex `hooks.json` (same shape as Claude Code's)."""
    base = base or entry_command(platform)
    shell = "cmd" if platform == "win32" else "sh"
    c = lambda ev: _cmd(base, ev, "codex", shell)  # noqa: E731
    return {
        "SessionStart": [{"matcher": "startup|resume|clear|compact",
                          "hooks": [{"type": "command", "command": c("session-start"), "timeout": 30}]}],
        "PostToolUse": [{"matcher": CODEX_TOOL_MATCHER,
                         "hooks": [{"type": "command", "command": c("post-tool-use"), "timeout": 60}]}],
        "PreCompact": [{"matcher": "manual|auto",
                        "hooks": [{"type": "command", "command": c("pre-compact"), "timeout": 120}]}],
        # Codex builds without SessionEnd: record after each turn (detached, incremental).
        "Stop": [{"hooks": [{"type": "command", "command": c("stop"), "timeout": 10}]}],
    }


# ----------------------------------------------------------------------------- merge
def remove_ours(hooks: dict) -> int:
    """Drop our handlers from a `hooks` object in place; groups and events left empty by that
    go too. Returns how many handlers were removed."""
    removed = 0
    for event in list(hooks):
        groups = hooks[event]
        if not isinstance(groups, list):
            continue
        kept_groups = []
        for g in groups:
            if not isinstance(g, dict) or not isinstance(g.get("hooks"), list):
                kept_groups.append(g)
                continue
            kept = [h for h in g["hooks"] if not is_ours(h)]
            n = len(g["hooks"]) - len(kept)
            removed += n
            if n and not kept:
                continue
            if n:
                g = {**g, "hooks": kept}
            kept_groups.append(g)
        if kept_groups:
            hooks[event] = kept_groups
        elif groups:
            del hooks[event]
    return removed


def merge(settings: dict, ours: dict) -> dict:
    """`settings` with our hook groups (replacing any older ones of ours); all else untouched."""
    out = dict(settings)
    hooks = out.get("hooks")
    if hooks is None:
        hooks = {}
    if not isinstance(hooks, dict):
        raise BadInput("the settings file has a 'hooks' entry that is not an object; fix it by hand first")
    hooks = json.loads(json.dumps(hooks))
    remove_ours(hooks)
    for event, groups in ours.items():
        existing = hooks.get(event)
        if existing is not None and not isinstance(existing, list):
            raise BadInput(f"hooks.{event} in the settings file is not a list; fix it by hand first")
        hooks[event] = list(existing or []) + json.loads(json.dumps(groups))
    out["hooks"] = hooks
    return out


def _load(path: Path) -> dict:
    return userfiles.load_json(path)[0]


def _replace(path: Path, text: str) -> None:
    """Write a user's config file atomically, keeping its mode; its first version is kept in
    tc-git's state directory (not as a `.bak` beside it) so uninstall can put it back exactly."""
    userfiles.write(path, text.encode("utf-8"))


def _write(path: Path, data: dict) -> None:
    """JSON in the file's own style (indentation, final newline), so the user's diff is ours only."""
    _orig, text = userfiles.load_json(path)
    userfiles.write(path, userfiles.dump_like(data, text))


# ----------------------------------------------------------------------------- targets
def codex_home() -> Path:
    return Path(os.path.expanduser(os.environ.get("CODEX_HOME") or "~/.codex"))


def settings_path(client: str, scope: str, root: str) -> Path:
    if client == "claude":
        if scope == "user":
            base = os.environ.get("CLAUDE_CONFIG_DIR") or "~/.claude"
            return Path(os.path.expanduser(base)) / "settings.json"
        name = "settings.local.json" if scope == "local" else "settings.json"
        return Path(root) / ".claude" / name
    if scope == "user":
        return codex_home() / "hooks.json"
    if scope == "local":
        raise BadInput("Codex has no local scope: use --scope user or project")
    return Path(root) / ".codex" / "hooks.json"


def enable_codex_hooks(config: Path) -> str:
    """Make sure `[features] codex_hooks = true` is in Codex's config.toml (textual edit, so
    comments and layout stay). Returns what was done."""
    import tomllib

    text = config.read_text(encoding="utf-8") if config.exists() else ""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        return f"left alone: {config} is not valid TOML ({e}); add [features] codex_hooks = true by hand"
    features = data.get("features")
    if isinstance(features, dict) and "codex_hooks" in features:
        return ("already enabled" if features["codex_hooks"] is True else
                "left alone: you set codex_hooks = false; hooks will not run until it is true")
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.strip() == "[features]":
            lines.insert(i + 1, "codex_hooks = true")
            break
    else:
        if features is not None:  # e.g. an inline table or dotted keys: do not guess
            return f"left alone: add codex_hooks = true to the features table of {config} by hand"
        lines += ([""] if lines and lines[-1].strip() else []) + ["[features]", "codex_hooks = true"]
    _replace(config, "\n".join(lines) + "\n")
    return "enabled ([features] codex_hooks = true)"


def install(client: str = "claude", scope: str = "user", root: str = ".", path: str | None = None,
            base: list[str] | None = None, feature_flag: bool = True) -> dict:
    if client not in ("claude", "codex"):
        raise BadInput("client must be claude or codex")
    if scope not in ("user", "project", "local"):
        raise BadInput("scope must be user, project or local")
    target = Path(os.path.expanduser(path)) if path else settings_path(client, scope, root)
    ours = claude_config(base) if client == "claude" else codex_config(base)
    before = _load(target)
    after = merge(before, ours)
    changed = after != before
    if changed:
        _write(target, after)
    out = {"client": client, "scope": scope, "settings": str(target), "changed": changed,
           "events": sorted(ours), "command": ours["SessionStart"][0]["hooks"][0]["command"]}
    if client == "codex":
        out["feature_flag"] = (enable_codex_hooks(codex_home() / "config.toml") if feature_flag
                               else "not touched (--no-feature-flag)")
        out["note"] = "Codex asks you to review and trust new hooks once (/hooks) before it runs them"
    else:
        out["note"] = ("do not also enable the tc-git plugin in Claude Code, or every hook runs twice; "
                       "restart running sessions to pick the hooks up")
    return out


def uninstall(client: str | None = None, scope: str = "user", root: str = ".", path: str | None = None,
              feature_flag: bool = True) -> dict:
    """Remove our handlers. A file tc-git created goes away (no `{}` left behind); a file whose
    only change since tc-git's first edit was ours gets its exact bytes back; otherwise only our
    handlers are taken out, in the file's own formatting. Without a client: Claude Code and Codex."""
    if client is None:
        if path:
            raise BadInput("--settings needs --client (claude or codex)")
        parts = [uninstall(c, scope, root) for c in (("claude", "codex") if scope != "local" else ("claude",))]
        return {"client": "all", "scope": scope, "settings": ", ".join(p["settings"] for p in parts),
                "removed": sum(p["removed"] for p in parts), "changed": any(p["changed"] for p in parts),
                "parts": parts}
    target = Path(os.path.expanduser(path)) if path else settings_path(client, scope, root)
    data, text = userfiles.load_json(target)
    hooks = data.get("hooks")
    removed = 0
    done = "untouched"
    if isinstance(hooks, dict):
        hooks = json.loads(json.dumps(hooks))
        removed = remove_ours(hooks)
        if removed:
            data = dict(data)
            if hooks:
                data["hooks"] = hooks
            else:
                data.pop("hooks")
            rec = userfiles.pristine(target)
            gone = not data and rec is not None and not rec["existed"]
            done = userfiles.put_back(target, None if gone else userfiles.dump_like(data, text),
                                      same=userfiles.same_json)
    out = {"client": client, "scope": scope, "settings": str(target), "removed": removed,
           "changed": bool(removed), "file": done}
    if client == "codex" and scope == "user" and not path and feature_flag:
        out["feature_flag"] = disable_codex_hooks(codex_home() / "config.toml")
    return out


def disable_codex_hooks(config: Path) -> str:
    """Take out the `codex_hooks = true` that install added (never one the user wrote)."""
    rec = userfiles.pristine(config)
    if rec is None or not config.exists():
        return "not touched"
    import tomllib

    try:
        before = tomllib.loads((rec["data"] or b"").decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError):
        return "not touched"
    if "codex_hooks" in (before.get("features") or {}):
        userfiles.forget(config)
        return "left as you had it"
    candidates = flag_candidates(config.read_text(encoding="utf-8"))
    if not candidates:
        return "not touched"
    return put_back_toml(config, candidates)


def flag_candidates(text: str) -> list[str]:
    """`text` without the `codex_hooks = true` install added: install put it under an existing
    [features], or appended "\n[features]\ncodex_hooks = true". Several spellings of the result,
    most likely first; [] when the line is not there."""
    lines = text.splitlines(keepends=True)
    ours = [i for i, x in enumerate(lines) if x.strip() == "codex_hooks = true"]
    if not ours:
        return []
    del lines[ours[0]]
    stripped = "".join(lines)
    out = [stripped]
    if stripped.endswith("[features]\n"):
        c = stripped[: -len("[features]\n")]
        out += [c[:-1] if c.endswith("\n\n") else c, c]
    return out


def put_back_toml(config: Path, candidates: list[str]) -> str:
    """Exact bytes back when one candidate is the remembered original; else the first one."""
    rec = userfiles.pristine(config)
    orig = rec["data"] if rec else None
    for c in candidates:
        if rec is not None and ((orig is None and not c.strip()) or (orig is not None and c.encode("utf-8") == orig)):
            return userfiles.put_back(config, orig)
    return userfiles.put_back(config, candidates[0].encode("utf-8"))


# ----------------------------------------------------------------------------- CLI
def _run_hook(args) -> dict:
    from .. import hooks

    return {"output": hooks.run(args.event, args.agent)}


def _human_install(r: dict) -> str:
    if r["changed"]:
        s = f"installed tc-git hooks ({', '.join(r['events'])}) in {r['settings']}"
    else:
        s = f"tc-git hooks already installed in {r['settings']}"
    if r.get("feature_flag"):
        s += f"\nCodex hooks feature flag: {r['feature_flag']}"
    return s + f"\nnote: {r['note']}"


def _human_uninstall(r: dict) -> str:
    if "parts" in r:
        return "\n".join(_human_uninstall(p) for p in r["parts"])
    if r["removed"]:
        return f"removed {r['removed']} tc-git hook handler(s) from {r['settings']}"
    return f"no tc-git hooks in {r['settings']}"


def setup(sub) -> None:
    from ..hooks import EVENT_NAMES

    p = sub.add_parser("hook", help="run one agent hook (the agent calls this; event JSON on stdin)")
    p.add_argument("event", choices=sorted(EVENT_NAMES), help="the agent event being handled")
    p.add_argument("--agent", choices=["claude", "codex"], default=None,
                   help="which agent calls (default: guessed from the event JSON)")
    p.set_defaults(func=_run_hook, human=lambda r: r["output"])

    p = sub.add_parser("hooks", help="install or remove tc-git's hooks in Claude Code or Codex settings")
    hs = p.add_subparsers(dest="hooks_cmd", required=True, metavar="action")
    for name in ("install", "uninstall"):
        q = hs.add_parser(name, help=f"{name} tc-git's hooks "
                                     f"({'merged into' if name == 'install' else 'only ours, from'} the settings file)")
        q.add_argument("--client", choices=["claude", "codex"], default="claude" if name == "install" else None,
                       help="the agent whose settings to change (default: claude; uninstall: both)")
        q.add_argument("--scope", choices=["user", "project", "local"], default="user",
                       help="user: ~/.claude/settings.json or ~/.codex/hooks.json; project: <root>/.claude/"
                            "settings.json or <root>/.codex/hooks.json; local: <root>/.claude/settings.local.json")
        q.add_argument("--settings", default=None, help="an explicit settings file instead")
        if name == "install":
            q.add_argument("--no-feature-flag", action="store_true",
                           help="Codex: do not add [features] codex_hooks = true to config.toml")
            q.set_defaults(func=lambda a: install(a.client, a.scope, a.root, a.settings,
                                                  feature_flag=not a.no_feature_flag),
                           human=_human_install)
        else:
            q.set_defaults(func=lambda a: uninstall(a.client, a.scope, a.root, a.settings),
                           human=_human_uninstall)
