"""Handoff: the task's refs in the user's repository, git bundles, and sync through any git remote.

The distributed engine is git itself. Everything here moves the same refs:

    refs/checkpoints/tasks/<id>/head            the task's code timeline
    refs/checkpoints/sessions/<agent>-<s>/<b>   trajectory tips linked to it
    refs/checkpoints/milestones/<name>          milestones linked to it
    refs/notes/checkpoints                      the notes (one JSON record per commit)

* `refsel`: which refs belong to a task, incoming names checked, compare-and-swap ref moves.
* `notes`: the notes a bundle carries, and the union merge of diverged notes (on the same
  annotated object, ours wins): notes are never overwritten.
* `userrepo`: after each new step, the task mirrored into the user's own repository (one pack of
  the objects it lacks + CAS ref updates), proving nothing else there changed.
* `bundles`: export writes a v2 bundle plus HANDOFF.md; import reads one through the
  `quarantine` before any ref moves. `seed`: a task-checkpoint-mcp handoff directory migrated.
* `remotes`: push / pull to and from any git remote with explicit refspecs.

Calls go down only: every function takes the store (and a task id, paths) and returns data.
The engine composes: capture -> resume -> bundle on export, import -> mirror -> restore on
import; the workspace follows an import only through the engine's restore (previewed, undoable).
"""
