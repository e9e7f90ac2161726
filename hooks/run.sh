#!/bin/sh
# tc-git hook entry for the Claude Code plugin and Codex: run the installed tc-git, never fail the agent.
# Usage: run.sh <event> [--agent claude|codex]   (the event JSON arrives on stdin)
if command -v tc-hook >/dev/null 2>&1; then exec tc-hook "$@"; fi
if command -v tc >/dev/null 2>&1; then exec tc hook "$@"; fi
echo "tc-git: neither tc-hook nor tc is on PATH; install tc-git (python3 -m pip install tc-git) to enable its hooks" >&2
exit 0
