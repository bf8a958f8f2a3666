"""Branch, merge, tag and reset with file operations alone, through real kernel mounts:
``mkdir``/``rmdir`` of branch directories with their errnos and rules, the control files
``merge``, ``tag``, ``branch`` and ``reset`` written with shell tools, what a merge or reset
shows at once in the same mount (a mount polling every 30 s, so only the mount's own
invalidation can explain it) and within the change-poll interval in another mount, and
handles writing under a reset answering ESTALE."""

from __future__ import annotations

import errno
import itertools
import os
import subprocess
import time

import pytest

from lakemount import MountedLake

_names = itertools.count()

#: another mount of the same home polls every 0.5 s: a change shows there well within this
OTHER_MOUNT_SECONDS = 3.0


def new_name(prefix: str) -> str:
    return f"{prefix}{next(_names)}-{os.getpid()}"


def sh(script: str, **env) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", script], env=dict(os.environ, **env), capture_output=True, text=True,
                          timeout=120, stdin=subprocess.DEVNULL)


def errno_of(fn) -> int:
    with pytest.raises(OSError) as exc:
        fn()
    return exc.value.errno


@pytest.fixture(scope="module")
def slow(lake_home, tmp_path_factory):
    """Every repository mounted with a change poll of 30 s: the kernel keeps branch metadata
    for a minute unless the mount itself invalidates it."""
    mount = MountedLake(lake_home, tmp_path_factory.mktemp("slow") / "lake", args=("--change-poll", "30"))
    mount.start()
    yield mount
    mount.stop()


def head(lake_home, branch: str) -> str:
    return lake_home.catalog.get_branch("sales", branch).commit_id


# ------------------------------------------------------------------ mkdir and rmdir

def test_mkdir_makes_a_branch_from_main_ready_for_writes(lake, lake_home):
    name = new_name("mk")
    lake_home.catalog.upload_bytes("sales", "main", "uncommitted-on-main.txt", b"u")
    try:
        os.mkdir(lake / f"sales/{name}")
        assert name in os.listdir(lake / "sales")
        assert head(lake_home, name) == head(lake_home, "main")
        assert not (lake / f"sales/{name}/uncommitted-on-main.txt").exists()
        (lake / f"sales/{name}/new.txt").write_text("n")
        assert (lake / f"sales/{name}/.lakefuse/status").read_text() == "+ new.txt\n"
    finally:
        lake_home.catalog.reset("sales", "main")
    done = sh('mkdir -p "$M/sales/$N/a/b" && ls "$M/sales/$N"', M=str(lake.mountpoint), N=new_name("mkp"))
    assert done.returncode == 0 and done.stdout.split() == ["a", "data", "readme.md"], done.stderr


@pytest.mark.parametrize("name, code", [("main", errno.EEXIST), ("v1", errno.EEXIST), ("bad name", errno.EINVAL),
                                        ("x.lock", errno.EINVAL), ("-dash", errno.EINVAL)])
def test_mkdir_errnos(lake, lake_home, name, code):
    branches = {b.id for b in lake_home.catalog.list_branches("sales")}
    assert errno_of(lambda: os.mkdir(lake / "sales" / name)) == code
    assert {b.id for b in lake_home.catalog.list_branches("sales")} == branches
    done = sh('mkdir "$M/sales/$N"', M=str(lake.mountpoint), N=name)
    assert done.returncode != 0 and os.strerror(code) in done.stderr


def test_rmdir_rules(lake, lake_home, branch):
    assert errno_of(lambda: os.rmdir(lake / "sales/main")) == errno.EPERM
    assert errno_of(lambda: os.rmdir(lake / "sales/v1")) == errno.EROFS
    (branch / "data/extra.csv").write_text("e")
    assert errno_of(lambda: os.rmdir(branch)) == errno.ENOTEMPTY  # uncommitted
    assert sh('echo "add extra" > "$B/.lakefuse/commit"', B=str(branch)).returncode == 0
    assert errno_of(lambda: os.rmdir(branch)) == errno.ENOTEMPTY  # a commit only it has
    assert sh('echo "kept-$N" > "$B/.lakefuse/tag"', B=str(branch), N=branch.name).returncode == 0
    os.rmdir(branch)  # the tag holds its commits now
    assert branch.name not in os.listdir(lake / "sales")
    assert branch.name not in {b.id for b in lake_home.catalog.list_branches("sales")}
    assert not branch.exists()
    assert (lake / f"sales/kept-{branch.name}/data/extra.csv").read_text() == "e"


def test_rm_r_of_a_branch_leaves_the_branch_and_reset_brings_its_files_back(lake, lake_home, branch):
    done = sh('rm -r "$B"', B=str(branch))
    assert done.returncode != 0 and os.strerror(errno.ENOTEMPTY) in done.stderr
    assert branch.name in {b.id for b in lake_home.catalog.list_branches("sales")}
    assert "- data/a.csv" in (branch / ".lakefuse/status").read_text()
    assert sh('echo . > "$B/.lakefuse/reset"', B=str(branch)).returncode == 0
    assert sorted(os.listdir(branch)) == ["data", "readme.md"]
    assert (branch / "data/a.csv").read_text() == "id,v\n1,2\n"


def test_a_new_branch_shows_in_another_mount_at_once_and_a_deleted_one_soon(lake, slow, lake_home):
    os.listdir(slow / "sales")
    name = new_name("seen")
    os.mkdir(lake / f"sales/{name}")
    assert name in os.listdir(slow / "sales")
    assert (slow / f"sales/{name}/readme.md").read_text() == "# sales\n"
    os.rmdir(lake / f"sales/{name}")
    assert name not in os.listdir(slow / "sales")
    deadline = time.monotonic() + OTHER_MOUNT_SECONDS
    while (slow / f"sales/{name}").exists():
        assert time.monotonic() < deadline, "a deleted branch's name still resolves in another mount"
        time.sleep(0.05)


# ------------------------------------------------------------------ merge, tag, branch

def prepare_source(lake, lake_home) -> str:
    """A branch (made with mkdir) that rewrote data/a.csv, deleted data/sub/b.txt and added
    data/new.csv, committed through the control file."""
    name = new_name("src")
    source = lake / f"sales/{name}"
    os.mkdir(source)
    (source / "data/a.csv").write_text("id,v\n1,2\n3,4\n5,6\n")
    (source / "data/sub/b.txt").unlink()
    (source / "data/new.csv").write_text("id\n9\n")
    done = sh('echo "rewrite" > "$S/.lakefuse/commit"', S=str(source))
    assert done.returncode == 0, done.stderr
    return name


def test_a_merge_shows_in_the_destination_at_once_and_in_another_mount_soon(lake, slow, lake_home):
    source = prepare_source(lake, lake_home)
    dest = new_name("dst")
    lake_home.catalog.create_branch("sales", dest, "main")
    in_lake, in_slow = lake / f"sales/{dest}", slow / f"sales/{dest}"
    for where in (in_lake, in_slow):  # the kernels know these names and sizes now
        assert (where / "data/a.csv").read_text() == "id,v\n1,2\n"
        assert (where / "data/sub/b.txt").exists() and not (where / "data/new.csv").exists()

    done = sh('echo "$S" > "$D/.lakefuse/merge"', S=source, D=str(in_slow))
    assert done.returncode == 0, done.stderr
    merged = (in_slow / ".lakefuse/merge").read_text().strip()
    assert merged == head(lake_home, dest) and list(lake_home.catalog.get_commit("sales", merged).parents) == [
        head(lake_home, "main"), head(lake_home, source)]
    assert lake_home.catalog.get_commit("sales", merged).message == f"Merge '{source}' into '{dest}'"
    # at once in the mount that merged, although it polls every 30 s
    assert (in_slow / "data/a.csv").read_text() == "id,v\n1,2\n3,4\n5,6\n"
    assert not (in_slow / "data/sub/b.txt").exists()
    assert (in_slow / "data/new.csv").read_text() == "id\n9\n"
    # within the change-poll interval in the other mount
    deadline = time.monotonic() + OTHER_MOUNT_SECONDS
    while (in_lake / "data/sub/b.txt").exists() or not (in_lake / "data/new.csv").exists():
        assert time.monotonic() < deadline, "the merge did not show in the other mount"
        time.sleep(0.05)
    assert (in_lake / "data/a.csv").read_text() == "id,v\n1,2\n3,4\n5,6\n"


def test_merge_errors_fail_the_echo_and_say_why(lake, lake_home, branch):
    control = branch / ".lakefuse/merge"
    before = head(lake_home, branch.name)
    for line, code, says in (("main", errno.ENODATA, "already contained"),
                             ("nosuchref", errno.ENOENT, "nosuchref"),
                             ("main sideways", errno.EINVAL, "unknown merge strategy")):
        done = sh('echo "$L" > "$C"', L=line, C=str(control))
        assert done.returncode != 0 and os.strerror(code) in done.stderr, (line, done.stderr)
        assert control.read_text().startswith("error: ") and says in control.read_text()
    (branch / "dirty.txt").write_text("d")
    source = prepare_source(lake, lake_home)
    done = sh('echo "$S" > "$C"', S=source, C=str(control))
    assert done.returncode != 0 and os.strerror(errno.EBUSY) in done.stderr
    assert "uncommitted changes" in control.read_text()
    assert head(lake_home, branch.name) == before


def test_a_conflicting_merge_exits_non_zero_lists_the_paths_and_changes_nothing(lake, lake_home, branch):
    source = prepare_source(lake, lake_home)
    (branch / "data/a.csv").write_text("id,v\n1,2\n7,8\n")
    assert sh('echo "mine" > "$B/.lakefuse/commit"', B=str(branch)).returncode == 0
    before = head(lake_home, branch.name)
    done = sh('echo "$S" > "$B/.lakefuse/merge"', S=source, B=str(branch))
    assert done.returncode != 0 and os.strerror(errno.EBUSY) in done.stderr
    text = (branch / ".lakefuse/merge").read_text()
    assert text.startswith("error: ") and "conflict: data/a.csv\n" in text
    assert head(lake_home, branch.name) == before
    assert (branch / "data/a.csv").read_text() == "id,v\n1,2\n7,8\n"
    assert sh('echo "$S source-wins" > "$B/.lakefuse/merge"', S=source, B=str(branch)).returncode == 0
    assert (branch / "data/a.csv").read_text() == "id,v\n1,2\n3,4\n5,6\n"


def test_tag_and_branch_through_control_files(lake, lake_home, branch):
    tag, child = new_name("t"), new_name("child")
    done = sh('echo "$T" > "$B/.lakefuse/tag" && echo "$C" > "$B/.lakefuse/branch"', T=tag, C=child, B=str(branch))
    assert done.returncode == 0, done.stderr
    at = head(lake_home, branch.name)
    assert (branch / ".lakefuse/tag").read_text().strip() == at == lake_home.catalog.get_tag("sales", tag)
    assert (branch / ".lakefuse/branch").read_text().strip() == at == head(lake_home, child)
    names = os.listdir(lake / "sales")
    assert tag in names and child in names
    assert (lake / f"sales/{tag}/readme.md").read_text() == "# sales\n"
    assert errno_of(lambda: (lake / f"sales/{tag}/x").write_text("x")) == errno.EROFS
    (lake / f"sales/{child}/mine.txt").write_text("m")
    for target, line in (("tag", tag), ("branch", child), ("tag", "main"), ("branch", "v1")):
        done = sh('echo "$L" > "$B/.lakefuse/$F"', L=line, F=target, B=str(branch))
        assert done.returncode != 0 and os.strerror(errno.EEXIST) in done.stderr, (target, line)
    done = sh('echo "no good" > "$B/.lakefuse/tag"', B=str(branch))
    assert done.returncode != 0 and os.strerror(errno.EINVAL) in done.stderr


# ------------------------------------------------------------------ reset

def test_reset_drops_changes_and_files_being_written_whose_handles_then_answer_estale(slow, lake_home):
    name = new_name("rst")
    lake_home.catalog.create_branch("sales", name, "main")
    branch = slow / f"sales/{name}"
    (branch / "out").mkdir()
    (branch / "out/closed.parquet").write_bytes(b"closed")
    (branch / "kept.txt").write_text("kept")
    (branch / "data/a.csv").write_text("changed")
    # served by the mount (appending), and written by the kernel into its spool (from empty:
    # see docs/mount.md#kernel-writes)
    writer = os.open(branch / "out/open.parquet", os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
    kernel_writer = os.open(branch / "out/kernel.parquet", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    reader = os.open(branch / "readme.md", os.O_RDONLY)
    try:
        os.write(writer, b"half")
        os.write(kernel_writer, b"half")
        done = sh('echo out/ > "$B/.lakefuse/reset"', B=str(branch))
        assert done.returncode == 0, done.stderr
        assert errno_of(lambda: os.write(writer, b" more")) == errno.ESTALE
        os.write(kernel_writer, b" more")  # the kernel writes on, into the detached spool
        assert errno_of(lambda: os.fsync(kernel_writer)) == errno.ESTALE
        assert os.read(reader, 100) == b"# sales\n"
    finally:
        close_errno = errno_of(lambda: os.close(writer))
        os.close(kernel_writer)  # no FLUSH for a file the kernel writes: its close asks the mount nothing
        os.close(reader)
    assert close_errno == errno.ESTALE
    assert not (branch / "out").exists()  # at once, though this mount polls every 30 s
    assert (branch / "data/a.csv").read_text() == "changed"
    assert sorted((branch / ".lakefuse/status").read_text().splitlines()) == ["+ kept.txt", "~ data/a.csv"]
    assert os.stat(branch / "data/a.csv").st_size == len("changed")  # the kernel knows these now
    assert (branch / "kept.txt").exists()
    assert sh('echo . > "$B/.lakefuse/reset"', B=str(branch)).returncode == 0
    assert (branch / ".lakefuse/reset").read_text().strip() == head(lake_home, name)
    assert (branch / ".lakefuse/status").read_text() == ""
    assert os.stat(branch / "data/a.csv").st_size == len("id,v\n1,2\n")
    assert (branch / "data/a.csv").read_text() == "id,v\n1,2\n"
    assert not (branch / "kept.txt").exists()
