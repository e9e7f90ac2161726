"""`tc-git` (also `git tc`): the engine for people. Never imports `mcp` (0.75 s of start-up).

One module per area: `core` (init, save, restore...), `handoff`, `trajectory`, `view`, `hooks`,
`skill`, `setup`, `run`, `demo`; `app` builds the parser from all of them and prints the results;
`common` is what they share. Console scripts: `tc-git` and `git-tc` -> `main`.
"""
from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["hook"]:  # the hook entry has a start-up budget: no other area loads
        from ..hooks import main as hook_main

        return hook_main(argv[1:])
    from .app import main as app_main  # every area, imported statically there

    return app_main(argv)
