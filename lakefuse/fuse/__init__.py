"""The FUSE adapter: the only package that imports pyfuse3 and trio.

``operations.LakeOperations`` translates kernel requests onto ``lakefuse.fs.LakeFilesystem``;
``runner.serve`` mounts, serves and unmounts; ``passthrough`` registers backing files with the
kernel (FUSE passthrough).  ``python -m lakefuse.fuse mount|umount ...`` runs
the mount commands of ``lakefuse.mountcmd`` without the full CLI.
"""
