"""What the suite downloads, once, into a cache (clients from npm, a PyPI package, sdists), and how a
download that failed because the network is unreachable is told from one that failed for another
reason: the first skips its test with a reason (the suite passes offline), the second fails it.
`TC_TEST_CACHE` puts every cache elsewhere (an empty directory: nothing cached). Stdlib only (the
benchmarks import sdist_corpus too)."""
from __future__ import annotations

import os
from pathlib import Path

# what npm, pip and the resolver print when no connection can be made
OFFLINE_SIGNS = (
    "ENOTFOUND", "EAI_AGAIN", "ECONNREFUSED", "ETIMEDOUT", "ECONNRESET", "ENETUNREACH", "EHOSTUNREACH",
    "ERR_SOCKET_TIMEOUT", "request to http", "network", "NewConnectionError", "ConnectTimeoutError",
    "Failed to establish a new connection", "Connection refused", "Temporary failure in name resolution",
    "Name or service not known", "Network is unreachable", "No route to host", "Read timed out",
    "ProxyError", "Max retries exceeded",
)
# a pip call that gives up soon when offline (its default: 5 retries of 15 s each, per package)
PIP_NET = ["--retries", "1", "--timeout", "15"]


def looks_offline(text: str) -> bool:
    return any(s in text for s in OFFLINE_SIGNS)


def cache_root(default: str) -> Path:
    """`$TC_TEST_CACHE`, else `~/.cache/<default>`."""
    env = os.environ.get("TC_TEST_CACHE")
    return Path(os.path.expanduser(env)) if env else Path.home() / ".cache" / default
