"""Timeline: the code history of a task (its chain of steps, drifts and restore points) and what
is done with it: capture, restore, resume, compress, diff stats, the HTML view, the git guard.

No imports here: importing a module of this package must not load the others."""
