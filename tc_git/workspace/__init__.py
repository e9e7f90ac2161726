"""Workspace: what is on disk and what may be recorded of it: the scan and its stat cache (the
private index), snapshots, the change journal and its inotify reader, descriptor-relative
writes (wsfs), path safety and the recording policy with its secret engine.

No imports here: importing a module of this package must not load the others."""
