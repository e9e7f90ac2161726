"""The suite passes offline (issue 29): a test that needs a download (a client from npm, a PyPI
package, the sdist corpus) skips with a reason when the network is unreachable and the cache is
empty; any other failure still fails. Offline is played on loopback: an empty cache directory and
the registry or index at a port where nothing listens (connection refused), never by cutting the
network of anyone else."""
from __future__ import annotations

import os
import socket

import conftest
import pytest
import sdist_corpus


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_npm_client_skips_with_a_reason_when_the_registry_is_unreachable(tmp_path, monkeypatch):
    monkeypatch.setattr(conftest, "NPM_CACHE", tmp_path / "cache")
    monkeypatch.delenv("TC_OFFLINE_PROBE_CLI", raising=False)
    for k, v in {"npm_config_registry": f"http://127.0.0.1:{_closed_port()}/", "npm_config_cache": str(tmp_path / "npm"),
                 "npm_config_fetch_retries": "0", "npm_config_userconfig": os.devnull}.items():
        monkeypatch.setenv(k, v)
    with pytest.raises(pytest.skip.Exception) as ei:
        conftest.npm_cli("TC_OFFLINE_PROBE_CLI", "probe", "tc-git-offline-probe@1.0.0", "probe", "the probe")
    assert "npm is not available" in str(ei.value) or "registry is unreachable" in str(ei.value), ei.value
    assert not (tmp_path / "cache" / "probe" / "prefix" / "bin" / "probe").exists()


def test_the_sdist_corpus_stops_at_an_unreachable_index_and_says_why(tmp_path, monkeypatch):
    monkeypatch.setattr(sdist_corpus, "CACHE", tmp_path / "sdists")
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_INDEX_URL", f"http://127.0.0.1:{_closed_port()}/simple")
    for k in ("PIP_FIND_LINKS", "PIP_NO_INDEX", "PIP_EXTRA_INDEX_URL"):
        monkeypatch.delenv(k, raising=False)
    specs = sdist_corpus.PINNED[:3]
    assert sdist_corpus.ensure(specs, timeout=300) == []
    # the first failure said the index is unreachable: the other two were not tried (each would
    # wait for pip's retries; offline, the 44 of the real corpus took minutes)
    assert sdist_corpus.OFFLINE and "index is unreachable" in sdist_corpus.OFFLINE and specs[0] in sdist_corpus.OFFLINE
    assert not any((tmp_path / "sdists").glob("*.tar.gz"))
