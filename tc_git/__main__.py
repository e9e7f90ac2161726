"""`python -m tc_git` runs the MCP stdio server (as `tc-mcp` does)."""
from .mcp.fast import main

main()
