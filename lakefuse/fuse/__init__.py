"""The FUSE adapter: the only package that imports pyfuse3 and trio (lazily in ``mountcmd``,
so the CLI can register the commands without them).

``mountcmd`` is the ``lakefuse mount`` / ``lakefuse umount`` commands (arguments, daemonizing,
readiness); ``operations.LakeOperations`` translates kernel requests onto
``lakefuse.fs.LakeFilesystem``; ``runner.serve`` mounts, serves and unmounts; ``passthrough``
registers backing files with the kernel (FUSE passthrough).  ``python -m lakefuse.fuse
mount|umount ...`` runs the mount commands without the full CLI.
"""
