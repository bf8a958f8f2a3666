"""FUSE passthrough through a real kernel mount: the kernel reads objects of a local storage
namespace under commits and tags itself (branch files too with --passthrough-branches), and
files being written beside such readers still behave.

Passthrough needs pyfuse3 as built by scripts/build_pyfuse3.py; where the stock pyfuse3 is
installed these tests skip, except under CI=true where that is a failure."""

from __future__ import annotations

import errno
import mmap
import os
import time
from pathlib import Path

import pytest

from lakemount import in_ci, mounted, require_binding

MiB = 1024 * 1024


@pytest.fixture(scope="module", autouse=True)
def passthrough_available(lake):
    import pyfuse3

    if not hasattr(pyfuse3, "passthrough_session_fd"):
        reason = "pyfuse3 without passthrough (scripts/build_pyfuse3.py did not run)"
        if in_ci():
            pytest.fail(reason)
        pytest.skip(reason)
    if "passthrough reads of local objects: on" not in lake.log_path.read_text():
        reason = "the kernel did not grant FUSE passthrough:\n" + lake.logs()
        if in_ci():
            pytest.fail(reason)
        pytest.skip(reason)


def mount_cpu_seconds(mount) -> float:
    with open(f"/proc/{mount.proc.pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_reads_of_commits_tags_and_branches_are_the_objects_bytes(lake, lake_home):
    commit = lake_home.catalog.get_branch("sales", "main").commit_id
    for ref in (commit, "v1", "main"):
        assert (lake / f"sales/{ref}/data/a.csv").read_bytes() == b"id,v\n1,2\n"
        with open(lake / f"sales/{ref}/readme.md", "rb") as f, mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ) as m:
            assert m[:] == b"# sales\n"


def answered_in_the_binding(mount) -> tuple[int, int]:
    """The opens and the lookups of missing names the binding answered, as the mount logs them
    when it ends (``lakefuse.fuse.runner``; the last such line: mounts at one mountpoint name
    share a log)."""
    line = mount.log_path.read_text().split("opens answered in the binding: ")[-1].splitlines()[0]
    opens, misses = line.split("; lookups of missing names: ")
    return int(opens), int(misses)


def test_opens_and_missing_names_of_commits_and_tags_are_answered_by_the_binding(lake_home, tmp_path):
    """Read-only opens of commit and tag files, and lookups of names their listed directories do
    not have, are answered by lakefuse's pyfuse3 itself (``lakefuse.fs.native_answers``);
    handles open at once share one backing file (the kernel refuses any other), a write is
    still refused, and an object file that is not the object's size (an append in place cut
    short) is left to the mount, which reads the object's bytes."""
    import pyfuse3

    if not hasattr(pyfuse3, "native_names_add"):
        pytest.skip("pyfuse3 without native answers (scripts/build_pyfuse3.py did not run)")
    catalog = lake_home.catalog
    catalog.create_branch("sales", "native-opens", "main")
    contents = {f"n/{i:02d}.csv": f"id\n{i}\nnative-opens\n".encode() for i in range(20)}
    for name, data in contents.items():
        catalog.upload_bytes("sales", "native-opens", name, data)
    catalog.upload_bytes("sales", "native-opens", "n/sub/deeper.csv", b"deeper")
    commit = catalog.commit("sales", "native-opens", "files to open", "tests").id
    catalog.create_tag("sales", "native-opens-tag", commit)
    namespace = lake_home.app.default_namespace("sales")[len("local://"):]
    with mounted(lake_home, tmp_path / "mnt", "lakefs://sales") as mount:
        opens = misses = 0
        for ref in (commit, "native-opens-tag"):
            listed = sorted(os.listdir(mount / f"{ref}/n"))
            assert listed == sorted([name[2:] for name in contents] + ["sub"])
            for name, data in contents.items():
                crc = mount / f"{ref}/n/.{name[2:]}.crc"
                assert not crc.exists()  # what Hadoop's checksum filesystem asks first
                misses += 1
                assert (mount / f"{ref}/{name}").read_bytes() == data
                opens += 1
            assert (mount / f"{ref}/n/sub/deeper.csv").read_bytes() == b"deeper"  # a name it has
            opens += 1
        path = mount / f"{commit}/n/00.csv"
        with open(path, "rb") as first, open(path, "rb") as second:  # at once: one backing file
            assert first.read() == second.read() == contents["n/00.csv"]
            os.fsync(first.fileno())  # nothing to write back: answered too
            opens += 2
        with pytest.raises(OSError) as refused:
            open(path, "r+b")
        assert refused.value.errno == errno.EROFS
        tampered = mount / f"{commit}/n/19.csv"  # no handle of it open: its next open registers it anew
        object_path = os.path.join(namespace, os.getxattr(tampered, "lakefuse.physical_address").decode())
        with open(object_path, "ab") as f:
            f.write(b"not the object's")
        assert tampered.read_bytes() == contents["n/19.csv"]  # the handler opened it, the mount served it
    assert answered_in_the_binding(mount) == (opens, misses)


def test_without_passthrough_the_binding_still_answers_missing_names(lake_home, tmp_path):
    import pyfuse3

    if not hasattr(pyfuse3, "native_names_add"):
        pytest.skip("pyfuse3 without native answers (scripts/build_pyfuse3.py did not run)")
    commit = lake_home.catalog.get_branch("sales", "main").commit_id
    with mounted(lake_home, tmp_path / "mnt", f"lakefs://sales/{commit}", ("--no-passthrough",)) as mount:
        assert sorted(os.listdir(mount / "data")) == ["a.csv", "sub"]
        assert not (mount / "data/.a.csv.crc").exists()
        assert not (mount / "data/b.csv").exists()
        assert (mount / "data/a.csv").read_bytes() == b"id,v\n1,2\n"  # opened by the mount
        log = mount.log_path.read_text()
        assert "answered in the binding: missing names (no passthrough" in log
    assert answered_in_the_binding(mount) == (0, 2)


def test_opening_a_file_the_kernel_reads_starts_reading_its_object_in(lake, lake_home):
    """The open registers the object's file and has the kernel start reading its first bytes
    in, so the reader's first read(2) does not start the disk read itself."""
    from lakefuse.fs.readers import MappedFile

    catalog = lake_home.catalog
    catalog.create_branch("sales", "read-ahead", "main")
    catalog.upload_bytes("sales", "read-ahead", "ahead/obj.bin", os.urandom(64 * 1024))
    commit = catalog.commit("sales", "read-ahead", "an object to read in", "tests").id
    path = lake / f"sales/{commit}/ahead/obj.bin"
    namespace = lake_home.app.default_namespace("sales")[len("local://"):]
    fd = os.open(os.path.join(namespace, os.getxattr(path, "lakefuse.physical_address").decode()), os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        object_pages = MappedFile(fd, 64 * 1024)
        assert not object_pages.resident(0, 4096)
        reader = os.open(path, os.O_RDONLY)  # opened, nothing read
        try:
            deadline = time.monotonic() + 5
            while not object_pages.resident(0, 64 * 1024) and time.monotonic() < deadline:
                time.sleep(0.01)
            assert object_pages.resident(0, 64 * 1024)
            assert os.read(reader, 100_000) == os.pread(fd, 100_000, 0)
        finally:
            os.close(reader)
            object_pages.close()
    finally:
        os.close(fd)


def reader_sees_appends_made_after_it_opened(path: Path) -> None:
    with open(path, "rb") as reader, open(path, "ab") as appender:
        assert reader.read() == b"id,v\n1,2\n"
        appender.write(b"3,4\n")
        appender.flush()
        assert reader.read() == b"3,4\n"


def test_by_default_a_branch_reader_sees_appends_made_after_it_opened(branch):
    """What ``tail -f`` needs: a branch file's reader reads through the mount (or the binding,
    which hands its handles to the mount before the appender's open), not the kernel."""
    reader_sees_appends_made_after_it_opened(branch / "data/a.csv")


def test_the_kernel_reads_without_the_mount_doing_the_work(lake_home, tmp_path):
    """The same 256 MiB read costs the mount process next to no CPU time with passthrough, and
    the copying of every byte without it."""
    source = tmp_path / "big.bin"
    with open(source, "wb") as f:
        for _ in range(256):
            f.write(os.urandom(MiB))
    lake_home.catalog.upload_file("sales", "main", "big/cpu.bin", str(source))
    commit = lake_home.catalog.commit("sales", "main", "big", "tests").id
    cpu = {}
    for label, args in (("passthrough", ()), ("served", ("--no-passthrough",))):
        with mounted(lake_home, tmp_path / f"mnt-{label}", f"lakefs://sales/{commit}", args) as mount:
            assert (mount / "big/cpu.bin").stat().st_size == 256 * MiB
            time.sleep(0.1)
            before = mount_cpu_seconds(mount)
            with open(mount / "big/cpu.bin", "rb") as f:
                while f.read(MiB):
                    pass
            cpu[label] = mount_cpu_seconds(mount) - before
            expected = "on, commits and tags" if label == "passthrough" else "off"
            assert f"passthrough reads of local objects: {expected}" in mount.log_path.read_text()
    assert cpu["served"] >= 0.02, cpu
    assert cpu["passthrough"] < cpu["served"] / 2, cpu


@pytest.fixture
def kernel_branch(lake_home, tmp_path):
    """``(mount, branch directory)``: a fresh branch in a mount with --passthrough-branches."""
    name = f"pt{os.getpid()}-{time.monotonic_ns()}"
    lake_home.catalog.create_branch("sales", name, "main")
    # files of 1 MiB and more: the kernel reads them (smaller ones the binding opens, where it can)
    lake_home.catalog.upload_bytes("sales", name, "data/big.csv", BIG_CSV)
    lake_home.catalog.upload_bytes("sales", name, "big-readme.md", BIG_CSV)
    with mounted(lake_home, tmp_path / name, "lakefs://sales", ("--passthrough-branches",)) as mount:
        yield mount, mount / name


BIG_CSV = b"id,v\n" + b"1,2\n" * 300_000


def test_a_writer_beside_a_kernel_reader(kernel_branch):
    """The file's first open in a fresh mount is alone, so the kernel serves it.  (Whether a
    later open is alone depends on when the kernel's RELEASE of earlier handles arrives, so
    after that either answer is right: the bytes the handle opened, or the newer ones.)"""
    mount, branch = kernel_branch
    path = branch / "data/big.csv"
    with open(path, "rb") as reader:
        assert reader.read(3) == b"id,"
        with open(path, "r+b") as writer:  # named the same backing file, served by the mount
            writer.seek(0, os.SEEK_END)
            writer.write(b"3,4\n")
            writer.seek(0)
            assert writer.read() == BIG_CSV + b"3,4\n"
        assert reader.read() == BIG_CSV[3:]  # the bytes it opened
    assert path.read_bytes() == BIG_CSV + b"3,4\n"
    with open(path, "rb") as again, open(path, "ab") as appender:
        appender.write(b"5,6\n")
        appender.flush()
        assert again.read() in (BIG_CSV + b"3,4\n", BIG_CSV + b"3,4\n5,6\n")
    assert path.read_bytes() == BIG_CSV + b"3,4\n5,6\n"
    log = mount.log_path.read_text()
    assert "passthrough reads of local objects: on, branches too" in log and "the kernel reads" in log


def test_with_kernel_reads_a_small_file_s_reader_still_sees_a_writers_bytes(kernel_branch):
    """A small unmodified branch file is opened by the binding, also with
    ``--passthrough-branches``, so its reader reads through the mount after a writer came."""
    _, branch = kernel_branch
    reader_sees_appends_made_after_it_opened(branch / "data/a.csv")


def test_truncate_and_rename_over_a_file_being_read(kernel_branch):
    _, branch = kernel_branch
    (branch / "u.txt").write_bytes(b"new")
    path = branch / "big-readme.md"
    with open(path, "rb") as reader:  # its first open: the kernel serves it
        os.truncate(path, 4)
        assert path.read_bytes() == b"id,v"
        os.rename(branch / "u.txt", path)
        assert reader.read() == BIG_CSV
    assert path.read_bytes() == b"new"


def test_concurrent_opens_reads_and_writes_of_one_file_never_fail(kernel_branch):
    """Readers the kernel serves, readers and writers the mount serves, opening and closing one
    file at once: the kernel refuses an open that breaks its rules with EIO, so any slip in the
    bookkeeping of backing files would show here."""
    import concurrent.futures

    _, branch = kernel_branch
    path = branch / "shared.bin"
    path.write_bytes(b"x" * 100_000)

    def read(_):
        for _ in range(40):
            data = path.read_bytes()  # mid-rewrite a prefix, as on a local disk; never other bytes
            assert set(data) <= {ord("x"), ord("y")}

    def rewrite(_):
        for i in range(20):
            path.write_bytes((b"y" if i % 2 else b"x") * 100_000)

    with concurrent.futures.ThreadPoolExecutor(6) as pool:
        list(pool.map(lambda job: job(None), [read, read, read, read, rewrite]))
    assert path.read_bytes() == b"y" * 100_000


def test_missing_names_of_a_directory_made_on_a_branch_are_answered_by_the_binding(lake_home, tmp_path):
    """A directory mkdir made on a branch: lookups of names it does not have are answered in
    C (each create's LOOKUP first), names made in it still reach the mount once the kernel
    forgot them, and a file another writer adds is seen after the change-feed poll."""
    require_binding("native_names_insert", "names added to a registered directory")
    lake_home.catalog.create_branch("sales", "native-made", "main")
    with mounted(lake_home, tmp_path / "mnt", "lakefs://sales") as mount:
        new = mount / "native-made/new"
        new.mkdir()
        for i in range(10):
            assert not (new / f".f{i}.csv.crc").exists()
            (new / f"f{i}.csv").write_bytes(f"{i}\n".encode())  # its LOOKUP, then the CREATE
        (new / "sub").mkdir()
        os.rename(new / "f9.csv", new / "renamed.csv")
        expected = sorted([f"f{i}.csv" for i in range(9)] + ["renamed.csv", "sub"])
        Path("/proc/sys/vm/drop_caches").write_text("2")  # the kernel forgets its names
        assert sorted(os.listdir(new)) == expected
        for i in range(9):
            assert (new / f"f{i}.csv").read_bytes() == f"{i}\n".encode()
        assert (new / "renamed.csv").read_bytes() == b"9\n" and (new / "sub").is_dir()
        assert not (new / "f9.csv").exists()
        lake_home.catalog.upload_bytes("sales", "native-made", "new/elsewhere.csv", b"another writer\n")
        deadline = time.monotonic() + 10
        while not (new / "elsewhere.csv").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert (new / "elsewhere.csv").read_bytes() == b"another writer\n"
    assert answered_in_the_binding(mount)[1] >= 20  # 10 probes and 10 creates' lookups at least


def test_without_a_change_feed_a_made_directory_is_answered_by_the_binding_for_the_branch_timeout(
        lake_home, tmp_path):
    """--change-poll 0: the branch's names are trusted 1 s; so is a made directory's
    registration, after which a file another writer added is seen."""
    require_binding("native_names_insert", "names added to a registered directory")
    lake_home.catalog.create_branch("sales", "native-made-unwatched", "main")
    with mounted(lake_home, tmp_path / "mnt", "lakefs://sales/native-made-unwatched", ("--change-poll", "0")) as mount:
        (mount / "new").mkdir()
        assert not (mount / "new/probe").exists()
        lake_home.catalog.upload_bytes("sales", "native-made-unwatched", "new/elsewhere.csv", b"another writer\n")
        time.sleep(1.2)
        assert (mount / "new/elsewhere.csv").read_bytes() == b"another writer\n"
    assert answered_in_the_binding(mount)[1] >= 1


def test_missing_names_of_a_listed_branch_directory_are_answered_by_the_binding(lake_home, tmp_path):
    """A branch directory listed whole: lookups of names it does not have are answered in C
    (Hadoop's ``.<name>.crc`` probe beside each file read) with a negative entry the kernel
    keeps; a name another writer adds after it was probed is seen after the change-feed poll
    (the kernel told to drop that entry), and so is a name made through the mount."""
    require_binding("native_names_record_most", "negative entries the binding records")
    catalog = lake_home.catalog
    catalog.create_branch("sales", "native-listed", "main")
    for i in range(20):
        catalog.upload_bytes("sales", "native-listed", f"listed/part-{i}.csv", f"{i}\n".encode())
    with mounted(lake_home, tmp_path / "mnt", "lakefs://sales") as mount:
        listed = mount / "native-listed/listed"
        names = sorted(os.listdir(listed))
        assert names == sorted(f"part-{i}.csv" for i in range(20))
        for i, name in enumerate(names):
            assert not (listed / f".{name}.crc").exists()
            assert (listed / name).read_bytes() == f"{name[5:-4]}\n".encode()
        assert not (listed / ".part-0.csv.crc").exists()  # again: the kernel's negative entry
        catalog.upload_bytes("sales", "native-listed", "listed/.part-0.csv.crc", b"another writer\n")
        deadline = time.monotonic() + 10
        while not (listed / ".part-0.csv.crc").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert (listed / ".part-0.csv.crc").read_bytes() == b"another writer\n"
        (listed / ".part-1.csv.crc").write_bytes(b"made here\n")  # probed before, made through the mount
        assert sorted(os.listdir(listed)) == sorted(names + [".part-0.csv.crc", ".part-1.csv.crc"])
        Path("/proc/sys/vm/drop_caches").write_text("2")  # the kernel forgets its names
        assert (listed / ".part-1.csv.crc").read_bytes() == b"made here\n"
    assert answered_in_the_binding(mount)[1] >= 20


def test_past_the_bound_of_its_records_the_binding_answers_without_a_kept_entry(lake_home, tmp_path):
    """The binding records the negative entries it gives in branch directories up to
    ``RECORDED_MOST`` names in all (so that a change can take them back); past them it answers
    with none for the kernel to keep, so a name probed again is asked again."""
    from lakefuse.fs.native_answers import RECORDED_MOST

    require_binding("native_names_record_most", "a bound on the binding's records")
    lake_home.catalog.create_branch("sales", "native-bound", "main")
    with mounted(lake_home, tmp_path / "mnt", "lakefs://sales/native-bound") as mount:
        data = mount / "data"
        os.listdir(data)
        for i in range(RECORDED_MOST + 10):
            assert not os.path.lexists(f"{data}/.probe-{i}")
        for i in range(RECORDED_MOST, RECORDED_MOST + 10):  # answered again: nothing kept
            assert not os.path.lexists(f"{data}/.probe-{i}")
    assert answered_in_the_binding(mount)[1] >= RECORDED_MOST + 20


def branch_the_binding_opens(lake_home, prefix: str, contents: dict[str, bytes]) -> str:
    """A new branch of ``sales`` holding ``contents`` (path -> bytes); skips the test unless
    this pyfuse3 opens branch files itself."""
    import pyfuse3

    if not hasattr(pyfuse3, "native_branch_open_add"):
        pytest.skip("pyfuse3 without native opens of branch files (scripts/build_pyfuse3.py did not run)")
    catalog = lake_home.catalog
    branch = f"{prefix}-{os.getpid()}"
    catalog.create_branch("sales", branch, "main")
    for name, data in contents.items():
        catalog.upload_bytes("sales", branch, name, data)
    return branch


def test_opens_of_unmodified_branch_files_are_answered_by_the_binding(lake_home, tmp_path):
    """Read-only opens of small unmodified branch files are answered by lakefuse's pyfuse3
    without passthrough (it answers their reads and releases too); a writer's open reaches the
    mount, which takes the binding's handles over first: readers opened before read the
    writer's bytes (``tail -f``), an fsync of theirs reaches the mount, and every byte read is
    the file's."""
    contents = {f"n/{i:02d}.csv": f"id\n{i}\nnative-branch\n".encode() for i in range(30)}
    branch = branch_the_binding_opens(lake_home, "native-branch", contents)
    with mounted(lake_home, tmp_path / "mnt", "lakefs://sales") as mount:
        assert sorted(os.listdir(mount / f"{branch}/n")) == sorted(name[2:] for name in contents)
        for name, data in contents.items():
            assert (mount / f"{branch}/{name}").read_bytes() == data
        path = mount / f"{branch}/n/00.csv"
        with open(path, "rb") as first, open(path, "rb") as second:
            assert first.read() == second.read() == contents["n/00.csv"]
            with open(path, "ab") as appender:  # the mount's: it takes the readers over
                appender.write(b"appended\n")
                appender.flush()
                assert first.read() == b"appended\n"
                os.fsync(second.fileno())
                assert second.read() == b"appended\n"
        assert path.read_bytes() == contents["n/00.csv"] + b"appended\n"
        other = mount / f"{branch}/n/01.csv"
        with open(other, "rb", buffering=0) as reader:
            assert reader.read(3) == b"id\n"
            other.write_bytes(b"rewritten\n")  # truncated and written beside the reader
            assert os.pread(reader.fileno(), 100, 0) == b"rewritten\n"
        assert other.read_bytes() == b"rewritten\n"
        removed = mount / f"{branch}/n/02.csv"
        with open(removed, "rb", buffering=0) as reader:
            os.unlink(removed)
            os.posix_fadvise(reader.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)  # its next READ reaches the mount
            assert os.pread(reader.fileno(), 100, 0) == contents["n/02.csv"]
            os.fsync(reader.fileno())
    log = mount.log_path.read_text()
    assert "read-only opens of small unmodified branch files answered in the binding: on" in log
    opens, _ = answered_in_the_binding(mount)
    assert opens >= 30, opens  # at least each file's first open (later ones: the mount's, after a writer)


def test_files_past_a_listing_s_first_are_opened_by_the_binding_once_one_was_opened_by_the_mount(
        lake_home, tmp_path):
    """A listing registers the files among its first 64 entries only; the first open of a later
    one reaches the mount, which registers the directory's other listed files, so the binding
    opens the rest (the Spark job's pattern: list, then read every file)."""
    contents = {f"many/{i:03d}.csv": f"id\n{i}\n".encode() for i in range(150)}
    branch = branch_the_binding_opens(lake_home, "listed-branch", contents)
    names = sorted(contents)
    with mounted(lake_home, tmp_path / "mnt", "lakefs://sales") as mount:
        assert len(os.listdir(mount / f"{branch}/many")) == 150
        for name in names[100:] + names[:100]:  # past the listing's first files, then the others
            assert (mount / f"{branch}/{name}").read_bytes() == contents[name]
    opens, _ = answered_in_the_binding(mount)
    assert opens >= 145, opens  # all but the first opened past the listing's first (and a few)


def test_readers_the_binding_opened_beside_writers_of_the_same_files_never_fail(lake_home, tmp_path):
    """Readers of unmodified branch files (opened by the binding, until a writer's open hands
    their handles to the mount) and writers rewriting the same files, at once: every read is
    some version of the file, whole or a prefix mid-rewrite, and every open succeeds (the
    kernel refuses a backing file for an inode another handle caches: a slip in counting the
    binding's handles would fail the writers' opens)."""
    import concurrent.futures

    names = [f"r/{i:02d}.bin" for i in range(20)]
    branch = branch_the_binding_opens(lake_home, "native-race", {name: b"x" * 5000 for name in names})
    with mounted(lake_home, tmp_path / "mnt", "lakefs://sales") as mount:
        paths = [mount / branch / name for name in names]
        os.listdir(mount / branch / "r")  # new inodes: registered with the binding

        def read(_):
            for _ in range(5):
                for path in paths:
                    data = path.read_bytes()
                    assert set(data) <= {ord("x"), ord("y")}, path

        def rewrite(_):
            for path in paths:
                path.write_bytes(b"y" * 5000)

        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            list(pool.map(lambda job: job(None), [read, read, read, rewrite]))
        assert all(path.read_bytes() == b"y" * 5000 for path in paths)
    opens, _ = answered_in_the_binding(mount)
    assert opens > 0
