"""``python -m lakefuse.fuse mount|umount ...``: the mount commands without the full CLI."""

from __future__ import annotations

import argparse
import sys

from lakefuse.errors import LakefuseError
from lakefuse.fuse.mountcmd import add_mount_arguments, add_umount_arguments, mount_main, umount_main


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lakefuse.fuse")
    commands = parser.add_subparsers(dest="command", required=True)
    add_mount_arguments(commands.add_parser("mount", help="mount repositories as a filesystem"))
    add_umount_arguments(commands.add_parser("umount", help="unmount"))
    args = parser.parse_args(argv)
    try:
        return (mount_main if args.command == "mount" else umount_main)(args)
    except LakefuseError as exc:
        print(f"lakefuse: error: {exc}", file=sys.stderr)
        return exc.exit_code


if __name__ == "__main__":
    sys.exit(main())
