#!/usr/bin/env bash
# Trajectory walk-through: record a Claude Code transcript as git history, name a milestone,
# branch, diff two branches of the conversation, export Markdown, and let the hook entry record
# a session the way Claude Code's SessionEnd hook would.
#
#   examples/trajectory_walkthrough.sh [transcript.jsonl]
#
# Needs tc-git installed (`tc-git` on PATH, or TC="python -m ..."), git, and a fixture transcript
# (default: tests/fixtures/transcripts/claude-daaain-1.jsonl, a session with a rewind and a
# compaction). Works in a scratch directory it deletes at the end (KEEP=1 keeps it).
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
FIXTURES="${TC_FIXTURES:-$HERE/../tests/fixtures/transcripts}"
TRANSCRIPT="${1:-$FIXTURES/claude-daaain-1.jsonl}"
TC="${TC:-tc-git}"
PY="${PYTHON:-$(command -v python3 || command -v python)}"
# the interpreter that runs `tc-git` (for the hook entry below), read from its shebang when possible
TC_PY="$(head -1 "$(command -v tc-git 2>/dev/null || echo /dev/null)" 2>/dev/null | sed -n 's/^#!\(.*python[0-9.]*\)$/\1/p')"
TC_PY="${TC_PY:-$PY}"

WS="$(mktemp -d "${TMPDIR:-/tmp}/tc-trajectory-walkthrough.XXXXXX")"
cleanup() { if [ -z "${KEEP:-}" ]; then rm -rf "$WS"; else echo "kept $WS"; fi; }
trap cleanup EXIT
cd "$WS"
say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
json() { "$PY" -c "import json, sys; d = json.load(sys.stdin); print($1)"; }

say "a workspace with a task and one step"
printf 'def answer():\n    return 41\n' > app.py
$TC init "walk-through" --goal "show the trajectory layer" >/dev/null
$TC save "first version" -c "answer() returns 41" -n "fix the off-by-one"

say "record the transcript and name its tip (the milestone links the code of now)"
$TC record "$TRANSCRIPT" --milestone walkthrough-start
SESSION="$($TC --json sessions | json "d['sessions'][0]['session']")"
echo "session: $SESSION"

say "sessions, branches and milestones"
$TC sessions

say "the conversation, one line per event (oldest first)"
$TC events "$SESSION" --oldest-first -n 20

say "stock git reads the same history: git log on the session ref"
git --git-dir=.checkpoints log --oneline "refs/checkpoints/sessions/$SESSION/main"

say "a named fork at the second event: where we would try another answer"
SECOND="$($TC --json events "$SESSION" --oldest-first -n 2 | json "d['events'][1]['id']")"
$TC branch try-again --at "$SECOND" --session "$SESSION"

say "work on: change the code, then mark a second milestone"
printf 'def answer():\n    return 42\n' > app.py
$TC milestone after-fix --at "$SESSION" -m "the off-by-one is fixed"

say "diff: the main line against the branch the rewind left behind (and the code between them)"
FORK="$($TC --json sessions | json "[b for b in d['sessions'][0]['branches'] if b != 'main'][0]")"
$TC tdiff "$SESSION/main" "$SESSION/$FORK"

say "checkout the first milestone with its code: a preview of the (undoable) restore"
$TC checkout walkthrough-start --code | tail -6

say "export the conversation as Markdown"
$TC markdown walkthrough-start -o conversation.md
head -25 conversation.md

say "replay: the message list to seed a new session"
$TC --json replay walkthrough-start --mode messages | json "'\n'.join(f\"{m.get('kind', m.get('role', '?'))}: {str(m.get('text') or m.get('content') or '')[:60]}\" for m in d['messages'][:6])"

say "the SessionEnd hook: returns at once, a detached worker records the session"
cp "$FIXTURES/claude-drmaciver-1.jsonl" "$WS/session.jsonl" 2>/dev/null || cp "$TRANSCRIPT" "$WS/session.jsonl"
printf '{"session_id":"demo","transcript_path":"%s","cwd":"%s","hook_event_name":"SessionEnd","reason":"other"}' \
  "$WS/session.jsonl" "$WS" | "$TC_PY" -P -m tc_git.hooks session-end
for _ in $(seq 1 100); do
  grep -q "worker: recorded" .checkpoints/tc/hooks.log 2>/dev/null && break
  sleep 0.1
done
tail -2 .checkpoints/tc/hooks.log
$TC sessions

say "stock git agrees the store is sound"
git --git-dir=.checkpoints fsck --full --no-progress && echo "git fsck --full: clean"
