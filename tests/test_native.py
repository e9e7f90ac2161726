"""The native boundary (tc_git/libgit2.py): found through pygit2's own files on this platform,
and switched off entirely by TC_NATIVE=off so the fallbacks that macOS/Windows builds without a
loadable libgit2 would run are exercised (`.ci/run` runs the core and handoff tests that way)."""
from __future__ import annotations

import subprocess
import sys

from conftest import clean_env

PROBE = ("import pygit2; from tc_git import libgit2, mempack; "
         "print(libgit2.available(), mempack.available(), pygit2.LIBGIT2_VER[:2] in libgit2._TESTED)")


def _probe(**env) -> list[str]:
    r = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=clean_env(**env))
    assert r.returncode == 0, r.stderr
    return r.stdout.split()


def test_native_found_through_pygit2_when_the_version_is_tested():
    native, mem, tested = _probe(TC_NATIVE="on")
    # On a tested libgit2 the native paths must really be on: a silent fallback here would
    # leave the fast paths unexercised by the normal test run.
    assert native == mem == tested


def test_tc_native_off_disables_every_native_path():
    assert _probe(TC_NATIVE="off")[:2] == ["False", "False"]


def test_clean_env_keeps_the_native_switch(monkeypatch):
    monkeypatch.setenv("TC_NATIVE", "off")
    assert clean_env()["TC_NATIVE"] == "off"
