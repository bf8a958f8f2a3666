"""The mount(8) helper (mount/mount.fuse.lakefuse) and the systemd unit (systemd/)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from lakemount import is_mounted, require_fuse

REPO = Path(__file__).resolve().parents[2]
HELPER = REPO / "mount" / "mount.fuse.lakefuse"
UNIT = REPO / "systemd" / "lakefuse@.service"

FAKE = """#!{python}
import json, os, sys
with open({record!r}, "w") as f:
    json.dump({{"argv": sys.argv[1:], "home": os.environ.get("LAKEFUSE_HOME"),
               "config": os.environ.get("LAKEFUSE_CONFIG")}}, f)
"""


@pytest.fixture
def fake_lakefuse(tmp_path, monkeypatch):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    record = tmp_path / "argv.json"
    exe = bindir / "lakefuse"
    exe.write_text(FAKE.format(python=sys.executable, record=str(record)))
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("LAKEFUSE_BIN", raising=False)

    def call(*args: str) -> tuple[subprocess.CompletedProcess, dict | None]:
        if record.exists():
            record.unlink()
        result = subprocess.run(["sh", str(HELPER), *args], capture_output=True, text=True, timeout=30)
        return result, json.loads(record.read_text()) if record.exists() else None

    return call


def test_options_are_translated_to_mount_flags(fake_lakefuse):
    result, seen = fake_lakefuse("sales", "/mnt/lake", "-o",
                                 "ro,allow_other,default_permissions,cache_dir=/var/cache/lf,cache_disk_bytes=5GiB,cache_ram_bytes=1G,cache_scan_bytes=256M,"
                                 "read_ahead_kb=2048,log_level=debug,log_file=/var/log/lf.log,home=/srv/lf,"
                                 "config=/etc/lf.yaml,change_poll=2,branch_timeout=600,spin_us=0,nopassthrough,passthrough_branches,"
                                 "metadata_entries=50000,names_only_for=find:fd")
    assert result.returncode == 0, result.stderr
    assert seen["argv"] == ["mount", "/mnt/lake", "lakefs://sales", "--read-only", "--allow-other", "--default-permissions",
                            "--cache-dir", "/var/cache/lf", "--cache-disk-bytes", "5GiB", "--cache-ram-bytes", "1G", "--cache-scan-bytes", "256M",
                            "--read-ahead-kb", "2048", "--log-level", "DEBUG", "--log-file", "/var/log/lf.log",
                            "--change-poll", "2", "--branch-timeout", "600", "--spin-us", "0", "--no-passthrough", "--passthrough-branches",
                            "--metadata-entries", "50000", "--names-only-for", "find,fd"]
    assert seen["home"] == "/srv/lf" and seen["config"] == "/etc/lf.yaml"


def test_sources_and_fstab_options_that_are_ignored(fake_lakefuse):
    result, seen = fake_lakefuse("lakefs://sales/main", "/m", "-o", "rw,_netdev,noauto,nofail,user,defaults,"
                                 "x-systemd.automount,noatime,nosuid,nodev,comment=x", "-n")
    assert result.returncode == 0, result.stderr
    assert seen["argv"] == ["mount", "/m", "lakefs://sales/main"]
    _, seen = fake_lakefuse("sales/v1", "/m")
    assert seen["argv"] == ["mount", "/m", "lakefs://sales/v1"]
    _, seen = fake_lakefuse("lakefuse", "/m", "-oro")
    assert seen["argv"] == ["mount", "/m", "--read-only"]


def test_unknown_options_fail_unless_sloppy_and_fake_runs_nothing(fake_lakefuse):
    result, seen = fake_lakefuse("sales", "/m", "-o", "frobnicate")
    assert result.returncode == 1 and "unknown option 'frobnicate'" in result.stderr and seen is None
    result, seen = fake_lakefuse("sales", "/m", "-s", "-o", "frobnicate,ro")
    assert result.returncode == 0 and seen["argv"] == ["mount", "/m", "lakefs://sales", "--read-only"]
    result, seen = fake_lakefuse("sales", "/m", "-f", "-o", "ro")
    assert result.returncode == 0 and seen is None
    result, _ = fake_lakefuse("sales")
    assert result.returncode == 1 and "usage" in result.stderr


def test_helper_mounts_for_real(lake_home, tmp_path):
    require_fuse()
    wrapper = tmp_path / "lakefuse"
    wrapper.write_text(f"#!/bin/sh\nexec {sys.executable} -m lakefuse.fuse \"$@\"\n")
    wrapper.chmod(0o755)
    mountpoint = tmp_path / "m"
    mountpoint.mkdir()
    env = dict(lake_home.env, LAKEFUSE_BIN=str(wrapper))
    env.pop("LAKEFUSE_HOME")
    options = f"ro,nofail,_netdev,home={lake_home.path},cache_dir={tmp_path / 'cache'},log_file={tmp_path / 'log'}"
    result = subprocess.run(["sh", str(HELPER), "sales/v1", str(mountpoint), "-o", options],
                            env=env, capture_output=True, text=True, timeout=120)
    try:
        assert result.returncode == 0, result.stderr
        assert sorted(os.listdir(mountpoint)) == ["data", "readme.md"]
        with open("/proc/self/mountinfo") as f:
            line = next(line for line in f if line.split()[4] == str(mountpoint))
        assert " fuse.lakefuse lakefuse " in line and " ro," in line
        assert (tmp_path / "cache").is_dir()
    finally:
        subprocess.run([str(wrapper), "umount", str(mountpoint)], env=env, capture_output=True, timeout=60)
    assert not is_mounted(str(mountpoint))


def test_systemd_unit_verifies(tmp_path):
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed (skipped even under CI: systemd is optional)")
    text = UNIT.read_text()
    assert "Type=notify" in text and "ExecStop=" in text and "EnvironmentFile=" in text
    # verify checks that executables exist: point ExecStart/ExecStop at a stand-in
    stand_in = tmp_path / "lakefuse"
    stand_in.write_text("#!/bin/sh\nexit 0\n")
    stand_in.chmod(0o755)
    unit = tmp_path / "lakefuse@.service"
    unit.write_text(text.replace("/usr/local/bin/lakefuse", str(stand_in)))
    # --man=no: the unit's Documentation= man page need not be installed (a bare machine has no man)
    result = subprocess.run([analyze, "verify", "--man=no", str(tmp_path / "lakefuse@sales.service")],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stderr.strip() == "", result.stderr
