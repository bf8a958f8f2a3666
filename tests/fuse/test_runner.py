"""The kernel options of a mount (``lakefuse.fuse.runner.kernel_options``), without a kernel."""

from __future__ import annotations

from lakefuse.fuse.runner import MountOptions, kernel_options


def test_default_permissions_unless_the_mount_is_roots_alone():
    assert "default_permissions" not in kernel_options(MountOptions(), euid=0)
    assert "default_permissions" in kernel_options(MountOptions(allow_other=True), euid=0)
    assert "default_permissions" in kernel_options(MountOptions(default_permissions=True), euid=0)
    assert "default_permissions" in kernel_options(MountOptions(), euid=1000)  # its own mode bits hold it


def test_names_and_read_only():
    opts = kernel_options(MountOptions(read_only=True, fsname="sales"), euid=0)
    assert {"fsname=sales", "subtype=lakefuse", "ro"} <= opts and "allow_other" not in opts
    assert "allow_other" in kernel_options(MountOptions(allow_other=True), euid=0)
