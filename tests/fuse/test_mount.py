"""Through a real kernel mount: the layout, shell tools on a branch compared with a local
directory, commits through the control file, concurrency, bad input, and what another writer's
change looks like."""

from __future__ import annotations

import contextlib
import errno
import filecmp
import os
import stat
import subprocess
import tarfile
import time
from pathlib import Path

import blake3
import pytest

from lakemount import LakeHome, MountedLake, is_mounted, mounted


def run(*cmd: str, cwd=None) -> str:
    result = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, f"{' '.join(cmd)} failed ({result.returncode}): {result.stderr}"
    return result.stdout


def assert_same_tree(left: Path, right: Path) -> None:
    cmp = filecmp.dircmp(left, right)
    problems = []

    def walk(c, prefix=""):
        problems.extend(f"{prefix}{n}: only in {c.left}" for n in c.left_only)
        problems.extend(f"{prefix}{n}: only in {c.right}" for n in c.right_only)
        for name in c.common_files:
            if (Path(c.left) / name).read_bytes() != (Path(c.right) / name).read_bytes():
                problems.append(f"{prefix}{name}: contents differ")
        for name, sub in c.subdirs.items():
            walk(sub, f"{prefix}{name}/")

    walk(cmp)
    assert not problems, "\n".join(problems)


def test_layout_and_mount_table(lake):
    assert os.listdir(lake.mountpoint) == ["sales"]
    assert sorted(os.listdir(lake / "sales")) == ["main", "v1"]
    assert sorted(os.listdir(lake / "sales/main")) == ["data", "readme.md"]
    assert (lake / "sales/v1/data/a.csv").read_bytes() == b"id,v\n1,2\n"
    assert "fuse.lakefuse" in run("findmnt", "-n", "-o", "FSTYPE", str(lake.mountpoint))
    assert run("df", "--output=source", str(lake.mountpoint)).split()[-1] == "lakefuse"


def test_shell_tools_on_a_branch_behave_like_a_local_directory(branch, tmp_path):
    local = tmp_path / "local"
    local.mkdir()
    source = tmp_path / "src"
    (source / "deep/er").mkdir(parents=True)
    for i in range(20):
        (source / f"f{i}.txt").write_text(f"file {i}\n" * (i + 1))
    (source / "deep/er/x.bin").write_bytes(os.urandom(300_000))
    os.utime(source / "f1.txt", (1_500_000_000, 1_500_000_000))
    with tarfile.open(tmp_path / "t.tar", "w") as tar:
        tar.add(source, arcname="archive")

    run("cp", "-r", str(branch) + "/.", str(local))  # the branch's own files
    for target in (local, branch):
        run("cp", "-r", str(source), str(target / "copied"))
        run("cp", "-p", str(source / "f1.txt"), str(target / "kept.txt"))
        run("mkdir", "-p", str(target / "m/n/o"))
        run("touch", str(target / "m/n/o/touched"))
        run("mv", str(target / "copied/f2.txt"), str(target / "m/moved.txt"))
        run("mv", str(target / "copied/deep"), str(target / "m/deepmoved"))
        run("rsync", "-a", str(source) + "/", str(target / "synced"))
        run("tar", "-xf", str(tmp_path / "t.tar"), "-C", str(target))
        run("rm", "-r", str(target / "copied"))
        (target / "appended.txt").write_text("one\n")
        with open(target / "appended.txt", "a") as f:
            f.write("two\n")

    assert_same_tree(local, branch)
    kept = os.stat(branch / "kept.txt")
    assert kept.st_mtime == 1_500_000_000
    assert stat.S_IMODE(kept.st_mode) == stat.S_IMODE(os.stat(source / "f1.txt").st_mode)
    assert sorted(run("find", ".", cwd=branch).split()) == sorted(run("find", ".", cwd=local).split())
    du = int(run("du", "-sb", str(branch / "synced")).split()[0])
    assert du >= 300_000
    listing = run("ls", "-l", str(branch / "synced"))
    assert "f19.txt" in listing and "deep" in listing
    assert run("cat", str(branch / "m/moved.txt")) == "file 2\n" * 3
    # a second rsync finds nothing to transfer (sizes and mtimes were kept)
    out = run("rsync", "-ai", str(source) + "/", str(branch / "synced"))
    assert not [line for line in out.splitlines() if line.startswith(">f")], out


def test_closed_files_reach_other_processes_soon_and_fsynced_ones_at_once(branch, lake_home):
    from lakefuse.errors import ObjectNotFound

    catalog = lake_home.catalog
    for i in range(30):  # closed: staged with the next batch, well within the change-poll interval
        (branch / f"closed{i}.txt").write_bytes(b"closed %d" % i)
    deadline = time.monotonic() + 2.0  # the change-poll interval is 0.5 s; slack for a loaded machine
    while True:
        try:
            assert all(catalog.read_object("sales", branch.name, f"closed{i}.txt") == b"closed %d" % i
                       for i in range(30))
            break
        except ObjectNotFound:
            assert time.monotonic() < deadline, "closed files not staged within 2 s"
            time.sleep(0.02)
    with open(branch / "synced.txt", "wb") as f:
        f.write(b"synced")
        f.flush()
        os.fsync(f.fileno())
        assert catalog.read_object("sales", branch.name, "synced.txt") == b"synced"  # before close


def test_a_new_file_has_the_time_of_its_create_or_last_write_not_of_its_spool(branch, lake_home):
    # spool files are made ahead (SpoolReserve): one may have waited a while for its file
    (branch / "first.txt").write_bytes(b"the reserve fills up now")
    time.sleep(2.2)  # staged times are whole seconds: a spool's own time would show 2 s early
    before = time.time()
    (branch / "touched.txt").touch()
    (branch / "written.txt").write_bytes(b"written")
    for name in ("touched.txt", "written.txt"):
        assert os.stat(branch / name).st_mtime >= int(before), name  # stored: whole seconds
    deadline = time.monotonic() + 2.0  # stored with the same time
    while True:
        try:
            stored = [lake_home.catalog.stat("sales", branch.name, name).mtime for name in ("touched.txt", "written.txt")]
            break
        except Exception:
            assert time.monotonic() < deadline, "not staged within 2 s"
            time.sleep(0.02)
    assert all(mtime >= int(before) for mtime in stored), (stored, before)


def test_a_read_write_temporary_file_reads_back_what_it_wrote_and_is_renamed_into_place(branch):
    # mkstemp's O_RDWR descriptor, renamed over its final name: rsync's and git's pattern
    for round in range(3):
        fd = os.open(branch / f".tmp{round}", os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, b"first part, " * 1000)
            os.write(fd, b"round %d" % round)
            os.lseek(fd, 0, os.SEEK_SET)
            assert os.read(fd, 12) == b"first part, "
            os.pwrite(fd, b"FIRST", 0)
            assert os.pread(fd, 8, 0) == b"FIRST pa"
            assert os.fstat(fd).st_size == 12_007
        finally:
            os.close(fd)
        os.rename(branch / f".tmp{round}", branch / "final.txt")
        data = (branch / "final.txt").read_bytes()
        assert data[:5] == b"FIRST" and data.endswith(b"round %d" % round) and len(data) == 12_007
    assert not any(name.startswith(".tmp") for name in os.listdir(branch))


def test_commit_through_the_control_file(branch, lake, lake_home):
    (branch / "new.csv").write_text("a,b\n")
    (branch / "data/a.csv").unlink()
    status = (branch / ".lakefuse/status").read_text()
    assert "+ new.csv" in status and "- data/a.csv" in status
    (branch / ".lakefuse/commit").write_text("add new.csv\n")
    commit_id = (branch / ".lakefuse/commit").read_text().strip()
    assert len(commit_id) == 64
    assert (branch / ".lakefuse/head").read_text().strip() == commit_id
    assert (branch / ".lakefuse/status").read_text() == ""
    commit_dir = lake / "sales" / commit_id
    assert sorted(os.listdir(commit_dir)) == ["data", "new.csv", "readme.md"]
    assert sorted(os.listdir(commit_dir / "data")) == ["sub"]
    assert (commit_dir / "new.csv").read_text() == "a,b\n"
    assert lake_home.catalog.get_commit("sales", commit_id).message == "add new.csv"
    assert sorted(os.listdir(lake / "sales" / commit_id[:12])) == ["data", "new.csv", "readme.md"]
    with pytest.raises(OSError) as exc:
        (commit_dir / "new.csv").write_text("no")
    assert exc.value.errno == errno.EROFS


def test_commit_with_no_changes_fails_on_close_and_says_why(branch):
    with pytest.raises(OSError) as exc:
        with open(branch / ".lakefuse/commit", "w") as f:
            f.write("nothing to commit")
    assert exc.value.errno == errno.ENODATA
    assert (branch / ".lakefuse/commit").read_text().startswith("error: ")


def test_commit_while_a_file_is_open_for_writing(branch, lake):
    with open(branch / "open.bin", "wb") as f:
        f.write(b"x" * 100_000)
        f.flush()
        (branch / ".lakefuse/commit").write_text("with an open file")
        f.write(b"y")
    commit_id = (branch / ".lakefuse/commit").read_text().strip()
    assert (lake / "sales" / commit_id / "open.bin").read_bytes() == b"x" * 100_000
    assert (branch / "open.bin").read_bytes() == b"x" * 100_000 + b"y"


def test_two_processes_write_different_files_concurrently(branch):
    script = ("import sys, os\n"
              "p = sys.argv[1]\n"
              "for i in range(30):\n"
              "    with open(os.path.join(p, f'{sys.argv[2]}-{i}'), 'wb') as f:\n"
              "        f.write(sys.argv[2].encode() * 10000)\n")
    import sys

    procs = [subprocess.Popen([sys.executable, "-c", script, str(branch), name]) for name in ("p", "q")]
    for proc in procs:
        assert proc.wait(120) == 0
    names = sorted(os.listdir(branch))
    assert len([n for n in names if n.startswith(("p-", "q-"))]) == 60
    assert (branch / "q-29").read_bytes() == b"q" * 10000


def test_readers_beside_a_rewriter_never_read_bytes_nobody_wrote(branch):
    """4 readers and a process rewriting the same file (open with O_TRUNC, write, close), 5
    rounds: a read may catch the file mid-rewrite (a prefix), as on a local disk, but before
    the fix about every other round read 100,000 zero bytes, pages the kernel had zero-filled
    after a short read."""
    import concurrent.futures

    path = branch / "rewritten.bin"
    for _ in range(5):
        path.write_bytes(b"x" * 100_000)
        foreign = []

        def read():
            for _ in range(40):
                data = path.read_bytes()
                if not set(data) <= {ord("x"), ord("y")}:
                    foreign.append(sorted(set(data))[:3])

        def rewrite():
            for i in range(20):
                path.write_bytes((b"y" if i % 2 else b"x") * 100_000)

        with concurrent.futures.ThreadPoolExecutor(5) as pool:
            for job in [pool.submit(read) for _ in range(4)] + [pool.submit(rewrite)]:
                job.result()
        assert not foreign, foreign[:3]
    assert path.read_bytes() == b"y" * 100_000


def test_large_file_sequential_and_random_io(branch):
    data = bytearray(os.urandom(24 * 1024 * 1024))
    path = branch / "big.bin"
    path.write_bytes(data)  # past 8 MiB its writes are queued for the spool's writer thread
    assert path.stat().st_size == len(data)
    assert os.getxattr(path, "lakefuse.checksum").decode() == "blake3:" + blake3.blake3(data).hexdigest()
    assert path.read_bytes() == bytes(data)
    with open(path, "r+b") as f:
        for offset in (5, 1 << 20, 7_777_777, len(data) - 3):
            f.seek(offset)
            f.write(b"XYZ")
            data[offset:offset + 3] = b"XYZ"
        f.seek(0, 2)
        f.write(b"tail")
        data += b"tail"
        f.truncate(len(data) - 1)
        del data[-1:]
    assert path.read_bytes() == bytes(data)
    with open(path, "rb") as f:
        f.seek(7_777_770)
        assert f.read(20) == bytes(data[7_777_770:7_777_790])


def test_bad_input_gets_clear_errnos(lake, branch):
    def errno_of(fn) -> int:
        with pytest.raises(OSError) as exc:
            fn()
        return exc.value.errno

    assert errno_of(lambda: (lake / "sales/v1/new.txt").write_text("x")) == errno.EROFS
    assert errno_of(lambda: (lake / "sales/v1/readme.md").write_text("x")) == errno.EROFS
    assert errno_of(lambda: (lake / "sales/v1/data").rename(lake / "sales/v1/d2")) == errno.EROFS
    assert errno_of(lambda: (branch / ("x" * 256)).write_text("x")) == errno.ENAMETOOLONG
    assert errno_of(lambda: (branch / ".lakefuse/mine").write_text("x")) in (errno.EPERM, errno.EACCES)
    assert errno_of(lambda: os.mkdir(branch / ".lakefuse")) == errno.EEXIST
    assert errno_of(lambda: os.listdir(lake / "sales/no-such-ref")) == errno.ENOENT
    assert errno_of(lambda: os.listdir(lake / "nosuchrepo")) == errno.ENOENT
    assert errno_of(lambda: os.link(branch / "readme.md", branch / "hard")) == errno.EPERM
    assert errno_of(lambda: os.symlink("readme.md", lake / "sales/v1/link")) == errno.EROFS
    assert errno_of(lambda: os.mkfifo(lake / "sales/v1/fifo")) == errno.EROFS
    assert errno_of(lambda: os.rmdir(branch / "data")) == errno.ENOTEMPTY
    assert errno_of(lambda: os.mkdir(lake / "newrepo")) == errno.EPERM  # repositories: the CLI
    assert ".lakefuse" not in os.listdir(branch)
    (branch / ("y" * 255)).write_text("fine")


def test_metadata_chmod_utime_and_xattrs(branch):
    path = branch / "meta.txt"
    path.write_text("m")
    os.chmod(path, 0o640)
    os.utime(path, ns=(1_600_000_000_500_000_000, 1_600_000_000_500_000_000))
    st = os.stat(path)
    assert stat.S_IMODE(st.st_mode) == 0o640 and st.st_mtime_ns == 1_600_000_000_500_000_000
    os.setxattr(path, "user.owner", b"ana")
    assert os.getxattr(path, "user.owner") == b"ana"
    assert os.getxattr(path, "lakefuse.checksum").startswith(b"blake3:")  # lakefuse.checksums
    assert os.getxattr(path, "lakefuse.physical_address").startswith(b"data/")
    assert "user.owner" in os.listxattr(path)
    os.removexattr(path, "user.owner")
    with pytest.raises(OSError) as exc:
        os.getxattr(path, "user.owner")
    assert exc.value.errno == errno.ENODATA
    os.chown(path, 1234, 5678)
    assert (os.stat(path).st_uid, os.stat(path).st_gid) == (1234, 5678)


def test_ls_l_asks_for_labels_and_acls_once_not_per_file(branch):
    """SELinux labels and ACLs are not supported: ENOTSUP, which ls remembers per filesystem,
    so ls -l of a big directory costs no extra round trips per entry."""
    (branch / "many").mkdir()
    for i in range(50):
        (branch / "many" / f"f{i:02d}").write_bytes(b"x")
    for name in ("security.selinux", "system.posix_acl_access"):
        with pytest.raises(OSError) as exc:
            os.getxattr(branch / "many" / "f00", name)
        assert exc.value.errno == errno.ENOTSUP
    traced = subprocess.run(["strace", "-f", "-e", "trace=getxattr,lgetxattr", "ls", "-l", str(branch / "many")],
                            capture_output=True, text=True, check=True)
    assert traced.stdout.count("\n") == 51  # "total" + 50 files
    xattr_calls = [line for line in traced.stderr.splitlines() if "getxattr(" in line]
    assert 0 < len(xattr_calls) <= 4, xattr_calls


def test_another_writer_shows_within_about_a_second(branch, lake_home):
    name = branch.name
    (branch / "data/a.csv").read_bytes()
    assert "elsewhere.txt" not in os.listdir(branch)
    lake_home.catalog.upload_bytes("sales", name, "elsewhere.txt", b"from the API")
    lake_home.catalog.upload_bytes("sales", name, "data/a.csv", b"changed by the API")
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        if "elsewhere.txt" in os.listdir(branch) and (branch / "data/a.csv").read_bytes() == b"changed by the API":
            break
        time.sleep(0.1)
    else:
        pytest.fail("the other writer's change did not show within 3 s")
    assert (branch / "elsewhere.txt").read_bytes() == b"from the API"


def fuse_requests_while(mount: MountedLake, action) -> int:
    """How many requests the mount's serving thread reads from /dev/fuse while ``action()``
    runs (strace on the mount process)."""
    out = mount.home.path / "fuse-requests.strace"
    tracer = subprocess.Popen(["strace", "-y", "-e", "trace=read,readv,splice", "-o", str(out),
                               "-p", str(mount.proc.pid)], stderr=subprocess.PIPE, text=True)
    try:
        assert "attached" in tracer.stderr.readline()
        time.sleep(0.2)
        action()
        time.sleep(0.2)
    finally:
        tracer.terminate()
        tracer.wait(30)
    return sum("/dev/fuse" in line and "= -1" not in line for line in out.read_text().splitlines())


def test_warm_branch_metadata_stays_in_the_kernel_until_another_writer_changes_it(branch, lake, lake_home):
    (branch / "warm").mkdir()
    paths = [branch / "warm" / f"f{i:02d}" for i in range(40)]
    for path in paths:
        path.write_bytes(b"x")
    for path in paths:
        os.stat(path)
    time.sleep(1.5)  # longer than the 1 s a branch would be trusted without the change feed
    requests = fuse_requests_while(lake, lambda: [os.stat(path) for path in paths])
    assert requests <= 4, f"{requests} requests for 40 warm stats"  # at most the repo and branch names again
    lake_home.catalog.upload_bytes("sales", branch.name, "warm/f07", b"longer, from the API")
    lake_home.catalog.delete_object("sales", branch.name, "warm/f08")
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        if os.stat(paths[7]).st_size == len(b"longer, from the API") and not paths[8].exists():
            break
        time.sleep(0.05)
    else:
        pytest.fail("the other writer's change did not show within 3 s")
    assert paths[7].read_bytes() == b"longer, from the API"
    assert os.stat(paths[6]).st_size == 1


def test_missing_names_stay_missing_in_the_kernel_until_another_writer_makes_them(branch, lake, lake_home):
    """A watched branch answers a missing name with a negative entry the kernel keeps (a
    build's or git's repeated probes cost no request), and takes it back when another writer
    makes the name, or a directory above it."""
    probes = [branch / f"probe{i:02d}.lock" for i in range(20)] + [branch / "later/deep.txt"]
    assert not any(path.exists() for path in probes)
    requests = fuse_requests_while(lake, lambda: [path.exists() for path in probes * 5])
    assert requests <= 4, f"{requests} requests for 105 probes of missing names"
    lake_home.catalog.upload_bytes("sales", branch.name, "probe07.lock", b"from the API")
    lake_home.catalog.upload_bytes("sales", branch.name, "later/deep.txt", b"deep")
    deadline = time.monotonic() + 3
    while not (probes[7].exists() and probes[-1].exists()):
        assert time.monotonic() < deadline, "another writer's new names did not show within 3 s"
        time.sleep(0.05)
    assert probes[7].read_bytes() == b"from the API" and probes[-1].read_bytes() == b"deep"
    assert not probes[6].exists()
    probes[6].write_bytes(b"made here")  # the kernel's negative entry turns into the new file
    assert probes[6].read_bytes() == b"made here"


def test_another_processes_commit_and_reset_show(branch, lake_home):
    (branch / "data/a.csv").read_bytes()
    lake_home.catalog.upload_bytes("sales", branch.name, "data/a.csv", b"committed elsewhere")
    lake_home.catalog.commit("sales", branch.name, "elsewhere", "tests")
    deadline = time.monotonic() + 3
    while (branch / "data/a.csv").read_bytes() != b"committed elsewhere":
        assert time.monotonic() < deadline, "another process's commit did not show within 3 s"
        time.sleep(0.05)
    lake_home.catalog.upload_bytes("sales", branch.name, "data/staged.txt", b"staged elsewhere")
    deadline = time.monotonic() + 3
    while not (branch / "data/staged.txt").exists():
        assert time.monotonic() < deadline, "another process's write did not show within 3 s"
        time.sleep(0.05)
    lake_home.catalog.reset("sales", branch.name)  # drops the staging area
    deadline = time.monotonic() + 3
    while (branch / "data/staged.txt").exists():
        assert time.monotonic() < deadline, "another process's reset did not show within 3 s"
        time.sleep(0.05)


def test_rename_of_a_directory_with_many_files(branch):
    src = branch / "many"
    src.mkdir()
    for i in range(200):
        (src / f"f{i:03d}").write_text(str(i))
    os.rename(src, branch / "renamed")
    assert sorted(os.listdir(branch / "renamed")) == [f"f{i:03d}" for i in range(200)]
    assert (branch / "renamed/f123").read_text() == "123"
    assert not src.exists()


def test_mounts_of_one_repository_one_ref_and_read_only(lake_home, tmp_path):
    with mounted(lake_home, tmp_path / "repo", "lakefs://sales") as m:
        assert {"main", "v1"} <= set(os.listdir(m.mountpoint))
    with mounted(lake_home, tmp_path / "ref", "lakefs://sales/v1") as m:
        assert sorted(os.listdir(m.mountpoint)) == ["data", "readme.md"]
    with mounted(lake_home, tmp_path / "ro", "lakefs://sales/main", ("--read-only",)) as m:
        assert (m / "readme.md").read_bytes() == b"# sales\n"
        with pytest.raises(OSError) as exc:
            (m / "x").write_text("x")
        assert exc.value.errno == errno.EROFS
        assert "ro" in run("findmnt", "-n", "-o", "OPTIONS", str(m.mountpoint)).split(",")


def test_sigterm_uploads_open_files_then_unmounts(lake_home, tmp_path):
    lake_home.catalog.create_branch("sales", "sigterm", "main")
    mount = MountedLake(lake_home, tmp_path / "sig", "lakefs://sales/sigterm").start()
    try:
        f = open(mount / "pending.txt", "wb")
        f.write(b"written before SIGTERM")
        f.flush()
        assert mount.stop() == 0
        # the kernel wrote the file itself (no FLUSH at close): its close asks nothing of the
        # daemon that is gone; what it wrote was stored when the daemon stopped
        with contextlib.suppress(OSError):
            f.close()
    finally:
        mount.stop()
    assert lake_home.catalog.read_object("sales", "sigterm", "pending.txt") == b"written before SIGTERM"
    assert "uploading written files" in mount.logs()


def test_a_broken_lease_does_not_end_the_mount(lake_home, tmp_path):
    """The spools take a write lease for an instant to learn whether another open of the file
    exists (``Spool.held_elsewhere``); an open in that instant breaks it with SIGIO, whose
    default action ends a process.  (It ended the mount in about 1 of 20 ``rsync -a`` runs.)"""
    import signal

    lake_home.catalog.create_branch("sales", "sigio", "main")
    mount = MountedLake(lake_home, tmp_path / "sigio", "lakefs://sales/sigio").start()
    try:
        mount.proc.send_signal(signal.SIGIO)
        (mount / "after.txt").write_bytes(b"still mounted")
        assert (mount / "after.txt").read_bytes() == b"still mounted" and mount.proc.poll() is None
    finally:
        assert mount.stop() == 0


def test_daemon_mode_reports_readiness_and_errors(lake_home, tmp_path):
    import sys

    mountpoint = tmp_path / "daemon"
    mountpoint.mkdir()
    cmd = [sys.executable, "-m", "lakefuse.fuse"]
    env = dict(lake_home.env)
    result = subprocess.run(cmd + ["mount", "--log-file", str(tmp_path / "d.log"), str(mountpoint), "lakefs://sales"],
                            env=env, capture_output=True, text=True, timeout=120)
    try:
        assert result.returncode == 0, result.stderr
        assert {"main", "v1"} <= set(os.listdir(mountpoint))  # ready when the parent returned
    finally:
        out = subprocess.run(cmd + ["umount", str(mountpoint)], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert not is_mounted(str(mountpoint))
    failed = subprocess.run(cmd + ["mount", str(mountpoint), "lakefs://nosuchrepo"], env=env,
                            capture_output=True, text=True, timeout=120)
    assert failed.returncode == 3
    assert failed.stderr.strip().count("\n") == 0 and "nosuchrepo" in failed.stderr
    not_mounted = subprocess.run(cmd + ["umount", str(mountpoint)], env=env, capture_output=True, text=True)
    assert not_mounted.returncode != 0 and "not mounted" in not_mounted.stderr


@pytest.mark.parametrize("kernel_writes", [True, False], ids=["kernel-writes", "mount-writes"])
def test_a_full_spool_disk_fails_the_write_with_enospc(tmp_path, kernel_writes):
    """The spool directory and the repository's storage (where the spools of its files are
    made, see ``SpoolReserve``) each on a 16 MiB tmpfs: copying 64 MiB in fails with ENOSPC,
    and the mount keeps serving.  Written by the mount (opened for appending), a failed
    background write fails the file at a later write or at close, and nothing of it is staged:
    the writer was told its bytes were taken.  Written by the kernel into the spool (an open
    from empty), the write(2) that found the disk full fails itself, so the file keeps what was
    written before it, as on a local disk; deleting it frees the disk again."""
    home = LakeHome(tmp_path / "home")
    spool = tmp_path / "home" / "spool"
    namespace = Path(home.app.default_namespace("full")[len("local://"):])
    tmpfs = []
    try:
        for directory in (spool, namespace):
            directory.mkdir(parents=True)
            mounted_tmpfs = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(directory)],
                                           capture_output=True, text=True)
            if mounted_tmpfs.returncode != 0:
                pytest.skip(f"cannot mount a tmpfs: {mounted_tmpfs.stderr.strip()}")
            tmpfs.append(directory)
        home.create_repository("full")
        with mounted(home, tmp_path / "mnt", "lakefs://full/main") as lake:
            data = os.urandom(64 * 1024 * 1024)
            written = 0
            with pytest.raises(OSError) as exc:
                with open(lake / "big.bin", "wb" if kernel_writes else "ab", buffering=0) as f:
                    for offset in range(0, len(data), 1024 * 1024):
                        written += f.write(data[offset:offset + 1024 * 1024])
            assert exc.value.errno == errno.ENOSPC

            def holding_bytes(directory: Path) -> set[str]:
                # empty files wait in the mount's reserves of new spools
                return {str(path) for path in directory.rglob("*") if path.is_file() and path.stat().st_size}

            def leftovers():
                staged = {o.path: o for o in home.catalog.list_objects("full", "main").items}
                kept = {str(namespace / o.entry.physical_address) for o in staged.values()}
                spooled = holding_bytes(spool) | (holding_bytes(namespace / "data") - kept)
                if kernel_writes:
                    return sorted(spooled) + ([] if "big.bin" in staged else ["big.bin not staged"])
                return sorted(spooled) + [name for name in os.listdir(lake.mountpoint) if name == "big.bin"]

            deadline = time.monotonic() + 10  # the kernel sends RELEASE after close(2) returned
            while leftovers() and time.monotonic() < deadline:
                time.sleep(0.05)
            assert leftovers() == []
            staged = {o.path: o for o in home.catalog.list_objects("full", "main").items}
            if kernel_writes:
                assert 0 < written < len(data)
                kept = (lake / "big.bin").read_bytes()
                assert len(kept) >= written and kept == data[:len(kept)]
                assert staged["big.bin"].entry.size == len(kept)
                (lake / "big.bin").unlink()  # its object is the mount's own: deleted from storage soon
                deadline = time.monotonic() + 10
                while holding_bytes(namespace / "data") and time.monotonic() < deadline:
                    time.sleep(0.05)
                assert not holding_bytes(namespace / "data")
            else:
                assert "big.bin" not in staged
            (lake / "small.txt").write_bytes(b"still serving")
            assert (lake / "small.txt").read_bytes() == b"still serving"
            assert "unexpected error" not in lake.logs()
    finally:
        for directory in tmpfs:
            subprocess.run(["umount", "-l", str(directory)], capture_output=True)
        home.close()


@pytest.mark.parametrize("command", [["mv"], ["cp", "-a"], ["rsync", "-aX"]])
def test_copy_tools_between_branches_are_silent_and_keep_user_metadata(lake_home, lake, command):
    source, target = (lake_home.catalog.create_branch("sales", f"xa-{command[0]}-{side}-{os.getpid()}", "main")
                      for side in ("from", "to"))
    source_dir, target_dir = lake / "sales" / source.id, lake / "sales" / target.id
    (source_dir / "moved.txt").write_text("payload")
    os.setxattr(source_dir / "moved.txt", "user.owner", b"ana")
    done = subprocess.run([*command, str(source_dir / "moved.txt"), str(target_dir / "moved.txt")],
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert (done.returncode, done.stderr) == (0, "")
    assert (target_dir / "moved.txt").read_text() == "payload"
    assert os.getxattr(target_dir / "moved.txt", "user.owner") == b"ana"
    assert os.getxattr(target_dir / "moved.txt", "lakefuse.checksum").startswith(b"blake3:")
    assert os.path.exists(source_dir / "moved.txt") == (command[0] != "mv")
