"""Whether and where an agent session is recorded: `TC_RECORD`, the `.tc-no-record` opt-out file and
the user-level store's path. Stdlib only: the hook entry applies these before it loads anything, and
the trajectory layer (userstore) reads the same rules from here, below both.
"""
from __future__ import annotations

import os

from .settings import current

OPT_OUT_FILE = ".tc-no-record"


def record_mode() -> str:
    """`TC_RECORD`: off | tasks | all (default; anything unknown counts as all)."""
    return current().record


def user_store_path():
    """`$XDG_DATA_HOME/tc-git/store` (default `~/.local/share/tc-git/store`)."""
    from pathlib import Path  # only when asked: the hook entry starts without it

    base = current().data_home
    if not os.path.isabs(base):  # the XDG spec: a relative value is invalid, ignore it
        base = os.path.join(os.path.expanduser("~"), ".local", "share")
    return Path(base) / "tc-git" / "store"


def opted_out(cwd) -> bool:
    """A `.tc-no-record` file in the directory or any parent turns recording off there."""
    if not cwd:
        return False
    d = os.path.realpath(os.path.expanduser(str(cwd)))
    while True:
        if os.path.exists(os.path.join(d, OPT_OUT_FILE)):
            return True
        parent = os.path.dirname(d)
        if parent == d:
            return False
        d = parent
