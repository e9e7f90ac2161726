"""`python -m tc_git` runs the MCP stdio server (as `tc-mcp` does)."""
from .mcp_fast import main

main()
