"""Every MCP result fits an agent's context budget: at most 8 KB on the wire (the text block and
structuredContent together) for any workspace size (issue 30). Sized on a 10,000-file workspace
through the real SDK (in-memory client): a new task (its baseline: nothing unsaved) and its handoff
with 5,000 unsaved paths, an export,
an import into an empty workspace (10k files written), its undo (10k deleted), the task list.
"""
from __future__ import annotations

import os

import pytest
from conftest import write
from mcp import Client

from tc_git.mcp.server import WIRE_BUDGET, build_server

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("fsck_after"),
              pytest.mark.filterwarnings("ignore:.*(deprecated|removed as of):Warning")]

FILES = 10_000


@pytest.fixture(autouse=True)
def _env(tc_env_clean):
    """No TC_* / GIT_* from the caller; no export into a user repository."""


def make_workspace(root, n: int = FILES) -> None:
    """100 directories of 100 one-line files, written directly (the cheapest real files)."""
    for i in range(n):
        d = root / f"d{i // 100:03d}"
        if i % 100 == 0:
            d.mkdir()
        fd = os.open(d / f"f{i % 100:03d}.txt", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        os.write(fd, b"%d\n" % i)
        os.close(fd)


async def test_every_result_fits_on_a_10k_workspace(tmp_path):
    src, dst, out = tmp_path / "src", tmp_path / "dst", tmp_path / "out"
    for d in (src, dst, out):
        d.mkdir()
    make_workspace(src)
    sizes: dict[str, int] = {}

    async with Client(build_server(watch=False), mode="legacy") as c:
        async def call(label, tool, root, **args):
            r = await c.call_tool(tool, {"root": str(root), **args})
            assert not r.is_error, (label, r.content[0].text)
            sizes[label] = len(r.model_dump_json(by_alias=True, exclude_none=True).encode())
            return r.structured_content

        await call("init", "tc_init", src, name="big")
        fresh = await call("resume new task", "tc_resume", src)
        assert fresh["drift_total"] == 0 and fresh["drift_paths"] == []  # init records a baseline
        for i in range(0, FILES, 2):  # half the files change: the unsaved list is 5,000 long
            write(src, f"d{i // 100:03d}/f{i % 100:03d}.txt", f"{i} edited\n")
        unsaved = await call("resume 5k unsaved", "tc_resume", src)
        assert unsaved["drift_total"] == FILES // 2 and len(unsaved["drift_paths"]) <= 20 and unsaved["more"]
        exported = await call("export", "tc_export", src, to=str(out))

        imported = await call("import", "tc_import", dst, package=exported["path"])
        assert (dst / "d099" / "f099.txt").read_text() == "9999\n"  # written: nothing here to overwrite
        assert (dst / "d098" / "f098.txt").read_text() == "9898 edited\n"  # the unsaved work exported too
        preview = await call("undo preview", "tc_undo", dst)
        assert preview["applied"] is False
        await call("undo", "tc_undo", dst, apply=True)
        assert not (dst / "d099").exists()
        await call("tasks", "tc_tasks", dst)
        assert imported["task_id"]

    too_big = {k: v for k, v in sizes.items() if v > WIRE_BUDGET}
    assert not too_big, sizes
