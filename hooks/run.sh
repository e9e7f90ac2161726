#!/bin/sh
# tc-git hook entry for the Claude Code plugin and Codex: run the installed tc-git, never fail the agent.
# Usage: run.sh <event> [--agent claude|codex]   (the event JSON arrives on stdin)
# Fastest first: the tc-hook script; else the interpreter named in the `tc-git` script's shebang
# (skips the CLI's extension loading); else `tc-git hook`. A bare `tc` is never run: on Linux it is
# iproute2's traffic control.
if command -v tc-hook >/dev/null 2>&1; then exec tc-hook "$@"; fi
tc_path="$(command -v tc-git 2>/dev/null)" || tc_path=""
if [ -n "$tc_path" ]; then
  py="$(sed -n '1s/^#![[:space:]]*\([^[:space:]]*python[0-9.]*\)[[:space:]]*$/\1/p' "$tc_path" 2>/dev/null)"
  if [ -n "$py" ] && [ -x "$py" ]; then exec "$py" -P -m tc_git.hooks "$@"; fi
  if [ "$(head -c 2 "$tc_path" 2>/dev/null)" = "#!" ]; then exec "$tc_path" hook "$@"; fi
fi
echo "tc-git: neither tc-hook nor tc-git is on PATH; install tc-git (see its README) to enable its hooks" >&2
exit 0
