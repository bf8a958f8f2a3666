"""``lakefuse mounts``: the mounts of this lakefuse home, from the status files each mount
writes (``lakefuse.fuse.status``): where, what, which process, its log file, and how many
requests it answered with each errno, per operation.  Reads files only: no FUSE libraries, no
database."""

from __future__ import annotations

import os

from lakefuse.cli.context import CliContext
from lakefuse.cli.output import format_time, print_table, write_json
from lakefuse.errors import NotFound


def register(subparsers, ctx: CliContext) -> None:
    mounts = subparsers.add_parser(
        "mounts", help="show the mounts and their error counters",
        description="Show the mounts of this lakefuse home (mounted ones, and the last state of ended ones): "
                    "mount point, what is mounted, the process and its log file, and the errors answered "
                    "per operation (EIO means a storage or internal failure: see the mount's log).",
        epilog="example: lakefuse mounts /mnt/lakefuse --json")
    mounts.add_argument("mountpoint", nargs="?", help="show only this mount point")
    mounts.add_argument("--json", action="store_true", help="print JSON")
    mounts.set_defaults(func=lambda args: cmd_mounts(ctx, args))


def cmd_mounts(ctx: CliContext, args) -> int:
    from lakefuse.fuse.status import format_counts, read_statuses

    statuses = read_statuses(ctx.config().home)
    if args.mountpoint:
        wanted = os.path.abspath(args.mountpoint)
        statuses = [status for status in statuses if status["mountpoint"] == wanted]
        if not statuses:
            raise NotFound(f"{wanted}: no lakefuse mount has been there")
    if args.json:
        write_json(statuses)
        return 0
    out = ctx.out
    if not statuses:
        out.write("No mounts yet.\n")
        return 0
    print_table(
        ("MOUNTPOINT", "STATE", "URI", "PID", "UPDATED", "ERRORS"),
        [(s["mountpoint"], s["state"], s.get("uri") or "every repository", s.get("pid", "-"),
          format_time(s.get("updated_at")), format_counts(s.get("errors") or {})) for s in statuses],
        out,
    )
    logs = [(s["mountpoint"], s["log_file"]) for s in statuses if s.get("log_file")]
    for mountpoint, log_file in logs:
        out.write(f"log of {mountpoint}: {log_file}\n")
    return 0
