"""The MCP front end: the fast-start stdio front (fast), the server over the official SDK (server),
its result models and wire helpers, and the drift watcher the server runs.

No imports here: importing a module of this package must not load the others."""
