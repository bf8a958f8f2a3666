"""Polling between requests (lakefuse.fuse.spin) through a real kernel mount: the mount asks
the binding for ``--spin-us`` (50 µs by default), says so in its log, and an idle mount spends
no CPU time polling.

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
