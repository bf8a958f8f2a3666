"""POSIX trees through a real mount, with the tools people use: ``tar x`` of an archive with
relative and absolute links, owners, set-ID bits, modes, times and special files gives a tree
``diff -r --no-dereference`` finds identical to the source, also in the commit's directory and
after a merge, and ``lakefuse diff`` shows the links as links; ``rsync -a`` of such a tree, then
``rsync -a -n -i`` of the same source prints nothing - on the branch, after a commit, after a
remount and in the commit's directory; the owner options of ``lakefuse mount``."""

from __future__ import annotations

import errno
import os
import re
import subprocess
from pathlib import Path

import pytest

from lakemount import MountedLake, mounted, run_cli
from posix_helpers import make_source_tree, require_root, run, tree_stat

#: what diff says of two special files of the same type (it cannot compare their "contents")
SAME_SPECIAL = re.compile(r"^File (\S+) is a (fifo|character special file) while file (\S+) is a \2$")


def commit(branch: Path, message: str) -> str:
    (branch / ".lakefuse/commit").write_text(message + "\n")
    return (branch / ".lakefuse/head").read_text().strip()


def diff_no_dereference(left: Path, right: Path) -> list[str]:
    """``diff -r --no-dereference`` lines other than those of two special files of one type."""
    done = run("diff", "-r", "--no-dereference", left, right, check=False)
    assert done.returncode in (0, 1), done.stderr
    return [line for line in done.stdout.splitlines() if not SAME_SPECIAL.match(line)]


def test_tar_x_gives_a_tree_identical_to_the_source(shared_branch, lake_home, tmp_path, monkeypatch, capsys):
    require_root()
    source = tmp_path / "src"
    make_source_tree(source)
    archive = tmp_path / "tree.tar"
    run("tar", "--format=posix", "-C", source, "-cf", archive, ".")  # posix: times with nanoseconds
    target = shared_branch / "extracted"
    target.mkdir()
    run("tar", "-C", target, "-xpf", archive)
    assert diff_no_dereference(source, target) == []
    assert tree_stat(target) == tree_stat(source)
    assert os.readlink(target / "bin" / "relative") == "../docs/a.txt"
    assert (target / "bin" / "relative").read_bytes() == b"alpha\n"  # followed by the kernel
    assert os.readlink(target / "absolute") == "/etc/hostname"
    # readdir reports links as links (d_type): no lstat needed to tell them
    assert sorted(entry.name for entry in os.scandir(target) if entry.is_symlink()) == [
        "absolute", "dirlink", "long-target"]
    # the same tree in the commit's directory, read-only
    commit_id = commit(shared_branch, "extracted")
    in_commit = shared_branch.parent / commit_id / "extracted"
    assert tree_stat(in_commit) == tree_stat(source)
    assert diff_no_dereference(source, in_commit) == []
    with pytest.raises(OSError) as exc:
        os.symlink("x", in_commit / "new-link")
    assert exc.value.errno == errno.EROFS
    # merged into another branch (which changed something else meanwhile): the same tree there
    catalog = lake_home.catalog
    catalog.create_branch("sales", f"{shared_branch.name}-into", "main")
    catalog.upload_bytes("sales", f"{shared_branch.name}-into", "other.txt", b"o")
    catalog.commit("sales", f"{shared_branch.name}-into", "other", "tests")
    catalog.merge("sales", f"{shared_branch.name}-into", shared_branch.name, "tests")
    merged = shared_branch.parent / f"{shared_branch.name}-into" / "extracted"
    assert tree_stat(merged) == tree_stat(source)
    # lakefuse diff shows the links as links
    diff = run_cli(monkeypatch, capsys, lake_home, "diff", "lakefs://sales/main", f"lakefs://sales/{commit_id}")
    assert "+ extracted/bin/relative -> ../docs/a.txt" in diff.splitlines()
    assert "+ extracted/shared/pipe (fifo)" in diff.splitlines()


def test_rsync_a_then_rsync_n_i_prints_nothing_also_after_commit_and_remount(lake_home, tmp_path):
    require_root()
    source = tmp_path / "src"
    make_source_tree(source)
    lake_home.catalog.create_branch("sales", "rsync", "main")
    mountpoint = tmp_path / "mnt"
    with mounted(lake_home, mountpoint) as lake:
        target = lake / "sales/rsync/copy"
        run("rsync", "-a", f"{source}/", f"{target}/")
        assert run("rsync", "-a", "-n", "-i", f"{source}/", f"{target}/").stdout == ""
        assert tree_stat(target) == tree_stat(source)
        commit_id = commit(lake / "sales/rsync", "rsync copy")
        assert run("rsync", "-a", "-n", "-i", f"{source}/", f"{target}/").stdout == ""
    with mounted(lake_home, mountpoint) as lake:  # everything came from storage
        target = lake / "sales/rsync/copy"
        assert run("rsync", "-a", "-n", "-i", f"{source}/", f"{target}/").stdout == ""
        assert run("rsync", "-a", "-n", "-i", f"{source}/", f"{lake.mountpoint}/sales/{commit_id}/copy/").stdout == ""
        assert tree_stat(lake / f"sales/{commit_id}/copy") == tree_stat(source)
        # a change shows up in the next rsync run, and rsync puts it back
        os.chmod(target / "docs" / "a.txt", 0o600)
        os.lchown(target / "absolute", 0, 0)
        changed = run("rsync", "-a", "-n", "-i", f"{source}/", f"{target}/").stdout.splitlines()
        assert sorted(line.split()[1] for line in changed) == ["absolute", "docs/a.txt"]
        run("rsync", "-a", f"{source}/", f"{target}/")
        assert run("rsync", "-a", "-n", "-i", f"{source}/", f"{target}/").stdout == ""


def test_owner_options_of_the_mount(lake_home, tmp_path):
    """``--uid/--gid``: the owner of entries storing none; ``--map-uid/--map-gid``: a stored id
    shown as another (and stored back); ``--force-owner``: everything shown as the default."""
    require_root()
    catalog = lake_home.catalog
    catalog.create_branch("sales", "owners", "main")
    catalog.upload_bytes("sales", "owners", "theirs.txt", b"x", metadata={"lakefuse-uid": "1000", "lakefuse-gid": "100"})
    with mounted(lake_home, tmp_path / "m1", args=("--uid", "1234", "--gid", "2345")) as lake:
        old = os.stat(lake / "sales/owners/readme.md")
        assert (old.st_uid, old.st_gid) == (1234, 2345)  # stores no owner
        theirs = os.stat(lake / "sales/owners/theirs.txt")
        assert (theirs.st_uid, theirs.st_gid) == (1000, 100)
        (lake / "sales/owners/by-root").write_text("r")
        assert os.stat(lake / "sales/owners/by-root").st_uid == 0  # the requester
    with mounted(lake_home, tmp_path / "m2", args=("--map-uid", "1000:4000", "--map-gid", "100:400")) as lake:
        theirs = os.stat(lake / "sales/owners/theirs.txt")
        assert (theirs.st_uid, theirs.st_gid) == (4000, 400)
        os.chown(lake / "sales/owners/by-root", 4000, 400)
        assert os.stat(lake / "sales/owners/by-root").st_uid == 4000
        commit(lake / "sales/owners", "owners")
    entry = catalog.stat("sales", "owners", "by-root")
    assert (entry.metadata["lakefuse-uid"], entry.metadata["lakefuse-gid"]) == ("1000", "100")  # stored back
    with mounted(lake_home, tmp_path / "m3", args=("--uid", "7", "--gid", "8", "--force-owner")) as lake:
        for name in ("theirs.txt", "by-root", "readme.md"):
            st = os.stat(lake / f"sales/owners/{name}")
            assert (st.st_uid, st.st_gid) == (7, 8), name
    bad = subprocess.run(MountedLake(lake_home, tmp_path / "m4", args=("--map-uid", "nope")).command(),
                         env=lake_home.env, capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0 and "--map-uid" in bad.stderr
