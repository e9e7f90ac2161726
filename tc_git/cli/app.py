"""The `tc-git` program: the parser of every area's commands, the global options, the workspace,
error handling and output (human by default, `--json` for scripts).

Every command returns a dict. The core commands are in `core`; each other area (handoff,
trajectory, view, hooks, skill, run, setup) is a module of this package with a `setup(sub)` whose
parsers set `func` (and optionally `human`) defaults. A core command (`log`, `show`, `resume`...)
builds the parser of `core` alone; anything else (`--help`, another area's command, a typo)
imports every area: a read-only command's start-up loads no other area (issue 33).
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import shlex
import sys
import time
from typing import Any

from .. import __version__
from ..base import jsonsafe, settings
from ..base.errors import BadInput, Hint, TcError, UntrustedStore
from . import core
from .common import ID_HELP, prog, set_prog

# Each area adds its sub-commands; their parsers set `func` (the core commands dispatch in core.run).
# Imported when a parser needs them (build_parser): a core command needs `core` only.
AREAS = ("core", "blame", "handoff", "trajectory", "view", "hooks", "skill", "run", "setup")


class Progress:
    """A one-line progress bar on stderr, only when stderr is a terminal."""

    def __init__(self, enabled: bool):
        self.enabled = enabled and sys.stderr.isatty()
        self.last = 0.0
        self.shown = False

    def __call__(self, done, total=None, message=""):
        if not self.enabled or time.monotonic() - self.last < 0.1:
            return
        self.last = time.monotonic()
        if total:
            width = 30
            filled = int(width * min(done, total) / total)
            bar = f"[{'#' * filled}{'.' * (width - filled)}] {done}/{total}"
        else:
            bar = f"{done}"
        sys.stderr.write(f"\r{message or 'working'}: {bar}\033[K")
        sys.stderr.flush()
        self.shown = True

    def close(self):
        if self.shown:
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()


# An error's hints (errors.Hint: an action and the MCP argument names) as the commands a person runs:
# the command, its positional arguments (None: a placeholder), and flags for true booleans.
_COMMANDS: dict[str, tuple[str, tuple[str, ...]]] = {
    "init": ("init", ("name",)), "tasks": ("log --all", ()), "switch": ("switch", ("task_id",)),
    "show": ("log", ()), "restore": ("restore", ("at",)), "sessions": ("sessions", ()), "resume": ("resume", ()),
    "compress": ("compress", ()), "export": ("export", ("to",)), "import": ("import", ("package",)),
}
_PLACEHOLDER = {"task_id": "<task>", "at": "<id>", "to": "<dir>"}


def hint_command(h: Hint) -> str:
    """`tc-git restore d0003 --apply` for Hint("restore", {"at": "d0003", "apply": True})."""
    if h.action in ("undo", "recover"):  # the CLI applies these unless told to preview
        return f"`{prog()} {h.action}{'' if h.args.get('apply') else ' --preview'}`"
    cmd, positional = _COMMANDS[h.action]
    words = [prog(), cmd]
    for k in positional:
        v = h.args.get(k)
        words.append(_PLACEHOLDER.get(k, f"<{k}>") if v is None else shlex.quote(str(v)))
    words += [f"--{k.replace('_', '-')}" for k, v in h.args.items()
              if k not in positional and v is True and not (h.action == "show" and k == "include_drift")]
    return "`" + " ".join(words) + "`"


def cli_message(e: TcError) -> str:
    """The error as a person reads it: the message, then its hints as commands."""
    said = "; ".join(f"{h.lead} {hint_command(h)}".strip() for h in e.hints)
    return f"{e.message}: {said}" if said else e.message


# ---------------------------------------------------------------------------------- parser
GROUPS = [
    ("work on a task", ["init", "save", "resume", "log", "show", "diff", "restore", "undo", "run", "capture",
                        "switch"]),
    ("who wrote it", ["blame", "why"]),
    ("the conversation", ["record", "sessions", "resume-session", "milestone", "events", "checkout", "markdown", "branch",
                          "tdiff", "replay"]),
    ("share and look", ["view", "export", "import", "push", "pull", "adopt", "recover"]),
    ("connect an agent", ["setup", "hooks", "skill", "hook"]),
    ("other", ["demo", "compress"]),
]

START_HERE = """\
{p}: checkpoints for long AI-agent work, kept as git history.

Start here:
  {p} demo                     a one-minute tour in a scratch directory
  {p} setup --client claude    connect your agent (claude, codex or cursor)
  {p} init "<task name>"       start a task in this project
  {p} save "<what you did>"    record a step
  {p} resume                   where the work stands (what a new session reads)

Every command: {p} --help"""


def _globals(p: argparse.ArgumentParser, top: bool) -> None:
    """Global options, accepted before or after the command (`tc-git log --json`)."""
    d: dict[str, Any] = {} if top else {"default": argparse.SUPPRESS}
    p.add_argument("-C", "--root", metavar="DIR", help="run as if started in DIR (default: the current "
                   "directory; the workspace is found upward from there, as git does)", **d)
    p.add_argument("--json", action="store_true", help="machine-readable output", **d)


class _Parser(argparse.ArgumentParser):
    _grouped = False  # the top-level parser lists the commands by group

    def format_help(self) -> str:
        if not getattr(self, "_grouped", False):
            return super().format_help()
        sub = next(a for a in self._actions if isinstance(a, argparse._SubParsersAction))
        helps = {c.dest: c.help or "" for c in sub._choices_actions}
        lines = [self.format_usage().rstrip(), "", self.description or "", ""]
        seen = set()
        width = max(len(n) for n in helps) + 2
        for title, names in GROUPS + [("more", sorted(helps))]:
            rows = [n for n in names if n in helps and n not in seen]
            if not rows:
                continue
            lines.append(f"{title}:")
            for n in rows:
                seen.add(n)
                lines.append(f"  {n:<{width}}{helps[n]}")
            lines.append("")
        lines += ["options:", "  -C, --root DIR  run as if started in DIR (the workspace is found upward from "
                  "there, as git does)", "  --json          machine-readable output",
                  "  --version       the version", "",
                  f"Points of a task: {ID_HELP}.", f"`{prog()} <command> --help` describes a command's options."]
        return "\n".join(lines) + "\n"


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser of every command; for `command`, one of the core commands, that area's only
    (the same parsers: `tc-git log --help` prints the same text either way)."""
    ap = _Parser(prog=prog(), description="tc-git: checkpoints for long AI-agent work, kept as git history",
                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap._grouped = True
    ap.add_argument("--version", action="version", version=f"tc-git {__version__}")
    _globals(ap, top=True)
    sub = ap.add_subparsers(dest="cmd", metavar="command", parser_class=argparse.ArgumentParser)
    for name in ("core",) if command in core.CORE else AREAS:
        importlib.import_module(f"{__package__}.{name}").setup(sub)
    _add_globals_everywhere(ap)
    return ap


def _add_globals_everywhere(parser, seen=None) -> None:
    seen = set() if seen is None else seen
    for a in parser._actions:
        if isinstance(a, argparse._SubParsersAction):
            for child in a.choices.values():
                if id(child) in seen:
                    continue
                seen.add(id(child))
                _globals(child, top=False)
                _add_globals_everywhere(child, seen)


NO_WORKSPACE = {"demo", "setup", "hooks", "skill", "hook", None}


def _workspace(args) -> str:
    """The workspace of this command: the nearest one at or above the start directory, like
    git's repository discovery; `init` starts one where it is asked to."""
    from ..storage.discover import find_workspace

    start = os.path.abspath(os.path.expanduser(args.root)) if args.root else os.getcwd()
    try:
        found = find_workspace(start)
    except UntrustedStore as e:  # another user's store above: only `init` here may go on, with its own
        if args.cmd != "init" or e.workspace is None or os.path.realpath(e.workspace) == os.path.realpath(start):
            raise
        return start
    if args.cmd == "init":
        if found is not None and str(found) != os.path.realpath(start) and not args.force:
            raise BadInput(f"{start} is inside the tc-git workspace {found}: `{prog()} init` there starts a "
                           f"new task in the same store (`{prog()} -C {found} init ...`); pass --force to make "
                           f"{start} a separate workspace with its own store")
        return start
    return str(found) if found is not None else start


def _command_word(argv: list[str]) -> str | None:
    """The command word of `argv`: its first word that is not an option or an option's value."""
    words = iter(argv)
    for w in words:
        if w in ("-C", "--root"):
            next(words, None)
        elif w == "--" or not w.startswith("-"):
            return None if w == "--" else w
    return None


def _prog(argv0: str) -> str:
    name = os.path.basename(argv0 or "")
    return "git tc" if name == "git-tc" else "tc-git"


def main(argv: list[str]) -> int:
    """One command: the environment read once into settings, installed for the command's length."""
    previous = settings.install(settings.Settings.from_env())
    try:
        return _command(argv)
    finally:
        settings.install(previous)


def _command(argv: list[str]) -> int:
    set_prog(_prog(sys.argv[0] if sys.argv else ""))
    if not argv:
        print(START_HERE.format(p=prog()))
        return 0
    cut = argv.index("--") if "--" in argv else -1
    args = None
    if cut > 0 and "diff" in argv[:cut] and "run" not in argv[:cut]:
        # `diff 1 -- src/app.py`: paths after `--`, as git diff takes them
        args = build_parser(_command_word(argv[:cut])).parse_args(argv[:cut])
        if args.cmd == "diff":
            args.paths = (args.paths or []) + argv[cut + 1:]
        else:
            args = None
    if args is None:
        args = build_parser(_command_word(argv)).parse_args(argv)
    if args.cmd is None:
        print(START_HERE.format(p=prog()))
        return 0
    progress = Progress(enabled=not args.json)
    args.progress = progress
    try:
        args.root = _workspace(args) if args.cmd not in NO_WORKSPACE else (args.root or os.getcwd())
        result = args.func(args)
    except TcError as e:
        progress.close()
        message = cli_message(e)
        if args.json:
            hints = [h.as_dict() for h in e.hints]
            print(jsonsafe.dumps({"error": message, "code": e.code, "isError": True, **({"hints": hints} if hints else {})}))
        else:
            print(f"{prog()}: {message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        progress.close()
        print(f"{prog()}: interrupted", file=sys.stderr)
        return 130
    progress.close()
    try:
        if args.json:
            # a non-UTF-8 file name is shown git-quoted, the same rule as the MCP results (jsonsafe)
            print(jsonsafe.dumps(result, indent=2, default=str))
        else:
            human = getattr(args, "human", None)
            text = human(result) if human else json.dumps(result, indent=2, ensure_ascii=False)
            if text:
                print(text)
        sys.stdout.flush()
    except BrokenPipeError:  # `tc-git ... | head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    if getattr(args, "exit_code_from_result", False):  # `run -- cmd` exits with the command's code
        return int(result.get("exit_code", 0))
    return 0
