"""What the command areas of the CLI share: the program's name, the engine of a command, a
`--task` argument, `--path` arguments. Below `app`, which imports every area: no cycle."""
from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the engine (and pygit2) load with the first command that needs them
    from ..engine import Engine

ID_HELP = "2 or s0002 (step), d0001 (drift), r0001 (restore) or a commit id prefix"

_prog = ["tc-git"]  # set by cli.app.main from argv[0]: "git tc" when run as `git tc`


def prog() -> str:
    """The command name to print in hints: `tc-git` or `git tc`."""
    return _prog[0]


def set_prog(name: str) -> None:
    _prog[0] = name


def engine_for(args) -> Engine:
    from ..engine import Engine

    return Engine(args.root, progress=args.progress)  # the settings main() installed


def task_arg(args, attr: str = "task_id"):
    """The task a `--task` option names: its id, a unique prefix of it, or its name."""
    value = getattr(args, attr, None)
    if value is None:
        return None
    return engine_for(args).resolve_task(value)


def workspace_paths(args, paths):
    """`--path` values as the engine wants them: relative to the workspace root. A relative path
    typed in a subdirectory of the workspace is taken from there, as git does; anything that
    leaves the workspace keeps its `..` and is refused by the engine."""
    if not paths:
        return paths
    import posixpath

    root = os.path.realpath(args.root)
    cwd = os.path.realpath(os.getcwd())
    prefix = os.path.relpath(cwd, root) if (cwd + os.sep).startswith(root + os.sep) else "."
    out = []
    for p in paths:
        if os.path.isabs(p):
            rel = os.path.relpath(os.path.realpath(p), root)
            out.append(p if rel.startswith("..") else rel)  # outside: the engine names the problem
        elif prefix != ".":
            out.append(posixpath.normpath(posixpath.join(prefix.replace(os.sep, "/"), p)))
        else:
            out.append(p)
    return out
