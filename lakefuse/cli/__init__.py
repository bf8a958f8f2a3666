"""``lakefuse``: the lakectl-like command line, a thin layer over ``lakefuse.catalog``.

Modules:

- ``main``      the parser, the error boundary (``main(argv) -> exit code``) and the lazy
                registration of delegated commands (``mount``/``umount``, ``actions``,
                ``import``/``export``/``gc``), whose modules are imported only when chosen;
- ``context``   ``CliContext`` (the ``App`` opened on first use and closed at the end),
                parsing of ``lakefs://`` arguments, ``--meta k=v``, the default committer;
- ``output``    tables, ``--json``, sizes and times, commits and entries as dicts;
- ``repo_commands``, ``ref_commands`` (branch, tag), ``fs_commands``, ``version_commands``
  (commit, log, show, diff, merge), ``cache_commands``, ``demo``: one module per group;
- ``mount_control`` ``commit PATH_IN_MOUNT``: the mount's ``.lakefuse/commit`` protocol.

Start-up stays light: importing this package and building the parser imports neither
SQLAlchemy nor boto3, pyfuse3 or pyspark; commands import what they need when they run.
"""
