"""Who checks permissions, through a real mount: a mount only root reaches runs without the
kernel's ``default_permissions`` (one GETATTR fewer per create or unlink) and answers access(2)
itself with the same rule root gets from the kernel; ``--allow-other`` and
``--default-permissions`` mounts keep the kernel's checks, which hold a root process that
dropped its capabilities to the permission bits."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest
from lakemount import mounted
from posix_helpers import require_root


def mount_options(mountpoint: Path) -> set[str]:
    """The superblock options of the FUSE mount at ``mountpoint`` (/proc/self/mounts)."""
    for line in Path("/proc/self/mounts").read_text().splitlines():
        fields = line.split()
        if fields[1] == str(mountpoint):
            return set(fields[3].split(","))
    raise AssertionError(f"{mountpoint} is not mounted")


def without_dac_capabilities(code: str) -> subprocess.CompletedProcess:
    """``code`` run by root without CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH (as a hardened
    service would run): the permission bits hold for it like for anyone."""
    caps = "-dac_override,-dac_read_search"
    return subprocess.run(["setpriv", f"--inh-caps={caps}", f"--bounding-set={caps}", sys.executable, "-c", code],
                          capture_output=True, text=True, timeout=60)


def test_a_mount_only_root_reaches_answers_access_with_roots_rule(lake_home, tmp_path):
    require_root()
    lake_home.catalog.create_branch("sales", "perm-private", "main")
    with mounted(lake_home, tmp_path / "m") as lake:
        assert "default_permissions" not in mount_options(lake.mountpoint)
        branch = lake / "sales/perm-private"
        script = branch / "job.sh"
        script.write_text("#!/bin/sh\necho ran\n")
        script.chmod(0o644)
        assert not os.access(script, os.X_OK)  # root too needs an execute bit
        with pytest.raises(PermissionError):
            subprocess.run([str(script)], timeout=30)
        script.chmod(0o744)
        assert os.access(script, os.X_OK)
        assert subprocess.run([str(script)], capture_output=True, text=True, timeout=30).stdout == "ran\n"
        locked = branch / "locked"
        locked.mkdir(mode=0o000)
        locked.chmod(0o000)
        assert os.access(locked, os.R_OK | os.W_OK | os.X_OK)  # root searches any directory
        os.chdir(locked)
        os.chdir(tmp_path)
        (branch / "secret").write_text("s")
        (branch / "secret").chmod(0o000)
        assert os.access(branch / "secret", os.R_OK | os.W_OK) and not os.access(branch / "secret", os.X_OK)
        assert (branch / "secret").read_text() == "s"
        assert not os.access(branch / "missing", os.F_OK)
        # writes, creates and removals as root behave as they did with the kernel's checks
        (locked / "inside").write_text("i")
        os.unlink(locked / "inside")
        os.rmdir(locked)


@pytest.mark.parametrize("flag", ["--default-permissions", "--allow-other"])
def test_the_kernel_checks_permissions_when_asked_or_shared(lake_home, tmp_path, flag):
    require_root()
    branch_name = "perm-" + flag.strip("-")
    lake_home.catalog.create_branch("sales", branch_name, "main")
    with mounted(lake_home, tmp_path / "m", args=(flag,)) as lake:
        assert "default_permissions" in mount_options(lake.mountpoint)
        secret = lake / "sales" / branch_name / "secret"
        secret.write_text("s")
        secret.chmod(0o000)
        assert secret.read_text() == "s"  # root with its capabilities
        denied = without_dac_capabilities(
            f"import errno\ntry:\n    open({str(secret)!r}).read()\nexcept OSError as e:\n"
            f"    print(errno.errorcode[e.errno])")
        assert denied.stdout.strip() == errno.errorcode[errno.EACCES], denied.stderr
