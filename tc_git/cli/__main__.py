"""`python -m tc_git.cli`: the `tc-git` command."""
import sys

from . import main

sys.exit(main())
