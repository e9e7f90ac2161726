"""`python -m tc_git` runs the MCP stdio server (as `tc-mcp` does)."""
from .mcp_server import main

main()
