"""tc-git: a checkpoint engine for long AI-agent work, on git plumbing."""

__version__ = "0.1.0"
