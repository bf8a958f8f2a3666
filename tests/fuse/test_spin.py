"""How the session loop waits for requests (lakefuse.fuse.spin) through a real kernel mount:
the mount asks the binding for ``--spin-us`` (50 µs by default), says so in its log, and an idle
mount spends no CPU time polling; while the event loop sleeps the idle reader answers what the
binding answers in C and hands every other request to the event loop (``--no-idle-reader``:
it does not run).

Needs pyfuse3 as built by scripts/build_pyfuse3.py; with the stock pyfuse3 these tests skip,
except under CI=true where that is a failure."""

from __future__ import annotations

import os
import time

import pytest

from lakemount import mounted, require_binding


@pytest.fixture(scope="module", autouse=True)
def spinning_binding():
    require_binding("request_spin_ns", "polling between requests")


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.mark.parametrize("args, expected", [((), "50 µs"), (("--spin-us", "200"), "200 µs"),
                                            (("--spin-us", "0"), "off")])
def test_the_mount_polls_for_the_window_it_was_given(lake_home, tmp_path, args, expected):
    with mounted(lake_home, tmp_path / "mnt", "lakefs://sales/main", args) as mount:
        assert (mount / "data/a.csv").read_bytes() == b"id,v\n1,2\n"
        assert f"polling for the next request before sleeping: {expected}" in mount.log_path.read_text()


def test_an_idle_mount_spends_no_cpu_polling(lake_home, tmp_path):
    with mounted(lake_home, tmp_path / "mnt", "lakefs://sales/main", ("--spin-us", "1000")) as mount:
        for _ in range(500):
            with pytest.raises(FileNotFoundError):
                os.stat(mount / "data/missing.csv")
        time.sleep(0.5)
        before = cpu_seconds(mount.proc.pid)
        time.sleep(2)
        assert cpu_seconds(mount.proc.pid) - before < 0.1  # the change poll's 4 passes, no polling


def idle_reader_counts(mount) -> tuple[int, int]:
    """(answered in the binding, handed to the event loop) by the idle reader, as the mount
    logs them when it ends (``lakefuse.fuse.runner``; the last such line)."""
    line = mount.log_path.read_text().split("requests the idle reader read: ")[-1].splitlines()[0]
    answered, handed = line.split(" answered in the binding, ")
    return int(answered), int(handed.split()[0])


def test_the_idle_reader_answers_reads_while_the_loop_sleeps_and_hands_other_requests_over(lake_home, tmp_path):
    """While the event loop sleeps after a run of requests the binding answered in C, the idle
    reader reads the next ones itself (``lakefuse.fuse.spin.start_idle_reader``): it answers
    what the binding answers (missing names, opens and releases of commit files), and a
    request for a handler (a create on a branch) is handed to the event loop and answered."""
    require_binding("start_idle_reader", "the idle reader")
    catalog = lake_home.catalog
    catalog.create_branch("sales", "idle-reader", "main")
    contents = {f"r/{i:03d}.csv": f"id\n{i}\n".encode() for i in range(150)}
    for name, data in contents.items():
        catalog.upload_bytes("sales", "idle-reader", name, data)
    commit = catalog.commit("sales", "idle-reader", "files to read", "tests").id
    with mounted(lake_home, tmp_path / "mnt", "lakefs://sales", ("--spin-us", "0")) as mount:
        assert "(idle reader): on" in mount.log_path.read_text()
        directory = mount / commit / "r"
        assert sorted(os.listdir(directory)) == sorted(name[2:] for name in contents)
        for name, data in contents.items():
            assert not (directory / f".{name[2:]}.crc").exists()  # answered in C
            assert (mount / commit / name).read_bytes() == data  # opened and released in C
            time.sleep(0.002)  # the event loop goes to sleep between files
        for i in range(5):  # after a pause the idle reader reads the lookup and hands it over
            time.sleep(0.05)
            (mount / f"idle-reader/new-{i}.txt").write_bytes(b"written %d" % i)
        assert [(mount / f"idle-reader/new-{i}.txt").read_bytes() for i in range(5)] == \
            [b"written %d" % i for i in range(5)]
    answered, handed = idle_reader_counts(mount)
    assert answered >= len(contents) and handed >= 1, (answered, handed)
    assert catalog.read_object("sales", "idle-reader", "new-4.txt") == b"written 4"  # stored at unmount


def test_without_the_idle_reader_the_event_loop_reads_every_request(lake_home, tmp_path):
    require_binding("start_idle_reader", "the idle reader")
    commit = lake_home.catalog.get_branch("sales", "main").commit_id
    with mounted(lake_home, tmp_path / "mnt", f"lakefs://sales/{commit}", ("--no-idle-reader",)) as mount:
        for _ in range(100):
            assert (mount / "data/a.csv").read_bytes() == b"id,v\n1,2\n"
            time.sleep(0.001)
        assert "(idle reader): off (--no-idle-reader)" in mount.log_path.read_text()
    assert idle_reader_counts(mount) == (0, 0)
