"""Commands other modules register (``mount``/``umount`` of ``lakefuse.fuse.mountcmd``, ``actions``
of ``lakefuse.actions.cli``, ``import``/``export``/``gc`` of ``lakefuse.spark``): which module
holds each, and how to find out whether it is installed without importing it.  ``main`` builds
the parser from ``DELEGATED``; ``demo`` asks it whether the mount command is available.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from typing import Callable

import lakefuse
from lakefuse.cli.context import CliContext

PACKAGE = "lakefuse"


@dataclass(frozen=True)
class Delegated:
    """Commands another module registers; ``modules`` are tried in order for ``function``."""

    names: tuple[str, ...]
    helps: tuple[str, ...]
    modules: tuple[str, ...]
    function: str
    register: Callable[[object, argparse._SubParsersAction, CliContext], None]
    own_logging: bool = False  # the module configures logging itself

    def available_module(self) -> str | None:
        """The first module that exists and defines ``function``.  Found by path and read as
        text, never imported (finding ``lakefuse.actions.cli`` through importlib would import
        the ``lakefuse.actions`` package)."""
        for name in self.modules:
            source = _module_source(name)
            if source is None:
                continue
            try:
                with open(source, encoding="utf-8") as handle:
                    if f"def {self.function}(" in handle.read():
                        return name
            except OSError:
                continue
        return None


def _module_source(name: str) -> str | None:
    """The source file of the lakefuse module ``name`` (``lakefuse.x.y``), or None."""
    parts = name.split(".")
    if parts[0] != PACKAGE:
        return None
    for root in lakefuse.__path__:
        base = os.path.join(root, *parts[1:])
        for candidate in (base + ".py", os.path.join(base, "__init__.py")):
            if os.path.isfile(candidate):
                return candidate
    return None


def _register_mount(module, subparsers, ctx: CliContext) -> None:
    mount = subparsers.add_parser(
        "mount", help="mount repositories as a filesystem",
        description="Mount every repository, one repository (lakefs://REPO) or one ref (lakefs://REPO/REF).",
        epilog="example: lakefuse mount /mnt/lakefuse")
    module.add_mount_arguments(mount)
    mount.set_defaults(func=lambda args: module.mount_main(args))
    umount = subparsers.add_parser("umount", help="unmount a lakefuse mount", description="Unmount a lakefuse mount.")
    module.add_umount_arguments(umount)
    umount.set_defaults(func=lambda args: module.umount_main(args))


def _register_actions(module, subparsers, ctx: CliContext) -> None:
    module.add_actions_commands(subparsers, ctx.app_factory)


def _register_spark(module, subparsers, ctx: CliContext) -> None:
    module.add_spark_commands(subparsers, ctx.app_factory)


DELEGATED = (
    Delegated(("mount", "umount"), ("mount repositories as a filesystem", "unmount a lakefuse mount"),
              ("lakefuse.fuse.mountcmd",), "add_mount_arguments", _register_mount, own_logging=True),
    Delegated(("actions",), ("validate action files and inspect hook runs",),
              ("lakefuse.actions.cli",), "add_actions_commands", _register_actions),
    Delegated(("import", "export", "gc"),
              ("import a local directory or S3 prefix into a branch, without copying (Spark)",
               "copy every object of a commit to a local directory or S3 prefix (Spark)",
               "delete data objects nothing retained references (Spark)"),
              ("lakefuse.spark.cli", "lakefuse.spark"), "add_spark_commands", _register_spark),
)


