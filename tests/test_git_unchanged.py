"""Issue 9: `git.unchanged` means it. The user's git directory is fingerprinted (everything but
objects/ and our refs) around every operation that can write; stock git makes the changes the
fingerprint must see, and the ones it must not."""
from __future__ import annotations

import subprocess

import pytest
from conftest import clean_env, write

from tc_git.engine import Engine
from tc_git.timeline import gitguard

pytestmark = pytest.mark.usefixtures("fsck_after")

ENV = clean_env(GIT_AUTHOR_NAME="u", GIT_AUTHOR_EMAIL="u@x", GIT_COMMITTER_NAME="u", GIT_COMMITTER_EMAIL="u@x")


def git(ws, *args):
    r = subprocess.run(["git", *args], cwd=ws, capture_output=True, env=ENV)
    assert r.returncode == 0, r.stderr.decode(errors="replace")
    return r.stdout


@pytest.fixture
def repo(tmp_path, monkeypatch):
    for k in ("TC_GIT", "TC_GIT_VERIFY", "TC_STORE"):
        monkeypatch.delenv(k, raising=False)
    ws = tmp_path / "ws"
    ws.mkdir()
    git(ws, "init", "-q", "-b", "main")
    write(ws, "a.txt", "a\n")
    git(ws, "add", "a.txt")
    git(ws, "commit", "-q", "-m", "user commit")
    hook = ws / ".git" / "hooks" / "pre-commit"
    hook.write_text("#!/bin/sh\nexit 0\n")
    hook.chmod(0o755)
    return ws


def test_every_writing_operation_reports_unchanged(repo, tmp_path):
    e = Engine(repo)
    e.init("t")
    write(repo, "a.txt", "b\n")
    s1 = e.save("one")
    assert s1["git"]["unchanged"] is True and s1["git"]["ok"], s1["git"]
    write(repo, "a.txt", "c\n")
    e.save("two")
    r = e.restore(1, apply=True)
    assert r["applied"] and r["git"]["unchanged"] is True, r.get("git")
    u = e.undo(apply=True) if hasattr(e, "undo") else e.restore(drift_id=r["recovered"], apply=True)
    assert u["git"]["unchanged"] is True
    out = tmp_path / "out"
    out.mkdir()
    e.export(str(out))
    other = tmp_path / "other"
    other.mkdir()
    git(other, "init", "-q")
    hook = other / ".git" / "hooks" / "pre-commit"
    hook.write_text("#!/bin/sh\nexit 0\n")
    imp = Engine(other).import_(str(out), apply=True)
    assert imp["git"]["unchanged"] is True, imp["git"]
    assert (other / "a.txt").read_text() == "c\n"
    # the user's git sees our refs and nothing else of ours
    assert git(other, "status", "--porcelain") == b"?? a.txt\n"


def test_fingerprint_sees_what_git_changes_and_not_our_refs(repo):
    gitdir = repo / ".git"
    head = git(repo, "rev-parse", "HEAD").decode().strip()
    mine = [("update-ref", "refs/checkpoints/tasks/t1/head", head),
            ("update-ref", "refs/notes/checkpoints", head)]
    for args in mine:
        with gitguard.watch(gitdir) as g:
            git(repo, *args)
        assert g["unchanged"] is True, (args, g)
    with gitguard.watch(gitdir) as g:
        git(repo, "pack-refs", "--all")  # our refs packed: still ours only... but main moves too
    assert g["unchanged"] is False and "packed-refs" in g["changed"]
    theirs = [(("config", "user.name", "someone"), "config"),
              (("update-ref", "refs/heads/x", head), "refs/heads/x"),
              (("symbolic-ref", "HEAD", "refs/heads/x"), "HEAD"),
              (("tag", "v1"), "refs/tags/v1"),
              (("update-index", "--chmod=+x", "a.txt"), "index")]
    for args, key in theirs:
        with gitguard.watch(gitdir) as g:
            git(repo, *args)
        assert g["unchanged"] is False and any(c.startswith(key) for c in g["changed"]), (args, g)
    with gitguard.watch(gitdir) as g:
        (gitdir / "hooks" / "post-checkout").write_text("#!/bin/sh\n")
    assert g["changed"] == ["hooks/post-checkout"]
    with gitguard.watch(gitdir) as g:
        (gitdir / "hooks" / "pre-commit").chmod(0o644)
    assert g["changed"] == ["hooks/pre-commit"]
    with gitguard.watch(gitdir) as g:
        write(repo, "new.txt", "n\n")
        git(repo, "hash-object", "-w", "new.txt")  # objects only
    assert g["unchanged"] is True


def test_a_change_during_the_operation_is_reported(repo, monkeypatch):
    """The window is the whole engine call. Fault injection: the real file-writing layer of
    restore, wrapped so that it also plants a hook (what a path-safety bug did before, while
    the import reported unchanged: true). The report must say so."""
    from tc_git.timeline import restore as restore_mod

    e = Engine(repo)
    e.init("t")
    write(repo, "a.txt", "b\n")
    e.save("one")
    write(repo, "a.txt", "c\n")
    real = restore_mod.apply_plan

    def leaky(*a, **k):
        (repo / ".git" / "hooks" / "post-checkout").write_text("#!/bin/sh\necho planted\n")
        return real(*a, **k)

    monkeypatch.setattr(restore_mod, "apply_plan", leaky)
    r = e.restore(1, apply=True)
    assert r["applied"] and (repo / "a.txt").read_text() == "b\n"
    assert r["git"]["unchanged"] is False and r["git"]["changed"] == ["hooks/post-checkout"], r["git"]


def test_export_never_overwrites_a_handoff_and_never_writes_into_git(repo, tmp_path):
    """Issue 9 item 8: an existing HANDOFF.md stays as it is; the new one gets a unique name and
    the result says where. A destination inside a git directory is refused."""
    import os

    from tc_git.base.errors import BadInput

    e = Engine(repo)
    e.init("t")
    out = tmp_path / "out"
    out.mkdir()
    (out / "HANDOFF.md").write_text("the user's own notes\n")
    r1 = e.export(str(out))
    assert (out / "HANDOFF.md").read_text() == "the user's own notes\n"
    tid = r1["task_id"]
    assert r1["handoff"] == str(out / f"{tid}.HANDOFF.md") and "left untouched" in r1["note"]
    r2 = e.export(str(out))  # a second export: both bundles and both texts kept
    assert r2["path"] == str(out / f"{tid}.2.bundle") and r2["handoff"] == str(out / f"{tid}.2.HANDOFF.md")
    assert "note" not in r2
    r3 = e.export(str(out / "x.bundle"))
    (out / "y.HANDOFF.md").write_text("keep\n")
    r4 = e.export(str(out / "y.bundle"))
    assert r3["handoff"] == str(out / "x.HANDOFF.md") and r4["handoff"] == str(out / "y.HANDOFF.2.md")
    assert (out / "y.HANDOFF.md").read_text() == "keep\n"
    os.symlink(tmp_path / "victim", out / "z.HANDOFF.md")  # a planted link is not followed either
    r5 = e.export(str(out / "z.bundle"))
    assert not (tmp_path / "victim").exists() and r5["handoff"] == str(out / "z.HANDOFF.2.md")
    for bad in (repo / ".git", repo / ".git" / "hooks", repo / ".checkpoints", repo / ".git" / "t.bundle"):
        before = sorted(os.listdir(repo / ".git" / "hooks"))
        with pytest.raises(BadInput) as ei:
            e.export(str(bad))
        assert "inside the git directory" in ei.value.message
        assert sorted(os.listdir(repo / ".git" / "hooks")) == before
    r = subprocess.run(["git", "bundle", "verify", r1["path"]], cwd=repo, capture_output=True, env=ENV)
    assert r.returncode == 0, r.stderr


def test_export_cli_says_where_the_handoff_went(repo, tmp_path):
    from conftest import tc

    Engine(repo).init("t")
    out = tmp_path / "out"
    out.mkdir()
    (out / "HANDOFF.md").write_text("mine\n")
    r = tc("-C", repo, "export", out)
    assert r.returncode == 0 and b"HANDOFF.md already exists and was left untouched" in r.stdout, r.stdout
    assert (out / "HANDOFF.md").read_text() == "mine\n"


def test_markdown_out_never_into_a_git_directory(repo):
    import os

    from tc_git.base.errors import BadInput

    e = Engine(repo)
    e.init("t")
    rec = e.record(steps=[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}])
    hooks = repo / ".git" / "hooks"
    before = sorted(os.listdir(hooks))
    for out in (hooks / "post-checkout", repo / ".checkpoints" / "x.md", repo / ".git" / "x.md"):
        with pytest.raises(BadInput) as ei:
            e.export_markdown(rec["tip"], out=str(out))
        assert "inside the git directory" in ei.value.message
    os.symlink(hooks / "post-merge", repo / "link.md")
    with pytest.raises(BadInput):
        e.export_markdown(rec["tip"], out="link.md")
    assert sorted(os.listdir(hooks)) == before
    assert e.export_markdown(rec["tip"], out="conv.md")["bytes"] > 0 and (repo / "conv.md").is_file()
